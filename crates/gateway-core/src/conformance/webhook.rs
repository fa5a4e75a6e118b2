//! Rules every [`WebhookStore`] must keep: configs, deliveries and their idempotency keys, the order of due rows,
//! the claim protocol (claims, leases, recording attempts under them), "Retry now", the inspector's query,
//! retention, the fencing of the poll's claims, and the receipts that make a replayed inbound webhook a duplicate.
//!
//! Every rule expects a fresh, empty store. Instants carry milliseconds, which every backend keeps exactly; ids are
//! never assumed to start anywhere, only to ascend in insertion order.

use time::{Duration, OffsetDateTime};

use crate::{
    AttemptRecord, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, DeliveryUpdate, DueDelivery, FanOut,
    FencingEpoch, FencingToken, IdempotencyKey, InboundInsert, NewDelivery, NewWebhookConfig, NewWebhookEvent,
    ReceiptKey, RecoverWindow, RetryNowOutcome, StoreError, WebhookConfig, WebhookConfigChange, WebhookEvent,
    WebhookSecret, WebhookStore,
};

/// How many deliveries [`a_config_with_more_history_than_a_delete_batch_is_deleted_whole`] gives a config: an
/// adapter that deletes a config's history in batches must use batches smaller than this for the rule to prove the
/// batching (gateway-store's SQLite adapter deletes 1,000 at a time).
pub const HISTORY_BEYOND_A_DELETE_BATCH: usize = 2_017;

/// How long after its creation a delivery of these rules is first due.
const FIRST_DUE: Duration = Duration::seconds(30);

/// How long the claims of these rules hold.
const LEASE: Duration = Duration::seconds(15);

fn new_config(source: &str, event_type: &str, at: OffsetDateTime) -> NewWebhookConfig {
    NewWebhookConfig {
        source_identifier: source.into(),
        event_type: event_type.into(),
        agent_intent: "review".into(),
        target_session: "s-1".into(),
        target_url: format!("https://example.com/{source}/{event_type}"),
        secret: WebhookSecret::new("It's a Secret to Everybody"),
        created_at: at,
        inbound_secret: None,
        inbound_require_timestamp: false,
        rate_limit_per_second: None,
    }
}

fn config(store: &dyn WebhookStore, source: &str, at: OffsetDateTime) -> WebhookConfig {
    store.create_config(&new_config(source, "push", at)).expect("create config")
}

/// A pending delivery created at `created_at`, first due [`FIRST_DUE`] later.
fn new_delivery(webhook_id: i64, session: &str, created_at: OffsetDateTime) -> NewDelivery {
    NewDelivery {
        webhook_id,
        session_id: session.into(),
        payload: r#"{"n":1}"#.into(),
        target_url: "https://example.com/a".into(),
        signature: "sha256=00".into(),
        created_at,
        next_retry_at: created_at + FIRST_DUE,
        idempotency_key: None,
        claimed: false,
    }
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::new(text).expect("a valid key")
}

fn keyed(webhook_id: i64, text: &str, created_at: OffsetDateTime) -> NewDelivery {
    NewDelivery { idempotency_key: Some(key(text)), ..new_delivery(webhook_id, "s", created_at) }
}

fn insert(store: &dyn WebhookStore, delivery: &NewDelivery) -> Delivery {
    store.insert_delivery(delivery).expect("insert delivery")
}

/// Attempt `number` of `delivery_id`, started at `at`, and the update that leaves the row `status`: due again
/// [`FIRST_DUE`] later when failed, never again when delivered or dead.
fn attempt_and_update(
    delivery_id: i64,
    number: i32,
    at: OffsetDateTime,
    status: DeliveryStatus,
) -> (DeliveryAttempt, DeliveryUpdate) {
    let delivered = status == DeliveryStatus::Delivered;
    let attempt = DeliveryAttempt {
        delivery_id,
        attempt_number: number,
        started_at: at,
        duration_ms: 12,
        status_code: Some(if delivered { 200 } else { 503 }),
        error_class: (!delivered).then(|| "http_503".to_owned()),
        error_detail: None,
    };
    let update = DeliveryUpdate {
        status,
        attempt_count: number,
        last_attempted_at: at,
        next_retry_at: (status == DeliveryStatus::Failed).then_some(at + FIRST_DUE),
        error_detail: (!delivered).then(|| "http_503".to_owned()),
        signature: None,
    };
    (attempt, update)
}

/// Claims `row` when it is due and records its first attempt, which leaves it `status` (due again at `next` when
/// failed); returns the row as stored.
fn attempt_once(
    store: &dyn WebhookStore,
    row: &Delivery,
    status: DeliveryStatus,
    next: Option<OffsetDateTime>,
) -> Delivery {
    let due = row.next_retry_at.expect("a due row");
    let lease = due + LEASE;
    assert_eq!(store.claim(&[row.id], due, lease).expect("claim").len(), 1, "row {} is claimable", row.id);
    let (attempt, mut update) = attempt_and_update(row.id, row.attempt_count + 1, due, status);
    update.next_retry_at = next;
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"), "row {} records", row.id);
    store.delivery(row.id).expect("read").expect("the row")
}

/// `count` deliveries of `webhook_id` created at `created_at`, inserted claimed (their attempts need no claim).
fn insert_claimed(
    store: &dyn WebhookStore,
    webhook_id: i64,
    count: usize,
    created_at: OffsetDateTime,
) -> Vec<Delivery> {
    let claimed = NewDelivery { claimed: true, ..new_delivery(webhook_id, "s", created_at) };
    let inserted = store.insert_deliveries(&vec![claimed; count]).expect("insert deliveries");
    inserted.into_iter().map(|outcome| outcome.expect("inserted")).collect()
}

/// `count` deliveries of `webhook_id` created at `created_at`, each with one attempt that left it `status`, made
/// with a few group calls (inserted claimed, so the attempts need no claim).
fn history(
    store: &dyn WebhookStore,
    webhook_id: i64,
    count: usize,
    status: DeliveryStatus,
    created_at: OffsetDateTime,
) -> Vec<i64> {
    let rows = insert_claimed(store, webhook_id, count, created_at);
    let outcome = if status == DeliveryStatus::Pending { DeliveryStatus::Dead } else { status };
    let records: Vec<AttemptRecord> = rows
        .iter()
        .map(|row| {
            let lease = row.next_retry_at.expect("a lease");
            let (attempt, update) = attempt_and_update(row.id, 1, created_at + Duration::seconds(1), outcome);
            AttemptRecord { webhook_id, attempt, lease, update }
        })
        .collect();
    assert!(store.record_attempts(&records).expect("record attempts").into_iter().all(|applied| applied));
    if status == DeliveryStatus::Pending {
        // A pending row with history: a dead one an operator sent back.
        for row in &rows {
            assert!(matches!(store.retry_now(row.id, created_at).expect("retry now"), RetryNowOutcome::Reset(_)));
        }
    }
    rows.iter().map(|row| row.id).collect()
}

fn everything() -> DeliveryFilter {
    DeliveryFilter {
        session_id: None,
        status: None,
        created_from: None,
        created_before: None,
        after_id: None,
        limit: 10_000,
    }
}

fn listed(store: &dyn WebhookStore, filter: &DeliveryFilter) -> Vec<i64> {
    store.list_deliveries(filter).expect("list").iter().map(|row| row.id).collect()
}

fn due_ids(store: &dyn WebhookStore, now: OffsetDateTime, limit: usize) -> Vec<i64> {
    store.due_deliveries(now, limit).expect("due").iter().map(|row| row.id).collect()
}

/// A config reads back as created, its secret included; the `(source_identifier, event_type)` pair is unique (a
/// second one is a [`StoreError::Conflict`] and writes nothing) while either half alone may repeat; configs list by
/// id; a missing id reads as `None`.
pub fn configs_round_trip_keep_their_secret_and_are_unique_per_source_and_event_type(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let created_at = at + Duration::milliseconds(1_250);
    let created = store.create_config(&new_config("github", "push", created_at)).expect("create");
    assert_eq!(store.config(created.id).expect("read"), Some(created.clone()));
    assert_eq!(created.secret.expose(), "It's a Secret to Everybody");
    assert_eq!((created.created_at, created.target_url.as_str()), (created_at, "https://example.com/github/push"));
    let again =
        store.create_config(&NewWebhookConfig { agent_intent: "other".into(), ..new_config("github", "push", at) });
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(store.list_configs().expect("list"), std::slice::from_ref(&created), "the refused config wrote nothing");
    let other_event = store.create_config(&new_config("github", "release", at)).expect("create");
    let inbound = NewWebhookConfig {
        inbound_secret: Some(WebhookSecret::new("the inbound secret")),
        inbound_require_timestamp: true,
        ..new_config("stripe", "push", at)
    };
    let other_source = store.create_config(&inbound).expect("create");
    assert_eq!(other_source.inbound_secret.as_ref().map(WebhookSecret::expose), Some("the inbound secret"));
    assert!(other_source.inbound_require_timestamp);
    assert_eq!((other_source.previous_inbound_secret.clone(), other_source.inbound_secret_rotated_at), (None, None));
    assert_eq!((created.inbound_secret.clone(), created.inbound_require_timestamp), (None, false));
    assert_eq!(store.config(other_source.id).expect("read").as_ref(), Some(&other_source));
    assert_eq!(store.list_configs().expect("list"), [created.clone(), other_event.clone(), other_source.clone()]);
    assert_eq!(store.config(other_source.id + 1_000).expect("read"), None);
    let mut ids = store.config_ids().expect("ids");
    ids.sort_unstable();
    assert_eq!(ids, [created.id, other_event.id, other_source.id]);
    assert!(store.delete_config(other_event.id).expect("delete"));
    let mut ids = store.config_ids().expect("ids");
    ids.sort_unstable();
    assert_eq!(ids, [created.id, other_source.id], "a deleted config's id is gone");
}

/// The inbound secret rotates apart from the secret: setting the first one keeps no previous one (the secret that
/// verified inbound until then must not go on doing so), a new one keeps the one it replaces with
/// `inbound_secret_rotated_at`; `inbound_require_timestamp` changes only when named; `revoke_previous` drops every
/// previous secret at once, with or without a new secret in the same change, and keeps the rotation instants.
pub fn inbound_secrets_rotate_apart_and_revoke_previous_drops_every_previous_secret(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let created = config(store, "github", at);
    let change = |edit: fn(&mut WebhookConfigChange)| {
        let mut change = WebhookConfigChange::default();
        edit(&mut change);
        change
    };
    let first_at = at + Duration::milliseconds(1_001);
    let first = change(|c| c.inbound_secret = Some(WebhookSecret::new("inbound one")));
    let set = store.update_config(created.id, &first, first_at).expect("update").expect("found");
    assert_eq!(set.inbound_secret.as_ref().map(WebhookSecret::expose), Some("inbound one"));
    assert_eq!((set.previous_inbound_secret.clone(), set.inbound_secret_rotated_at), (None, Some(first_at)));
    assert_eq!((set.secret.clone(), set.previous_secret.clone()), (created.secret.clone(), None), "secret untouched");

    let second_at = at + Duration::milliseconds(2_002);
    let second = change(|c| {
        c.inbound_secret = Some(WebhookSecret::new("inbound two"));
        c.secret = Some(WebhookSecret::new("outbound two"));
        c.inbound_require_timestamp = Some(true);
    });
    let rotated = store.update_config(created.id, &second, second_at).expect("update").expect("found");
    assert_eq!(rotated.inbound_secret.as_ref().map(WebhookSecret::expose), Some("inbound two"));
    assert_eq!(rotated.previous_inbound_secret.as_ref().map(WebhookSecret::expose), Some("inbound one"));
    assert_eq!(rotated.previous_secret.as_ref().map(WebhookSecret::expose), Some("It's a Secret to Everybody"));
    assert_eq!((rotated.inbound_secret_rotated_at, rotated.secret_rotated_at), (Some(second_at), Some(second_at)));
    assert!(rotated.inbound_require_timestamp);
    assert_eq!(store.config(created.id).expect("read").as_ref(), Some(&rotated));

    let intent = change(|c| c.agent_intent = Some("triage".into()));
    let kept = store.update_config(created.id, &intent, at + Duration::seconds(3)).expect("update").expect("found");
    assert_eq!(kept, WebhookConfig { agent_intent: "triage".into(), ..rotated.clone() }, "unnamed fields stay");

    let revoke = change(|c| c.revoke_previous = true);
    let revoked = store.update_config(created.id, &revoke, at + Duration::seconds(4)).expect("update").expect("found");
    assert_eq!(
        revoked,
        WebhookConfig { previous_secret: None, previous_inbound_secret: None, ..kept.clone() },
        "only the previous secrets went"
    );
    assert_eq!(store.config(created.id).expect("read").as_ref(), Some(&revoked));

    let third_at = at + Duration::seconds(5);
    let rotate_and_revoke = change(|c| {
        c.secret = Some(WebhookSecret::new("outbound three"));
        c.revoke_previous = true;
        c.inbound_require_timestamp = Some(false);
    });
    let cut = store.update_config(created.id, &rotate_and_revoke, third_at).expect("update").expect("found");
    assert_eq!((cut.secret.expose(), cut.previous_secret.clone()), ("outbound three", None));
    assert_eq!(cut.secret_rotated_at, Some(third_at));
    assert!(!cut.inbound_require_timestamp);
    assert_eq!(store.config(created.id).expect("read"), Some(cut));
}

fn receipt(text: &str) -> ReceiptKey {
    ReceiptKey::new(text).expect("a valid receipt key")
}

fn inserted(outcome: Result<InboundInsert, StoreError>) -> Delivery {
    match outcome.expect("insert inbound delivery") {
        InboundInsert::Inserted(delivery) => delivery,
        InboundInsert::Duplicate { delivery_id } => panic!("a duplicate of {delivery_id}, expected an insert"),
    }
}

/// How long the receipts of these rules count.
const REPLAY_WINDOW: Duration = Duration::hours(24);

/// An inbound delivery is inserted with its receipt keys; a later one of the same config holding any of those keys
/// while its receipt is fresh is a duplicate of the first delivery and writes nothing; keys are per config; a
/// receipt older than `fresh_since` no longer counts and is replaced by the next delivery with its key; a delivery
/// for a missing config is a [`StoreError::Conflict`] and records no receipt.
pub fn a_fresh_receipt_makes_an_inbound_delivery_a_duplicate_that_writes_nothing(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let github = config(store, "github", at);
    let stripe = config(store, "stripe", at);
    let (a, b, c) = (receipt("id:a"), receipt("sig:b"), receipt("id:c"));
    let since = |now: OffsetDateTime| now - REPLAY_WINDOW;
    let first =
        inserted(store.insert_inbound_delivery(&new_delivery(github.id, "s", at), &[a.clone(), b.clone()], since(at)));
    assert_eq!(store.delivery(first.id).expect("read"), Some(first.clone()));

    let later = at + Duration::hours(1);
    for keys in [vec![a.clone()], vec![b.clone()], vec![c.clone(), b.clone()]] {
        let again = store.insert_inbound_delivery(&new_delivery(github.id, "s", later), &keys, since(later));
        assert_eq!(again, Ok(InboundInsert::Duplicate { delivery_id: first.id }), "{keys:?}");
    }
    assert_eq!(listed(store, &everything()), [first.id], "duplicates wrote nothing");
    let elsewhere = inserted(store.insert_inbound_delivery(
        &new_delivery(stripe.id, "s", later),
        std::slice::from_ref(&a),
        since(later),
    ));
    let other_key = inserted(store.insert_inbound_delivery(
        &new_delivery(github.id, "s", later),
        std::slice::from_ref(&c),
        since(later),
    ));
    let twice_c =
        store.insert_inbound_delivery(&new_delivery(github.id, "s", later), std::slice::from_ref(&c), since(later));
    assert_eq!(twice_c, Ok(InboundInsert::Duplicate { delivery_id: other_key.id }), "c was recorded with its delivery");

    // A day and a bit later the first receipts no longer count: the key goes to the new delivery.
    let next_day = at + REPLAY_WINDOW + Duration::milliseconds(1);
    let renewed = inserted(store.insert_inbound_delivery(
        &new_delivery(github.id, "s", next_day),
        std::slice::from_ref(&a),
        since(next_day),
    ));
    let replayed = store.insert_inbound_delivery(
        &new_delivery(github.id, "s", next_day),
        std::slice::from_ref(&a),
        since(next_day),
    );
    assert_eq!(replayed, Ok(InboundInsert::Duplicate { delivery_id: renewed.id }));
    let b_again = store.insert_inbound_delivery(
        &new_delivery(github.id, "s", next_day),
        std::slice::from_ref(&b),
        since(next_day),
    );
    let b_again = inserted(b_again);

    let orphan = store.insert_inbound_delivery(
        &new_delivery(stripe.id + 1_000, "s", next_day),
        &[receipt("id:x")],
        since(next_day),
    );
    assert!(matches!(orphan, Err(StoreError::Conflict(_))), "{orphan:?}");
    assert_eq!(listed(store, &everything()), [first.id, elsewhere.id, other_key.id, renewed.id, b_again.id]);
    // Receipts live for the window, not forever: with a cutoff after everything, all of them are there to prune
    // (a, b, c of github; a of stripe) and none for the refused delivery.
    assert_eq!(store.prune_inbound_receipts(next_day + Duration::seconds(1), 100).expect("prune"), 4);
}

/// Of concurrent inbound deliveries with one receipt key, exactly one is inserted and every other answers the
/// duplicate of that one; the store holds exactly that delivery. Threads start together (a barrier), each with its
/// own key order: a store that decides by reading before it writes without a unique index lets two through.
pub fn concurrent_inbound_deliveries_with_one_key_insert_exactly_once(store: &dyn WebhookStore, at: OffsetDateTime) {
    const CONTENDERS: usize = 8;
    const ROUNDS: usize = 5;
    let config = config(store, "github", at);
    let since = at - REPLAY_WINDOW;
    let mut everyone = Vec::new();
    for round in 0..ROUNDS {
        let shared = receipt(&format!("id:round-{round}"));
        let barrier = std::sync::Barrier::new(CONTENDERS);
        let outcomes: Vec<InboundInsert> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..CONTENDERS)
                .map(|contender| {
                    let (barrier, shared) = (&barrier, shared.clone());
                    scope.spawn(move || {
                        let own = receipt(&format!("sig:{round}-{contender}"));
                        let keys = if contender % 2 == 0 { [shared, own] } else { [own, shared] };
                        barrier.wait();
                        store.insert_inbound_delivery(&new_delivery(config.id, "s", at), &keys, since)
                    })
                })
                .collect();
            racers.into_iter().map(|racer| racer.join().expect("no panic").expect("no store error")).collect()
        });
        let winners: Vec<&Delivery> = outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                InboundInsert::Inserted(delivery) => Some(delivery),
                InboundInsert::Duplicate { .. } => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        let winner = winners[0].id;
        for outcome in &outcomes {
            if let InboundInsert::Duplicate { delivery_id } = outcome {
                assert_eq!(*delivery_id, winner, "round {round}: a duplicate names another delivery");
            }
        }
        everyone.push(winner);
    }
    assert_eq!(listed(store, &everything()), everyone, "one delivery per round, no more");
}

/// Receipts are pruned by age, at most `limit` per call, the fresh ones kept (a replay within the window is still
/// a duplicate after a prune); deleting a config deletes its receipts and no other config's.
pub fn receipts_are_pruned_by_age_a_batch_at_a_time_and_go_with_their_config(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let github = config(store, "github", at);
    let stripe = config(store, "stripe", at);
    let ever = OffsetDateTime::UNIX_EPOCH;
    for n in 0..5 {
        inserted(store.insert_inbound_delivery(
            &new_delivery(github.id, "s", at),
            &[receipt(&format!("old:{n}"))],
            ever,
        ));
    }
    let later = at + Duration::hours(2);
    let fresh =
        inserted(store.insert_inbound_delivery(&new_delivery(github.id, "s", later), &[receipt("fresh")], ever));
    let cutoff = at + Duration::hours(1);
    assert_eq!(store.prune_inbound_receipts(cutoff, 2).expect("prune"), 2);
    assert_eq!(store.prune_inbound_receipts(cutoff, 2).expect("prune"), 2);
    assert_eq!(store.prune_inbound_receipts(cutoff, 2).expect("prune"), 1);
    assert_eq!(store.prune_inbound_receipts(cutoff, 2).expect("prune"), 0);
    let replay = store.insert_inbound_delivery(&new_delivery(github.id, "s", later), &[receipt("fresh")], ever);
    assert_eq!(replay, Ok(InboundInsert::Duplicate { delivery_id: fresh.id }), "the fresh receipt was kept");
    let pruned_key = store.insert_inbound_delivery(&new_delivery(github.id, "s", later), &[receipt("old:0")], ever);
    assert!(matches!(pruned_key, Ok(InboundInsert::Inserted(_))), "a pruned receipt no longer counts");

    inserted(store.insert_inbound_delivery(&new_delivery(stripe.id, "s", later), &[receipt("fresh")], ever));
    assert!(store.delete_config(github.id).expect("delete"));
    let everything_before = later + Duration::seconds(1);
    assert_eq!(
        store.prune_inbound_receipts(everything_before, 100).expect("prune"),
        1,
        "only stripe's receipt is left"
    );
}

/// An update changes only the fields it names and keeps the id and the deliveries; a new secret keeps the one it
/// replaces as `previous_secret` with `secret_rotated_at`, a second rotation keeps only the latest previous secret,
/// and the same secret again changes nothing; a missing id reads as `None` and creates nothing.
pub fn an_update_changes_what_it_names_and_a_new_secret_keeps_the_previous_one(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let created = config(store, "github", at);
    let other = config(store, "stripe", at);
    let delivery = insert(store, &new_delivery(created.id, "s", at));
    let reached =
        attempt_once(store, &insert(store, &new_delivery(created.id, "s", at)), DeliveryStatus::Delivered, None);
    let dead = attempt_once(store, &insert(store, &new_delivery(created.id, "s", at)), DeliveryStatus::Dead, None);
    let others = insert(store, &new_delivery(other.id, "s", at));
    assert_eq!((created.previous_secret.clone(), created.secret_rotated_at), (None, None));
    let intent = WebhookConfigChange { agent_intent: Some("triage".into()), ..WebhookConfigChange::default() };
    let before = store.config(created.id).expect("read").expect("the config");
    let updated = store.update_config(created.id, &intent, at + Duration::seconds(1)).expect("update");
    // The attempts above counted in its health (`consecutive_failures`, `last_success_at`), which an update keeps.
    let expected = WebhookConfig { agent_intent: "triage".into(), ..before };
    assert_eq!(updated.as_ref(), Some(&expected));
    assert_eq!(store.config(created.id).expect("read").as_ref(), Some(&expected));
    let rotated_at = at + Duration::milliseconds(2_250);
    let rotate = |secret: &str| WebhookConfigChange {
        secret: Some(WebhookSecret::new(secret)),
        target_url: Some("https://example.com/new".into()),
        target_session: Some("s-2".into()),
        ..WebhookConfigChange::default()
    };
    let rotated = store.update_config(created.id, &rotate("second"), rotated_at).expect("update").expect("found");
    assert_eq!(rotated.secret.expose(), "second");
    assert_eq!(rotated.previous_secret.as_ref().map(WebhookSecret::expose), Some("It's a Secret to Everybody"));
    assert_eq!(rotated.secret_rotated_at, Some(rotated_at));
    assert_eq!((rotated.target_url.as_str(), rotated.target_session.as_str()), ("https://example.com/new", "s-2"));
    assert_eq!(store.config(created.id).expect("read").as_ref(), Some(&rotated));
    let same = store.update_config(created.id, &rotate("second"), rotated_at + Duration::hours(1)).expect("update");
    assert_eq!(same.as_ref(), Some(&rotated), "the same secret again is no rotation");
    let again_at = rotated_at + Duration::hours(2);
    let again = store.update_config(created.id, &rotate("third"), again_at).expect("update").expect("found");
    assert_eq!(again.previous_secret.as_ref().map(WebhookSecret::expose), Some("second"));
    assert_eq!((again.secret.expose(), again.secret_rotated_at), ("third", Some(again_at)));
    assert_eq!(store.config(other.id).expect("read"), Some(other.clone()), "other configs are untouched");
    let moved = Delivery { target_url: "https://example.com/new".into(), ..delivery };
    assert_eq!(store.delivery(moved.id).expect("read"), Some(moved), "an unfinished delivery follows the new target");
    let dead = Delivery { target_url: "https://example.com/new".into(), ..dead };
    assert_eq!(store.delivery(dead.id).expect("read"), Some(dead), "a dead one too, for its Retry now");
    assert_eq!(store.delivery(reached.id).expect("read"), Some(reached), "a delivered one keeps the target it reached");
    assert_eq!(store.delivery(others.id).expect("read"), Some(others), "other configs' deliveries are untouched");
    assert_eq!(store.update_config(other.id + 1_000, &rotate("x"), at).expect("update"), None);
    assert_eq!(store.list_configs().expect("list").len(), 2);
}

/// Deleting a config deletes its deliveries, their attempts and their idempotency keys, and nothing of other
/// configs; it answers whether there was a config. An attempt still in flight when its config went records nothing
/// and is not an error, and a delivery for the deleted config is a [`StoreError::Conflict`].
pub fn deleting_a_config_deletes_its_deliveries_their_attempts_and_their_keys(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let doomed = config(store, "github", at);
    let kept = config(store, "stripe", at);
    let row = insert(store, &keyed(doomed.id, "order-1", at));
    let attempted =
        attempt_once(store, &insert(store, &new_delivery(doomed.id, "s", at)), DeliveryStatus::Delivered, None);
    let other = attempt_once(store, &insert(store, &new_delivery(kept.id, "s", at)), DeliveryStatus::Delivered, None);
    let lease = row.next_retry_at.expect("due") + LEASE;
    store.claim(&[row.id], row.next_retry_at.expect("due"), lease).expect("claim");

    assert!(store.delete_config(doomed.id).expect("delete"));
    assert!(!store.delete_config(doomed.id).expect("delete"), "nothing left to delete");
    assert_eq!(store.config(doomed.id).expect("read"), None);
    let kept = store.config(kept.id).expect("read").expect("the kept config");
    assert_eq!(store.list_configs().expect("list"), std::slice::from_ref(&kept));
    for gone in [row.id, attempted.id] {
        assert_eq!(store.delivery(gone).expect("read"), None);
        assert!(store.attempts(gone).expect("attempts").is_empty(), "delivery {gone}'s attempts went with it");
    }
    assert_eq!(listed(store, &everything()), [other.id]);
    assert_eq!(store.attempts(other.id).expect("attempts").len(), 1, "other configs keep their history");

    let (in_flight, update) = attempt_and_update(row.id, 1, at + FIRST_DUE, DeliveryStatus::Failed);
    assert!(!store.record_attempt(&in_flight, lease, &update).expect("record"), "nothing to record against");
    assert!(store.attempts(row.id).expect("attempts").is_empty());
    let late = store.insert_delivery(&new_delivery(doomed.id, "s", at));
    assert!(matches!(late, Err(StoreError::Conflict(_))), "{late:?}");
    assert_eq!(store.delivery_by_idempotency_key(&key("order-1")).expect("read"), None);
    insert(store, &keyed(kept.id, "order-1", at));
}

/// Deleting a config whose history is larger than a delete batch ([`HISTORY_BEYOND_A_DELETE_BATCH`] deliveries,
/// each with an attempt) deletes all of it, and nothing of another config's.
pub fn a_config_with_more_history_than_a_delete_batch_is_deleted_whole(store: &dyn WebhookStore, at: OffsetDateTime) {
    let doomed = config(store, "github", at);
    let kept = config(store, "stripe", at);
    let gone = history(store, doomed.id, HISTORY_BEYOND_A_DELETE_BATCH, DeliveryStatus::Delivered, at);
    let stay = history(store, kept.id, 3, DeliveryStatus::Delivered, at);
    assert!(store.delete_config(doomed.id).expect("delete"));
    assert_eq!(store.config(doomed.id).expect("read"), None);
    assert_eq!(listed(store, &everything()), stay);
    for id in &gone {
        assert!(store.attempts(*id).expect("attempts").is_empty(), "delivery {id} left attempts behind");
    }
    for id in &stay {
        assert_eq!(store.attempts(*id).expect("attempts").len(), 1);
    }
}

/// A delivery is inserted `pending`, never attempted, due at its `next_retry_at`, and reads back as written; ids
/// ascend; a missing id reads as `None`; a delivery for a config that does not exist is a [`StoreError::Conflict`].
pub fn a_delivery_is_inserted_pending_and_one_for_a_missing_config_is_a_conflict(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let created_at = at + Duration::milliseconds(7_001);
    let new =
        NewDelivery { payload: r#"{"card":"x","n":[1,2]}"#.into(), ..new_delivery(config.id, "session-9", created_at) };
    let row = insert(store, &new);
    let expected = Delivery {
        id: row.id,
        webhook_id: config.id,
        session_id: "session-9".into(),
        payload: new.payload.clone(),
        target_url: new.target_url.clone(),
        signature: new.signature.clone(),
        status: DeliveryStatus::Pending,
        attempt_count: 0,
        last_attempted_at: None,
        next_retry_at: Some(created_at + FIRST_DUE),
        created_at,
        error_detail: None,
    };
    assert_eq!(row, expected);
    assert_eq!(store.delivery(row.id).expect("read"), Some(expected));
    assert!(store.attempts(row.id).expect("attempts").is_empty());
    let next = insert(store, &new_delivery(config.id, "s", at));
    assert!(next.id > row.id);
    assert_eq!(store.delivery(next.id + 1_000).expect("read"), None);
    let orphan = store.insert_delivery(&new_delivery(config.id + 1_000, "s", at));
    assert!(matches!(orphan, Err(StoreError::Conflict(_))), "{orphan:?}");
    assert_eq!(listed(store, &everything()), [row.id, next.id], "the refused delivery wrote nothing");
}

/// An `Idempotency-Key` is unique among deliveries: a second insert with it is a [`StoreError::Conflict`] and
/// writes nothing, the key finds its delivery, an unknown key finds none, and deliveries without a key never
/// collide.
pub fn an_idempotency_key_is_unique_and_finds_its_delivery(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let first = insert(store, &keyed(config.id, "order-42", at));
    let again = store.insert_delivery(&keyed(config.id, "order-42", at + Duration::seconds(1)));
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(store.delivery_by_idempotency_key(&key("order-42")).expect("read"), Some(first.clone()));
    assert_eq!(store.delivery_by_idempotency_key(&key("other")).expect("read"), None);
    let unkeyed = [insert(store, &new_delivery(config.id, "s", at)), insert(store, &new_delivery(config.id, "s", at))];
    assert_eq!(listed(store, &everything()), [first.id, unkeyed[0].id, unkeyed[1].id]);
}

/// A group insert answers one outcome per delivery, in order: a delivery a constraint refuses (its config missing,
/// its key held by an earlier row or by an earlier delivery of the same group) fails alone with
/// [`StoreError::Conflict`], and exactly the others are written. An empty group writes nothing.
pub fn a_group_insert_fails_only_the_deliveries_a_constraint_refuses(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let holder = insert(store, &keyed(config.id, "k-0", at));
    let outcomes = store
        .insert_deliveries(&[
            new_delivery(config.id, "a", at),
            keyed(config.id, "k-1", at),
            new_delivery(config.id + 1_000, "no such config", at),
            keyed(config.id, "k-1", at),
            keyed(config.id, "k-0", at),
            new_delivery(config.id, "b", at),
        ])
        .expect("insert deliveries");
    assert_eq!(outcomes.len(), 6);
    let refused: Vec<bool> = outcomes.iter().map(|outcome| matches!(outcome, Err(StoreError::Conflict(_)))).collect();
    assert_eq!(refused, [false, false, true, true, true, false], "{outcomes:?}");
    let accepted: Vec<&Delivery> = outcomes.iter().flatten().collect();
    let sessions: Vec<&str> = accepted.iter().map(|row| row.session_id.as_str()).collect();
    assert_eq!(sessions, ["a", "s", "b"]);
    let inserted: Vec<i64> = accepted.iter().map(|row| row.id).collect();
    assert_eq!(listed(store, &everything()), [&[holder.id][..], &inserted].concat(), "exactly the accepted rows");
    assert_eq!(store.delivery_by_idempotency_key(&key("k-0")).expect("read"), Some(holder));
    assert_eq!(store.delivery_by_idempotency_key(&key("k-1")).expect("read").map(|row| row.id), Some(inserted[1]));
    assert!(store.insert_deliveries(&[]).expect("an empty group").is_empty());
}

/// A group inserted to its configs ([`WebhookStore::insert_deliveries_to_configs`]) takes each row's target from its
/// config as the write finds it, stores no signature, and answers each written row with its config's current
/// secret: after a rotation (and a new target), the next group gets the new ones. A delivery whose config is missing,
/// or whose key is held, fails alone with [`StoreError::Conflict`]; a disabled config's delivery is written held
/// even when asked claimed. An empty group writes nothing.
pub fn a_group_inserted_to_its_configs_takes_their_targets_and_current_secrets(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let other = store.create_config(&new_config("gitlab", "push", at)).expect("create config");
    let holder = insert(store, &keyed(config.id, "k-0", at));
    let outcomes = store
        .insert_deliveries_to_configs(&[
            new_delivery(config.id, "a", at),
            new_delivery(config.id + 1_000, "no such config", at),
            keyed(config.id, "k-0", at),
            NewDelivery { claimed: true, ..new_delivery(other.id, "b", at) },
        ])
        .expect("insert deliveries");
    let refused: Vec<bool> = outcomes.iter().map(|outcome| matches!(outcome, Err(StoreError::Conflict(_)))).collect();
    assert_eq!(refused, [false, true, true, false], "{outcomes:?}");
    let written: Vec<&(Delivery, WebhookSecret)> = outcomes.iter().flatten().collect();
    let shown: Vec<(&str, &str, &str, &str)> = written
        .iter()
        .map(|(row, secret)| {
            (row.session_id.as_str(), row.target_url.as_str(), row.signature.as_str(), secret.expose())
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("a", config.target_url.as_str(), "", config.secret.expose()),
            ("b", other.target_url.as_str(), "", other.secret.expose())
        ]
    );
    for (row, _) in &written {
        assert_eq!(store.delivery(row.id).expect("read").as_ref(), Some(row), "answered as stored");
    }
    assert_eq!(store.delivery_by_idempotency_key(&key("k-0")).expect("read"), Some(holder));

    let rotate = WebhookConfigChange {
        secret: Some(WebhookSecret::new("rotated")),
        target_url: Some("https://example.com/moved".into()),
        ..WebhookConfigChange::default()
    };
    store.update_config(config.id, &rotate, at + Duration::seconds(1)).expect("rotate").expect("found");
    let disable = WebhookConfigChange { enabled: Some(false), ..WebhookConfigChange::default() };
    store.update_config(other.id, &disable, at + Duration::seconds(1)).expect("disable").expect("found");
    let later = at + Duration::seconds(2);
    let outcomes = store
        .insert_deliveries_to_configs(&[
            new_delivery(config.id, "c", later),
            NewDelivery { claimed: true, ..new_delivery(other.id, "d", later) },
        ])
        .expect("insert deliveries");
    let written: Vec<(Delivery, WebhookSecret)> =
        outcomes.into_iter().map(|outcome| outcome.expect("written")).collect();
    assert_eq!(written[0].0.target_url, "https://example.com/moved");
    assert_eq!(written[0].1.expose(), "rotated", "the secret as the write found it");
    assert_eq!(written[0].0.next_retry_at, Some(later + FIRST_DUE));
    assert_eq!(written[1].0.next_retry_at, None, "held: its config is disabled");
    assert!(store.claim(&[written[1].0.id], later + FIRST_DUE, later + FIRST_DUE + LEASE).expect("claim").is_empty());
    assert!(store.insert_deliveries_to_configs(&[]).expect("an empty group").is_empty());
}

/// A delivery inserted already claimed (its inserter makes the first attempt at once) holds its claim until its
/// `next_retry_at`: it is neither due nor claimable before, the attempt recorded under that lease applies, and if
/// none is recorded the row is due again when the lease ends.
pub fn a_delivery_inserted_claimed_waits_for_its_lease_and_its_attempt_applies(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let lease = at + LEASE;
    let claimed = NewDelivery { claimed: true, next_retry_at: lease, ..new_delivery(config.id, "s", at) };
    let attempted = insert(store, &claimed);
    let abandoned = insert(store, &claimed);
    assert_eq!((attempted.status, attempted.next_retry_at), (DeliveryStatus::Pending, Some(lease)));
    assert!(due_ids(store, lease - Duration::milliseconds(1), 10).is_empty());
    assert!(store.claim(&[attempted.id, abandoned.id], at, at + Duration::minutes(1)).expect("claim").is_empty());

    let (attempt, update) = attempt_and_update(attempted.id, 1, at, DeliveryStatus::Delivered);
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"));
    let stored = store.delivery(attempted.id).expect("read").expect("the row");
    assert_eq!((stored.status, stored.attempt_count, stored.next_retry_at), (DeliveryStatus::Delivered, 1, None));
    assert_eq!(due_ids(store, lease, 10), [abandoned.id], "an attempt that never reported is due at the lease's end");
}

/// An applied attempt with a signature replaces the stored one (what was sent after a secret rotation), alone and
/// in a group; without one, or when the claim was lost, the stored signature stays.
pub fn an_applied_attempt_may_replace_the_signature(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let lease = at + LEASE;
    let claimed = NewDelivery { claimed: true, next_retry_at: lease, ..new_delivery(config.id, "s", at) };
    let [single, grouped, kept] = [0; 3].map(|_| insert(store, &claimed));
    let (attempt, mut update) = attempt_and_update(single.id, 1, at, DeliveryStatus::Failed);
    update.signature = Some("sha256=11".into());
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"));
    let (attempt, mut update) = attempt_and_update(grouped.id, 1, at, DeliveryStatus::Delivered);
    update.signature = Some("sha256=22".into());
    let (kept_attempt, kept_update) = attempt_and_update(kept.id, 1, at, DeliveryStatus::Delivered);
    let records = [
        AttemptRecord { webhook_id: config.id, attempt, lease, update },
        AttemptRecord { webhook_id: config.id, attempt: kept_attempt, lease, update: kept_update },
    ];
    assert_eq!(store.record_attempts(&records).expect("record"), [true, true]);
    let signature = |id| store.delivery(id).expect("read").expect("the row").signature;
    assert_eq!(
        [signature(single.id), signature(grouped.id), signature(kept.id)],
        ["sha256=11", "sha256=22", "sha256=00"]
    );
    let (late, mut update) = attempt_and_update(single.id, 1, at, DeliveryStatus::Delivered);
    update.signature = Some("sha256=33".into());
    assert!(!store.record_attempt(&late, lease, &update).expect("record"), "the claim is gone");
    assert_eq!(signature(single.id), "sha256=11");
}

/// The poll's read: rows `pending` or `failed` with `next_retry_at <= now`, oldest `next_retry_at` first whatever
/// their status, ties by id, at most `limit` (taken after ordering both statuses together), each with its target and
/// due time; `delivered` and `dead` rows never, however old.
pub fn due_rows_are_oldest_first_across_pending_and_failed_ties_by_id_never_delivered_or_dead(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let seconds = |n: i64| at + Duration::seconds(n);
    let mut rows: Vec<Delivery> = (0..6).map(|n| insert(store, &new_delivery(config.id, "s", seconds(n)))).collect();
    rows.push(insert(store, &new_delivery(config.id, "s", seconds(10))));
    rows.push(insert(
        store,
        &NewDelivery { target_url: "https://example.com/b".into(), ..new_delivery(config.id, "s", seconds(70)) },
    ));
    // Pending rows are due 30 s after creation: r0 at 30, r2 at 32, r6 at 40, r7 at 100. r1 and r3 fail once,
    // due again at 40 (a tie with r6, across statuses) and at 31; r4 is delivered and r5 dead.
    attempt_once(store, &rows[1], DeliveryStatus::Failed, Some(seconds(40)));
    attempt_once(store, &rows[3], DeliveryStatus::Failed, Some(seconds(31)));
    attempt_once(store, &rows[4], DeliveryStatus::Delivered, None);
    attempt_once(store, &rows[5], DeliveryStatus::Dead, None);
    let id = |index: usize| rows[index].id;

    assert_eq!(due_ids(store, at + Duration::days(1), 10), [id(0), id(3), id(2), id(1), id(6), id(7)]);
    assert_eq!(
        due_ids(store, at + Duration::days(1), 2),
        [id(0), id(3)],
        "the limit applies after merging both statuses"
    );
    assert_eq!(due_ids(store, seconds(40), 10), [id(0), id(3), id(2), id(1), id(6)], "due at `now` is due");
    assert_eq!(due_ids(store, seconds(40) - Duration::milliseconds(1), 10), [id(0), id(3), id(2)]);
    assert!(due_ids(store, seconds(30) - Duration::milliseconds(1), 10).is_empty());
    let last = store.due_deliveries(at + Duration::days(1), 10).expect("due").pop();
    assert_eq!(
        last,
        Some(DueDelivery {
            id: id(7),
            target_url: "https://example.com/b".into(),
            next_retry_at: seconds(100),
            webhook_id: config.id,
            rate_limit_per_second: None,
        })
    );
}

/// Deliveries count by status, and the due ones (pending or failed, `next_retry_at <= now`) count as
/// [`WebhookStore::due_deliveries`] lists them, without its limit: a claimed row is not due until its lease ends.
pub fn deliveries_count_by_status_and_the_due_ones_as_the_poll_sees_them(store: &dyn WebhookStore, at: OffsetDateTime) {
    let count = |status| store.count_deliveries(status).expect("count");
    let due = |now| store.count_due_deliveries(now).expect("count due");
    for status in DeliveryStatus::ALL {
        assert_eq!(count(status), 0, "{status}");
    }
    assert_eq!(due(at + Duration::days(1)), 0);
    let config = config(store, "github", at);
    let seconds = |n: i64| at + Duration::seconds(n);
    // Pending rows are first due 30 s after creation: r0 at 30, r1 at 31, r2 at 32, r3 at 33, r4 at 34.
    let rows: Vec<Delivery> = (0..5).map(|n| insert(store, &new_delivery(config.id, "s", seconds(n)))).collect();
    attempt_once(store, &rows[1], DeliveryStatus::Failed, Some(seconds(60)));
    attempt_once(store, &rows[2], DeliveryStatus::Delivered, None);
    attempt_once(store, &rows[3], DeliveryStatus::Dead, None);
    assert_eq!(
        DeliveryStatus::ALL.map(count),
        [2, 1, 1, 1],
        "pending, delivered, failed, dead (retry_now and deletes aside)"
    );
    assert_eq!(due(seconds(30) - Duration::milliseconds(1)), 0);
    assert_eq!(due(seconds(30)), 1, "due at `now` is due");
    assert_eq!(due(seconds(59)), 2, "r0 and r4");
    assert_eq!(due(seconds(60)), 3, "and r1, failed, due again");
    assert_eq!(due(seconds(60)), u64::try_from(due_ids(store, seconds(60), 1_000).len()).expect("a count"));
    let lease = seconds(60) + LEASE;
    assert_eq!(store.claim(&[rows[0].id], seconds(60), lease).expect("claim").len(), 1);
    assert_eq!(due(seconds(60)), 2, "a claimed row is not due while its lease runs");
    assert_eq!(due(lease), 3, "and due again when it ends");
    assert!(matches!(store.retry_now(rows[3].id, seconds(61)).expect("retry now"), RetryNowOutcome::Reset(_)));
    assert_eq!((count(DeliveryStatus::Dead), count(DeliveryStatus::Pending)), (0, 3));
}

/// A claim takes the due rows among `ids` (a missing or not-yet-due id is skipped) by moving their `next_retry_at`
/// to the lease's end, which hides them from the poll and from other claims until then, and returns them whole. An
/// attempt's outcome applies only while the row carries its claim: the lease instant and the attempt count
/// (`attempt_number - 1`) must both match; otherwise, and for an outcome recorded twice, the row is untouched but the
/// attempt is still history. A delivery that does not exist records nothing.
pub fn a_claim_hides_the_row_until_its_lease_ends_and_only_the_claimant_records(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let row = insert(store, &new_delivery(config.id, "s", at));
    let due_at = at + FIRST_DUE;
    assert!(due_ids(store, due_at - Duration::milliseconds(1), 10).is_empty());
    assert_eq!(
        store.due_deliveries(due_at, 10).expect("due"),
        [DueDelivery {
            id: row.id,
            target_url: row.target_url.clone(),
            next_retry_at: due_at,
            webhook_id: config.id,
            rate_limit_per_second: None,
        }]
    );
    assert!(store.claim(&[row.id], due_at - Duration::milliseconds(1), due_at + LEASE).expect("claim").is_empty());

    let lease = due_at + Duration::milliseconds(15_123);
    let claimed = store.claim(&[row.id, row.id + 1_000], due_at, lease).expect("claim");
    assert_eq!(claimed, [Delivery { next_retry_at: Some(lease), ..row.clone() }]);
    assert!(store.claim(&[row.id], due_at, lease).expect("claim").is_empty(), "claimed twice");
    assert!(store.claim(&[row.id], lease - Duration::milliseconds(1), lease + LEASE).expect("claim").is_empty());
    assert!(due_ids(store, lease - Duration::milliseconds(1), 10).is_empty());
    assert_eq!(due_ids(store, lease, 10), [row.id], "due again when the lease ends");

    let (attempt, update) = attempt_and_update(row.id, 1, due_at, DeliveryStatus::Failed);
    let wrong_lease = lease + Duration::milliseconds(1);
    assert!(!store.record_attempt(&attempt, wrong_lease, &update).expect("record"), "wrong lease");
    let stale = DeliveryAttempt { attempt_number: 3, ..attempt.clone() };
    assert!(!store.record_attempt(&stale, lease, &update).expect("record"), "wrong attempt count");
    assert_eq!(store.delivery(row.id).expect("read"), Some(claimed[0].clone()), "neither touched the row");
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"));
    let stored = store.delivery(row.id).expect("read").expect("the row");
    assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Failed, 1));
    assert_eq!((stored.next_retry_at, stored.last_attempted_at), (update.next_retry_at, Some(due_at)));
    assert_eq!(stored.error_detail.as_deref(), Some("http_503"));
    assert!(!store.record_attempt(&attempt, lease, &update).expect("record"), "an outcome applies once");
    assert_eq!(store.delivery(row.id).expect("read"), Some(stored));
    let history = store.attempts(row.id).expect("attempts");
    assert_eq!(history, [attempt.clone(), stale, attempt.clone(), attempt], "every attempt is history, oldest first");

    let (ghost, ghost_update) = attempt_and_update(row.id + 1_000, 1, due_at, DeliveryStatus::Failed);
    assert!(!store.record_attempt(&ghost, lease, &ghost_update).expect("record"));
    assert!(store.attempts(row.id + 1_000).expect("attempts").is_empty());
}

/// [`WebhookStore::claim_each`] claims several rows, each by its own due time (a row that is not due by its own is
/// left, whatever the others'), all until one lease, and hides them like a claim; [`WebhookStore::record_attempts`]
/// answers each attempt by whether it applied, and keeps the history of those that did not.
pub fn claim_each_takes_each_row_by_its_own_due_time_and_record_attempts_answers_each(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let rows: Vec<Delivery> =
        (0..3).map(|index| insert(store, &new_delivery(config.id, &format!("s{index}"), at))).collect();
    let due = |row: &Delivery| row.next_retry_at.expect("due");
    let lease = at + Duration::seconds(45);
    // The third asks with a due time before its own: it changed since it was read, so it is not claimed.
    let claims = [(rows[0].id, due(&rows[0])), (rows[1].id, due(&rows[1])), (rows[2].id, at)];
    let claimed = store.claim_each(&claims, lease).expect("claim each");
    assert_eq!(
        claimed.iter().map(|row| (row.id, row.next_retry_at)).collect::<Vec<_>>(),
        [(rows[0].id, Some(lease)), (rows[1].id, Some(lease))]
    );
    assert!(store.claim_each(&claims, lease).expect("claim each").is_empty(), "hidden until the lease ends");
    assert!(store.claim_each(&[], lease).expect("claim nothing").is_empty());

    let record = |row: &Delivery| {
        let (attempt, update) = attempt_and_update(row.id, 1, at + Duration::seconds(31), DeliveryStatus::Failed);
        AttemptRecord { webhook_id: row.webhook_id, attempt, lease, update }
    };
    let recorded = store.record_attempts(&[record(&rows[0]), record(&rows[1]), record(&rows[2])]).expect("record");
    assert_eq!(recorded, [true, true, false], "the unclaimed row keeps its state; its attempt is history only");
    assert_eq!(store.delivery(rows[0].id).expect("read").map(|row| row.status), Some(DeliveryStatus::Failed));
    assert_eq!(store.delivery(rows[2].id).expect("read"), Some(rows[2].clone()));
    assert_eq!(store.attempts(rows[2].id).expect("attempts").len(), 1);
    assert!(store.record_attempts(&[]).expect("record nothing").is_empty());
}

/// "Retry now" resets a `failed` or `dead` row to `pending` with no attempts, due at the given instant, keeping its
/// last error and history; a `pending` or `delivered` row is not allowed (and untouched), a missing one not found.
/// An attempt still in flight under the old claim no longer applies.
pub fn retry_now_resets_only_failed_or_dead_rows(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let pending = insert(store, &new_delivery(config.id, "s", at));
    assert_eq!(store.retry_now(pending.id, at).expect("retry"), RetryNowOutcome::NotAllowed(DeliveryStatus::Pending));
    assert_eq!(store.retry_now(pending.id + 1_000, at).expect("retry"), RetryNowOutcome::NotFound);
    let delivered =
        attempt_once(store, &insert(store, &new_delivery(config.id, "s", at)), DeliveryStatus::Delivered, None);
    assert_eq!(
        store.retry_now(delivered.id, at).expect("retry"),
        RetryNowOutcome::NotAllowed(DeliveryStatus::Delivered)
    );
    assert_eq!(store.delivery(delivered.id).expect("read"), Some(delivered));
    assert_eq!(store.delivery(pending.id).expect("read"), Some(pending.clone()));

    let row = insert(store, &new_delivery(config.id, "s", at));
    let due = at + FIRST_DUE;
    let lease = due + LEASE;
    store.claim(&[row.id], due, lease).expect("claim");
    let (attempt, mut update) = attempt_and_update(row.id, 1, due, DeliveryStatus::Dead);
    update.attempt_count = 6;
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"));
    let later = at + Duration::hours(9);
    let RetryNowOutcome::Reset(reset) = store.retry_now(row.id, later).expect("retry") else {
        panic!("dead row not reset")
    };
    assert_eq!((reset.status, reset.attempt_count, reset.next_retry_at), (DeliveryStatus::Pending, 0, Some(later)));
    assert_eq!(reset.error_detail.as_deref(), Some("http_503"), "the last error stays visible");
    assert_eq!(store.delivery(row.id).expect("read"), Some(reset.clone()));
    assert_eq!(store.attempts(row.id).expect("attempts"), [attempt]);
    assert_eq!(due_ids(store, later, 10), [pending.id, row.id]);

    // A failed row whose attempt is still in flight: reset under it, the attempt's outcome no longer applies.
    let failed =
        attempt_once(store, &insert(store, &new_delivery(config.id, "s", at)), DeliveryStatus::Failed, Some(later));
    let in_flight_lease = later + LEASE;
    store.claim(&[failed.id], later, in_flight_lease).expect("claim");
    assert!(matches!(store.retry_now(failed.id, later).expect("retry"), RetryNowOutcome::Reset(_)));
    let (second, second_update) = attempt_and_update(failed.id, 2, later, DeliveryStatus::Delivered);
    assert!(!store.record_attempt(&second, in_flight_lease, &second_update).expect("record"));
    let stored = store.delivery(failed.id).expect("read").expect("the row");
    assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Pending, 0));
}

/// The forensic inspector's query: every filter narrows (session, status, `created_from` inclusive,
/// `created_before` exclusive), rows come by ascending id in keyset pages (`after_id` excluded, at most `limit`).
pub fn the_inspector_filters_and_pages_by_id(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let seconds = |n: i64| at + Duration::seconds(n);
    let rows: Vec<Delivery> = (0..8)
        .map(|n| insert(store, &new_delivery(config.id, if n % 2 == 0 { "even" } else { "odd" }, seconds(n))))
        .collect();
    let id = |index: usize| rows[index].id;
    // Row 4 (even) fails once: it drops out of a `pending` filter.
    attempt_once(store, &rows[4], DeliveryStatus::Failed, Some(at + Duration::hours(1)));
    let page = |after_id, limit| DeliveryFilter {
        session_id: Some("even".into()),
        status: Some(DeliveryStatus::Pending),
        created_from: Some(seconds(2)),
        created_before: Some(seconds(8)),
        after_id,
        limit,
    };
    assert_eq!(listed(store, &page(None, 10)), [id(2), id(6)]);
    assert_eq!(listed(store, &page(None, 1)), [id(2)]);
    assert_eq!(listed(store, &page(Some(id(2)), 1)), [id(6)]);
    assert!(listed(store, &page(Some(id(6)), 1)).is_empty());

    let all = everything();
    assert_eq!(listed(store, &all), rows.iter().map(|row| row.id).collect::<Vec<_>>());
    let in_window = DeliveryFilter { created_from: Some(seconds(2)), created_before: Some(seconds(6)), ..all.clone() };
    assert_eq!(listed(store, &in_window), [id(2), id(3), id(4), id(5)]);
    assert_eq!(
        listed(store, &DeliveryFilter { session_id: Some("odd".into()), ..all.clone() }),
        [id(1), id(3), id(5), id(7)]
    );
    assert_eq!(listed(store, &DeliveryFilter { status: Some(DeliveryStatus::Failed), ..all.clone() }), [id(4)]);
    assert!(listed(store, &DeliveryFilter { status: Some(DeliveryStatus::Dead), ..all.clone() }).is_empty());
    assert_eq!(listed(store, &DeliveryFilter { after_id: Some(id(5)), limit: 2, ..all }), [id(6), id(7)]);
}

/// Retention: a prune deletes at most `limit` deliveries that are `delivered` or `dead` and were created strictly
/// before the cut-off, with their attempts and idempotency keys, and answers how many went; repeated, it takes the
/// rest a batch at a time, then nothing. `pending` and `failed` deliveries are never pruned, however old.
pub fn pruning_takes_only_old_finished_deliveries_a_batch_at_a_time(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let cutoff = at + Duration::days(30);
    let mut old = Vec::new();
    let mut recent = Vec::new();
    for status in DeliveryStatus::ALL {
        old.extend(history(store, config.id, 3, status, at).into_iter().map(|id| (id, status)));
        recent.extend(history(store, config.id, 2, status, cutoff).into_iter().map(|id| (id, status)));
    }
    // One old delivered row holds an idempotency key, which goes with it.
    let receipt =
        attempt_once(store, &insert(store, &keyed(config.id, "receipt-1", at)), DeliveryStatus::Delivered, None);

    assert_eq!(store.prune_finished_deliveries(cutoff, 4).expect("prune"), 4);
    assert_eq!(
        store.prune_finished_deliveries(cutoff, 4).expect("prune"),
        3,
        "3 delivered + 3 dead + 1 were old enough"
    );
    assert_eq!(store.prune_finished_deliveries(cutoff, 4).expect("prune"), 0);

    let finished = |status: DeliveryStatus| !status.is_awaiting_attempt();
    for (id, status) in
        old.iter().filter(|(_, status)| finished(*status)).chain([&(receipt.id, DeliveryStatus::Delivered)])
    {
        assert_eq!(store.delivery(*id).expect("read"), None, "old {status} delivery {id} was not pruned");
        assert!(store.attempts(*id).expect("attempts").is_empty(), "old {status} delivery {id} left attempts");
    }
    for (id, status) in old.iter().filter(|(_, status)| !finished(*status)).chain(&recent) {
        let kept = store.delivery(*id).expect("read").map(|row| row.status);
        assert_eq!(kept, Some(*status), "delivery {id} was pruned");
        assert_eq!(store.attempts(*id).expect("attempts").len(), 1, "delivery {id} lost its history");
    }
    assert_eq!(store.delivery_by_idempotency_key(&key("receipt-1")).expect("read"), None);
    insert(store, &keyed(config.id, "receipt-1", at));
}

/// The poll's claim is a leader-only write: [`WebhookStore::claim_fenced`] under an older token than the newest the
/// store has seen is refused with [`StoreError::Fenced`] and claims nothing; a newer token raises the newest, which
/// [`FencingEpoch::newest_token`] reports. A plain [`WebhookStore::claim`] (an immediate attempt, which any instance
/// may make) is not fenced and leaves the epoch alone, and neither is a claim of no rows. Expects a store that has
/// seen no token above 1.
pub fn the_polls_claims_are_fenced_older_tokens_refused_whole_newer_ones_raise_the_epoch<S>(
    store: &S,
    at: OffsetDateTime,
) where
    S: WebhookStore + FencingEpoch,
{
    let config = config(store, "github", at);
    let rows: Vec<Delivery> = (0..4).map(|_| insert(store, &new_delivery(config.id, "s", at))).collect();
    let due = at + FIRST_DUE;
    let lease = due + LEASE;
    let claimed = store.claim_fenced(&[rows[0].id], due, lease, FencingToken(5)).expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(5));

    let stale = store.claim_fenced(&[rows[1].id, rows[2].id], due, lease, FencingToken(4));
    assert_eq!(stale, Err(StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) }));
    for row in &rows[1..3] {
        assert_eq!(store.delivery(row.id).expect("read"), Some(row.clone()), "the refused claim left no trace");
    }
    assert_eq!(due_ids(store, due, 10), [rows[1].id, rows[2].id, rows[3].id]);

    assert_eq!(store.claim(&[rows[3].id], due, lease).expect("an unfenced claim").len(), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(5), "an unfenced claim raises nothing");
    let claimed = store.claim_fenced(&[rows[1].id], due, lease, FencingToken(6)).expect("claim");
    assert_eq!(claimed.iter().map(|row| row.id).collect::<Vec<_>>(), [rows[1].id]);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6), "a newer token raised the epoch");
    let deposed = store.claim_fenced(&[rows[2].id], due, lease, FencingToken(5));
    assert!(deposed.is_err_and(|error| error.is_fenced()), "the previous newest is refused from now on");

    // A claim of nothing writes nothing, so it is neither refused nor raises the epoch.
    assert_eq!(store.claim_fenced(&[], due, lease, FencingToken(1)), Ok(Vec::new()));
    assert_eq!(store.claim_fenced(&[], due, lease, FencingToken(9)), Ok(Vec::new()));
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6));
}

/// A new term releases the poll's claims of older terms at once ([`WebhookStore::release_deposed_claims`]): a row a
/// leader of term 5 claimed and never recorded (it died mid-attempt) is due again for term 6 right away, long
/// before its lease ends, while a release by term 5 itself (another claimer of the same term) frees nothing. The
/// deposed claimer's late outcome then records history only; an immediate attempt's claim (no term) and a claim of
/// the releasing term itself are left alone; a row that finished is not made due; the release is a leader-only
/// write, fenced like the poll's claim. Expects a store that has seen no token above 1.
pub fn a_new_term_releases_the_polls_claims_of_older_terms_at_once<S>(store: &S, at: OffsetDateTime)
where
    S: WebhookStore + FencingEpoch,
{
    let config = config(store, "github", at);
    let rows: Vec<Delivery> = (0..4).map(|_| insert(store, &new_delivery(config.id, "s", at))).collect();
    let due = at + FIRST_DUE;
    let lease = due + LEASE;
    let [dead, immediate, finished, current] = [rows[0].id, rows[1].id, rows[2].id, rows[3].id];
    assert_eq!(store.claim_fenced(&[dead, finished], due, lease, FencingToken(5)).expect("claim").len(), 2);
    assert_eq!(store.claim(&[immediate], due, lease).expect("an immediate attempt's claim").len(), 1);
    let (attempt, update) = attempt_and_update(finished, 1, due, DeliveryStatus::Delivered);
    assert!(store.record_attempt(&attempt, lease, &update).expect("record"));
    assert_eq!(due_ids(store, due, 10), [current], "claimed rows are not due");

    let soon = due + Duration::seconds(1);
    assert_eq!(store.release_deposed_claims(FencingToken(5), soon).expect("release"), 0, "the same term waits");
    assert_eq!(due_ids(store, soon, 10), [current], "the claims still hide their rows");
    assert_eq!(store.release_deposed_claims(FencingToken(6), soon).expect("release"), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6), "a release raises the epoch");
    let released = store.delivery(dead).expect("read").expect("the row");
    assert_eq!((released.status, released.next_retry_at), (DeliveryStatus::Pending, Some(soon)));
    assert_eq!(due_ids(store, soon, 10), [current, dead], "due at once, {:?} before its lease ends", lease - soon);
    let finished_row = store.delivery(finished).expect("read").expect("the row");
    assert_eq!((finished_row.status, finished_row.next_retry_at), (DeliveryStatus::Delivered, None));

    // Term 6 claims it; the deposed leader's late outcome is history only, and it can release nothing any more.
    assert_eq!(store.claim_fenced(&[dead, current], soon, soon + LEASE, FencingToken(6)).expect("claim").len(), 2);
    let (late, late_update) = attempt_and_update(dead, 1, due, DeliveryStatus::Delivered);
    assert!(!store.record_attempt(&late, lease, &late_update).expect("record"), "the released claim is not its own");
    assert_eq!(store.attempts(dead).expect("attempts").len(), 1);
    let stale = store.release_deposed_claims(FencingToken(5), soon);
    assert!(stale.is_err_and(|error| error.is_fenced()), "a deposed leader's release is fenced");
    assert_eq!(store.release_deposed_claims(FencingToken(6), soon).expect("release"), 0, "its own claims stay");
    let (attempt, update) = attempt_and_update(dead, 1, soon, DeliveryStatus::Delivered);
    assert!(store.record_attempt(&attempt, soon + LEASE, &update).expect("record"), "term 6's attempt applies");
    assert!(store.claim(&[immediate], soon, soon + LEASE).expect("claim").is_empty(), "still the immediate claim's");
}

fn new_event(event_type: &str, source: Option<&str>, key_text: Option<&str>, at: OffsetDateTime) -> NewWebhookEvent {
    NewWebhookEvent {
        event_type: event_type.into(),
        source_identifier: source.map(str::to_owned),
        request_digest: format!("digest of {event_type}"),
        idempotency_key: key_text.map(key),
        created_at: at,
    }
}

/// The delivery of an event for a config: its payload names both, so a rule can see which made which.
fn event_delivery(config: &WebhookConfig, event_id: i64, at: OffsetDateTime) -> NewDelivery {
    NewDelivery {
        payload: format!(r#"{{"event_id":{event_id},"webhook_id":{}}}"#, config.id),
        target_url: config.target_url.clone(),
        ..new_delivery(config.id, &config.target_session, at)
    }
}

fn published(outcome: Result<FanOut, StoreError>) -> (WebhookEvent, Vec<Delivery>) {
    match outcome.expect("fan out") {
        FanOut::Published { event, deliveries } => (event, deliveries),
        other => panic!("expected a published event, got {other:?}"),
    }
}

/// An event reaches every config whose `event_type` is its own or `*` (of the narrowing source only, when it names
/// one), each delivery made for its config and the event's id and inserted pending, in config id order; an event
/// nothing matches is stored with no delivery; a key used again answers the first event and writes nothing.
pub fn an_event_fans_out_to_every_matching_config_at_once_and_its_key_finds_it_again(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let push = store.create_config(&new_config("github", "push", at)).expect("create config");
    let issues = store.create_config(&new_config("github", "issues", at)).expect("create config");
    let everything_of_gitlab = store.create_config(&new_config("gitlab", "*", at)).expect("create config");
    let make = |config: &WebhookConfig, event_id: i64| event_delivery(config, event_id, at);

    let (event, deliveries) = published(store.fan_out(&new_event("push", None, Some("evt-1"), at), 10, &make));
    assert_eq!(event.event_type, "push");
    assert_eq!(event.idempotency_key, Some(key("evt-1")));
    let reached: Vec<i64> = deliveries.iter().map(|delivery| delivery.webhook_id).collect();
    assert_eq!(reached, [push.id, everything_of_gitlab.id], "the type's config and the wildcard, by id");
    assert_eq!(event.delivery_ids, deliveries.iter().map(|delivery| delivery.id).collect::<Vec<_>>());
    for delivery in &deliveries {
        assert_eq!(delivery.status, DeliveryStatus::Pending);
        assert_eq!(delivery.attempt_count, 0);
        assert_eq!(delivery.payload, format!(r#"{{"event_id":{},"webhook_id":{}}}"#, event.id, delivery.webhook_id));
        assert_eq!(store.delivery(delivery.id).expect("read"), Some(delivery.clone()));
    }

    let (narrowed, deliveries) = published(store.fan_out(&new_event("issues", Some("github"), None, at), 10, &make));
    assert_ne!(narrowed.id, event.id);
    assert_eq!(deliveries.iter().map(|delivery| delivery.webhook_id).collect::<Vec<_>>(), [issues.id]);

    let (unheard, deliveries) = published(store.fan_out(&new_event("release", Some("github"), None, at), 10, &make));
    assert!(deliveries.is_empty() && unheard.delivery_ids.is_empty(), "{unheard:?}");

    let before = listed(store, &everything());
    let again = store.fan_out(&new_event("push", None, Some("evt-1"), at + Duration::minutes(1)), 10, &make);
    assert_eq!(again.expect("fan out"), FanOut::Existing(event.clone()), "the first event, nothing new");
    assert_eq!(listed(store, &everything()), before);
    assert_eq!(store.webhook_event_by_key(&key("evt-1")).expect("read"), Some(event));
    assert_eq!(store.webhook_event_by_key(&key("evt-2")).expect("read"), None);
}

/// More matching configs than the bound: nothing is written, neither the event nor any delivery; at the bound,
/// every one is.
pub fn a_fan_out_wider_than_its_bound_writes_nothing(store: &dyn WebhookStore, at: OffsetDateTime) {
    for source in ["a", "b", "c"] {
        store.create_config(&new_config(source, "push", at)).expect("create config");
    }
    let make = |config: &WebhookConfig, event_id: i64| event_delivery(config, event_id, at);
    let refused = store.fan_out(&new_event("push", None, Some("wide"), at), 2, &make).expect("fan out");
    assert_eq!(refused, FanOut::TooWide { matching: 3 });
    assert!(listed(store, &everything()).is_empty(), "no delivery written");
    assert_eq!(store.webhook_event_by_key(&key("wide")).expect("read"), None, "no event written");
    let (event, deliveries) = published(store.fan_out(&new_event("push", None, Some("wide"), at), 3, &make));
    assert_eq!(deliveries.len(), 3);
    assert_eq!(event.delivery_ids.len(), 3);
}

/// Requests racing with one key: exactly one publishes; every other call answers that event, or fails as a
/// conflict after which the key finds it.
pub fn concurrent_fan_outs_with_one_key_publish_exactly_once(store: &dyn WebhookStore, at: OffsetDateTime) {
    const CONTENDERS: usize = 6;
    store.create_config(&new_config("github", "push", at)).expect("create config");
    store.create_config(&new_config("gitlab", "*", at)).expect("create config");
    let make = |config: &WebhookConfig, event_id: i64| event_delivery(config, event_id, at);
    let barrier = std::sync::Barrier::new(CONTENDERS);
    let outcomes: Vec<Result<FanOut, StoreError>> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..CONTENDERS)
            .map(|_| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    store.fan_out(&new_event("push", None, Some("raced"), at), 10, &make)
                })
            })
            .collect();
        racers.into_iter().map(|racer| racer.join().expect("no panic")).collect()
    });
    let winners: Vec<&WebhookEvent> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Ok(FanOut::Published { event, .. }) => Some(event),
            _ => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let winner = winners[0].clone();
    for outcome in outcomes {
        match outcome {
            Ok(FanOut::Existing(event)) => assert_eq!(event, winner),
            Ok(FanOut::Published { .. }) => {}
            Err(StoreError::Conflict(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.webhook_event_by_key(&key("raced")).expect("read"), Some(winner.clone()));
    assert_eq!(listed(store, &everything()), winner.delivery_ids, "two deliveries, once");
}

/// Recover: a batch resets, as "Retry now" does, only the dead deliveries of the named config created in the window
/// (both ends included) and after the cursor, lowest ids first, at most `limit`; the next batch goes on from the
/// last id returned. Pending, failed and delivered rows, another config's dead rows and dead rows outside the
/// window stay as they were.
pub fn recover_resets_the_dead_rows_of_one_config_in_a_window_a_batch_at_a_time(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let other = config(store, "gitlab", at);
    let config = config(store, "github", at);
    let dead = |webhook_id, created_at| {
        attempt_once(store, &insert(store, &new_delivery(webhook_id, "s", created_at)), DeliveryStatus::Dead, None)
    };
    let since = at + Duration::minutes(1);
    let until = at + Duration::minutes(2);
    let before = dead(config.id, since - Duration::milliseconds(1));
    let first = dead(config.id, since);
    let other_config = dead(other.id, since);
    let delivered =
        attempt_once(store, &insert(store, &new_delivery(config.id, "s", since)), DeliveryStatus::Delivered, None);
    let pending = insert(store, &new_delivery(config.id, "s", since));
    let second = dead(config.id, since + Duration::seconds(30));
    let last = dead(config.id, until);
    let after = dead(config.id, until + Duration::milliseconds(1));
    let window = RecoverWindow { since, until };
    let now = at + Duration::hours(3);

    let batch = store.recover_dead(config.id, &window, 0, now, 2).expect("recover");
    assert_eq!(batch.iter().map(|row| row.id).collect::<Vec<_>>(), [first.id, second.id]);
    for row in &batch {
        assert_eq!((row.status, row.attempt_count, row.next_retry_at), (DeliveryStatus::Pending, 0, Some(now)));
        assert_eq!(row.error_detail.as_deref(), Some("http_503"), "the last error stays visible");
        assert_eq!(store.delivery(row.id).expect("read").as_ref(), Some(row));
    }
    let rest = store.recover_dead(config.id, &window, second.id, now, 2).expect("recover");
    assert_eq!(rest.iter().map(|row| row.id).collect::<Vec<_>>(), [last.id]);
    assert!(store.recover_dead(config.id, &window, last.id, now, 2).expect("recover").is_empty());
    for untouched in [&before, &other_config, &delivered, &pending, &after] {
        assert_eq!(store.delivery(untouched.id).expect("read").as_ref(), Some(untouched));
    }
    assert_eq!(store.attempts(first.id).expect("attempts").len(), 1, "the history stays");
    assert!(due_ids(store, now, 10).contains(&last.id), "a recovered row is due at once");
    let unknown = store.recover_dead(other.id + 1_000, &window, 0, now, 10).expect("recover");
    assert!(unknown.is_empty());
}

/// A config's own rate (`rate_limit_per_second`) is stored as created, changed or removed by an update (and left as
/// it is by one that does not name it); every due row carries its config's current rate; and the poll's read can
/// leave out the rows of given configs (endpoints whose rate is spent), reading the others' in their place.
pub fn a_configs_own_rate_round_trips_and_due_rows_carry_it_or_are_skipped_by_config(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let limited = store
        .create_config(&NewWebhookConfig { rate_limit_per_second: Some(2), ..new_config("slow", "push", at) })
        .expect("create config");
    assert_eq!(limited.rate_limit_per_second, Some(2));
    assert_eq!(store.config(limited.id).expect("read").expect("found").rate_limit_per_second, Some(2));
    let open = config(store, "fast", at);
    assert_eq!(open.rate_limit_per_second, None);
    let seconds = |n: i64| at + Duration::seconds(n);
    // The limited config's rows are the oldest: a read of three sees only them unless it skips that config.
    let slow: Vec<i64> = (0..3).map(|n| insert(store, &new_delivery(limited.id, "s", seconds(n))).id).collect();
    let fast: Vec<i64> = (10..12).map(|n| insert(store, &new_delivery(open.id, "s", seconds(n))).id).collect();
    let later = at + Duration::days(1);
    let due = store.due_deliveries(later, 3).expect("due");
    assert_eq!(due.iter().map(|row| row.id).collect::<Vec<_>>(), slow);
    assert!(due.iter().all(|row| row.webhook_id == limited.id && row.rate_limit_per_second == Some(2)), "{due:?}");
    let skipping = store.due_deliveries_skipping(later, 3, &[limited.id]).expect("due");
    assert_eq!(skipping.iter().map(|row| row.id).collect::<Vec<_>>(), fast, "the limited config skipped");
    assert!(skipping.iter().all(|row| row.webhook_id == open.id && row.rate_limit_per_second.is_none()));
    assert!(store.due_deliveries_skipping(later, 10, &[limited.id, open.id]).expect("due").is_empty());

    let change = |rate| WebhookConfigChange { rate_limit_per_second: Some(rate), ..WebhookConfigChange::default() };
    let raised = store.update_config(limited.id, &change(Some(40)), seconds(1)).expect("update").expect("found");
    assert_eq!(raised.rate_limit_per_second, Some(40));
    assert_eq!(store.due_deliveries(later, 1).expect("due")[0].rate_limit_per_second, Some(40), "read as it is now");
    let other = WebhookConfigChange { agent_intent: Some("triage".into()), ..WebhookConfigChange::default() };
    let kept = store.update_config(limited.id, &other, seconds(2)).expect("update").expect("found");
    assert_eq!(kept.rate_limit_per_second, Some(40), "an update that does not name it keeps it");
    let removed = store.update_config(limited.id, &change(None), seconds(3)).expect("update").expect("found");
    assert_eq!(removed.rate_limit_per_second, None);
    assert_eq!(store.config(limited.id).expect("read").expect("found").rate_limit_per_second, None);
    assert_eq!(store.due_deliveries(later, 1).expect("due")[0].rate_limit_per_second, None);
}

/// Records one attempt of each claimed `row` (its lease is its `next_retry_at`), started at `at`, failed or
/// delivered, with [`WebhookStore::record_attempts_counting`]; returns each record's outcome.
fn record_counting(
    store: &dyn WebhookStore,
    rows: &[&Delivery],
    delivered: bool,
    at: OffsetDateTime,
    disable_after: u32,
) -> Vec<crate::AttemptRecorded> {
    let status = if delivered { DeliveryStatus::Delivered } else { DeliveryStatus::Failed };
    let records: Vec<AttemptRecord> = rows
        .iter()
        .map(|row| {
            let (attempt, update) = attempt_and_update(row.id, row.attempt_count + 1, at, status);
            AttemptRecord {
                webhook_id: row.webhook_id,
                attempt,
                lease: row.next_retry_at.expect("a claimed row"),
                update,
            }
        })
        .collect();
    store.record_attempts_counting(&records, disable_after).expect("record attempts")
}

/// Records one attempt of each claimed `row`, each failed or delivered as `delivered` says, all in one group
/// started at `at`; returns each record's outcome.
fn record_mixed(
    store: &dyn WebhookStore,
    rows: &[Delivery],
    delivered: &[bool],
    at: OffsetDateTime,
    disable_after: u32,
) -> Vec<crate::AttemptRecorded> {
    let records: Vec<AttemptRecord> = rows
        .iter()
        .zip(delivered)
        .map(|(row, delivered)| {
            let status = if *delivered { DeliveryStatus::Delivered } else { DeliveryStatus::Failed };
            let (attempt, update) = attempt_and_update(row.id, row.attempt_count + 1, at, status);
            AttemptRecord { webhook_id: row.webhook_id, attempt, lease: row.next_retry_at.expect("claimed"), update }
        })
        .collect();
    store.record_attempts_counting(&records, disable_after).expect("record attempts")
}

/// Issue 18: one group of records counts as its attempts would one by one. A success early in a group resets a count
/// that is already at the limit without disabling (only a failure reaches the limit); a limit reached in the middle
/// of a group disables then, reported by the attempt that reached it, and a later success of the same group resets
/// the count but does not enable again.
pub fn a_group_of_records_counts_health_as_its_attempts_one_by_one(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let rows = insert_claimed(store, config.id, 12, at);
    let t1 = at + Duration::seconds(1);
    // Counted with no limit: three failures leave an enabled config at 3.
    assert!(record_mixed(store, &rows[0..3], &[false; 3], t1, 0).iter().all(|recorded| recorded.disabled.is_none()));
    assert_eq!(store.config(config.id).expect("read").expect("config").consecutive_failures, 3);
    let t2 = at + Duration::seconds(2);
    let early_success = record_mixed(store, &rows[3..5], &[true, false], t2, 3);
    assert!(early_success.iter().all(|recorded| recorded.disabled.is_none()), "{early_success:?}");
    let stored = store.config(config.id).expect("read").expect("config");
    assert!(stored.enabled, "a success first: the count restarts before any failure could reach the limit");
    assert_eq!((stored.consecutive_failures, stored.last_success_at), (1, Some(t2)));
    let t3 = at + Duration::seconds(3);
    let run = record_mixed(store, &rows[5..10], &[false, false, true, false, false], t3, 3);
    let disables: Vec<_> = run.iter().map(|recorded| recorded.disabled.clone()).collect();
    let disabled = crate::EndpointDisabled {
        webhook_id: config.id,
        consecutive_failures: 3,
        reason: crate::DisabledReason::Failing,
    };
    assert_eq!(disables, [None, Some(disabled), None, None, None], "the failure that reached 3 disabled");
    let stored = store.config(config.id).expect("read").expect("config");
    assert!(!stored.enabled, "a later success of the group does not enable again");
    assert_eq!(stored.disabled_reason, Some(crate::DisabledReason::Failing));
    assert_eq!((stored.consecutive_failures, stored.last_success_at), (2, Some(t3)), "counted to the group's end");
    let t4 = at + Duration::seconds(4);
    let more = record_mixed(store, &rows[10..12], &[false, false], t4, 3);
    assert!(more.iter().all(|recorded| recorded.disabled.is_none()), "a disabled config is not disabled again");
    assert_eq!(store.config(config.id).expect("read").expect("config").consecutive_failures, 4);
}

/// Issue 20: failed attempts in a row are counted as they are recorded and a success resets the count; the
/// attempt that reaches the limit disables the config (`failing`) and is the only one to say so; from then on the
/// config's deliveries awaiting an attempt are held (`next_retry_at` empty: not due, not counted as due, not
/// claimable), new ones included (an insert's claim is refused), and a fan-out leaves the config out.
pub fn failures_in_a_row_disable_a_config_once_and_hold_its_deliveries(store: &dyn WebhookStore, at: OffsetDateTime) {
    let config = config(store, "github", at);
    let fresh = store.config(config.id).expect("read").expect("the config");
    assert!(fresh.enabled && fresh.disabled_reason.is_none(), "a new config is enabled");
    assert_eq!((fresh.consecutive_failures, fresh.last_success_at), (0, None));
    let rows = insert_claimed(store, config.id, 5, at);
    let waiting = insert(store, &new_delivery(config.id, "s", at));
    let t1 = at + Duration::seconds(1);
    let first = record_counting(store, &[&rows[0]], false, t1, 3);
    assert_eq!(first, [crate::AttemptRecorded { applied: true, disabled: None }]);
    assert_eq!(store.config(config.id).expect("read").expect("config").consecutive_failures, 1);
    let t2 = at + Duration::seconds(2);
    assert!(record_counting(store, &[&rows[1]], true, t2, 3)[0].disabled.is_none());
    let after_success = store.config(config.id).expect("read").expect("config");
    assert_eq!((after_success.consecutive_failures, after_success.last_success_at), (0, Some(t2)), "a success resets");
    let t3 = at + Duration::seconds(3);
    let run = record_counting(store, &[&rows[2], &rows[3], &rows[4]], false, t3, 3);
    let disables: Vec<_> = run.iter().map(|recorded| recorded.disabled.clone()).collect();
    let disabled = crate::EndpointDisabled {
        webhook_id: config.id,
        consecutive_failures: 3,
        reason: crate::DisabledReason::Failing,
    };
    assert_eq!(disables, [None, None, Some(disabled)], "the third failure in a row disables, and only it says so");
    let stored = store.config(config.id).expect("read").expect("config");
    assert!(!stored.enabled);
    assert_eq!(stored.disabled_reason, Some(crate::DisabledReason::Failing));
    assert_eq!((stored.consecutive_failures, stored.last_success_at), (3, Some(t2)));
    let far = at + Duration::days(30);
    for id in [rows[0].id, rows[2].id, rows[3].id, rows[4].id, waiting.id] {
        let row = store.delivery(id).expect("read").expect("row");
        assert_eq!(row.next_retry_at, None, "delivery {id} is held");
        assert!(row.status.is_awaiting_attempt(), "delivery {id} keeps its status");
    }
    assert_eq!(store.delivery(rows[2].id).expect("read").expect("row").attempt_count, 1, "the count is frozen");
    assert_eq!(due_ids(store, far, 100), Vec::<i64>::new(), "held deliveries are not due");
    assert_eq!(store.count_due_deliveries(far).expect("count"), 0, "nor counted as due");
    assert!(store.claim(&[waiting.id], far, far + LEASE).expect("claim").is_empty(), "nor claimable");
    let late = insert(store, &NewDelivery { claimed: true, ..new_delivery(config.id, "s", t3) });
    assert_eq!(late.next_retry_at, None, "a delivery enqueued while disabled is held, its claim refused");
    let grouped = insert_claimed(store, config.id, 1, at).remove(0);
    assert_eq!(grouped.next_retry_at, None, "a grouped insert too");
    let reset = store.retry_now(rows[2].id, t3).expect("retry now");
    let RetryNowOutcome::Reset(reset) = reset else { panic!("a failed row resets: {reset:?}") };
    assert_eq!((reset.status, reset.next_retry_at), (DeliveryStatus::Pending, None), "reset, but held");
    let event = new_event("push", None, None, t3);
    let (_, fanned) = published(store.fan_out(&event, 10, &|config, id| event_delivery(config, id, t3)));
    assert!(fanned.is_empty(), "a fan-out leaves a disabled config out");
}

/// Issue 20: `PATCH {"enabled": true}` clears the reason and the count and makes every held delivery due at once
/// (the poll then takes them oldest first, ties by id); `PATCH {"enabled": false}` disables by hand (`manual`) and
/// holds them again.
pub fn enabling_a_config_resumes_its_held_deliveries_and_disabling_by_hand_holds_them(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let rows = insert_claimed(store, config.id, 2, at);
    let waiting = insert(store, &new_delivery(config.id, "s", at));
    let t1 = at + Duration::seconds(1);
    assert!(record_counting(store, &[&rows[0], &rows[1]], false, t1, 2)[1].disabled.is_some());
    let resumed_at = at + Duration::hours(2);
    let enable = WebhookConfigChange { enabled: Some(true), ..WebhookConfigChange::default() };
    let resumed = store.update_config(config.id, &enable, resumed_at).expect("update").expect("the config");
    assert!(resumed.enabled && resumed.disabled_reason.is_none());
    assert_eq!(resumed.consecutive_failures, 0, "resuming clears the count");
    assert_eq!(store.config(config.id).expect("read"), Some(resumed.clone()));
    let mut expected = vec![rows[0].id, rows[1].id, waiting.id];
    expected.sort_unstable();
    assert_eq!(due_ids(store, resumed_at, 100), expected, "every held delivery is due at once, oldest first");
    for id in &expected {
        let row = store.delivery(*id).expect("read").expect("row");
        assert_eq!(row.next_retry_at, Some(resumed_at));
    }
    assert_eq!(store.delivery(rows[0].id).expect("read").expect("row").attempt_count, 1, "the history stays");
    let disable = WebhookConfigChange { enabled: Some(false), ..WebhookConfigChange::default() };
    let manual = store.update_config(config.id, &disable, resumed_at).expect("update").expect("the config");
    assert!(!manual.enabled);
    assert_eq!(manual.disabled_reason, Some(crate::DisabledReason::Manual));
    assert_eq!(due_ids(store, resumed_at + Duration::days(1), 100), Vec::<i64>::new(), "held again");
    let again = store.update_config(config.id, &disable, resumed_at).expect("update").expect("the config");
    assert_eq!(again, manual, "disabling a disabled config changes nothing");
}

/// Issue 20, `stats_24h`: per config, the successful and the failed attempts started since the instant, and the
/// deliveries whose last attempt (since then) left them dead; older history and other configs' are left out.
pub fn endpoint_stats_count_the_windows_attempts_and_dead_letters(store: &dyn WebhookStore, at: OffsetDateTime) {
    let a = config(store, "github", at);
    let b = config(store, "gitlab", at);
    let since = at + Duration::hours(1);
    history(store, a.id, 2, DeliveryStatus::Delivered, at);
    history(store, a.id, 3, DeliveryStatus::Delivered, since);
    history(store, a.id, 2, DeliveryStatus::Failed, since);
    history(store, a.id, 1, DeliveryStatus::Dead, since);
    history(store, b.id, 4, DeliveryStatus::Dead, at);
    let stats = store.endpoint_stats(since).expect("stats");
    let of_a = stats.get(&a.id).copied().unwrap_or_default();
    assert_eq!(of_a, crate::EndpointStats { delivered: 3, failed_attempts: 3, dead: 1 });
    assert_eq!(stats.get(&b.id).copied().unwrap_or_default(), crate::EndpointStats::default(), "only the window");
}

/// Issue 20: disabling a config leaves a claimed row to its attempt (the claim is not broken, so a success is not
/// sent twice); the attempt records as usual, and a retry it schedules is held. A success applies as usual.
pub fn an_attempt_in_flight_when_its_config_is_disabled_records_and_its_retry_is_held(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let rows = insert_claimed(store, config.id, 2, at);
    let disable = WebhookConfigChange { enabled: Some(false), ..WebhookConfigChange::default() };
    store.update_config(config.id, &disable, at).expect("update").expect("the config");
    for row in &rows {
        assert_eq!(store.delivery(row.id).expect("read").expect("row").next_retry_at, row.next_retry_at, "claimed");
    }
    let t1 = at + Duration::seconds(1);
    let failed = record_counting(store, &[&rows[0]], false, t1, 0);
    assert!(failed[0].applied, "the attempt records under its claim");
    let held = store.delivery(rows[0].id).expect("read").expect("row");
    assert_eq!((held.status, held.attempt_count, held.next_retry_at), (DeliveryStatus::Failed, 1, None), "held");
    let delivered = record_counting(store, &[&rows[1]], true, t1, 0);
    assert!(delivered[0].applied);
    assert_eq!(store.delivery(rows[1].id).expect("read").expect("row").status, DeliveryStatus::Delivered);
    let stored = store.config(config.id).expect("read").expect("config");
    assert_eq!((stored.enabled, stored.last_success_at), (false, Some(t1)), "a success does not enable it");
}

/// A claim taken before its config was disabled whose process then died (no attempt recorded, so nothing held the
/// row) is held by the next claim that finds it due: not claimed, off the due backlog, and due again at the enable.
pub fn a_claim_that_lapsed_after_its_config_was_disabled_is_held_by_the_next_claim(
    store: &dyn WebhookStore,
    at: OffsetDateTime,
) {
    let config = config(store, "github", at);
    let row = insert(store, &new_delivery(config.id, "s", at));
    let due = row.next_retry_at.expect("due");
    let lease = due + Duration::seconds(30);
    assert_eq!(store.claim(&[row.id], due, lease).expect("claim").len(), 1);
    let disable = WebhookConfigChange { enabled: Some(false), ..WebhookConfigChange::default() };
    store.update_config(config.id, &disable, at).expect("update").expect("the config");
    // The process that held the claim is gone; its lease has run out.
    let later = lease + Duration::seconds(1);
    assert!(store.claim(&[row.id], later, later + Duration::seconds(30)).expect("claim").is_empty());
    let held = store.delivery(row.id).expect("read").expect("row");
    assert_eq!((held.status, held.next_retry_at), (DeliveryStatus::Pending, None), "held");
    assert_eq!(store.count_due_deliveries(later).expect("count"), 0, "not in the due backlog");
    let enable = WebhookConfigChange { enabled: Some(true), ..WebhookConfigChange::default() };
    store.update_config(config.id, &enable, later).expect("update").expect("the config");
    assert_eq!(store.claim(&[row.id], later, later + Duration::seconds(30)).expect("claim").len(), 1, "resumed");
}
