//! Test support: SQLite's plan of a Diesel query, taken from the query itself (its SQL and its bound values), so
//! a plan test checks the statement the adapter runs rather than a hand-written copy of it.

use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Integer, Text};
use diesel::sqlite::Sqlite;

/// `EXPLAIN QUERY PLAN` in front of a query; its rows are `(id, parent, notused, detail)`.
#[derive(Debug, Clone, Copy, QueryId)]
struct ExplainQueryPlan<Q>(Q);

impl<Q: QueryFragment<Sqlite>> QueryFragment<Sqlite> for ExplainQueryPlan<Q> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql("EXPLAIN QUERY PLAN ");
        self.0.walk_ast(out.reborrow())
    }
}

impl<Q> Query for ExplainQueryPlan<Q> {
    type SqlType = (Integer, Integer, Integer, Text);
}

impl<Q> RunQueryDsl<SqliteConnection> for ExplainQueryPlan<Q> {}

/// The `detail` lines of the plan SQLite picks for `query`.
pub(crate) fn query_plan<Q>(connection: &mut SqliteConnection, query: Q) -> QueryResult<Vec<String>>
where
    Q: QueryFragment<Sqlite> + QueryId,
{
    let rows: Vec<(i32, i32, i32, String)> = ExplainQueryPlan(query).load(connection)?;
    Ok(rows.into_iter().map(|(_, _, _, detail)| detail).collect())
}
