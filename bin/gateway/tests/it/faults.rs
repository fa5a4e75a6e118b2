//! Faults that must not lose data (DESIGN.md §14), each on real processes: a full disk under SQLite, PostgreSQL
//! stopped under a running cluster, SIGTERM of the leader, and a deposed leader that wakes up and tries to write.
//! Each test takes the heavy tests' turn (`gateway_testkit::heavy_test_turn`): they hold servers and real time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::receiver::{Behaviour, Receiver};
use crate::support::cluster::Cluster;
use crate::support::{Gateway, PATIENCE, eventually};

/// A tmpfs of `size` mounted over a directory by the test (root may mount one; CI runs as root), unmounted when
/// dropped. Everything that uses the mount must be gone by then (the gateway is killed first).
struct Tmpfs {
    dir: Arc<tempfile::TempDir>,
}

impl Tmpfs {
    /// Mounts it over a fresh temporary directory; `Err` with the reason when the system refuses.
    fn mount(size: &str) -> Result<Self, String> {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(self.dir.path()).status().is_ok_and(|status| status.success());
        if !unmounted {
            // Something still holds a file open there: detach it now, the kernel frees it when it is let go.
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}

/// Fills the file system holding `dir` with a file of zeros until it refuses (ENOSPC); returns the file.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0_u8; 64 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(28) => break, // ENOSPC
            Err(error) => panic!("filling {}: {error}", path.display()),
        }
    }
    // What a small write may still squeeze in goes too.
    while file.write(&[0_u8; 512]).is_ok_and(|written| written > 0) {}
    path
}

fn create_config(gateway: &Gateway, target_url: &str) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "disk", "event_type": "full", "agent_intent": "fill",
                "target_session": "disk", "target_url": target_url, "secret": "disk-secret"}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

/// `PRAGMA integrity_check` of the SQLite file at `path`, read with Diesel directly.
fn integrity_check(path: &Path) -> String {
    use diesel::{Connection, QueryableByName, RunQueryDsl, sql_types::Text};
    #[derive(QueryableByName)]
    struct Check {
        #[diesel(sql_type = Text)]
        integrity_check: String,
    }
    let mut connection = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    let rows: Vec<Check> = diesel::sql_query("PRAGMA integrity_check").load(&mut connection).unwrap();
    rows.into_iter().map(|row| row.integrity_check).collect::<Vec<_>>().join("; ")
}

/// The SQLite gateway's disk fills up: every write is refused with 507 `insufficient_storage` (never a 500, never a
/// dropped connection), reads are still served, the process and its loops keep running; once space is freed,
/// writes work again without a restart, every delivery acknowledged before, during or after reaches its receiver,
/// and the database passes `PRAGMA integrity_check`. The database, its WAL and its shared memory all live on a
/// small tmpfs the test mounts (a full disk of its own, whatever the machine's).
#[test]
fn a_full_disk_refuses_writes_with_507_serves_reads_and_recovers_when_space_is_freed() {
    let test = "faults::a_full_disk_refuses_writes_with_507_serves_reads_and_recovers_when_space_is_freed";
    let _turn = gateway_testkit::heavy_test_turn();
    let mount = match Tmpfs::mount("16m") {
        Ok(mount) => mount,
        Err(reason) => {
            let line = format!("skipping {test}: cannot mount a tmpfs ({reason}); run as root");
            assert!(!gateway_testkit::running_in_ci(), "{line}; CI is set, so this fails instead");
            eprintln!("{line}");
            return;
        }
    };
    let receiver = Receiver::start(Behaviour::Status(200));
    let mut gateway = Gateway::start_in(Arc::clone(&mount.dir), &["--webhook-allow-private-targets"]);
    let webhook = create_config(&gateway, &receiver.url("/disk"));
    let enqueue = |gateway: &Gateway, n: usize| {
        // A payload of its own size, so that each write needs pages of its own.
        let body =
            json!({"webhook_id": webhook, "session_id": "disk", "payload": {"n": n, "pad": "x".repeat(64 * 1024)}});
        gateway.operator_post("/gateway/deliveries", &body)
    };
    let mut acknowledged = BTreeSet::new();
    for n in 0..5 {
        let (status, body) = enqueue(&gateway, n);
        assert_eq!(status, 201, "{body}");
        acknowledged.insert(body["id"].as_i64().unwrap());
    }
    let first = *acknowledged.first().unwrap();

    let filler = fill(mount.path());
    // Writes go on until the database or its WAL needs space there is not; a write that still finds room (pages a
    // checkpoint freed) is acknowledged like any other. Every answer is 201 or 507, and both kinds of write, a
    // delivery and a cron job, meet a 507.
    let mut cron_jobs = BTreeSet::new();
    let (mut deliveries_refused, mut cron_jobs_refused) = (0, 0);
    for n in 5..400 {
        if deliveries_refused >= 3 && cron_jobs_refused >= 3 {
            break;
        }
        let cron = n % 2 == 1;
        let (status, body) = if cron {
            let job = json!({"agent_id": "agent-disk", "schedule": "0 0 1 1 *", "payload": {"n": n, "pad": "y".repeat(64 * 1024)}});
            gateway.operator_post("/gateway/cron/jobs", &job)
        } else {
            enqueue(&gateway, n)
        };
        match (status, cron) {
            (201, false) => {
                acknowledged.insert(body["id"].as_i64().unwrap());
            }
            (201, true) => {
                cron_jobs.insert(body["id"].as_i64().unwrap());
            }
            (507, _) => {
                assert_eq!(body["reason"], "insufficient_storage", "{body}");
                assert_eq!(body["status"], "error", "{body}");
                if cron {
                    cron_jobs_refused += 1;
                } else {
                    deliveries_refused += 1;
                }
            }
            (other, _) => panic!("a write on a full disk answered {other}: {body}\n{}", gateway.logs()),
        }
    }
    assert!(
        deliveries_refused >= 3 && cron_jobs_refused >= 3,
        "writes on a full disk were not refused: {deliveries_refused} deliveries, {cron_jobs_refused} cron jobs\n{}",
        gateway.logs()
    );

    // Reads are served, and the process (with its loops) is alive.
    let (status, delivery) = gateway.operator_get(&format!("/gateway/deliveries/{first}"));
    assert_eq!(status, 200, "{delivery}");
    assert_eq!(gateway.operator_get("/gateway/webhook-configs").0, 200);
    assert_eq!(gateway.get("/healthz").0, 200);
    thread::sleep(Duration::from_secs(2));
    assert!(gateway.is_running(), "the gateway died on a full disk:\n{}", gateway.logs());
    let logs = gateway.logs();
    assert!(!logs.contains("panicked"), "{logs}");

    // Space comes back: writes work again, no restart.
    std::fs::remove_file(&filler).unwrap();
    let mut written_again = None;
    let deadline = Instant::now() + PATIENCE;
    while written_again.is_none() {
        let (status, body) = enqueue(&gateway, 1_000);
        match status {
            201 => written_again = body["id"].as_i64(),
            507 => assert!(Instant::now() < deadline, "still 507 after the space was freed: {body}"),
            other => panic!("a write after the space was freed answered {other}: {body}"),
        }
        thread::sleep(Duration::from_millis(50));
    }
    acknowledged.extend(written_again);
    for n in 1_001..1_004 {
        let (status, body) = enqueue(&gateway, n);
        assert_eq!(status, 201, "{body}");
        acknowledged.insert(body["id"].as_i64().unwrap());
    }
    eventually("every acknowledged delivery at the receiver", || {
        let received: BTreeSet<i64> = receiver.received().iter().map(|request| request.delivery_id()).collect();
        acknowledged.is_subset(&received)
    });
    eventually("/readyz to be 200 again", || gateway.get("/readyz").0 == 200);
    for job in &cron_jobs {
        let (status, body) = gateway.operator_get(&format!("/gateway/cron/jobs/{job}"));
        assert_eq!(status, 200, "cron job {job} was acknowledged while the disk filled: {body}");
    }

    let database = gateway.database_path();
    assert!(gateway.terminate().success(), "the gateway did not stop cleanly:\n{}", gateway.logs());
    assert_eq!(integrity_check(&database), "ok");
    eprintln!(
        "full disk: {} deliveries and {} cron jobs acknowledged before, during and after, none lost; {} + {} writes \
         refused with 507 while full, reads served",
        acknowledged.len(),
        cron_jobs.len(),
        deliveries_refused,
        cron_jobs_refused
    );
    drop(gateway);
    drop(mount);
}

/// Polls `condition` until it holds; panics naming `what` after `within` (an upper bound on waiting, not a claim).
fn wait_until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A request that is still being sent to `gateway`: its head and the first byte of a body it never finishes. The
/// gateway's graceful shutdown waits for it (up to its 30 s body deadline) before the loops stop.
fn request_in_flight(gateway: &Gateway) -> std::net::TcpStream {
    use std::io::Write;
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut connection = std::net::TcpStream::connect(&address).unwrap();
    write!(
        connection,
        "POST /gateway/heartbeat HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{{"
    )
    .unwrap();
    connection.flush().unwrap();
    connection
}

/// SIGTERM to the leader of three instances running the production lease (30 s): it gives the lease back as soon as
/// it is told to stop, not after draining its requests (one is kept in flight throughout) and not by letting the
/// lease expire, so a follower leads, under a newer term, within 2 s (DESIGN.md §14). The old leader then drains
/// and exits cleanly, having said so.
#[test]
fn sigterm_of_the_leader_hands_the_lease_over_within_2_s_while_its_requests_drain() {
    let test = "faults::sigterm_of_the_leader_hands_the_lease_over_within_2_s_while_its_requests_drain";
    let _turn = gateway_testkit::heavy_test_turn();
    let Some(mut cluster) = Cluster::start_with_ttl(test, 3, gateway_redis::leadership::LEASE_TTL, &[]) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let epoch = |view: &serde_json::Value| view["leader"]["epoch"].as_u64().unwrap();
    let old_epoch = epoch(&cluster.view(leader));
    let held = request_in_flight(cluster.gateway(leader));
    thread::sleep(Duration::from_millis(100));

    let signalled = Instant::now();
    cluster.sigterm(leader);
    let mut new_leader = None;
    wait_until("a follower to lead", Duration::from_secs(10), || {
        new_leader = cluster.leader();
        new_leader.is_some()
    });
    let handover = signalled.elapsed();
    let new_leader = new_leader.unwrap();
    assert_ne!(new_leader, leader);
    assert!(
        handover <= Duration::from_secs(2),
        "the lease was handed over {handover:?} after SIGTERM, later than 2 s\n{}",
        cluster.story()
    );
    assert!(epoch(&cluster.view(new_leader)) > old_epoch, "a new term");
    let still_draining = cluster.gateway(leader).logs();
    assert!(!still_draining.contains("gateway stopped"), "the request in flight was meant to hold the drain");

    drop(held);
    assert!(cluster.wait_exit(leader).success(), "the old leader did not stop cleanly\n{}", cluster.logs(leader));
    let said: Vec<serde_json::Value> = cluster
        .log_entries_from(leader, 0)
        .into_iter()
        .filter(|entry| entry["message"] == "leadership given back")
        .collect();
    assert_eq!(said.len(), 1, "the old leader said it gave the lease back: {said:?}");
    eprintln!("SIGTERM of the leader: {} leads {handover:?} later (lease TTL 30 s)", cluster.id(new_leader));
}

/// Flags of the cluster fault tests: failed deliveries are retried a second later (by the leader's poll, at its
/// default interval: how soon it looks again after an outage is part of what is tested), and the outbound rate is
/// out of the way of the load.
const FAULT_ARGS: [&str; 6] = [
    "--webhook-retry-schedule-s",
    "1,1,1,1,1,1,1,1",
    "--webhook-max-per-second",
    "100000",
    "--webhook-timeout-ms",
    "2000",
];

/// One request of a fault test's load, as its client saw it.
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "every field is shown in a failure message, through Debug")]
struct Sent {
    at: Instant,
    answered_at: Instant,
    instance: usize,
    /// `reminder` (the `schedule_reminder` tool) or `delivery` (an enqueue).
    kind: &'static str,
    /// The status, or `None` when no answer came (connection refused, reset, timed out).
    status: Option<u16>,
    reason: Option<String>,
    /// What the answer acknowledged: the agent of a scheduled reminder, or the id of an enqueued delivery.
    acknowledged: Option<Acknowledged>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Acknowledged {
    Reminder { agent: String },
    Delivery { id: i64 },
}

/// Sends a reminder (the `schedule_reminder` tool, due 300 ms later, for an agent of its own) and a delivery to
/// instance `instance` at `base`, every `pace`, until `stop` is set.
fn fault_load(
    instance: usize,
    base: &str,
    webhook: i64,
    pace: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<Sent> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent();
    let mut sent = Vec::new();
    for n in (instance * 1_000_000..).take_while(|_| !stop.load(std::sync::atomic::Ordering::SeqCst)) {
        let agent_id = format!("agent-fault-{n}");
        let reminder = json!({"agent_id": agent_id, "tool_call_id": format!("call-{n}"),
                              "params": {"delay_ms": 300, "payload": {"n": n}}});
        let at = Instant::now();
        let answer = agent
            .post(format!("{base}/gateway/tools/schedule_reminder"))
            .content_type("application/json")
            .send(reminder.to_string());
        sent.push(record(at, instance, "reminder", answer, |body| {
            body["result"]["job_id"].as_i64().map(|_| Acknowledged::Reminder { agent: agent_id.clone() })
        }));
        // A DecisionLog's reminder too: accepted (202) only when its reminder is written, never acknowledged while
        // the store cannot write it.
        let log_agent = format!("agent-log-{n}");
        let log = json!({
            "meta": {"trace_id": format!("trace-{n}"), "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": log_agent, "agent_type": "fault", "capability_version": "1"},
            "action": {"status": "pending", "tool_call": "schedule_reminder",
                       "tool_input": {"delay_ms": 300, "payload": {"n": n}}}
        });
        let at = Instant::now();
        let answer =
            agent.post(format!("{base}/gateway/messages")).content_type("application/json").send(log.to_string());
        sent.push(record(at, instance, "decision_log", answer, |body| {
            (body["status"] == "accepted").then(|| Acknowledged::Reminder { agent: log_agent.clone() })
        }));
        let delivery = json!({"webhook_id": webhook, "session_id": "fault", "payload": {"n": n}});
        let at = Instant::now();
        let answer = agent
            .post(format!("{base}/gateway/deliveries"))
            .header("authorization", crate::support::cluster::operator_header())
            .content_type("application/json")
            .send(delivery.to_string());
        sent.push(record(at, instance, "delivery", answer, |body| {
            body["id"].as_i64().map(|id| Acknowledged::Delivery { id })
        }));
        thread::sleep(pace);
    }
    sent
}

fn record(
    at: Instant,
    instance: usize,
    kind: &'static str,
    answer: Result<http::Response<ureq::Body>, ureq::Error>,
    acknowledged: impl FnOnce(&serde_json::Value) -> Option<Acknowledged>,
) -> Sent {
    let Ok(mut response) = answer else {
        return Sent {
            at,
            answered_at: Instant::now(),
            instance,
            kind,
            status: None,
            reason: None,
            acknowledged: None,
        };
    };
    let status = response.status().as_u16();
    let body: serde_json::Value =
        serde_json::from_str(&response.body_mut().read_to_string().unwrap_or_default()).unwrap_or_default();
    let acknowledged = if (200..300).contains(&status) { acknowledged(&body) } else { None };
    let reason = body["reason"].as_str().map(str::to_owned);
    Sent { at, answered_at: Instant::now(), instance, kind, status: Some(status), reason, acknowledged }
}

/// The reminders `agent_id`'s mailbox holds, read through instance `index` (`GET /gateway/agents/{id}/reminders`):
/// what the agent gets whenever it reads or connects, whatever instance fired them.
fn mailbox(cluster: &Cluster, index: usize, agent_id: &str) -> Vec<serde_json::Value> {
    let (status, body) = cluster.gateway(index).operator_get(&format!("/gateway/agents/{agent_id}/reminders"));
    assert_eq!(status, 200, "{body}");
    body["reminders"].as_array().cloned().unwrap_or_default()
}

/// PostgreSQL stops for 20 s under three running instances (DESIGN.md §11, §14): meanwhile every write answers 503
/// `store_unavailable` (never a 500, never no answer) and every `/readyz` is 503; once the server is back, the same
/// processes (no restart: their pools reconnect) are ready again and take writes, and every reminder and delivery
/// that was acknowledged, before, during or after, reaches its agent's mailbox or its receiver.
#[test]
fn postgresql_stopped_20_s_under_a_cluster_answers_503_loses_nothing_and_recovers_without_restart() {
    let test = "faults::postgresql_stopped_20_s_under_a_cluster";
    let _turn = gateway_testkit::heavy_test_turn();
    let Some(cluster) = Cluster::start_on_own_postgres(test, 3, &FAULT_ARGS) else {
        return;
    };
    cluster.wait_for_leader(cluster.patience());
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook = cluster.create_webhook(0, "pg-outage", &receiver.url("/pg"), "pg-outage-secret");
    let pids: Vec<u32> = (0..cluster.len()).map(|index| cluster.gateway(index).pid()).collect();
    let bases: Vec<String> = (0..cluster.len()).map(|index| cluster.gateway(index).base.clone()).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A client per instance, so that one waiting out a refused checkout does not hold the others back.
    let load: Vec<_> = bases
        .into_iter()
        .enumerate()
        .map(|(instance, base)| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || fault_load(instance, &base, webhook, Duration::from_millis(100), &stop))
        })
        .collect();
    thread::sleep(Duration::from_secs(3));
    cluster.postgres().stop().unwrap();
    let stopped = Instant::now();
    wait_until("every instance's /readyz to say 503", Duration::from_secs(10), || {
        (0..cluster.len()).all(|index| cluster.gateway(index).get("/readyz").0 == 503)
    });
    let (_, ready) = cluster.gateway(0).get("/readyz");
    assert!(ready["not_ready"].as_array().is_some_and(|what| what.contains(&json!("store"))), "{ready}");
    let outage = Duration::from_secs(20);
    thread::sleep(outage.saturating_sub(stopped.elapsed()));
    cluster.postgres().start().unwrap();
    let restarted = Instant::now();
    let restarted_at = time::OffsetDateTime::now_utc();
    let deadline = restarted + cluster.patience();
    loop {
        let ready: Vec<(u16, serde_json::Value)> =
            (0..cluster.len()).map(|index| cluster.gateway(index).operator_get("/readyz")).collect();
        if ready.iter().all(|(status, _)| *status == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready again {:?} after PostgreSQL was back: {ready:?}\n{}",
            cluster.patience(),
            cluster.story()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let recovered_after = restarted.elapsed();
    // Every loop retries a failing store at least every 5 s (10 s for retention) and a checkout gives up after 5 s:
    // a generous bound on a loaded machine, far below the minute the loops used to back off to.
    assert!(
        recovered_after <= Duration::from_secs(20),
        "ready again only {recovered_after:?} after PostgreSQL was back"
    );
    thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent: Vec<Sent> = load.into_iter().flat_map(|client| client.join().unwrap()).collect();

    // Every request got an answer; the only refusal is 503 store_unavailable, and only around the outage.
    let unanswered: Vec<&Sent> = sent.iter().filter(|request| request.status.is_none()).collect();
    assert!(unanswered.is_empty(), "requests to running instances got no answer: {unanswered:?}");
    let refused: Vec<&Sent> =
        sent.iter().filter(|request| !request.status.is_some_and(|s| (200..300).contains(&s))).collect();
    let wrong: Vec<&&Sent> = refused
        .iter()
        .filter(|request| request.status != Some(503) || request.reason.as_deref() != Some("store_unavailable"))
        .collect();
    assert!(wrong.is_empty(), "refusals other than 503 store_unavailable: {wrong:?}");
    // Sent after the server had stopped and answered before it started again.
    let during = |request: &&Sent| request.at > stopped && request.answered_at < restarted;
    let refused_during = refused.iter().filter(|request| during(request)).count();
    let sent_during: Vec<&Sent> = sent.iter().filter(during).collect();
    assert!(
        !sent_during.is_empty() && refused_during == sent_during.len(),
        "{refused_during} of {} writes refused while PostgreSQL was down: {sent_during:?}",
        sent_during.len()
    );
    let after: Vec<&Sent> = sent.iter().filter(|request| request.at > restarted + recovered_after).collect();
    assert!(
        !after.is_empty() && after.iter().all(|request| request.acknowledged.is_some()),
        "writes after the recovery: {after:?}"
    );

    // Nothing acknowledged is lost: each reminder is in its agent's mailbox (fired once), each delivery received.
    let acknowledged: BTreeSet<Acknowledged> = sent.iter().filter_map(|request| request.acknowledged.clone()).collect();
    let deliveries: BTreeSet<i64> = acknowledged
        .iter()
        .filter_map(|ack| match ack {
            Acknowledged::Delivery { id } => Some(*id),
            Acknowledged::Reminder { .. } => None,
        })
        .collect();
    let agents: Vec<&str> = acknowledged
        .iter()
        .filter_map(|ack| match ack {
            Acknowledged::Reminder { agent } => Some(agent.as_str()),
            Acknowledged::Delivery { .. } => None,
        })
        .collect();
    let deadline = Instant::now() + cluster.patience();
    loop {
        let received: BTreeSet<i64> = receiver.received().iter().map(|request| request.delivery_id()).collect();
        let missing: Vec<i64> = deliveries.difference(&received).copied().collect();
        if missing.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let rows: Vec<serde_json::Value> = missing
                .iter()
                .take(5)
                .map(|id| cluster.gateway(0).operator_get(&format!("/gateway/deliveries/{id}")).1)
                .collect();
            panic!(
                "{} acknowledged deliveries never reached the receiver: {missing:?}\n{rows:#?}\n{}",
                missing.len(),
                cluster.story()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
    wait_until("every acknowledged reminder in its agent's mailbox", cluster.patience(), || {
        agents.iter().enumerate().all(|(n, agent)| !mailbox(&cluster, n % cluster.len(), agent).is_empty())
    });
    // Reminders due while the store was away fire soon after it is back: the scheduler retries at least every 5 s.
    let mut latest = time::Duration::ZERO;
    for agent in &agents {
        let entries = mailbox(&cluster, 0, agent);
        assert_eq!(entries.len(), 1, "{agent}'s mailbox: {entries:?}");
        let instant = |field: &str| {
            let text = entries[0][field].as_str().unwrap();
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
        };
        let late = instant("fired_at") - instant("scheduled_for").max(restarted_at);
        latest = latest.max(late);
    }
    assert!(
        latest <= time::Duration::seconds(15),
        "a reminder fired {latest} after it was due or PostgreSQL was back, whichever came later"
    );
    let now: Vec<u32> = (0..cluster.len()).map(|index| cluster.gateway(index).pid()).collect();
    assert_eq!(now, pids, "no instance was restarted");
    // What the operator reads meanwhile: a warning about the database every 10 s per instance, not one per failed
    // connection attempt (hundreds a second across the cluster).
    for index in 0..cluster.len() {
        let entries = cluster.log_entries_from(index, 0);
        let flooding = entries.iter().filter(|entry| entry["target"] == "r2d2").count();
        assert_eq!(flooding, 0, "{} logged the pool's own errors", cluster.id(index));
        let told = entries.iter().filter(|entry| entry["message"] == "cannot connect to the database").count();
        assert!((1..=4).contains(&told), "{} said it cannot connect {told} times in a 20 s outage", cluster.id(index));
    }
    eprintln!(
        "PostgreSQL stopped {outage:?} under 3 instances: {} requests, {} refused with 503 (all while it was down), \
         ready again {recovered_after:?} after it was back, reminders fired at most {latest} late; {} reminders and {} deliveries acknowledged, none lost",
        sent.len(),
        refused.len(),
        agents.len(),
        deliveries.len()
    );
}

/// The eviction tests' threshold, short so that an outage of twice it takes seconds, and checks five times a second.
const EVICTION_THRESHOLD: Duration = Duration::from_secs(4);
const EVICTION_ARGS: [&str; 4] = ["--heartbeat-eviction-threshold-s", "4", "--heartbeat-check-interval-ms", "200"];

/// One heartbeat of `agent` to `gateway`; its status.
fn heartbeat(gateway: &Gateway, agent: &str) -> u16 {
    gateway.post_json("/gateway/heartbeat", &json!({"type": "heartbeat", "agent_id": agent, "cluster_id": "c"})).0
}

/// PostgreSQL stops for twice the eviction threshold under a cluster whose agents keep heartbeating (answered 503
/// meanwhile: their receipts wait on each instance for the store). Once it is back, the agents that kept
/// heartbeating must not be evicted for the store's silence — every one of them announced `agent_evicted`, then
/// registered again, was the storm this guards against — while an agent that went silent before the outage is still
/// evicted, once. Judged from the `agent_evicted` events a subscriber receives.
#[test]
fn postgresql_stopped_longer_than_the_threshold_evicts_only_the_agent_that_went_silent() {
    let test = "faults::postgresql_stopped_longer_than_the_threshold";
    let _turn = gateway_testkit::heavy_test_turn();
    let threshold = EVICTION_THRESHOLD;
    let Some(cluster) = Cluster::start_on_own_postgres(test, 2, &EVICTION_ARGS) else {
        return;
    };
    cluster.wait_for_leader(cluster.patience());
    let watcher = cluster.gateway(0).subscribe("gateway:agents");
    assert_eq!(heartbeat(cluster.gateway(1), "agent-gone"), 200);
    let bases: Vec<String> = (0..cluster.len()).map(|index| cluster.gateway(index).base.clone()).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Eight agents, each heartbeating every 300 ms to one instance (half to each).
    let agents: Vec<String> = (0..8).map(|n| format!("agent-alive-{n}")).collect();
    let beaters: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(n, agent)| {
            let (base, agent, stop) = (bases[n % bases.len()].clone(), agent.clone(), Arc::clone(&stop));
            thread::spawn(move || {
                let client = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
                let body = json!({"type": "heartbeat", "agent_id": agent, "cluster_id": "c"}).to_string();
                let mut answers = BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let sent = client
                        .post(format!("{base}/gateway/heartbeat"))
                        .content_type("application/json")
                        .send(body.as_str());
                    answers.insert(sent.map_or(0, |response| response.status().as_u16()));
                    thread::sleep(Duration::from_millis(300));
                }
                answers
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    cluster.postgres().stop().unwrap();
    thread::sleep(threshold * 2);
    cluster.postgres().start().unwrap();
    wait_until("every instance ready again", cluster.patience(), || {
        (0..cluster.len()).all(|index| cluster.gateway(index).operator_get("/readyz").0 == 200)
    });
    // Three thresholds of heartbeats after the store is back: any pass that judged the outage as the agents'
    // silence has run by then, and the silent agent's eviction too.
    thread::sleep(threshold * 3);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers: Vec<BTreeSet<u16>> = beaters.into_iter().map(|beater| beater.join().unwrap()).collect();
    // A heartbeat queued behind a group that waited out its checkout may be written once the store is back (200,
    // late); the others were refused.
    assert!(
        answers.iter().all(|seen| seen.contains(&200)) && answers.iter().any(|seen| seen.contains(&503)),
        "the agents heartbeated through an outage the gateway answered with 503: {answers:?}"
    );
    let evicted = crate::cluster::evictions_within(&watcher, Duration::from_secs(1));
    assert_eq!(evicted, vec!["agent-gone".to_owned()], "evictions after a store outage\n{}", cluster.story());
}

/// Every instance of a cluster stops (SIGTERM, as the upgrade across migration 000017 asks) for twice the eviction
/// threshold and starts again; the agents that come back heartbeat within their period. None of them may be evicted
/// for the cluster's own absence (every receipt in the table is as old as the outage, and the new leader's first
/// pass would have judged it as their silence), while the agent that did not come back is evicted, once. Judged from
/// the `agent evicted` lines of every process of both instances (an event stream opened after the restart could
/// miss a first pass), and the events a subscriber receives.
#[test]
fn a_cluster_stopped_whole_and_started_again_evicts_only_the_agent_that_did_not_come_back() {
    let test = "faults::a_cluster_stopped_whole_and_started_again";
    let _turn = gateway_testkit::heavy_test_turn();
    let threshold = EVICTION_THRESHOLD;
    let Some(mut cluster) = Cluster::start_on_own_postgres(test, 2, &EVICTION_ARGS) else {
        return;
    };
    cluster.wait_for_leader(cluster.patience());
    let back: Vec<String> = (0..6).map(|n| format!("agent-back-{n}")).collect();
    for (n, agent) in back.iter().chain([&"agent-gone".to_owned()]).enumerate() {
        assert_eq!(heartbeat(cluster.gateway(n % 2), agent), 200);
    }
    for index in 0..cluster.len() {
        cluster.sigterm(index);
    }
    for index in 0..cluster.len() {
        assert!(cluster.wait_exit(index).success());
    }
    thread::sleep(threshold * 2);
    for index in 0..cluster.len() {
        cluster.restart(index);
    }
    let watcher = cluster.gateway(0).subscribe("gateway:agents");
    // The agents come back on their own schedule: the first of them half a threshold after the restart (with the
    // seeds' constants, within 30 s of it), then each heartbeats every second for three thresholds.
    thread::sleep(threshold / 2);
    let until = Instant::now() + threshold * 3;
    while Instant::now() < until {
        for (n, agent) in back.iter().enumerate() {
            assert_eq!(heartbeat(cluster.gateway(n % 2), agent), 200);
        }
        thread::sleep(Duration::from_secs(1));
    }
    let streamed = crate::cluster::evictions_within(&watcher, Duration::from_secs(1));
    let logged: Vec<String> = (0..cluster.len())
        .flat_map(|index| cluster.log_entries_from(index, 0))
        .filter(|entry| entry["message"] == "agent evicted")
        .map(|entry| entry["agent_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(logged, vec!["agent-gone".to_owned()], "evictions logged after a restart\n{}", cluster.story());
    assert_eq!(streamed, logged, "the eviction announced");
}

/// One inline command to the test's Redis (as `redis-cli` would send it); returns the first line of the reply.
fn redis_command(port: u16, command: &str) -> String {
    use std::io::{BufRead, Write};
    let mut connection = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(connection, "{command}\r\n").unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(connection).read_line(&mut reply).unwrap();
    reply.trim_end().to_owned()
}

/// The newest leadership token the shared database has admitted.
fn store_epoch(database_url: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Epoch {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        epoch: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query("SELECT epoch FROM gateway_leader_epoch").get_result::<Epoch>(&mut connection).unwrap().epoch
}

/// A leader that still believes it leads attempts a leader-only write after a newer term has written, and the store
/// refuses it (DESIGN.md §11, "Fencing"). The leader is frozen (SIGSTOP) while Redis loses its lease (the key is
/// deleted, as a Redis restarted without persistence or failed over to a stale replica would): a follower takes it
/// at once under a newer token and writes. Woken within its own lease's validity (30 s TTL), the old leader's
/// scheduler claims the reminders that came due: the store refuses the claim, it logs `fenced by a newer leader`,
/// steps down for that reason, and fires nothing; every reminder fires once, through the new leader.
#[test]
fn a_deposed_leader_that_still_believes_it_leads_is_refused_by_the_store_and_steps_down() {
    let test = "faults::a_deposed_leader_that_still_believes_it_leads_is_refused_by_the_store_and_steps_down";
    let _turn = gateway_testkit::heavy_test_turn();
    let poll = ["--webhook-poll-interval-ms", "200"];
    let Some(mut cluster) = Cluster::start_with_ttl(test, 3, gateway_redis::leadership::LEASE_TTL, &poll) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let old_token = cluster.view(leader)["leader"]["epoch"].as_i64().unwrap();
    let others = cluster.others(leader);
    // Reminders due every 200 ms from 1 s to 8 s from now, scheduled through the followers: some come due while the
    // leader is frozen, some just after it wakes.
    let mut jobs = Vec::new();
    for n in 0..36_u64 {
        let delay = Duration::from_millis(1_000 + 200 * n);
        let (status, body) =
            cluster.schedule_reminder(others[(n % 2) as usize], &format!("agent-fenced-{n}"), delay, &json!({"n": n}));
        assert_eq!(status, 202, "{body}");
        jobs.push(format!("agent-fenced-{n}"));
    }

    cluster.pause(leader);
    let frozen = Instant::now();
    assert_eq!(redis_command(cluster.redis.port(), "DEL gateway:leader"), ":1", "the lease was in Redis");
    let mut new_leader = None;
    wait_until("a follower to lead", Duration::from_secs(10), || {
        new_leader = cluster.leader();
        new_leader.is_some()
    });
    let new_leader = new_leader.unwrap();
    let new_token = cluster.view(new_leader)["leader"]["epoch"].as_i64().unwrap();
    assert!(new_token > old_token, "a newer term: {new_token} after {old_token}");
    wait_until("the new term's first write in the store", Duration::from_secs(10), || {
        store_epoch(cluster.database_url()) == new_token
    });
    // Well within the frozen leader's own idea of its lease (it renewed at most 10 s before it froze, and counts on
    // it for 19 s), so it wakes up believing it leads.
    let frozen_for = frozen.elapsed();
    assert!(frozen_for < Duration::from_secs(8), "the takeover took {frozen_for:?}: too long to test a stale write");
    let woke_at = cluster.logs(leader).len();
    cluster.resume(leader);

    let fenced = |entry: &serde_json::Value| {
        entry["message"].as_str().is_some_and(|message| message.contains("fenced by a newer leader"))
    };
    wait_until("the woken leader's refused write", PATIENCE, || {
        cluster.log_entries_from(leader, woke_at).iter().any(fenced)
    });
    wait_until("the woken leader to follow", PATIENCE, || cluster.view(leader)["role"] == "follower");
    let after_wake = cluster.log_entries_from(leader, woke_at);
    let refusal = after_wake.iter().find(|entry| fenced(entry)).unwrap();
    let error = refusal["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("token {old_token} is older than the newest, {new_token}")),
        "the refusal names both terms: {refusal}"
    );
    let stepped_down = after_wake.iter().find(|entry| entry["message"] == "stepping down from leadership");
    let reason = stepped_down.map(|entry| entry["reason"].clone()).unwrap_or_default();
    assert_eq!(
        reason, "the store refused a write under this term's token: a newer leader wrote",
        "why it stepped down: {stepped_down:?}"
    );
    let fired: Vec<&serde_json::Value> =
        after_wake.iter().filter(|entry| entry["message"] == "reminder fired").collect();
    assert!(fired.is_empty(), "the deposed leader fired reminders after it woke: {fired:?}");

    // Every reminder reached its agent's mailbox once, fired by the new leader.
    wait_until("every reminder in its agent's mailbox", cluster.patience(), || {
        jobs.iter().all(|agent| !mailbox(&cluster, new_leader, agent).is_empty())
    });
    for agent in &jobs {
        assert_eq!(mailbox(&cluster, new_leader, agent).len(), 1, "{agent}");
    }
    assert_eq!(cluster.leader(), Some(new_leader), "the deposed leader did not take the lease back");
    eprintln!(
        "deposed leader: frozen {frozen_for:?} while term {new_token} took over from term {old_token}; woken, its \
         write was refused and it stepped down"
    );
}
