//! `AgentCredentialStore` over `agent_credentials`. The token hash is kept as 64 lowercase hex digits.
//!
//! Revoking is one conditional `UPDATE` (only an unrevoked row of the named agent changes, so the first
//! revocation's instant stays) followed by reading the row, in one `DieselStore::immediate` transaction: on
//! PostgreSQL a concurrent revocation waits for the row, re-checks the condition, changes nothing and reads the
//! first one's result.

use std::collections::BTreeMap;

use diesel::prelude::*;
use gateway_core::{AgentCredentialStore, AgentId, CredentialId, CredentialRecord, StoreError, TokenHash};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::connection::DieselStore;
use crate::schema::agent_credentials;
use crate::timestamp::{from_db, to_db};

/// The credentials revoked at or after `since`, through the partial index `agent_credentials_revoked_at` (which
/// holds revoked rows only, so the poll reads nothing of the unrevoked majority).
fn revoked_since_query(
    since: OffsetDateTime,
) -> diesel::dsl::Select<
    diesel::dsl::Filter<agent_credentials::table, diesel::dsl::GtEq<agent_credentials::revoked_at, PrimitiveDateTime>>,
    agent_credentials::credential_id,
> {
    use agent_credentials::dsl;
    dsl::agent_credentials.filter(dsl::revoked_at.ge(to_db(since))).select(dsl::credential_id)
}

#[derive(Queryable)]
#[diesel(table_name = agent_credentials)]
struct CredentialRow {
    credential_id: String,
    agent_id: String,
    token_hash: String,
    created_at: PrimitiveDateTime,
    revoked_at: Option<PrimitiveDateTime>,
    expires_at: Option<PrimitiveDateTime>,
    last_used_at: Option<PrimitiveDateTime>,
}

impl CredentialRow {
    fn into_record(self) -> Result<CredentialRecord, StoreError> {
        let corrupt = |column: &str| StoreError::Internal(format!("stored credential {column} invalid"));
        Ok(CredentialRecord {
            credential_id: CredentialId::parse(&self.credential_id).ok_or_else(|| corrupt("credential_id"))?,
            agent_id: AgentId::new(self.agent_id).map_err(|_| corrupt("agent_id"))?,
            token_hash: TokenHash::from_hex(&self.token_hash).ok_or_else(|| corrupt("token_hash"))?,
            created_at: from_db(self.created_at),
            revoked_at: self.revoked_at.map(from_db),
            expires_at: self.expires_at.map(from_db),
            last_used_at: self.last_used_at.map(from_db),
        })
    }
}

fn records(rows: Vec<CredentialRow>) -> Result<Vec<CredentialRecord>, StoreError> {
    rows.into_iter().map(CredentialRow::into_record).collect()
}

impl AgentCredentialStore for DieselStore {
    fn insert_credential(&self, credential: &CredentialRecord) -> Result<(), StoreError> {
        use agent_credentials::dsl;
        let insert = diesel::insert_into(dsl::agent_credentials).values((
            dsl::credential_id.eq(credential.credential_id.as_str()),
            dsl::agent_id.eq(credential.agent_id.as_str()),
            dsl::token_hash.eq(credential.token_hash.to_hex()),
            dsl::created_at.eq(to_db(credential.created_at)),
            dsl::revoked_at.eq(None::<PrimitiveDateTime>),
            dsl::expires_at.eq(credential.expires_at.map(to_db)),
            dsl::last_used_at.eq(None::<PrimitiveDateTime>),
        ));
        self.with_connection("insert credential", |connection| on_backend!(connection, c => insert.execute(c)))
            .map(drop)
    }

    fn credential(&self, id: &CredentialId) -> Result<Option<CredentialRecord>, StoreError> {
        let row = self.with_connection("read credential", |connection| {
            on_backend!(connection, c => agent_credentials::table.find(id.as_str()).first::<CredentialRow>(c).optional())
        })?;
        row.map(CredentialRow::into_record).transpose()
    }

    fn revoked_since(&self, since: OffsetDateTime) -> Result<Vec<CredentialId>, StoreError> {
        let query = revoked_since_query(since);
        let ids = self.with_connection(
            "poll credential revocations",
            |connection| on_backend!(connection, c => query.load::<String>(c)),
        )?;
        ids.into_iter()
            .map(|id| {
                CredentialId::parse(&id)
                    .ok_or_else(|| StoreError::Internal("stored credential credential_id invalid".into()))
            })
            .collect()
    }

    fn agent_credentials(
        &self,
        agent_id: &AgentId,
        after: Option<&CredentialId>,
        limit: usize,
    ) -> Result<Vec<CredentialRecord>, StoreError> {
        use agent_credentials::dsl;
        // Every id is 24 hex digits, so every id sorts after the empty string: one statement for both cases.
        let after = after.map_or("", CredentialId::as_str);
        let query = dsl::agent_credentials
            .filter(dsl::agent_id.eq(agent_id.as_str()))
            .filter(dsl::credential_id.gt(after))
            .order(dsl::credential_id)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.with_connection(
            "list credentials",
            |connection| on_backend!(connection, c => query.load::<CredentialRow>(c)),
        )?;
        records(rows)
    }

    fn revoke_credential(
        &self,
        agent_id: &AgentId,
        id: &CredentialId,
        at: OffsetDateTime,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        use agent_credentials::dsl;
        let mine = dsl::credential_id.eq(id.as_str()).and(dsl::agent_id.eq(agent_id.as_str()));
        let revoke = diesel::update(dsl::agent_credentials.filter(mine).filter(dsl::revoked_at.is_null()))
            .set(dsl::revoked_at.eq(Some(to_db(at))));
        let read = dsl::agent_credentials.filter(mine);
        let row = self.immediate("revoke credential", |connection| {
            on_backend!(connection, c => {
                revoke.execute(c)?;
                read.first::<CredentialRow>(c).optional()
            })
        })?;
        row.map(CredentialRow::into_record).transpose()
    }

    fn record_credential_uses(&self, uses: &[(CredentialId, OffsetDateTime)]) -> Result<(), StoreError> {
        use agent_credentials::dsl;
        // A cache reports uses to the minute, so a pass has one or two distinct instants: one conditional UPDATE
        // per instant (and per chunk of ids), all in one transaction. The condition keeps the later instant when
        // instances report in any order.
        let mut by_instant: BTreeMap<PrimitiveDateTime, Vec<&str>> = BTreeMap::new();
        for (id, at) in uses {
            by_instant.entry(to_db(*at)).or_default().push(id.as_str());
        }
        if by_instant.is_empty() {
            return Ok(());
        }
        self.immediate("record credential uses", |connection| {
            for (at, ids) in &by_instant {
                for chunk in ids.chunks(USES_PER_STATEMENT) {
                    let record = diesel::update(
                        dsl::agent_credentials
                            .filter(dsl::credential_id.eq_any(chunk))
                            .filter(dsl::last_used_at.is_null().or(dsl::last_used_at.lt(*at))),
                    )
                    .set(dsl::last_used_at.eq(Some(*at)));
                    on_backend!(connection, c => record.execute(c))?;
                }
            }
            Ok(())
        })
    }

    fn all_credentials(&self, after: Option<&CredentialId>, limit: usize) -> Result<Vec<CredentialRecord>, StoreError> {
        use agent_credentials::dsl;
        let after = after.map_or("", CredentialId::as_str);
        let query = dsl::agent_credentials
            .filter(dsl::credential_id.gt(after))
            .order(dsl::credential_id)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.with_connection(
            "list all credentials",
            |connection| on_backend!(connection, c => query.load::<CredentialRow>(c)),
        )?;
        records(rows)
    }
}

/// Credential ids bound in one `UPDATE … IN (…)`: well under SQLite's and PostgreSQL's limits on parameters.
const USES_PER_STATEMENT: usize = 500;

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    /// A row whose hash is not 64 hex digits (written by hand, or corrupt) is an internal error, not a credential
    /// that matches nothing or anything.
    fn a_corrupt_hash_is_an_internal_error(store: &DieselStore) {
        let id = CredentialId::parse("019c85388601000000000001").unwrap();
        let record = CredentialRecord {
            credential_id: id.clone(),
            agent_id: AgentId::new("a").unwrap(),
            token_hash: TokenHash::of("t"),
            created_at: datetime!(2026-02-22 12:00:00 UTC),
            revoked_at: None,
            expires_at: None,
            last_used_at: None,
        };
        store.insert_credential(&record).unwrap();
        store
            .with_connection("corrupt", |connection| {
                on_backend!(connection, c => diesel::update(agent_credentials::table)
                    .set(agent_credentials::token_hash.eq("not hex"))
                    .execute(c))
            })
            .unwrap();
        assert!(matches!(store.credential(&id), Err(StoreError::Internal(_))));
    }

    on_every_backend!(a_corrupt_hash_is_an_internal_error);

    /// The revocation poll reads the partial index of revoked rows: never the table, whatever its size.
    #[test]
    fn the_revocation_poll_reads_its_index_on_sqlite() {
        let fixture = crate::testing::sqlite();
        let plan = fixture
            .store
            .with_sqlite("explain", |connection| {
                crate::explain::query_plan(connection, revoked_since_query(datetime!(2026-02-22 12:00:00 UTC)))
            })
            .unwrap()
            .unwrap();
        assert!(plan.iter().any(|line| line.contains("INDEX agent_credentials_revoked_at")), "{plan:?}");
        assert!(!plan.iter().any(|line| line.starts_with("SCAN")), "the poll scans the table: {plan:?}");
    }

    /// The same on PostgreSQL, with 100,000 credentials of which 1,000 are revoked, and statistics for them.
    #[test]
    fn the_revocation_poll_reads_its_index_on_postgres() {
        let Some(fixture) =
            crate::testing::postgres("credential::tests::the_revocation_poll_reads_its_index_on_postgres")
        else {
            return;
        };
        let plan = fixture
            .store
            .with_connection("explain", |connection| {
                let crate::connection::AnyConnection::Postgres(c) = connection else {
                    unreachable!("a PostgreSQL store")
                };
                crate::explain::fill_agent_credentials(c, 100_000)?;
                crate::explain::postgres_plan(c, revoked_since_query(datetime!(2026-02-22 11:59:00 UTC)))
            })
            .unwrap()
            .join("\n");
        assert!(plan.contains("agent_credentials_revoked_at"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "the poll scans the table: {plan}");
    }
}
