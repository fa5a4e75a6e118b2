//! gateway-heartbeat: which agents are alive.
//!
//! Agents ping `POST /gateway/heartbeat`; the [`HeartbeatManager`] keeps an in-memory map of
//! `agent_id → (cluster_id, last_seen)` (FR-10.1 in docs/requirements.md) bounded by a hard cap, persists the
//! latest heartbeat of each agent through the `HeartbeatStore` port (FR-10.3/10.4), and every check interval
//! evicts agents silent for longer than the threshold: out of the map, out of the capability map, an
//! `agent_evicted` event on `gateway:agents`, and an info log (FR-10.2). Rows in `gateway_heartbeats` are kept.
//!
//! Embedded with gateway-core's in-memory fakes and a manual clock, an agent is tracked and then evicted:
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use gateway_core::memory::{InMemoryCapabilityMap, InMemoryHeartbeatStore, RecordingPublisher};
//! use gateway_core::{AgentId, ClusterId, ManualClock, SingleProcessLeadership, Topic};
//! use gateway_heartbeat::{HeartbeatConfig, HeartbeatManager, HeartbeatPing, HeartbeatPorts};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (clock, bus) = (ManualClock::at_fixed_start(), Arc::new(RecordingPublisher::default()));
//! let manager = HeartbeatManager::new(HeartbeatPorts {
//!     store: Arc::new(InMemoryHeartbeatStore::default()),
//!     capabilities: Arc::new(InMemoryCapabilityMap::new(100)),
//!     publisher: bus.clone(),
//!     clock: Arc::new(clock.clone()),
//!     leadership: Arc::new(SingleProcessLeadership),
//! }, HeartbeatConfig::default());
//! let _running = manager.health().start(); // what `manager.run(shutdown)` holds while it runs
//!
//! let agent_id = AgentId::new("agent-7")?;
//! manager.accept(HeartbeatPing { agent_id, cluster_id: ClusterId::new("mesh")?, timestamp: None }).await?;
//! assert_eq!(manager.tracked_count(), 1);
//!
//! clock.advance(time::Duration::seconds(91)); // silent past the 90 s threshold
//! assert_eq!(manager.check().len(), 1); // the check `run` makes every 30 s
//! assert_eq!(bus.on_topic(&Topic::Agents).len(), 1); // one agent_evicted event
//! # Ok(())
//! # }
//! ```

mod error;
mod manager;
mod ping;

pub use error::HeartbeatError;
pub use manager::{EvictedAgent, HeartbeatConfig, HeartbeatManager, HeartbeatPorts, LiveAgent, MAX_UPSERT_GROUP};
pub use ping::HeartbeatPing;

use std::time::Duration;

/// Silence after which an agent is evicted (FR-10.2; `--heartbeat-eviction-threshold-s`).
pub const EVICTION_THRESHOLD: Duration = Duration::from_secs(90);
/// How often the eviction check runs (FR-10.2; `--heartbeat-check-interval-ms`).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(30_000);
/// Hard cap of the liveness map (`--max-tracked-agents`): a flood of made-up agent ids cannot exhaust memory.
pub const MAX_TRACKED_AGENTS: usize = 100_000;
