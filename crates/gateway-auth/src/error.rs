//! Error policy: every way a caller can be refused is a variant here; the binary maps each to one HTTP status in its
//! error module. Variants never carry a token, nor anything a client sent.

use std::time::Duration;

use gateway_core::StoreError;

use crate::streams::StreamCap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Agent tokens are required and the request presented none.
    #[error("agent auth is on: a token is required")]
    TokenRequired,
    /// The token presented authenticates nothing here: malformed, unknown, revoked, a wrong secret, or not the
    /// operator's where only the operator's serves.
    #[error("the token authenticates nothing")]
    Refused,
    /// The right secret of a credential that has expired (not revoked): the agent needs a new token.
    #[error("this agent token has expired: ask the operator for a new one")]
    Expired,
    /// The client's address presented too many refused tokens this second ([`crate::MAX_REFUSALS_PER_SECOND`]):
    /// refused without a look at the token until the next second.
    #[error("this client address presented too many refused agent tokens this second: retry after a second")]
    TooManyRefusals,
    /// The caller may not act as (or read for) the agent the request names.
    #[error("{0}")]
    IdentityMismatch(Mismatch),
    /// The agent is over its rate limit; its window ends in `retry_after`.
    #[error("the agent is over its rate limit")]
    RateLimited { retry_after: Duration },
    /// An event stream of an agent's reminders would pass one of the stream caps.
    #[error("{0}")]
    TooManyStreams(StreamCap),
    /// The agent has no credential with this id.
    #[error("the agent has no such credential")]
    UnknownCredential,
    /// A credential's lifetime must be a whole number of seconds from 1 to
    /// [`gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S`] (ten years).
    #[error(
        "expires_in_s: must be an integer from 1 to {max} (ten years)",
        max = gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S
    )]
    InvalidLifetime,
    /// The operating system gave no randomness to make a token from.
    #[error("the operating system has no randomness source")]
    NoRandomness,
    /// The store could not answer: never a guess, the caller is told to retry.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a caller may not act as the agent a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The operator's token reads agents' reminders; it does not act for them.
    #[error("the operator token does not act for agents: use the agent's")]
    OperatorActs,
    /// The agent named is not the token's.
    #[error("the agent named differs from the token's agent")]
    OtherAgent,
    /// With agent auth on, an acting agent must name itself (a DecisionLog without `identity`): refused, failing
    /// closed rather than guessing.
    #[error("identity.agent_id is required with agent auth on, and must be the token's agent")]
    Unnamed,
}
