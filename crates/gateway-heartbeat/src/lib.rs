//! gateway-heartbeat: which agents are alive.
//!
//! Agents ping `POST /gateway/heartbeat`; the [`HeartbeatManager`] keeps an in-memory map of
//! `agent_id → (cluster_id, last_seen)` (FR-10.1) bounded by a hard cap, persists the latest heartbeat of each
//! agent through the `HeartbeatStore` port (FR-10.3/10.4), and every check interval evicts agents silent for
//! longer than the threshold: out of the map, out of the capability map, an `agent_evicted` event on
//! `gateway:agents`, and an info log (FR-10.2). Rows in `gateway_heartbeats` are kept.

mod error;
mod manager;
mod ping;

pub use error::HeartbeatError;
pub use manager::{EvictedAgent, HeartbeatConfig, HeartbeatManager, LiveAgent};
pub use ping::HeartbeatPing;

use std::time::Duration;

/// Silence after which an agent is evicted (FR-10.2; `--heartbeat-eviction-threshold-s`).
pub const EVICTION_THRESHOLD: Duration = Duration::from_secs(90);
/// How often the eviction check runs (FR-10.2; `--heartbeat-check-interval-ms`).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(30_000);
/// Hard cap of the liveness map (`--max-tracked-agents`): a flood of made-up agent ids cannot exhaust memory.
pub const MAX_TRACKED_AGENTS: usize = 100_000;
