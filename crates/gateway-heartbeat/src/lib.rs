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
/// Hard cap of the liveness map (`--max-tracked-agents`): a flood of made-up agent ids cannot exhaust memory.
pub const DEFAULT_MAX_TRACKED_AGENTS: usize = 100_000;
