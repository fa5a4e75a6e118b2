//! The real binary on PostgreSQL: a throwaway server of this module's own (gateway_testkit::postgres; skipped
//! with one line where PostgreSQL is not installed, failed under CI), the basic flows end to end, and
//! readiness following the server down and back up.

use diesel::prelude::*;
use gateway_store::schema::gateway_heartbeats;
use gateway_store::timestamp::from_db;
use serde_json::json;

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, eventually};

/// `(cluster_id, last_seen_at)` of the agent's row, read over a connection of the test's own: the row is
/// committed, not only in the gateway's memory.
fn stored_heartbeat(database_url: &str, agent_id: &str) -> Option<(String, time::OffsetDateTime)> {
    let mut connection = PgConnection::establish(database_url).unwrap();
    gateway_heartbeats::table
        .find(agent_id)
        .select((gateway_heartbeats::cluster_id, gateway_heartbeats::last_seen_at))
        .first::<(String, time::PrimitiveDateTime)>(&mut connection)
        .optional()
        .unwrap()
        .map(|(cluster_id, last_seen_at)| (cluster_id, from_db(last_seen_at)))
}

fn rows(database_url: &str, table: &str) -> i64 {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}")).get_result::<Count>(&mut connection).unwrap().n
}

/// One server for the whole flow: the last step stops and restarts it, which no other test may see.
#[test]
fn heartbeats_reminders_and_webhooks_work_on_postgres_and_readiness_follows_the_server() {
    let Some(server) = gateway_testkit::postgres::server("it::postgres") else { return };
    let database = server.create_database("it_postgres");
    let gateway = Gateway::start_on(database.url(), &["--webhook-allow-private-targets"]);
    gateway.wait_for_log("do not start a second one");

    // A heartbeat: answered, and its row committed.
    let heartbeat = json!({"type": "heartbeat", "agent_id": "agent-pg", "cluster_id": "cluster-west", "timestamp": "2026-02-22T12:00:00.123456Z"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &heartbeat), (200, json!({"status": "ok"})));
    let (cluster, seen) = stored_heartbeat(database.url(), "agent-pg").expect("the heartbeat's row");
    assert_eq!(cluster, "cluster-west");
    assert_eq!(seen, time::macros::datetime!(2026-02-22 12:00:00.123456 UTC));

    // A reminder asked for in a DecisionLog, received over SSE; the one-time row goes once it fired.
    let reminders = gateway.subscribe("agent:agent-pg:scheduled");
    let log = json!({
        "meta": {"trace_id": "trace-pg", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "agent-pg", "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": 300, "payload": {"task": "check_quota"}}}
    });
    let (status, body) = gateway.post_json("/gateway/messages", &log);
    assert_eq!((status, body), (202, json!({"status": "accepted", "trace_id": "trace-pg"})));
    let reminder = reminders.expect("reminder");
    assert_eq!(reminder.data["agent_id"], "agent-pg");
    assert_eq!(reminder.data["payload"], json!({"task": "check_quota"}));
    eventually("the fired one-time row is deleted", || rows(database.url(), "cron_jobs") == 0);

    // A webhook delivered to a loopback receiver, once, and marked delivered.
    let receiver = Receiver::start(Behaviour::Status(204));
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "github", "event_type": "push", "agent_intent": "code_review",
                "target_session": "reviewers", "target_url": receiver.url("/hooks/pg"), "secret": "pg-secret-value"}),
    );
    assert_eq!(status, 201, "{config}");
    let (status, created) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": config["id"], "session_id": "session-pg", "payload": {"n": 1}}),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    let received = receiver.wait_for(1);
    assert_eq!((received[0].path.as_str(), received[0].delivery_id()), ("/hooks/pg", id));
    eventually("the delivery is marked delivered", || {
        gateway.operator_get(&format!("/gateway/deliveries/{id}")).1["status"] == "delivered"
    });
    assert_eq!(receiver.count(), 1, "delivered more than once");

    // Readiness follows the server: 503 while it is down, 200 again once it is back, without a restart.
    assert_eq!(gateway.get("/readyz").0, 200);
    server.stop().unwrap();
    eventually("/readyz is 503 while PostgreSQL is down", || gateway.get("/readyz").0 == 503);
    let (status, refused) = gateway.post_json("/gateway/heartbeat", &heartbeat);
    assert_eq!(status, 503, "a write while PostgreSQL is down: {refused}");
    server.start().unwrap();
    eventually("/readyz is 200 once PostgreSQL is back", || gateway.get("/readyz").0 == 200);
    assert_eq!(gateway.post_json("/gateway/heartbeat", &heartbeat).0, 200);
    assert!(!gateway.logs().contains(database.url()), "the database URL reached the log");
}

/// Input PostgreSQL cannot store or compare (text holding NUL) is refused with a 4xx like any other bad input, not
/// answered 500: found by schemathesis against a gateway on PostgreSQL (docs/api.md, "OpenAPI document and
/// fuzzing").
#[test]
fn text_holding_nul_is_refused_on_postgres_not_a_server_error() {
    let Some(server) = gateway_testkit::postgres::server("it::postgres") else { return };
    let database = server.create_database("it_postgres_nul");
    let gateway = Gateway::start_on(database.url(), &[]);
    let (status, refused) = gateway.get("/gateway/agents/agent-pg/reminders?after=1%00x");
    assert_eq!((status, refused["reason"].as_str()), (400, Some("invalid_query")), "{refused}");
    let (status, refused) = gateway.operator_get("/gateway/deliveries?session_id=s%00x");
    assert_eq!((status, refused["reason"].as_str()), (400, Some("invalid_query")), "{refused}");

    let config = json!({"source_identifier": "src", "event_type": "push", "agent_intent": "review",
                        "target_session": "session", "target_url": "https://hooks.example.com/in", "secret": "a\0b"});
    let (status, refused) = gateway.operator_post("/gateway/webhook-configs", &config);
    assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{refused}");
    let config = json!({"secret": "ab", "source_identifier": "src", "event_type": "push", "agent_intent": "review",
                        "target_session": "session", "target_url": "https://hooks.example.com/in"});
    let (status, created) = gateway.operator_post("/gateway/webhook-configs", &config);
    assert_eq!(status, 201, "{created}");
    let (status, refused) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{}", created["id"]), &json!({"secret": "n\0"}));
    assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{refused}");
}

/// A gateway started alone (no Redis) on a database a cluster ran on, whose fencing epoch is above 1, still does
/// its timed work: it leads under a token newer than the store's (with token 1 every leader-only write was refused
/// as fenced, and no reminder ever fired).
#[test]
fn a_gateway_alone_on_a_database_a_cluster_used_fires_its_reminders() {
    let Some(database) = gateway_testkit::postgres::database("it::postgres::after_a_cluster") else { return };
    // Migrated by a first start; then the epoch a cluster's terms would have left.
    drop(Gateway::start_on(database.url(), &[]));
    let mut connection = PgConnection::establish(database.url()).unwrap();
    diesel::sql_query("UPDATE gateway_leader_epoch SET epoch = 42 WHERE id = 1").execute(&mut connection).unwrap();
    let gateway = Gateway::start_on(database.url(), &[]);
    let reminders = gateway.subscribe("agent:agent-after-cluster:scheduled");
    let call = json!({"agent_id": "agent-after-cluster", "tool_call_id": "c-1",
                      "params": {"delay_ms": 200, "payload": {"after": "a cluster"}}});
    let (status, body) = gateway.post_json("/gateway/tools/schedule_reminder", &call);
    assert_eq!(status, 200, "{body}");
    let fired = reminders.expect("reminder");
    assert_eq!(fired.data["payload"], json!({"after": "a cluster"}));
    assert!(!gateway.logs().contains("fenced"), "{}", gateway.logs());
}
