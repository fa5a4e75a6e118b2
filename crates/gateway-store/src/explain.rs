//! Test support: the plan each backend picks for a Diesel query, taken from the query itself (its SQL and its
//! bound values), so a plan test checks the statement the adapter runs rather than a hand-written copy of it.

use diesel::connection::SimpleConnection;
use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Integer, Text};
use diesel::sqlite::Sqlite;

/// `EXPLAIN QUERY PLAN` (SQLite) or `EXPLAIN` (PostgreSQL) in front of a query.
#[derive(Debug, Clone, Copy, QueryId)]
struct Explain<Q>(Q);

impl<Q: QueryFragment<Sqlite>> QueryFragment<Sqlite> for Explain<Q> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql("EXPLAIN QUERY PLAN ");
        self.0.walk_ast(out.reborrow())
    }
}

impl<Q: QueryFragment<Pg>> QueryFragment<Pg> for Explain<Q> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("EXPLAIN ");
        self.0.walk_ast(out.reborrow())
    }
}

/// SQLite's rows are `(id, parent, notused, detail)`; PostgreSQL's are one line of text each. Typed per use.
#[derive(Debug, Clone, Copy, QueryId)]
struct Typed<Q, ST>(Q, std::marker::PhantomData<ST>);

impl<Q, ST> Query for Typed<Q, ST> {
    type SqlType = ST;
}

impl<Q: QueryFragment<DB>, ST, DB: diesel::backend::Backend> QueryFragment<DB> for Typed<Q, ST> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(out)
    }
}

impl<Q, ST> RunQueryDsl<SqliteConnection> for Typed<Q, ST> {}
impl<Q, ST> RunQueryDsl<PgConnection> for Typed<Q, ST> {}

/// The `detail` lines of the plan SQLite picks for `query`.
pub(crate) fn query_plan<Q>(connection: &mut SqliteConnection, query: Q) -> QueryResult<Vec<String>>
where
    Q: QueryFragment<Sqlite> + QueryId,
{
    let explain = Typed(Explain(query), std::marker::PhantomData::<(Integer, Integer, Integer, Text)>);
    let rows: Vec<(i32, i32, i32, String)> = explain.load(connection)?;
    Ok(rows.into_iter().map(|(_, _, _, detail)| detail).collect())
}

/// The lines of the plan PostgreSQL picks for `query`.
pub(crate) fn postgres_plan<Q>(connection: &mut PgConnection, query: Q) -> QueryResult<Vec<String>>
where
    Q: QueryFragment<Pg> + QueryId,
{
    Typed(Explain(query), std::marker::PhantomData::<Text>).load(connection)
}

/// `rows` one-time jobs, one a second, half of them due before 2026-02-22 12:00 (the tests' START), and fresh
/// statistics, so that the planner plans for a large table rather than an empty one.
pub(crate) fn fill_cron_jobs(connection: &mut PgConnection, rows: u32) -> QueryResult<()> {
    connection.batch_execute(&format!(
        "INSERT INTO cron_jobs (agent_id, next_fire_at, payload, is_one_time) \
         SELECT 'agent-' || (n % 100), TIMESTAMP '2026-02-22 12:00:00' + (n - {half}) * INTERVAL '1 second', '{{}}', TRUE \
         FROM generate_series(1, {rows}) AS n; ANALYZE cron_jobs;",
        half = rows / 2
    ))
}

/// `rows` deliveries of one config: nine in ten delivered, the rest pending or failed, due one a second around
/// 2026-02-22 12:00; and fresh statistics.
pub(crate) fn fill_webhook_deliveries(connection: &mut PgConnection, rows: u32) -> QueryResult<()> {
    connection.batch_execute(&format!(
        "INSERT INTO webhook_configs (source_identifier, event_type, agent_intent, target_session, target_url, \
         secret, created_at) VALUES ('plan', 'push', 'review', 's', 'https://example.com', 'k', '2026-02-22'); \
         INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, status, \
         attempt_count, next_retry_at, created_at) \
         SELECT (SELECT id FROM webhook_configs WHERE source_identifier = 'plan'), 's', '{{}}', 'https://example.com', \
         'sha256=00', CASE WHEN n % 10 = 0 THEN 'pending' WHEN n % 10 = 1 THEN 'failed' ELSE 'delivered' END, 1, \
         CASE WHEN n % 10 < 2 THEN TIMESTAMP '2026-02-22 12:00:00' + (n - {half}) * INTERVAL '1 second' END, \
         TIMESTAMP '2026-02-22 12:00:00' FROM generate_series(1, {rows}) AS n; ANALYZE webhook_deliveries;",
        half = rows / 2
    ))
}

/// `rows` mailbox entries of 100 agents, one fired a second before 2026-02-22 12:00, nine in ten received; and fresh
/// statistics.
pub(crate) fn fill_agent_mailbox(connection: &mut PgConnection, rows: u32) -> QueryResult<()> {
    connection.batch_execute(&format!(
        "INSERT INTO agent_mailbox (fire_id, agent_id, job_id, payload, scheduled_for, fired_at, received_at) \
         SELECT n || ':plan', 'agent-' || (n % 100), n, '{{}}', TIMESTAMP '2026-02-22 12:00:00' - ({rows} - n) * \
         INTERVAL '1 second', TIMESTAMP '2026-02-22 12:00:00' - ({rows} - n) * INTERVAL '1 second', \
         CASE WHEN n % 10 = 0 THEN NULL ELSE TIMESTAMP '2026-02-22 12:00:00' END \
         FROM generate_series(1, {rows}) AS n; ANALYZE agent_mailbox;"
    ))
}

/// `rows` credentials of 1,000 agents, one issued a second before 2026-02-22 12:00, one in a hundred revoked at its
/// issue time; and fresh statistics.
pub(crate) fn fill_agent_credentials(connection: &mut PgConnection, rows: u32) -> QueryResult<()> {
    connection.batch_execute(&format!(
        "INSERT INTO agent_credentials (credential_id, agent_id, token_hash, created_at, revoked_at) \
         SELECT lpad(to_hex(n), 24, '0'), 'agent-' || (n % 1000), repeat('0', 64), \
         TIMESTAMP '2026-02-22 12:00:00' - ({rows} - n) * INTERVAL '1 second', \
         CASE WHEN n % 100 = 0 THEN TIMESTAMP '2026-02-22 12:00:00' - ({rows} - n) * INTERVAL '1 second' END \
         FROM generate_series(1, {rows}) AS n; ANALYZE agent_credentials;"
    ))
}
