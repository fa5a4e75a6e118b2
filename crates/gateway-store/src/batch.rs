//! PostgreSQL's group writes: one statement for a whole group instead of one per row.
//!
//! A statement sent to PostgreSQL costs a round trip to the server (about 100 µs on loopback), which a SQLite
//! statement (a function call) does not; a group of a thousand rows written row by row spends most of its time
//! waiting for the network. The statements here take each column of the group as one array parameter and
//! `unnest` them, so their text is the same whatever the group's size. SQLite keeps its own row-by-row
//! statements, which its statement cache serves best.
//!
//! The inserts are prepared once per connection and kept (`HAS_STATIC_QUERY_ID`): their plan does not depend on
//! the table. The statements that look rows up by id (claims, attempt records, advances) are planned at every
//! execution instead (`unsafe_to_cache_prepared`: Diesel sends them unnamed, in the same one round trip). A kept
//! statement gets a generic plan after five executions, and one made while the table was new and empty is a
//! sequential scan, kept for the connection's life or until the next `ANALYZE` (autovacuum's comes within
//! minutes): measured on a fresh database, every group then scanned the whole table. Planned each time, they
//! look their rows up through the primary key once the table has grown past a few pages.

use diesel::pg::Pg;
use diesel::query_builder::AstPass;
use diesel::result::Error as DieselError;

/// Implements the query traits Diesel needs to run `$statement<'_>` (a struct that implements
/// `QueryFragment<Pg>` with a fixed text), whose result rows, if it returns any, are of SQL type `$rows`. Diesel
/// keeps it prepared unless its `walk_ast` says otherwise.
macro_rules! postgres_statement {
    ($statement:ident) => {
        impl ::diesel::query_builder::QueryId for $statement<'_> {
            type QueryId = $statement<'static>;
            const HAS_STATIC_QUERY_ID: bool = true;
        }
        impl ::diesel::RunQueryDsl<::diesel::pg::PgConnection> for $statement<'_> {}
    };
    ($statement:ident -> $rows:ty) => {
        postgres_statement!($statement);
        impl ::diesel::query_builder::Query for $statement<'_> {
            type SqlType = $rows;
        }
    };
}

/// Writes `sql`, whose parameters are written `$` and must be as many as `binds` pushes, binding each in turn.
/// Keeps a statement's text readable in one piece: `"… unnest($, $) …"`.
pub(crate) fn push_sql_with_binds<'b>(
    out: &mut AstPass<'_, 'b, Pg>,
    sql: &'static str,
    mut binds: impl FnMut(usize, &mut AstPass<'_, 'b, Pg>) -> diesel::QueryResult<()>,
) -> diesel::QueryResult<()> {
    for (index, piece) in sql.split('$').enumerate() {
        if index > 0 {
            binds(index - 1, out)?;
        }
        out.push_sql(piece);
    }
    Ok(())
}

/// Pairs each row a multi-row `INSERT … RETURNING` was sent with the row it wrote, in the caller's order: `None`
/// for a row the statement skipped (`ON CONFLICT … DO NOTHING`; only rows for which `may_be_skipped` holds can be).
///
/// `written` must be sorted by id. The statements insert their rows in the order they were sent (`WITH
/// ORDINALITY … ORDER BY`), and the id sequence numbers them in that order; each pair is checked (`same`) all the
/// same, so should that ever not hold, the group fails instead of handing a caller another caller's row.
pub(crate) fn pair_in_order<S, R>(
    sent: &[S],
    written: Vec<R>,
    same: impl Fn(&S, &R) -> bool,
    may_be_skipped: impl Fn(&S) -> bool,
) -> diesel::QueryResult<Vec<Option<R>>> {
    let written_count = written.len();
    let mut written = written.into_iter().peekable();
    let mut paired = Vec::with_capacity(sent.len());
    for row in sent {
        match written.peek() {
            Some(next) if same(row, next) => paired.push(written.next()),
            _ if may_be_skipped(row) => paired.push(None),
            _ => return Err(out_of_order(written_count, sent.len())),
        }
    }
    match written.next() {
        Some(_) => Err(out_of_order(written_count, sent.len())),
        None => Ok(paired),
    }
}

fn out_of_order(written: usize, sent: usize) -> DieselError {
    DieselError::DeserializationError(
        format!("a group insert wrote {written} of {sent} rows in an order that does not match the group's").into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(sent: &[(i32, bool)], written: Vec<i32>) -> diesel::QueryResult<Vec<Option<i32>>> {
        pair_in_order(sent, written, |(value, _), written| value == written, |(_, keyed)| *keyed)
    }

    #[test]
    fn skipped_rows_are_none_and_the_rest_keep_their_order() {
        let sent = [(1, false), (2, true), (3, true), (4, false)];
        assert_eq!(pair(&sent, vec![1, 3, 4]).unwrap(), [Some(1), None, Some(3), Some(4)]);
        assert_eq!(pair(&[], vec![]).unwrap(), []);
    }

    #[test]
    fn rows_written_out_of_order_fail_the_group() {
        let sent = [(1, false), (2, true), (3, true)];
        assert!(pair(&sent, vec![3, 2, 1]).is_err(), "an unskippable row out of place");
        assert!(pair(&sent, vec![1, 3, 2]).is_err(), "skippable rows out of place leave rows unpaired");
        assert!(pair(&sent, vec![1, 2, 3, 4]).is_err(), "a row nobody sent");
    }
}
