//! Fencing in the database: `gateway_leader_epoch` holds the newest leadership token a leader-only write has
//! carried. Each such write checks its token against it, and raises it, inside its own transaction, so the check
//! and the write are one step: a deposed leader's write is refused whole.

use diesel::prelude::*;
use gateway_core::{FencingEpoch, FencingToken, StoreError};

use crate::connection::{AnyConnection, DieselStore};
use crate::error::classify;
use crate::schema::gateway_leader_epoch;

/// What a transaction that may be fenced fails with.
#[derive(Debug)]
pub(crate) enum FencedError {
    Database(diesel::result::Error),
    Fenced { token: FencingToken, newest: FencingToken },
}

impl From<diesel::result::Error> for FencedError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Database(error)
    }
}

impl FencedError {
    pub(crate) fn into_store_error(self, operation: &str) -> StoreError {
        match self {
            Self::Database(error) => classify(operation, error),
            Self::Fenced { token, newest } => StoreError::Fenced { token, newest },
        }
    }
}

/// Tokens are `u64`; the column is a signed 64-bit integer. Terms never get near 2^63, and saturating keeps the
/// order if one ever did.
pub(crate) fn token_to_db(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(i64::MAX)
}

pub(crate) fn token_from_db(stored: i64) -> FencingToken {
    FencingToken(u64::try_from(stored).unwrap_or(0))
}

/// Admits a leader-only write under `token`, inside the caller's transaction (`DieselStore::immediate_fenced`):
/// refused when `token` is older than the newest seen, which it raises otherwise. Call it first in the
/// transaction: on PostgreSQL it locks the epoch row until the transaction ends (on SQLite the IMMEDIATE
/// transaction holds the database's write lock already), so a rival's leader-only write waits and then sees the
/// epoch this one left; and every such transaction takes this lock before any row lock, so they cannot deadlock
/// on each other.
pub(crate) fn admit(connection: &mut AnyConnection<'_>, token: FencingToken) -> Result<(), FencedError> {
    use gateway_leader_epoch::dsl;
    let epoch = dsl::gateway_leader_epoch.find(1).select(dsl::epoch);
    let newest: i64 = match connection {
        AnyConnection::Sqlite(connection) => epoch.first(&mut **connection)?,
        AnyConnection::Postgres(connection) => epoch.for_update().first(&mut **connection)?,
    };
    let wanted = token_to_db(token);
    if wanted < newest {
        return Err(FencedError::Fenced { token, newest: token_from_db(newest) });
    }
    if wanted > newest {
        let raise = diesel::update(dsl::gateway_leader_epoch.find(1)).set(dsl::epoch.eq(wanted));
        on_backend!(connection, c => raise.execute(c))?;
    }
    Ok(())
}

impl FencingEpoch for DieselStore {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        use gateway_leader_epoch::dsl;
        let newest = self.with_connection("read the fencing epoch", |connection| {
            on_backend!(connection, c => dsl::gateway_leader_epoch.find(1).select(dsl::epoch).first::<i64>(c))
        })?;
        Ok(token_from_db(newest))
    }
}
