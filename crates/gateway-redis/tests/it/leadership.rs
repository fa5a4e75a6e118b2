use std::sync::Arc;
use std::time::Duration;

use gateway_core::{BackgroundLoop, EpochGate, FencingEpoch, FencingToken, Leadership};
use gateway_redis::leadership::{EPOCH_KEY, LEADER_KEY};
use gateway_redis::{LeadershipConfig, LeadershipPorts, RedisLeadership, RedisReachability, Role};
use gateway_testkit::redis::RedisServer;
use redis::AsyncCommands;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{connection, eventually, small};

struct Instance {
    leadership: RedisLeadership,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Instance {
    fn start(name: &str, redis: &RedisServer, store: &Arc<EpochGate>) -> Self {
        let epoch: Arc<dyn FencingEpoch> = store.clone();
        let leadership = RedisLeadership::new(
            LeadershipPorts { redis: redis::Client::open(redis.url()).unwrap(), epoch },
            LeadershipConfig { instance_id: name.into(), timings: small() },
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let (leadership, shutdown) = (leadership.clone(), shutdown.clone());
            async move { leadership.run(shutdown).await }
        });
        Self { leadership, shutdown, task }
    }

    fn current(&self) -> Option<FencingToken> {
        self.leadership.current()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

fn leaders(instances: &[Instance]) -> Vec<(usize, FencingToken)> {
    instances.iter().enumerate().filter_map(|(index, i)| i.current().map(|token| (index, token))).collect()
}

async fn holder(redis: &RedisServer) -> Option<String> {
    connection(&redis.url()).await.get(LEADER_KEY).await.unwrap()
}

/// Waits until exactly one instance leads; returns its index and token.
async fn one_leader(instances: &[Instance]) -> (usize, FencingToken) {
    eventually("a leader", || async {
        let leaders = leaders(instances);
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        leaders.first().copied()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_three_instances_leads_and_the_others_see_it() {
    let Some(redis) = RedisServer::start_or_skip("exactly_one_of_three_instances_leads_and_the_others_see_it") else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    let instances: Vec<_> = ["a", "b", "c"].iter().map(|name| Instance::start(name, &redis, &store)).collect();
    let (leader, token) = one_leader(&instances).await;
    // Over several renewals (2 s is four of them), never a second leader, and always the same one.
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        assert_eq!(leaders(&instances), [(leader, token)]);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let leader_id = instances[leader].leadership.instance_id().to_owned();
    assert_eq!(holder(&redis).await.as_deref(), Some(leader_id.as_str()));
    let follower = &instances[(leader + 1) % 3];
    let status = follower.leadership.cluster_status().await;
    assert_eq!(status.role, Role::Follower);
    assert_eq!(status.redis, RedisReachability::Ok);
    let seen = status.leader.unwrap();
    assert_eq!((seen.instance_id.as_str(), seen.epoch), (leader_id.as_str(), Some(token)));
    assert_eq!(instances[leader].leadership.term().unwrap().since, seen.since.unwrap());
    let json = serde_json::to_value(instances[leader].leadership.cluster_status().await).unwrap();
    assert_eq!(json["role"], "leader");
    assert_eq!(json["redis"], "ok");
    assert_eq!(json["leader"]["epoch"], token.0);
    for instance in instances {
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_after_the_ttl_and_a_stopped_one_at_once() {
    let Some(redis) =
        RedisServer::start_or_skip("a_crashed_leader_is_replaced_after_the_ttl_and_a_stopped_one_at_once")
    else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    let mut instances: Vec<_> = ["a", "b", "c"].iter().map(|name| Instance::start(name, &redis, &store)).collect();
    let (leader, first_token) = one_leader(&instances).await;
    // The leader's loop dies: no more renewals, no release.
    let crashed = instances.remove(leader);
    crashed.task.abort();
    let crashed_at = Instant::now();
    let (successor, second_token) = eventually("a successor", || async {
        let leaders = leaders(&instances);
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        leaders.first().copied()
    })
    .await;
    let gap = crashed_at.elapsed();
    assert_eq!(crashed.current(), None, "the crashed leader's lease ended before its successor's began");
    // The key expired in Redis: at least the TTL after the last renewal, which was at most a renew interval
    // before the crash.
    let timings = small();
    assert!(gap >= timings.ttl - timings.renew_interval, "taken over after {gap:?}, before the TTL");
    assert!(second_token > first_token);
    eprintln!("crash to takeover: {gap:?} (TTL {:?})", timings.ttl);

    // A leader that stops gives the lease back: its successor does not wait for the TTL.
    let stopped = instances.remove(successor);
    let stopped_at = Instant::now();
    stopped.stop().await;
    let (_, third_token) =
        eventually("a successor after a clean stop", || async { leaders(&instances).first().copied() }).await;
    let handover = stopped_at.elapsed();
    assert!(handover < timings.ttl - timings.renew_interval, "handed over after {handover:?}");
    assert!(third_token > second_token);
    eprintln!("clean stop to takeover: {handover:?}");
    for instance in instances {
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_steps_down_within_the_step_down_time_and_leads_again_after() {
    let Some(mut redis) = RedisServer::start_or_skip(
        "a_leader_that_cannot_renew_steps_down_within_the_step_down_time_and_leads_again_after",
    ) else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    let instance = Instance::start("a", &redis, &store);
    let token = eventually("leadership", || async { instance.current() }).await;
    store.admit(token).unwrap();
    // Right after a renewal, the worst case for the step-down rule.
    let renewed = instance.leadership.term().unwrap();
    assert_eq!(renewed.token, token);
    redis.stop();
    let stopped_at = Instant::now();
    eventually("stepping down", || async { instance.current().is_none().then_some(()) }).await;
    let held = stopped_at.elapsed();
    let timings = small();
    assert!(held <= timings.step_down_after, "still leading {held:?} after Redis went away");
    eprintln!("Redis stopped to step-down: {held:?} (step-down time {:?})", timings.step_down_after);
    assert_eq!(instance.leadership.redis_reachable(), Some(false));
    assert_eq!(instance.leadership.cluster_status().await.redis, RedisReachability::Unreachable);
    // Redis comes back empty: leadership again, under a token the store has not seen.
    redis.start_again().unwrap();
    let again = eventually("leadership after Redis is back", || async { instance.current() }).await;
    assert!(again > token, "{again:?} after {token:?}");
    assert_eq!(instance.leadership.redis_reachable(), Some(true));
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_acquisitions() {
    let Some(redis) = RedisServer::start_or_skip("tokens_strictly_increase_across_acquisitions") else { return };
    let store = Arc::new(EpochGate::default());
    let mut tokens = Vec::new();
    for round in 0..6 {
        let instance = Instance::start(["a", "b"][round % 2], &redis, &store);
        tokens.push(eventually("leadership", || async { instance.current() }).await);
        instance.stop().await;
    }
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "{tokens:?}");
    assert_eq!(tokens.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_redis_still_yields_a_token_above_the_stores_newest() {
    let Some(redis) = RedisServer::start_or_skip("a_flushed_redis_still_yields_a_token_above_the_stores_newest") else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    let instance = Instance::start("a", &redis, &store);
    let token = eventually("leadership", || async { instance.current() }).await;
    assert_eq!(token, FencingToken(1));
    // The store has seen much newer terms (a long history, of which Redis remembers nothing after the flush).
    store.admit(FencingToken(100)).unwrap();
    let mut admin = connection(&redis.url()).await;
    let () = redis::cmd("FLUSHALL").query_async(&mut admin).await.unwrap();
    // The next renewal finds the lease gone: the leader steps down and takes it again, above the store's 100.
    let again = eventually("a new term", || async { instance.current().filter(|current| *current != token) }).await;
    assert_eq!(again, FencingToken(101));
    let counter: u64 = admin.get(EPOCH_KEY).await.unwrap();
    assert_eq!(counter, 101);
    assert!(store.admit(again).is_ok(), "the store takes the new leader's writes");
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_makes_current_none_at_once_and_releases_the_key() {
    let Some(redis) = RedisServer::start_or_skip("fenced_makes_current_none_at_once_and_releases_the_key") else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    let instances: Vec<_> = ["a", "b"].iter().map(|name| Instance::start(name, &redis, &store)).collect();
    let (leader, token) = one_leader(&instances).await;
    instances[leader].leadership.fenced(token);
    assert_eq!(instances[leader].current(), None, "at once");
    let fenced_at = Instant::now();
    // A new term starts well within the TTL: the key was released, not left to expire.
    let (_, next) = one_leader(&instances).await;
    let took = fenced_at.elapsed();
    assert!(next > token);
    assert!(took < small().ttl - small().renew_interval, "new term after {took:?}");
    for instance in instances {
        instance.stop().await;
    }
}

/// Redis is not trusted with the epoch: `SET gateway:leader:epoch 9223372036854775806` (what drove the store to
/// i64::MAX before) takes no leadership and writes nothing; the documented fix (`DEL gateway:leader:epoch`) lets the
/// next term start one above the store's newest token, and a counter below the store's (after a FLUSHALL) is raised
/// past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_epoch_in_redis_is_refused_and_deleting_it_lets_the_cluster_lead_again() {
    let Some(redis) =
        RedisServer::start_or_skip("an_absurd_epoch_in_redis_is_refused_and_deleting_it_lets_the_cluster_lead_again")
    else {
        return;
    };
    let store = Arc::new(EpochGate::default());
    store.admit(FencingToken(7)).unwrap();
    let mut raw = connection(&redis.url()).await;
    let _: () = raw.set(EPOCH_KEY, "9223372036854775806").await.unwrap();
    let instance = Instance::start("a", &redis, &store);
    eventually("a refusal", || async { (instance.leadership.epoch_refusals() >= 2).then_some(()) }).await;
    assert_eq!(instance.current(), None);
    let counter: String = raw.get(EPOCH_KEY).await.unwrap();
    assert_eq!(counter, "9223372036854775806", "nothing written under it");
    assert_eq!(store.newest_token().unwrap(), FencingToken(7));

    let _: () = raw.del(EPOCH_KEY).await.unwrap();
    let token = eventually("a leader after the fix", || async { instance.current() }).await;
    assert_eq!(token, FencingToken(8));
    let counter: String = raw.get(EPOCH_KEY).await.unwrap();
    assert_eq!(counter, "8");
    instance.stop().await;

    // A Redis that lost its data: the counter starts below the store's newest, and is raised past it.
    store.admit(FencingToken(20)).unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
    let _: () = raw.set(EPOCH_KEY, "3").await.unwrap();
    let instance = Instance::start("b", &redis, &store);
    assert_eq!(eventually("a leader after a flush", || async { instance.current() }).await, FencingToken(21));
    instance.stop().await;
}
