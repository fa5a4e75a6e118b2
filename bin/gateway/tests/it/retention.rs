//! Retention against the real binary: finished deliveries older than `--retention-days` are pruned at start and
//! every hour after; unfinished ones stay.

use std::sync::Arc;

use diesel::{Connection, RunQueryDsl};

use crate::support::{Gateway, count_rows};

#[test]
fn old_finished_deliveries_are_pruned_and_unfinished_ones_kept() {
    let first = Gateway::start(&[]);
    let (status, config) = first.operator_post(
        "/gateway/webhook-configs",
        &serde_json::json!({"source_identifier": "ci", "event_type": "build", "agent_intent": "report",
                            "target_session": "s", "target_url": "https://example.com/hook", "secret": "k"}),
    );
    assert_eq!(status, 201, "{config}");
    let dir = Arc::clone(&first.dir);
    let database = first.database_path();
    drop(first);

    // Rows as a gateway running for months leaves them: some finished long ago, some still waiting.
    let mut connection = diesel::SqliteConnection::establish(database.to_str().unwrap()).unwrap();
    for (status, age_days) in [("delivered", 40), ("dead", 40), ("failed", 40), ("pending", 40), ("delivered", 1)] {
        let created = format!("datetime('now', '-{age_days} days')");
        diesel::sql_query(format!(
            "INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, status, \
             attempt_count, next_retry_at, created_at) VALUES ({}, 's', '{{}}', 'https://example.com/hook', \
             'sha256=00', '{status}', 1, datetime('now', '+1 day'), {created})",
            config["id"]
        ))
        .execute(&mut connection)
        .unwrap();
    }
    diesel::sql_query(
        "INSERT INTO webhook_delivery_attempts (delivery_id, attempt_number, started_at, duration_ms) \
         SELECT id, 1, created_at, 5 FROM webhook_deliveries",
    )
    .execute(&mut connection)
    .unwrap();
    drop(connection);

    let gateway = Gateway::start_in(dir, &["--retention-days", "30"]);
    gateway.wait_for_log("old webhook deliveries pruned");
    assert_eq!(count_rows(&database, "webhook_deliveries"), 3, "the old failed and pending ones and the new one");
    assert_eq!(count_rows(&database, "webhook_delivery_attempts"), 3);
}
