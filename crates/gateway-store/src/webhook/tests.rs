//! The adapter, on each backend, against the same expectations as the in-memory fake, plus what only SQL can get
//! wrong: the due-row query's plan, constraints, timestamps that must round-trip exactly for the claim check, and
//! (on PostgreSQL, where transactions run side by side) concurrent writers.

use time::Duration;
use time::macros::datetime;

use super::*;
use crate::testing::count;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

on_every_backend!(
    configs_round_trip_keep_their_secret_and_are_unique_per_source_and_event_type,
    a_delivery_for_a_missing_config_is_a_conflict,
    a_claim_hides_the_row_until_its_lease_ends_and_only_the_claimant_records,
    due_rows_are_oldest_first_across_both_statuses_and_never_delivered_or_dead,
    retry_now_resets_only_failed_or_dead_rows,
    the_inspector_filters_and_pages_by_id,
    deleting_a_config_deletes_its_deliveries_and_their_attempts,
    a_config_with_more_history_than_a_batch_is_deleted_whole,
    pruning_takes_only_old_finished_deliveries_a_batch_at_a_time,
    instants_round_trip_exactly_for_the_lease_comparison,
    an_idempotency_key_is_unique_and_finds_its_delivery,
    a_group_insert_fails_only_the_deliveries_a_constraint_refuses,
    group_claims_take_each_row_by_its_own_due_time_and_group_records_answer_each,
    claim_fenced_refuses_an_older_token_and_claims_nothing,
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

fn configs_round_trip_keep_their_secret_and_are_unique_per_source_and_event_type(store: &DieselStore) {
    let created = store.create_config(&new_config("github")).unwrap();
    assert_eq!(store.config(created.id).unwrap(), Some(created.clone()));
    assert_eq!(created.secret.expose(), "It's a Secret to Everybody");
    assert_eq!(created.created_at, START);
    assert!(matches!(store.create_config(&new_config("github")), Err(StoreError::Conflict(_))));
    let other = store.create_config(&new_config("stripe")).unwrap();
    assert_eq!(store.list_configs().unwrap(), [created, other]);
    assert_eq!(store.config(999).unwrap(), None);
}

fn a_delivery_for_a_missing_config_is_a_conflict(store: &DieselStore) {
    assert!(matches!(store.insert_delivery(&new_delivery(42, "s", START)), Err(StoreError::Conflict(_))));
}

fn a_claim_hides_the_row_until_its_lease_ends_and_only_the_claimant_records(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    assert_eq!(
        (row.status, row.attempt_count, row.next_retry_at),
        (DeliveryStatus::Pending, 0, Some(START + Duration::seconds(30)))
    );
    let due_at = START + Duration::seconds(30);
    assert!(store.due_deliveries(due_at - Duration::milliseconds(1), 10).unwrap().is_empty());
    assert_eq!(
        store.due_deliveries(due_at, 10).unwrap(),
        [DueDelivery { id: row.id, target_url: row.target_url.clone(), next_retry_at: due_at }]
    );

    let lease = due_at + Duration::milliseconds(15_123);
    let claimed = store.claim(&[row.id, 999], due_at, lease).unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].next_retry_at, Some(lease));
    assert_eq!(claimed[0].payload, r#"{"n":1}"#);
    assert!(store.claim(&[row.id], due_at, lease).unwrap().is_empty(), "claimed twice");
    assert!(store.due_deliveries(lease - Duration::milliseconds(1), 10).unwrap().is_empty());

    let (attempt, update) = failed_attempt(row.id, 1, due_at);
    assert!(!store.record_attempt(&attempt, lease + Duration::milliseconds(1), &update).unwrap(), "wrong lease");
    let stale = DeliveryAttempt { attempt_number: 3, ..attempt.clone() };
    assert!(!store.record_attempt(&stale, lease, &update).unwrap(), "wrong attempt count");
    assert!(store.record_attempt(&attempt, lease, &update).unwrap());
    let stored = store.delivery(row.id).unwrap().unwrap();
    assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Failed, 1));
    assert_eq!(stored.next_retry_at, update.next_retry_at);
    assert_eq!(stored.last_attempted_at, Some(due_at));
    assert_eq!(stored.error_detail.as_deref(), Some("http_503"));
    let history = store.attempts(row.id).unwrap();
    assert_eq!(history.len(), 3, "every attempt is history, applied or not");
    assert_eq!(history[0], attempt);
}

fn due_rows_are_oldest_first_across_both_statuses_and_never_delivered_or_dead(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let ids: Vec<i64> = (0..6)
        .map(|second| {
            store.insert_delivery(&new_delivery(config.id, "s", START + Duration::seconds(second))).unwrap().id
        })
        .collect();
    // Rows 1 and 3 fail once (due again later than the rest), row 4 is delivered, row 5 is dead.
    for (index, next) in [(1, 100), (3, 40)] {
        let due = START + Duration::seconds(30 + index);
        let lease = due + Duration::seconds(15);
        store.claim(&[ids[index as usize]], due, lease).unwrap();
        let (attempt, mut update) = failed_attempt(ids[index as usize], 1, due);
        update.next_retry_at = Some(START + Duration::seconds(next));
        assert!(store.record_attempt(&attempt, lease, &update).unwrap());
    }
    for (index, status) in [(4_usize, DeliveryStatus::Delivered), (5, DeliveryStatus::Dead)] {
        let due = START + Duration::seconds(34 + index as i64);
        let lease = due + Duration::seconds(15);
        store.claim(&[ids[index]], due, lease).unwrap();
        let (attempt, mut update) = failed_attempt(ids[index], 1, due);
        update.status = status;
        update.next_retry_at = None;
        assert!(store.record_attempt(&attempt, lease, &update).unwrap());
    }
    let order: Vec<i64> =
        store.due_deliveries(START + Duration::days(1), 10).unwrap().iter().map(|row| row.id).collect();
    assert_eq!(order, [ids[0], ids[2], ids[3], ids[1]]);
    let limited: Vec<i64> =
        store.due_deliveries(START + Duration::days(1), 2).unwrap().iter().map(|row| row.id).collect();
    assert_eq!(limited, [ids[0], ids[2]]);
}

fn retry_now_resets_only_failed_or_dead_rows(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    assert_eq!(store.retry_now(row.id, START).unwrap(), RetryNowOutcome::NotAllowed(DeliveryStatus::Pending));
    assert_eq!(store.retry_now(row.id + 1, START).unwrap(), RetryNowOutcome::NotFound);

    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    store.claim(&[row.id], due, lease).unwrap();
    let (attempt, mut update) = failed_attempt(row.id, 1, due);
    update.status = DeliveryStatus::Dead;
    update.attempt_count = 6;
    update.next_retry_at = None;
    store.record_attempt(&attempt, lease, &update).unwrap();

    let later = START + Duration::hours(9);
    let RetryNowOutcome::Reset(reset) = store.retry_now(row.id, later).unwrap() else { panic!("not reset") };
    assert_eq!((reset.status, reset.attempt_count, reset.next_retry_at), (DeliveryStatus::Pending, 0, Some(later)));
    assert_eq!(reset.error_detail.as_deref(), Some("http_503"), "the last error stays visible");
    assert_eq!(store.due_deliveries(later, 10).unwrap().len(), 1);
}

fn the_inspector_filters_and_pages_by_id(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    for second in 0..8 {
        let session = if second % 2 == 0 { "even" } else { "odd" };
        store.insert_delivery(&new_delivery(config.id, session, START + Duration::seconds(second))).unwrap();
    }
    let page = |after_id, limit| DeliveryFilter {
        session_id: Some("even".into()),
        status: Some(DeliveryStatus::Pending),
        created_from: Some(START + Duration::seconds(1)),
        created_before: Some(START + Duration::seconds(7)),
        after_id,
        limit,
    };
    let ids = |filter| store.list_deliveries(&filter).unwrap().iter().map(|row| row.id).collect::<Vec<_>>();
    assert_eq!(ids(page(None, 2)), [3, 5]);
    assert_eq!(ids(page(Some(5), 2)), [7]);
    assert_eq!(ids(page(Some(7), 2)), Vec::<i64>::new());
    let everything = DeliveryFilter {
        session_id: None,
        status: None,
        created_from: None,
        created_before: None,
        after_id: None,
        limit: 500,
    };
    assert_eq!(ids(everything.clone()).len(), 8);
    assert!(ids(DeliveryFilter { status: Some(DeliveryStatus::Dead), ..everything }).is_empty());
}

fn deleting_a_config_deletes_its_deliveries_and_their_attempts(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let kept = store.create_config(&new_config("stripe")).unwrap();
    let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    let other = store.insert_delivery(&new_delivery(kept.id, "s", START)).unwrap();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    store.claim(&[row.id], due, lease).unwrap();
    let (attempt, update) = failed_attempt(row.id, 1, due);
    store.record_attempt(&attempt, lease, &update).unwrap();

    assert!(store.delete_config(config.id).unwrap());
    assert!(!store.delete_config(config.id).unwrap());
    assert_eq!(store.delivery(row.id).unwrap(), None);
    assert!(store.attempts(row.id).unwrap().is_empty());
    assert!(store.delivery(other.id).unwrap().is_some());
    // An attempt still in flight when its config went is not an error.
    assert!(!store.record_attempt(&attempt, lease, &update).unwrap());
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

fn a_config_with_more_history_than_a_batch_is_deleted_whole(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let kept = store.create_config(&new_config("stripe")).unwrap();
    history(store, config.id, 2 * DELETE_BATCH + 17, DeliveryStatus::Delivered, START);
    history(store, kept.id, 3, DeliveryStatus::Delivered, START);
    assert!(store.delete_config(config.id).unwrap());
    assert_eq!(count(store, "webhook_deliveries"), 3);
    assert_eq!(count(store, "webhook_delivery_attempts"), 3);
    assert_eq!(store.config(config.id).unwrap(), None);
}

fn pruning_takes_only_old_finished_deliveries_a_batch_at_a_time(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let cutoff = START + Duration::days(30);
    for status in DeliveryStatus::ALL {
        history(store, config.id, 3, status, START);
        history(store, config.id, 2, status, cutoff);
    }
    assert_eq!(store.prune_finished_deliveries(cutoff, 4).unwrap(), 4);
    assert_eq!(store.prune_finished_deliveries(cutoff, 4).unwrap(), 2, "3 delivered + 3 dead were old enough");
    assert_eq!(store.prune_finished_deliveries(cutoff, 4).unwrap(), 0);
    assert_eq!(count(store, "webhook_deliveries"), 4 * 5 - 6);
    assert_eq!(count(store, "webhook_delivery_attempts"), 4 * 5 - 6, "their attempts went with them");
    let pending_and_failed = DeliveryFilter {
        session_id: None,
        status: None,
        created_from: None,
        created_before: Some(cutoff),
        after_id: None,
        limit: 100,
    };
    let left: Vec<DeliveryStatus> =
        store.list_deliveries(&pending_and_failed).unwrap().iter().map(|d| d.status).collect();
    assert!(left.iter().all(|status| status.is_awaiting_attempt()), "{left:?}");
    assert_eq!(left.len(), 6, "old pending and failed deliveries are never pruned");
}

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

fn an_idempotency_key_is_unique_and_finds_its_delivery(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let key = IdempotencyKey::new("order-42").unwrap();
    let first = store
        .insert_delivery(&NewDelivery { idempotency_key: Some(key.clone()), ..new_delivery(config.id, "s", START) })
        .unwrap();
    let again = store
        .insert_delivery(&NewDelivery { idempotency_key: Some(key.clone()), ..new_delivery(config.id, "s", START) });
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(store.delivery_by_idempotency_key(&key).unwrap().map(|row| row.id), Some(first.id));
    assert_eq!(store.delivery_by_idempotency_key(&IdempotencyKey::new("other").unwrap()).unwrap(), None);
    // Rows without a key never collide.
    store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
}

fn a_group_insert_fails_only_the_deliveries_a_constraint_refuses(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let keyed = |key: &str| NewDelivery {
        idempotency_key: Some(IdempotencyKey::new(key).unwrap()),
        ..new_delivery(config.id, "s", START)
    };
    let outcomes = store
        .insert_deliveries(&[
            new_delivery(config.id, "a", START),
            keyed("k-1"),
            new_delivery(config.id + 100, "no such config", START),
            keyed("k-1"),
            new_delivery(config.id, "b", START),
        ])
        .unwrap();
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok() && outcomes[4].is_ok(), "{outcomes:?}");
    assert!(matches!(outcomes[2], Err(StoreError::Conflict(_))), "{outcomes:?}");
    assert!(matches!(outcomes[3], Err(StoreError::Conflict(_))), "{outcomes:?}");
    let stored: Vec<i64> = store.list_deliveries(&all()).unwrap().iter().map(|row| row.id).collect();
    let inserted: Vec<i64> = outcomes.iter().flatten().map(|row| row.id).collect();
    assert_eq!(stored, inserted, "exactly the accepted rows were committed");
}

fn group_claims_take_each_row_by_its_own_due_time_and_group_records_answer_each(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let rows: Vec<Delivery> = (0..3)
        .map(|index| store.insert_delivery(&new_delivery(config.id, &format!("s{index}"), START)).unwrap())
        .collect();
    let due = |row: &Delivery| row.next_retry_at.unwrap();
    let lease = START + Duration::seconds(45);
    // The third asks with a due time before its own: it was changed since, so it is not claimed.
    let claims = [(rows[0].id, due(&rows[0])), (rows[1].id, due(&rows[1])), (rows[2].id, START)];
    let claimed = store.claim_each(&claims, lease).unwrap();
    assert_eq!(claimed.iter().map(|row| row.id).collect::<Vec<_>>(), [rows[0].id, rows[1].id]);
    assert!(store.claim_each(&claims, lease).unwrap().is_empty(), "claimed rows are hidden until the lease ends");

    let record = |row: &Delivery| {
        let (attempt, update) = failed_attempt(row.id, 1, START + Duration::seconds(31));
        AttemptRecord { attempt, lease, update }
    };
    let recorded = store.record_attempts(&[record(&rows[0]), record(&rows[1]), record(&rows[2])]).unwrap();
    assert_eq!(recorded, [true, true, false], "the unclaimed row keeps its state; its attempt is history only");
    assert_eq!(store.delivery(rows[0].id).unwrap().unwrap().status, DeliveryStatus::Failed);
    assert_eq!(store.attempts(rows[2].id).unwrap().len(), 1);
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

/// The poll's claim is a leader-only write: an older token than the newest the store has seen claims nothing.
fn claim_fenced_refuses_an_older_token_and_claims_nothing(store: &DieselStore) {
    use gateway_core::FencingEpoch;
    let config = store.create_config(&new_config("github")).unwrap();
    let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    assert!(store.claim_fenced(&[row.id], START, lease, FencingToken(5)).unwrap().is_empty(), "not due yet");
    assert_eq!(store.newest_token().unwrap(), FencingToken(5), "a newer token raises the epoch");
    let refused = store.claim_fenced(&[row.id], due, lease, FencingToken(4)).unwrap_err();
    assert_eq!(refused, StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) });
    assert_eq!(store.delivery(row.id).unwrap().unwrap().next_retry_at, Some(due), "nothing was claimed");
    assert_eq!(store.claim_fenced(&[row.id], due, lease, FencingToken(5)).unwrap().len(), 1);
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
