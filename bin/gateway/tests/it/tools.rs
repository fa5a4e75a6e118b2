//! `POST /gateway/tools/{tool_name}` through the real binary (docs/api.md, "Tools"), and the bounds on agents'
//! input that the tools share with DecisionLogs and heartbeats.

use serde_json::{Value, json};

use crate::support::{Gateway, count_rows, eventually};

fn call(gateway: &Gateway, tool: &str, agent: &str, tool_call_id: &str, params: Value) -> (u16, Value) {
    gateway.post_json(
        &format!("/gateway/tools/{tool}"),
        &json!({"agent_id": agent, "tool_call_id": tool_call_id, "params": params}),
    )
}

fn reminders_of(gateway: &Gateway, agent: &str, tool_call_id: &str) -> Vec<Value> {
    let (status, body) = call(gateway, "list_reminders", agent, tool_call_id, json!({}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["truncated"], false);
    body["result"]["reminders"].as_array().unwrap().clone()
}

fn pending_jobs(gateway: &Gateway) -> i64 {
    count_rows(&gateway.database_path(), "cron_jobs")
}

#[test]
fn a_reminder_scheduled_by_a_tool_fires_on_the_agents_stream_and_a_retry_gets_the_same_answer() {
    let gateway = Gateway::start(&[]);
    let reminders = gateway.subscribe("agent:agent-t:scheduled");
    let params = json!({"delay_ms": 2_000, "payload": {"task": "tool-private"}});
    let (status, first) = call(&gateway, "schedule_reminder", "agent-t", "call-1", params.clone());
    assert_eq!(status, 200, "{first}");
    let job_id = first["result"]["job_id"].as_i64().unwrap();
    assert!(first["result"]["fire_at"].is_string(), "{first}");

    // The same call again, its params written in another order: the recorded answer, nothing scheduled twice.
    let reordered = json!({"payload": {"task": "tool-private"}, "delay_ms": 2_000});
    let (status, headers, again) =
        gateway_post_with_headers(&gateway, "schedule_reminder", "agent-t", "call-1", reordered);
    assert_eq!((status, &again), (200, &first));
    assert_eq!(headers.get("idempotent-replayed").map(|value| value.to_str().unwrap()), Some("true"));
    assert_eq!(pending_jobs(&gateway), 1, "the retry scheduled nothing");
    assert_eq!(count_rows(&gateway.database_path(), "tool_calls"), 1);

    let event = reminders.expect("reminder");
    assert_eq!(event.data["job_id"], job_id);
    assert_eq!(event.data["payload"], json!({"task": "tool-private"}));
    assert_eq!(event.data["scheduled_for"], first["result"]["fire_at"]);
    eventually("the fired row is deleted", || pending_jobs(&gateway) == 0);

    // A retry after the reminder fired still gets the recorded answer, and schedules nothing.
    let (status, late) = call(&gateway, "schedule_reminder", "agent-t", "call-1", params);
    assert_eq!((status, &late), (200, &first));
    assert_eq!(pending_jobs(&gateway), 0);
    gateway.wait_for_log("reminder scheduled by a tool call");
    assert!(!gateway.logs().contains("tool-private"), "the payload is never logged");
}

fn gateway_post_with_headers(
    gateway: &Gateway,
    tool: &str,
    agent: &str,
    tool_call_id: &str,
    params: Value,
) -> (u16, http::HeaderMap, Value) {
    let body = json!({"agent_id": agent, "tool_call_id": tool_call_id, "params": params});
    // The operator's token is not needed and changes nothing: tools are agents' calls.
    gateway.operator_post_with_headers(&format!("/gateway/tools/{tool}"), &body, &[])
}

#[test]
fn one_tool_call_id_with_other_params_or_another_tool_is_a_conflict() {
    let gateway = Gateway::start(&[]);
    let params = json!({"delay_ms": 60_000, "payload": {"n": 1}});
    assert_eq!(call(&gateway, "schedule_reminder", "agent-c", "call-1", params).0, 200);
    for (tool, params) in [
        ("schedule_reminder", json!({"delay_ms": 60_000, "payload": {"n": 2}})),
        ("schedule_reminder", json!({"delay_ms": 60_001, "payload": {"n": 1}})),
        ("list_reminders", json!({})),
    ] {
        let (status, body) = call(&gateway, tool, "agent-c", "call-1", params);
        assert_eq!((status, body["reason"].as_str()), (409, Some("tool_call_conflict")), "{tool}: {body}");
    }
    assert_eq!(pending_jobs(&gateway), 1, "no conflicting call scheduled anything");
    // The id is the agent's own: another agent may use it.
    let params = json!({"delay_ms": 60_000, "payload": {"n": 2}});
    assert_eq!(call(&gateway, "schedule_reminder", "agent-d", "call-1", params).0, 200);
    assert_eq!(pending_jobs(&gateway), 2);
}

#[test]
fn an_agent_lists_and_cancels_its_own_pending_reminders_only() {
    let gateway = Gateway::start(&[]);
    let schedule = |agent: &str, id: &str, delay: i64| {
        let (status, body) =
            call(&gateway, "schedule_reminder", agent, id, json!({"delay_ms": delay, "payload": {"id": id}}));
        assert_eq!(status, 200, "{body}");
        body["result"].clone()
    };
    let later = schedule("agent-l", "s-1", 120_000);
    let sooner = schedule("agent-l", "s-2", 60_000);
    let others = schedule("agent-m", "s-1", 60_000);

    let listed = reminders_of(&gateway, "agent-l", "l-1");
    let ids: Vec<&Value> = listed.iter().map(|reminder| &reminder["job_id"]).collect();
    assert_eq!(ids, [&sooner["job_id"], &later["job_id"]], "soonest first, only its own");
    assert_eq!(listed[0]["payload"], json!({"id": "s-2"}));
    assert_eq!(listed[0]["fire_at"], sooner["fire_at"]);

    let cancel = |agent: &str, id: &str, job: &Value| {
        let (status, body) = call(&gateway, "cancel_reminder", agent, id, json!({"job_id": job["job_id"]}));
        assert_eq!(status, 200, "{body}");
        body["result"].clone()
    };
    assert_eq!(cancel("agent-l", "c-1", &sooner), json!({"cancelled": true}));
    assert_eq!(cancel("agent-l", "c-1", &sooner), json!({"cancelled": true}), "a retry gets the recorded answer");
    assert_eq!(cancel("agent-l", "c-2", &sooner), json!({"cancelled": false}), "no longer pending");
    assert_eq!(cancel("agent-l", "c-3", &others), json!({"cancelled": false}), "another agent's job");
    assert_eq!(cancel("agent-l", "c-4", &json!({"job_id": 987_654})), json!({"cancelled": false}));
    let listed = reminders_of(&gateway, "agent-l", "l-2");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["job_id"], later["job_id"]);
    assert_eq!(reminders_of(&gateway, "agent-m", "l-1").len(), 1, "the other agent's reminder is untouched");
    assert_eq!(pending_jobs(&gateway), 2);
}

#[test]
fn an_unknown_tool_is_404_and_a_bad_call_is_422_naming_the_field_not_the_value() {
    let gateway = Gateway::start(&[]);
    let (status, body) = call(&gateway, "delete_everything", "agent-b", "call-1", json!({}));
    assert_eq!((status, body["reason"].as_str()), (404, Some("unknown_tool")), "{body}");

    let secret = "sk-live-do-not-echo";
    let cases = [
        (json!({"tool_call_id": "c", "params": {}}), "missing_required_fields", "agent_id is required"),
        (json!({"agent_id": "agent-b", "params": {}}), "missing_required_fields", "tool_call_id is required"),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "x".repeat(257), "params": {}}),
            "invalid_field",
            "tool_call_id: must be at most 256 bytes",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": {"delay_ms": 5}}),
            "missing_required_fields",
            "params.payload is required",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": {"delay_ms": secret, "payload": {}}}),
            "invalid_field",
            "params.delay_ms: must be an integer",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": {"delay_ms": 5, "payload": secret}}),
            "invalid_field",
            "params.payload: must be a JSON object",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": {"delay_ms": 5, "payload": {}, "at": secret}}),
            "invalid_field",
            "params: unknown field `at`",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": {}, "extra": secret}),
            "invalid_field",
            "unknown field `extra`",
        ),
        (
            json!({"agent_id": "agent-b", "tool_call_id": "c", "params": [secret]}),
            "invalid_field",
            "params: expected a JSON object",
        ),
    ];
    for (body, reason, detail) in cases {
        let (status, answer) = gateway.post_json("/gateway/tools/schedule_reminder", &body);
        assert_eq!((status, answer["reason"].as_str()), (422, Some(reason)), "{body}: {answer}");
        let given = answer["detail"].as_str().unwrap();
        assert!(given.starts_with(detail), "{body}: {given}");
        assert!(!answer.to_string().contains(secret), "{answer}");
    }
    let (status, body) = gateway.post("/gateway/tools/schedule_reminder", "{");
    assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_json")));
    assert_eq!(pending_jobs(&gateway), 0);
    assert_eq!(count_rows(&gateway.database_path(), "tool_calls"), 0, "refused calls are not recorded");
    assert!(!gateway.logs().contains(secret));
}

fn reminder_log(agent: &str, trace_id: &str, payload: Value) -> Value {
    json!({
        "meta": {"trace_id": trace_id, "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": agent, "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": 60_000, "payload": payload}}
    })
}

#[test]
fn an_oversized_payload_is_422_on_a_tool_and_a_warning_on_a_decision_log() {
    let gateway = Gateway::start(&["--reminder-payload-max-bytes", "64"]);
    let big = json!({"blob": "b".repeat(60)});
    let (status, body) =
        call(&gateway, "schedule_reminder", "agent-p", "call-1", json!({"delay_ms": 5, "payload": big}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    assert_eq!(body["detail"], "params.payload: must be at most 64 bytes as JSON");

    let messages = gateway.subscribe("gateway:messages");
    let (status, body) = gateway.post_json("/gateway/messages", &reminder_log("agent-p", "trace-big", big));
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")));
    messages.expect("decision_log");
    gateway.wait_for_log("reminder payload over 64 bytes");
    assert_eq!(pending_jobs(&gateway), 0, "nothing was scheduled");

    let small = json!({"blob": "s"});
    assert_eq!(
        call(&gateway, "schedule_reminder", "agent-p", "call-2", json!({"delay_ms": 60_000, "payload": small})).0,
        200
    );
    assert_eq!(pending_jobs(&gateway), 1, "a payload within the limit is scheduled");
}

#[test]
fn the_pending_reminder_cap_is_429_on_a_tool_and_a_warning_on_a_decision_log() {
    let gateway = Gateway::start(&["--max-pending-reminders-per-agent", "2"]);
    let params = json!({"delay_ms": 60_000, "payload": {}});
    for id in ["call-1", "call-2"] {
        assert_eq!(call(&gateway, "schedule_reminder", "agent-q", id, params.clone()).0, 200);
    }
    let (status, body) = call(&gateway, "schedule_reminder", "agent-q", "call-3", params.clone());
    assert_eq!((status, body["reason"].as_str()), (429, Some("too_many_reminders")), "{body}");
    // A retry of an answered call is not a new reminder: it still gets its answer at the cap.
    assert_eq!(call(&gateway, "schedule_reminder", "agent-q", "call-2", params.clone()).0, 200);
    assert_eq!(call(&gateway, "schedule_reminder", "agent-r", "call-1", params.clone()).0, 200, "another agent");

    let (status, _) = gateway.post_json("/gateway/messages", &reminder_log("agent-q", "trace-cap", json!({})));
    assert_eq!(status, 202);
    gateway.wait_for_log("pending reminders, the most allowed");
    assert_eq!(pending_jobs(&gateway), 3, "nothing more for the capped agent");

    // Room again once one is cancelled.
    let job = reminders_of(&gateway, "agent-q", "list-1")[0]["job_id"].clone();
    assert_eq!(call(&gateway, "cancel_reminder", "agent-q", "cancel-1", json!({"job_id": job})).0, 200);
    assert_eq!(call(&gateway, "schedule_reminder", "agent-q", "call-3", params).0, 200);
}

#[test]
fn a_megabyte_agent_type_is_refused_and_never_noted() {
    let gateway = Gateway::start(&[]);
    let beat = json!({"type": "heartbeat", "agent_id": "agent-big", "cluster_id": "c-1"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &beat).0, 200);
    let huge = "t".repeat(1_000_000);
    for (field, identity) in [
        ("identity.agent_type", json!({"agent_id": "agent-big", "agent_type": huge, "capability_version": "1"})),
        (
            "identity.capability_version",
            json!({"agent_id": "agent-big", "agent_type": "t", "capability_version": huge}),
        ),
    ] {
        let (status, body) = gateway.post_json("/gateway/messages", &json!({"identity": identity}));
        assert_eq!((status, body["reason"].as_str()), (422, Some("schema_violation")), "{field}");
        assert_eq!(body["detail"], format!("{field}: must be at most 256 bytes"));
    }
    let (status, agents) = gateway.operator_get("/gateway/agents");
    assert_eq!(status, 200);
    assert_eq!(agents["agents"][0]["agent_id"], "agent-big");
    assert_eq!(agents["agents"][0]["capabilities"], Value::Null, "nothing was noted");

    // At the bound it is accepted and noted.
    let fits = json!({"identity": {"agent_id": "agent-big", "agent_type": "t".repeat(256), "capability_version": "1"}});
    assert_eq!(gateway.post_json("/gateway/messages", &fits).0, 202);
    let (_, agents) = gateway.operator_get("/gateway/agents");
    assert_eq!(agents["agents"][0]["capabilities"]["agent_type"].as_str().map(str::len), Some(256));

    // A heartbeat's string fields are bounded the same way.
    let long_stamp = json!({"type": "heartbeat", "agent_id": "agent-big", "cluster_id": "c-1", "timestamp": huge});
    let (status, body) = gateway.post_json("/gateway/heartbeat", &long_stamp);
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    assert_eq!(body["detail"], "timestamp: must be at most 256 bytes");
}

/// `schedule_recurring`: a recurring job owned by the calling agent, its fires on the agent's stream like its
/// reminders, listed and cancelled with the reminder tools, idempotent per tool_call_id (a retry, its params in
/// another order, gets the recorded answer and creates nothing), under the same cap.
#[test]
fn a_recurring_job_scheduled_by_a_tool_fires_to_its_agent_is_listed_and_cancelled() {
    let gateway = Gateway::start(&["--max-pending-reminders-per-agent", "2"]);
    let reminders = gateway.subscribe("agent:agent-rec:scheduled");
    let params = json!({"schedule": "* * * * * *", "timezone": "Asia/Kolkata", "payload": {"task": "every-second"}});
    let (status, first) = call(&gateway, "schedule_recurring", "agent-rec", "rec-1", params);
    assert_eq!(status, 200, "{first}");
    let job_id = first["result"]["job_id"].as_i64().unwrap();
    let fire_at = first["result"]["fire_at"].as_str().unwrap();
    let local = first["result"]["fire_at_local"].as_str().unwrap();
    assert!(fire_at.ends_with('Z') && local.ends_with("+05:30"), "{first}");
    let reordered = json!({"payload": {"task": "every-second"}, "timezone": "Asia/Kolkata", "schedule": "* * * * * *"});
    let (status, again) = call(&gateway, "schedule_recurring", "agent-rec", "rec-1", reordered);
    assert_eq!((status, &again), (200, &first), "a retry gets the recorded answer");
    assert_eq!(pending_jobs(&gateway), 1);
    let (_, job) = gateway.operator_get(&format!("/gateway/cron/jobs/{job_id}"));
    assert_eq!((job["agent_id"].as_str(), job["timezone"].as_str()), (Some("agent-rec"), Some("Asia/Kolkata")));
    assert_eq!(job["is_one_time"], false);

    for _ in 0..2 {
        let event = reminders.expect("reminder");
        assert_eq!(event.data["job_id"], job_id);
        assert_eq!(event.data["payload"], json!({"task": "every-second"}));
    }

    // Listed with the reminders, soonest first, with its schedule and zone; a reminder has neither.
    let (status, _) =
        call(&gateway, "schedule_reminder", "agent-rec", "once-1", json!({"delay_ms": 600_000, "payload": {}}));
    assert_eq!(status, 200);
    let listed = reminders_of(&gateway, "agent-rec", "list-1");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["job_id"], job_id);
    assert_eq!(
        (listed[0]["schedule"].as_str(), listed[0]["timezone"].as_str()),
        (Some("* * * * * *"), Some("Asia/Kolkata"))
    );
    assert!(listed[1].get("schedule").is_none() && listed[1].get("timezone").is_none(), "{listed:?}");

    // The cap counts recurring jobs apart from reminders: one more fits, a third is refused.
    let daily = json!({"schedule": "0 9 * * *", "payload": {}});
    let (status, second) = call(&gateway, "schedule_recurring", "agent-rec", "rec-2", daily.clone());
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["result"]["fire_at"], second["result"]["fire_at_local"].as_str().unwrap().replace("+00:00", "Z"));
    let (status, refused) = call(&gateway, "schedule_recurring", "agent-rec", "rec-3", daily.clone());
    assert_eq!((status, refused["reason"].as_str()), (429, Some("too_many_reminders")), "{refused}");
    assert_eq!(call(&gateway, "schedule_recurring", "agent-rec", "rec-2", daily.clone()).0, 200, "a retry at the cap");

    // Another agent cannot cancel it; its own agent can, and then it stops.
    let cancel = |agent: &str, id: &str| call(&gateway, "cancel_reminder", agent, id, json!({"job_id": job_id})).1;
    assert_eq!(cancel("agent-other", "c-1")["result"], json!({"cancelled": false}));
    assert_eq!(cancel("agent-rec", "c-1")["result"], json!({"cancelled": true}));
    assert_eq!(gateway.operator_get(&format!("/gateway/cron/jobs/{job_id}")).0, 404);
    assert_eq!(call(&gateway, "schedule_recurring", "agent-rec", "rec-3", daily).0, 200, "room again");
}

#[test]
fn schedule_recurring_refuses_bad_params_naming_the_field() {
    let gateway = Gateway::start(&[]);
    for (params, reason, detail) in [
        (json!({"payload": {}}), "missing_required_fields", "params.schedule is required"),
        (json!({"schedule": "0 9 * * *"}), "missing_required_fields", "params.payload is required"),
        (json!({"schedule": 5, "payload": {}}), "invalid_field", "params.schedule: must be a non-empty string"),
        (json!({"schedule": "61 * * * *", "payload": {}}), "invalid_field", "params.schedule: minute (field 1)"),
        (
            json!({"schedule": "0 9 * * *", "timezone": "Mars/Olympus_Mons", "payload": {}}),
            "invalid_field",
            "params.timezone: unknown time zone `Mars/Olympus_Mons`",
        ),
        (json!({"schedule": "0 9 * * *", "timezone": 1, "payload": {}}), "invalid_field", "params.timezone: must be"),
        (json!({"schedule": "0 9 * * *", "payload": {}, "agent_id": "x"}), "invalid_field", "params: unknown field"),
    ] {
        let (status, body) = call(&gateway, "schedule_recurring", "agent-bad", "call-1", params.clone());
        assert_eq!((status, body["reason"].as_str()), (422, Some(reason)), "{params}: {body}");
        assert!(body["detail"].as_str().unwrap().starts_with(detail), "{params}: {body}");
    }
    assert_eq!(pending_jobs(&gateway), 0);
}
