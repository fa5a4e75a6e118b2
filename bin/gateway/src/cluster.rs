//! What this instance knows of its cluster, for `GET /gateway/cluster` and `/readyz`: its own id, its role, the
//! current leader and its term, and whether Redis answers.

use gateway_redis::{RedisLeadership, RedisReachability};
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::config::InstanceId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Coordinated through Redis, and holding the lease.
    Leader,
    /// Coordinated through Redis; another instance (or none, for now) holds the lease.
    Follower,
    /// No Redis: one process, always its own leader.
    Single,
}

impl From<gateway_redis::Role> for Role {
    fn from(role: gateway_redis::Role) -> Self {
        match role {
            gateway_redis::Role::Leader => Self::Leader,
            gateway_redis::Role::Follower => Self::Follower,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RedisState {
    Ok,
    Unreachable,
    None,
}

// The fields of the views are in alphabetical order, the order of the JSON maps `GET /gateway/cluster` built them
// into before: the same bytes.

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaderView {
    // The leader's fencing token; `null` for the moment while a new term is being opened.
    #[schema(required = true)]
    pub epoch: Option<u64>,
    pub instance_id: String,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    pub since: Option<OffsetDateTime>,
}

// The body of `GET /gateway/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterView {
    pub instance_id: String,
    // `null` while no instance leads (an election in progress, or Redis unreachable).
    #[schema(inline, required = true)]
    pub leader: Option<LeaderView>,
    #[schema(inline)]
    pub redis: RedisState,
    pub role: Role,
}

/// How this instance is coordinated: alone, or through a Redis lease.
#[derive(Debug, Clone)]
pub enum Cluster {
    /// No Redis: always its own leader, under term 1, since it started.
    Single {
        instance_id: InstanceId,
        since: OffsetDateTime,
    },
    Redis(RedisLeadership),
}

impl Cluster {
    /// This instance's role right now, without asking Redis.
    pub fn role(&self) -> Role {
        match self {
            Self::Single { .. } => Role::Single,
            Self::Redis(leadership) => leadership.role().into(),
        }
    }

    /// The fencing token this instance leads under (a local read): 1 for a single process, none while a follower.
    pub fn epoch(&self) -> Option<u64> {
        match self {
            Self::Single { .. } => Some(1),
            Self::Redis(leadership) => leadership.term().map(|term| term.token.0),
        }
    }

    /// The whole view; with Redis, the leader is asked of Redis (bounded by the lease's command timeout).
    pub async fn view(&self) -> ClusterView {
        match self {
            Self::Single { instance_id, since } => ClusterView {
                instance_id: instance_id.to_string(),
                role: Role::Single,
                leader: Some(LeaderView { instance_id: instance_id.to_string(), epoch: Some(1), since: Some(*since) }),
                redis: RedisState::None,
            },
            Self::Redis(leadership) => {
                let status = leadership.cluster_status().await;
                ClusterView {
                    instance_id: status.instance_id,
                    role: status.role.into(),
                    leader: status.leader.map(|leader| LeaderView {
                        instance_id: leader.instance_id,
                        epoch: leader.epoch.map(|token| token.0),
                        since: leader.since,
                    }),
                    redis: match status.redis {
                        RedisReachability::Ok => RedisState::Ok,
                        RedisReachability::Unreachable => RedisState::Unreachable,
                    },
                }
            }
        }
    }
}

/// Hands the jobs other instances announce (they scheduled them while not leading) to this instance's scheduler,
/// which arms them if it leads: a short reminder accepted by a follower then fires on time, not at the leader's
/// next refill. A supervised loop of every instance with Redis, since any of them may lead.
#[derive(Debug, Clone)]
pub struct JobAnnouncements {
    pub bus: gateway_pubsub::Bus,
    pub cron: gateway_cron::CronScheduler,
}

impl gateway_core::BackgroundLoop for JobAnnouncements {
    fn name(&self) -> &'static str {
        "job_announcements"
    }

    async fn run(&self, shutdown: tokio_util::sync::CancellationToken) {
        use gateway_pubsub::Received;
        let mut announcements = self.bus.subscribe(&gateway_core::Topic::ScheduledJobs);
        loop {
            let received = tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                received = announcements.recv() => received,
            };
            match received {
                Received::Event(event) => match announced_job(event.json()) {
                    Some((job_id, next_fire_at)) => self.cron.arm_announced(job_id, next_fire_at),
                    None => tracing::debug!(event_id = %event.id(), "unreadable job announcement skipped"),
                },
                // Each job missed here is armed at the leader's next refill, a few seconds later.
                Received::Lagged(missed) => tracing::debug!(missed, "job announcements dropped"),
                Received::Closed => return,
            }
        }
    }
}

/// The job id and instant of a `job_scheduled` event.
fn announced_job(json: &str) -> Option<(i64, OffsetDateTime)> {
    let event: serde_json::Value = serde_json::from_str(json).ok()?;
    let job_id = event.get("job_id")?.as_i64()?;
    let at = event.get("next_fire_at")?.as_str()?;
    let at = OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok()?;
    Some((job_id, at))
}

#[cfg(test)]
mod tests {
    use gateway_core::{Event, EventPayload};
    use time::macros::datetime;

    use super::*;

    #[test]
    fn an_announcement_reads_back_as_its_job_and_instant() {
        let at = datetime!(2026-02-22 12:00:05.25 UTC);
        let event = Event::new(EventPayload::JobScheduled { job_id: 42, next_fire_at: at }, at);
        assert_eq!(announced_job(&event.to_json()), Some((42, at)));
        assert_eq!(announced_job(r#"{"job_id":"42","next_fire_at":"x"}"#), None);
        assert_eq!(announced_job("not json"), None);
    }
}
