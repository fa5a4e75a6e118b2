//! The adapters against a real Redis (a throwaway `redis-server` per test, from gateway-testkit), with small
//! timings: the same state machines whose exact timings are tested on paused time in the crate's unit tests.
#![allow(clippy::unwrap_used)]

mod agent_rate;
mod conformance;
mod leadership;
mod members;
mod rate;
mod support;
