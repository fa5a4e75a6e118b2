//! What only SQL can get wrong: the due-row query's plan, and timestamps that must round-trip exactly for the claim
//! check. The port's rules (configs, deliveries, claims, attempts, retention, idempotency keys, fencing) run against
//! this adapter, as against the in-memory fake, in tests/conformance.rs.

use time::Duration;
use time::macros::datetime;

use super::*;
use crate::DatabaseUrl;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

fn open() -> (tempfile::TempDir, DieselStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    (dir, store)
}

/// Microseconds, PostgreSQL's precision, which the conformance rules (milliseconds) do not reach.
#[test]
fn instants_round_trip_exactly_for_the_lease_comparison() {
    let (_dir, store) = open();
    let config = store
        .create_config(&NewWebhookConfig {
            source_identifier: "github".into(),
            event_type: "push".into(),
            agent_intent: "review".into(),
            target_session: "s-1".into(),
            target_url: "https://example.com/a".into(),
            secret: WebhookSecret::new("s"),
            created_at: START,
        })
        .unwrap();
    let created = START + Duration::milliseconds(1) + Duration::microseconds(7);
    let row = store
        .insert_delivery(&NewDelivery {
            webhook_id: config.id,
            session_id: "s".into(),
            payload: "{}".into(),
            target_url: "https://example.com/a".into(),
            signature: "sha256=00".into(),
            created_at: created,
            next_retry_at: created + Duration::seconds(30),
            idempotency_key: None,
            claimed: false,
        })
        .unwrap();
    assert_eq!(row.created_at, created);
    let lease = START + Duration::seconds(45) + Duration::microseconds(999_999);
    let claimed = store.claim(&[row.id], START + Duration::minutes(1), lease).unwrap();
    assert_eq!(claimed[0].next_retry_at, Some(lease));
    let at = START + Duration::minutes(1);
    let attempt = DeliveryAttempt {
        delivery_id: row.id,
        attempt_number: 1,
        started_at: at,
        duration_ms: 12,
        status_code: Some(503),
        error_class: Some("http_503".into()),
        error_detail: None,
    };
    let update = DeliveryUpdate {
        status: DeliveryStatus::Failed,
        attempt_count: 1,
        last_attempted_at: at,
        next_retry_at: Some(at + Duration::seconds(30)),
        error_detail: Some("http_503".into()),
    };
    assert!(store.record_attempt(&attempt, claimed[0].next_retry_at.unwrap(), &update).unwrap());
}

/// FR-10.8: the poll's query must use the `(status, next_retry_at)` index — and in index order, without a sort —
/// for each status the poll reads.
#[test]
fn the_due_row_query_is_an_index_range_scan_without_a_sort() {
    let (_dir, store) = open();
    for status in AWAITING_ATTEMPT {
        let query = due_of_status_query(status.as_str(), to_db(START), 50);
        let plan =
            store.with_connection("explain", |connection| crate::explain::query_plan(connection, query)).unwrap();
        assert!(
            plan.iter().any(|line| line.contains("USING INDEX webhook_deliveries_status_next_retry_at")),
            "{status:?}: {plan:?}"
        );
        assert!(!plan.iter().any(|line| line.contains("TEMP B-TREE")), "{status:?}: the query sorts: {plan:?}");
        assert!(!plan.iter().any(|line| line.starts_with("SCAN")), "{status:?}: the query scans the table: {plan:?}");
    }
}
