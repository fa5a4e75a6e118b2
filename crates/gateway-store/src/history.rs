//! `HistoryStore` over `gateway_history` (one row per hour, series and subject). A flush is one `immediate`
//! transaction of one statement per point: an upsert that adds for a counter; for a maximum, an insert that does
//! nothing when the row exists and an update that changes it only when the new value is larger (the same SQL on
//! both backends, where `MAX(a, b)` and `GREATEST(a, b)` differ). A flush holds a point per series and subject with
//! activity since the last, so the statements per flush are bounded by the series and the active webhook configs.

use diesel::prelude::*;
use diesel::upsert::excluded;
use gateway_core::{HistoryPoint, HistorySeries, HistoryStore, StoreError};
use time::OffsetDateTime;

use crate::connection::DieselStore;
use crate::schema::gateway_history;
use crate::timestamp::{from_db, to_db};

impl HistoryStore for DieselStore {
    fn record_history(&self, added: &[HistoryPoint], raised: &[HistoryPoint]) -> Result<(), StoreError> {
        use gateway_history::dsl;
        if added.is_empty() && raised.is_empty() {
            return Ok(());
        }
        let row = |point: &HistoryPoint| {
            (
                dsl::hour_start.eq(to_db(point.hour_start)),
                dsl::series.eq(point.series.as_str()),
                dsl::subject_id.eq(point.subject_id),
                dsl::value.eq(point.value),
            )
        };
        self.immediate("record history", |connection| {
            for point in added {
                let add = diesel::insert_into(dsl::gateway_history)
                    .values(row(point))
                    .on_conflict((dsl::hour_start, dsl::series, dsl::subject_id))
                    .do_update()
                    .set(dsl::value.eq(dsl::value + excluded(dsl::value)));
                on_backend!(connection, c => add.execute(c))?;
            }
            for point in raised {
                let insert = diesel::insert_into(dsl::gateway_history)
                    .values(row(point))
                    .on_conflict((dsl::hour_start, dsl::series, dsl::subject_id))
                    .do_nothing();
                let raise = diesel::update(
                    dsl::gateway_history
                        .filter(dsl::hour_start.eq(to_db(point.hour_start)))
                        .filter(dsl::series.eq(point.series.as_str()))
                        .filter(dsl::subject_id.eq(point.subject_id))
                        .filter(dsl::value.lt(point.value)),
                )
                .set(dsl::value.eq(point.value));
                on_backend!(connection, c => {
                    insert.execute(c)?;
                    raise.execute(c)
                })?;
            }
            Ok(())
        })
    }

    fn history(&self, from: OffsetDateTime, subject_id: i64) -> Result<Vec<HistoryPoint>, StoreError> {
        use gateway_history::dsl;
        let query = dsl::gateway_history
            .filter(dsl::hour_start.ge(to_db(from)))
            .filter(dsl::subject_id.eq(subject_id))
            .order((dsl::hour_start, dsl::series))
            .select((dsl::hour_start, dsl::series, dsl::value));
        let rows = self.with_connection(
            "read history",
            |connection| on_backend!(connection, c => query.load::<(time::PrimitiveDateTime, String, i64)>(c)),
        )?;
        // A series this version does not know (written by a newer one) is skipped, not an error.
        Ok(rows
            .into_iter()
            .filter_map(|(hour_start, series, value)| {
                let series = HistorySeries::parse(&series)?;
                Some(HistoryPoint { hour_start: from_db(hour_start), series, subject_id, value })
            })
            .collect())
    }

    fn prune_history(&self, before: OffsetDateTime) -> Result<usize, StoreError> {
        use gateway_history::dsl;
        let prune = diesel::delete(dsl::gateway_history.filter(dsl::hour_start.lt(to_db(before))));
        self.with_connection("prune history", |connection| on_backend!(connection, c => prune.execute(c)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use gateway_core::ports::history::hour_start;
    use time::macros::datetime;

    use super::*;

    /// What one flush costs (docs/operations.md, "The last 24 hours"): 200 flushes of a busy instance (the 8
    /// gateway series and 3 series of 10 webhook configs, 38 points) into one hour, on SQLite and, when there is
    /// one, PostgreSQL. Prints the time per flush; asserts only that the values added up. Run by hand:
    /// `cargo test -p gateway-store history::tests::flush_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, printed; run by hand"]
    fn flush_cost() {
        let hour = hour_start(datetime!(2026-02-22 12:34:56 UTC));
        let added: Vec<HistoryPoint> = HistorySeries::ALL
            .into_iter()
            .filter(|series| *series != HistorySeries::LiveAgents && *series != HistorySeries::CronLatenessMaxMs)
            .map(|series| HistoryPoint { hour_start: hour, series, subject_id: 0, value: 3 })
            .chain((1..=10).flat_map(|config| {
                [HistorySeries::Deliveries, HistorySeries::FailedAttempts, HistorySeries::DeadLetters]
                    .map(|series| HistoryPoint { hour_start: hour, series, subject_id: config, value: 1 })
            }))
            .collect();
        let raised: Vec<HistoryPoint> = [HistorySeries::LiveAgents, HistorySeries::CronLatenessMaxMs]
            .map(|series| HistoryPoint { hour_start: hour, series, subject_id: 0, value: 7 })
            .to_vec();
        let sqlite = crate::testing::sqlite();
        let postgres = crate::testing::postgres("history::tests::flush_cost");
        for (backend, store) in [("sqlite", Some(&sqlite.store)), ("postgres", postgres.as_ref().map(|p| &p.store))] {
            let Some(store) = store else { continue };
            const FLUSHES: u32 = 200;
            let began = Instant::now();
            for _ in 0..FLUSHES {
                store.record_history(&added, &raised).unwrap();
            }
            let per_flush = began.elapsed() / FLUSHES;
            let points = store.history(hour, 0).unwrap();
            assert!(points.iter().any(|point| point.series == HistorySeries::Heartbeats && point.value == 600));
            println!(
                "{backend}: {} points per flush, {per_flush:?} per flush (wall time), {:.3} % of each 5-s interval",
                added.len() + raised.len(),
                per_flush.as_secs_f64() / 5.0 * 100.0
            );
        }
    }
}
