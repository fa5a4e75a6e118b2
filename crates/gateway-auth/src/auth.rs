//! [`Auth`], the component: what it works through, its settings, and what it does besides the access rules of
//! `access.rs` (issuing and revoking credentials, admitting agent streams, and its upkeep loop).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S;
use gateway_core::ports::rate_limit::AGENT_RATE_LIMIT_PER_MINUTE;
use gateway_core::{
    AdminTokenStore, AgentCredentialStore, AgentId, BackgroundLoop, Clock, ComponentHealth, CredentialId,
    CredentialRecord, Event, EventPayload, EventPublisher, FixedWindowLimiter, IssuedToken, RateLimiter, StoreError,
    Topic, run_blocking,
};
use tokio_util::sync::CancellationToken;

use crate::AuthError;
use crate::access::Caller;
use crate::admin_token::{OperatorToken, StoredTokenRefresh};
use crate::credentials::{
    CREDENTIAL_USE_RECORD_INTERVAL, CredentialCache, REVOCATION_POLL_INTERVAL, revoked_credential,
};
use crate::operator::OperatorAuth;
use crate::refusals::RefusalThrottle;
use crate::streams::{
    AdmittedStream, AgentStreams, DEFAULT_STREAMS_PER_ADDRESS, DEFAULT_STREAMS_PER_AGENT, MAX_AGENT_STREAMS,
    StreamLimits,
};

/// What [`Auth`] works through.
#[derive(Debug, Clone)]
pub struct AuthPorts {
    /// Agent credentials: read when the cache has no answer, polled for revocations, written by issue and revoke.
    pub credentials: Arc<dyn AgentCredentialStore>,
    /// Where the operator token is stored: read again and again while [`OperatorToken::Stored`] is in use.
    pub admin_tokens: Arc<dyn AdminTokenStore>,
    /// Where a revocation is announced to the other instances (`internal:credential-revocations`).
    pub publisher: Arc<dyn EventPublisher>,
    /// Where agents' requests are counted when it is not this process alone (several instances share a limit through
    /// Redis); `None`: a [`FixedWindowLimiter`] of this process.
    pub limiter: Option<Arc<dyn RateLimiter>>,
    /// The wall clock credentials are issued, revoked and expired by.
    pub clock: Arc<dyn Clock>,
}

/// What [`Auth`] decides by.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Whether agents must present their own token (`--agent-auth` as resolved against the listener). Without,
    /// every agent request is [`Caller::Open`].
    pub agent_tokens_required: bool,
    /// Where the operator token comes from.
    pub operator_token: OperatorToken,
    /// Counted requests (messages, tool calls) per agent per one-minute window; 0: no limit.
    pub rate_limit_per_minute: u32,
    /// Open agent streams from one client address.
    pub streams_per_address: usize,
    /// Open agent streams of one agent.
    pub streams_per_agent: usize,
    /// Open agent streams in all.
    pub max_agent_streams: usize,
    /// How often the credential cache writes the last uses it saw (`--last-use-interval-s`).
    pub credential_use_record_interval: Duration,
}

impl Default for AuthConfig {
    /// Agent tokens required (fail closed), no operator, the defaults of the limits.
    fn default() -> Self {
        Self {
            agent_tokens_required: true,
            operator_token: OperatorToken::Disabled,
            rate_limit_per_minute: AGENT_RATE_LIMIT_PER_MINUTE,
            streams_per_address: DEFAULT_STREAMS_PER_ADDRESS,
            streams_per_agent: DEFAULT_STREAMS_PER_AGENT,
            max_agent_streams: MAX_AGENT_STREAMS,
            credential_use_record_interval: CREDENTIAL_USE_RECORD_INTERVAL,
        }
    }
}

/// Who a caller is and what it may do. Cheap to clone; clones share everything. Run [`Auth::run`] once (it follows
/// revocations made elsewhere and a rotated operator token); the checks work without it, but then a credential
/// revoked on another instance is refused here only once its cache entry ages out ([`crate::REVALIDATE_AFTER`]).
///
/// The fields a request's check reads are held here rather than behind one more pointer: an agent request with
/// agent auth on checks its token first, on every heartbeat.
#[derive(Debug, Clone)]
pub struct Auth {
    pub(crate) required: bool,
    pub(crate) credentials: CredentialCache,
    pub(crate) operator: OperatorAuth,
    /// `None` with a limit of 0.
    pub(crate) limiter: Option<Arc<dyn RateLimiter>>,
    /// Refused tokens per client address: past the limit, the address is refused before any lookup.
    pub(crate) refusals: Arc<RefusalThrottle>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    store: Arc<dyn AgentCredentialStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    /// The operator token's store, with the token stored there in use.
    stored_token: Option<StoredTokenRefresh>,
    streams: AgentStreams,
    health: ComponentHealth,
}

/// A credential just issued: its token, shown once, and its record.
#[derive(Debug)]
pub struct IssuedCredential {
    pub token: IssuedToken,
    pub record: CredentialRecord,
}

impl Auth {
    pub fn new(ports: AuthPorts, config: AuthConfig) -> Self {
        let AuthPorts { credentials: store, admin_tokens, publisher, limiter, clock } = ports;
        let operator = OperatorAuth::of(&config.operator_token);
        let stored_token = matches!(config.operator_token, OperatorToken::Stored(_))
            .then(|| StoredTokenRefresh { store: admin_tokens, operator: operator.clone() });
        // The in-process limiter is the fallback whenever no shared one is given: "no limit" is only ever the
        // configured 0, never the absence of Redis.
        let limiter = match (config.rate_limit_per_minute, limiter) {
            (0, _) => None,
            (_, Some(shared)) => Some(shared),
            (limit, None) => Some(Arc::new(FixedWindowLimiter::per_minute(limit)) as Arc<dyn RateLimiter>),
        };
        let streams = AgentStreams::new(StreamLimits {
            per_address: config.streams_per_address,
            per_agent: config.streams_per_agent,
            total: config.max_agent_streams,
        });
        Self {
            required: config.agent_tokens_required,
            credentials: CredentialCache::new(
                Arc::clone(&store),
                Arc::clone(&clock),
                config.credential_use_record_interval,
            ),
            operator,
            limiter,
            refusals: Arc::default(),
            shared: Arc::new(Shared {
                store,
                publisher,
                clock,
                stored_token,
                streams,
                health: ComponentHealth::new("auth"),
            }),
        }
    }

    /// Whether agents must present their own token.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// The cache of verified credentials, for its counts.
    pub fn credentials(&self) -> &CredentialCache {
        &self.credentials
    }

    /// `Ok` when `token` (a request's bearer token, if it had one) is the operator's, else [`AuthError::Refused`].
    pub fn check_operator(&self, token: Option<&str>) -> Result<(), AuthError> {
        self.operator.check(token)
    }

    /// Issues a credential of `agent_id`, valid for `lifetime` (a whole number of seconds, at most ten years) or
    /// until revoked. The token is in the answer only: the store keeps its hash.
    pub async fn issue(&self, agent_id: AgentId, lifetime: Option<Duration>) -> Result<IssuedCredential, AuthError> {
        let lifetime = lifetime.map(lifetime_s).transpose()?;
        let created_at = self.shared.clock.now();
        let token = IssuedToken::issue(created_at).map_err(|_| {
            tracing::error!("the operating system has no randomness source: no agent token issued");
            AuthError::NoRandomness
        })?;
        // To the millisecond, which every backend keeps exactly: the instant answered is the one listed later.
        let expires_at = lifetime.map(|seconds| {
            let at = created_at + time::Duration::seconds(seconds);
            at.replace_nanosecond(at.nanosecond() / 1_000_000 * 1_000_000).unwrap_or(at)
        });
        let record = CredentialRecord { expires_at, ..token.record(agent_id.clone(), created_at) };
        let (store, inserted) = (Arc::clone(&self.shared.store), record.clone());
        run_blocking(move || store.insert_credential(&inserted)).await.map_err(StoreError::from)??;
        tracing::info!(%agent_id, credential_id = %token.credential_id, "agent credential issued");
        Ok(IssuedCredential { token, record })
    }

    /// `agent_id`'s credentials by id (oldest first), revoked ones included, `limit` at most, after `after`.
    pub async fn credentials_of(
        &self,
        agent_id: AgentId,
        after: Option<CredentialId>,
        limit: usize,
    ) -> Result<Vec<CredentialRecord>, AuthError> {
        let store = Arc::clone(&self.shared.store);
        let rows = run_blocking(move || store.agent_credentials(&agent_id, after.as_ref(), limit))
            .await
            .map_err(StoreError::from)??;
        Ok(rows)
    }

    /// Every agent's credentials, by credential id (oldest first), after `after`, at most `limit`.
    pub async fn all_credentials(
        &self,
        after: Option<CredentialId>,
        limit: usize,
    ) -> Result<Vec<CredentialRecord>, AuthError> {
        let store = Arc::clone(&self.shared.store);
        let rows =
            run_blocking(move || store.all_credentials(after.as_ref(), limit)).await.map_err(StoreError::from)??;
        Ok(rows)
    }

    /// Revokes `agent_id`'s credential `credential_id`, or finds it revoked already (with its first `revoked_at`);
    /// [`AuthError::UnknownCredential`] when the agent has no such credential. The credential stops authenticating
    /// here before this returns, its event streams are closed, and the revocation is announced to the other
    /// instances (which read the row again rather than take the announcement on its word).
    pub async fn revoke(&self, agent_id: AgentId, credential_id: CredentialId) -> Result<CredentialRecord, AuthError> {
        let at = self.shared.clock.now();
        let (store, agent, id) = (Arc::clone(&self.shared.store), agent_id.clone(), credential_id.clone());
        let revoked = run_blocking(move || store.revoke_credential(&agent, &id, at))
            .await
            .map_err(StoreError::from)??
            .ok_or(AuthError::UnknownCredential)?;
        self.credentials.invalidate(&credential_id);
        let event = Event::new(
            EventPayload::CredentialRevoked { credential_id: credential_id.to_string() },
            self.shared.clock.now(),
        );
        if let Err(error) = self.shared.publisher.publish(&Topic::CredentialRevocations, &event) {
            // Other instances then stop trusting it at their next poll, or when their cache entries come due
            // (docs/architecture.md).
            tracing::warn!(%error, %credential_id, "credential revocation not announced to other instances");
        }
        tracing::info!(%agent_id, %credential_id, "agent credential revoked");
        Ok(revoked)
    }

    /// A `credential_revoked` event (its JSON) reached this instance: the credential it names is read again, and
    /// refused from then on only if the store says it is revoked. A forged event costs one read, never a valid
    /// agent's access.
    pub async fn revocation_announced(&self, event_json: &str) {
        match revoked_credential(event_json) {
            Some(credential_id) => self.credentials.recheck(&credential_id).await,
            None => tracing::debug!("unreadable credential revocation skipped"),
        }
    }

    /// Revocation events may have been missed (a subscriber that fell behind, an event bridge that reconnected after
    /// a gap): every verified credential is read again at its next use.
    pub fn revocations_missed(&self) {
        self.credentials.invalidate_all();
    }

    /// Lets in an event stream of `agent_id`'s reminders, opened by `caller` (who was authorized to read them,
    /// [`crate::Access::Read`]) from `client`: refused with [`AuthError::TooManyStreams`] when the agent, then the address,
    /// then the instance holds as many as it may. The stream stops with `shutdown`, and, opened with an agent's
    /// credential, when that credential is revoked or expires.
    pub fn admit_stream(
        &self,
        caller: &Caller,
        agent_id: &AgentId,
        client: IpAddr,
        shutdown: &CancellationToken,
    ) -> Result<AdmittedStream, AuthError> {
        let places = self.shared.streams.admit(agent_id, client)?;
        let (stop, revocation) = match caller {
            Caller::Agent(verified) => {
                let (stop, guard) = self.credentials.stream_stop(verified, shutdown);
                (stop, Some(guard))
            }
            Caller::Open | Caller::Operator => (shutdown.clone(), None),
        };
        Ok(AdmittedStream { stop, _places: places, _revocation: revocation })
    }

    /// Agent streams open right now.
    pub fn open_agent_streams(&self) -> usize {
        self.shared.streams.open()
    }

    /// Streams of `agent_id` open right now.
    pub fn open_streams_of(&self, agent_id: &AgentId) -> usize {
        self.shared.streams.open_for_agent(agent_id)
    }

    /// Whether the upkeep loop runs, and whether its last revocation poll worked.
    pub fn health(&self) -> ComponentHealth {
        self.shared.health.clone()
    }

    /// The revocation poll every [`REVOCATION_POLL_INTERVAL`], until `shutdown`.
    async fn poll_revocations(&self, shutdown: &CancellationToken) {
        let mut poll = tokio::time::interval(REVOCATION_POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                _ = poll.tick() => {}
            }
            match self.credentials.poll().await {
                Ok(()) => {
                    failing = false;
                    self.shared.health.recovered();
                }
                Err(error) => {
                    // Entries then age out and requests read their rows themselves: fail closed, not open.
                    if !failing {
                        tracing::warn!(%error, "cannot poll the store for credential revocations");
                    }
                    failing = true;
                    self.shared.health.degraded(format!("cannot poll the store for credential revocations: {error}"));
                }
            }
        }
    }
}

/// `lifetime` in whole seconds, if it is one of the lifetimes a credential may have.
fn lifetime_s(lifetime: Duration) -> Result<i64, AuthError> {
    let whole = lifetime.subsec_nanos() == 0 && (1..=MAX_TOKEN_LIFETIME_S).contains(&lifetime.as_secs());
    whole.then(|| i64::try_from(lifetime.as_secs()).ok()).flatten().ok_or(AuthError::InvalidLifetime)
}

/// The upkeep: the revocation poll, and, with the stored operator token, its refresh every
/// [`crate::ADMIN_TOKEN_REFRESH_INTERVAL`]. Returns only when `shutdown` is cancelled.
impl BackgroundLoop for Auth {
    fn name(&self) -> &'static str {
        "auth"
    }

    async fn run(&self, shutdown: CancellationToken) {
        let _running = self.shared.health.start();
        let refresh = async {
            if let Some(stored) = &self.shared.stored_token {
                stored.run(&shutdown).await;
            }
        };
        tokio::join!(self.poll_revocations(&shutdown), refresh);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use gateway_core::{InMemoryAdminTokenStore, InMemoryAgentCredentialStore, ManualClock, RecordingPublisher};

    use super::*;
    use crate::{Access, AdminToken, Named};

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    struct Fixture {
        store: Arc<InMemoryAgentCredentialStore>,
        publisher: Arc<RecordingPublisher>,
        clock: ManualClock,
        auth: Auth,
    }

    fn fixture(config: AuthConfig) -> Fixture {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let publisher = Arc::new(RecordingPublisher::default());
        let clock = ManualClock::at_fixed_start();
        let ports = AuthPorts {
            credentials: store.clone(),
            admin_tokens: Arc::new(InMemoryAdminTokenStore::default()),
            publisher: publisher.clone(),
            limiter: None,
            clock: Arc::new(clock.clone()),
        };
        Fixture { store, publisher, clock, auth: Auth::new(ports, config) }
    }

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    /// Issued with an expiry to the millisecond; revoked: refused at once, announced, and revoking again answers
    /// the first revocation; another agent's credential id is unknown.
    #[tokio::test]
    async fn an_issued_token_authenticates_its_agent_until_revoked_and_the_revocation_is_announced() {
        let fixture = fixture(AuthConfig::default());
        let auth = &fixture.auth;
        let issued = auth.issue(agent("agent-a"), Some(Duration::from_secs(60))).await.unwrap();
        let record = &issued.record;
        assert_eq!((record.agent_id.as_str(), record.revoked_at), ("agent-a", None));
        assert_eq!(record.expires_at, Some(record.created_at + time::Duration::seconds(60)));
        assert_eq!(record.expires_at.unwrap().nanosecond() % 1_000_000, 0, "to the millisecond");
        let caller = auth.authenticate(Some(issued.token.expose()), CLIENT).await.unwrap();
        assert_eq!(caller.agent_id(), Some(agent("agent-a")));
        let listed = auth.credentials_of(agent("agent-a"), None, 10).await.unwrap();
        assert_eq!(listed, std::slice::from_ref(&issued.record));

        let id = issued.token.credential_id.clone();
        let unknown = auth.revoke(agent("agent-b"), id.clone()).await.unwrap_err();
        assert_eq!(unknown, AuthError::UnknownCredential, "another agent's credential");
        let revoked = auth.revoke(agent("agent-a"), id.clone()).await.unwrap();
        assert_eq!(revoked.revoked_at, Some(fixture.clock.now()));
        let refused = auth.authenticate(Some(issued.token.expose()), CLIENT).await.unwrap_err();
        assert_eq!(refused, AuthError::Refused, "refused here at once");
        let announced = fixture.publisher.on_topic(&Topic::CredentialRevocations);
        assert_eq!(announced.len(), 1);
        assert_eq!(revoked_credential(&announced[0].to_json()), Some(id.clone()));
        fixture.clock.advance(time::Duration::seconds(5));
        let again = auth.revoke(agent("agent-a"), id).await.unwrap();
        assert_eq!(again.revoked_at, revoked.revoked_at, "the first revocation's instant");
    }

    #[tokio::test]
    async fn a_lifetime_is_whole_seconds_up_to_ten_years() {
        let fixture = fixture(AuthConfig::default());
        let ten_years = Duration::from_secs(MAX_TOKEN_LIFETIME_S);
        for lifetime in [Duration::ZERO, Duration::from_millis(1_500), ten_years + Duration::from_secs(1)] {
            let refused = fixture.auth.issue(agent("agent-a"), Some(lifetime)).await.unwrap_err();
            assert_eq!(refused, AuthError::InvalidLifetime, "{lifetime:?}");
        }
        assert!(fixture.auth.issue(agent("agent-a"), Some(ten_years)).await.is_ok());
        assert!(fixture.auth.credentials_of(agent("agent-a"), None, 10).await.unwrap().len() == 1);
    }

    /// A revocation event re-reads the credential: a forged one refuses nothing; one the store confirms closes the
    /// credential's streams at once.
    #[tokio::test]
    async fn an_announced_revocation_is_checked_against_the_store() {
        let fixture = fixture(AuthConfig::default());
        let auth = &fixture.auth;
        let issued = auth.issue(agent("agent-a"), None).await.unwrap();
        let caller = auth.authenticate(Some(issued.token.expose()), CLIENT).await.unwrap();
        let shutdown = CancellationToken::new();
        let stream = auth.admit_stream(&caller, &agent("agent-a"), CLIENT, &shutdown).unwrap();
        let event = Event::new(
            EventPayload::CredentialRevoked { credential_id: issued.token.credential_id.to_string() },
            fixture.clock.now(),
        );
        auth.revocation_announced(&event.to_json()).await;
        assert!(!stream.stop().is_cancelled(), "a forged revocation closes nothing");
        assert!(auth.authenticate(Some(issued.token.expose()), CLIENT).await.is_ok(), "nor refuses anything");
        let at = fixture.clock.now();
        fixture.store.revoke_credential(&agent("agent-a"), &issued.token.credential_id, at).unwrap();
        auth.revocation_announced("not json").await;
        assert!(!stream.stop().is_cancelled());
        auth.revocation_announced(&event.to_json()).await;
        assert!(stream.stop().is_cancelled(), "revoked in the store: its stream is closed");
        fixture.store.failure.set_failing(true);
        assert_eq!(auth.authenticate(Some(issued.token.expose()), CLIENT).await.unwrap_err(), AuthError::Refused);
    }

    /// A stream opened with agent auth off or by the operator stops only at shutdown; every admitted stream holds
    /// its places until dropped.
    #[tokio::test]
    async fn admitted_streams_hold_their_places_until_dropped() {
        let config = AuthConfig { agent_tokens_required: false, streams_per_agent: 1, ..AuthConfig::default() };
        let fixture = fixture(config);
        let auth = &fixture.auth;
        let shutdown = CancellationToken::new();
        let caller = auth.authenticate(None, CLIENT).await.unwrap();
        auth.admit(&caller, Named::Agent(&agent("agent-a")), Access::Read).await.unwrap();
        let stream = auth.admit_stream(&caller, &agent("agent-a"), CLIENT, &shutdown).unwrap();
        let refused = auth.admit_stream(&caller, &agent("agent-a"), CLIENT, &shutdown).unwrap_err();
        assert_eq!(refused, AuthError::TooManyStreams(crate::StreamCap::Agent));
        assert_eq!((auth.open_agent_streams(), auth.open_streams_of(&agent("agent-a"))), (1, 1));
        shutdown.cancel();
        assert!(stream.stop().is_cancelled());
        drop(stream);
        assert_eq!(auth.open_agent_streams(), 0);
    }

    /// The loop follows the stored operator token and reports itself running; a revocation poll that fails marks it
    /// degraded until one works again.
    #[tokio::test(start_paused = true)]
    async fn the_loop_follows_the_stored_token_and_reports_failed_polls() {
        let tokens = Arc::new(InMemoryAdminTokenStore::default());
        let first = crate::resolve_stored_admin_token(&*tokens, time::OffsetDateTime::now_utc()).unwrap();
        let old: AdminToken = first.generated.unwrap();
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let ports = AuthPorts {
            credentials: store.clone(),
            admin_tokens: tokens.clone(),
            publisher: Arc::new(RecordingPublisher::default()),
            limiter: None,
            clock: Arc::new(ManualClock::at_fixed_start()),
        };
        let auth = Auth::new(ports, AuthConfig { operator_token: first.token, ..AuthConfig::default() });
        assert!(auth.check_operator(Some(old.expose())).is_ok());
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let (auth, shutdown) = (auth.clone(), shutdown.clone());
            async move { auth.run(shutdown).await }
        });
        auth.health().running().await;
        let new = crate::rotate_admin_token(&*tokens, time::OffsetDateTime::now_utc()).unwrap();
        tokio::time::sleep(crate::ADMIN_TOKEN_REFRESH_INTERVAL * 2).await;
        assert_eq!(auth.check_operator(Some(old.expose())), Err(AuthError::Refused));
        assert!(auth.check_operator(Some(new.expose())).is_ok());
        assert!(auth.health().report().healthy);

        store.failure.set_failing(true);
        tokio::time::sleep(REVOCATION_POLL_INTERVAL * 2).await;
        assert!(!auth.health().report().healthy, "{:?}", auth.health().report());
        store.failure.set_failing(false);
        tokio::time::sleep(REVOCATION_POLL_INTERVAL * 2).await;
        assert!(auth.health().report().healthy);
        shutdown.cancel();
        running.await.unwrap();
        assert!(!auth.health().is_running());
    }
}
