//! What this instance knows of its cluster, for `GET /gateway/cluster` and `/readyz`: its own id, its role, the
//! current leader and its term, and whether Redis answers; and the announcements instances make to each other
//! through the bus (and the event bridge, with Redis), handed to the component they are for.

use gateway_pubsub::bridge::BridgeStatus;
use gateway_redis::{RedisLeadership, RedisMembers, RedisReachability};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::watch;
use utoipa::ToSchema;

/// The gateway's version, as `members` shows it.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Longest `--instance-id`.
pub(crate) const MAX_INSTANCE_ID_CHARS: usize = 64;

/// A gateway's name in its cluster: letters, digits, `.`, `_`, `-` (it appears in Redis keys, logs and
/// `/gateway/cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceId(String);

impl InstanceId {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `gw-` and 12 random hex digits.
    pub(crate) fn random() -> Self {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 6];
        if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
            bytes.copy_from_slice(&std::process::id().to_be_bytes().repeat(2)[..6]);
        }
        Self(format!("gw-{}", gateway_core::encoding::hex::encode(&bytes)))
    }
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl InstanceId {
    /// An `--instance-id` as given.
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        let valid = !value.is_empty()
            && value.chars().count() <= MAX_INSTANCE_ID_CHARS
            && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if valid {
            Ok(Self(value.to_owned()))
        } else {
            Err(format!("must be 1 to {MAX_INSTANCE_ID_CHARS} letters, digits, '.', '_' or '-'"))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Role {
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
pub(crate) enum RedisState {
    Ok,
    Unreachable,
    None,
}

// The fields of the views are in alphabetical order, the order of the JSON maps `GET /gateway/cluster` built them
// into before: the same bytes.

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaderView {
    // The leader's fencing token; `null` for the moment while a new term is being opened.
    #[schema(required = true)]
    pub(crate) epoch: Option<u64>,
    pub(crate) instance_id: String,
    #[serde(with = "gateway_core::encoding::rfc3339::serde::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    pub(crate) since: Option<OffsetDateTime>,
}

// One instance heard from within the window (the lease TTL, 30 s by default), as `GET /gateway/cluster` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemberView {
    // The fencing token it leads under; `null` for a follower.
    #[schema(required = true)]
    pub(crate) epoch: Option<u64>,
    pub(crate) instance_id: String,
    // When it last recorded itself (Redis's clock; this instance's for `single`).
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) last_heard_at: OffsetDateTime,
    // The instance holding the lease is `leader`, every other member `follower`; `single` without Redis.
    #[schema(inline)]
    pub(crate) role: Role,
    // When it started, by its own clock; `null` when its record does not say.
    #[serde(with = "gateway_core::encoding::rfc3339::serde::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    pub(crate) started_at: Option<OffsetDateTime>,
    // The gateway version it runs.
    pub(crate) version: String,
}

// The body of `GET /gateway/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterView {
    pub(crate) instance_id: String,
    // `null` while no instance leads (an election in progress, or Redis unreachable).
    #[schema(inline, required = true)]
    pub(crate) leader: Option<LeaderView>,
    // The instances heard from lately, by instance id; while Redis is unreachable, this instance alone.
    #[schema(inline)]
    pub(crate) members: Vec<MemberView>,
    #[schema(inline)]
    pub(crate) redis: RedisState,
    pub(crate) role: Role,
}

/// How this instance is coordinated: alone, or through a Redis lease.
#[derive(Debug, Clone)]
pub(crate) enum Cluster {
    /// No Redis: always its own leader since it started, under the term after the store's newest then
    /// (`SoleLeadership`): what its outbound webhooks and reminders carry as their epoch.
    Single {
        instance_id: InstanceId,
        since: OffsetDateTime,
        epoch: u64,
    },
    Redis {
        leadership: RedisLeadership,
        members: RedisMembers,
        since: OffsetDateTime,
    },
}

impl Cluster {
    /// This instance's role right now, without asking Redis.
    pub(crate) fn role(&self) -> Role {
        match self {
            Self::Single { .. } => Role::Single,
            Self::Redis { leadership, .. } => leadership.role().into(),
        }
    }

    /// The fencing token this instance leads under (a local read): a single process's term, none while a follower.
    pub(crate) fn epoch(&self) -> Option<u64> {
        match self {
            Self::Single { epoch, .. } => Some(*epoch),
            Self::Redis { leadership, .. } => leadership.term().map(|term| term.token.0),
        }
    }

    /// The whole view; with Redis, the leader is asked of Redis (bounded by the lease's command timeout).
    pub(crate) async fn view(&self) -> ClusterView {
        match self {
            Self::Single { instance_id, since, epoch } => ClusterView {
                instance_id: instance_id.to_string(),
                role: Role::Single,
                leader: Some(LeaderView {
                    instance_id: instance_id.to_string(),
                    epoch: Some(*epoch),
                    since: Some(*since),
                }),
                members: vec![MemberView {
                    epoch: Some(*epoch),
                    instance_id: instance_id.to_string(),
                    last_heard_at: OffsetDateTime::now_utc(),
                    role: Role::Single,
                    started_at: Some(*since),
                    version: VERSION.to_owned(),
                }],
                redis: RedisState::None,
            },
            Self::Redis { leadership, members, since } => {
                let (status, heard) = tokio::join!(leadership.cluster_status(), members.members());
                let leader = status.leader.map(|leader| LeaderView {
                    instance_id: leader.instance_id,
                    epoch: leader.epoch.map(|token| token.0),
                    since: leader.since,
                });
                let role: Role = status.role.into();
                let members = match heard {
                    Ok(heard) => heard
                        .into_iter()
                        .map(|member| {
                            let leads = leader.as_ref().filter(|leader| leader.instance_id == member.instance_id);
                            MemberView {
                                epoch: leads.and_then(|leader| leader.epoch),
                                role: if leads.is_some() { Role::Leader } else { Role::Follower },
                                instance_id: member.instance_id,
                                last_heard_at: member.last_heard_at,
                                started_at: member.started_at,
                                version: member.version,
                            }
                        })
                        .collect(),
                    // Unreachable: only what this instance knows of itself.
                    Err(_) => vec![MemberView {
                        epoch: leadership.term().map(|term| term.token.0),
                        instance_id: status.instance_id.clone(),
                        last_heard_at: OffsetDateTime::now_utc(),
                        role,
                        started_at: Some(*since),
                        version: VERSION.to_owned(),
                    }],
                };
                ClusterView {
                    instance_id: status.instance_id,
                    role,
                    leader,
                    members,
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
pub(crate) struct JobAnnouncements {
    pub(crate) bus: gateway_pubsub::Bus,
    pub(crate) cron: gateway_cron::CronScheduler,
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

/// Hands the credential revocations announced by any instance (this one's included) to gateway-auth, which reads
/// each credential again rather than take the announcement on its word. With the event bridge, a reconnect after a
/// gap, or a subscriber that fell behind, may have missed some: gateway-auth then reads every credential again at
/// its next use. A supervised loop of every instance.
#[derive(Debug, Clone)]
pub(crate) struct RevocationAnnouncements {
    pub(crate) bus: gateway_pubsub::Bus,
    pub(crate) auth: gateway_auth::Auth,
    /// The bridge's subscription state, with Redis.
    pub(crate) bridge: Option<watch::Receiver<BridgeStatus>>,
}

impl gateway_core::BackgroundLoop for RevocationAnnouncements {
    fn name(&self) -> &'static str {
        "revocation_announcements"
    }

    async fn run(&self, shutdown: tokio_util::sync::CancellationToken) {
        use gateway_pubsub::Received;
        let mut revocations = self.bus.subscribe(&gateway_core::Topic::CredentialRevocations);
        let mut bridge = self.bridge.clone();
        let mut reconnects = bridge.as_mut().map_or(0, |status| status.borrow_and_update().reconnects);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                received = revocations.recv() => match received {
                    Received::Event(event) => self.auth.revocation_announced(event.json()).await,
                    Received::Lagged(missed) => {
                        tracing::warn!(missed, "credential revocations missed; every cached credential is read again");
                        self.auth.revocations_missed();
                    }
                    Received::Closed => return,
                },
                changed = changed(&mut bridge) => {
                    if !changed {
                        bridge = None;
                        continue;
                    }
                    let now = bridge.as_mut().map_or(reconnects, |status| status.borrow_and_update().reconnects);
                    if now != reconnects {
                        reconnects = now;
                        self.auth.revocations_missed();
                    }
                }
            }
        }
    }
}

/// Waits for the bridge's status to change; `false` when it never will (no bridge, or the bridge is gone).
async fn changed(bridge: &mut Option<watch::Receiver<BridgeStatus>>) -> bool {
    match bridge {
        Some(status) => status.changed().await.is_ok(),
        None => std::future::pending().await,
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
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    use gateway_auth::{Auth, AuthConfig, AuthError, AuthPorts};
    use gateway_core::{
        AgentCredentialStore, AgentId, BackgroundLoop, Event, EventPayload, EventPublisher, InMemoryAdminTokenStore,
        InMemoryAgentCredentialStore, RecordingPublisher, SystemClock, Topic,
    };
    use time::macros::datetime;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A revocation announced on the bus reaches gateway-auth, which refuses nothing on the announcement's word; once
    /// the store has the credential revoked, the announcement closes its stream and refuses it without a read.
    #[tokio::test(start_paused = true)]
    async fn revocation_announcements_reach_the_credential_cache() {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let ports = AuthPorts {
            credentials: store.clone(),
            admin_tokens: Arc::new(InMemoryAdminTokenStore::default()),
            publisher: Arc::new(RecordingPublisher::default()),
            limiter: None,
            clock: Arc::new(SystemClock),
        };
        let auth = Auth::new(ports, AuthConfig::default());
        let (agent, client) = (AgentId::new("agent-a").unwrap(), IpAddr::from(Ipv4Addr::LOCALHOST));
        let issued = auth.issue(agent.clone(), None).await.unwrap();
        assert!(auth.authenticate(Some(issued.token.expose()), client).await.is_ok());
        let bus = gateway_pubsub::Bus::default();
        let announcements = RevocationAnnouncements { bus: bus.clone(), auth: auth.clone(), bridge: None };
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { announcements.run(shutdown).await }
        });
        while !bus.has_subscribers(&Topic::CredentialRevocations) {
            tokio::task::yield_now().await;
        }
        let event = Event::new(
            EventPayload::CredentialRevoked { credential_id: issued.token.credential_id.to_string() },
            OffsetDateTime::now_utc(),
        );
        // Not revoked in the store: the event alone refuses nothing.
        bus.publish(&Topic::CredentialRevocations, &event).unwrap();
        while !auth.credentials().is_empty() {
            tokio::task::yield_now().await;
        }
        let caller = auth.authenticate(Some(issued.token.expose()), client).await.unwrap();
        assert_eq!(caller.agent_id(), Some(agent.clone()), "a forged revocation refuses nothing");
        let stream = auth.admit_stream(&caller, &agent, client, &shutdown).unwrap();
        store.revoke_credential(&agent, &issued.token.credential_id, OffsetDateTime::now_utc()).unwrap();
        bus.publish(&Topic::CredentialRevocations, &event).unwrap();
        while !stream.stop().is_cancelled() {
            tokio::task::yield_now().await;
        }
        store.failure.set_failing(true);
        let refused = auth.authenticate(Some(issued.token.expose()), client).await;
        assert_eq!(refused.map(drop), Err(AuthError::Refused), "refused without a read");
        shutdown.cancel();
        running.await.unwrap();
    }

    #[test]
    fn an_announcement_reads_back_as_its_job_and_instant() {
        let at = datetime!(2026-02-22 12:00:05.25 UTC);
        let event = Event::new(EventPayload::JobScheduled { job_id: 42, next_fire_at: at }, at);
        assert_eq!(announced_job(&event.to_json()), Some((42, at)));
        assert_eq!(announced_job(r#"{"job_id":"42","next_fire_at":"x"}"#), None);
        assert_eq!(announced_job("not json"), None);
    }
}
