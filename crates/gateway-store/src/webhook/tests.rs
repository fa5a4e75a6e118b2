//! What only SQL can get wrong: the due-row query's plan, timestamps that must round-trip exactly for the claim
//! check, and (on PostgreSQL, where transactions run side by side) concurrent writers. The port's rules (configs,
//! deliveries, claims, attempts, retention, idempotency keys, fencing) run against this adapter, as against the
//! in-memory fake, in tests/conformance.rs.

use time::Duration;
use time::macros::datetime;

use super::*;
use gateway_core::EndpointDisabled;

use crate::testing::count;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

on_every_backend!(
    instants_round_trip_exactly_for_the_lease_comparison,
    rival_claims_take_each_delivery_once,
    pruning_racing_retry_now_never_deletes_a_reset_delivery,
    a_group_insert_answers_each_delivery_in_order_whichever_way_it_is_written,
    a_key_whose_first_delivery_is_refused_goes_to_the_next_one_of_the_group,
    records_of_one_delivery_in_one_group_are_judged_one_after_the_other,
    a_record_for_a_deleted_delivery_records_nothing_and_the_others_apply,
    claims_and_records_in_opposite_orders_never_fail_each_other,
    concurrent_groups_for_one_config_lose_no_count_and_disable_it_once,
    an_attempt_whose_delivery_is_gone_counts_for_nothing,
    a_success_whose_delivery_is_gone_counts_for_nothing,
    the_idempotency_indexes_hold_only_keyed_rows_and_still_refuse_a_held_key,
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
        inbound_secret: None,
        inbound_require_timestamp: false,
        rate_limit_per_second: None,
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
        signature: None,
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

/// `stats_24h` reads the window's attempts from the `started_at` index (each joined to its delivery by primary key)
/// and the dead letters from their partial index: never a scan of the whole history.
#[test]
fn the_endpoint_stats_query_reads_only_the_window() {
    let fixture = crate::testing::sqlite();
    let query = diesel::sql_query(ENDPOINT_STATS_SQL)
        .bind::<diesel::sql_types::Timestamp, _>(to_db(START))
        .bind::<diesel::sql_types::Timestamp, _>(to_db(START));
    let plan = fixture.store.with_sqlite("explain", |connection| crate::explain::query_plan(connection, query));
    let plan = plan.unwrap().unwrap();
    for index in ["webhook_delivery_attempts_started_at", "webhook_deliveries_dead_at"] {
        assert!(plan.iter().any(|line| line.contains(&format!("USING INDEX {index}"))), "{index}: {plan:?}");
    }
    assert!(!plan.iter().any(|line| line.starts_with("SCAN")), "a table is scanned: {plan:?}");
}

/// FR-10.8: the poll's query must use the `(status, next_retry_at)` index — and in index order, without a sort —
/// for each status the poll reads.
#[test]
fn the_due_row_query_is_an_index_range_scan_without_a_sort() {
    let fixture = crate::testing::sqlite();
    for status in AWAITING_ATTEMPT {
        let query = due_of_status_query(status.as_str(), to_db(START), 50, vec![7]);
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
                crate::explain::postgres_plan(c, due_of_status_query(status.as_str(), to_db(START), 50, vec![7]))
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

fn keyed(webhook_id: i64, session: &str, key: &str) -> NewDelivery {
    NewDelivery { idempotency_key: Some(IdempotencyKey::new(key).unwrap()), ..new_delivery(webhook_id, session, START) }
}

/// Deliveries that differ only in what the inserted row carries beside the port's fields (the claim marker) or not
/// at all, many of them, with held keys in between: each caller gets its own row back, in its own place. On
/// PostgreSQL the group is one statement whose rows come back in the server's order.
fn a_group_insert_answers_each_delivery_in_order_whichever_way_it_is_written(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let holder = store.insert_delivery(&keyed(config.id, "held", "k-held")).unwrap();
    let group: Vec<NewDelivery> = (0..300)
        .map(|n| match n % 5 {
            0 => NewDelivery { claimed: true, ..new_delivery(config.id, "same", START) },
            1 | 2 => new_delivery(config.id, "same", START),
            3 => keyed(config.id, &format!("s{n}"), &format!("k-{n}")),
            _ => keyed(config.id, "held", "k-held"),
        })
        .collect();
    let outcomes = store.insert_deliveries(&group).unwrap();
    assert_eq!(outcomes.len(), group.len());
    for (n, (asked, outcome)) in group.iter().zip(&outcomes).enumerate() {
        if n % 5 == 4 {
            assert!(matches!(outcome, Err(StoreError::Conflict(_))), "{n}: {outcome:?}");
            continue;
        }
        let row = outcome.as_ref().unwrap();
        assert_eq!(row.session_id, asked.session_id, "{n}");
        // The port's fields of claimed and unclaimed rows are alike: the claim marker tells them apart.
        let marker = store
            .with_connection("read the claim marker", |connection| {
                let query = webhook_deliveries::table.find(row.id).select(webhook_deliveries::claimed_until);
                on_backend!(connection, c => query.first::<Option<PrimitiveDateTime>>(c))
            })
            .unwrap();
        assert_eq!(marker.is_some(), asked.claimed, "{n}: a claimed row went to another caller");
    }
    let ids: Vec<i64> = outcomes.iter().flatten().map(|row| row.id).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "ids follow the group's order");
    assert_eq!(count(store, "webhook_deliveries"), 1 + ids.len() as i64);
    let k3 = store.delivery_by_idempotency_key(&IdempotencyKey::new("k-3").unwrap()).unwrap();
    assert_eq!(k3.map(|row| row.session_id), Some("s3".to_owned()));
    assert_eq!(store.delivery_by_idempotency_key(&IdempotencyKey::new("k-held").unwrap()).unwrap(), Some(holder));
}

/// Row by row, a delivery refused for its missing config leaves its key free, so a later delivery of the group
/// with the same key takes it; and one refused for its key never reaches its config.
fn a_key_whose_first_delivery_is_refused_goes_to_the_next_one_of_the_group(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let gone = config.id + 1_000;
    let outcomes = store
        .insert_deliveries(&[
            keyed(gone, "first", "k"),
            keyed(config.id, "second", "k"),
            keyed(config.id, "third", "k"),
            new_delivery(config.id, "plain", START),
        ])
        .unwrap();
    let sessions: Vec<Option<&str>> =
        outcomes.iter().map(|outcome| outcome.as_ref().ok().map(|row| row.session_id.as_str())).collect();
    assert_eq!(sessions, [None, Some("second"), None, Some("plain")], "{outcomes:?}");
    assert!(outcomes.iter().all(|outcome| !matches!(outcome, Err(error) if !matches!(error, StoreError::Conflict(_)))));
    let holder = store.delivery_by_idempotency_key(&IdempotencyKey::new("k").unwrap()).unwrap();
    assert_eq!(holder.map(|row| row.session_id), Some("second".to_owned()));
}

/// Two attempts of one delivery in one group (the second ran under the state the first leaves): each is judged
/// against the row as the one before left it, as one by one; an attempt whose claim is lost is history only.
fn records_of_one_delivery_in_one_group_are_judged_one_after_the_other(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
    let other = store.insert_delivery(&new_delivery(config.id, "o", START)).unwrap();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    assert_eq!(store.claim_each(&[(row.id, due), (other.id, due)], lease).unwrap().len(), 2);
    let (first, first_update) = failed_attempt(row.id, 1, due);
    // The second attempt ran under the retry instant the first one sets.
    let (second, second_update) = failed_attempt(row.id, 2, due + Duration::seconds(30));
    let (stale, stale_update) = failed_attempt(row.id, 1, due);
    let (lost, lost_update) = failed_attempt(other.id, 3, due);
    let records = [
        AttemptRecord { webhook_id: config.id, attempt: first, lease, update: first_update.clone() },
        AttemptRecord { webhook_id: config.id, attempt: lost, lease, update: lost_update },
        AttemptRecord {
            webhook_id: config.id,
            attempt: second,
            lease: first_update.next_retry_at.unwrap(),
            update: second_update.clone(),
        },
        AttemptRecord { webhook_id: config.id, attempt: stale, lease, update: stale_update },
    ];
    assert_eq!(store.record_attempts(&records).unwrap(), [true, false, true, false]);
    let stored = store.delivery(row.id).unwrap().unwrap();
    assert_eq!((stored.attempt_count, stored.next_retry_at), (2, second_update.next_retry_at));
    let numbers: Vec<i32> = store.attempts(row.id).unwrap().iter().map(|attempt| attempt.attempt_number).collect();
    assert_eq!(numbers, [1, 2, 1], "every attempt is history, in the group's order");
    assert_eq!(store.delivery(other.id).unwrap().unwrap().attempt_count, 0, "a lost claim leaves the row");
    assert_eq!(store.attempts(other.id).unwrap().len(), 1);
}

/// A delivery deleted (with its config) during its attempt: its record answers `false` and writes nothing, and the
/// other records of the group apply.
fn a_record_for_a_deleted_delivery_records_nothing_and_the_others_apply(store: &DieselStore) {
    let kept = store.create_config(&new_config("github")).unwrap();
    let doomed = store.create_config(&new_config("gitlab")).unwrap();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    let rows: Vec<Delivery> = [kept.id, doomed.id, kept.id]
        .iter()
        .map(|config| store.insert_delivery(&new_delivery(*config, "s", START)).unwrap())
        .collect();
    let claims: Vec<(i64, OffsetDateTime)> = rows.iter().map(|row| (row.id, due)).collect();
    assert_eq!(store.claim_each(&claims, lease).unwrap().len(), 3);
    assert!(store.delete_config(doomed.id).unwrap());
    let records: Vec<AttemptRecord> = rows
        .iter()
        .map(|row| {
            let (attempt, update) = failed_attempt(row.id, 1, due);
            AttemptRecord { webhook_id: row.webhook_id, attempt, lease, update }
        })
        .collect();
    assert_eq!(store.record_attempts(&records).unwrap(), [true, false, true]);
    assert_eq!(count(store, "webhook_delivery_attempts"), 2);
    assert!(store.attempts(rows[1].id).unwrap().is_empty());
    assert_eq!(store.delivery(rows[2].id).unwrap().map(|row| row.status), Some(DeliveryStatus::Failed));
}

/// Groups of claims and of attempt records over the same rows, each group listing them in another order, on
/// separate connections (separate transactions on PostgreSQL, where each locks its rows): none of them fails (a
/// deadlock's victim would be `Unavailable`), and every row is claimed by exactly one group.
fn claims_and_records_in_opposite_orders_never_fail_each_other(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let due = START + Duration::seconds(30);
    let lease = due + Duration::seconds(15);
    for round in 0..10 {
        let rows: Vec<NewDelivery> =
            (0..40).map(|n| new_delivery(config.id, &format!("r{round}-{n}"), START)).collect();
        let ids: Vec<i64> =
            store.insert_deliveries(&rows).unwrap().into_iter().map(|outcome| outcome.unwrap().id).collect();
        let backwards: Vec<i64> = ids.iter().rev().copied().collect();
        let interleaved: Vec<i64> = ids.iter().step_by(2).chain(ids.iter().skip(1).step_by(2)).copied().collect();
        let barrier = std::sync::Barrier::new(4);
        let claimed: Vec<i64> = std::thread::scope(|scope| {
            let claimers: Vec<_> = [&ids, &backwards, &interleaved]
                .into_iter()
                .map(|order| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let claims: Vec<(i64, OffsetDateTime)> = order.iter().map(|id| (*id, due)).collect();
                        barrier.wait();
                        store.claim_each(&claims, lease).unwrap()
                    })
                })
                .collect();
            let recorder = scope.spawn(|| {
                // Under a lease nobody holds: the rows are locked, their attempts recorded, none applied.
                let records: Vec<AttemptRecord> = backwards
                    .iter()
                    .map(|id| {
                        let (attempt, update) = failed_attempt(*id, 1, due);
                        AttemptRecord { webhook_id: config.id, attempt, lease: START, update }
                    })
                    .collect();
                barrier.wait();
                store.record_attempts(&records).unwrap()
            });
            assert!(recorder.join().unwrap().iter().all(|applied| !applied));
            claimers.into_iter().flat_map(|claimer| claimer.join().unwrap()).map(|row| row.id).collect()
        });
        let mut claimed = claimed;
        claimed.sort_unstable();
        assert_eq!(claimed, ids, "round {round}: every row claimed once");
    }
}

/// What `stats_24h` costs: 100 configs, 100,000 attempts (and 1,000 dead letters) in the window, 400,000 older
/// attempts outside it. Prints the time of one `endpoint_stats` (the read behind a config list).
#[test]
#[ignore = "a measurement, not a check"]
fn endpoint_stats_cost() {
    fn fill(store: &DieselStore) {
        // Deliveries 1..=500,000 over configs 1..=100; each has one attempt: the first 400,000 two days old, the
        // rest within the hour; one in ten of the recent ones failed, one in ten of those dead.
        let (series, old, recent) = if store.is_sqlite() {
            (
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500000)",
                "'2026-02-20 12:00:00'",
                "'2026-02-22 11:30:00'",
            )
        } else {
            (
                "WITH n(i) AS (SELECT generate_series(1, 500000))",
                "TIMESTAMP '2026-02-20 12:00:00'",
                "TIMESTAMP '2026-02-22 11:30:00'",
            )
        };
        let configs = (1..=100)
            .map(|n| format!("('src-{n}', 'push', 'review', 's', 'https://example.com/a', 'secret', {old})"))
            .collect::<Vec<_>>()
            .join(", ");
        let statements = [
            format!(
                "INSERT INTO webhook_configs (source_identifier, event_type, agent_intent, target_session, \
                 target_url, secret, created_at) VALUES {configs}"
            ),
            format!(
                "INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, status, \
                 attempt_count, last_attempted_at, created_at) {series} SELECT 1 + i % 100, 's', '{{}}', 'u', 'sig', \
                 CASE WHEN i > 400000 AND i % 100 = 0 THEN 'dead' ELSE 'delivered' END, 1, \
                 CASE WHEN i > 400000 THEN {recent} ELSE {old} END, {old} FROM n"
            ),
            format!(
                "INSERT INTO webhook_delivery_attempts (delivery_id, attempt_number, started_at, duration_ms, \
                 error_class) {series} SELECT i, 1, CASE WHEN i > 400000 THEN {recent} ELSE {old} END, 5, \
                 CASE WHEN i % 10 = 0 THEN 'http_500' ELSE NULL END FROM n"
            ),
        ];
        for statement in statements {
            store
                .with_connection(
                    "fill",
                    |connection| on_backend!(connection, c => diesel::sql_query(&statement).execute(c)),
                )
                .unwrap();
        }
    }
    fn time(store: &DieselStore, label: &str) {
        let since = START - Duration::hours(24);
        let stats = store.endpoint_stats(since).unwrap();
        let runs: u32 = 10;
        let started = std::time::Instant::now();
        for _ in 0..runs {
            store.endpoint_stats(since).unwrap();
        }
        let each = started.elapsed() / runs;
        let total: u64 = stats.values().map(|one| one.delivered + one.failed_attempts).sum();
        println!("{label}: {} configs, {total} attempts in the window, {each:?} per endpoint_stats", stats.len());
    }
    let fixture = crate::testing::sqlite();
    fill(&fixture.store);
    time(&fixture.store, "sqlite");
    if let Some(fixture) = crate::testing::postgres("webhook::tests::endpoint_stats_cost") {
        fill(&fixture.store);
        time(&fixture.store, "postgres");
    }
}

/// What counting health costs the group commit of attempt records: groups of 64 failed attempts over 8 configs,
/// recorded without the health step (the port's records as before issue 20: on PostgreSQL one statement, on SQLite
/// one IMMEDIATE transaction) and with it (`record_attempts_counting`), alternating in one run.
#[test]
#[ignore = "a measurement, not a check"]
fn record_counting_cost() {
    const GROUP: usize = 64;
    const ROUNDS: usize = 40;
    fn group(store: &DieselStore, configs: &[i64]) -> Vec<AttemptRecord> {
        let drafts: Vec<NewDelivery> = (0..GROUP)
            .map(|n| NewDelivery { claimed: true, ..new_delivery(configs[n % configs.len()], "s", START) })
            .collect();
        let rows: Vec<Delivery> = store.insert_deliveries(&drafts).unwrap().into_iter().map(Result::unwrap).collect();
        rows.iter()
            .map(|row| AttemptRecord {
                webhook_id: row.webhook_id,
                attempt: DeliveryAttempt {
                    delivery_id: row.id,
                    attempt_number: 1,
                    started_at: START,
                    duration_ms: 5,
                    status_code: Some(500),
                    error_class: Some("http_500".into()),
                    error_detail: None,
                },
                lease: row.next_retry_at.unwrap(),
                update: DeliveryUpdate {
                    status: DeliveryStatus::Failed,
                    attempt_count: 1,
                    last_attempted_at: START,
                    next_retry_at: Some(START + Duration::seconds(30)),
                    error_detail: Some("http_500".into()),
                    signature: None,
                },
            })
            .collect()
    }
    fn without_health(store: &DieselStore, records: &[AttemptRecord]) {
        if store.is_sqlite() {
            store
                .immediate("record", |connection| {
                    records
                        .iter()
                        .map(|entry| record(connection, &entry.attempt, entry.lease, &entry.update))
                        .collect::<QueryResult<Vec<Option<bool>>>>()
                })
                .unwrap();
        } else {
            store
                .with_connection("record", |connection| match connection {
                    AnyConnection::Postgres(c) => crate::webhook::postgres::record_attempts(c, records),
                    AnyConnection::Sqlite(_) => unreachable!("a PostgreSQL store"),
                })
                .unwrap();
        }
    }
    fn measure(store: &DieselStore, label: &str) {
        let configs: Vec<i64> =
            (0..8).map(|n| store.create_config(&new_config(&format!("src-{n}"))).unwrap().id).collect();
        let (mut before, mut after) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        for _ in 0..ROUNDS {
            let records = group(store, &configs);
            let started = std::time::Instant::now();
            without_health(store, &records);
            before += started.elapsed();
            let records = group(store, &configs);
            let started = std::time::Instant::now();
            store.record_attempts_counting(&records, 0).unwrap();
            after += started.elapsed();
        }
        let per_group = |total: std::time::Duration| total / u32::try_from(ROUNDS).unwrap();
        println!(
            "{label}: a group of {GROUP} records, without health {:?}, with health {:?}",
            per_group(before),
            per_group(after)
        );
    }
    measure(&crate::testing::sqlite().store, "sqlite");
    if let Some(fixture) = crate::testing::postgres("webhook::tests::record_counting_cost") {
        measure(&fixture.store, "postgres");
    }
}

/// Groups of failed attempts for one config recorded side by side (on PostgreSQL, transactions that each count
/// the config in one statement): every failure is counted, and the limit, crossed by one of the groups, is reported
/// once, by the attempt that reached it.
fn concurrent_groups_for_one_config_lose_no_count_and_disable_it_once(store: &DieselStore) {
    const THREADS: usize = 4;
    const GROUPS: usize = 10;
    const GROUP: usize = 5;
    const LIMIT: u32 = 150;
    let config = store.create_config(&new_config("github")).unwrap();
    let drafts: Vec<NewDelivery> = (0..THREADS * GROUPS * GROUP)
        .map(|n| NewDelivery { claimed: true, ..new_delivery(config.id, &format!("s{n}"), START) })
        .collect();
    let rows: Vec<Delivery> = store.insert_deliveries(&drafts).unwrap().into_iter().map(Result::unwrap).collect();
    let barrier = std::sync::Barrier::new(THREADS);
    let disables: Vec<EndpointDisabled> = std::thread::scope(|scope| {
        let recorders: Vec<_> = rows
            .chunks(GROUPS * GROUP)
            .map(|mine| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut disables = Vec::new();
                    for group in mine.chunks(GROUP) {
                        let records: Vec<AttemptRecord> = group
                            .iter()
                            .map(|row| {
                                let (attempt, update) = failed_attempt(row.id, 1, START);
                                AttemptRecord {
                                    webhook_id: config.id,
                                    attempt,
                                    lease: row.next_retry_at.unwrap(),
                                    update,
                                }
                            })
                            .collect();
                        let recorded = store.record_attempts_counting(&records, LIMIT).unwrap();
                        assert!(recorded.iter().all(|recorded| recorded.applied));
                        disables.extend(recorded.into_iter().filter_map(|recorded| recorded.disabled));
                    }
                    disables
                })
            })
            .collect();
        recorders.into_iter().flat_map(|recorder| recorder.join().unwrap()).collect()
    });
    let stored = store.config(config.id).unwrap().unwrap();
    assert_eq!(stored.consecutive_failures, i64::try_from(rows.len()).unwrap(), "no failure lost");
    assert!(!stored.enabled);
    assert_eq!(
        disables,
        [EndpointDisabled {
            webhook_id: config.id,
            consecutive_failures: i64::from(LIMIT),
            reason: DisabledReason::Failing
        }],
        "one disable, reported once"
    );
}

/// Writers that each insert a group of claimed deliveries for one shared config and then record their attempts
/// (successes), side by side, as the webhook benchmark's ceiling does and as several gateway instances on one
/// PostgreSQL do: no write fails, and every attempt is recorded and counted. Meanwhile a transaction holds the key
/// share lock on the config that a delivery insert's foreign key check takes (as a group insert on its locking
/// path or a fan-out does): it keeps a live member in the multixact of every version of the config row that the
/// record groups leave behind, which is what let a count that locked and updated its configs in one statement
/// deadlock with another (see `postgres`' module comment). Without it the deadlock needs the inserts' own brief
/// locks to fall just so, and showed in one run of four. PostgreSQL only: SQLite runs one writer at a time.
#[test]
fn writers_inserting_and_recording_groups_for_one_config_never_deadlock() {
    const THREADS: usize = 8;
    const GROUPS: usize = 25;
    const GROUP: usize = 8;
    let Some(fixture) = crate::testing::postgres(
        "webhook::tests::writers_inserting_and_recording_groups_for_one_config_never_deadlock",
    ) else {
        return;
    };
    let store = &fixture.store;
    let config = store.create_config(&new_config("github")).unwrap();
    let barrier = std::sync::Barrier::new(THREADS + 1);
    let (writing, all_written) = std::sync::mpsc::channel::<()>();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let barrier = &barrier;
        // A group insert in its transaction (the path that locks its configs first, or a fan-out) holds the key
        // share lock on the config that the foreign key check takes, here for as long as the writers run.
        scope.spawn(move || {
            store
                .with_connection("hold a key share lock on the config", |connection| {
                    let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                    c.transaction(|c| {
                        webhook_configs::table
                            .find(config.id)
                            .select(webhook_configs::id)
                            .for_key_share()
                            .load::<i64>(c)?;
                        barrier.wait();
                        // Until every writer has dropped its sender.
                        while all_written.recv().is_ok() {}
                        Ok(())
                    })
                })
                .unwrap();
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|writer| {
                let writing = writing.clone();
                scope.spawn(move || {
                    let _writing = writing;
                    barrier.wait();
                    let mut failures = Vec::new();
                    for turn in 0..GROUPS {
                        let drafts: Vec<NewDelivery> = (0..GROUP)
                            .map(|n| NewDelivery {
                                claimed: true,
                                ..new_delivery(config.id, &format!("w{writer}-{turn}-{n}"), START)
                            })
                            .collect();
                        let written = match store.insert_deliveries_to_configs(&drafts) {
                            Ok(written) => written,
                            Err(error) => {
                                failures.push(format!("insert: {error}"));
                                continue;
                            }
                        };
                        let records: Vec<AttemptRecord> = written
                            .into_iter()
                            .map(|written| {
                                let (row, _secret) = written.unwrap();
                                let (mut attempt, mut update) = failed_attempt(row.id, 1, START);
                                attempt.status_code = Some(204);
                                attempt.error_class = None;
                                update.status = DeliveryStatus::Delivered;
                                update.next_retry_at = None;
                                update.error_detail = None;
                                update.signature = Some("sha256=01".into());
                                AttemptRecord {
                                    webhook_id: config.id,
                                    attempt,
                                    lease: row.next_retry_at.unwrap(),
                                    update,
                                }
                            })
                            .collect();
                        match store.record_attempts_counting(&records, 100) {
                            Ok(recorded) => assert!(recorded.iter().all(|recorded| recorded.applied)),
                            Err(error) => failures.push(format!("record: {error}")),
                        }
                    }
                    failures
                })
            })
            .collect();
        drop(writing);
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{} writes failed, the first: {:?}", failures.len(), failures.first());
    let total = i64::try_from(THREADS * GROUPS * GROUP).unwrap();
    assert_eq!(count(store, "webhook_delivery_attempts"), total);
    assert_eq!(count(store, "webhook_deliveries WHERE status = 'delivered'"), total);
    let stored = store.config(config.id).unwrap().unwrap();
    assert!(stored.enabled);
    assert_eq!(stored.consecutive_failures, 0);
}

/// A group in which one delivery has gone (deleted under its attempt) counts only the attempts that were recorded.
fn an_attempt_whose_delivery_is_gone_counts_for_nothing(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let drafts: Vec<NewDelivery> =
        (0..3).map(|n| NewDelivery { claimed: true, ..new_delivery(config.id, &format!("s{n}"), START) }).collect();
    let rows: Vec<Delivery> = store.insert_deliveries(&drafts).unwrap().into_iter().map(Result::unwrap).collect();
    store
        .with_connection("delete a delivery", |connection| {
            let delete = diesel::delete(webhook_deliveries::table.find(rows[1].id));
            on_backend!(connection, c => delete.execute(c))
        })
        .unwrap();
    let records: Vec<AttemptRecord> = rows
        .iter()
        .map(|row| {
            let (attempt, update) = failed_attempt(row.id, 1, START);
            AttemptRecord { webhook_id: config.id, attempt, lease: row.next_retry_at.unwrap(), update }
        })
        .collect();
    let recorded = store.record_attempts_counting(&records, 2).unwrap();
    let applied: Vec<bool> = recorded.iter().map(|recorded| recorded.applied).collect();
    assert_eq!(applied, [true, false, true]);
    let disabled: Vec<bool> = recorded.iter().map(|recorded| recorded.disabled.is_some()).collect();
    assert_eq!(disabled, [false, false, true], "the second failure counted is the one that reaches 2");
    assert_eq!(store.config(config.id).unwrap().unwrap().consecutive_failures, 2);
    assert_eq!(count(store, "webhook_delivery_attempts"), 2);
}

/// The same for a group of successes to one config, which PostgreSQL records in one statement without a
/// transaction: a gone delivery's success neither resets the count nor moves `last_success_at`, and when every
/// delivery of the group is gone the config is left as it was.
fn a_success_whose_delivery_is_gone_counts_for_nothing(store: &DieselStore) {
    let config = store.create_config(&new_config("github")).unwrap();
    let drafts: Vec<NewDelivery> =
        (0..4).map(|n| NewDelivery { claimed: true, ..new_delivery(config.id, &format!("s{n}"), START) }).collect();
    let rows: Vec<Delivery> = store.insert_deliveries(&drafts).unwrap().into_iter().map(Result::unwrap).collect();
    let (attempt, update) = failed_attempt(rows[3].id, 1, START);
    store
        .record_attempts_counting(
            &[AttemptRecord { webhook_id: config.id, attempt, lease: rows[3].next_retry_at.unwrap(), update }],
            100,
        )
        .unwrap();
    assert_eq!(store.config(config.id).unwrap().unwrap().consecutive_failures, 1);
    let delete = |id: i64| {
        store
            .with_connection("delete a delivery", |connection| {
                let delete = diesel::delete(webhook_deliveries::table.find(id));
                on_backend!(connection, c => delete.execute(c))
            })
            .unwrap();
    };
    let success = |row: &Delivery, at: OffsetDateTime| AttemptRecord {
        webhook_id: config.id,
        attempt: DeliveryAttempt {
            delivery_id: row.id,
            attempt_number: 1,
            started_at: at,
            duration_ms: 12,
            status_code: Some(204),
            error_class: None,
            error_detail: None,
        },
        lease: row.next_retry_at.unwrap(),
        update: DeliveryUpdate {
            status: DeliveryStatus::Delivered,
            attempt_count: 1,
            last_attempted_at: at,
            next_retry_at: None,
            error_detail: None,
            signature: None,
        },
    };
    delete(rows[2].id);
    let recorded = store.record_attempts_counting(&[success(&rows[2], START + Duration::minutes(9))], 100).unwrap();
    assert!(!recorded[0].applied);
    let stored = store.config(config.id).unwrap().unwrap();
    assert_eq!(
        (stored.consecutive_failures, stored.last_success_at),
        (1, None),
        "a group of gone deliveries counts nothing"
    );

    delete(rows[1].id);
    // The gone delivery's attempt started last: had it counted, `last_success_at` would be its start.
    let records = [success(&rows[0], START + Duration::minutes(1)), success(&rows[1], START + Duration::minutes(5))];
    let recorded = store.record_attempts_counting(&records, 100).unwrap();
    let applied: Vec<bool> = recorded.iter().map(|recorded| recorded.applied).collect();
    assert_eq!(applied, [true, false]);
    let stored = store.config(config.id).unwrap().unwrap();
    assert_eq!(stored.consecutive_failures, 0);
    assert_eq!(stored.last_success_at, Some(START + Duration::minutes(1)));
    assert_eq!(count(store, "webhook_delivery_attempts"), 2);
}

#[derive(diesel::QueryableByName)]
struct IndexDefinition {
    #[diesel(sql_type = diesel::sql_types::Text)]
    definition: String,
}

/// Most deliveries and events carry no key: partial indexes (migration 2026-12-21-000008) spare each of them an
/// index entry, and the group insert's `ON CONFLICT` must name their predicate or PostgreSQL refuses it.
fn the_idempotency_indexes_hold_only_keyed_rows_and_still_refuse_a_held_key(store: &DieselStore) {
    for index in ["webhook_deliveries_idempotency_key", "webhook_events_idempotency_key"] {
        let definition = store
            .with_connection("read index definition", |connection| match connection {
                AnyConnection::Sqlite(c) => {
                    diesel::sql_query("SELECT sql AS definition FROM sqlite_master WHERE name = ?")
                        .bind::<diesel::sql_types::Text, _>(index)
                        .get_result::<IndexDefinition>(&mut **c)
                }
                AnyConnection::Postgres(c) => {
                    diesel::sql_query("SELECT indexdef AS definition FROM pg_indexes WHERE indexname = $1")
                        .bind::<diesel::sql_types::Text, _>(index)
                        .get_result::<IndexDefinition>(&mut **c)
                }
            })
            .unwrap()
            .definition;
        assert!(
            definition.to_lowercase().contains("where (idempotency_key is not null)")
                || definition.to_lowercase().contains("where idempotency_key is not null"),
            "{index}: {definition}"
        );
    }
    let config = store.create_config(&new_config("partial")).unwrap();
    let unkeyed: Vec<NewDelivery> = (0..3).map(|_| new_delivery(config.id, "s", START)).collect();
    let written = store.insert_deliveries(&unkeyed).unwrap();
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    let first = store.insert_deliveries(&[keyed(config.id, "s", "key-1")]).unwrap();
    assert!(first[0].is_ok(), "{first:?}");
    let again =
        store.insert_deliveries(&[keyed(config.id, "s", "key-1"), new_delivery(config.id, "s", START)]).unwrap();
    assert!(matches!(again[0], Err(StoreError::Conflict(_))), "{again:?}");
    assert!(again[1].is_ok(), "{again:?}");
    let found = store.delivery_by_idempotency_key(&IdempotencyKey::new("key-1").unwrap()).unwrap();
    assert_eq!(found.map(|delivery| delivery.id), first[0].as_ref().ok().map(|delivery| delivery.id));
}
