//! The operator's token when no `--admin-token` is given (docs/operations.md, "Rotating the admin token"): the
//! [`AdminTokenStore`] port that keeps its hash (`gateway_admin_token`, one row), and its in-memory implementation.
//!
//! Only the SHA-256 of the token is stored ([`TokenHash`], as for agent credentials, for the same reason: the
//! token is 256 random bits, so no guess finds it from its hash however fast the hash is), and a presented token
//! is checked with [`TokenHash::matches`], in constant time. Instances sharing one database share the token: the
//! first to start stores one ([`AdminTokenStore::insert_admin_token`] writes only where nothing is stored, so two
//! starting together cannot both), the others read it.

use std::fmt;
use std::sync::Mutex;

use time::OffsetDateTime;

use crate::ports::credential::TokenHash;
use crate::ports::failure::FailureSwitch;
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// The stored operator token: its hash, never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminTokenRecord {
    pub token_hash: TokenHash,
    /// When this token was generated (at a first start, or by a rotation).
    pub set_at: OffsetDateTime,
}

/// The one stored operator token.
pub trait AdminTokenStore: Send + Sync + fmt::Debug {
    /// The stored token, if one was ever stored.
    fn admin_token(&self) -> Result<Option<AdminTokenRecord>, StoreError>;

    /// Stores `record` unless a token is stored already, in one atomic step: `true` when it was stored, `false`
    /// (and nothing written) when another was there first.
    fn insert_admin_token(&self, record: &AdminTokenRecord) -> Result<bool, StoreError>;

    /// Stores `record` in place of the stored token (or as the first one): a rotation.
    fn replace_admin_token(&self, record: &AdminTokenRecord) -> Result<(), StoreError>;
}

/// `gateway_admin_token` in memory. [`Self::failure`] makes every operation report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct InMemoryAdminTokenStore {
    stored: Mutex<Option<AdminTokenRecord>>,
    pub failure: FailureSwitch,
}

impl AdminTokenStore for InMemoryAdminTokenStore {
    fn admin_token(&self) -> Result<Option<AdminTokenRecord>, StoreError> {
        self.failure.check()?;
        Ok(*lock(&self.stored))
    }

    fn insert_admin_token(&self, record: &AdminTokenRecord) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut stored = lock(&self.stored);
        if stored.is_some() {
            return Ok(false);
        }
        *stored = Some(*record);
        Ok(true)
    }

    fn replace_admin_token(&self, record: &AdminTokenRecord) -> Result<(), StoreError> {
        self.failure.check()?;
        *lock(&self.stored) = Some(*record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::admin_token_store_conformance!(Some(Box::<InMemoryAdminTokenStore>::default()));

    #[test]
    fn the_switch_fails_every_operation() {
        let store = InMemoryAdminTokenStore::default();
        store.failure.set_failing(true);
        let record = AdminTokenRecord { token_hash: TokenHash::of("t"), set_at: OffsetDateTime::UNIX_EPOCH };
        assert!(store.admin_token().is_err());
        assert!(store.insert_admin_token(&record).is_err());
        assert!(store.replace_admin_token(&record).is_err());
        store.failure.set_failing(false);
        assert_eq!(store.admin_token().unwrap(), None, "the failed writes wrote nothing");
    }
}
