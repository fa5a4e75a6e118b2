//! The HeartbeatManager and its eviction loop.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::group_commit::GroupCommit;
use gateway_core::memory::lock;
use gateway_core::{
    AgentId, BackgroundLoop, CapabilityEntry, CapabilityMap, Clock, ClusterId, ComponentHealth, Event, EventPayload,
    EventPublisher, HeartbeatRecord, HeartbeatStore, Leadership, Topic,
};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::{CHECK_INTERVAL, EVICTION_THRESHOLD, HeartbeatError, HeartbeatPing, MAX_TRACKED_AGENTS};

/// Most heartbeat rows written in one store transaction.
pub const MAX_UPSERT_GROUP: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    pub eviction_threshold: Duration,
    pub check_interval: Duration,
    pub max_tracked_agents: usize,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            eviction_threshold: EVICTION_THRESHOLD,
            check_interval: CHECK_INTERVAL,
            max_tracked_agents: MAX_TRACKED_AGENTS,
        }
    }
}

#[derive(Debug, Clone)]
struct Liveness {
    cluster_id: ClusterId,
    /// The gateway's receipt time: an agent's clock must not keep it alive.
    last_seen: OffsetDateTime,
}

/// A live agent as the operator API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveAgent {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen: OffsetDateTime,
    pub capabilities: Option<CapabilityEntry>,
}

/// An agent removed by a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictedAgent {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    pub last_seen: OffsetDateTime,
}

/// What the manager works through: the durable snapshot, the capability map it keeps in step with liveness, the
/// bus evictions are announced on, the time, and whether this process may evict (leadership).
#[derive(Debug, Clone)]
pub struct HeartbeatPorts {
    pub store: Arc<dyn HeartbeatStore>,
    pub capabilities: Arc<dyn CapabilityMap>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

/// Tracks agent liveness. Cheap to clone; clones share everything. Run [`HeartbeatManager::run`] once: heartbeats
/// are accepted only while it runs.
#[derive(Debug, Clone)]
pub struct HeartbeatManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    agents: Mutex<HashMap<AgentId, Liveness>>,
    config: HeartbeatConfig,
    capabilities: Arc<dyn CapabilityMap>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    leadership: Arc<dyn Leadership>,
    health: ComponentHealth,
    /// Concurrent heartbeats share one store commit (see `gateway_core::group_commit`); it owns the store.
    upserts: Arc<GroupCommit<HeartbeatRecord, ()>>,
}

impl HeartbeatManager {
    pub fn new(ports: HeartbeatPorts, config: HeartbeatConfig) -> Self {
        let HeartbeatPorts { store, capabilities, publisher, clock, leadership } = ports;
        let upserts = Arc::new(GroupCommit::new(MAX_UPSERT_GROUP, move |records: Vec<HeartbeatRecord>| {
            store.upsert_heartbeats(&records)?;
            Ok(vec![(); records.len()])
        }));
        let inner = Inner {
            agents: Mutex::new(HashMap::new()),
            config,
            capabilities,
            publisher,
            clock,
            leadership,
            health: ComponentHealth::new("heartbeat"),
            upserts,
        };
        Self { inner: Arc::new(inner) }
    }

    /// Marks `agent_id` alive now (FR-10.1). Refused when the loop is not running, or when the map is full and
    /// the agent is new; known agents always update.
    pub fn record_heartbeat(&self, agent_id: AgentId, cluster_id: ClusterId) -> Result<(), HeartbeatError> {
        self.track(Cow::Owned(agent_id), Cow::Owned(cluster_id), self.inner.clock.now())
    }

    /// [`Self::record_heartbeat`] at `last_seen`, copying the ids only into a new entry or a changed cluster: a
    /// known agent's heartbeat, the common case, allocates nothing here.
    fn track(
        &self,
        agent_id: Cow<'_, AgentId>,
        cluster_id: Cow<'_, ClusterId>,
        last_seen: OffsetDateTime,
    ) -> Result<(), HeartbeatError> {
        if !self.inner.health.is_running() {
            return Err(HeartbeatError::Unavailable);
        }
        let mut agents = lock(&self.inner.agents);
        if let Some(known) = agents.get_mut(agent_id.as_ref()) {
            known.last_seen = last_seen;
            if known.cluster_id != *cluster_id {
                known.cluster_id = cluster_id.into_owned();
            }
            return Ok(());
        }
        if agents.len() >= self.inner.config.max_tracked_agents {
            return Err(HeartbeatError::CapacityExceeded { cap: self.inner.config.max_tracked_agents });
        }
        agents.insert(agent_id.into_owned(), Liveness { cluster_id: cluster_id.into_owned(), last_seen });
        Ok(())
    }

    /// The whole of `POST /gateway/heartbeat`: the map first (so a refused agent never reaches the database),
    /// then the durable row, with the agent's own timestamp or the receipt time (FR-10.3).
    pub async fn accept(&self, ping: HeartbeatPing) -> Result<(), HeartbeatError> {
        let receipt = self.inner.clock.now();
        self.track(Cow::Borrowed(&ping.agent_id), Cow::Borrowed(&ping.cluster_id), receipt)?;
        let record = HeartbeatRecord {
            agent_id: ping.agent_id,
            cluster_id: ping.cluster_id,
            last_seen_at: ping.timestamp.unwrap_or(receipt),
        };
        self.inner.upserts.submit(record).await?;
        Ok(())
    }

    /// Records what an accepted DecisionLog says about its agent's capabilities, for agents that are live.
    /// Agents that never heartbeat get no entry, so the capability map stays bounded by the liveness map.
    pub fn note_capabilities(&self, agent_id: &AgentId, agent_type: &str, capability_version: &str) {
        if lock(&self.inner.agents).contains_key(agent_id) {
            let entry = CapabilityEntry {
                agent_type: agent_type.to_owned(),
                capability_version: capability_version.to_owned(),
                updated_at: self.inner.clock.now(),
            };
            self.inner.capabilities.register(agent_id, entry);
        }
    }

    /// One eviction pass (FR-10.2): agents silent for more than the threshold leave the map and the
    /// capability map, each with an `agent_evicted` event and an info log.
    pub fn check(&self) -> Vec<EvictedAgent> {
        let now = self.inner.clock.now();
        let threshold = self.inner.config.eviction_threshold;
        let mut evicted = Vec::new();
        lock(&self.inner.agents).retain(|agent_id, liveness| {
            let silent_for = now - liveness.last_seen;
            let keep = silent_for <= threshold;
            if !keep {
                evicted.push(EvictedAgent {
                    agent_id: agent_id.clone(),
                    cluster_id: liveness.cluster_id.clone(),
                    last_seen: liveness.last_seen,
                });
            }
            keep
        });
        // Outside the map lock: heartbeats keep flowing while evictions are announced.
        for agent in &evicted {
            self.inner.capabilities.remove_agent(&agent.agent_id);
            let event = Event::new(
                EventPayload::AgentEvicted {
                    agent_id: agent.agent_id.clone(),
                    cluster_id: agent.cluster_id.clone(),
                    last_seen: agent.last_seen,
                },
                now,
            );
            if let Err(error) = self.inner.publisher.publish(&Topic::Agents, &event) {
                tracing::warn!(agent_id = %agent.agent_id, %error, "agent_evicted event not published");
            }
            tracing::info!(agent_id = %agent.agent_id, last_seen = %agent.last_seen, "agent evicted");
        }
        evicted
    }

    /// The eviction loop. Runs until `shutdown`; while it runs, heartbeats are accepted.
    pub async fn run(&self, shutdown: CancellationToken) {
        let _running = self.inner.health.start();
        let period = self.inner.config.check_interval;
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => {
                    if self.inner.leadership.current().is_some() {
                        self.check();
                    }
                }
            }
        }
    }

    /// Live agents ordered by id, `limit` at most, starting after `after` (keyset pagination).
    pub fn live_agents(&self, after: Option<&AgentId>, limit: usize) -> Vec<LiveAgent> {
        let mut page: Vec<(AgentId, Liveness)> = lock(&self.inner.agents)
            .iter()
            .filter(|(agent_id, _)| after.is_none_or(|after| *agent_id > after))
            .map(|(agent_id, liveness)| (agent_id.clone(), liveness.clone()))
            .collect();
        page.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        page.truncate(limit);
        page.into_iter()
            .map(|(agent_id, liveness)| LiveAgent {
                capabilities: self.inner.capabilities.get(&agent_id),
                agent_id,
                cluster_id: liveness.cluster_id,
                last_seen: liveness.last_seen,
            })
            .collect()
    }

    pub fn tracked_count(&self) -> usize {
        lock(&self.inner.agents).len()
    }

    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }
}

impl BackgroundLoop for HeartbeatManager {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn run(&self, shutdown: CancellationToken) -> impl Future<Output = ()> + Send {
        HeartbeatManager::run(self, shutdown)
    }
}
