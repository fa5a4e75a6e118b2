//! Who a request comes from, whether it may act as the agent it names, and whether that agent is over its rate limit
//! (docs/api.md, "Agent authentication" and "Rate limits").
//!
//! Every agent-facing request goes through [`Auth`] in two steps, so that the refusals come in one order whatever
//! the endpoint: who is calling before anything about the body, then the body's own refusals or these.
//!
//! ```ignore
//! // 1. Before the body is read: who is calling (`TokenRequired`, `Refused` for an unknown or revoked token while
//! //    agent auth is on, `Expired` for an expired one, `TooManyRefusals` for an address that presented too many
//! //    refused tokens this second).
//! let caller = auth.authenticate(bearer_token, client).await?;
//! let body = read_body(request).await?;
//! // 2. Once the body is read: the agent it names must be the caller's (`IdentityMismatch`), and for messages and
//! //    tool calls the agent's request is counted (`RateLimited`).
//! auth.admit(&caller, Named::Agent(&agent_id), Access::Act).await?;
//! ```
//!
//! An endpoint that knows the agent before any body (its event stream, its reminders) does both in one call:
//! `auth.authorize(bearer_token, client, &agent_id, Access::Read).await?`.

use std::net::IpAddr;
use std::sync::Arc;

use gateway_core::{AgentId, PresentedToken, RateDecision, run_blocking};

use crate::credentials::{Verdict, Verified};
use crate::{Auth, AuthError, Mismatch};

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
    /// Reading the agent's reminders (its event stream, its mailbox): its own token or the operator's.
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

impl Auth {
    /// Who is calling with `token` (a request's bearer token, if it had one) from `client` (its address). While
    /// agent auth is on: [`AuthError::TokenRequired`] without a token, [`AuthError::Refused`] with one that is
    /// malformed, unknown, revoked or wrong, [`AuthError::Expired`] with an expired one; the operator's token is
    /// recognized here and refused later where it does not serve. Every refused token counts against `client`,
    /// and past [`crate::MAX_REFUSALS_PER_SECOND`] in a second any token it presents (but the operator's) is
    /// refused with [`AuthError::TooManyRefusals`] for the rest of that second, before the cache or the store is
    /// asked. [`AuthError::Store`] when the token's credential must be read and the store cannot be. While agent
    /// auth is off: [`Caller::Open`], whatever the token.
    pub async fn authenticate(&self, token: Option<&str>, client: IpAddr) -> Result<Caller, AuthError> {
        if !self.required {
            return Ok(Caller::Open);
        }
        let token = token.ok_or(AuthError::TokenRequired)?;
        let presented = PresentedToken::parse(token);
        if presented.is_none() && self.operator.accepts(token) {
            return Ok(Caller::Operator);
        }
        if self.refusals.is_throttled(client) {
            return Err(AuthError::TooManyRefusals);
        }
        let verdict = match presented {
            Some(presented) => self.credentials.verify(presented).await?,
            None => Verdict::Refused,
        };
        match verdict {
            Verdict::Verified(verified) => Ok(Caller::Agent(verified)),
            Verdict::Refused => {
                self.refusals.refused(client);
                Err(AuthError::Refused)
            }
            Verdict::Expired => {
                self.refusals.refused(client);
                Err(AuthError::Expired)
            }
        }
    }

    /// Whether `caller` may do `access` as the agent the body names ([`AuthError::IdentityMismatch`] when not),
    /// then, for [`Access::Act`], counts the request against the agent's limit ([`AuthError::RateLimited`] when
    /// over it): the authenticated agent's with auth on, the named one's with auth off (a body that names none is
    /// not counted then).
    pub async fn admit(&self, caller: &Caller, named: Named<'_>, access: Access) -> Result<(), AuthError> {
        let (counted, refusal) = match caller {
            Caller::Open => match named {
                Named::Agent(agent_id) => (Counted::Named(agent_id), None),
                Named::Nobody | Named::Unreadable => (Counted::Nobody, None),
            },
            Caller::Operator if access == Access::Read => return Ok(()),
            Caller::Operator => return Err(AuthError::IdentityMismatch(Mismatch::OperatorActs)),
            Caller::Agent(verified) => {
                let refusal = match named {
                    Named::Agent(agent_id) if !verified.is_agent(agent_id) => Some(Mismatch::OtherAgent),
                    Named::Nobody if access != Access::Read => Some(Mismatch::Unnamed),
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
        refusal.map_or(limited, |mismatch| Err(AuthError::IdentityMismatch(mismatch)))
    }

    /// [`Self::authenticate`] and [`Self::admit`] at once, for a request whose path or query names the agent.
    pub async fn authorize(
        &self,
        token: Option<&str>,
        client: IpAddr,
        agent_id: &AgentId,
        access: Access,
    ) -> Result<Caller, AuthError> {
        let caller = self.authenticate(token, client).await?;
        self.admit(&caller, Named::Agent(agent_id), access).await?;
        Ok(caller)
    }

    async fn count(&self, agent_id: &AgentId) -> Result<(), AuthError> {
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
            RateDecision::Limited { retry_after } => Err(AuthError::RateLimited { retry_after }),
        }
    }
}

/// Whose request [`Auth::admit`] counts: the agent the body names (with auth on, only once it is the credential's),
/// else the credential's agent, else nobody.
enum Counted<'a> {
    Named(&'a AgentId),
    Credential(&'a Verified),
    Nobody,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gateway_core::{
        AgentCredentialStore, InMemoryAdminTokenStore, InMemoryAgentCredentialStore, IssuedToken, RecordingPublisher,
        StoreError,
    };
    use time::OffsetDateTime;

    use super::*;
    use crate::{AdminToken, AuthConfig, AuthPorts, OperatorToken};

    const OPERATOR: &str = "operator-token-0123456789";
    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    struct Fixture {
        store: Arc<InMemoryAgentCredentialStore>,
        auth: Auth,
    }

    /// Refusals are asserted as the variants the binary maps one to one onto its answers (its `http/error.rs`, whose
    /// tests hold each variant to its status, reason and `Retry-After`).
    fn fixture(required: bool, limit: Option<u32>) -> Fixture {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let ports = AuthPorts {
            credentials: store.clone(),
            admin_tokens: Arc::new(InMemoryAdminTokenStore::default()),
            publisher: Arc::new(RecordingPublisher::default()),
            limiter: None,
            clock: Arc::new(gateway_core::SystemClock),
        };
        let config = AuthConfig {
            agent_tokens_required: required,
            operator_token: OperatorToken::Given(AdminToken::new(OPERATOR.to_owned())),
            rate_limit_per_minute: limit.unwrap_or(0),
            ..AuthConfig::default()
        };
        Fixture { store, auth: Auth::new(ports, config) }
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

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    #[tokio::test]
    async fn with_auth_on_only_the_agents_own_token_acts_for_it() {
        let fixture = fixture(true, None);
        let auth = &fixture.auth;
        let token = fixture.token("agent-a");
        let a = agent("agent-a");
        let caller = auth.authenticate(Some(&token), CLIENT).await.unwrap();
        assert_eq!(caller.agent_id(), Some(a.clone()));
        for access in [Access::Heartbeat, Access::Act, Access::Read] {
            assert_eq!(auth.admit(&caller, Named::Agent(&a), access).await, Ok(()));
            let other = auth.admit(&caller, Named::Agent(&agent("agent-b")), access).await.unwrap_err();
            assert_eq!(other, AuthError::IdentityMismatch(Mismatch::OtherAgent), "{access:?}");
        }
        let unnamed = auth.admit(&caller, Named::Nobody, Access::Act).await;
        assert_eq!(unnamed, Err(AuthError::IdentityMismatch(Mismatch::Unnamed)));
        assert_eq!(auth.admit(&caller, Named::Unreadable, Access::Act).await, Ok(()));

        assert_eq!(auth.authenticate(None, CLIENT).await.unwrap_err(), AuthError::TokenRequired);
        let unknown = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
        for token in ["agt_short", unknown.expose(), "not-the-operator"] {
            let refused = auth.authenticate(Some(token), CLIENT).await.unwrap_err();
            assert_eq!(refused, AuthError::Refused, "{token:?}");
        }
    }

    #[tokio::test]
    async fn the_operator_token_reads_any_agents_reminders_but_acts_for_none() {
        let fixture = fixture(true, Some(1));
        let auth = &fixture.auth;
        let a = agent("agent-a");
        assert!(matches!(auth.authorize(Some(OPERATOR), CLIENT, &a, Access::Read).await, Ok(Caller::Operator)));
        assert!(matches!(auth.authorize(Some(OPERATOR), CLIENT, &a, Access::Read).await, Ok(Caller::Operator)));
        for access in [Access::Heartbeat, Access::Act] {
            let refused = auth.authorize(Some(OPERATOR), CLIENT, &a, access).await.unwrap_err();
            assert_eq!(refused, AuthError::IdentityMismatch(Mismatch::OperatorActs));
        }
    }

    #[tokio::test]
    async fn with_auth_off_nothing_is_asked_and_the_named_agent_is_counted() {
        let fixture = fixture(false, Some(2));
        let auth = &fixture.auth;
        let caller = auth.authenticate(None, CLIENT).await.unwrap();
        assert!(matches!(caller, Caller::Open));
        let (a, b) = (agent("agent-a"), agent("agent-b"));
        for _ in 0..2 {
            auth.admit(&caller, Named::Agent(&a), Access::Act).await.unwrap();
        }
        let limited = auth.admit(&caller, Named::Agent(&a), Access::Act).await.unwrap_err();
        let AuthError::RateLimited { retry_after } = limited else { panic!("not rate-limited: {limited:?}") };
        assert!(retry_after > Duration::from_secs(59) && retry_after <= Duration::from_secs(60), "{retry_after:?}");
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
        let caller = auth.authenticate(Some(&fixture.token("agent-a")), CLIENT).await.unwrap();
        auth.admit(&caller, Named::Unreadable, Access::Act).await.unwrap();
        let mismatch = auth.admit(&caller, Named::Agent(&agent("agent-b")), Access::Act).await.unwrap_err();
        assert_eq!(mismatch, AuthError::IdentityMismatch(Mismatch::OtherAgent), "refused, and counted");
        let limited = auth.admit(&caller, Named::Agent(&agent("agent-a")), Access::Act).await.unwrap_err();
        assert!(
            matches!(limited, AuthError::RateLimited { retry_after } if retry_after <= Duration::from_secs(60)),
            "{limited:?}"
        );
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_read_is_a_503_not_a_guess() {
        let fixture = fixture(true, None);
        let token = fixture.token("agent-a");
        fixture.store.failure.set_failing(true);
        let refused = fixture.auth.authenticate(Some(&token), CLIENT).await.unwrap_err();
        assert!(matches!(refused, AuthError::Store(StoreError::Unavailable(_))), "{refused:?}");
    }

    /// An expired credential's token is 401 `token_expired`, told apart from an unknown one, and answered from the
    /// cache once read (no read per request); a token that expires later works until then.
    #[tokio::test]
    async fn an_expired_token_is_told_so_without_a_read_per_request() {
        let fixture = fixture(true, None);
        let expired = fixture.token_expiring("agent-a", Some(OffsetDateTime::now_utc() - time::Duration::seconds(1)));
        let later = fixture.token_expiring("agent-a", Some(OffsetDateTime::now_utc() + time::Duration::hours(1)));
        for _ in 0..3 {
            let refused = fixture.auth.authenticate(Some(&expired), CLIENT).await.unwrap_err();
            assert_eq!(refused, AuthError::Expired);
        }
        assert_eq!(fixture.auth.credentials().store_reads(), 1, "read once, then answered from the cache");
        let caller = fixture.auth.authenticate(Some(&later), CLIENT).await.unwrap();
        assert_eq!(caller.agent_id(), Some(agent("agent-a")));
    }

    /// Past 20 refused tokens in a second, an address gets 429 `too_many_refusals` for any agent token, the valid
    /// one included, without a read; another address is not held back, and the operator's token still serves.
    #[tokio::test(start_paused = true)]
    async fn an_address_that_presents_too_many_refused_tokens_is_throttled_before_any_read() {
        let fixture = fixture(true, None);
        let auth = &fixture.auth;
        let valid = fixture.token("agent-a");
        auth.authenticate(Some(&valid), CLIENT).await.unwrap();
        let reads = auth.credentials().store_reads();
        for n in 0..crate::refusals::MAX_REFUSALS_PER_SECOND {
            let made_up = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            let refused = auth.authenticate(Some(made_up.expose()), CLIENT).await.unwrap_err();
            assert_eq!(refused, AuthError::Refused, "refusal {n}");
        }
        assert_eq!(auth.credentials().store_reads(), reads + 20);
        for token in [IssuedToken::issue(OffsetDateTime::now_utc()).unwrap().expose().to_owned(), valid.clone()] {
            let refused = auth.authenticate(Some(&token), CLIENT).await.unwrap_err();
            assert_eq!(refused, AuthError::TooManyRefusals);
        }
        assert_eq!(auth.credentials().store_reads(), reads + 20, "no read once throttled");
        let elsewhere = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        assert!(auth.authenticate(Some(&valid), elsewhere).await.is_ok(), "another address is not held back");
        assert!(matches!(auth.authenticate(Some(OPERATOR), CLIENT).await, Ok(Caller::Operator)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(auth.authenticate(Some(&valid), CLIENT).await.is_ok(), "the next second works");
    }
}
