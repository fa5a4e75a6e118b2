//! Support shared by the gateway's integration tests and its benchmarks (benches/): percentiles over a sample,
//! sizes read from the environment, rates, [`Receiver`], a recording HTTP server for webhook targets, and
//! [`redis::RedisServer`], a throwaway Redis, [`postgres`], a throwaway PostgreSQL server, and [`json_text`], JSON
//! bodies written every way a client may write them, for property tests.
//!
//! Nothing here is part of the gateway; it is a dev-dependency only.

mod ci;
mod heavy;
pub mod json_text;
pub mod postgres;
mod receiver;
pub mod redis;
mod sample;

pub use ci::{CI_ENV, is_ci, running_in_ci};
pub use heavy::{HEAVY_LOCK_FILE, HeavyTurn, heavy_test_turn};
pub use receiver::{Receiver, Reply, Request, TimedOut};
pub use sample::{Sample, cpu_time_of, env_size, millis, process_cpu_time, rate};
