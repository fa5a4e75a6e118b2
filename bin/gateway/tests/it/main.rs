//! Integration tests: the real `gateway` binary, started on port 0 against a temporary SQLite file (or, in
//! `postgres`, a throwaway PostgreSQL server).
//! One test binary for the whole crate (one link step); a module per capability.
#![allow(clippy::unwrap_used, clippy::print_stderr)] // A test fails by panicking.

mod receiver;
mod support;

mod admin_token;
mod agent_auth;
mod agent_client;
mod agent_limits;
mod cluster;
mod cluster_ten;
mod cluster_trust;
mod config;
mod console;
mod crash;
mod cron;
mod edge;
mod events;
mod faults;
mod heartbeat;
mod history;
mod idempotency;
mod inbound;
mod lifecycle;
mod mailbox;
mod mcp;
mod messages;
mod metrics;
mod misfire;
mod openapi;
mod operator;
mod postgres;
mod prometheus;
mod rate;
mod readme;
mod retention;
mod robustness;
mod snapshots;
mod sse_parser;
mod tools;
mod validation;
mod webhook_endpoints;
mod webhook_recovery;
mod webhook_signing;
mod webhooks;
