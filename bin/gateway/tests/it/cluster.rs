//! Failover on real processes: three gateways on one PostgreSQL database and one Redis (support/cluster.rs),
//! killed with SIGKILL, paused with SIGSTOP, and cut off from Redis, while reminders come due and webhooks are
//! delivered. What the tests hold to (docs/architecture.md, "Leadership and fencing"): one leader at a time, a new
//! one within the TTL and one renewal interval after the old one dies, a deposed leader that wakes up doing
//! nothing, no leader while Redis is unreachable and HTTP serving meanwhile, one eviction per silent agent, events
//! across instances, reminders an agent missed replayed by any instance from the shared mailbox, and nothing
//! acknowledged lost however often the leader is killed.
//!
//! Real time, scaled: every duration is a fraction of the lease TTL, `GATEWAY_FAILOVER_LEASE_TTL_MS` (3 s unless
//! set), written as the production figure over 30 s ("paused for 35 s" is `ttl · 35 / 30`). The full-scale run,
//! with the production lease, is in docs/operations.md ("Failover, tested"). The tests run one at a time: they
//! share two cores, and their timings are what they check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gateway_testkit::Reply;
use ring::hmac;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::receiver::{Behaviour, Receiver};
use crate::support::cluster::{Cluster, env_u64, reminder_log};
use crate::support::{EventStream, PATIENCE, TOKEN};

/// Flags of every cluster test: a failed delivery is retried a second later, by the leader's poll (so a test sees
/// leader-only webhook work within its time), the poll looks often, and the outbound rate is out of the way.
const CLUSTER_ARGS: [&str; 8] = [
    "--webhook-retry-schedule-s",
    "1,1,1,1,1",
    "--webhook-poll-interval-ms",
    "200",
    "--webhook-max-per-second",
    "100000",
    "--webhook-timeout-ms",
    "2000",
];
const SECRET: &str = "failover-webhook-secret";
/// Time given to schedule a batch of reminders before the event they are timed around (a kill, a pause, an
/// outage): their due instants are counted from the planned event, not from their requests. Generous (a batch is
/// up to sixty requests to a debug build, which the other heavy tests no longer share the machine with, but other
/// test threads still do).
const SCHEDULING_TIME: Duration = Duration::from_secs(4);

/// The cluster tests take turns (see the module's documentation), those of it/cluster_trust.rs too, with every
/// other heavy test of the machine (`gateway_testkit::heavy_test_turn`: the crash storm and the fault tests too,
/// under `cargo test` and under cargo-nextest alike).
pub(crate) fn one_at_a_time() -> gateway_testkit::HeavyTurn {
    gateway_testkit::heavy_test_turn()
}

fn start(test: &str, extra_args: &[&str]) -> Option<Cluster> {
    let mut args = CLUSTER_ARGS.to_vec();
    args.extend_from_slice(extra_args);
    Cluster::start(&format!("it::cluster::{test}"), 3, &args)
}

/// Polls `condition` until it holds; panics naming `what` after `within`.
pub(crate) fn wait_until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for: {what}");
        thread::sleep(Duration::from_millis(25));
    }
}

/// Every instance's own answer: `leader` says it leads, the others that they follow, all name `leader` with the
/// same epoch, and Redis answers.
pub(crate) fn assert_one_leader(cluster: &Cluster, leader: usize) {
    let views = cluster.views();
    let epoch = &cluster.view(leader)["leader"]["epoch"];
    assert!(epoch.as_u64().is_some_and(|epoch| epoch > 0), "the leader's epoch: {views:?}");
    for (index, view) in &views {
        let role = if *index == leader { "leader" } else { "follower" };
        assert_eq!(view["instance_id"], cluster.id(*index), "{view}");
        assert_eq!(view["role"], role, "{view}");
        assert_eq!(view["leader"]["instance_id"], cluster.id(leader), "{view}");
        assert_eq!(&view["leader"]["epoch"], epoch, "{view}");
        assert_eq!(view["redis"], "ok", "{view}");
    }
}

/// Schedules one reminder per entry of `due` (offsets from `from`), each for an agent of its own named
/// `{prefix}-{n}`, through the instances in `through` in turn; returns the agents (all answered 202).
fn schedule_around(cluster: &Cluster, through: &[usize], prefix: &str, from: Instant, due: &[Duration]) -> Vec<String> {
    let mut agents = Vec::new();
    for (n, offset) in due.iter().enumerate() {
        let agent = format!("{prefix}-{n}");
        let delay = (from + *offset).saturating_duration_since(Instant::now());
        let (status, body) = cluster.schedule_reminder(through[n % through.len()], &agent, delay, &json!({"n": n}));
        assert_eq!(status, 202, "{body}");
        agents.push(agent);
    }
    assert!(Instant::now() < from, "scheduling took longer than {SCHEDULING_TIME:?}: the machine is overloaded");
    agents
}

/// The job of each agent's reminder, from the logs of the instances that scheduled them (one job per agent).
fn jobs_of(cluster: &Cluster, agents: &[String]) -> Vec<i64> {
    let mut jobs = Vec::new();
    wait_until("every reminder's `reminder scheduled` line", PATIENCE, || {
        let scheduled = cluster.scheduled_jobs();
        jobs = agents.iter().filter_map(|agent| scheduled.get(agent).map(|jobs| jobs[0])).collect();
        jobs.len() == agents.len()
    });
    let scheduled = cluster.scheduled_jobs();
    for agent in agents {
        assert_eq!(scheduled[agent].len(), 1, "{agent} was scheduled more than once: {:?}", scheduled[agent]);
    }
    jobs
}

/// Waits until every job in `jobs` has fired (by the instances' logs); panics with the jobs left and what the
/// instances said about leadership and problems otherwise.
fn wait_for_fires(cluster: &Cluster, jobs: &[i64], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let fired = cluster.fires_by_job();
        let left: Vec<i64> = jobs.iter().copied().filter(|job| !fired.contains_key(job)).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "{} of {} reminders did not fire within {within:?}: jobs {left:?}\n{}",
                left.len(),
                jobs.len(),
                cluster.story()
            );
        }
        thread::sleep(Duration::from_millis(25));
    }
}

/// Every job in `jobs` fired exactly once, by all the instances' logs together.
fn assert_each_fired_once(cluster: &Cluster, jobs: &[i64]) {
    let fired = cluster.fires_by_job();
    for job in jobs {
        let fires = fired.get(job).map(Vec::as_slice).unwrap_or_default();
        let by: Vec<(&str, String)> =
            fires.iter().map(|fire| (cluster.id(fire.instance), fire.fire_id.clone())).collect();
        assert_eq!(fires.len(), 1, "job {job} fired {} times: {by:?}", fires.len());
    }
}

/// Requests the receiver got, by delivery id.
fn receipts(receiver: &Receiver) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for request in receiver.received() {
        *counts.entry(request.delivery_id()).or_insert(0) += 1;
    }
    counts
}

fn enqueued(cluster: &Cluster, index: usize, webhook: i64, payload: &Value) -> i64 {
    let (status, body) = cluster.enqueue(index, webhook, payload);
    assert_eq!(status, 201, "enqueue through {}: {body}", cluster.id(index));
    body["id"].as_i64().unwrap()
}

/// Waits for `id` to read `delivered` through `instance`, then checks its attempts. The receiver counts a request
/// when it answers it; the gateway records that answer after it arrives, so a read at once may still show the
/// previous attempt's `failed`. A delivery that stays failed, or that took another attempt, still fails here.
fn assert_recorded_delivered(cluster: &Cluster, instance: usize, id: i64, attempts: usize) {
    let path = format!("/gateway/deliveries/{id}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, delivery) = cluster.gateway(instance).operator_get(&path);
        assert_eq!(status, 200, "{delivery}");
        if delivery["status"] == "delivered" {
            assert_eq!(delivery["attempts"].as_array().unwrap().len(), attempts, "{delivery}");
            return;
        }
        assert!(Instant::now() < deadline, "delivery {id} not recorded as delivered after {PATIENCE:?}: {delivery}");
        thread::sleep(Duration::from_millis(25));
    }
}

pub(crate) fn millis(duration: Duration) -> String {
    format!("{} ms", duration.as_millis())
}

#[test]
fn a_killed_leader_is_replaced_within_its_ttl_and_reminders_and_deliveries_keep_flowing() {
    let _turn = one_at_a_time();
    let Some(mut cluster) =
        start("a_killed_leader_is_replaced_within_its_ttl_and_reminders_and_deliveries_keep_flowing", &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    assert_one_leader(&cluster, leader);
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook =
        cluster.create_webhook(cluster.others(leader)[0], "killed-leader", &receiver.url("/failover"), SECRET);

    // `GATEWAY_CLUSTER_FAILOVER_ROUNDS` kills in a row (one by default), for the failover figures.
    for round in 0..env_u64("GATEWAY_CLUSTER_FAILOVER_ROUNDS").unwrap_or(1) {
        let leader = cluster.wait_for_leader(cluster.patience());
        let survivors = cluster.others(leader);
        let agent = format!("agent-failover-{round}");
        let stream = cluster.gateway(survivors[0]).subscribe(&format!("agent:{agent}:scheduled"));

        // Sixty reminders scheduled before the kill, due one every TTL/30 after it: the first ones are overdue
        // when the new leader takes over, so its first fire says when timed work resumed.
        let kill_at = Instant::now() + SCHEDULING_TIME;
        let spacing = cluster.scaled(1, 30);
        let count = 60_u32;
        for n in 0..count {
            let delay = kill_at.saturating_duration_since(Instant::now()) + spacing * (n + 1);
            let through = survivors[n as usize % survivors.len()];
            let (status, body) = cluster.schedule_reminder(through, &agent, delay, &json!({"n": n}));
            assert_eq!(status, 202, "{body}");
        }
        assert!(Instant::now() < kill_at, "scheduling took longer than {SCHEDULING_TIME:?}");
        thread::sleep(kill_at.saturating_duration_since(Instant::now()));

        let old_epoch = cluster.view(leader)["leader"]["epoch"].as_u64().unwrap();
        let killed_at = OffsetDateTime::now_utc();
        let killed = Instant::now();
        cluster.kill(leader);
        let new_leader = cluster.wait_for_leader(cluster.patience());
        let election = killed.elapsed();
        assert_ne!(new_leader, leader);
        assert_one_leader(&cluster, new_leader);
        let new_epoch = cluster.view(new_leader)["leader"]["epoch"].as_u64().unwrap();
        assert!(new_epoch > old_epoch, "the new term {new_epoch} after {old_epoch}");
        let bound = cluster.ttl + cluster.timings.renew_interval;
        assert!(election <= bound, "a new leader after {election:?}, later than the TTL and a renewal ({bound:?})");

        // Deliveries keep flowing: one enqueued through each survivor; the receiver fails the first one's attempt,
        // so its retry is sent by the new leader's poll.
        receiver.testkit().script([Reply::Status(500)]);
        let retried = enqueued(&cluster, survivors[0], webhook, &json!({"round": round, "retried": true}));
        wait_until("the first attempt", PATIENCE, || receipts(&receiver).get(&retried) == Some(&1));
        let direct = enqueued(&cluster, survivors[1], webhook, &json!({"round": round, "retried": false}));
        wait_until("both deliveries, one of them retried", cluster.patience(), || {
            let receipts = receipts(&receiver);
            receipts.get(&retried) == Some(&2) && receipts.get(&direct) == Some(&1)
        });
        for (id, attempts) in [(retried, 2), (direct, 1)] {
            assert_recorded_delivered(&cluster, new_leader, id, attempts);
        }
        // Fencing visible to receivers (issue 19): the retry the new leader's poll claimed carries its term; an
        // attempt made at once by any survivor carries a term at least as new as the killed leader's.
        let epochs = |id: i64| -> Vec<u64> {
            let received = receiver.received();
            let of_id = received.iter().filter(|request| request.delivery_id() == id);
            of_id.map(|request| request.header("x-gateway-epoch").unwrap().parse().unwrap()).collect()
        };
        let (retried_epochs, direct_epochs) = (epochs(retried), epochs(direct));
        assert_eq!(retried_epochs.last(), Some(&new_epoch), "{retried_epochs:?}");
        assert!(retried_epochs.iter().chain(&direct_epochs).all(|epoch| *epoch >= old_epoch), "{direct_epochs:?}");

        // Reminders keep flowing: each fired once, after the kill by the new leader, and reached the subscriber.
        let jobs: Vec<i64> = {
            let mut jobs = Vec::new();
            wait_until("every reminder's `reminder scheduled` line", PATIENCE, || {
                jobs = cluster.scheduled_jobs().get(&agent).cloned().unwrap_or_default();
                jobs.len() == count as usize
            });
            jobs
        };
        wait_for_fires(&cluster, &jobs, cluster.patience());
        assert_each_fired_once(&cluster, &jobs);
        let fired = cluster.fires_by_job();
        let mut first_by_new_leader = None::<OffsetDateTime>;
        for job in &jobs {
            let fire = &fired[job][0];
            assert!(fire.at > killed_at, "job {job} fired before the kill: scheduling overran");
            assert_eq!(fire.instance, new_leader, "job {job} was fired by {}", cluster.id(fire.instance));
            first_by_new_leader = Some(first_by_new_leader.map_or(fire.at, |first| first.min(fire.at)));
        }
        let mut streamed = BTreeSet::new();
        for _ in 0..count {
            let event = stream.expect("reminder");
            assert_eq!(event.data["agent_id"], agent.as_str());
            assert_eq!(event.id.as_deref(), event.data["fire_id"].as_str(), "the event id is the fire id");
            assert_eq!(event.data["epoch"], new_epoch, "fired by the new leader, under its term");
            streamed.insert(event.data["job_id"].as_i64().unwrap());
        }
        assert_eq!(streamed, jobs.iter().copied().collect(), "the subscriber got each reminder once");

        let resumed = first_by_new_leader.unwrap() - killed_at;
        eprintln!(
            "leader failover (TTL {}): a new leader agreed on after {}, its first reminder fired {:.0} ms after the kill",
            millis(cluster.ttl),
            millis(election),
            resumed.as_seconds_f64() * 1e3
        );

        // The killed instance comes back as a follower; the new leader keeps the lease.
        cluster.restart(leader);
        wait_until("the restarted instance to follow", cluster.patience(), || {
            cluster.leader() == Some(new_leader) && cluster.view(leader)["role"] == "follower"
        });
    }
}

#[test]
fn a_paused_leader_wakes_up_deposed_fires_and_claims_nothing_and_steps_down() {
    let _turn = one_at_a_time();
    let Some(mut cluster) = start("a_paused_leader_wakes_up_deposed_fires_and_claims_nothing_and_steps_down", &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let others = cluster.others(leader);
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook = cluster.create_webhook(others[0], "paused-leader", &receiver.url("/failover"), SECRET);

    // Reminders due from just after the pause until a TTL after the leader wakes, one every TTL/15.
    let pause = cluster.scaled(35, 30);
    let pause_at = Instant::now() + SCHEDULING_TIME;
    let spacing = cluster.scaled(1, 15);
    let due: Vec<Duration> =
        (1..).map(|n| spacing * n).take_while(|offset| *offset <= pause + cluster.ttl).collect::<Vec<_>>();
    let agents = schedule_around(&cluster, &others, "agent-paused", pause_at, &due);
    thread::sleep(pause_at.saturating_duration_since(Instant::now()));
    // Two deliveries whose first attempts (through the followers) fail just before the pause: their retries fall
    // due a second later, while the leader is paused, and are the poll's work, leader-only.
    receiver.testkit().script([Reply::Status(500), Reply::Status(500)]);
    let deliveries: Vec<i64> = others
        .iter()
        .enumerate()
        .map(|(n, index)| enqueued(&cluster, *index, webhook, &json!({"paused": n})))
        .collect();
    wait_until("the first attempts", PATIENCE, || receipts(&receiver).values().sum::<usize>() == 2);

    let paused_at = OffsetDateTime::now_utc();
    let paused = Instant::now();
    cluster.pause(leader);
    let new_leader = cluster.wait_for_leader(cluster.patience());
    let took_over = paused.elapsed();
    assert_ne!(new_leader, leader);
    // Held for the whole pause however early the takeover: what a long stall looks like.
    thread::sleep(pause.saturating_sub(paused.elapsed()));
    let woke_at = cluster.logs(leader).len();
    cluster.resume(leader);
    let resumed = Instant::now();

    // It steps down, says so, and leaves the lease to the new leader.
    wait_until("the woken instance to say it follows", cluster.patience(), || {
        cluster.view(leader)["role"] == "follower"
    });
    wait_until("the woken instance's step-down line", PATIENCE, || {
        cluster.log_entries_from(leader, woke_at).iter().any(|entry| {
            entry["message"] == "stepping down from leadership" && entry["instance_id"] == cluster.id(leader)
        })
    });

    // Everything is done once, by the new leader.
    let jobs = jobs_of(&cluster, &agents);
    wait_for_fires(&cluster, &jobs, cluster.patience());
    wait_until("each delivery's retry", cluster.patience(), || {
        let receipts = receipts(&receiver);
        deliveries.iter().all(|id| receipts.get(id) == Some(&2))
    });
    let after_wake = cluster.log_entries_from(leader, woke_at);
    let acted: Vec<&Value> = after_wake.iter().filter(|entry| entry["message"] == "reminder fired").collect();
    assert!(acted.is_empty(), "the woken instance fired reminders: {acted:?}");
    assert_each_fired_once(&cluster, &jobs);
    for fire in cluster.fires().iter().filter(|fire| fire.instance == leader) {
        assert!(fire.at < paused_at, "{} fired {} after it was paused", cluster.id(leader), fire.fire_id);
    }
    assert_eq!(receipts(&receiver).values().sum::<usize>(), 4, "an attempt was made twice: {:?}", receipts(&receiver));
    for id in &deliveries {
        assert_recorded_delivered(&cluster, new_leader, *id, 2);
    }
    assert_eq!(cluster.leader(), Some(new_leader), "the woken instance took the lease back");
    let said: Vec<String> = after_wake
        .iter()
        .filter(|entry| entry["level"] == "WARN")
        .map(|entry| format!("{} ({})", entry["message"], entry["reason"]))
        .collect();
    eprintln!(
        "paused leader (TTL {}, paused {}): another led after {}; {} reminders fired once each, the last {} after the \
         wake; the woken one warned: {said:?}",
        millis(cluster.ttl),
        millis(pause),
        millis(took_over),
        jobs.len(),
        millis(resumed.elapsed())
    );
}

/// `sha256=<hex>` of `body` under `secret`: an inbound webhook's signature.
fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

/// An inbound webhook, signed, to instance `index`.
fn inbound(cluster: &Cluster, index: usize, webhook: i64, body: &str) -> (u16, Value) {
    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let mut response = agent
        .post(cluster.gateway(index).url(&format!("/gateway/webhooks/{webhook}")))
        .header("x-observatory-signature", signature(SECRET, body.as_bytes()))
        .content_type("application/json")
        .send(body)
        .unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap_or(Value::Null))
}

pub(crate) fn heartbeat(agent_id: &str) -> Value {
    json!({"type": "heartbeat", "agent_id": agent_id, "cluster_id": "failover", "timestamp": "2026-02-22T12:00:00Z"})
}

#[test]
fn while_redis_is_down_nobody_leads_http_serves_nothing_fires_and_due_reminders_fire_once_when_it_is_back() {
    let _turn = one_at_a_time();
    let Some(mut cluster) = start(
        "while_redis_is_down_nobody_leads_http_serves_nothing_fires_and_due_reminders_fire_once_when_it_is_back",
        &[],
    ) else {
        return;
    };
    cluster.wait_for_leader(cluster.patience());
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook = cluster.create_webhook(0, "redis-outage", &receiver.url("/failover"), SECRET);

    // Reminders due through the outage and a TTL after it, one every TTL/15, scheduled before it.
    let outage = cluster.scaled(40, 30);
    let outage_at = Instant::now() + SCHEDULING_TIME;
    let spacing = cluster.scaled(1, 15);
    let due: Vec<Duration> = (1..).map(|n| spacing * n).take_while(|offset| *offset <= outage + cluster.ttl).collect();
    let mut agents = schedule_around(&cluster, &[0, 1, 2], "agent-outage", outage_at, &due);
    thread::sleep(outage_at.saturating_duration_since(Instant::now()));

    cluster.redis.stop();
    let stopped = Instant::now();
    // The leader stops leading within the step-down time of its last renewal, so a little after it from now.
    let step_down = cluster.timings.step_down_after;
    let margin = (cluster.ttl / 10).max(Duration::from_millis(300));
    wait_until("no instance to lead", step_down + margin, || {
        cluster.views().iter().all(|(_, view)| view["role"] == "follower" && view["redis"] == "unreachable")
    });
    let leaderless_at = OffsetDateTime::now_utc();
    let leaderless_after = stopped.elapsed();

    // HTTP serves on every instance: heartbeats, DecisionLogs (with a reminder, due during the outage) and
    // webhook enqueues, by the API and inbound.
    let mut during = Vec::new();
    for index in 0..cluster.len() {
        let gateway = cluster.gateway(index);
        let (status, body) = gateway.post_json("/gateway/heartbeat", &heartbeat(&format!("agent-beating-{index}")));
        assert_eq!(status, 200, "heartbeat to {} without Redis: {body}", cluster.id(index));
        let agent = format!("agent-outage-during-{index}");
        let (status, body) = gateway.post_json("/gateway/messages", &reminder_log(&agent, spacing, &json!({})));
        assert_eq!(status, 202, "DecisionLog to {} without Redis: {body}", cluster.id(index));
        agents.push(agent);
        during.push(enqueued(&cluster, index, webhook, &json!({"during": index})));
        let (status, body) = inbound(&cluster, index, webhook, &format!(r#"{{"inbound":{index}}}"#));
        assert_eq!(status, 202, "inbound webhook to {} without Redis: {body}", cluster.id(index));
        during.push(body["delivery_id"].as_i64().unwrap());
    }
    // Nobody leads for as long as Redis is away (holding the outage is the point).
    while stopped.elapsed() < outage {
        let leaders: Vec<(usize, Value)> =
            cluster.views().into_iter().filter(|(_, view)| view["role"] != "follower").collect();
        assert!(leaders.is_empty(), "an instance leads without Redis: {leaders:?}");
        thread::sleep(Duration::from_millis(50));
    }
    let back_at = OffsetDateTime::now_utc();
    cluster.redis.start_again().unwrap();
    let back = Instant::now();
    let new_leader = cluster.wait_for_leader(cluster.patience());
    let elected = back.elapsed();

    // Every reminder fires once; none while nobody led.
    let jobs = jobs_of(&cluster, &agents);
    wait_for_fires(&cluster, &jobs, cluster.patience());
    assert_each_fired_once(&cluster, &jobs);
    let leaderless: Vec<String> = cluster
        .fires()
        .iter()
        .filter(|fire| fire.at > leaderless_at && fire.at < back_at)
        .map(|fire| format!("{} by {}", fire.fire_id, cluster.id(fire.instance)))
        .collect();
    assert!(leaderless.is_empty(), "fired while nobody led: {leaderless:?}");
    // Every delivery enqueued during the outage went out once (immediate attempts need no leader).
    wait_until("the deliveries enqueued during the outage", cluster.patience(), || {
        let receipts = receipts(&receiver);
        during.iter().all(|id| receipts.contains_key(id))
    });
    let receipts = receipts(&receiver);
    for id in &during {
        assert_eq!(receipts[id], 1, "delivery {id} was sent {} times", receipts[id]);
    }
    eprintln!(
        "redis outage (TTL {}, {} without Redis): leaderless after {}, {} leads {} after Redis was back; {} reminders \
         fired once each",
        millis(cluster.ttl),
        millis(outage),
        millis(leaderless_after),
        cluster.id(new_leader),
        millis(elected),
        jobs.len()
    );
}

/// The agent ids `GET /gateway/agents` lists on instance `index`.
pub(crate) fn listed(cluster: &Cluster, index: usize) -> BTreeSet<String> {
    let (status, body) = cluster.gateway(index).operator_get("/gateway/agents?limit=1000");
    assert_eq!(status, 200, "{body}");
    body["agents"].as_array().unwrap().iter().map(|agent| agent["agent_id"].as_str().unwrap().to_owned()).collect()
}

/// The `agent_evicted` events of `stream` that arrive within `wait`, by agent id.
pub(crate) fn evictions_within(stream: &EventStream, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut evicted = Vec::new();
    while let Some(event) = stream.next_within(deadline.saturating_duration_since(Instant::now())) {
        if event.event == "agent_evicted" {
            evicted.push(event.data["agent_id"].as_str().unwrap_or_default().to_owned());
        }
    }
    evicted
}

#[test]
fn agents_heartbeating_to_any_instance_stay_live_everywhere_and_a_silent_one_is_evicted_once() {
    let _turn = one_at_a_time();
    let threshold = Duration::from_secs(2);
    let check_interval = Duration::from_millis(200);
    let Some(cluster) = start(
        "agents_heartbeating_to_any_instance_stay_live_everywhere_and_a_silent_one_is_evicted_once",
        &["--heartbeat-eviction-threshold-s", "2", "--heartbeat-check-interval-ms", "200"],
    ) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let evictions = cluster.gateway(cluster.others(leader)[0]).subscribe("gateway:agents");

    // The roaming agent heartbeats every 300 ms to each instance in turn (each instance sees it every 900 ms); the
    // loyal one as often, always to the same follower (the leader never sees it directly).
    let bases: Vec<String> = (0..cluster.len()).map(|index| cluster.gateway(index).base.clone()).collect();
    let loyal_to = cluster.gateway(cluster.others(leader)[1]).base.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let beating = {
        let (bases, stop) = (bases.clone(), Arc::clone(&stop));
        thread::spawn(move || {
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(PATIENCE))
                .build()
                .new_agent();
            let mut refused = Vec::new();
            for roaming_to in bases.iter().cycle() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                for (base, agent_id) in [(roaming_to, "agent-roaming"), (&loyal_to, "agent-loyal")] {
                    let sent = agent
                        .post(format!("{base}/gateway/heartbeat"))
                        .content_type("application/json")
                        .send(heartbeat(agent_id).to_string());
                    match sent {
                        Ok(response) if response.status() == 200 => {}
                        Ok(response) => refused.push(format!("{agent_id} to {base}: {}", response.status())),
                        Err(error) => refused.push(format!("{agent_id} to {base}: {error}")),
                    }
                }
                thread::sleep(Duration::from_millis(300));
            }
            refused
        })
    };
    // The silent agent heartbeats once to each instance, then never again.
    let mut last_heartbeat = Instant::now();
    for index in 0..cluster.len() {
        last_heartbeat = Instant::now();
        let (status, body) = cluster.gateway(index).post_json("/gateway/heartbeat", &heartbeat("agent-silent"));
        assert_eq!(status, 200, "{body}");
    }
    let silent = last_heartbeat;

    let mut evicted = Vec::new();
    wait_until("the silent agent's eviction", cluster.patience(), || {
        evicted.extend(evictions_within(&evictions, Duration::from_millis(100)));
        evicted.iter().any(|agent| agent == "agent-silent")
    });
    let evicted_after = silent.elapsed();
    assert!(evicted_after >= threshold, "evicted {evicted_after:?} after its last heartbeat, before the threshold");
    // Nothing else is evicted for another threshold and ten checks (holding is the point: once, and only it).
    evicted.extend(evictions_within(&evictions, threshold + check_interval * 10));
    assert_eq!(evicted, ["agent-silent"], "evictions seen on a follower");
    for index in 0..cluster.len() {
        let what = format!("{} to list the live agents and not the silent one", cluster.id(index));
        wait_until(&what, PATIENCE, || {
            let agents = listed(&cluster, index);
            agents.contains("agent-roaming") && agents.contains("agent-loyal") && !agents.contains("agent-silent")
        });
    }
    stop.store(true, Ordering::SeqCst);
    let refused = beating.join().unwrap();
    assert!(refused.is_empty(), "heartbeats refused: {refused:?}");
}

#[test]
fn a_subscriber_on_one_follower_gets_a_reminder_scheduled_through_the_other_and_fired_by_the_leader() {
    let _turn = one_at_a_time();
    let Some(cluster) =
        start("a_subscriber_on_one_follower_gets_a_reminder_scheduled_through_the_other_and_fired_by_the_leader", &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let [a, b] = cluster.others(leader)[..] else { panic!("three instances") };
    let stream = cluster.gateway(a).subscribe("agent:agent-across:scheduled");
    let (status, body) =
        cluster.schedule_reminder(b, "agent-across", Duration::from_millis(300), &json!({"task": "across"}));
    assert_eq!(status, 202, "{body}");

    let reminder = stream.expect("reminder");
    assert_eq!(reminder.data["agent_id"], "agent-across");
    assert_eq!(reminder.data["payload"], json!({"task": "across"}));
    assert_eq!(reminder.id.as_deref(), reminder.data["fire_id"].as_str());
    let job = reminder.data["job_id"].as_i64().unwrap();
    let scheduled_by: Vec<usize> = (0..cluster.len())
        .filter(|index| {
            cluster.log_entries_from(*index, 0).iter().any(|entry| {
                entry["message"] == "reminder scheduled"
                    && entry["job_id"] == job
                    && entry["agent_id"] == "agent-across"
            })
        })
        .collect();
    assert_eq!(scheduled_by, [b], "scheduled through {}", cluster.id(b));
    wait_for_fires(&cluster, &[job], PATIENCE);
    let fires = &cluster.fires_by_job()[&job];
    assert_eq!(fires.len(), 1, "{fires:?}");
    assert_eq!(fires[0].instance, leader, "fired by {}, not the leader", cluster.id(fires[0].instance));
    assert_eq!(reminder.id.as_deref(), Some(fires[0].fire_id.as_str()));
}

/// An agent away while its reminders fire on the leader connects to a follower later: the follower's stream replays
/// them from the shared mailbox, in firing order, once; then a live one comes through the event bridge.
#[test]
fn an_agent_that_connects_to_a_follower_after_its_reminders_fired_gets_them_from_the_mailbox() {
    let _turn = one_at_a_time();
    let Some(cluster) =
        start("an_agent_that_connects_to_a_follower_after_its_reminders_fired_gets_them_from_the_mailbox", &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let [a, b] = cluster.others(leader)[..] else { panic!("three instances") };
    for n in 0..3u64 {
        let delay = Duration::from_millis(200 + 100 * n);
        let (status, body) = cluster.schedule_reminder(b, "agent-away", delay, &json!({"n": n}));
        assert_eq!(status, 202, "{body}");
    }
    let mut jobs = Vec::new();
    wait_until("the three reminders' `reminder scheduled` lines", PATIENCE, || {
        jobs = cluster.scheduled_jobs().get("agent-away").cloned().unwrap_or_default();
        jobs.len() == 3
    });
    wait_for_fires(&cluster, &jobs, PATIENCE);
    // Logged at the publish; in the mailbox with the completion, a write later.
    wait_until("the three fires in the mailbox", PATIENCE, || {
        mailbox_entries(cluster.database_url(), "agent-away") == 3
    });

    let stream = cluster.gateway(a).subscribe("agent:agent-away:scheduled");
    let replayed: Vec<Value> = (0..3).map(|_| stream.expect("reminder").data["payload"].clone()).collect();
    assert_eq!(replayed, [json!({"n": 0}), json!({"n": 1}), json!({"n": 2})]);
    let (status, body) = cluster.schedule_reminder(b, "agent-away", Duration::from_millis(300), &json!({"n": "live"}));
    assert_eq!(status, 202, "{body}");
    assert_eq!(stream.expect("reminder").data["payload"], json!({"n": "live"}), "nothing came twice before it");
}

/// The mailbox entries of `agent_id` in the shared database.
pub(crate) fn mailbox_entries(database_url: &str, agent_id: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query("SELECT COUNT(*) AS n FROM agent_mailbox WHERE agent_id = $1")
        .bind::<diesel::sql_types::Text, _>(agent_id)
        .get_result::<Count>(&mut connection)
        .unwrap()
        .n
}

/// The kill storm's size, from `GATEWAY_CLUSTER_STORM_*` (small by default, for CI; docs/operations.md has the
/// full run).
#[derive(Debug, Clone, Copy)]
struct StormSize {
    duration: Duration,
    reminders: usize,
    deliveries: usize,
    kill_every: Duration,
}

impl StormSize {
    fn from_env() -> Self {
        let count = |name: &str, default: u64| usize::try_from(env_u64(name).unwrap_or(default)).unwrap();
        Self {
            duration: Duration::from_secs(env_u64("GATEWAY_CLUSTER_STORM_SECONDS").unwrap_or(20)),
            reminders: count("GATEWAY_CLUSTER_STORM_REMINDERS", 200),
            deliveries: count("GATEWAY_CLUSTER_STORM_DELIVERIES", 200),
            kill_every: Duration::from_millis(env_u64("GATEWAY_CLUSTER_STORM_KILL_EVERY_MS").unwrap_or(5_000)),
        }
    }
}

/// What the storm's requests came to, as their client saw them.
#[derive(Debug, Default)]
struct StormRecord {
    /// Requests sent.
    sent: usize,
    /// Agents whose reminder was answered 202 (one reminder per agent).
    reminders: Vec<String>,
    /// Delivery ids answered 201, with their payload's `n`.
    deliveries: Vec<(i64, usize)>,
    /// Requests that got no answer: their instance was killed meanwhile (or was being started again).
    unanswered: usize,
    /// Answers that were neither an acknowledgement nor no answer, with what they said: none is expected.
    refused: Vec<String>,
}

impl StormRecord {
    fn acknowledged(&self) -> usize {
        self.reminders.len() + self.deliveries.len()
    }

    fn add(&mut self, other: Self) {
        self.sent += other.sent;
        self.reminders.extend(other.reminders);
        self.deliveries.extend(other.deliveries);
        self.unanswered += other.unanswered;
        self.refused.extend(other.refused);
    }

    /// A DecisionLog with a reminder for `agent_id` in `delay`, to `base`.
    fn remind(&mut self, agent: &ureq::Agent, base: &str, agent_id: &str, delay: Duration, n: usize) {
        self.sent += 1;
        let log = reminder_log(agent_id, delay, &json!({"n": n}));
        let sent =
            agent.post(format!("{base}/gateway/messages")).content_type("application/json").send(log.to_string());
        match sent {
            Ok(response) if response.status() == 202 => self.reminders.push(agent_id.to_owned()),
            Ok(mut response) => {
                let body = response.body_mut().read_to_string().unwrap_or_default();
                self.refused.push(format!("reminder for {agent_id} to {base}: {} {body}", response.status()));
            }
            Err(_) => self.unanswered += 1,
        }
    }

    /// A delivery carrying `n`, to `base`.
    fn enqueue(&mut self, agent: &ureq::Agent, base: &str, webhook: i64, n: usize) {
        self.sent += 1;
        let enqueue = json!({"webhook_id": webhook, "session_id": "storm", "payload": {"n": n}});
        let sent = agent
            .post(format!("{base}/gateway/deliveries"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .content_type("application/json")
            .send(enqueue.to_string());
        match sent {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let text = response.body_mut().read_to_string().unwrap_or_default();
                let id = serde_json::from_str::<Value>(&text).ok().and_then(|body| body["id"].as_i64());
                match (status, id) {
                    (201, Some(id)) => self.deliveries.push((id, n)),
                    _ => self.refused.push(format!("delivery {n} to {base}: {status} {text}")),
                }
            }
            Err(_) => self.unanswered += 1,
        }
    }
}

fn storm_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .new_agent()
}

/// Sends the storm's reminders and deliveries, evenly spread over `size.duration`, to the instances whose
/// addresses `bases` holds at that moment, in turn.
fn storm_load(bases: &Mutex<Vec<Option<String>>>, webhook: i64, size: StormSize) -> StormRecord {
    let agent = storm_agent();
    let mut record = StormRecord::default();
    let requests = size.reminders.max(size.deliveries);
    let started = Instant::now();
    let mut turn = 0usize;
    for n in 0..requests {
        let at = started + size.duration.mul_f64(n as f64 / requests as f64);
        thread::sleep(at.saturating_duration_since(Instant::now()));
        let mut base = || {
            let bases = bases.lock().unwrap();
            let up: Vec<&String> = bases.iter().flatten().collect();
            turn += 1;
            up[turn % up.len()].clone()
        };
        if n < size.reminders {
            // Due from 50 ms to 3 s later.
            let delay = Duration::from_millis(50 + (n as u64 * 7_919) % 2_950);
            record.remind(&agent, &base(), &format!("agent-storm-{n}"), delay, n);
        }
        if n < size.deliveries {
            record.enqueue(&agent, &base(), webhook, n);
        }
    }
    record
}

/// The reminders of `agents` in the shared database's mailbox.
fn mailbox_total(database_url: &str, agents: &[String]) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query("SELECT COUNT(*) AS n FROM agent_mailbox WHERE agent_id = ANY($1)")
        .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(agents)
        .get_result::<Count>(&mut connection)
        .unwrap()
        .n
}

/// `agent_id`'s reminders as the agent reads them (`GET /gateway/agents/{id}/reminders`, through instance `index`):
/// `(fire_id, scheduled_for, fired_at)` each.
pub(crate) fn agent_reminders(
    cluster: &Cluster,
    index: usize,
    agent_id: &str,
) -> Vec<(String, OffsetDateTime, OffsetDateTime)> {
    let (status, body) = cluster.gateway(index).operator_get(&format!("/gateway/agents/{agent_id}/reminders"));
    assert_eq!(status, 200, "{agent_id}'s reminders through {}: {body}", cluster.id(index));
    let instant = |value: &Value| {
        OffsetDateTime::parse(value.as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap()
    };
    body["reminders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let fire_id = entry["fire_id"].as_str().unwrap().to_owned();
            (fire_id, instant(&entry["scheduled_for"]), instant(&entry["fired_at"]))
        })
        .collect()
}

/// How long the storm's last work may take once the kills stop: a delivery enqueued on an instance killed before
/// its first attempt waits for its 30 s safety net, one killed mid-attempt for its claim (the attempt timeout plus
/// 5 s); then the leader's next poll.
const STORM_DRAIN: Duration = Duration::from_secs(60);
/// Reminders scheduled, before each kill, to come due just after it: the leader has claimed them (50 ms ahead) and
/// dies before publishing them. A new term must take them over at once, not when the dead claim's lease ends.
const DUE_AT_THE_KILL_MS: [u64; 4] = [10, 20, 30, 40];

/// The leader is killed every `kill_every` while reminders and deliveries go in through whichever instances are up.
/// Every request to a running instance is answered, none with a 5xx (or any refusal), and at least 90 % are
/// acknowledged; every acknowledged reminder reaches its agent (its mailbox, read through the API, holds it once)
/// and every acknowledged delivery its receiver; and the reminders' lateness, as the agents received them
/// (`fired_at` against `scheduled_for`), stays within a failover and a second at the 99th percentile, the ones the
/// killed leader had claimed included.
#[test]
fn kill_storm_loses_no_acknowledged_reminder_or_delivery() {
    let _turn = one_at_a_time();
    let size = StormSize::from_env();
    let Some(mut cluster) =
        start("kill_storm_loses_no_acknowledged_reminder_or_delivery", &["--webhook-max-per-cycle", "50"])
    else {
        return;
    };
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook = cluster.create_webhook(0, "storm", &receiver.url("/storm"), SECRET);
    cluster.wait_for_leader(cluster.patience());

    let bases =
        Arc::new(Mutex::new((0..cluster.len()).map(|index| Some(cluster.gateway(index).base.clone())).collect()));
    let load = {
        let bases = Arc::clone(&bases);
        thread::spawn(move || storm_load(&bases, webhook, size))
    };
    // Every `kill_every`, the leader of the moment (if the instances agree on one) is killed and started again;
    // reminders due right after each kill are scheduled well before it.
    let agent = storm_agent();
    let mut at_the_kills = StormRecord::default();
    let started = Instant::now();
    let mut kills = 0;
    let mut next_kill = started + size.kill_every;
    while next_kill < started + size.duration {
        let scheduled_at = Instant::now();
        let through = cluster.gateway(cluster.up()[kills % cluster.up().len()]).base.clone();
        for (n, offset) in DUE_AT_THE_KILL_MS.iter().enumerate() {
            let delay = (next_kill + Duration::from_millis(*offset)).saturating_duration_since(scheduled_at);
            at_the_kills.remind(&agent, &through, &format!("agent-storm-kill-{kills}-{n}"), delay, n);
        }
        thread::sleep((next_kill - Duration::from_millis(300)).saturating_duration_since(Instant::now()));
        let leader = cluster.leader();
        thread::sleep(next_kill.saturating_duration_since(Instant::now()));
        next_kill += size.kill_every;
        let Some(leader) = leader else { continue };
        bases.lock().unwrap()[leader] = None;
        cluster.kill(leader);
        kills += 1;
        cluster.restart(leader);
        bases.lock().unwrap()[leader] = Some(cluster.gateway(leader).base.clone());
    }
    let mut record = load.join().unwrap();
    record.add(at_the_kills);
    let storm_time = started.elapsed();

    // Every request to an instance that was up was answered, and none refused; most were acknowledged.
    assert!(kills > 0, "no leader was killed");
    assert!(record.refused.is_empty(), "refusals from running instances: {:#?}", record.refused);
    let acknowledged_share = record.acknowledged() as f64 / record.sent as f64;
    assert!(
        acknowledged_share >= 0.9,
        "only {} of {} requests acknowledged ({} unanswered)",
        record.acknowledged(),
        record.sent,
        record.unanswered
    );

    let agents = record.reminders.clone();
    let delivery_ids: BTreeSet<i64> = record.deliveries.iter().map(|(id, _)| *id).collect();
    let drain = Instant::now();
    let drained = {
        let deadline = drain + STORM_DRAIN + cluster.ttl * 2;
        loop {
            let received = receipts(&receiver);
            let done = mailbox_total(cluster.database_url(), &agents) >= i64::try_from(agents.len()).unwrap()
                && delivery_ids.iter().all(|id| received.contains_key(id));
            if done || Instant::now() > deadline {
                break done;
            }
            thread::sleep(Duration::from_millis(100));
        }
    };
    let drain_time = drain.elapsed();

    // What each agent received: its mailbox, read through the API of the instances in turn.
    let mut lost_reminders = Vec::new();
    let mut lateness_ms: Vec<i64> = Vec::new();
    for (n, agent_id) in agents.iter().enumerate() {
        let reminders = agent_reminders(&cluster, n % cluster.len(), agent_id);
        match &reminders[..] {
            [] => lost_reminders.push(agent_id.clone()),
            [(_, scheduled_for, fired_at)] => {
                lateness_ms.push(i64::try_from((*fired_at - *scheduled_for).whole_milliseconds()).unwrap())
            }
            more => panic!("{agent_id} received its one reminder {} times: {more:?}", more.len()),
        }
    }
    let lateness: gateway_testkit::Sample<i64> = lateness_ms.iter().copied().collect();
    let received = receipts(&receiver);
    let lost_deliveries: Vec<i64> = delivery_ids.iter().copied().filter(|id| !received.contains_key(id)).collect();
    let resent: usize = delivery_ids.iter().filter_map(|id| received.get(id)).map(|count| count - 1).sum();
    // A delivery sent twice is the same delivery (one id per enqueued payload), never a copy.
    let mut ids_by_payload: BTreeMap<u64, BTreeSet<i64>> = BTreeMap::new();
    for request in receiver.received() {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        if let Some(n) = body["n"].as_u64() {
            ids_by_payload.entry(n).or_default().insert(request.delivery_id());
        }
    }
    let copies: Vec<(&u64, &BTreeSet<i64>)> = ids_by_payload.iter().filter(|(_, ids)| ids.len() > 1).collect();

    let failover = cluster.ttl + cluster.timings.renew_interval;
    let p99 = lateness.percentile(99.0).unwrap_or(0);
    eprintln!(
        "cluster kill storm (TTL {}): {kills} leaders killed in {:.1} s, one every {}; drained {:.1} s later",
        millis(cluster.ttl),
        storm_time.as_secs_f64(),
        millis(size.kill_every),
        drain_time.as_secs_f64()
    );
    eprintln!(
        "  requests: {} sent, {} acknowledged ({:.1} %), {} unanswered (their instance was killed), {} refused",
        record.sent,
        record.acknowledged(),
        acknowledged_share * 100.0,
        record.unanswered,
        record.refused.len()
    );
    eprintln!(
        "  reminders: {} acknowledged, {} lost; lateness as received p50 {} ms, p99 {p99} ms, max {} ms (bound: \
         failover {} + 1 s); deliveries: {} acknowledged, {} lost, {resent} sent again (same delivery id)",
        agents.len(),
        lost_reminders.len(),
        lateness.percentile(50.0).unwrap_or(0),
        lateness.max().unwrap_or(0),
        millis(failover),
        delivery_ids.len(),
        lost_deliveries.len(),
    );
    assert!(lost_reminders.is_empty(), "acknowledged reminders never reached their agents: {lost_reminders:?}");
    assert!(lost_deliveries.is_empty(), "acknowledged deliveries never received: {lost_deliveries:?}");
    assert!(copies.is_empty(), "one payload sent under several delivery ids: {copies:?}");
    assert!(drained, "the storm's work was not done {STORM_DRAIN:?} after it");
    let bound = i64::try_from((failover + Duration::from_secs(1)).as_millis()).unwrap();
    assert!(
        p99 <= bound,
        "reminder lateness p99 {p99} ms is over a failover and a second ({bound} ms): a new leader waited out the \
         dead one's claims?\n{}",
        cluster.story()
    );
}

/// The `(job_id, scheduled_for)` of the next reminder on `stream`.
fn next_reminder(stream: &EventStream) -> (i64, OffsetDateTime) {
    let reminder = stream.expect("reminder");
    let scheduled_for = reminder.data["scheduled_for"].as_str().unwrap();
    let scheduled_for = OffsetDateTime::parse(scheduled_for, &time::format_description::well_known::Rfc3339).unwrap();
    (reminder.data["job_id"].as_i64().unwrap(), scheduled_for)
}

/// A job paused through one follower stops firing on the leader (the claim refuses a paused row, whatever the
/// leader's window holds), and resumed through the other it fires once for the instants it missed, then on its
/// schedule. The leader's own stream, where one loop publishes every fire in instant order, is the clock: a witness
/// job of the same agent fires every second throughout.
#[test]
fn a_job_paused_and_resumed_through_followers_stops_on_the_leader_and_fires_once_for_what_it_missed() {
    let _turn = one_at_a_time();
    let Some(cluster) = start("a_job_paused_and_resumed_through_followers", &[]) else { return };
    let leader = cluster.wait_for_leader(cluster.patience());
    let [a, b] = cluster.others(leader)[..] else { panic!("three instances") };
    let stream = cluster.gateway(leader).subscribe("agent:agent-paused:scheduled");
    let create = |job: &str| {
        let body = json!({"agent_id": "agent-paused", "schedule": "* * * * * *", "payload": {"job": job}});
        let (status, created) = cluster.gateway(a).operator_post("/gateway/cron/jobs", &body);
        assert_eq!(status, 201, "{created}");
        created["id"].as_i64().unwrap()
    };
    let (job, witness) = (create("paused"), create("witness"));
    let mut fired = BTreeSet::new();
    while fired.len() < 2 {
        fired.insert(next_reminder(&stream).0);
    }

    let (status, paused) = cluster.gateway(a).operator_post(&format!("/gateway/cron/jobs/{job}/pause"), &json!({}));
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let instant = |value: &Value| {
        OffsetDateTime::parse(value.as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap()
    };
    let paused_at = instant(&paused["next_fire_at"]);
    // A fire claimed (up to 50 ms ahead) before the pause landed may still go out, for `paused_at`; none after it.
    loop {
        let (job_id, scheduled_for) = next_reminder(&stream);
        if job_id == job {
            assert!(scheduled_for <= paused_at, "the paused job fired for {scheduled_for}:\n{}", cluster.story());
        } else if job_id == witness && scheduled_for >= paused_at + time::Duration::seconds(3) {
            break;
        }
    }
    let (_, shown) = cluster.gateway(b).operator_get(&format!("/gateway/cron/jobs/{job}"));
    assert_eq!(shown["paused"], true, "every instance shows the job paused: {shown}");
    let frozen = instant(&shown["next_fire_at"]);

    let (status, resumed) = cluster.gateway(b).operator_post(&format!("/gateway/cron/jobs/{job}/resume"), &json!({}));
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)), "{resumed}");
    let mut fires = Vec::new();
    while fires.len() < 2 {
        let (job_id, scheduled_for) = next_reminder(&stream);
        if job_id == job {
            fires.push(scheduled_for);
        }
    }
    // The witness fired for `paused_at + 3 s` before the resume: the newest missed instant is that one or later.
    assert!(fires[0] > frozen && fires[0] >= paused_at + time::Duration::seconds(3), "one fire, the newest: {fires:?}");
    assert!(fires[1] > fires[0], "then the schedule: {fires:?}");
    let by_job = cluster.fires_by_job();
    assert!(by_job[&job].iter().all(|fire| fire.instance == leader), "fired by the leader only");
}

/// A heartbeat for `agent_id` to instance `index` with `token`: the status.
fn heartbeat_as(cluster: &Cluster, index: usize, agent_id: &str, token: &str) -> u16 {
    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let response = agent
        .post(&cluster.gateway(index).url("/gateway/heartbeat"))
        .header("authorization", &format!("Bearer {token}"))
        .content_type("application/json")
        .send(heartbeat(agent_id).to_string())
        .unwrap();
    response.status().as_u16()
}

/// Issues a credential for `agent_id` through instance `index`: its id and token.
fn issue_credential(cluster: &Cluster, index: usize, agent_id: &str) -> (String, String) {
    let (status, body) =
        cluster.gateway(index).operator_post(&format!("/gateway/agents/{agent_id}/credentials"), &json!({}));
    assert_eq!(status, 201, "{body}");
    (body["credential_id"].as_str().unwrap().to_owned(), body["token"].as_str().unwrap().to_owned())
}

/// A credential revoked through one instance is refused by the others that had it cached: at once through the
/// revocation event, and, with Redis down so that no event can travel, through their poll of the shared database
/// (docs/architecture.md, "Agent credentials"). A poll confirms every entry it does not find revoked, so one that
/// missed the revocation would keep the cached credential accepted for good: the refusal is the poll's doing (with
/// the store's poll query answering nothing, this test fails). The poll also closes the event stream the agent had
/// open on another instance.
#[test]
fn a_credential_revoked_on_one_instance_is_refused_by_the_others_by_event_and_by_poll_with_redis_down() {
    let _turn = one_at_a_time();
    let Some(mut cluster) = start(
        "a_credential_revoked_on_one_instance_is_refused_by_the_others_by_event_and_by_poll_with_redis_down",
        &["--agent-auth", "required"],
    ) else {
        return;
    };
    let revoke = |cluster: &Cluster, agent_id: &str, credential_id: &str| {
        let (status, body) =
            cluster.gateway(0).operator_delete(&format!("/gateway/agents/{agent_id}/credentials/{credential_id}"));
        assert_eq!((status, body["status"].as_str()), (200, Some("revoked")), "{body}");
    };

    // By the event: milliseconds, far within the poll's second.
    let (first_id, first) = issue_credential(&cluster, 0, "agent-revoked-by-event");
    for index in [1, 2] {
        assert_eq!(heartbeat_as(&cluster, index, "agent-revoked-by-event", &first), 200, "cached on {index}");
    }
    revoke(&cluster, "agent-revoked-by-event", &first_id);
    let revoked = Instant::now();
    assert_eq!(heartbeat_as(&cluster, 0, "agent-revoked-by-event", &first), 401, "refused where it was revoked");
    for index in [1, 2] {
        wait_until(&format!("instance {index} to refuse the revoked token"), Duration::from_secs(5), || {
            heartbeat_as(&cluster, index, "agent-revoked-by-event", &first) == 401
        });
    }
    let by_event = revoked.elapsed();

    // By the poll, with Redis down.
    let (second_id, second) = issue_credential(&cluster, 0, "agent-revoked-by-poll");
    for index in [1, 2] {
        assert_eq!(heartbeat_as(&cluster, index, "agent-revoked-by-poll", &second), 200, "cached on {index}");
    }
    let stream = EventStream::open(
        &cluster.gateway(2).url("/gateway/events?topic=agent:agent-revoked-by-poll:scheduled"),
        Some(&second),
    );
    cluster.redis.stop();
    // Entries keep being confirmed by the polls meanwhile: still accepted a few seconds on.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(heartbeat_as(&cluster, 1, "agent-revoked-by-poll", &second), 200, "cached and confirmed");
    revoke(&cluster, "agent-revoked-by-poll", &second_id);
    let revoked = Instant::now();
    for index in [1, 2] {
        wait_until(
            &format!("instance {index} to refuse the revoked token without Redis"),
            Duration::from_secs(5),
            || heartbeat_as(&cluster, index, "agent-revoked-by-poll", &second) == 401,
        );
    }
    let by_poll = revoked.elapsed();
    assert!(stream.ended_within(Duration::from_secs(5)), "the stream opened with it is closed by the poll");
    eprintln!("revocation reached the other instances in {by_event:?} by event, {by_poll:?} by poll");
}

/// `GET /gateway/cluster` lists the members heard from within the lease TTL on every instance: each lists both,
/// the leader as `leader` with its epoch, the other as `follower`, their version; a killed follower drops out of the
/// survivor's list once its last record is a TTL old (docs/operations.md, "Cluster members").
#[test]
fn each_instance_lists_every_member_and_a_killed_one_drops_out_after_the_ttl() {
    let _turn = one_at_a_time();
    let test = "each_instance_lists_every_member_and_a_killed_one_drops_out_after_the_ttl";
    let Some(mut cluster) = Cluster::start(&format!("it::cluster::{test}"), 2, &CLUSTER_ARGS) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let follower = cluster.others(leader)[0];
    let members = |view: &Value| -> Vec<(String, String)> {
        view["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|member| {
                (member["instance_id"].as_str().unwrap().to_owned(), member["role"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let mut both = vec![
        (cluster.id(leader).to_owned(), "leader".to_owned()),
        (cluster.id(follower).to_owned(), "follower".to_owned()),
    ];
    both.sort();
    for index in [leader, follower] {
        wait_until("both members listed", cluster.patience(), || members(&cluster.view(index)) == both);
    }
    let view = cluster.view(follower);
    for member in view["members"].as_array().unwrap() {
        assert_eq!(member["version"], env!("CARGO_PKG_VERSION"), "{view}");
        let epoch = if member["role"] == "leader" { view["leader"]["epoch"].clone() } else { Value::Null };
        assert_eq!(member["epoch"], epoch, "{view}");
        assert!(member["last_heard_at"].as_str().is_some_and(|at| !at.is_empty()), "{view}");
    }

    let killed = Instant::now();
    cluster.kill(follower);
    let alone = vec![(cluster.id(leader).to_owned(), "leader".to_owned())];
    wait_until("the killed follower to drop out", cluster.patience(), || members(&cluster.view(leader)) == alone);
    // Not before its last record could be a TTL old: a member is listed for the TTL, not forgotten at once.
    let gone_after = killed.elapsed();
    assert!(gone_after >= cluster.ttl - cluster.timings.renew_interval * 2, "dropped out after {gone_after:?}");
}

fn config_on(cluster: &Cluster, index: usize, webhook: i64) -> Value {
    let (status, body) = cluster.gateway(index).operator_get(&format!("/gateway/webhook-configs/{webhook}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn delivery_on(cluster: &Cluster, index: usize, id: i64) -> Value {
    let (status, body) = cluster.gateway(index).operator_get(&format!("/gateway/deliveries/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// Issue 20 on two instances: the disable that the leader's retries cause is what the follower answers at once, a
/// delivery enqueued through the follower is held (not attempted by it), and enabling through the follower lets the
/// leader send everything.
#[test]
fn a_disabled_endpoint_is_disabled_on_every_instance_and_enabling_it_anywhere_resumes_it() {
    let _turn = one_at_a_time();
    let mut args = CLUSTER_ARGS.to_vec();
    args.extend_from_slice(&["--webhook-disable-after-failures", "2"]);
    let test = "it::cluster::a_disabled_endpoint_is_disabled_on_every_instance_and_enabling_it_anywhere_resumes_it";
    let Some(cluster) = Cluster::start(test, 2, &args) else { return };
    let leader = cluster.wait_for_leader(cluster.patience());
    let follower = cluster.others(leader)[0];
    let receiver = Receiver::start(Behaviour::Status(500));
    let webhook = cluster.create_webhook(leader, "disabled-everywhere", &receiver.url("/hook"), SECRET);
    let first = enqueued(&cluster, leader, webhook, &json!({"n": 1}));

    let deadline = Instant::now() + cluster.patience();
    while config_on(&cluster, follower, webhook)["enabled"] != json!(false) {
        assert!(Instant::now() < deadline, "not disabled: {}", config_on(&cluster, follower, webhook));
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(config_on(&cluster, follower, webhook)["disabled_reason"], "failing");
    let attempts = receiver.count();
    let second = enqueued(&cluster, follower, webhook, &json!({"n": 2}));
    assert_eq!(delivery_on(&cluster, leader, second)["next_retry_at"], Value::Null, "held");
    thread::sleep(Duration::from_millis(1_500));
    assert_eq!(receiver.count(), attempts, "no instance attempts a disabled endpoint");

    receiver.set(Behaviour::Status(204));
    let (status, body) = cluster
        .gateway(follower)
        .operator_patch(&format!("/gateway/webhook-configs/{webhook}"), &json!({"enabled": true}));
    assert_eq!((status, &body["enabled"]), (200, &json!(true)), "{body}");
    assert_eq!(config_on(&cluster, leader, webhook)["enabled"], true, "the leader answers it at once");
    let deadline = Instant::now() + cluster.patience();
    for id in [first, second] {
        while delivery_on(&cluster, leader, id)["status"] != "delivered" {
            assert!(Instant::now() < deadline, "not delivered: {}", delivery_on(&cluster, leader, id));
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `gateway_agents_live` as instance `index` reports it.
fn live_agents(cluster: &Cluster, index: usize) -> f64 {
    let (status, body) = cluster.gateway(index).try_operator_get("/metrics").unwrap();
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("gateway_agents_live ")?.parse().ok())
        .unwrap_or_else(|| panic!("no gateway_agents_live in /metrics:\n{text}"))
}

/// The tracked-agent cap is the cluster's (docs/architecture.md): the agents live through one instance reach the
/// others' figure through the cluster's count, which one instance takes for all and the others read
/// (`gateway_live_count`); then a new agent is refused by every instance, and a known one still updates through
/// any of them (after a look-up on an instance that never saw it).
#[test]
fn a_cluster_at_its_cap_refuses_new_agents_on_every_instance() {
    let _turn = one_at_a_time();
    let Some(cluster) =
        start("a_cluster_at_its_cap_refuses_new_agents_on_every_instance", &["--max-tracked-agents", "2"])
    else {
        return;
    };
    for agent_id in ["agent-a", "agent-b"] {
        assert_eq!(cluster.gateway(0).post_json("/gateway/heartbeat", &heartbeat(agent_id)).0, 200);
    }
    // Every instance comes to the count (one that admitted agents just before a count may overstate it by those
    // until the next: its tallies are a flusher pass apart).
    for index in 0..cluster.len() {
        wait_until("the cluster's count on every instance", cluster.patience(), || live_agents(&cluster, index) == 2.0);
    }
    for index in 1..cluster.len() {
        let (status, body) = cluster.gateway(index).post_json("/gateway/heartbeat", &heartbeat("agent-new"));
        assert_eq!((status, body["reason"].as_str()), (503, Some("heartbeat_manager_unavailable")), "instance {index}");
        let known = cluster.gateway(index).post_json("/gateway/heartbeat", &heartbeat("agent-a")).0;
        assert_eq!(known, 200, "a known agent updates through instance {index}");
    }
}
