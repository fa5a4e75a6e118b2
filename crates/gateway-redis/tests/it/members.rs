use std::sync::Arc;
use std::time::Duration;

use gateway_core::{BackgroundLoop, EpochGate, FencingEpoch};
use gateway_redis::members::{MEMBER_INFO_KEY, MEMBERS_KEY};
use gateway_redis::{LeadershipConfig, LeadershipPorts, RedisLeadership, RedisMembers};
use gateway_testkit::redis::RedisServer;
use redis::AsyncCommands;
use time::OffsetDateTime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::{connection, eventually, small};

struct Member {
    registry: RedisMembers,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

fn start(name: &str, redis: &RedisServer) -> Member {
    let epoch: Arc<dyn FencingEpoch> = Arc::new(EpochGate::default());
    let client = redis::Client::open(redis.url()).unwrap();
    let leadership = RedisLeadership::new(
        LeadershipPorts { redis: client.clone(), epoch },
        LeadershipConfig { instance_id: name.into(), timings: small() },
    )
    .unwrap();
    let registry = RedisMembers::new(client, &leadership, "1.2.3", OffsetDateTime::now_utc(), small());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (registry, shutdown) = (registry.clone(), shutdown.clone());
        async move { registry.run(shutdown).await }
    });
    Member { registry, shutdown, task }
}

async fn listed(member: &Member) -> Vec<String> {
    member.registry.members().await.unwrap().into_iter().map(|member| member.instance_id).collect()
}

/// Each instance lists every one that records itself; one stopped cleanly is gone at once, one killed (its loop
/// never told) after the window, and its entries are deleted, not just hidden.
#[tokio::test]
async fn members_list_each_other_and_a_dead_one_drops_out_after_the_window() {
    let Some(redis) = RedisServer::start_or_skip("members_list_each_other_and_a_dead_one_drops_out_after_the_window")
    else {
        return;
    };
    let [a, b, c] = ["gw-a", "gw-b", "gw-c"].map(|name| start(name, &redis));
    let all = vec!["gw-a".to_owned(), "gw-b".to_owned(), "gw-c".to_owned()];
    for member in [&a, &b, &c] {
        eventually("every member listed", || async { (listed(member).await == all).then_some(()) }).await;
    }
    let seen = a.registry.members().await.unwrap();
    let now = OffsetDateTime::now_utc();
    for member in &seen {
        assert_eq!(member.version, "1.2.3");
        assert!(member.started_at.is_some_and(|started| started <= now), "{member:?}");
        assert!((now - member.last_heard_at).abs() < time::Duration::seconds(5), "{member:?}");
    }

    // Stopped cleanly: leaves at once (well inside the window).
    c.shutdown.cancel();
    c.task.await.unwrap();
    let two = vec!["gw-a".to_owned(), "gw-b".to_owned()];
    assert_eq!(listed(&a).await, two, "a member that stopped cleanly leaves at once");

    // Killed: listed until its last record is a window old, then gone everywhere.
    b.task.abort();
    let killed = tokio::time::Instant::now();
    eventually("the killed member to drop out", || async { (listed(&a).await == ["gw-a"]).then_some(()) }).await;
    let after = killed.elapsed();
    assert!(after >= small().ttl - small().renew_interval - Duration::from_millis(100), "dropped after {after:?}");
    // Its entries are deleted by the next record, not kept forever.
    let mut redis_connection = connection(&redis.url()).await;
    eventually("the killed member's entries deleted", || {
        let mut redis_connection = redis_connection.clone();
        async move {
            let score: Option<f64> = redis_connection.zscore(MEMBERS_KEY, "gw-b").await.unwrap();
            let info: Option<String> = redis_connection.hget(MEMBER_INFO_KEY, "gw-b").await.unwrap();
            (score.is_none() && info.is_none()).then_some(())
        }
    })
    .await;
    let size: usize = redis_connection.zcard(MEMBERS_KEY).await.unwrap();
    assert_eq!(size, 1);
    a.shutdown.cancel();
    a.task.await.unwrap();
}

/// Whoever can write Redis (not trusted) may stuff the set: a read still lists at most `MAX_LISTED_MEMBERS`, the
/// most recently heard (the real instance among them), skips an id longer than `MAX_MEMBER_FIELD_BYTES` and cuts an
/// info there.
#[tokio::test]
async fn a_stuffed_member_set_is_read_bounded_and_keeps_the_instances_that_record_themselves() {
    use gateway_redis::members::{MAX_LISTED_MEMBERS, MAX_MEMBER_FIELD_BYTES};
    let Some(redis) = RedisServer::start_or_skip(
        "a_stuffed_member_set_is_read_bounded_and_keeps_the_instances_that_record_themselves",
    ) else {
        return;
    };
    let mut redis_connection = connection(&redis.url()).await;
    let time: (String, String) = redis::cmd("TIME").query_async(&mut redis_connection).await.unwrap();
    let now_ms: i64 = time.0.parse::<i64>().unwrap() * 1000;
    let long_id = "x".repeat(MAX_MEMBER_FIELD_BYTES + 1);
    let _: () = redis_connection.zadd(MEMBERS_KEY, &long_id, now_ms).await.unwrap();
    for n in 0..1_000 {
        let fake = format!("fake-{n}");
        let _: () = redis_connection.zadd(MEMBERS_KEY, &fake, now_ms - 1_000).await.unwrap();
        let _: () = redis_connection.hset(MEMBER_INFO_KEY, &fake, "0 ".to_owned() + &"v".repeat(10_000)).await.unwrap();
    }
    let a = start("gw-a", &redis);
    eventually("the real instance listed", || async { listed(&a).await.iter().any(|id| id == "gw-a").then_some(()) })
        .await;
    let members = a.registry.members().await.unwrap();
    assert!(members.len() <= MAX_LISTED_MEMBERS, "{} listed", members.len());
    assert!(members.iter().all(|member| member.instance_id.len() <= MAX_MEMBER_FIELD_BYTES));
    assert!(members.iter().all(|member| member.version.len() < MAX_MEMBER_FIELD_BYTES), "infos cut");
    a.shutdown.cancel();
    a.task.await.unwrap();
}
