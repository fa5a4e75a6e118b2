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
