//! What this instance knows of its cluster, for `GET /gateway/cluster` and `/readyz`: its own id, its role, the
//! current leader and its term, and whether Redis answers.

use std::fmt::Debug;

use serde::Serialize;
use time::OffsetDateTime;

use crate::config::InstanceId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Coordinated through Redis, and holding the lease.
    Leader,
    /// Coordinated through Redis; another instance (or none, for now) holds the lease.
    Follower,
    /// No Redis: one process, always its own leader.
    Single,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisState {
    Ok,
    Unreachable,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderView {
    pub instance_id: String,
    pub epoch: u64,
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
}

/// The body of `GET /gateway/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    pub instance_id: String,
    pub role: Role,
    /// `null` while no instance leads (an election in progress, or Redis unreachable).
    pub leader: Option<LeaderView>,
    pub redis: RedisState,
}

/// Where the view comes from: the leadership adapter in use.
pub trait ClusterStatus: Send + Sync + Debug {
    fn view(&self) -> ClusterView;
}

/// One process without Redis: always its own leader, under term 1, since it started.
#[derive(Debug, Clone)]
pub struct SingleInstance {
    pub instance_id: InstanceId,
    pub since: OffsetDateTime,
}

impl ClusterStatus for SingleInstance {
    fn view(&self) -> ClusterView {
        ClusterView {
            instance_id: self.instance_id.to_string(),
            role: Role::Single,
            leader: Some(LeaderView { instance_id: self.instance_id.to_string(), epoch: 1, since: Some(self.since) }),
            redis: RedisState::None,
        }
    }
}
