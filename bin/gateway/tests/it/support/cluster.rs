//! Several gateways on one PostgreSQL database and one Redis, for the failover tests (it/cluster.rs).
//!
//! Each instance is a real process with an instance id of its own (`gw-a`, `gw-b`, ...), which a test may kill
//! with SIGKILL, pause with SIGSTOP and restart under the same id. Every instance logs JSON with the scheduler's
//! debug lines on, and what each process wrote is kept across its restarts: the logs are the record of which
//! instance scheduled and fired which reminder, and when (an SSE subscriber only sees what reached its own
//! instance while it was connected).
//!
//! Every duration of the cluster tests follows one lease TTL, `GATEWAY_FAILOVER_LEASE_TTL_MS` (3 s unless set;
//! the production default, 30 s, is the full-scale run of docs/operations.md).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gateway_redis::LeaseTimings;
use gateway_testkit::postgres::{TempDatabase, TempPostgres};
use gateway_testkit::redis::RedisServer;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Gateway, PATIENCE, TOKEN};

/// The variable that sets every cluster test's `--leader-lease-ttl-ms`.
pub const LEASE_TTL_ENV: &str = "GATEWAY_FAILOVER_LEASE_TTL_MS";
/// Short enough for CI (a failover takes about 3 s), long enough that a busy 2-core machine renews in time.
const DEFAULT_LEASE_TTL_MS: u64 = 3_000;
/// The cluster secret every test cluster shares (`--cluster-secret`).
pub const CLUSTER_SECRET: &str = "the cluster secret of the integration tests";
/// Every cluster test logs this: info, and each reminder scheduled and fired with its job and fire id.
const LOG_FILTER: &str = "info,gateway_cron=debug";

/// `GATEWAY_FAILOVER_LEASE_TTL_MS`, or 3 s.
pub fn lease_ttl() -> Duration {
    Duration::from_millis(env_u64(LEASE_TTL_ENV).unwrap_or(DEFAULT_LEASE_TTL_MS))
}

/// A whole number from the environment; a value that is not one stops the test with its name.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| value.parse().unwrap_or_else(|_| panic!("{name}={value} is not a number")))
}

/// One reminder fire, as the instance that published it logged it.
#[derive(Debug, Clone)]
pub struct Fire {
    /// Index of the instance that fired it.
    pub instance: usize,
    pub job_id: i64,
    pub fire_id: String,
    /// The log line's time (the instance's clock, the same machine's as the test's).
    pub at: OffsetDateTime,
}

/// What [`Cluster::start_with`] may change.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// The lease TTL; [`lease_ttl`] when `None`.
    pub ttl: Option<Duration>,
    /// Redis over TLS (`rediss://`, with a CA and a client certificate of the test's own).
    pub tls: bool,
    /// Run on the started Redis before the gateways start (set up users, say); returns the `--redis-url` to give
    /// them.
    pub prepare_redis: Option<fn(&RedisServer) -> String>,
    /// A PostgreSQL server of the cluster's own, which the test may stop ([`Cluster::postgres`]).
    pub own_postgres: bool,
}

/// An instance: its id, the process running it now (if any), and what its earlier processes logged.
struct Instance {
    id: String,
    running: Option<Gateway>,
    paused: bool,
    /// Sent SIGTERM: draining, and no longer counted among the instances that answer.
    stopping: bool,
    earlier_logs: String,
}

/// N gateways sharing one PostgreSQL database and one Redis. Every process is killed when dropped.
pub struct Cluster {
    pub ttl: Duration,
    /// The lease's timings as every instance derives them from [`Cluster::ttl`].
    pub timings: LeaseTimings,
    pub redis: RedisServer,
    database: TempDatabase,
    /// The cluster's own PostgreSQL server, for a test that stops it ([`Cluster::start_on_own_postgres`]); dropped
    /// after the database.
    own_postgres: Option<TempPostgres>,
    args: Vec<String>,
    instances: Vec<Instance>,
}

impl Cluster {
    /// Starts `size` instances (in parallel) on a fresh database of the shared test server and a Redis of the
    /// test's own, each with `extra_args` after the cluster's own flags. `None`, after one printed line, when
    /// PostgreSQL or redis-server is not installed (a failure under CI).
    pub fn start(test: &str, size: usize, extra_args: &[&str]) -> Option<Self> {
        Self::start_with(test, size, Setup::default(), extra_args)
    }

    /// [`Cluster::start`] with a lease TTL of the test's choosing (the production one, for a test whose point is
    /// that nothing waits for the TTL).
    pub fn start_with_ttl(test: &str, size: usize, ttl: Duration, extra_args: &[&str]) -> Option<Self> {
        Self::start_with(test, size, Setup { ttl: Some(ttl), ..Setup::default() }, extra_args)
    }

    /// [`Cluster::start`] on a PostgreSQL server of the cluster's own, which the test may stop and start again
    /// ([`Cluster::postgres`]) without disturbing the other tests' shared server.
    pub fn start_on_own_postgres(test: &str, size: usize, extra_args: &[&str]) -> Option<Self> {
        Self::start_with(test, size, Setup { own_postgres: true, ..Setup::default() }, extra_args)
    }

    /// [`Cluster::start`] with a lease, a Redis or a PostgreSQL server of the test's choosing.
    pub fn start_with(test: &str, size: usize, setup: Setup, extra_args: &[&str]) -> Option<Self> {
        let (database, own_postgres) = if setup.own_postgres {
            let server = gateway_testkit::postgres::server(test)?;
            (server.create_database(test), Some(server))
        } else {
            (gateway_testkit::postgres::database(test)?, None)
        };
        let redis = if setup.tls { RedisServer::start_tls_or_skip(test)? } else { RedisServer::start_or_skip(test)? };
        let ttl = setup.ttl.unwrap_or_else(lease_ttl);
        let mut args: Vec<String> = match redis.tls() {
            None => {
                vec!["--redis-url".into(), setup.prepare_redis.map_or_else(|| redis.url(), |prepare| prepare(&redis))]
            }
            Some(tls) => vec![
                "--redis-url".into(),
                tls.url(),
                "--redis-ca-file".into(),
                tls.ca_file.display().to_string(),
                "--redis-client-cert-file".into(),
                tls.client_cert_file.display().to_string(),
                "--redis-client-key-file".into(),
                tls.client_key_file.display().to_string(),
            ],
        };
        args.extend(
            [
                "--cluster-secret",
                CLUSTER_SECRET,
                "--leader-lease-ttl-ms",
                &ttl.as_millis().to_string(),
                "--log-format",
                "json",
                "--webhook-allow-private-targets",
            ]
            .iter()
            .map(ToString::to_string),
        );
        args.extend(extra_args.iter().map(ToString::to_string));
        let instances = (0..size)
            .map(|index| Instance {
                id: format!("gw-{}", char::from(b'a' + u8::try_from(index).unwrap())),
                running: None,
                paused: false,
                stopping: false,
                earlier_logs: String::new(),
            })
            .collect();
        let timings = LeaseTimings::with_ttl(ttl);
        let mut cluster = Self { ttl, timings, redis, database, own_postgres, args, instances };
        let started: Vec<Gateway> = thread::scope(|scope| {
            let cluster = &cluster;
            let starting: Vec<_> = (0..size).map(|index| scope.spawn(move || cluster.spawn(index))).collect();
            starting.into_iter().map(|handle| handle.join().unwrap()).collect()
        });
        for (instance, gateway) in cluster.instances.iter_mut().zip(started) {
            instance.running = Some(gateway);
        }
        Some(cluster)
    }

    fn spawn(&self, index: usize) -> Gateway {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend(["--instance-id", &self.instances[index].id]);
        Gateway::start_on_with_env(self.database.url(), &args, &[("RUST_LOG", LOG_FILTER)])
    }

    /// The shared database's URL, for a test that reads it directly.
    pub fn database_url(&self) -> &str {
        self.database.url()
    }

    /// The cluster's own PostgreSQL server ([`Cluster::start_on_own_postgres`]); panics for a shared one.
    pub fn postgres(&self) -> &TempPostgres {
        self.own_postgres.as_ref().expect("a cluster started on its own PostgreSQL server")
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn id(&self, index: usize) -> &str {
        &self.instances[index].id
    }

    /// The index of the instance named `id`.
    pub fn index_of(&self, id: &str) -> usize {
        self.instances.iter().position(|instance| instance.id == id).unwrap_or_else(|| panic!("no instance {id}"))
    }

    /// The running process of instance `index`; panics if it is down.
    pub fn gateway(&self, index: usize) -> &Gateway {
        self.instances[index].running.as_ref().unwrap_or_else(|| panic!("{} is not running", self.id(index)))
    }

    /// Whether instance `index` runs and is not paused, that is, answers.
    pub fn is_up(&self, index: usize) -> bool {
        let instance = &self.instances[index];
        instance.running.is_some() && !instance.paused && !instance.stopping
    }

    /// The instances that answer.
    pub fn up(&self) -> Vec<usize> {
        (0..self.len()).filter(|index| self.is_up(*index)).collect()
    }

    /// Patience for anything that waits on a leadership change: the general patience plus a few TTLs, so a
    /// full-scale run (30 s leases) waits as long as it must.
    pub fn patience(&self) -> Duration {
        PATIENCE + self.ttl * 3
    }

    /// `ttl · numerator / denominator`: the scenarios' durations, written as fractions of the production TTL.
    pub fn scaled(&self, numerator: u32, denominator: u32) -> Duration {
        self.ttl * numerator / denominator
    }

    /// `GET /gateway/cluster` of instance `index`.
    pub fn view(&self, index: usize) -> Value {
        let (status, view) = self.gateway(index).try_operator_get("/gateway/cluster").unwrap_or_else(|error| {
            // A gateway stops gracefully only on SIGTERM or SIGINT, which no cluster test sends.
            let signalled = self.logs(index).contains("shutdown requested");
            let why = if signalled { "; it was sent SIGTERM or SIGINT from outside the test" } else { "" };
            panic!("{} does not answer ({error}){why}\n{}", self.id(index), self.story())
        });
        assert_eq!(status, 200, "GET /gateway/cluster on {}: {view}", self.id(index));
        view
    }

    /// The views of every instance that answers, by index.
    pub fn views(&self) -> Vec<(usize, Value)> {
        self.up().into_iter().map(|index| (index, self.view(index))).collect()
    }

    /// The leader, if the instances that answer agree on one right now: exactly one says it leads, and every one
    /// names it as the leader.
    pub fn leader(&self) -> Option<usize> {
        let views = self.views();
        let leaders: Vec<usize> =
            views.iter().filter(|(_, view)| view["role"] == "leader").map(|(index, _)| *index).collect();
        let [leader] = leaders[..] else { return None };
        let agreed = views.iter().all(|(_, view)| view["leader"]["instance_id"] == self.id(leader));
        agreed.then_some(leader)
    }

    /// Waits until the instances agree on a leader ([`Cluster::leader`]) and returns it; panics with every view
    /// after `within`.
    pub fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader() {
                return leader;
            }
            assert!(Instant::now() < deadline, "no agreed leader within {within:?}: {:?}", self.views());
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The instances that answer, other than `leader`.
    pub fn others(&self, leader: usize) -> Vec<usize> {
        self.up().into_iter().filter(|index| *index != leader).collect()
    }

    /// SIGKILL to instance `index`; what it logged is kept.
    pub fn kill(&mut self, index: usize) {
        let instance = &mut self.instances[index];
        let mut gateway = instance.running.take().unwrap_or_else(|| panic!("{} is not running", instance.id));
        gateway.kill();
        instance.earlier_logs.push_str(&gateway.logs_after_exit());
        instance.paused = false;
        instance.stopping = false;
    }

    /// SIGTERM to instance `index`, without waiting: it drains and stops; from now on it does not count as up.
    pub fn sigterm(&mut self, index: usize) {
        self.gateway(index).send_sigterm();
        self.instances[index].stopping = true;
    }

    /// Waits for instance `index`, sent SIGTERM, to exit; what it logged is kept.
    pub fn wait_exit(&mut self, index: usize) -> std::process::ExitStatus {
        let instance = &mut self.instances[index];
        let mut gateway = instance.running.take().unwrap_or_else(|| panic!("{} is not running", instance.id));
        let status = gateway.wait();
        instance.earlier_logs.push_str(&gateway.logs_after_exit());
        instance.stopping = false;
        status
    }

    /// Starts instance `index` again under its id (on a new port).
    pub fn restart(&mut self, index: usize) {
        assert!(self.instances[index].running.is_none(), "{} is running", self.id(index));
        let gateway = self.spawn(index);
        self.instances[index].running = Some(gateway);
    }

    /// SIGSTOP to instance `index`: it holds whatever it held, and answers nothing until [`Cluster::resume`].
    pub fn pause(&mut self, index: usize) {
        self.gateway(index).pause();
        self.instances[index].paused = true;
    }

    pub fn resume(&mut self, index: usize) {
        self.gateway(index).resume();
        self.instances[index].paused = false;
    }

    /// Everything instance `index` logged, through all its processes.
    pub fn logs(&self, index: usize) -> String {
        let instance = &self.instances[index];
        let current = instance.running.as_ref().map(Gateway::logs).unwrap_or_default();
        format!("{}{current}", instance.earlier_logs)
    }

    /// The JSON log lines of instance `index` from byte `from` of [`Cluster::logs`] on.
    pub fn log_entries_from(&self, index: usize, from: usize) -> Vec<Value> {
        let logs = self.logs(index);
        logs.get(from..).unwrap_or_default().lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// What a failed test prints: each instance's view (when it answers), and the lines each one logged about
    /// leadership, Redis, shutdown, and every warning or error, in time order with the instance named.
    pub fn story(&self) -> String {
        let mut lines: Vec<(String, String)> = Vec::new();
        for index in 0..self.len() {
            for entry in self.log_entries_from(index, 0) {
                let message = entry["message"].as_str().unwrap_or_default();
                let level = entry["level"].as_str().unwrap_or_default();
                let notable = matches!(level, "WARN" | "ERROR")
                    || ["leadership", "redis", "shutdown", "gateway st"].iter().any(|word| message.contains(word));
                if notable {
                    let at = entry["timestamp"].as_str().unwrap_or_default().to_owned();
                    lines.push((at, format!("{} {}", self.id(index), entry)));
                }
            }
        }
        lines.sort();
        let views: Vec<String> = self
            .up()
            .into_iter()
            .map(|index| match self.gateway(index).try_operator_get("/gateway/cluster") {
                Ok((_, view)) => view.to_string(),
                Err(error) => format!("{}: {error}", self.id(index)),
            })
            .collect();
        let told: Vec<String> = lines.into_iter().map(|(at, line)| format!("{at} {line}")).collect();
        format!("views now: {views:?}\nwhat the instances logged:\n{}", told.join("\n"))
    }

    /// Every reminder fire any instance logged, in log order per instance.
    pub fn fires(&self) -> Vec<Fire> {
        let mut fires = Vec::new();
        for instance in 0..self.len() {
            for entry in self.log_entries_from(instance, 0) {
                if entry["message"] != "reminder fired" {
                    continue;
                }
                let (Some(job_id), Some(fire_id), Some(at)) =
                    (entry["job_id"].as_i64(), entry["fire_id"].as_str(), entry["timestamp"].as_str())
                else {
                    continue;
                };
                let at = OffsetDateTime::parse(at, &Rfc3339).unwrap();
                fires.push(Fire { instance, job_id, fire_id: fire_id.to_owned(), at });
            }
        }
        fires
    }

    /// Fires by job id.
    pub fn fires_by_job(&self) -> BTreeMap<i64, Vec<Fire>> {
        let mut by_job: BTreeMap<i64, Vec<Fire>> = BTreeMap::new();
        for fire in self.fires() {
            by_job.entry(fire.job_id).or_default().push(fire);
        }
        by_job
    }

    /// Reminders scheduled through DecisionLogs, as the instances that took them logged them: agent id → job ids.
    pub fn scheduled_jobs(&self) -> BTreeMap<String, Vec<i64>> {
        let mut jobs: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for instance in 0..self.len() {
            for entry in self.log_entries_from(instance, 0) {
                if entry["message"] != "reminder scheduled" {
                    continue;
                }
                if let (Some(agent), Some(job)) = (entry["agent_id"].as_str(), entry["job_id"].as_i64()) {
                    jobs.entry(agent.to_owned()).or_default().push(job);
                }
            }
        }
        jobs
    }

    /// A DecisionLog asking for a reminder of `agent_id` in `delay`, with `payload`, sent to instance `index`.
    pub fn schedule_reminder(&self, index: usize, agent_id: &str, delay: Duration, payload: &Value) -> (u16, Value) {
        self.gateway(index).post_json("/gateway/messages", &reminder_log(agent_id, delay, payload))
    }

    /// A webhook config (`source_identifier` = `source`) targeting `target_url`, created through instance
    /// `index`; returns its id.
    pub fn create_webhook(&self, index: usize, source: &str, target_url: &str, secret: &str) -> i64 {
        let (status, body) = self.gateway(index).operator_post(
            "/gateway/webhook-configs",
            &json!({"source_identifier": source, "event_type": "failover", "agent_intent": "failover",
                    "target_session": "failover", "target_url": target_url, "secret": secret}),
        );
        assert_eq!(status, 201, "{body}");
        body["id"].as_i64().unwrap()
    }

    /// `POST /gateway/deliveries` on instance `index`.
    pub fn enqueue(&self, index: usize, webhook_id: i64, payload: &Value) -> (u16, Value) {
        self.gateway(index).operator_post(
            "/gateway/deliveries",
            &json!({"webhook_id": webhook_id, "session_id": "failover", "payload": payload}),
        )
    }
}

impl Drop for Cluster {
    /// The gateways go first: Redis and the database (dropped after, as fields) would otherwise vanish under
    /// live instances, which then log errors about them into a failing test's story.
    fn drop(&mut self) {
        for instance in &mut self.instances {
            drop(instance.running.take());
        }
    }
}

/// A DecisionLog whose tool call schedules a reminder.
pub fn reminder_log(agent_id: &str, delay: Duration, payload: &Value) -> Value {
    // A trace id of its own: a retried log (same agent and trace id) schedules nothing new.
    static TRACES: AtomicU64 = AtomicU64::new(0);
    let trace_id = format!("trace-{}", TRACES.fetch_add(1, Ordering::Relaxed));
    json!({
        "meta": {"trace_id": trace_id, "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": agent_id, "agent_type": "failover", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": delay.as_millis().max(1), "payload": payload}}
    })
}

/// The `authorization` header of the operator, for requests made without a [`Gateway`].
pub fn operator_header() -> String {
    format!("Bearer {TOKEN}")
}
