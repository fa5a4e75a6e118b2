//! Reminders and cron jobs through the real binary (FR-10.5–10.7 in docs/requirements.md) and the operator endpoints.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support::{Gateway, SseEvent, count_rows, eventually};

fn reminder_log(agent: Option<&str>, tool_input: Value) -> Value {
    let mut log = json!({
        "meta": {"trace_id": "trace-r", "timestamp": "2026-02-22T12:00:00Z"},
        "action": {"status": "pending", "tool_call": "schedule_reminder", "tool_input": tool_input}
    });
    if let Some(agent) = agent {
        log["identity"] = json!({"agent_id": agent, "agent_type": "researcher", "capability_version": "1.0"});
    }
    log
}

fn instant(value: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(value.as_str().unwrap(), &Rfc3339).unwrap()
}

/// Checks the contract fields of a `reminder` event and returns `(job_id, scheduled_for)`.
fn check_reminder(event: &SseEvent, agent: &str) -> (i64, OffsetDateTime) {
    assert_eq!(event.event, "reminder");
    let data = &event.data;
    assert_eq!(data["event_type"], "reminder");
    assert_eq!(data["agent_id"], agent);
    let job_id = data["job_id"].as_i64().unwrap();
    let scheduled_for = data["scheduled_for"].as_str().unwrap();
    let fire_id = format!("{job_id}:{scheduled_for}");
    assert_eq!(data["fire_id"], fire_id.as_str());
    assert_eq!(data["id"], fire_id.as_str(), "the event id is the fire_id");
    assert_eq!(event.id.as_deref(), Some(fire_id.as_str()));
    (job_id, instant(&data["scheduled_for"]))
}

#[test]
fn a_reminder_requested_in_a_decision_log_arrives_over_sse_and_its_row_is_gone() {
    let gateway = Gateway::start(&[]);
    let reminders = gateway.subscribe("agent:agent-7:scheduled");
    let messages = gateway.subscribe("gateway:messages");
    let log = reminder_log(Some("agent-7"), json!({"delay_ms": 300, "payload": {"task": "check_quota"}}));
    let (status, body) = gateway.post_json("/gateway/messages", &log);
    assert_eq!((status, body), (202, json!({"status": "accepted", "trace_id": "trace-r"})));
    messages.expect("decision_log");

    let event = reminders.expect("reminder");
    check_reminder(&event, "agent-7");
    assert_eq!(event.data["payload"], json!({"task": "check_quota"}));
    eventually("the fired one-time row is deleted", || count_rows(&gateway.database_path(), "cron_jobs") == 0);
    gateway.wait_for_log("reminder scheduled");
}

/// The `idempotency_key` column of every `cron_jobs` row, by ascending id.
fn stored_keys(gateway: &Gateway) -> Vec<Option<String>> {
    use diesel::{Connection, QueryableByName, RunQueryDsl, sql_types::Nullable, sql_types::Text};
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Nullable<Text>)]
        idempotency_key: Option<String>,
    }
    let path = gateway.database_path();
    let mut connection = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    let rows: Vec<Row> =
        diesel::sql_query("SELECT idempotency_key FROM cron_jobs ORDER BY id").load(&mut connection).unwrap();
    rows.into_iter().map(|row| row.idempotency_key).collect()
}

#[test]
fn a_retried_reminder_log_schedules_one_reminder_and_another_trace_id_a_second() {
    let gateway = Gateway::start(&[]);
    let reminders = gateway.subscribe("agent:agent-d:scheduled");
    // Due long after the few requests below are answered, so the retry certainly finds the first row pending.
    let log = reminder_log(Some("agent-d"), json!({"delay_ms": 2_000, "payload": {"task": "dedup-private"}}));
    for _ in 0..2 {
        let (status, body) = gateway.post_json("/gateway/messages", &log);
        assert_eq!((status, body), (202, json!({"status": "accepted", "trace_id": "trace-r"})));
    }
    gateway.wait_for_log("reminder already scheduled");
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 1, "the retry wrote nothing");
    let keys = stored_keys(&gateway);
    let key = keys[0].as_deref().unwrap();
    assert!(key.starts_with("reminder:sha256:") && key.len() == "reminder:sha256:".len() + 64, "{key}");
    assert!(!key.contains("trace-r"), "the trace id itself is not stored");

    let mut other = log.clone();
    other["meta"]["trace_id"] = json!("trace-s");
    assert_eq!(gateway.post_json("/gateway/messages", &other).0, 202);
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 2, "another trace id is another reminder");
    // Posted last with the same delay, so due last: reminders go out in the order they are due, so it comes
    // third only if the retry scheduled nothing (its reminder would have been due with the first one).
    let mut last = reminder_log(Some("agent-d"), json!({"delay_ms": 2_000, "payload": {"task": "last"}}));
    last["meta"]["trace_id"] = json!("trace-t");
    assert_eq!(gateway.post_json("/gateway/messages", &last).0, 202);

    let first = check_reminder(&reminders.expect("reminder"), "agent-d");
    let second = check_reminder(&reminders.expect("reminder"), "agent-d");
    assert_ne!(first.0, second.0);
    let third = reminders.expect("reminder");
    check_reminder(&third, "agent-d");
    assert_eq!(third.data["payload"], json!({"task": "last"}), "a reminder came before the last one: {third:?}");
    eventually("every fired row is deleted", || count_rows(&gateway.database_path(), "cron_jobs") == 0);
    assert_eq!(gateway.logs().matches("reminder scheduled").count(), 3);
    assert_eq!(gateway.logs().matches("reminder already scheduled").count(), 1);
    assert!(!gateway.logs().contains("dedup-private"), "the payload is never logged");
}

#[test]
fn invalid_reminder_requests_are_warned_about_and_the_log_is_still_accepted() {
    let gateway = Gateway::start(&[]);
    let messages = gateway.subscribe("gateway:messages");
    let cases = [
        (
            reminder_log(Some("agent-7"), json!({"delay_ms": -500, "payload": {}})),
            "invalid delay_ms for schedule_reminder: -500",
        ),
        (
            reminder_log(Some("agent-7"), json!({"delay_ms": 0, "payload": {}})),
            "invalid delay_ms for schedule_reminder: 0",
        ),
        // More than ten years: refused by the scheduler itself, with the same warning.
        (
            reminder_log(Some("agent-7"), json!({"delay_ms": 400_000_000_000_u64, "payload": {}})),
            "invalid delay_ms for schedule_reminder: 400000000000",
        ),
        // No identity: fail closed, never a guessed agent.
        (reminder_log(None, json!({"delay_ms": 1000, "payload": {}})), "schedule_reminder without identity.agent_id"),
    ];
    for (log, warning) in cases {
        let (status, _) = gateway.post_json("/gateway/messages", &log);
        assert_eq!(status, 202, "{warning}");
        messages.expect("decision_log");
        gateway.wait_for_log(warning);
    }
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 0, "no job for any of them");
}

#[test]
fn a_pending_reminder_survives_sigkill_and_fires_after_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut gateway = Gateway::start_in(Arc::clone(&dir), &[]);
    // Long enough for the kill and the restart to happen before it is due.
    let log = reminder_log(Some("agent-k"), json!({"delay_ms": 6_000, "payload": {"after": "crash"}}));
    assert_eq!(gateway.post_json("/gateway/messages", &log).0, 202);
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 1, "the row is written before 202");
    gateway.kill();

    let restarted = Gateway::start_in(dir, &[]);
    let reminders = restarted.subscribe("agent:agent-k:scheduled");
    let event = reminders.expect("reminder");
    check_reminder(&event, "agent-k");
    assert_eq!(event.data["payload"], json!({"after": "crash"}));
    eventually("the fired row is deleted", || count_rows(&restarted.database_path(), "cron_jobs") == 0);
}

#[test]
fn a_recurring_job_fires_repeatedly_with_distinct_fire_ids_and_stops_when_deleted() {
    let gateway = Gateway::start(&[]);
    let reminders = gateway.subscribe("agent:agent-r:scheduled");
    let (status, job) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "agent-r", "schedule": "* * * * * *", "payload": {"kind": "tick"}}),
    );
    assert_eq!(status, 201, "{job}");
    let job_id = job["id"].as_i64().unwrap();
    assert_eq!(job["schedule"], "* * * * * *");
    assert_eq!(job["is_one_time"], false);
    let preview: Vec<OffsetDateTime> = job["preview"].as_array().unwrap().iter().map(instant).collect();
    assert_eq!(preview.len(), 5);
    assert_eq!(preview[0], instant(&job["next_fire_at"]));
    assert!(preview.windows(2).all(|pair| pair[1] - pair[0] == time::Duration::SECOND));

    let mut fire_ids = BTreeSet::new();
    let mut instants = Vec::new();
    for _ in 0..3 {
        let event = reminders.expect("reminder");
        let (fired_job, scheduled_for) = check_reminder(&event, "agent-r");
        assert_eq!(fired_job, job_id);
        assert_eq!(event.data["payload"], json!({"kind": "tick"}));
        fire_ids.insert(event.data["fire_id"].as_str().unwrap().to_owned());
        instants.push(scheduled_for);
    }
    assert_eq!(fire_ids.len(), 3, "every instant has its own fire_id");
    assert!(instants.windows(2).all(|pair| pair[0] < pair[1]));

    let (status, listed) = gateway.operator_get("/gateway/cron/jobs");
    assert_eq!(status, 200);
    assert_eq!(listed["jobs"][0]["id"], job_id);
    assert!(instant(&listed["jobs"][0]["next_fire_at"]) > instants[2] - time::Duration::SECOND);

    assert_eq!(
        gateway.operator_delete(&format!("/gateway/cron/jobs/{job_id}")),
        (200, json!({"status": "deleted", "id": job_id}))
    );
    let deleted_at = OffsetDateTime::now_utc();
    assert_eq!(gateway.operator_get("/gateway/cron/jobs").1["jobs"], json!([]));
    assert_eq!(gateway.operator_delete(&format!("/gateway/cron/jobs/{job_id}")).0, 404);
    // A fire claimed before the delete landed may still arrive: claims are taken at most DEFAULT_CLAIM_AHEAD
    // before their instant, so its instant is no later than that past the delete. Nothing later may come. A
    // probe job on the same topic, created after the delete, shows how far the scheduler has got: fires go out in
    // the order of their instants, so by the probe's third fire (two seconds on) a later fire of the deleted job
    // would have arrived.
    let latest_in_flight = deleted_at + gateway_cron::DEFAULT_CLAIM_AHEAD;
    let (status, probe) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "agent-r", "schedule": "* * * * * *", "payload": {"kind": "probe"}}),
    );
    assert_eq!(status, 201, "{probe}");
    let probe_id = probe["id"].as_i64().unwrap();
    let mut probe_fires = 0;
    while probe_fires < 3 {
        let (fired_job, scheduled_for) = check_reminder(&reminders.expect("reminder"), "agent-r");
        if fired_job == probe_id {
            probe_fires += 1;
        } else {
            assert_eq!(fired_job, job_id);
            assert!(
                scheduled_for <= latest_in_flight,
                "the deleted job fired for {scheduled_for}, after its delete at {deleted_at}"
            );
        }
    }
}

fn create(gateway: &Gateway, schedule: &str) -> (u16, Value) {
    gateway.operator_post("/gateway/cron/jobs", &json!({"agent_id": "agent-c", "schedule": schedule, "payload": {}}))
}

fn preview_of(gateway: &Gateway, schedule: &str) -> Vec<OffsetDateTime> {
    let (status, job) = create(gateway, schedule);
    assert_eq!(status, 201, "{schedule}: {job}");
    job["preview"].as_array().unwrap().iter().map(instant).collect()
}

#[test]
fn crontab_expressions_keep_their_crontab_meaning() {
    use time::Weekday::{Friday, Monday, Saturday, Sunday, Wednesday};
    let gateway = Gateway::start(&[]);

    // Day-of-week numbers are crontab's: 1 is Monday, 0 and 7 are Sunday.
    for instant in preview_of(&gateway, "30 9 * * 1") {
        assert_eq!((instant.weekday(), instant.hour(), instant.minute(), instant.second()), (Monday, 9, 30, 0));
    }
    for schedule in ["0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "@weekly"] {
        assert!(preview_of(&gateway, schedule).iter().all(|instant| instant.weekday() == Sunday), "{schedule}");
    }
    let weekend = preview_of(&gateway, "0 12 * * 6-7");
    assert!(weekend.iter().all(|instant| matches!(instant.weekday(), Saturday | Sunday)));
    let odd_days = preview_of(&gateway, "0 8 * * mon,wed,FRI");
    assert!(odd_days.iter().all(|instant| matches!(instant.weekday(), Monday | Wednesday | Friday)));
    // Both day fields restricted: the 13th of any month OR any Friday, as crontab does.
    let either = preview_of(&gateway, "0 0 13 * 5");
    assert!(either.iter().all(|instant| instant.day() == 13 || instant.weekday() == Friday));
    assert!(either.iter().any(|instant| instant.day() != 13), "{either:?}");
    // Steps, ranges and the shorthands.
    assert!(preview_of(&gateway, "*/15 * * * *").iter().all(|instant| instant.minute() % 15 == 0));
    assert!(preview_of(&gateway, "@hourly").iter().all(|instant| instant.minute() == 0 && instant.second() == 0));
    assert!(preview_of(&gateway, "@monthly").iter().all(|instant| instant.day() == 1 && instant.hour() == 0));
    // Six fields: seconds first.
    let every_ten_seconds = preview_of(&gateway, "*/10 * * * * *");
    assert!(every_ten_seconds.windows(2).all(|pair| pair[1] - pair[0] == time::Duration::seconds(10)));

    // Refusals name the field by name and position, in the gateway's words (docs/scheduler.md lists them).
    for (bad, detail) in [
        ("61 * * * *", "minute (field 1): 61 is out of range 0-59"),
        ("0 24 * * *", "hour (field 2): 24 is out of range 0-23"),
        ("0 0 32 * *", "day-of-month (field 3): 32 is out of range 1-31"),
        ("0 0 1 13 *", "month (field 4): 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week (field 5): 8 is out of range 0-7"),
        ("*/0 * * * *", "minute (field 1): step 0 is out of range 1-59"),
        ("0 0 1 jun-foo *", "month (field 4): \"foo\" is not a number or a name (1-12 or jan-dec)"),
        ("0 60 * * * *", "minute (field 2): 60 is out of range 0-59"),
        ("0 0 0 1 1 * 1969", "year (field 7): 1969 is out of range 1970-2100"),
        (
            "* * *",
            "expected 5 fields (minute hour day-of-month month day-of-week) or 6/7 with seconds first and an \
             optional year last, got 3",
        ),
        ("@reboot", "@reboot is not supported: the gateway has no reboot to attach it to"),
        ("0 0 30 2 *", "the schedule has no upcoming instant"),
    ] {
        let (status, body) = create(&gateway, bad);
        assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_schedule")), "{bad}: {body}");
        assert_eq!(body["detail"].as_str(), Some(detail), "{bad}: {body}");
    }
}

#[test]
fn the_cron_api_validates_input_and_requires_the_operator_token() {
    let gateway = Gateway::start(&[]);
    let unauthorized = gateway.post_json("/gateway/cron/jobs", &json!({"agent_id": "a", "schedule": "* * * * *"}));
    assert_eq!(unauthorized.0, 401);
    assert_eq!(gateway.get("/gateway/cron/jobs").0, 401);
    for (body, reason) in [
        (json!({"schedule": "* * * * *"}), "missing_required_fields"),
        (json!({"agent_id": "a"}), "missing_required_fields"),
        (json!({"agent_id": "", "schedule": "* * * * *"}), "missing_required_fields"),
        (json!({"agent_id": "a", "schedule": "* * * * *", "payload": [1]}), "invalid_field"),
        (json!({"agent_id": "bad\nid", "schedule": "* * * * *"}), "invalid_field"),
        (json!([1, 2]), "invalid_field"),
    ] {
        let (status, response) = gateway.operator_post("/gateway/cron/jobs", &body);
        assert_eq!((status, response["reason"].as_str()), (422, Some(reason)), "{body}");
    }
    assert_eq!(gateway.operator_get("/gateway/cron/jobs?limit=0").0, 400);
    assert_eq!(gateway.operator_get("/gateway/cron/jobs?after_id=x").0, 400);
    assert_eq!(gateway.operator_get("/gateway/cron/jobs/999").1["reason"], "unknown_cron_job");
    assert_eq!(gateway.operator_get("/gateway/cron/jobs/not-a-number").0, 404);
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 0);

    let ids: Vec<i64> = (0..3).map(|_| create(&gateway, "@daily").1["id"].as_i64().unwrap()).collect();
    let (status, page) = gateway.operator_get("/gateway/cron/jobs?limit=2");
    assert_eq!(status, 200);
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_after_id"], ids[1]);
    let (_, rest) = gateway.operator_get(&format!("/gateway/cron/jobs?limit=2&after_id={}", ids[1]));
    assert_eq!(rest["jobs"][0]["id"], ids[2]);
    assert_eq!(rest["next_after_id"], Value::Null);
    assert_eq!(gateway.operator_get(&format!("/gateway/cron/jobs/{}", ids[0])).1["id"], ids[0]);

    let (status, ready) = gateway.operator_get("/readyz");
    assert_eq!(status, 200, "{ready}");
    let components = ready["checks"]["components"].as_array().unwrap();
    assert!(
        components.iter().any(|component| component["component"] == "cron_scheduler" && component["healthy"] == true)
    );
}

/// A recurring job of one `reminder` event a second, paused and resumed through the operator API while a second
/// job of the same agent keeps firing: the stream's order (one loop publishes both jobs' fires, instant by
/// instant) shows that the paused job missed its instants, without waiting a fixed time for nothing to happen.
#[test]
fn a_paused_job_does_not_fire_and_resumed_fires_once_for_what_it_missed() {
    let gateway = Gateway::start(&[]);
    let reminders = gateway.subscribe("agent:agent-pause:scheduled");
    let job = json!({"agent_id": "agent-pause", "schedule": "* * * * * *", "payload": {"job": "paused"}});
    let (status, paused_job) = gateway.operator_post("/gateway/cron/jobs", &job);
    assert_eq!(status, 201, "{paused_job}");
    assert_eq!(paused_job["paused"], false);
    let id = paused_job["id"].as_i64().unwrap();
    let (status, witness) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "agent-pause", "schedule": "* * * * * *", "payload": {"job": "witness"}}),
    );
    assert_eq!(status, 201, "{witness}");
    let witness_id = witness["id"].as_i64().unwrap();
    // Both fire: the job runs before it is paused.
    let mut seen = BTreeSet::new();
    while seen.len() < 2 {
        seen.insert(check_reminder(&reminders.expect("reminder"), "agent-pause").0);
    }

    let path = format!("/gateway/cron/jobs/{id}/pause");
    let (status, paused) = gateway.operator_post(&path, &json!({"ignored": true}));
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true);
    assert_eq!((paused["id"].as_i64(), &paused["schedule"]), (Some(id), &json!("* * * * * *")));
    let (status, again) = gateway.operator_post(&path, &json!({}));
    assert_eq!((status, &again["paused"]), (200, &json!(true)), "pausing a paused job is fine: {again}");
    let paused_at = instant(&paused["next_fire_at"]);

    // Until the witness has fired for three instants after the paused job's next one, the paused job fires for
    // nothing after that instant. A fire for it may still go out, claimed (up to 50 ms ahead) before the pause
    // landed: it moves the row on to its next instant, which then waits.
    loop {
        let (job_id, scheduled_for) = check_reminder(&reminders.expect("reminder"), "agent-pause");
        if job_id == id {
            assert!(scheduled_for <= paused_at, "a paused job fired for {scheduled_for}");
        } else if scheduled_for >= paused_at + time::Duration::seconds(3) {
            break;
        }
    }
    let (status, still) = gateway.operator_get(&format!("/gateway/cron/jobs/{id}"));
    assert_eq!((status, &still["paused"]), (200, &json!(true)), "{still}");
    let frozen = instant(&still["next_fire_at"]);
    assert!(frozen >= paused_at, "{still}");

    let (status, resumed) = gateway.operator_post(&format!("/gateway/cron/jobs/{id}/resume"), &json!(null));
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_eq!(instant(&resumed["next_fire_at"]), frozen, "resumed at the first instant it missed");
    // One fire for the missed instants (named after the newest: DESIGN §17, `fire_once`), then the schedule again
    // from now: the instants missed are not each fired.
    let mut fires = Vec::new();
    while fires.len() < 2 {
        let (job_id, scheduled_for) = check_reminder(&reminders.expect("reminder"), "agent-pause");
        if job_id == id {
            fires.push(scheduled_for);
        }
    }
    let resumed_after = paused_at + time::Duration::seconds(3);
    // The witness fired for `resumed_after` before the resume: the newest missed instant is that one or later.
    assert!(fires[0] > frozen && fires[0] >= resumed_after, "the catch-up names the newest missed instant: {fires:?}");
    assert!(fires[1] > fires[0], "then the schedule, not each missed instant: {fires:?}");
    let (status, _) = gateway.operator_post(&format!("/gateway/cron/jobs/{id}/resume"), &json!({}));
    assert_eq!(status, 200, "resuming a running job is fine too");

    for action in ["pause", "resume"] {
        let (status, body) = gateway.operator_post(&format!("/gateway/cron/jobs/999999/{action}"), &json!({}));
        assert_eq!((status, &body["reason"]), (404, &json!("unknown_cron_job")), "{action}: {body}");
        let (status, _) = gateway.operator_post(&format!("/gateway/cron/jobs/x/{action}"), &json!({}));
        assert_eq!(status, 404, "{action}");
        let (status, _) = gateway.post(&format!("/gateway/cron/jobs/{id}/{action}"), "{}");
        assert_eq!(status, 401, "{action} needs the operator token");
        let (status, _) = gateway.operator_get(&format!("/gateway/cron/jobs/{id}/{action}"));
        assert_eq!(status, 405, "{action} is a POST");
    }
    let (status, _) = gateway.operator_delete(&format!("/gateway/cron/jobs/{witness_id}"));
    assert_eq!(status, 200);
}

/// Jobs in two zones across real transitions, created, then the gateway stopped and started again on the same
/// SQLite file: the zone, `next_fire_at`, `preview` and `preview_local` read back the same, and follow DESIGN 17's
/// rule. New York springs forward on 2027-03-14 (02:00 EST → 03:00 EDT): `*/30` from 01:00 to 03:59 fires at 01:00,
/// 01:30, then 03:00 once for the 02:00, 02:30 and 03:00 that all land there, then 03:30. Sydney falls back on
/// 2027-04-04 (03:00 AEDT → 02:00 AEST): 02:00 and 02:30 fire at their first occurrence only. 2032 repeats both
/// transitions on the same dates, so the test keeps its meaning once 2027's have passed.
#[test]
fn zoned_jobs_keep_their_zone_and_dst_preview_across_a_restart() {
    // The year of each job's next transition: 2027's until its first instant has passed.
    let year_of = |first: OffsetDateTime| if OffsetDateTime::now_utc() < first { 2027 } else { 2032 };
    let dated = |year: i32, times: &[&str]| -> Vec<Value> {
        times.iter().map(|time| json!(format!("{year}-{time}"))).collect()
    };
    let year = year_of(time::macros::datetime!(2027-03-14 06:00 UTC));
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut gateway = Gateway::start_in(Arc::clone(&dir), &[]);
    let spring = json!({
        "agent_id": "agent-tz",
        "schedule": "0 */30 1-3 14 3 * 2027,2032",
        "timezone": "America/New_York",
        "payload": {"zone": "new-york"},
    });
    let (status, new_york) = gateway.operator_post("/gateway/cron/jobs", &spring);
    assert_eq!(status, 201, "{new_york}");
    assert_eq!(new_york["timezone"], "America/New_York");
    let expected_new_york =
        dated(year, &["03-14T01:00:00-05:00", "03-14T01:30:00-05:00", "03-14T03:00:00-04:00", "03-14T03:30:00-04:00"]);
    assert_eq!(new_york["preview_local"].as_array().unwrap()[..4], expected_new_york[..]);
    let utc = dated(year, &["03-14T06:00:00Z", "03-14T06:30:00Z", "03-14T07:00:00Z", "03-14T07:30:00Z"]);
    assert_eq!(new_york["preview"].as_array().unwrap()[..4], utc[..]);
    assert_eq!(new_york["next_fire_at"], utc[0]);

    let fall = json!({
        "agent_id": "agent-tz",
        "schedule": "0 */30 2-3 4 4 * 2027,2032",
        "timezone": "Australia/Sydney",
    });
    let (status, sydney) = gateway.operator_post("/gateway/cron/jobs", &fall);
    assert_eq!(status, 201, "{sydney}");
    let year = year_of(time::macros::datetime!(2027-04-03 15:00 UTC));
    let expected_sydney =
        dated(year, &["04-04T02:00:00+11:00", "04-04T02:30:00+11:00", "04-04T03:00:00+10:00", "04-04T03:30:00+10:00"]);
    assert_eq!(sydney["preview_local"].as_array().unwrap()[..4], expected_sydney[..]);
    let sydney_utc = dated(year, &["04-03T15:00:00Z", "04-03T15:30:00Z", "04-03T17:00:00Z", "04-03T17:30:00Z"]);
    assert_eq!(sydney["preview"].as_array().unwrap()[..4], sydney_utc[..]);

    let (status, utc_job) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "agent-tz", "schedule": "0 9 * * *", "timezone": null}),
    );
    assert_eq!(status, 201, "{utc_job}");
    assert_eq!(utc_job["timezone"], "UTC", "absent or null: UTC");
    let offsets_of_utc = utc_job["preview_local"].as_array().unwrap();
    assert!(offsets_of_utc.iter().all(|local| local.as_str().unwrap().ends_with("T09:00:00+00:00")), "{utc_job}");

    gateway.terminate();
    let restarted = Gateway::start_in(dir, &[]);
    for created in [&new_york, &sydney, &utc_job] {
        let (status, read) = restarted.operator_get(&format!("/gateway/cron/jobs/{}", created["id"]));
        assert_eq!(status, 200, "{read}");
        for field in ["timezone", "next_fire_at", "preview", "preview_local", "schedule", "payload"] {
            assert_eq!(read[field], created[field], "{field} after the restart: {read}");
        }
    }
}

#[test]
fn an_unknown_time_zone_is_422_naming_it_and_nothing_is_stored() {
    let gateway = Gateway::start(&[]);
    for (timezone, reason, detail) in [
        (json!("Mars/Olympus_Mons"), "invalid_schedule", "timezone: unknown time zone `Mars/Olympus_Mons`"),
        (json!("america/new_york"), "invalid_schedule", "timezone: unknown time zone `america/new_york`"),
        (json!(""), "invalid_schedule", "timezone: unknown time zone (unprintable)"),
        (json!(5), "invalid_field", "timezone"),
    ] {
        let body = json!({"agent_id": "agent-tz", "schedule": "0 9 * * *", "timezone": timezone});
        let (status, refused) = gateway.operator_post("/gateway/cron/jobs", &body);
        assert_eq!((status, refused["reason"].as_str()), (422, Some(reason)), "{timezone}: {refused}");
        let said = refused["detail"].as_str().unwrap_or_default();
        assert!(said.starts_with(detail), "{timezone}: {refused}");
    }
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 0);
}
