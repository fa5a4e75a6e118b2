#![doc = include_str!("../README.md")]

mod error;
mod hearing;
mod manager;
mod ping;

pub use error::HeartbeatError;
pub use hearing::MAX_UNHEARD_SHARE;
pub use manager::{
    EvictedAgent, HeartbeatConfig, HeartbeatManager, HeartbeatPorts, LiveAgent, LiveAgentPage, MAX_UPSERT_GROUP,
};
pub use ping::HeartbeatPing;

use std::time::Duration;

/// Silence after which an agent is evicted (FR-10.2; `--heartbeat-eviction-threshold-s`).
pub const EVICTION_THRESHOLD: Duration = Duration::from_secs(90);
/// How often the eviction check runs (FR-10.2; `--heartbeat-check-interval-ms`).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(30_000);
/// The first retry of a failed eviction pass, doubled per failure in a row up to [`MAX_FAILED_PASS_RETRY`] (and
/// never more than the check interval). Soon, because a pass more than an interval and [`MAX_UNHEARD_SHARE`] of the
/// threshold after the last one that judged holds evictions for a threshold: a blip of the store retried at the next
/// tick, 30 s later, already came to that.
pub const FAILED_PASS_RETRY: Duration = Duration::from_secs(1);
/// The longest pause between retries of a failed eviction pass: the loop is degraded (`/readyz` 503) until one gets
/// through, so it is ready again within this of the store's return.
pub const MAX_FAILED_PASS_RETRY: Duration = Duration::from_secs(5);
/// Hard cap of the liveness map (`--max-tracked-agents`): a flood of made-up agent ids cannot exhaust memory.
pub const DEFAULT_MAX_TRACKED_AGENTS: usize = 100_000;
