//! Ten gateways on one PostgreSQL database and one Redis (support/cluster.rs), the cluster of DESIGN.md §15: one
//! leader agreed on by all ten, every agent listed by every instance whichever one it heartbeats to, each silent
//! agent evicted once (one `agent_evicted` event, one `agent evicted` line in the whole cluster), each reminder
//! fired once and received once by a subscriber on an instance other than the one it was scheduled through; and
//! through it all the leader and two followers killed with SIGKILL at the same instant: a new leader within the
//! lease, and nothing the clients had acknowledged lost.
//!
//! Loss is judged from what the clients saw: the reminders answered 202 against what the subscribers received and
//! what `GET /gateway/agents/{id}/reminders` lists, the silent agents against the `gateway:agents` streams. The
//! instances' logs only add the count of fires and eviction lines.
//!
//! Short intervals through the flags (lease TTL `GATEWAY_FAILOVER_LEASE_TTL_MS`, 3 s unless set; eviction threshold
//! 3 s, checked every 200 ms), so that the whole run takes tens of seconds; it takes the heavy-test turn like the
//! three-instance tests. docs/benchmarks.md ("Ten instances") has its figures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{agent_reminders, assert_one_leader, heartbeat, listed, millis, one_at_a_time, wait_until};
use crate::support::cluster::{Cluster, env_u64};
use crate::support::{EventStream, PATIENCE, SseEvent};

const SIZE: usize = 10;
/// `--heartbeat-eviction-threshold-s`: long enough for ten listings of every agent before the silent ones go.
const THRESHOLD: Duration = Duration::from_secs(3);
const ARGS: [&str; 4] = ["--heartbeat-eviction-threshold-s", "3", "--heartbeat-check-interval-ms", "200"];
/// Time given to open the subscribers and schedule the reminders before the kill.
const SCHEDULING_TIME: Duration = Duration::from_secs(6);

/// How many agents heartbeat throughout (`GATEWAY_TEN_LIVE_AGENTS`) and how many reminders are scheduled before
/// the kill (`GATEWAY_TEN_REMINDERS`; a tenth more go in while nobody leads).
fn sizes() -> (usize, usize) {
    let count = |name: &str, default: u64| usize::try_from(env_u64(name).unwrap_or(default)).unwrap();
    (count("GATEWAY_TEN_LIVE_AGENTS", 20), count("GATEWAY_TEN_REMINDERS", 40))
}

/// One reminder as its client saw it: scheduled through `through` (answered 202), awaited on `stream` (an
/// `agent:<agent>:scheduled` subscription on another instance).
struct Reminder {
    agent: String,
    through: usize,
    subscribed_on: usize,
    stream: EventStream,
    received: Vec<SseEvent>,
}

/// Opens the reminder's subscription on `subscribed_on`, then schedules it through `through` due in `delay`.
fn remind(cluster: &Cluster, agent: String, through: usize, subscribed_on: usize, delay: Duration) -> Reminder {
    assert_ne!(through, subscribed_on, "a subscriber on the instance it was scheduled through proves nothing");
    let stream = cluster.gateway(subscribed_on).subscribe(&format!("agent:{agent}:scheduled"));
    let (status, body) = cluster.schedule_reminder(through, &agent, delay, &json!({"agent": agent}));
    assert_eq!(status, 202, "reminder for {agent} through {}: {body}", cluster.id(through));
    Reminder { agent, through, subscribed_on, stream, received: Vec::new() }
}

/// Heartbeats for `agents`, each to the next instance of `bases` that is up in turn, until `stop`: the statuses
/// other than 200 from instances that were up, and how many went unanswered (their instance died under them).
fn beat(bases: &Mutex<Vec<Option<String>>>, agents: &[String], stop: &AtomicBool) -> (Vec<String>, usize) {
    let client =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let (mut refused, mut unanswered) = (Vec::new(), 0);
    let mut turn = 0usize;
    while !stop.load(Ordering::SeqCst) {
        for agent_id in agents {
            let base = {
                let bases = bases.lock().unwrap();
                let up: Vec<&String> = bases.iter().flatten().collect();
                turn += 1;
                up[turn % up.len()].clone()
            };
            let sent = client
                .post(format!("{base}/gateway/heartbeat"))
                .content_type("application/json")
                .send(heartbeat(agent_id).to_string());
            match sent {
                Ok(response) if response.status() == 200 => {}
                Ok(response) => refused.push(format!("{agent_id} to {base}: {}", response.status())),
                Err(_) => unanswered += 1,
            }
        }
        thread::sleep(Duration::from_millis(300));
    }
    (refused, unanswered)
}

/// Peak and current resident memory of process `pid` in MiB, from /proc (Linux).
fn memory_mib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
            / 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Connections to the cluster's database other than this one's.
fn database_connections(database_url: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query(
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .get_result::<Count>(&mut connection)
    .unwrap()
    .n
}

/// Every `agent_evicted` event that reaches `stream` within `wait`, added to `seen`.
fn collect_evictions(stream: &EventStream, wait: Duration, seen: &mut Vec<String>) {
    let deadline = Instant::now() + wait;
    while let Some(event) = stream.next_within(deadline.saturating_duration_since(Instant::now())) {
        if event.event == "agent_evicted" {
            seen.push(event.data["agent_id"].as_str().unwrap_or_default().to_owned());
        }
    }
}

#[test]
fn ten_instances_agree_list_every_agent_evict_and_remind_once_and_lose_nothing_when_three_are_killed() {
    let _turn = one_at_a_time();
    let run = Instant::now();
    let (live_count, reminder_count) = sizes();
    let Some(mut cluster) = Cluster::start("it::cluster_ten", SIZE, &ARGS) else { return };
    let started = run.elapsed();
    let leader = cluster.wait_for_leader(cluster.patience());
    assert_one_leader(&cluster, leader);
    // The leader and two followers die together later: the subscribers and the eviction watchers sit on the others.
    let doomed: Vec<usize> = [leader].into_iter().chain(cluster.others(leader).into_iter().rev().take(2)).collect();
    let survivors: Vec<usize> = (0..SIZE).filter(|index| !doomed.contains(index)).collect();
    let watchers: Vec<(usize, EventStream)> = [survivors[0], survivors[survivors.len() - 1]]
        .into_iter()
        .map(|index| (index, cluster.gateway(index).subscribe("gateway:agents")))
        .collect();

    // Agents that keep heartbeating, each to the next instance up every time.
    let live: Vec<String> = (0..live_count).map(|n| format!("ten-live-{n}")).collect();
    let bases: Arc<Mutex<Vec<Option<String>>>> =
        Arc::new(Mutex::new((0..SIZE).map(|index| Some(cluster.gateway(index).base.clone())).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let beating = {
        let (bases, live, stop) = (Arc::clone(&bases), live.clone(), Arc::clone(&stop));
        thread::spawn(move || beat(&bases, &live, &stop))
    };
    for index in 0..SIZE {
        wait_until(&format!("{} to list every live agent", cluster.id(index)), PATIENCE, || {
            let listed = listed(&cluster, index);
            live.iter().all(|agent| listed.contains(agent))
        });
    }

    // Silent agents, one heartbeat each to an instance of its own, listed by all ten before they are evicted.
    let beat_once = |cluster: &Cluster, index: usize, agent: &str| {
        let (status, body) = cluster.gateway(index).post_json("/gateway/heartbeat", &heartbeat(agent));
        assert_eq!(status, 200, "heartbeat of {agent} to {}: {body}", cluster.id(index));
    };
    let early_silent: Vec<String> = (0..SIZE).map(|index| format!("ten-silent-{index}")).collect();
    let silent_since = Instant::now();
    for (index, agent) in early_silent.iter().enumerate() {
        beat_once(&cluster, index, agent);
    }
    for index in 0..SIZE {
        let listed = listed(&cluster, index);
        let missing: Vec<&String> = live.iter().chain(&early_silent).filter(|agent| !listed.contains(*agent)).collect();
        assert!(missing.is_empty(), "{} does not list {missing:?}", cluster.id(index));
    }
    let listed_after = silent_since.elapsed();
    assert!(listed_after < THRESHOLD, "listing ten instances took {listed_after:?}: the silent ones may be gone");

    // Reminders, scheduled through every instance (the doomed ones too: what they acknowledged must not be lost),
    // each awaited by a subscriber on a survivor other than the instance it goes through. Due around the kill:
    // a few before it (the first leader fires them), none in its last half second (a fire published but not yet
    // completed would be fired again, under the same id, by the next leader), four 30–45 ms after it (claimed by
    // the dying leader, 50 ms ahead, and left for the next: 30 ms is the kill's margin for being late), the rest
    // over the TTL after it.
    let kill_at = Instant::now() + SCHEDULING_TIME;
    let ttl = cluster.ttl;
    let due = |n: usize| -> Instant {
        let quarter = reminder_count / 4;
        if n < quarter {
            kill_at - Duration::from_millis(2_500)
                + Duration::from_millis(2_000) * u32::try_from(n).unwrap() / u32::try_from(quarter).unwrap()
        } else if n < quarter + 4 {
            kill_at + Duration::from_millis(25 + 5 * (n - quarter + 1) as u64)
        } else {
            kill_at + ttl.mul_f64((n - quarter - 3) as f64 / (reminder_count - quarter - 3) as f64)
        }
    };
    let mut reminders: Vec<Reminder> = (0..reminder_count)
        .map(|n| {
            let through = n % SIZE;
            let others: Vec<usize> = survivors.iter().copied().filter(|index| *index != through).collect();
            let on = others[n % others.len()];
            remind(&cluster, format!("ten-remind-{n}"), through, on, due(n).saturating_duration_since(Instant::now()))
        })
        .collect();
    assert!(Instant::now() < kill_at - Duration::from_millis(1_000), "scheduling overran: the machine is overloaded");
    thread::sleep((kill_at - Duration::from_millis(1_000)).saturating_duration_since(Instant::now()));

    // More silent agents, a second before the kill, to the doomed instances too: the next leader evicts them.
    let late_silent: Vec<String> = (0..SIZE).map(|index| format!("ten-silent-late-{index}")).collect();
    for (index, agent) in late_silent.iter().enumerate() {
        beat_once(&cluster, index, agent);
    }
    // Asked before the kill, not at it: ten answers take longer than the kill's margin.
    assert_eq!(cluster.leader(), Some(leader), "leadership moved before the kill\n{}", cluster.story());
    thread::sleep(kill_at.saturating_duration_since(Instant::now()));

    // The leader and two followers, killed at the same instant.
    {
        let mut bases = bases.lock().unwrap();
        for index in &doomed {
            bases[*index] = None;
        }
    }
    let killed = Instant::now();
    for index in &doomed {
        cluster.kill(*index);
    }
    // Reminders acknowledged while nobody leads, due at once.
    for n in 0..reminder_count.div_ceil(10) {
        let through = survivors[n % survivors.len()];
        let on = survivors[(n + 1) % survivors.len()];
        reminders.push(remind(&cluster, format!("ten-remind-leaderless-{n}"), through, on, Duration::from_millis(1)));
    }
    let new_leader = cluster.wait_for_leader(cluster.patience());
    let election = killed.elapsed();
    assert!(!doomed.contains(&new_leader));
    assert_one_leader(&cluster, new_leader);
    let bound = cluster.ttl + cluster.timings.renew_interval;
    assert!(election <= bound, "a new leader after {election:?}, later than the TTL and a renewal ({bound:?})");

    // Every reminder reached its subscriber.
    for reminder in &mut reminders {
        let deadline = Instant::now() + cluster.patience();
        while reminder.received.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match reminder.stream.next_within(left.min(Duration::from_millis(200))) {
                Some(event) if event.event == "reminder" => reminder.received.push(event),
                Some(_) => {}
                None => assert!(
                    Instant::now() < deadline,
                    "{}'s reminder (acknowledged through {}) never reached its subscriber on {}\n{}",
                    reminder.agent,
                    cluster.id(reminder.through),
                    cluster.id(reminder.subscribed_on),
                    cluster.story()
                ),
            }
        }
    }

    // Every silent agent evicted, seen by both watchers; then a threshold and ten checks more, for any second one.
    let silent: BTreeSet<String> = early_silent.iter().chain(&late_silent).cloned().collect();
    let mut evicted: Vec<Vec<String>> = vec![Vec::new(); watchers.len()];
    for ((index, stream), seen) in watchers.iter().zip(&mut evicted) {
        wait_until(&format!("every silent agent's eviction on {}", cluster.id(*index)), cluster.patience(), || {
            collect_evictions(stream, Duration::from_millis(100), seen);
            silent.iter().all(|agent| seen.contains(agent))
        });
    }
    let hold = THRESHOLD + Duration::from_millis(200) * 10;
    for ((_, stream), seen) in watchers.iter().zip(&mut evicted) {
        collect_evictions(stream, hold, seen);
    }
    for reminder in &mut reminders {
        while let Some(event) = reminder.stream.next_within(Duration::ZERO) {
            if event.event == "reminder" {
                reminder.received.push(event);
            }
        }
    }

    // Reminders: each received once, under one fire id, and listed once for its agent under that id.
    let mut fire_ids = BTreeMap::new();
    for (n, reminder) in reminders.iter().enumerate() {
        let ids: Vec<Option<&str>> = reminder.received.iter().map(|event| event.id.as_deref()).collect();
        assert_eq!(ids.len(), 1, "{} received its reminder {} times: {ids:?}", reminder.agent, ids.len());
        let fire_id = ids[0].unwrap().to_owned();
        let job = reminder.received[0].data["job_id"].as_i64().unwrap();
        let listed = agent_reminders(&cluster, survivors[n % survivors.len()], &reminder.agent);
        let listed_ids: Vec<&str> = listed.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(listed_ids, [fire_id.as_str()], "{}'s reminders as the API lists them", reminder.agent);
        fire_ids.insert(job, fire_id);
    }
    // ... and fired once in the whole cluster, by the instances' logs (the killed ones' included): one line, or,
    // when the kill came late enough for the dying leader to publish one of the reminders due just after it, its
    // line and the next leader's under the same fire id (a publish the dead term did not complete, sent again: a
    // subscriber gets it once, which is checked above). Anything else is a reminder fired twice.
    let fires = cluster.fires_by_job();
    let mut republished = 0;
    for (job, fire_id) in &fire_ids {
        let logged: Vec<(&str, &str)> = fires
            .get(job)
            .map(|fires| fires.iter().map(|fire| (cluster.id(fire.instance), fire.fire_id.as_str())).collect())
            .unwrap_or_default();
        match &logged[..] {
            [(_, id)] if id == fire_id => {}
            [(one, first), (other, second)]
                if first == fire_id
                    && second == fire_id
                    && BTreeSet::from([*one, *other])
                        == BTreeSet::from([cluster.id(leader), cluster.id(new_leader)]) =>
            {
                republished += 1;
            }
            _ => panic!("job {job} ({fire_id}) fired {} times: {logged:?}", logged.len()),
        }
    }
    let fired_by_first = fire_ids.keys().filter(|job| fires[*job][0].instance == leader).count();

    // Evictions: each silent agent once on each watcher's stream, no agent that kept heartbeating, and one
    // `agent evicted` line per silent agent across all ten instances' logs.
    for ((index, _), seen) in watchers.iter().zip(&evicted) {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for agent in seen {
            *counts.entry(agent.as_str()).or_default() += 1;
        }
        let twice: Vec<(&&str, &usize)> = counts.iter().filter(|(_, count)| **count > 1).collect();
        assert!(twice.is_empty(), "evicted more than once, seen on {}: {twice:?}", cluster.id(*index));
        let wrongly: Vec<&&str> = counts.keys().filter(|agent| live.iter().any(|live| live == **agent)).collect();
        assert!(wrongly.is_empty(), "agents that kept heartbeating were evicted: {wrongly:?}");
    }
    let mut lines: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for index in 0..SIZE {
        for entry in cluster.log_entries_from(index, 0) {
            if entry["message"] == "agent evicted" {
                let agent = entry["agent_id"].as_str().unwrap_or_default().to_owned();
                lines.entry(agent).or_default().push(cluster.id(index));
            }
        }
    }
    for agent in &silent {
        let by = lines.get(agent).cloned().unwrap_or_default();
        assert_eq!(by.len(), 1, "{agent}: `agent evicted` logged by {by:?}");
    }
    let late_by: BTreeSet<&str> = late_silent.iter().flat_map(|agent| lines[agent].iter().copied()).collect();
    assert_eq!(late_by, BTreeSet::from([cluster.id(new_leader)]), "the late silent agents' evictions");
    for index in cluster.up() {
        let listed = listed(&cluster, index);
        let missing: Vec<&String> = live.iter().filter(|agent| !listed.contains(*agent)).collect();
        let kept: Vec<&String> = silent.iter().filter(|agent| listed.contains(*agent)).collect();
        assert!(missing.is_empty() && kept.is_empty(), "{}: missing {missing:?}, silent {kept:?}", cluster.id(index));
    }

    // The three come back as followers of the new leader, and list every live agent too.
    for index in &doomed {
        cluster.restart(*index);
        bases.lock().unwrap()[*index] = Some(cluster.gateway(*index).base.clone());
    }
    wait_until("all ten to follow the new leader", cluster.patience(), || cluster.leader() == Some(new_leader));
    assert_one_leader(&cluster, new_leader);
    for index in &doomed {
        wait_until(&format!("{} to list every live agent", cluster.id(*index)), PATIENCE, || {
            let listed = listed(&cluster, *index);
            live.iter().all(|agent| listed.contains(agent))
        });
    }
    let connections = database_connections(cluster.database_url());
    stop.store(true, Ordering::SeqCst);
    let (refused, unanswered) = beating.join().unwrap();
    assert!(refused.is_empty(), "heartbeats refused by running instances: {refused:?}");

    let memory: Vec<(u64, u64)> = survivors.iter().map(|index| memory_mib(cluster.gateway(*index).pid())).collect();
    let peak = memory.iter().map(|(peak, _)| *peak).max().unwrap();
    let rss: Vec<u64> = memory.iter().map(|(_, rss)| *rss).collect();
    eprintln!(
        "ten instances (TTL {}): started in {}; {} live agents listed by all ten; {} silent agents evicted once each \
         ({} by the first leader, {} by the next); {} reminders acknowledged ({} while nobody led), each received \
         once on another instance ({} fired by the first leader); killed {} together, a new leader ({}) after {}; \
         {republished} published by the dying leader and again by the next; {unanswered} heartbeats unanswered by \
         the dying; whole run {:.1} s",
        millis(cluster.ttl),
        millis(started),
        live.len(),
        silent.len(),
        early_silent.len(),
        late_silent.len(),
        reminders.len(),
        reminder_count.div_ceil(10),
        fired_by_first,
        doomed.iter().map(|index| cluster.id(*index)).collect::<Vec<_>>().join(", "),
        cluster.id(new_leader),
        millis(election),
        run.elapsed().as_secs_f64()
    );
    eprintln!(
        "  memory of the seven that ran throughout: peak RSS up to {peak} MiB, now {rss:?} MiB; {connections} \
         connections to PostgreSQL from the ten"
    );
}
