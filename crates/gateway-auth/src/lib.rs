#![doc = include_str!("../README.md")]

mod access;
mod admin_token;
mod auth;
mod credentials;
mod error;
mod operator;
mod refusals;
mod streams;

pub use access::{Access, Caller, Named};
pub use admin_token::{
    ADMIN_TOKEN_REFRESH_INTERVAL, AdminToken, OperatorToken, ResolvedAdminToken, generate_admin_token,
    resolve_stored_admin_token, rotate_admin_token,
};
pub use auth::{Auth, AuthConfig, AuthPorts, IssuedCredential};
pub use credentials::{
    CREDENTIAL_IDLE_AFTER, CREDENTIAL_SWEEP_INTERVAL, CREDENTIAL_USE_RECORD_INTERVAL, CredentialCache,
    MAX_CONCURRENT_CREDENTIAL_READS, MAX_CREDENTIAL_USE_RECORD_INTERVAL, MAX_REFUSED_CREDENTIALS,
    MAX_VERIFIED_CREDENTIALS, REFUSED_CREDENTIAL_TTL, REVALIDATE_AFTER, REVOCATION_LOOKBACK, REVOCATION_POLL_INTERVAL,
    StreamGuard, Verdict, Verified,
};
pub use error::{AuthError, Mismatch};
pub use gateway_core::AddressKey;
pub use operator::OperatorAuth;
pub use refusals::{MAX_REFUSAL_ADDRESSES, MAX_REFUSALS_PER_SECOND, RefusalThrottle};
pub use streams::{
    AdmittedStream, DEFAULT_STREAMS_PER_ADDRESS, DEFAULT_STREAMS_PER_AGENT, MAX_AGENT_STREAMS, StreamCap,
};
