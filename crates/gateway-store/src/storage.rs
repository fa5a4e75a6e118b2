//! `AgentStorage` over `tool_calls`, `cron_jobs` and `agent_mailbox` (migration `agent_storage_bytes`): one statement
//! summing the agent's rows' JSON bytes (generated columns, kept in each table's agent index) and counting them for
//! the row charge, each sum a range of the agent's index. Measured (`cost` below, release build): SQLite 50 µs for an
//! agent with 1,000 mailbox entries, 5 ms with 100,000 (5 to 11 ms when each holds 4 KB); PostgreSQL 0.3 ms and
//! 43 ms (freshly filled and analyzed, not vacuumed, so the index scan still visits the heap). The work is the
//! agent's own rows, which its quota bounds (16 MiB at 128 bytes a row at least: about 130,000 rows).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use gateway_core::{AgentId, AgentStorage, STORED_ROW_CHARGE_BYTES, StoreError};

use crate::connection::{AnyConnection, DieselStore};

/// The three sums, each a range of the table's agent index (the cron index's first column: every job of the agent,
/// one-time and recurring, since agents create recurring jobs too through `schedule_recurring`).
const USAGE_SQLITE: &str = "SELECT \
     (SELECT COALESCE(SUM(result_bytes), 0) + COUNT(*) * ?1 FROM tool_calls WHERE agent_id = ?2) + \
     (SELECT COALESCE(SUM(payload_bytes), 0) + COUNT(*) * ?1 FROM cron_jobs WHERE agent_id = ?2) + \
     (SELECT COALESCE(SUM(payload_bytes), 0) + COUNT(*) * ?1 FROM agent_mailbox WHERE agent_id = ?2) AS bytes";
const USAGE_POSTGRES: &str = "SELECT CAST(\
     (SELECT COALESCE(SUM(result_bytes), 0) + COUNT(*) * $1 FROM tool_calls WHERE agent_id = $2) + \
     (SELECT COALESCE(SUM(payload_bytes), 0) + COUNT(*) * $1 FROM cron_jobs WHERE agent_id = $2) + \
     (SELECT COALESCE(SUM(payload_bytes), 0) + COUNT(*) * $1 FROM agent_mailbox WHERE agent_id = $2) \
     AS BIGINT) AS bytes";

#[derive(QueryableByName)]
struct Usage {
    #[diesel(sql_type = BigInt)]
    bytes: i64,
}

impl AgentStorage for DieselStore {
    fn agent_storage_bytes(&self, agent_id: &AgentId) -> Result<u64, StoreError> {
        let charge = i64::try_from(STORED_ROW_CHARGE_BYTES).unwrap_or(i64::MAX);
        let usage = self.with_connection("sum an agent's stored bytes", |connection| {
            let sql = match connection {
                AnyConnection::Sqlite(_) => USAGE_SQLITE,
                AnyConnection::Postgres(_) => USAGE_POSTGRES,
            };
            on_backend!(connection, c => {
                diesel::sql_query(sql)
                    .bind::<BigInt, _>(charge)
                    .bind::<Text, _>(agent_id.as_str())
                    .get_result::<Usage>(c)
            })
        })?;
        Ok(u64::try_from(usage.bytes).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of the three sums is a range of its table's agent index: never a table scan, whatever the number of
    /// agents. (SQLite does not report an index of a VIRTUAL generated column as covering; the measurement below says
    /// what a sum costs.)
    #[test]
    fn the_usage_sum_reads_the_agent_indexes_on_sqlite() {
        #[derive(QueryableByName)]
        struct Line {
            #[diesel(sql_type = Text)]
            detail: String,
        }
        let fixture = crate::testing::sqlite();
        let plan = fixture
            .store
            .with_sqlite("explain", |connection| {
                diesel::sql_query(format!("EXPLAIN QUERY PLAN {USAGE_SQLITE}"))
                    .bind::<BigInt, _>(128)
                    .bind::<Text, _>("agent-7")
                    .load::<Line>(connection)
                    .map(|lines| lines.into_iter().map(|line| line.detail).collect::<Vec<_>>())
            })
            .unwrap()
            .unwrap();
        for index in ["tool_calls_agent_bytes", "cron_jobs_agent_id_one_time", "agent_mailbox_agent_seq"] {
            assert!(plan.iter().any(|line| line.contains(&format!("INDEX {index} (agent_id=?"))), "{index}: {plan:?}");
        }
        assert!(!plan.iter().any(|line| line.starts_with("SCAN") && line != "SCAN CONSTANT ROW"), "a scan: {plan:?}");
    }
}

/// What the sum costs per call for an agent with many rows (`cargo test -p gateway-store --release -- --ignored
/// --nocapture usage_cost`): the measurement in docs/architecture.md, "Storage per agent".
#[cfg(test)]
mod cost {
    use std::time::Instant;

    use super::*;

    fn fill(store: &DieselStore, rows: i64, payload_bytes: i64) {
        let postgres = format!(
            "INSERT INTO agent_mailbox (fire_id, agent_id, job_id, payload, scheduled_for, fired_at) \
             SELECT 'f' || i || '-' || {payload_bytes}, 'agent-' || (i % 2), i, \
                    '{{\"x\":\"' || repeat('x', {payload_bytes}) || '\"}}', \
                    TIMESTAMP '2026-02-22 12:00:00', TIMESTAMP '2026-02-22 12:00:00' \
             FROM generate_series(1, {rows}) AS i; ANALYZE agent_mailbox"
        );
        if !store.is_sqlite() {
            store
                .with_connection("fill", |connection| {
                    let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                    diesel::connection::SimpleConnection::batch_execute(&mut **c, &postgres)
                })
                .unwrap();
            return;
        }
        let sql = format!(
            "INSERT INTO agent_mailbox (fire_id, agent_id, job_id, payload, scheduled_for, fired_at) \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) \
             SELECT 'f' || i || '-' || {payload_bytes}, 'agent-' || (i % 2), i, \
                    '{{\"x\":\"' || substr(hex(zeroblob({payload_bytes})), 1, {payload_bytes}) || '\"}}', \
                    '2026-02-22 12:00:00', '2026-02-22 12:00:00' FROM n"
        );
        store
            .with_connection("fill", |connection| on_backend!(connection, c => diesel::sql_query(&sql).execute(c)))
            .unwrap();
    }

    fn time_usage(store: &DieselStore, label: &str) {
        let agent = AgentId::new("agent-0").unwrap();
        let bytes = store.agent_storage_bytes(&agent).unwrap();
        let runs = 20;
        let started = Instant::now();
        for _ in 0..runs {
            store.agent_storage_bytes(&agent).unwrap();
        }
        let each = started.elapsed() / runs;
        println!("{label}: {bytes} bytes charged, {each:?} per sum");
    }

    #[test]
    #[ignore = "a measurement, not a check"]
    fn usage_cost() {
        for (rows, payload) in [(2_000, 100), (200_000, 100), (200_000, 4_000)] {
            let fixture = crate::testing::sqlite();
            fill(&fixture.store, rows, payload);
            time_usage(&fixture.store, &format!("sqlite, {} rows of the agent, {payload} B payloads", rows / 2));
            // PostgreSQL only with small payloads: 200,000 rows of 4 KB are 800 MB of a shared test server.
            if payload > 100 {
                continue;
            }
            let Some(fixture) = crate::testing::postgres("storage::cost::usage_cost") else { continue };
            fill(&fixture.store, rows, payload);
            time_usage(&fixture.store, &format!("postgres, {} rows of the agent, {payload} B payloads", rows / 2));
        }
    }
}
