//! What only SQL can get wrong: the due-row query's plan, timestamps that must round-trip exactly for the claim
//! check, and (on PostgreSQL, where transactions run side by side) concurrent writers. The port's rules (configs,
//! deliveries, claims, attempts, retention, idempotency keys, fencing) run against this adapter, as against the
//! in-memory fake, in tests/conformance.rs.

use time::Duration;
use time::macros::datetime;

use super::*;
use crate::testing::count;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

on_every_backend!(
    instants_round_trip_exactly_for_the_lease_comparison,
    rival_claims_take_each_delivery_once,
    pruning_racing_retry_now_never_deletes_a_reset_delivery,
);

fn new_config(source: &str) -> NewWebhookConfig {
    NewWebhookConfig {
        source_identifier: source.into(),
        event_type: "push".into(),
        agent_intent: "review".into(),
        target_session: "s-1".into(),
        target_url: "https://example.com/a".into(),
        secret: WebhookSecret::new("It's a Secret to Everybody"),
        created_at: START,
    }
}

fn new_delivery(webhook_id: i64, session: &str, created_at: OffsetDateTime) -> NewDelivery {
    NewDelivery {
        webhook_id,
        session_id: session.into(),
        payload: r#"{"n":1}"#.into(),
        target_url: "https://example.com/a".into(),
        signature: "sha256=00".into(),
        created_at,
        next_retry_at: created_at + Duration::seconds(30),
        idempotency_key: None,
        claimed: false,
    }
}

fn failed_attempt(delivery_id: i64, number: i32, at: OffsetDateTime) -> (DeliveryAttempt, DeliveryUpdate) {
    let attempt = DeliveryAttempt {
        delivery_id,
        attempt_number: number,
        started_at: at,
        duration_ms: 12,
        status_code: Some(503),
        error_class: Some("http_503".into()),
        error_detail: None,
    };
    let update = DeliveryUpdate {
        status: DeliveryStatus::Failed,
        attempt_count: number,
        last_attempted_at: at,
        next_retry_at: Some(at + Duration::seconds(30)),
        error_detail: Some("http_503".into()),
    };
    (attempt, update)
}

/// Writes `count` deliveries of `webhook_id` with one attempt each, straight through SQL (fast).
fn history(store: &DieselStore, webhook_id: i64, count: usize, status: DeliveryStatus, created_at: OffsetDateTime) {
    store
        .immediate("test history", |connection| {
            for _ in 0..count {
                let row = NewDeliveryRow {
                    webhook_id,
                    session_id: "s",
                    payload: "{}",
                    target_url: "https://example.com/a",
                    signature: "sha256=00",
                    status: status.as_str(),
                    attempt_count: 1,
                    next_retry_at: to_db(created_at),
                    created_at: to_db(created_at),
                    idempotency_key: None,
                    claimed_until: None,
                };
                let insert =
                    diesel::insert_into(webhook_deliveries::table).values(&row).returning(webhook_deliveries::id);
                let id: i64 = on_backend!(connection, c => insert.get_result(c))?;
                let attempt = diesel::insert_into(webhook_delivery_attempts::table).values(NewAttemptRow {
                    delivery_id: id,
                    attempt_number: 1,
                    started_at: to_db(created_at),
                    duration_ms: 1,
                    status_code: Some(200),
                    error_class: None,
                    error_detail: None,
                });
                on_backend!(connection, c => attempt.execute(c))?;
            }
            Ok(())
        })
        .unwrap();
}

/// Microseconds, PostgreSQL's precision, which the conformance rules (milliseconds) do not reach.
fn instants_round_trip_exactly_for_the_lease_comparison(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let created = START + Duration::milliseconds(1) + Duration::microseconds(7);
    let row = store.insert_delivery(&new_delivery(config.id, "s", created)).unwrap();
    assert_eq!(row.created_at, created);
    let lease = START + Duration::seconds(45) + Duration::microseconds(999_999);
    let claimed = store.claim(&[row.id], START + Duration::minutes(1), lease).unwrap();
    let (attempt, update) = failed_attempt(row.id, 1, START + Duration::minutes(1));
    assert!(store.record_attempt(&attempt, claimed[0].next_retry_at.unwrap(), &update).unwrap());
}

/// FR-10.8: the poll's query must use the `(status, next_retry_at)` index — and in index order, without a sort —
/// for each status the poll reads.
#[test]
fn the_due_row_query_is_an_index_range_scan_without_a_sort() {
    let fixture = crate::testing::sqlite();
    for status in AWAITING_ATTEMPT {
        let query = due_of_status_query(status.as_str(), to_db(START), 50);
        let plan = fixture.store.with_sqlite("explain", |connection| crate::explain::query_plan(connection, query));
        let plan = plan.unwrap().unwrap();
        assert!(
            plan.iter().any(|line| line.contains("USING INDEX webhook_deliveries_status_next_retry_at")),
            "{status:?}: {plan:?}"
        );
        assert!(!plan.iter().any(|line| line.contains("TEMP B-TREE")), "{status:?}: the query sorts: {plan:?}");
        assert!(!plan.iter().any(|line| line.starts_with("SCAN")), "{status:?}: the query scans the table: {plan:?}");
    }
}

fn all() -> DeliveryFilter {
    DeliveryFilter {
        session_id: None,
        status: None,
        created_from: None,
        created_before: None,
        after_id: None,
        limit: 500,
    }
}

/// PostgreSQL's plan of the poll's query on a table the planner has statistics for (mostly delivered rows): the
/// `(status, next_retry_at, id)` index walked in order under the limit, for each status the poll reads.
#[test]
fn the_due_row_query_walks_the_index_on_postgres() {
    let Some(fixture) = crate::testing::postgres("webhook::tests::the_due_row_query_walks_the_index_on_postgres")
    else {
        return;
    };
    fixture
        .store
        .with_connection("fill", |connection| {
            let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
            crate::explain::fill_webhook_deliveries(c, 50_000)
        })
        .unwrap();
    for status in AWAITING_ATTEMPT {
        let plan = fixture
            .store
            .with_connection("explain", |connection| {
                let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                crate::explain::postgres_plan(c, due_of_status_query(status.as_str(), to_db(START), 50))
            })
            .unwrap()
            .join("\n");
        assert!(plan.contains("Index Scan using webhook_deliveries_status_next_retry_at"), "{status:?}: {plan}");
        assert!(!plan.contains("Sort"), "{status:?}: the query sorts: {plan}");
        assert!(!plan.contains("Seq Scan"), "{status:?}: the query scans the table: {plan}");
    }
}

/// Claimers on separate connections (separate transactions on PostgreSQL) racing for the same due rows: each
/// delivery is claimed once.
fn rival_claims_take_each_delivery_once(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let ids: Vec<i64> = (0..120)
        .map(|n| store.insert_delivery(&new_delivery(config.id, &format!("s{n}"), START)).unwrap().id)
        .collect();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    let claimed: Vec<i64> = std::thread::scope(|scope| {
        let rivals: Vec<_> = (0..4)
            .map(|rival| {
                let ids = &ids;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    for chunk in ids.chunks(10) {
                        let claims: Vec<(i64, OffsetDateTime)> = chunk.iter().map(|id| (*id, due)).collect();
                        let rows = if rival % 2 == 0 {
                            store.claim_each(&claims, lease).unwrap()
                        } else {
                            store.claim(chunk, due, lease).unwrap()
                        };
                        mine.extend(rows.into_iter().map(|row| row.id));
                    }
                    mine
                })
            })
            .collect();
        rivals.into_iter().flat_map(|rival| rival.join().unwrap()).collect()
    });
    let mut claimed = claimed;
    claimed.sort_unstable();
    assert_eq!(claimed, ids);
}

/// Retention and "Retry now" racing on dead deliveries: a delivery that was reset is never deleted, and one
/// that was deleted is not found by the reset; nothing ends half-done.
fn pruning_racing_retry_now_never_deletes_a_reset_delivery(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    history(store, config.id, 200, DeliveryStatus::Dead, START);
    let ids: Vec<i64> = store.list_deliveries(&all()).unwrap().iter().map(|row| row.id).collect();
    let cutoff = START + Duration::days(1);
    let reset: Vec<i64> = std::thread::scope(|scope| {
        let pruner = scope.spawn(|| while store.prune_finished_deliveries(cutoff, 7).unwrap() > 0 {});
        let resetter = scope.spawn(|| {
            ids.iter()
                .rev()
                .filter(|id| matches!(store.retry_now(**id, START).unwrap(), RetryNowOutcome::Reset(_)))
                .copied()
                .collect::<Vec<i64>>()
        });
        pruner.join().unwrap();
        resetter.join().unwrap()
    });
    let left: Vec<Delivery> = store.list_deliveries(&all()).unwrap();
    let mut left_ids: Vec<i64> = left.iter().map(|row| row.id).collect();
    left_ids.sort_unstable();
    let mut reset = reset;
    reset.sort_unstable();
    assert_eq!(left_ids, reset, "exactly the reset deliveries remain");
    assert!(left.iter().all(|row| row.status == DeliveryStatus::Pending), "{left:?}");
    assert_eq!(count(store, "webhook_delivery_attempts"), reset.len() as i64, "their attempts stayed with them");
}
