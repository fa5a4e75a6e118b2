//! The liveness port: which agents are alive, by the gateway's own receipt times (FR-10.1 in
//! docs/requirements.md), bounded, and — with several instances — shared by all of them, so an agent heartbeating
//! to any instance is live everywhere and the leader evicts it once.
//!
//! [`InMemoryLiveness`] is the single-instance adapter (and the fake): a bounded map in this process. A shared
//! adapter keeps the same rules in shared storage.

use std::collections::{BinaryHeap, HashMap};
use std::fmt::Debug;
use std::sync::Mutex;

use time::{Duration, OffsetDateTime};

use crate::ids::{AgentId, ClusterId};
use crate::ports::leadership::{EpochGate, FencingEpoch, FencingToken};
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// An agent the map tracks: where it runs and when the gateway last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEntry {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    /// The gateway's receipt time of its latest heartbeat.
    pub last_seen: OffsetDateTime,
}

/// A page of the listing ([`LivenessMap::live_agents`]): the live agents among the rows it read, and where the next
/// page starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LivePage {
    pub entries: Vec<LiveEntry>,
    /// The last id this page read (a full page's last entry, or the last row of its walk): the next page's
    /// `after`. `None` once every row after `after` was read. A page may hold fewer than `limit` entries, or
    /// none, and still have one: the rows it walked were mostly agents no longer live.
    pub next_after: Option<AgentId>,
}

/// Why a heartbeat was not tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LivenessRefusal {
    /// The map tracks `cap` agents already and this one is not among them.
    #[error("tracked-agent cap of {cap} reached")]
    CapacityReached { cap: usize },
}

/// Where agent liveness is tracked.
pub trait LivenessMap: Send + Sync + Debug {
    /// Marks `agent_id` alive at `receipt`. On the request path: it must not block (a shared adapter keeps it in
    /// this process until [`LivenessMap::flush`]). Refused for an agent not tracked yet once the cap is reached;
    /// known agents always update.
    fn record(
        &self,
        agent_id: &AgentId,
        cluster_id: &ClusterId,
        receipt: OffsetDateTime,
    ) -> Result<(), LivenessRefusal>;

    /// Makes every receipt recorded so far visible to all instances, or fails. The heartbeat manager calls it
    /// before it answers a heartbeat, so a 200 means "live everywhere". Blocks on a shared store; the in-process
    /// map has nothing to do.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether `agent_id` is tracked, as far as this instance knows (cheap, non-blocking): a shared map may not
    /// know of an agent that heartbeats only to other instances.
    fn is_live(&self, agent_id: &AgentId) -> bool;

    /// Whether other instances share this map: then what this instance knows is not all there is, and the
    /// answers that need the whole map ([`LivenessMap::record_if_tracked`], capability entries) take a round trip.
    fn is_shared(&self) -> bool {
        false
    }

    /// [`LivenessMap::record`] for an agent `record` refused at the cap because this instance did not know it: if
    /// the shared map tracks it (it heartbeats to other instances), the receipt is kept like a known agent's and
    /// the answer is `true`. May block. The in-process map knows every agent it tracks, so it has nothing to add.
    fn record_if_tracked(
        &self,
        _agent_id: &AgentId,
        _cluster_id: &ClusterId,
        _receipt: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Tracked agents by id after `after`: the live ones among at most `walk` rows the map keeps after `after`, in
    /// id order, at most `limit` of them. A shared map keeps the rows of evicted agents (DESIGN §8), so a page's
    /// cost is bounded by `walk` however many of those there are, and a page may be short (even empty) while
    /// [`LivePage::next_after`] says where to go on; following it reaches every agent live throughout. A map that
    /// keeps only live agents walks only those. May block on a shared store: call it from a blocking thread.
    fn live_agents(&self, after: Option<&AgentId>, limit: usize, walk: usize) -> Result<LivePage, StoreError>;

    /// Removes every agent last seen more than `threshold` before `now` and returns them, each exactly once
    /// however many instances ask. A leader-only write: [`StoreError::Fenced`] and nothing removed when `token`
    /// is older than the newest seen. May block.
    fn evict_silent(
        &self,
        now: OffsetDateTime,
        threshold: Duration,
        token: FencingToken,
    ) -> Result<Vec<LiveEntry>, StoreError>;

    /// How many agents are tracked (a shared adapter may answer from its last look).
    fn tracked_count(&self) -> usize;
}

#[derive(Debug, Clone)]
struct Seen {
    cluster_id: ClusterId,
    last_seen: OffsetDateTime,
}

/// The liveness map of one process, bounded by `capacity`.
#[derive(Debug)]
pub struct InMemoryLiveness {
    agents: Mutex<HashMap<AgentId, Seen>>,
    capacity: usize,
    epoch: EpochGate,
}

impl InMemoryLiveness {
    pub fn new(capacity: usize) -> Self {
        Self { agents: Mutex::new(HashMap::new()), capacity, epoch: EpochGate::default() }
    }
}

impl LivenessMap for InMemoryLiveness {
    fn record(
        &self,
        agent_id: &AgentId,
        cluster_id: &ClusterId,
        receipt: OffsetDateTime,
    ) -> Result<(), LivenessRefusal> {
        let mut agents = lock(&self.agents);
        // A known agent's heartbeat, the common case, allocates nothing: ids are copied only into a new entry or
        // a changed cluster.
        if let Some(known) = agents.get_mut(agent_id) {
            known.last_seen = receipt;
            if known.cluster_id != *cluster_id {
                known.cluster_id = cluster_id.clone();
            }
            return Ok(());
        }
        if agents.len() >= self.capacity {
            return Err(LivenessRefusal::CapacityReached { cap: self.capacity });
        }
        agents.insert(agent_id.clone(), Seen { cluster_id: cluster_id.clone(), last_seen: receipt });
        Ok(())
    }

    fn is_live(&self, agent_id: &AgentId) -> bool {
        lock(&self.agents).contains_key(agent_id)
    }

    fn live_agents(&self, after: Option<&AgentId>, limit: usize, walk: usize) -> Result<LivePage, StoreError> {
        // Every row here is live: the walk and the page end together, at the smaller bound.
        let read = limit.min(walk);
        if read == 0 {
            return Ok(LivePage::default());
        }
        let agents = lock(&self.agents);
        // The page's ids are the `read` smallest after `after`, kept in a max-heap while the map is walked, so that
        // a page copies and sorts `read` entries, not the whole map: at a million agents a page took 0.66-0.69 s
        // that way and held heartbeats off the map for up to 236 ms, 43-44 ms with the heap (docs/benchmarks.md,
        // session 30; `benches/liveness.rs`).
        let mut smallest: BinaryHeap<&AgentId> = BinaryHeap::with_capacity(read + 1);
        for agent_id in agents.keys().filter(|agent_id| after.is_none_or(|after| *agent_id > after)) {
            if smallest.len() < read {
                smallest.push(agent_id);
            } else if smallest.peek().is_some_and(|largest| agent_id < *largest) {
                smallest.pop();
                smallest.push(agent_id);
            }
        }
        let full = smallest.len() == read;
        let entries: Vec<LiveEntry> = smallest
            .into_sorted_vec()
            .into_iter()
            .filter_map(|agent_id| agents.get_key_value(agent_id))
            .map(|(agent_id, seen)| LiveEntry {
                agent_id: agent_id.clone(),
                cluster_id: seen.cluster_id.clone(),
                last_seen: seen.last_seen,
            })
            .collect();
        let next_after = if full { entries.last().map(|entry| entry.agent_id.clone()) } else { None };
        Ok(LivePage { entries, next_after })
    }

    fn evict_silent(
        &self,
        now: OffsetDateTime,
        threshold: Duration,
        token: FencingToken,
    ) -> Result<Vec<LiveEntry>, StoreError> {
        let mut agents = lock(&self.agents);
        self.epoch.admit(token)?;
        let mut evicted = Vec::new();
        agents.retain(|agent_id, seen| {
            let keep = now - seen.last_seen <= threshold;
            if !keep {
                evicted.push(LiveEntry {
                    agent_id: agent_id.clone(),
                    cluster_id: seen.cluster_id.clone(),
                    last_seen: seen.last_seen,
                });
            }
            keep
        });
        Ok(evicted)
    }

    fn tracked_count(&self) -> usize {
        lock(&self.agents).len()
    }
}

impl FencingEpoch for InMemoryLiveness {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        Ok(self.epoch.newest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::liveness::CAPACITY;

    crate::liveness_map_conformance!(Some(Box::new(InMemoryLiveness::new(CAPACITY))));
}
