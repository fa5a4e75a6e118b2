//! Redis is not trusted, and loses nothing durable (docs/architecture.md, "The bridge's trust model" and "Durable
//! events across instances"): real gateways on one PostgreSQL database and one Redis (support/cluster.rs), attacked
//! through a raw Redis client as someone with access to Redis but not the cluster secret would, and with Redis
//! taken away while reminders fire.
//!
//! Every reminder is judged by what each agent stream received (its id, payload, and when it came, against the
//! fire's own timestamp), never by the instances' logs. The tests take turns, with the other cluster tests' lock
//! (they share two cores, and their timings are what they check).

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use gateway_core::{Event, EventPayload};
use gateway_pubsub::PublishedEvent;
use gateway_pubsub::bridge::ClusterKeys;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support::cluster::{CLUSTER_SECRET, Cluster, Setup};
use crate::support::{EventStream, Gateway, PATIENCE, gateway_command};

/// How late a fired reminder may reach a stream on any instance, whatever Redis lost (DESIGN 14).
const DELIVERY_BOUND: Duration = Duration::from_secs(5);

/// One cluster test at a time, in this module and it/cluster.rs alike.
fn one_at_a_time() -> gateway_testkit::HeavyTurn {
    crate::cluster::one_at_a_time()
}

fn start(test: &str, size: usize, setup: Setup, extra_args: &[&str]) -> Option<Cluster> {
    Cluster::start_with(&format!("it::cluster_trust::{test}"), size, setup, extra_args)
}

fn wait_until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for: {what}");
        thread::sleep(Duration::from_millis(25));
    }
}

/// A raw connection to the cluster's Redis, as anyone who can reach it has.
fn raw_redis(cluster: &Cluster) -> redis::Connection {
    redis::Client::open(cluster.redis.url()).unwrap().get_connection().unwrap()
}

fn publish(redis: &mut redis::Connection, channel: &str, message: &[u8]) {
    let _: i64 = redis::cmd("PUBLISH").arg(channel).arg(message).query(redis).unwrap();
}

/// The value of the unlabelled series `name` in instance `index`'s `/metrics`.
fn metric(gateway: &Gateway, name: &str) -> f64 {
    let (status, body) = gateway.try_operator_get("/metrics").unwrap();
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// `schedule_reminder` for `agent_id` through instance `index`: the fire id it will fire under.
fn schedule(cluster: &Cluster, index: usize, agent_id: &str, delay: Duration, payload: &Value) -> String {
    let call = json!({
        "agent_id": agent_id,
        "tool_call_id": format!("call-{}", OffsetDateTime::now_utc().unix_timestamp_nanos()),
        "params": {"delay_ms": delay.as_millis(), "payload": payload},
    });
    let (status, body) = cluster.gateway(index).post_json("/gateway/tools/schedule_reminder", &call);
    assert_eq!(status, 200, "{body}");
    format!("{}:{}", body["result"]["job_id"], body["result"]["fire_at"].as_str().unwrap())
}

/// The `agent:<id>:scheduled` stream of every instance.
fn streams(cluster: &Cluster, agent_id: &str) -> Vec<EventStream> {
    (0..cluster.len()).map(|index| cluster.gateway(index).subscribe(&format!("agent:{agent_id}:scheduled"))).collect()
}

/// A reminder as one stream received it.
#[derive(Debug, Clone)]
struct Received {
    fire_id: String,
    payload: Value,
    /// The fire's own time (the event's `timestamp`), and when the stream had it.
    fired_at: OffsetDateTime,
    received_at: OffsetDateTime,
}

impl Received {
    fn lateness(&self) -> Duration {
        Duration::try_from(self.received_at - self.fired_at).unwrap_or_default()
    }
}

/// Lets the catch-ups a stream makes a second after it connected pass (`CATCH_UPS_AFTER_CONNECT`; the next is 15 s
/// later): a fire after this reaches the stream live, or through the mailbox feed, not through those.
fn past_the_first_catch_up() {
    thread::sleep(Duration::from_millis(1_500));
}

/// Reads every stream, round robin, until each has a reminder for every fire id of `wanted` or `within` has passed;
/// returns what each received (reminders only, by fire id; a reminder received twice keeps its first arrival).
fn collect(streams: &[EventStream], wanted: &[&str], within: Duration) -> Vec<BTreeMap<String, Received>> {
    let deadline = Instant::now() + within;
    let mut received: Vec<BTreeMap<String, Received>> = vec![BTreeMap::new(); streams.len()];
    while Instant::now() < deadline {
        let done = received.iter().all(|got| wanted.iter().all(|id| got.contains_key(*id)));
        if done {
            break;
        }
        for (stream, got) in streams.iter().zip(&mut received) {
            while let Some(event) = stream.next_within(Duration::from_millis(5)) {
                if event.event != "reminder" {
                    continue;
                }
                let received_at = OffsetDateTime::now_utc();
                let fired_at = OffsetDateTime::parse(event.data["timestamp"].as_str().unwrap(), &Rfc3339).unwrap();
                let fire_id = event.id.clone().unwrap();
                got.entry(fire_id.clone()).or_insert(Received {
                    fire_id,
                    payload: event.data["payload"].clone(),
                    fired_at,
                    received_at,
                });
            }
        }
    }
    received
}

/// Every stream got the reminder `fire_id` with `payload`, each within [`DELIVERY_BOUND`] of its fire.
fn assert_every_stream_got(cluster: &Cluster, received: &[BTreeMap<String, Received>], fire_id: &str, payload: &Value) {
    for (index, got) in received.iter().enumerate() {
        let Some(reminder) = got.get(fire_id) else {
            panic!("{} never received {fire_id}; it got {got:?}\n{}", cluster.id(index), cluster.story())
        };
        assert_eq!(reminder.fire_id, fire_id);
        assert_eq!(&reminder.payload, payload, "{}", cluster.id(index));
        assert!(
            reminder.lateness() <= DELIVERY_BOUND,
            "{} received {fire_id} {:?} after it fired\n{}",
            cluster.id(index),
            reminder.lateness(),
            cluster.story()
        );
    }
}

/// The store's newest fencing token.
fn stored_epoch(database_url: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Epoch {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        epoch: i64,
    }
    let mut connection = PgConnection::establish(database_url).unwrap();
    diesel::sql_query("SELECT epoch FROM gateway_leader_epoch WHERE id = 1")
        .get_result::<Epoch>(&mut connection)
        .unwrap()
        .epoch
}

/// A reminder event as the gateway would publish it, for `agent_id`, naming `fire_id`.
fn reminder_event(fire_id: &str, agent_id: &str, payload: &Value) -> PublishedEvent {
    let (job_id, at) = fire_id.split_once(':').unwrap();
    let at = OffsetDateTime::parse(at, &Rfc3339).unwrap();
    let event = Event::with_id(
        fire_id,
        EventPayload::Reminder {
            job_id: job_id.parse().unwrap(),
            agent_id: gateway_core::AgentId::new(agent_id).unwrap(),
            scheduled_for: at,
            payload: payload.as_object().cloned().unwrap(),
            fire_id: fire_id.to_owned(),
            epoch: 1,
        },
        at,
    );
    PublishedEvent::of(&event)
}

/// What the issue's attacker did, on the current wire format and the old one, without the cluster secret: a reminder
/// published on an agent's channel (naming that agent, and naming another agent), and one under the fire id the
/// gateway was about to use. No stream receives any of them, nothing is written to the mailbox, each is counted as
/// rejected; the real reminder then reaches every instance's stream with its own payload; the warning says nothing of
/// what was sent.
#[test]
fn a_forged_publish_on_an_agent_topic_reaches_no_stream_and_writes_nothing() {
    let _turn = one_at_a_time();
    let Some(cluster) =
        start("a_forged_publish_on_an_agent_topic_reaches_no_stream_and_writes_nothing", 2, Setup::default(), &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let streams = streams(&cluster, "agent-x");
    let real_payload = json!({"task": "the real one"});
    let fire_id = schedule(&cluster, 1 - leader, "agent-x", Duration::from_secs(3), &real_payload);

    let mut redis = raw_redis(&cluster);
    let channel = "gateway:events:agent:agent-x:scheduled";
    let forged = json!({"task": "forged", "marker": "forged-content-7f3a"});
    let stranger = ClusterKeys::new(b"not the cluster secret, but long enough", None).unwrap();
    let now = OffsetDateTime::now_utc();
    for (fire, agent) in [("999:2026-01-01T00:00:00Z", "agent-x"), ("998:2026-01-01T00:00:00Z", "agent-y")] {
        let event = reminder_event(fire, agent, &forged);
        let unsigned = [format!("1\ngw-a\nreminder\n{fire}\n").as_bytes(), event.json_bytes()].concat();
        publish(&mut redis, channel, &unsigned);
        publish(&mut redis, channel, &stranger.seal(channel, "gw-a", now, &event));
    }
    // The fire id the gateway is about to use, announced early: it must not stand for the real fire.
    publish(&mut redis, channel, &stranger.seal(channel, "gw-a", now, &reminder_event(&fire_id, "agent-x", &forged)));
    let unsigned = [format!("1\ngw-b\nreminder\n{fire_id}\n").as_bytes(), br#"{"payload":{}}"#].concat();
    publish(&mut redis, channel, &unsigned);

    let received = collect(&streams, &[&fire_id], PATIENCE);
    assert_every_stream_got(&cluster, &received, &fire_id, &real_payload);
    for (index, got) in received.iter().enumerate() {
        assert_eq!(got.keys().collect::<Vec<_>>(), [&fire_id], "{} received a forged reminder", cluster.id(index));
    }
    wait_until("the real fire's completion", PATIENCE, || {
        crate::cluster::mailbox_entries(cluster.database_url(), "agent-x") == 1
    });
    thread::sleep(Duration::from_millis(500));
    assert_eq!(crate::cluster::mailbox_entries(cluster.database_url(), "agent-x"), 1, "only the real fire is recorded");
    assert_eq!(crate::cluster::mailbox_entries(cluster.database_url(), "agent-y"), 0);
    for index in 0..cluster.len() {
        let rejected = metric(cluster.gateway(index), "gateway_bridge_rejected_total");
        assert!(rejected >= 6.0, "{}: {rejected} rejected", cluster.id(index));
        let logs = cluster.logs(index);
        assert!(logs.contains("event bridge dropped messages that failed verification"), "{}", cluster.id(index));
        assert!(!logs.contains("forged-content-7f3a"), "a rejected message's content was logged");
    }
}

/// A revocation is not taken on Redis's word: a forged `credential_revoked` (unsigned, and even one signed with the
/// cluster secret, as from an instance that was broken into) refuses no valid token anywhere; a real revocation
/// still does, at once.
#[test]
fn a_forged_credential_revoked_does_not_refuse_a_valid_token() {
    let _turn = one_at_a_time();
    let Some(cluster) = start(
        "a_forged_credential_revoked_does_not_refuse_a_valid_token",
        2,
        Setup::default(),
        &["--agent-auth", "required"],
    ) else {
        return;
    };
    cluster.wait_for_leader(cluster.patience());
    let (status, issued) = cluster.gateway(0).operator_post("/gateway/agents/agent-z/credentials", &json!({}));
    assert_eq!(status, 201, "{issued}");
    let (credential_id, token) = (issued["credential_id"].as_str().unwrap(), issued["token"].as_str().unwrap());
    let heartbeat = |index: usize| heartbeat_as(cluster.gateway(index), "agent-z", token);
    for index in 0..cluster.len() {
        assert_eq!(heartbeat(index), 200, "cached on {}", cluster.id(index));
    }

    let mut redis = raw_redis(&cluster);
    let channel = "gateway:events:internal:credential-revocations";
    let revoked = Event::new(
        EventPayload::CredentialRevoked { credential_id: credential_id.to_owned() },
        OffsetDateTime::now_utc(),
    );
    let revoked = PublishedEvent::of(&revoked);
    let unsigned =
        [format!("1\ngw-a\ncredential_revoked\n{}\n", revoked.id()).as_bytes(), revoked.json_bytes()].concat();
    let insider = ClusterKeys::new(CLUSTER_SECRET.as_bytes(), None).unwrap();
    for _ in 0..3 {
        publish(&mut redis, channel, &unsigned);
        publish(&mut redis, channel, &insider.seal(channel, "gw-x", OffsetDateTime::now_utc(), &revoked));
    }
    // Before, the token was refused for 60 s; now it keeps working on every instance.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for index in 0..cluster.len() {
            assert_eq!(heartbeat(index), 200, "{} refused a valid token on a forged revocation", cluster.id(index));
        }
        thread::sleep(Duration::from_millis(100));
    }

    let (status, body) =
        cluster.gateway(0).operator_delete(&format!("/gateway/agents/agent-z/credentials/{credential_id}"));
    assert_eq!(status, 200, "{body}");
    for index in 0..cluster.len() {
        wait_until(&format!("{} to refuse the revoked token", cluster.id(index)), Duration::from_secs(5), || {
            heartbeat(index) == 401
        });
    }
}

fn heartbeat(agent_id: &str) -> Value {
    json!({"type": "heartbeat", "agent_id": agent_id, "cluster_id": "trust", "timestamp": "2026-02-22T12:00:00Z"})
}

fn heartbeat_as(gateway: &Gateway, agent_id: &str, token: &str) -> u16 {
    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let body = heartbeat(agent_id);
    agent
        .post(&gateway.url("/gateway/heartbeat"))
        .header("authorization", &format!("Bearer {token}"))
        .content_type("application/json")
        .send(body.to_string())
        .unwrap()
        .status()
        .as_u16()
}

/// `SET gateway:leader:epoch 9223372036854775806`, then the lease taken away: no instance leads with that epoch (an
/// error line says why and what to do), the store's epoch stays where it was, HTTP keeps serving; after the
/// documented fix (`DEL gateway:leader:epoch`) an instance leads again, one term above the store's newest.
#[test]
fn a_forged_epoch_takes_no_leadership_and_deleting_it_lets_the_cluster_lead_again() {
    let _turn = one_at_a_time();
    let Some(cluster) = start(
        "a_forged_epoch_takes_no_leadership_and_deleting_it_lets_the_cluster_lead_again",
        2,
        Setup::default(),
        &[],
    ) else {
        return;
    };
    let first = cluster.wait_for_leader(cluster.patience());
    let first_epoch = cluster.view(first)["leader"]["epoch"].as_i64().unwrap();
    let mut redis = raw_redis(&cluster);
    let _: () = redis::cmd("SET").arg("gateway:leader:epoch").arg("9223372036854775806").query(&mut redis).unwrap();
    let _: () = redis::cmd("DEL").arg("gateway:leader").query(&mut redis).unwrap();

    wait_until("the leader to step down, and nobody to lead", cluster.patience(), || {
        cluster.views().iter().all(|(_, view)| view["role"] == "follower")
    });
    wait_until("an error saying why", cluster.patience(), || {
        (0..cluster.len()).any(|index| {
            cluster.log_entries_from(index, 0).iter().any(|entry| {
                entry["level"] == "ERROR"
                    && entry["message"].as_str().is_some_and(|message| message.contains("Leader epoch recovery"))
            })
        })
    });
    // Several acquire intervals: still nobody leads, and the store was never driven up.
    let until = Instant::now() + cluster.ttl;
    while Instant::now() < until {
        assert!(cluster.views().iter().all(|(_, view)| view["role"] == "follower"), "{:?}", cluster.views());
        thread::sleep(Duration::from_millis(100));
    }
    let stored = stored_epoch(cluster.database_url());
    assert!(stored < 1 << 32, "the store's epoch went to {stored}");
    for index in 0..cluster.len() {
        let (status, body) = cluster.gateway(index).post_json("/gateway/heartbeat", &heartbeat("agent-e"));
        assert_eq!(status, 200, "{} keeps serving: {body}", cluster.id(index));
    }
    let refusals: f64 =
        (0..cluster.len()).map(|index| metric(cluster.gateway(index), "gateway_leader_epoch_refusals_total")).sum();
    assert!(refusals >= 1.0);

    let _: () = redis::cmd("DEL").arg("gateway:leader:epoch").query(&mut redis).unwrap();
    let leader = cluster.wait_for_leader(cluster.patience());
    let epoch = cluster.view(leader)["leader"]["epoch"].as_i64().unwrap();
    // The instance that led before remembers its own term, which need not have reached the store: its new term is
    // above that one too, so its token never goes down.
    let floor = if leader == first { stored.max(first_epoch) } else { stored };
    assert_eq!(epoch, floor + 1, "one term above the store's newest (and the instance's own last term)");
}

/// `--redis-url` without `--cluster-secret`, or with one shorter than 32 bytes: exit 2 with one line naming the
/// flag, and never the secret.
#[test]
fn redis_without_a_cluster_secret_of_32_bytes_exits_2_naming_the_flag() {
    let base = ["--listen", "127.0.0.1:0", "--database-url", "postgres://gateway@127.0.0.1:1/gateway"];
    let redis = ["--redis-url", "redis://127.0.0.1:1/"];
    for extra in [&[][..], &["--cluster-secret", "hunter2-is-far-too-short"][..]] {
        let output = gateway_command().args(base).args(redis).args(extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{extra:?}: {stderr}");
        assert!(stderr.contains("--cluster-secret"), "{extra:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    let output = gateway_command()
        .args(base)
        .args(redis)
        .env("GATEWAY_CLUSTER_SECRET", "hunter2-from-the-environment")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cluster-secret") && !stderr.contains("hunter2"), "{stderr}");
}

/// `rediss://` against a redis-server with TLS that requires client certificates: the lease is taken (a leader is
/// elected), and events cross instances over the bridge (a DecisionLog's event reaches an operator stream on the
/// other instance: only the bridge carries those).
#[test]
fn a_cluster_on_rediss_elects_a_leader_and_its_events_cross() {
    let _turn = one_at_a_time();
    let Some(cluster) = start(
        "a_cluster_on_rediss_elects_a_leader_and_its_events_cross",
        2,
        Setup { tls: true, ..Setup::default() },
        &[],
    ) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    assert_eq!(cluster.view(leader)["redis"], "ok");
    let follower = 1 - leader;
    let stream = cluster.gateway(follower).subscribe("gateway:messages");
    let deadline = Instant::now() + PATIENCE;
    let mut attempt = 0;
    let crossed = loop {
        assert!(Instant::now() < deadline, "no decision_log crossed over rediss://\n{}", cluster.story());
        attempt += 1;
        let log = json!({
            "meta": {"trace_id": format!("tls-{attempt}"), "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "agent-tls", "agent_type": "trust", "capability_version": "1.0"},
            "action": {"status": "success"}
        });
        let (status, body) = cluster.gateway(leader).post_json("/gateway/messages", &log);
        assert_eq!(status, 202, "{body}");
        if let Some(event) = stream.next_within(Duration::from_millis(500)) {
            break event;
        }
    };
    assert_eq!(crossed.event, "decision_log");
    assert_eq!(crossed.data["identity"]["agent_id"], "agent-tls");
    assert_eq!(metric(cluster.gateway(leader), "gateway_bridge_rejected_total"), 0.0);
    assert!(cluster.logs(leader).contains("leadership taken"));
}

/// The issue's outage: three instances with the production lease (the leader keeps its term for 20 s without
/// Redis), an agent stream on each. Redis stopped for 24 s: a reminder the leader fires a second into the outage
/// (its publish fails) reaches every stream within 5 s of its fire while Redis is still down, through the store
/// alone; one accepted during the outage by a follower, due after Redis is back (empty), reaches every stream within
/// 5 s of its fire too. (Without the path through the store the first would come only when the subscriptions return,
/// 20 s late, and the firing instance's own stream alone would have it in time.)
#[test]
fn reminders_fired_during_and_after_a_redis_outage_reach_every_instances_stream_within_5_s() {
    let _turn = one_at_a_time();
    let setup = Setup { ttl: Some(Duration::from_secs(30)), ..Setup::default() };
    let Some(mut cluster) =
        start("reminders_fired_during_and_after_a_redis_outage_reach_every_instances_stream_within_5_s", 3, setup, &[])
    else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let follower = cluster.others(leader)[0];
    let streams = streams(&cluster, "agent-outage");
    past_the_first_catch_up();
    let outage = Duration::from_secs(24);
    cluster.redis.stop();
    let stopped = Instant::now();

    let during = json!({"task": "fired while redis is down"});
    let during_id = schedule(&cluster, leader, "agent-outage", Duration::from_secs(1), &during);
    let received = collect(&streams, &[&during_id], PATIENCE);
    assert_every_stream_got(&cluster, &received, &during_id, &during);
    assert!(stopped.elapsed() < outage, "received while redis was still down");

    let after = json!({"task": "accepted during the outage, due after it"});
    let due = outage.saturating_sub(stopped.elapsed()) + Duration::from_secs(4);
    let after_id = schedule(&cluster, follower, "agent-outage", due, &after);
    thread::sleep(outage.saturating_sub(stopped.elapsed()));
    cluster.redis.start_again().unwrap();
    let received = collect(&streams, &[&after_id], cluster.patience() + Duration::from_secs(4));
    assert_every_stream_got(&cluster, &received, &after_id, &after);
}

/// The firing side's failure alone: Redis up, the subscriptions up, but `PUBLISH` refused to the gateways (an ACL),
/// so only the store can carry the leader's fire to the other instances; it does, within 5 s.
#[test]
fn a_reminder_whose_publish_redis_refuses_reaches_every_stream_through_the_store() {
    let _turn = one_at_a_time();
    let Some(cluster) = start(
        "a_reminder_whose_publish_redis_refuses_reaches_every_stream_through_the_store",
        3,
        Setup::default(),
        &[],
    ) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let streams = streams(&cluster, "agent-durable");
    past_the_first_catch_up();
    let mut redis = raw_redis(&cluster);
    let _: () = redis::cmd("ACL").arg("SETUSER").arg("default").arg("-publish").query(&mut redis).unwrap();
    let refused = json!({"task": "publish refused"});
    let refused_id = schedule(&cluster, leader, "agent-durable", Duration::from_millis(500), &refused);
    let received = collect(&streams, &[&refused_id], PATIENCE);
    assert_every_stream_got(&cluster, &received, &refused_id, &refused);
    assert!(metric(cluster.gateway(leader), "gateway_bridge_send_failed_total") >= 1.0, "the publish failed");
    let recovered: f64 = cluster
        .others(leader)
        .into_iter()
        .map(|index| metric(cluster.gateway(index), "gateway_reminders_recovered_total"))
        .sum();
    assert!(recovered >= 2.0, "the other instances got it from the store: {recovered}");
}

/// The Redis ACL of docs/operations.md ("Redis ACLs"), as written there, applied to the test's Redis with a password
/// of the test's own, the default user turned off; the URL of the `gateway` user.
fn documented_acl(redis: &gateway_testkit::redis::RedisServer) -> String {
    const PASSWORD: &str = "acl-test-password-5d1c";
    let operations = include_str!("../../../../docs/operations.md");
    let block = operations
        .split("```\nACL SETUSER gateway")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/operations.md has the ACL block");
    let text = format!("ACL SETUSER gateway{block}").replace("\\\n", " ").replace("A-LONG-RANDOM-PASSWORD", PASSWORD);
    let mut connection = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let _: () = redis::cmd(words[0])
            .arg(&words[1..])
            .query(&mut connection)
            .unwrap_or_else(|error| panic!("{line}: {error}"));
    }
    format!("redis://gateway:{PASSWORD}@127.0.0.1:{}/", redis.port())
}

/// The gateways under the Redis user docs/operations.md gives them (their keys, their channels, the commands they
/// use): leadership, events across instances, reminders, the agent rate limit and the outbound rate all work, and no
/// command is refused.
#[test]
fn the_documented_redis_acl_lets_the_cluster_do_all_it_does() {
    let _turn = one_at_a_time();
    let setup = Setup { prepare_redis: Some(documented_acl), ..Setup::default() };
    let Some(cluster) = start(
        "the_documented_redis_acl_lets_the_cluster_do_all_it_does",
        2,
        setup,
        &["--agent-rate-limit-per-minute", "600", "--webhook-max-per-second", "50"],
    ) else {
        return;
    };
    let leader = cluster.wait_for_leader(cluster.patience());
    let follower = 1 - leader;
    assert_eq!(cluster.view(follower)["leader"]["instance_id"], cluster.id(leader), "HMGET of the term");
    let streams = streams(&cluster, "agent-acl");
    past_the_first_catch_up();
    let payload = json!({"task": "under the acl"});
    let fire_id = schedule(&cluster, follower, "agent-acl", Duration::from_millis(500), &payload);
    let received = collect(&streams, &[&fire_id], PATIENCE);
    assert_every_stream_got(&cluster, &received, &fire_id, &payload);

    let receiver = crate::receiver::Receiver::start(crate::receiver::Behaviour::Status(200));
    let webhook = cluster.create_webhook(leader, "acl", &receiver.url("/hook"), "acl-webhook-secret");
    let (status, body) = cluster.enqueue(follower, webhook, &json!({"n": 1}));
    assert_eq!(status, 201, "{body}");
    wait_until("the delivery", PATIENCE, || receiver.count() >= 1);

    for index in 0..cluster.len() {
        assert_eq!(metric(cluster.gateway(index), "gateway_bridge_send_failed_total"), 0.0, "{}", cluster.id(index));
        let logs = cluster.logs(index);
        assert!(!logs.contains("NOPERM") && !logs.contains("NOSCRIPT"), "{}:\n{}", cluster.id(index), cluster.story());
        assert!(
            !logs.contains("redis unreachable"),
            "{}: a Redis command failed:\n{}",
            cluster.id(index),
            cluster.story()
        );
    }
}
