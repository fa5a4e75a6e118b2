//! The HeartbeatManager and its eviction loop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_core::runtime::group_commit::GroupCommit;
use gateway_core::runtime::stats::HeartbeatStats;
use gateway_core::runtime::sync::lock;
use gateway_core::{
    AgentId, BackgroundLoop, CapabilityEntry, CapabilityMap, CapabilityNotes, Clock, ClusterId, ComponentHealth, Event,
    EventPayload, EventPublisher, FencingToken, HeartbeatRecord, HeartbeatStore, LeaderLoop, Leadership, LivenessMap,
    LivenessRefusal, StoreError, Topic, run_blocking,
};
use serde::Serialize;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::hearing::{Hearing, Outcome, Verdict};
use crate::{
    CHECK_INTERVAL, DEFAULT_MAX_TRACKED_AGENTS, EVICTION_THRESHOLD, FAILED_PASS_RETRY, HeartbeatError, HeartbeatPing,
    MAX_FAILED_PASS_RETRY,
};

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
            max_tracked_agents: DEFAULT_MAX_TRACKED_AGENTS,
        }
    }
}

/// A live agent as the operator API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveAgent {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    pub last_seen: OffsetDateTime,
    pub capabilities: Option<CapabilityEntry>,
}

/// A page of live agents: [`HeartbeatManager::live_agents`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAgentPage {
    pub agents: Vec<LiveAgent>,
    /// The next page's `after`; `None` once the map was read to its end.
    pub next_after: Option<AgentId>,
}

/// An agent removed by a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictedAgent {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    pub last_seen: OffsetDateTime,
}

/// What the manager works through: the liveness map (in this process, or shared by a cluster), the durable
/// snapshot, the capability map it keeps in step with liveness, the bus evictions are announced on, the time, and
/// whether this process may evict (leadership).
#[derive(Debug, Clone)]
pub struct HeartbeatPorts {
    pub liveness: Arc<dyn LivenessMap>,
    pub store: Arc<dyn HeartbeatStore>,
    pub capabilities: Arc<dyn CapabilityMap>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

/// Tracks agent liveness. Cheap to clone; clones share everything. Run its loop
/// ([`run`](gateway_core::BackgroundLoop::run)) once: heartbeats are accepted only while it runs.
#[derive(Debug, Clone)]
pub struct HeartbeatManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    liveness: Arc<dyn LivenessMap>,
    config: HeartbeatConfig,
    capabilities: Arc<dyn CapabilityMap>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    leadership: Arc<dyn Leadership>,
    health: ComponentHealth,
    /// Concurrent heartbeats share one store commit (see `gateway_core::runtime::group_commit`); it owns the store.
    upserts: Arc<GroupCommit<HeartbeatRecord, ()>>,
    stats: HeartbeatStats,
}

impl HeartbeatManager {
    pub fn new(ports: HeartbeatPorts, config: HeartbeatConfig) -> Self {
        let HeartbeatPorts { liveness, store, capabilities, publisher, clock, leadership } = ports;
        let shared = Arc::clone(&liveness);
        let flush_after_rows = !store.writes_receipts();
        let upserts = Arc::new(
            GroupCommit::new(MAX_UPSERT_GROUP, move |records: Vec<HeartbeatRecord>| {
                store.upsert_heartbeats(&records)?;
                // These heartbeats' receipts were recorded before they were queued: after the flush they are live on
                // every instance. A store that wrote them with the rows has done it already.
                if flush_after_rows {
                    shared.flush()?;
                }
                Ok(vec![(); records.len()])
            })
            // Every agent's connection sends its next heartbeat once answered: without the wait, callers split into
            // two cohorts that each pay a commit (docs/benchmarks.md, issue 18).
            .lingering()
            // A heartbeat's caller is a connection task: answered from the runtime thread it runs on, it is woken
            // without a syscall (docs/benchmarks.md, issue 18 item 2).
            .replying_from_runtime(),
        );
        let inner = Inner {
            liveness,
            config,
            capabilities,
            publisher,
            clock,
            leadership,
            health: ComponentHealth::new("heartbeat"),
            upserts,
            stats: HeartbeatStats::default(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// Marks `agent_id` alive now (FR-10.1). Refused when the loop is not running, or when the map is full and
    /// the agent is new; known agents always update.
    pub fn record_heartbeat(&self, agent_id: AgentId, cluster_id: ClusterId) -> Result<(), HeartbeatError> {
        self.track(&agent_id, &cluster_id, self.inner.clock.now())
    }

    fn track(&self, agent_id: &AgentId, cluster_id: &ClusterId, receipt: OffsetDateTime) -> Result<(), HeartbeatError> {
        if !self.inner.health.is_running() {
            return Err(HeartbeatError::Unavailable);
        }
        self.inner.liveness.record(agent_id, cluster_id, receipt).map_err(|refusal| match refusal {
            LivenessRefusal::CapacityReached { cap } => HeartbeatError::CapacityExceeded { cap },
        })
    }

    /// The whole of `POST /gateway/heartbeat`: the map first (so a refused agent never reaches the database),
    /// then the durable row, with the agent's own timestamp or the receipt time (FR-10.3), and the receipt made
    /// visible to every instance.
    pub async fn accept(&self, ping: HeartbeatPing) -> Result<(), HeartbeatError> {
        let receipt = self.inner.clock.now();
        match self.track(&ping.agent_id, &ping.cluster_id, receipt) {
            Ok(()) => {}
            // Known agents always update: one that heartbeats to other instances of a full cluster is new only to
            // this one, which asks the shared map (a round trip, paid only at the cap).
            Err(HeartbeatError::CapacityExceeded { cap }) if self.inner.liveness.is_shared() => {
                let liveness = Arc::clone(&self.inner.liveness);
                let (agent_id, cluster_id) = (ping.agent_id.clone(), ping.cluster_id.clone());
                let tracked = run_blocking(move || liveness.record_if_tracked(&agent_id, &cluster_id, receipt))
                    .await
                    .map_err(StoreError::from)??;
                if !tracked {
                    return Err(HeartbeatError::CapacityExceeded { cap });
                }
            }
            Err(refused) => return Err(refused),
        }
        let record = HeartbeatRecord {
            agent_id: ping.agent_id,
            cluster_id: ping.cluster_id,
            last_seen_at: ping.timestamp.unwrap_or(receipt),
        };
        self.inner.upserts.submit(record).await?;
        self.inner.stats.accepted.increment();
        Ok(())
    }

    /// Records what an accepted DecisionLog says about its agent's capabilities, for agents that are live.
    /// Agents that never heartbeat get no entry, so the capability map stays bounded by the liveness map.
    pub fn note_capabilities(&self, agent_id: &AgentId, agent_type: &str, capability_version: &str) {
        // A shared map cannot tell without a round trip whether an agent heartbeats to another instance; its
        // capability writes keep only live agents' entries.
        let liveness = &self.inner.liveness;
        if liveness.is_shared() || liveness.is_live(agent_id) {
            let entry = CapabilityEntry {
                agent_type: agent_type.to_owned(),
                capability_version: capability_version.to_owned(),
                updated_at: self.inner.clock.now(),
            };
            self.inner.capabilities.register(agent_id, entry);
        }
    }

    /// One eviction pass (FR-10.2), under leadership term `token`: agents silent for more than the threshold
    /// leave the liveness map and the capability map, each with an `agent_evicted` event and an info log.
    pub async fn check(&self, token: FencingToken) -> Result<Vec<EvictedAgent>, StoreError> {
        let now = self.inner.clock.now();
        self.check_at(now, now, token).await
    }

    /// A pass at `now` that judges silence as of `judged_at` (`now`, unless the loop could not judge for a while:
    /// see `hearing`). The loop reads the time when its tick fires, not whenever a blocking thread gets to the
    /// pass.
    async fn check_at(
        &self,
        now: OffsetDateTime,
        judged_at: OffsetDateTime,
        token: FencingToken,
    ) -> Result<Vec<EvictedAgent>, StoreError> {
        let began = Instant::now();
        // On a blocking thread: a shared liveness map is a network store, and a million local agents take tens of
        // milliseconds.
        let manager = self.clone();
        let evicted =
            run_blocking(move || manager.evict_silent(judged_at, token)).await.map_err(StoreError::from)??;
        let stored = began.elapsed();
        // Outside any lock of the map: heartbeats keep flowing while evictions are announced. Paced: a crowd evicted
        // at once (a hundred thousand) goes out as fast as the way to the other instances carries it, instead of
        // overflowing the bridge's queue and reaching only this instance's subscribers (issue 18).
        for agent in &evicted {
            let event = Event::new(
                EventPayload::AgentEvicted {
                    agent_id: agent.agent_id.clone(),
                    cluster_id: agent.cluster_id.clone(),
                    last_seen: agent.last_seen,
                },
                now,
            );
            if let Err(error) = self.inner.publisher.publish_paced(&Topic::Agents, &event).await {
                tracing::warn!(agent_id = %agent.agent_id, %error, "agent_evicted event not published");
            }
            tracing::info!(agent_id = %agent.agent_id, last_seen = %agent.last_seen, "agent evicted");
        }
        // The whole pass, announcements included: what an operator sizing the fleet or the check interval needs,
        // and what tells a slow store (`store_ms`) from a crowd of announcements.
        let took = began.elapsed();
        self.inner.stats.eviction_passes.observe(took);
        tracing::debug!(
            evicted = evicted.len(),
            store_ms = stored.as_secs_f64() * 1e3,
            total_ms = took.as_secs_f64() * 1e3,
            "eviction pass"
        );
        Ok(evicted)
    }

    /// The blocking part of a pass: the agents silent at `judged_at` leave the liveness map and the capability map.
    fn evict_silent(&self, judged_at: OffsetDateTime, token: FencingToken) -> Result<Vec<EvictedAgent>, StoreError> {
        let threshold = time::Duration::try_from(self.inner.config.eviction_threshold).unwrap_or(time::Duration::MAX);
        let evicted: Vec<EvictedAgent> = self
            .inner
            .liveness
            .evict_silent(judged_at, threshold, token)?
            .into_iter()
            .map(|entry| EvictedAgent {
                agent_id: entry.agent_id,
                cluster_id: entry.cluster_id,
                last_seen: entry.last_seen,
            })
            .collect();
        self.inner.stats.evicted.add(u64::try_from(evicted.len()).unwrap_or(u64::MAX));
        for agent in &evicted {
            self.inner.capabilities.remove_agent(&agent.agent_id);
        }
        Ok(evicted)
    }

    /// Live agents ordered by id, `limit` at most, starting after `after` (keyset pagination), with their
    /// capabilities: the live ones among at most `walk` rows of the liveness map ([`LivenessMap::live_agents`]),
    /// and where the next page starts.
    pub async fn live_agents(
        &self,
        after: Option<AgentId>,
        limit: usize,
        walk: usize,
    ) -> Result<LiveAgentPage, StoreError> {
        let liveness = Arc::clone(&self.inner.liveness);
        let capabilities = Arc::clone(&self.inner.capabilities);
        let (page, entries) = run_blocking(move || {
            let page = liveness.live_agents(after.as_ref(), limit, walk)?;
            let ids: Vec<AgentId> = page.entries.iter().map(|entry| entry.agent_id.clone()).collect();
            let entries = capabilities.get_many(&ids)?;
            Ok::<_, StoreError>((page, entries))
        })
        .await??;
        let agents = page
            .entries
            .into_iter()
            .zip(entries)
            .map(|(entry, capabilities)| LiveAgent {
                capabilities,
                agent_id: entry.agent_id,
                cluster_id: entry.cluster_id,
                last_seen: entry.last_seen,
            })
            .collect();
        Ok(LiveAgentPage { agents, next_after: page.next_after })
    }

    pub fn tracked_count(&self) -> usize {
        self.inner.liveness.tracked_count()
    }

    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    /// Heartbeats accepted and agents evicted by this instance since it started.
    pub fn stats(&self) -> &HeartbeatStats {
        &self.inner.stats
    }
}

impl BackgroundLoop for HeartbeatManager {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    /// The eviction loop: a check every interval (the first at start), only while leader. Runs until `shutdown`;
    /// while it runs, heartbeats are accepted.
    async fn run(&self, shutdown: CancellationToken) {
        let checks = LeaderLoop {
            pass: "eviction check",
            interval: self.inner.config.check_interval,
            first_backoff: FAILED_PASS_RETRY.min(self.inner.config.check_interval),
            max_backoff: MAX_FAILED_PASS_RETRY.min(self.inner.config.check_interval),
            health: &self.inner.health,
            leadership: self.inner.leadership.as_ref(),
        };
        let hearing =
            Hearing::new(self.inner.config.eviction_threshold, checks.interval).listening_since(self.inner.clock.now());
        let hearing = Arc::new(Mutex::new(hearing));
        checks
            .run(&shutdown, |token| {
                let manager = self.clone();
                let hearing = Arc::clone(&hearing);
                let now = self.inner.clock.now();
                async move {
                    let verdict = lock(&hearing).before_pass(tokio::time::Instant::now(), now, token);
                    let outcome = match verdict {
                        Verdict::Evict => manager.check_at(now, now, token).await.map(drop),
                        Verdict::EvictAsOf { as_of } => {
                            tracing::debug!(%as_of, "eviction pass judged as of the last instant the loop could judge");
                            manager.check_at(now, as_of, token).await.map(drop)
                        }
                        Verdict::Hold { until } => {
                            tracing::debug!(%until, "eviction pass held");
                            Ok(())
                        }
                    };
                    let ended = if outcome.is_ok() { Outcome::Done } else { Outcome::Failed };
                    lock(&hearing).after_pass(manager.inner.clock.now(), ended);
                    outcome
                }
            })
            .await;
    }
}

/// The DecisionLog intake notes identities through the manager, which keeps entries only for live agents.
impl CapabilityNotes for HeartbeatManager {
    fn note_capabilities(&self, agent_id: &AgentId, agent_type: &str, capability_version: &str) {
        HeartbeatManager::note_capabilities(self, agent_id, agent_type, capability_version);
    }
}
