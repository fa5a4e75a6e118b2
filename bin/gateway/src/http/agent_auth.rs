//! Who an agent-facing request comes from, whether it may act as the agent it names, and whether that agent is
//! over its rate limit (docs/api.md, "Agent authentication" and "Rate limits").
//!
//! Every agent-facing handler goes through [`AgentAuth`] in two steps, so that the answers come in one order
//! whatever the endpoint: 401 before anything about the body, then the body's own 400/422 or 403/429.
//!
//! ```ignore
//! // 1. Before the body is read: who is calling (401 for a missing, unknown or revoked token while auth is on,
//! //    401 `token_expired` for an expired one, 429 `too_many_refusals` for an address that presented too many
//! //    refused tokens this second).
//! let caller = state.agent_auth.authenticate(request.headers(), client).await?;
//! let body = read_body(request).await?;
//! // 2. Once the body is read: the agent it names must be the caller's (403 `identity_mismatch`), and for
//! //    messages and tool calls the agent's request is counted (429 `rate_limited` with `Retry-After`).
//! state.agent_auth.admit(&caller, Named::Agent(&agent_id), Access::Act).await?;
//! ```
//!
//! An endpoint that knows the agent before any body (its event stream, `GET /gateway/agents/{id}/reminders`) does
//! both in one call: `state.agent_auth.authorize(request.headers(), client, &agent_id, Access::Read).await?`.

use std::net::IpAddr;
use std::sync::Arc;

use gateway_core::{AgentId, PresentedToken, RateDecision, RateLimiter, run_blocking};
use http::HeaderMap;

use crate::credentials::{CredentialCache, Verdict, Verified};
use crate::http::auth::{OperatorAuth, bearer_token};
use crate::http::error::ApiError;
use crate::refusals::RefusalThrottle;

/// Agent authentication and rate limits, as the handlers apply them.
#[derive(Debug)]
pub struct AgentAuth {
    /// `--agent-auth` as resolved against `--listen`.
    required: bool,
    credentials: CredentialCache,
    /// Accepted where an agent's reminders are read: the operator may look at any agent's.
    operator: OperatorAuth,
    /// `None` with `--agent-rate-limit-per-minute 0`.
    limiter: Option<Arc<dyn RateLimiter>>,
    /// Refused tokens per client address: past the limit, the address is refused before any lookup.
    refusals: RefusalThrottle,
}

/// Who a request comes from.
#[derive(Debug, Clone)]
pub enum Caller {
    /// Agent auth is off: nobody is asked who they are.
    Open,
    /// An agent, by one of its credentials.
    Agent(Verified),
    /// The operator's token, where it is accepted ([`Access::Read`]).
    Operator,
}

impl Caller {
    /// The agent the caller authenticated as, if it did as one.
    pub fn agent_id(&self) -> Option<AgentId> {
        match self {
            Self::Agent(verified) => Some(verified.agent_id()),
            Self::Open | Self::Operator => None,
        }
    }
}

/// What the request does, which decides who may do it and whether it is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A heartbeat: the agent's own token; never rate-limited (an agent that cannot say it is alive gets evicted).
    Heartbeat,
    /// A message or a tool call: the agent's own token, and counted against its rate limit.
    Act,
    /// Reading the agent's reminders (its event stream, `GET …/reminders`): its own token or the operator's.
    Read,
}

/// The agent a request body names.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    Agent(&'a AgentId),
    /// The body is valid and names no agent (a DecisionLog without `identity`). With auth on an acting agent must
    /// name itself: refused, failing closed rather than guessing.
    Nobody,
    /// The body is invalid and its agent could not be read: it will be refused for what it is, but it still counts
    /// against the caller's limit.
    Unreadable,
}

impl AgentAuth {
    pub fn new(
        required: bool,
        credentials: CredentialCache,
        operator: OperatorAuth,
        limiter: Option<Arc<dyn RateLimiter>>,
    ) -> Self {
        Self { required, credentials, operator, limiter, refusals: RefusalThrottle::default() }
    }

    pub fn is_required(&self) -> bool {
        self.required
    }

    /// The cache of verified credentials (revocations go through it).
    pub fn credentials(&self) -> &CredentialCache {
        &self.credentials
    }

    /// Who is calling, from `client` (its address). While auth is on: 401 `unauthorized` without a token, or with
    /// one that is malformed, unknown, revoked or wrong, 401 `token_expired` with an expired one; the operator's
    /// token is recognized here and refused later where it does not serve. Every refused token counts against
    /// `client`, and past [`crate::refusals::MAX_REFUSALS_PER_SECOND`] in a second any token it presents (but the
    /// operator's) gets 429 `too_many_refusals` for the rest of that second, before the cache or the store is
    /// asked. 503 when the token's credential must be read and the store cannot be. While auth is off:
    /// [`Caller::Open`], whatever the headers hold.
    pub async fn authenticate(&self, headers: &HeaderMap, client: IpAddr) -> Result<Caller, ApiError> {
        if !self.required {
            return Ok(Caller::Open);
        }
        let token = bearer_token(headers).ok_or_else(|| needs_token("an agent token"))?;
        let presented = PresentedToken::parse(token);
        if presented.is_none() && self.operator.accepts(token) {
            return Ok(Caller::Operator);
        }
        if self.refusals.is_throttled(client) {
            return Err(ApiError::too_many_refusals());
        }
        let verdict = match presented {
            Some(presented) => self.credentials.verify(presented).await?,
            None => Verdict::Refused,
        };
        match verdict {
            Verdict::Verified(verified) => Ok(Caller::Agent(verified)),
            Verdict::Refused => {
                self.refusals.refused(client);
                Err(ApiError::unauthorized())
            }
            Verdict::Expired => {
                self.refusals.refused(client);
                Err(ApiError::token_expired())
            }
        }
    }

    /// Whether `caller` may do `access` as the agent the body names (403 `identity_mismatch` when not), then, for
    /// [`Access::Act`], counts the request against the agent's limit (429 `rate_limited` when over it): the
    /// authenticated agent's with auth on, the named one's with auth off (a body that names none is not counted
    /// then).
    pub async fn admit(&self, caller: &Caller, named: Named<'_>, access: Access) -> Result<(), ApiError> {
        let (counted, refusal) = match caller {
            Caller::Open => match named {
                Named::Agent(agent_id) => (Counted::Named(agent_id), None),
                Named::Nobody | Named::Unreadable => (Counted::Nobody, None),
            },
            Caller::Operator if access == Access::Read => return Ok(()),
            Caller::Operator => {
                return Err(ApiError::identity_mismatch("the operator token does not act for agents: use the agent's"));
            }
            Caller::Agent(verified) => {
                let refusal = match named {
                    Named::Agent(agent_id) if !verified.is_agent(agent_id) => {
                        Some(ApiError::identity_mismatch("the agent named differs from the token's agent"))
                    }
                    Named::Nobody if access != Access::Read => Some(ApiError::identity_mismatch(
                        "identity.agent_id is required with agent auth on, and must be the token's agent",
                    )),
                    Named::Agent(_) | Named::Nobody | Named::Unreadable => None,
                };
                let counted = match named {
                    // Named and not refused: the credential's own agent, already at hand as an `AgentId`.
                    Named::Agent(agent_id) if refusal.is_none() => Counted::Named(agent_id),
                    Named::Agent(_) | Named::Nobody | Named::Unreadable => Counted::Credential(verified),
                };
                (counted, refusal)
            }
        };
        // A refused request counts too (it is the authenticated agent's request all the same); the refusal is
        // what it is told.
        let limited = match counted {
            _ if access != Access::Act => Ok(()),
            Counted::Named(agent_id) => self.count(agent_id).await,
            Counted::Credential(verified) => self.count(&verified.agent_id()).await,
            Counted::Nobody => Ok(()),
        };
        refusal.map_or(limited, Err)
    }

    /// [`Self::authenticate`] and [`Self::admit`] at once, for an endpoint whose path or query names the agent.
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
        agent_id: &AgentId,
        access: Access,
    ) -> Result<Caller, ApiError> {
        let caller = self.authenticate(headers, client).await?;
        self.admit(&caller, Named::Agent(agent_id), access).await?;
        Ok(caller)
    }

    async fn count(&self, agent_id: &AgentId) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else { return Ok(()) };
        let now = tokio::time::Instant::now().into_std();
        let decision = if limiter.is_shared() {
            // A round trip, off the runtime's workers. A lost blocking task lets the request through, as the
            // shared limiter itself does when Redis does not answer.
            let (limiter, agent_id) = (Arc::clone(limiter), agent_id.clone());
            Box::pin(run_blocking(move || limiter.check(&agent_id, now))).await.unwrap_or(RateDecision::Allowed)
        } else {
            limiter.check(agent_id, now)
        };
        match decision {
            RateDecision::Allowed => Ok(()),
            RateDecision::Limited { retry_after } => Err(ApiError::rate_limited(retry_after)),
        }
    }
}

/// Whose request [`AgentAuth::admit`] counts: the agent the body names (with auth on, only once it is the
/// credential's), else the credential's agent, else nobody.
enum Counted<'a> {
    Named(&'a AgentId),
    Credential(&'a Verified),
    Nobody,
}

fn needs_token(what: &str) -> ApiError {
    ApiError::unauthorized().with_detail(format!("agent auth is on: send Authorization: Bearer <{what}>"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gateway_core::{AgentCredentialStore, FixedWindowLimiter, InMemoryAgentCredentialStore, IssuedToken};
    use http::{HeaderValue, StatusCode};
    use time::OffsetDateTime;

    use super::*;

    const OPERATOR: &str = "operator-token-0123456789";
    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    struct Fixture {
        store: Arc<InMemoryAgentCredentialStore>,
        auth: AgentAuth,
    }

    fn fixture(required: bool, limit: Option<u32>) -> Fixture {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let credentials = CredentialCache::new(store.clone(), Arc::new(gateway_core::SystemClock));
        let limiter = limit.map(|limit| Arc::new(FixedWindowLimiter::per_minute(limit)) as Arc<dyn RateLimiter>);
        Fixture { store, auth: AgentAuth::new(required, credentials, OperatorAuth::new(OPERATOR), limiter) }
    }

    impl Fixture {
        fn token(&self, agent: &str) -> String {
            self.token_expiring(agent, None)
        }

        fn token_expiring(&self, agent: &str, expires_at: Option<OffsetDateTime>) -> String {
            let issued = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            let record = issued.record(AgentId::new(agent).unwrap(), OffsetDateTime::now_utc());
            self.store.insert_credential(&gateway_core::CredentialRecord { expires_at, ..record }).unwrap();
            issued.expose().to_owned()
        }
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        headers
    }

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    fn status<T: std::fmt::Debug>(outcome: Result<T, ApiError>) -> StatusCode {
        outcome.map_or_else(|error| error.status, |_| StatusCode::OK)
    }

    #[tokio::test]
    async fn with_auth_on_only_the_agents_own_token_acts_for_it() {
        let fixture = fixture(true, None);
        let auth = &fixture.auth;
        let token = fixture.token("agent-a");
        let a = agent("agent-a");
        let caller = auth.authenticate(&bearer(&token), CLIENT).await.unwrap();
        assert_eq!(caller.agent_id(), Some(a.clone()));
        for access in [Access::Heartbeat, Access::Act, Access::Read] {
            assert_eq!(status(auth.admit(&caller, Named::Agent(&a), access).await), StatusCode::OK);
            let other = auth.admit(&caller, Named::Agent(&agent("agent-b")), access).await.unwrap_err();
            assert_eq!((other.status, other.reason), (StatusCode::FORBIDDEN, "identity_mismatch"), "{access:?}");
        }
        assert_eq!(status(auth.admit(&caller, Named::Nobody, Access::Act).await), StatusCode::FORBIDDEN);
        assert_eq!(status(auth.admit(&caller, Named::Unreadable, Access::Act).await), StatusCode::OK);

        let unknown = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
        for headers in [HeaderMap::new(), bearer("agt_short"), bearer(unknown.expose()), bearer("not-the-operator")] {
            let refused = auth.authenticate(&headers, CLIENT).await.unwrap_err();
            assert_eq!((refused.status, refused.reason), (StatusCode::UNAUTHORIZED, "unauthorized"), "{headers:?}");
        }
    }

    #[tokio::test]
    async fn the_operator_token_reads_any_agents_reminders_but_acts_for_none() {
        let fixture = fixture(true, Some(1));
        let auth = &fixture.auth;
        let a = agent("agent-a");
        assert!(matches!(auth.authorize(&bearer(OPERATOR), CLIENT, &a, Access::Read).await, Ok(Caller::Operator)));
        assert!(matches!(auth.authorize(&bearer(OPERATOR), CLIENT, &a, Access::Read).await, Ok(Caller::Operator)));
        for access in [Access::Heartbeat, Access::Act] {
            assert_eq!(status(auth.authorize(&bearer(OPERATOR), CLIENT, &a, access).await), StatusCode::FORBIDDEN);
        }
    }

    #[tokio::test]
    async fn with_auth_off_nothing_is_asked_and_the_named_agent_is_counted() {
        let fixture = fixture(false, Some(2));
        let auth = &fixture.auth;
        let caller = auth.authenticate(&HeaderMap::new(), CLIENT).await.unwrap();
        assert!(matches!(caller, Caller::Open));
        let (a, b) = (agent("agent-a"), agent("agent-b"));
        for _ in 0..2 {
            auth.admit(&caller, Named::Agent(&a), Access::Act).await.unwrap();
        }
        let limited = auth.admit(&caller, Named::Agent(&a), Access::Act).await.unwrap_err();
        assert_eq!((limited.status, limited.reason), (StatusCode::TOO_MANY_REQUESTS, "rate_limited"));
        assert_eq!(limited.retry_after_s, Some(60));
        // Heartbeats and reads are never counted; another agent has its own window; a body naming nobody passes.
        auth.admit(&caller, Named::Agent(&a), Access::Heartbeat).await.unwrap();
        auth.admit(&caller, Named::Agent(&a), Access::Read).await.unwrap();
        auth.admit(&caller, Named::Agent(&b), Access::Act).await.unwrap();
        for _ in 0..5 {
            auth.admit(&caller, Named::Nobody, Access::Act).await.unwrap();
        }
    }

    #[tokio::test]
    async fn with_auth_on_the_tokens_agent_is_counted_invalid_requests_included() {
        let fixture = fixture(true, Some(2));
        let auth = &fixture.auth;
        let caller = auth.authenticate(&bearer(&fixture.token("agent-a")), CLIENT).await.unwrap();
        auth.admit(&caller, Named::Unreadable, Access::Act).await.unwrap();
        let mismatch = auth.admit(&caller, Named::Agent(&agent("agent-b")), Access::Act).await.unwrap_err();
        assert_eq!(mismatch.status, StatusCode::FORBIDDEN, "refused, and counted");
        let limited = auth.admit(&caller, Named::Agent(&agent("agent-a")), Access::Act).await.unwrap_err();
        assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(limited.retry_after_s.is_some_and(|seconds| seconds <= Duration::from_secs(60).as_secs()));
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_read_is_a_503_not_a_guess() {
        let fixture = fixture(true, None);
        let token = fixture.token("agent-a");
        fixture.store.failure.set_failing(true);
        let refused = fixture.auth.authenticate(&bearer(&token), CLIENT).await.unwrap_err();
        assert_eq!((refused.status, refused.reason), (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"));
    }

    /// An expired credential's token is 401 `token_expired`, told apart from an unknown one, and answered from the
    /// cache once read (no read per request); a token that expires later works until then.
    #[tokio::test]
    async fn an_expired_token_is_told_so_without_a_read_per_request() {
        let fixture = fixture(true, None);
        let expired = fixture.token_expiring("agent-a", Some(OffsetDateTime::now_utc() - time::Duration::seconds(1)));
        let later = fixture.token_expiring("agent-a", Some(OffsetDateTime::now_utc() + time::Duration::hours(1)));
        for _ in 0..3 {
            let refused = fixture.auth.authenticate(&bearer(&expired), CLIENT).await.unwrap_err();
            assert_eq!((refused.status, refused.reason), (StatusCode::UNAUTHORIZED, "token_expired"));
        }
        assert_eq!(fixture.auth.credentials().store_reads(), 1, "read once, then answered from the cache");
        let caller = fixture.auth.authenticate(&bearer(&later), CLIENT).await.unwrap();
        assert_eq!(caller.agent_id(), Some(agent("agent-a")));
    }

    /// Past 20 refused tokens in a second, an address gets 429 `too_many_refusals` for any agent token, the valid
    /// one included, without a read; another address is not held back, and the operator's token still serves.
    #[tokio::test(start_paused = true)]
    async fn an_address_that_presents_too_many_refused_tokens_is_throttled_before_any_read() {
        let fixture = fixture(true, None);
        let auth = &fixture.auth;
        let valid = fixture.token("agent-a");
        auth.authenticate(&bearer(&valid), CLIENT).await.unwrap();
        let reads = auth.credentials().store_reads();
        for n in 0..crate::refusals::MAX_REFUSALS_PER_SECOND {
            let made_up = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            let refused = auth.authenticate(&bearer(made_up.expose()), CLIENT).await.unwrap_err();
            assert_eq!(refused.reason, "unauthorized", "refusal {n}");
        }
        assert_eq!(auth.credentials().store_reads(), reads + 20);
        for token in [IssuedToken::issue(OffsetDateTime::now_utc()).unwrap().expose().to_owned(), valid.clone()] {
            let refused = auth.authenticate(&bearer(&token), CLIENT).await.unwrap_err();
            assert_eq!((refused.status, refused.reason), (StatusCode::TOO_MANY_REQUESTS, "too_many_refusals"));
            assert_eq!(refused.retry_after_s, Some(1));
        }
        assert_eq!(auth.credentials().store_reads(), reads + 20, "no read once throttled");
        let elsewhere = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        assert!(auth.authenticate(&bearer(&valid), elsewhere).await.is_ok(), "another address is not held back");
        assert!(matches!(auth.authenticate(&bearer(OPERATOR), CLIENT).await, Ok(Caller::Operator)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(auth.authenticate(&bearer(&valid), CLIENT).await.is_ok(), "the next second works");
    }
}
