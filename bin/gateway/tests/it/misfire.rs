//! Misfire policies and `max_lateness_ms` across a crash (issue 19 item 4, DESIGN §17), on SQLite and on PostgreSQL:
//! jobs every second and two reminders come due while the gateway is killed with SIGKILL; the restarted gateway
//! settles what they missed as each one's policy says, and `GET /gateway/cron/jobs/{id}/runs` shows it. The binary
//! has no fake clock, so the downtime is real: a few seconds, against schedules every second.

use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support::{Gateway, TOKEN, eventually};

/// How long the gateway stays down: several instants of a job every second.
const DOWNTIME: Duration = Duration::from_secs(4);

struct Jobs {
    fire_once: i64,
    skip: i64,
    fire_all: i64,
    /// Reminders due while the gateway is down: one that may be 60 s late (delivered), one that may be 300 ms late.
    patient: i64,
    impatient: i64,
}

fn create(gateway: &Gateway, policy: &str) -> i64 {
    let (status, job) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "agent-misfire", "schedule": "* * * * * *", "misfire_policy": policy}),
    );
    assert_eq!((status, &job["misfire_policy"]), (201, &json!(policy)), "{job}");
    job["id"].as_i64().unwrap()
}

/// A reminder through the agent's tool, due in `delay_ms`, not delivered later than `max_lateness_ms`.
fn remind(gateway: &Gateway, call: &str, delay_ms: u64, max_lateness_ms: u64) -> i64 {
    let call = json!({
        "agent_id": "agent-misfire",
        "tool_call_id": call,
        "params": {"delay_ms": delay_ms, "payload": {"call": call}, "max_lateness_ms": max_lateness_ms},
    });
    let (status, body) = gateway.post_json("/gateway/tools/schedule_reminder", &call);
    assert_eq!(status, 200, "{body}");
    let job_id = body["result"]["job_id"].as_i64().unwrap();
    let (_, job) = gateway.operator_get(&format!("/gateway/cron/jobs/{job_id}"));
    assert_eq!(job["max_lateness_ms"], max_lateness_ms, "{job}");
    job_id
}

/// Job `id`'s runs, oldest first.
fn runs(gateway: &Gateway, id: i64) -> Vec<Run> {
    let (status, body) = gateway.operator_get(&format!("/gateway/cron/jobs/{id}/runs?limit=500"));
    assert_eq!(status, 200, "{body}");
    let mut runs: Vec<Run> = body["runs"].as_array().unwrap().iter().map(Run::of).collect();
    runs.reverse();
    runs
}

#[derive(Debug)]
struct Run {
    scheduled_for: OffsetDateTime,
    lateness_ms: u64,
    outcome: String,
}

impl Run {
    fn of(value: &Value) -> Self {
        Self {
            scheduled_for: OffsetDateTime::parse(value["scheduled_for"].as_str().unwrap(), &Rfc3339).unwrap(),
            lateness_ms: value["lateness_ms"].as_u64().unwrap(),
            outcome: value["outcome"].as_str().unwrap().to_owned(),
        }
    }
}

/// The gaps (in seconds, above one) between consecutive runs of a job every second.
fn gaps(runs: &[Run]) -> Vec<i64> {
    runs.windows(2)
        .map(|pair| (pair[1].scheduled_for - pair[0].scheduled_for).whole_seconds())
        .filter(|gap| *gap > 1)
        .collect()
}

/// The `/metrics` text.
fn scrape(gateway: &Gateway) -> String {
    let mut response =
        ureq::get(gateway.url("/metrics")).header("authorization", format!("Bearer {TOKEN}")).call().unwrap();
    response.body_mut().read_to_string().unwrap()
}

/// Starts the jobs and reminders on `gateway`, waits until every job fired once, and kills it.
fn prepare_and_kill(gateway: &mut Gateway) -> Jobs {
    let jobs = Jobs {
        fire_once: create(gateway, "fire_once"),
        skip: create(gateway, "skip"),
        fire_all: create(gateway, "fire_all"),
        patient: remind(gateway, "patient", 1_500, 60_000),
        impatient: remind(gateway, "impatient", 1_500, 300),
    };
    eventually("each job to fire once", || {
        [jobs.fire_once, jobs.skip, jobs.fire_all].iter().all(|id| !runs(gateway, *id).is_empty())
    });
    gateway.kill();
    jobs
}

/// What the restarted `gateway` must have done about the downtime.
fn check_after_restart(gateway: &Gateway, jobs: &Jobs) {
    eventually("both reminders to be settled", || {
        !runs(gateway, jobs.patient).is_empty() && !runs(gateway, jobs.impatient).is_empty()
    });
    // A couple of instants after the restart, so that each job has fired on its schedule again.
    thread::sleep(Duration::from_millis(2_500));

    let patient = runs(gateway, jobs.patient);
    assert_eq!((patient.len(), patient[0].outcome.as_str()), (1, "fired"), "{patient:?}");
    assert!(patient[0].lateness_ms > 1_000, "it was due while the gateway was down: {patient:?}");
    let impatient = runs(gateway, jobs.impatient);
    assert_eq!((impatient.len(), impatient[0].outcome.as_str()), (1, "skipped_late"), "{impatient:?}");
    assert!(impatient[0].lateness_ms > 300, "{impatient:?}");
    let (status, _) = gateway.operator_get(&format!("/gateway/cron/jobs/{}", jobs.impatient));
    assert_eq!(status, 404, "a skipped reminder's row is gone as a fired one's is");
    let (_, mailbox) = gateway.operator_get("/gateway/agents/agent-misfire/reminders?limit=1000");
    let reminders = mailbox.to_string();
    assert!(reminders.contains("patient") && !reminders.contains("impatient"), "not delivered: {mailbox}");

    // fire_once: one catch-up for the downtime, naming the newest missed instant (less than a second late, where
    // the oldest would be seconds late), then the schedule; nothing skipped.
    let fire_once = runs(gateway, jobs.fire_once);
    assert!(fire_once.iter().all(|run| run.outcome == "fired"), "{fire_once:?}");
    let gap = gaps(&fire_once);
    assert_eq!(gap.len(), 1, "one hole, the instants the catch-up stood for: {fire_once:?}");
    assert!(gap[0] >= 3, "{fire_once:?}");
    // Named after the oldest missed instant, the catch-up would be seconds late (and the hole would follow it).
    assert!(fire_once.iter().all(|run| run.lateness_ms < 1_500), "the catch-up names the newest: {fire_once:?}");

    // skip: every instant of the downtime is a run, the missed ones skipped, none of them fired late.
    let skip = runs(gateway, jobs.skip);
    assert_eq!(gaps(&skip), Vec::<i64>::new(), "each instant is a run: {skip:?}");
    let skipped: Vec<&Run> = skip.iter().filter(|run| run.outcome == "skipped_misfire").collect();
    assert!(skipped.len() >= 3, "{skip:?}");
    assert!(skip.iter().filter(|run| run.outcome == "fired").all(|run| run.lateness_ms < 1_500), "{skip:?}");

    // fire_all: every instant of the downtime fired, each under its own instant.
    let fire_all = runs(gateway, jobs.fire_all);
    assert!(fire_all.iter().all(|run| run.outcome == "fired"), "{fire_all:?}");
    assert_eq!(gaps(&fire_all), Vec::<i64>::new(), "no instant left out: {fire_all:?}");
    assert!(fire_all.iter().filter(|run| run.lateness_ms > 1_000).count() >= 2, "the catch-ups: {fire_all:?}");

    // Counted by outcome.
    let metrics = scrape(gateway);
    let count = |outcome: &str| {
        let line = format!("gateway_cron_runs_total{{outcome=\"{outcome}\"}} ");
        metrics.lines().find_map(|text| text.strip_prefix(&line)).and_then(|n| n.parse::<u64>().ok())
    };
    assert!(count("skipped_misfire").is_some_and(|n| n >= skipped.len() as u64), "{metrics}");
    assert_eq!(count("skipped_late"), Some(1), "{metrics}");
    assert!(count("fired").is_some_and(|n| n >= 3), "{metrics}");

    // A deleted job's runs stay; a job that never was is unknown.
    let (status, _) = gateway.operator_delete(&format!("/gateway/cron/jobs/{}", jobs.skip));
    assert_eq!(status, 200);
    assert!(runs(gateway, jobs.skip).len() >= skip.len(), "the runs outlive the job");
    let (status, body) = gateway.operator_get("/gateway/cron/jobs/987654/runs");
    assert_eq!((status, &body["reason"]), (404, &json!("unknown_cron_job")), "{body}");
}

#[test]
fn misfire_policies_and_max_lateness_across_a_kill_on_sqlite() {
    let mut gateway = Gateway::start(&[]);
    let jobs = prepare_and_kill(&mut gateway);
    let dir = gateway.dir.clone();
    drop(gateway);
    thread::sleep(DOWNTIME);
    let gateway = Gateway::start_in(dir, &[]);
    check_after_restart(&gateway, &jobs);
}

#[test]
fn misfire_policies_and_max_lateness_across_a_kill_on_postgres() {
    let Some(server) = gateway_testkit::postgres::server("it::misfire") else { return };
    let database = server.create_database("it_misfire");
    let mut gateway = Gateway::start_on(database.url(), &[]);
    let jobs = prepare_and_kill(&mut gateway);
    drop(gateway);
    thread::sleep(DOWNTIME);
    let gateway = Gateway::start_on(database.url(), &[]);
    check_after_restart(&gateway, &jobs);
}
