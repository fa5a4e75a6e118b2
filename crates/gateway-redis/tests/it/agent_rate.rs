use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::{AgentId, RateDecision, RateLimiter};
use gateway_redis::{LimiterConfig, RedisRateLimiter};
use gateway_testkit::redis::RedisServer;

/// The runtime the adapters run their commands on; the test threads are not its workers, as the binary's blocking
/// pool threads are not.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

fn limiter(redis: &RedisServer, runtime: &tokio::runtime::Runtime, config: LimiterConfig) -> RedisRateLimiter {
    RedisRateLimiter::new(redis::Client::open(redis.url()).unwrap(), runtime.handle().clone(), config).unwrap()
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}

#[test]
fn the_limit_holds_across_two_instances_sharing_one_redis() {
    let Some(redis) = RedisServer::start_or_skip("the_limit_holds_across_two_instances_sharing_one_redis") else {
        return;
    };
    let runtime = runtime();
    let instances = [
        limiter(&redis, &runtime, LimiterConfig::per_minute(5)),
        limiter(&redis, &runtime, LimiterConfig::per_minute(5)),
    ];
    let a = agent("agent-a");
    for n in 0..5 {
        assert_eq!(instances[n % 2].check(&a, Instant::now()), RateDecision::Allowed, "request {n}");
    }
    for instance in &instances {
        match instance.check(&a, Instant::now()) {
            RateDecision::Limited { retry_after } => {
                assert!(
                    retry_after > Duration::from_secs(50) && retry_after <= Duration::from_secs(60),
                    "{retry_after:?}"
                );
            }
            allowed => panic!("the sixth request in the window: {allowed:?}"),
        }
    }
    assert_eq!(instances[1].check(&agent("agent-b"), Instant::now()), RateDecision::Allowed, "another agent");
    assert_eq!(instances.iter().map(RedisRateLimiter::fallback_checks).sum::<u64>(), 0);
}

#[test]
fn concurrent_checks_allow_exactly_the_limit() {
    let Some(redis) = RedisServer::start_or_skip("concurrent_checks_allow_exactly_the_limit") else {
        return;
    };
    let runtime = runtime();
    let limiter = Arc::new(limiter(&redis, &runtime, LimiterConfig::per_minute(50)));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                (0..20).filter(|_| limiter.check(&agent("busy"), Instant::now()) == RateDecision::Allowed).count()
            })
        })
        .collect();
    let allowed: usize = callers.into_iter().map(|caller| caller.join().unwrap()).sum();
    assert_eq!(allowed, 50, "160 requests at once, 50 allowed");
}

#[test]
fn a_new_window_opens_when_the_last_one_ends() {
    let Some(redis) = RedisServer::start_or_skip("a_new_window_opens_when_the_last_one_ends") else {
        return;
    };
    let runtime = runtime();
    let window = Duration::from_millis(300);
    let limiter = limiter(&redis, &runtime, LimiterConfig { window, ..LimiterConfig::per_minute(2) });
    let a = agent("a");
    assert_eq!(limiter.check(&a, Instant::now()), RateDecision::Allowed);
    assert_eq!(limiter.check(&a, Instant::now()), RateDecision::Allowed);
    let RateDecision::Limited { retry_after } = limiter.check(&a, Instant::now()) else { panic!("over the limit") };
    assert!(retry_after <= window, "{retry_after:?}");
    // Redis expires the counter with its window (waiting for Redis's clock, not asserting on time).
    let deadline = Instant::now() + Duration::from_secs(15);
    while limiter.check(&a, Instant::now()) != RateDecision::Allowed {
        assert!(Instant::now() < deadline, "the window never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn while_redis_is_down_the_limit_is_counted_in_process_and_shared_again_with_it() {
    let Some(mut redis) =
        RedisServer::start_or_skip("while_redis_is_down_the_limit_is_counted_in_process_and_shared_again_with_it")
    else {
        return;
    };
    let runtime = runtime();
    let probe_interval = Duration::from_millis(50);
    let limiter = limiter(&redis, &runtime, LimiterConfig { probe_interval, ..LimiterConfig::per_minute(1) });
    let a = agent("a");
    assert_eq!(limiter.check(&a, Instant::now()), RateDecision::Allowed);
    assert!(matches!(limiter.check(&a, Instant::now()), RateDecision::Limited { .. }));

    redis.stop();
    // The in-process count starts with the outage: one request of its window, then none (never "no limit").
    assert_eq!(limiter.check(&a, Instant::now()), RateDecision::Allowed);
    for _ in 0..5 {
        assert!(matches!(limiter.check(&a, Instant::now()), RateDecision::Limited { .. }), "counted in-process");
    }
    assert!(limiter.fallback_checks() >= 6);
    assert_eq!(limiter.outages(), 1);

    // A restarted Redis has forgotten the counter (nothing is persisted); the limit holds again from there.
    redis.start_again().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let before = limiter.fallback_checks();
        let decision = limiter.check(&a, Instant::now());
        if limiter.fallback_checks() == before {
            assert_eq!(decision, RateDecision::Allowed, "the first counted request of a new window");
            break;
        }
        assert!(Instant::now() < deadline, "redis never answered again");
        std::thread::sleep(probe_interval);
    }
    assert!(matches!(limiter.check(&a, Instant::now()), RateDecision::Limited { .. }));
    assert_eq!(limiter.outages(), 1);
}
