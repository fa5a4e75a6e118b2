//! `AdminTokenStore` over `gateway_admin_token`: one row (`id = 1`), the token hash as 64 lowercase hex digits.
//!
//! Both writes are one `INSERT … ON CONFLICT` statement on the primary key, atomic on either backend without a
//! transaction: the first start's insert does nothing when a rival stored a token first (PostgreSQL makes the
//! second insert wait for the first's commit, then skip), and a rotation's upsert replaces whatever is there.

use diesel::prelude::*;
use diesel::upsert::excluded;
use gateway_core::{AdminTokenRecord, AdminTokenStore, StoreError, TokenHash};
use time::PrimitiveDateTime;

use crate::connection::DieselStore;
use crate::schema::gateway_admin_token;
use crate::timestamp::{from_db, to_db};

/// The one row's key.
const ROW: i64 = 1;

impl AdminTokenStore for DieselStore {
    fn admin_token(&self) -> Result<Option<AdminTokenRecord>, StoreError> {
        use gateway_admin_token::dsl;
        let row: Option<(String, PrimitiveDateTime)> = self.with_connection("read admin token", |connection| {
            on_backend!(connection, c => {
                dsl::gateway_admin_token.find(ROW).select((dsl::token_hash, dsl::set_at)).first(c).optional()
            })
        })?;
        row.map(|(hash, set_at)| {
            let token_hash = TokenHash::from_hex(&hash)
                .ok_or_else(|| StoreError::Internal("stored admin token hash invalid".to_owned()))?;
            Ok(AdminTokenRecord { token_hash, set_at: from_db(set_at) })
        })
        .transpose()
    }

    fn insert_admin_token(&self, record: &AdminTokenRecord) -> Result<bool, StoreError> {
        use gateway_admin_token::dsl;
        let insert = diesel::insert_into(dsl::gateway_admin_token)
            .values((
                dsl::id.eq(ROW),
                dsl::token_hash.eq(record.token_hash.to_hex()),
                dsl::set_at.eq(to_db(record.set_at)),
            ))
            .on_conflict(dsl::id)
            .do_nothing();
        let inserted =
            self.with_connection("store admin token", |connection| on_backend!(connection, c => insert.execute(c)))?;
        Ok(inserted > 0)
    }

    fn replace_admin_token(&self, record: &AdminTokenRecord) -> Result<(), StoreError> {
        use gateway_admin_token::dsl;
        let upsert = diesel::insert_into(dsl::gateway_admin_token)
            .values((
                dsl::id.eq(ROW),
                dsl::token_hash.eq(record.token_hash.to_hex()),
                dsl::set_at.eq(to_db(record.set_at)),
            ))
            .on_conflict(dsl::id)
            .do_update()
            .set((dsl::token_hash.eq(excluded(dsl::token_hash)), dsl::set_at.eq(excluded(dsl::set_at))));
        self.with_connection("rotate admin token", |connection| on_backend!(connection, c => upsert.execute(c)))
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    on_every_backend!(a_corrupt_hash_is_an_internal_error);

    /// A row whose hash is not 64 hex digits (written by hand, or corrupt) is an internal error, never a token that
    /// matches nothing (which would lock the operator out without a word) or anything.
    fn a_corrupt_hash_is_an_internal_error(store: &DieselStore) {
        let record = AdminTokenRecord { token_hash: TokenHash::of("t"), set_at: datetime!(2026-02-22 12:00:00 UTC) };
        assert!(store.insert_admin_token(&record).unwrap());
        store
            .with_connection("corrupt", |connection| {
                let corrupt = diesel::update(gateway_admin_token::table).set(gateway_admin_token::token_hash.eq("xyz"));
                on_backend!(connection, c => corrupt.execute(c))
            })
            .unwrap();
        assert!(matches!(store.admin_token(), Err(StoreError::Internal(_))));
    }
}
