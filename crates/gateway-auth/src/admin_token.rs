//! The operator token's lifecycle (docs/operations.md, "Rotating the admin token").
//!
//! - Given by configuration (`--admin-token` / `GATEWAY_ADMIN_TOKEN`, [`OperatorToken::Given`]): that token, as is,
//!   for as long as the process runs. Nothing is read from or written to the store for it.
//! - Not given: the token stored (as its SHA-256) through gateway-core's [`AdminTokenStore`] port
//!   ([`OperatorToken::Stored`]). The first start on a database generates one, stores it with an insert that does
//!   nothing if a token is there already (so of several instances starting together one stores its token and the
//!   others read it and print nothing) and hands it back to be shown once ([`resolve_stored_admin_token`]). Later
//!   starts only read it.
//! - [`rotate_admin_token`] replaces the stored hash. An [`crate::Auth`] that uses the stored token re-reads it every
//!   [`ADMIN_TOKEN_REFRESH_INTERVAL`] (one primary-key read), so within that the old token is refused and the new
//!   one accepted everywhere. Requests with a wrong token never cause a read: a flood of guesses costs no database
//!   work.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::{AdminTokenRecord, AdminTokenStore, StoreError, TokenHash, run_blocking};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::AuthError;
use crate::operator::OperatorAuth;

/// How often an [`crate::Auth`] that uses the stored token reads it again: the longest a rotated-out token is still
/// accepted (and a new one not yet) after a rotation.
pub const ADMIN_TOKEN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// The operator token as configured or generated: a secret, which `Debug` never shows.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn new(token: String) -> Self {
        Self(token)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The hash the token is stored and checked as.
    pub fn hash(&self) -> TokenHash {
        TokenHash::of(&self.0)
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// Where the operator token of this process comes from.
#[derive(Debug, Clone, Default)]
pub enum OperatorToken {
    /// Given by configuration, checked as is.
    Given(AdminToken),
    /// The stored one, as it was read (or stored) at start; followed as it is rotated.
    Stored(TokenHash),
    /// No operator: no token is the operator's (an embedder that wants agent tokens only).
    #[default]
    Disabled,
}

/// What start-up found: the token to check, and the token to show when this start generated it.
#[derive(Debug)]
pub struct ResolvedAdminToken {
    pub token: OperatorToken,
    /// Generated and stored by this start: shown once, never again.
    pub generated: Option<AdminToken>,
}

/// A fresh operator token: 256 random bits as hex.
pub fn generate_admin_token() -> Result<AdminToken, AuthError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| AuthError::NoRandomness)?;
    Ok(AdminToken::new(gateway_core::encoding::hex::encode(&bytes)))
}

/// The stored token, or a new one stored now (blocking: call it on the blocking pool).
pub fn resolve_stored_admin_token(
    store: &dyn AdminTokenStore,
    now: OffsetDateTime,
) -> Result<ResolvedAdminToken, AuthError> {
    if let Some(stored) = store.admin_token()? {
        return Ok(ResolvedAdminToken { token: OperatorToken::Stored(stored.token_hash), generated: None });
    }
    let token = generate_admin_token()?;
    let record = AdminTokenRecord { token_hash: token.hash(), set_at: now };
    if store.insert_admin_token(&record)? {
        return Ok(ResolvedAdminToken { token: OperatorToken::Stored(record.token_hash), generated: Some(token) });
    }
    // Another instance stored its token between the read and the insert: that one is the token.
    let stored = store.admin_token()?.ok_or_else(|| {
        StoreError::Internal("the admin token was stored by another instance but cannot be read back".to_owned())
    })?;
    Ok(ResolvedAdminToken { token: OperatorToken::Stored(stored.token_hash), generated: None })
}

/// A new token in place of the stored one (blocking). Returns the token, shown once by the caller.
pub fn rotate_admin_token(store: &dyn AdminTokenStore, now: OffsetDateTime) -> Result<AdminToken, AuthError> {
    let token = generate_admin_token()?;
    store.replace_admin_token(&AdminTokenRecord { token_hash: token.hash(), set_at: now })?;
    Ok(token)
}

/// Follows the stored token: reads it every [`ADMIN_TOKEN_REFRESH_INTERVAL`] and hands a changed hash to the
/// operator check. A failed read keeps the token known so far (the operator is not locked out by a database hiccup).
#[derive(Debug, Clone)]
pub(crate) struct StoredTokenRefresh {
    pub(crate) store: Arc<dyn AdminTokenStore>,
    pub(crate) operator: OperatorAuth,
}

impl StoredTokenRefresh {
    /// One read; `true` when the stored token changed.
    pub(crate) async fn refresh(&self) -> Result<bool, StoreError> {
        let store = Arc::clone(&self.store);
        let stored = run_blocking(move || store.admin_token()).await??;
        match stored {
            Some(stored) => Ok(self.operator.replace(stored.token_hash)),
            None => Err(StoreError::Internal("the stored admin token is gone; the last one known stays".to_owned())),
        }
    }

    /// Refreshes until `shutdown`.
    pub(crate) async fn run(&self, shutdown: &CancellationToken) {
        let mut ticks = tokio::time::interval(ADMIN_TOKEN_REFRESH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.refresh().await {
                Ok(changed) => {
                    if changed {
                        tracing::info!("the stored admin token was rotated; the previous one is refused from now on");
                    }
                    if failing {
                        tracing::info!("the stored admin token can be read again");
                    }
                    failing = false;
                }
                Err(error) => {
                    // Once per outage, not once a second.
                    if !failing {
                        tracing::warn!(%error, "cannot read the stored admin token; the last one read stays in use");
                    }
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::InMemoryAdminTokenStore;
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    fn stored_hash(resolved: &ResolvedAdminToken) -> TokenHash {
        match resolved.token {
            OperatorToken::Stored(hash) => hash,
            OperatorToken::Given(_) | OperatorToken::Disabled => panic!("expected the stored token"),
        }
    }

    #[test]
    fn the_first_start_generates_and_stores_a_token_and_later_ones_read_it() {
        let store = InMemoryAdminTokenStore::default();
        let first = resolve_stored_admin_token(&store, NOW).unwrap();
        let token = first.generated.as_ref().unwrap();
        assert_eq!(token.expose().len(), 64);
        assert_eq!(stored_hash(&first), token.hash());
        assert_eq!(store.admin_token().unwrap().unwrap().token_hash, token.hash(), "only the hash is stored");
        let again = resolve_stored_admin_token(&store, NOW).unwrap();
        assert!(again.generated.is_none(), "nothing to print on a later start");
        assert_eq!(stored_hash(&again), token.hash());
    }

    /// A store where another instance stores its token between this one's read and its insert.
    #[derive(Debug)]
    struct Rival {
        store: InMemoryAdminTokenStore,
        rival: AdminTokenRecord,
    }

    impl AdminTokenStore for Rival {
        fn admin_token(&self) -> Result<Option<AdminTokenRecord>, StoreError> {
            self.store.admin_token()
        }
        fn insert_admin_token(&self, record: &AdminTokenRecord) -> Result<bool, StoreError> {
            assert!(self.store.insert_admin_token(&self.rival).unwrap(), "the rival stores first");
            self.store.insert_admin_token(record)
        }
        fn replace_admin_token(&self, record: &AdminTokenRecord) -> Result<(), StoreError> {
            self.store.replace_admin_token(record)
        }
    }

    #[test]
    fn a_start_that_loses_the_race_takes_the_winners_token_and_prints_nothing() {
        let rival = AdminTokenRecord { token_hash: TokenHash::of("the rival's"), set_at: NOW };
        let store = Rival { store: InMemoryAdminTokenStore::default(), rival };
        let resolved = resolve_stored_admin_token(&store, NOW).unwrap();
        assert!(resolved.generated.is_none());
        assert_eq!(stored_hash(&resolved), rival.token_hash);
    }

    #[tokio::test]
    async fn a_rotation_replaces_the_token_the_refresh_follows() {
        let store = Arc::new(InMemoryAdminTokenStore::default());
        let resolved = resolve_stored_admin_token(&*store, NOW).unwrap();
        let old = resolved.generated.unwrap();
        let operator = OperatorAuth::from_hash(old.hash());
        let refresh = StoredTokenRefresh { store: Arc::clone(&store) as Arc<dyn AdminTokenStore>, operator };
        assert!(!refresh.refresh().await.unwrap(), "nothing changed yet");
        let new = rotate_admin_token(&*store, NOW).unwrap();
        assert_ne!(new.expose(), old.expose());
        assert!(refresh.operator.accepts(old.expose()), "until the next read");
        assert!(refresh.refresh().await.unwrap());
        assert!(!refresh.operator.accepts(old.expose()));
        assert!(refresh.operator.accepts(new.expose()));
        store.failure.set_failing(true);
        assert!(refresh.refresh().await.is_err());
        assert!(refresh.operator.accepts(new.expose()), "a failed read keeps the token known");
    }
}
