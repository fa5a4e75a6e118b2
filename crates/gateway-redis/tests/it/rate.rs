use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use gateway_core::{DispatchRate, EndpointRate};
use gateway_redis::{RateConfig, RedisDispatchRate};
use gateway_testkit::redis::RedisServer;

fn rate(redis: &RedisServer, instance: &str, limit: usize) -> RedisDispatchRate {
    let config = RateConfig { probe_interval: Duration::from_millis(100), ..RateConfig::per_second(instance, limit) };
    RedisDispatchRate::new(redis::Client::open(redis.url()).unwrap(), config).unwrap()
}

#[test]
fn the_rate_holds_across_two_instances_sharing_one_redis() {
    let Some(redis) = RedisServer::start_or_skip("the_rate_holds_across_two_instances_sharing_one_redis") else {
        return;
    };
    const LIMIT: usize = 5;
    let instances = [Arc::new(rate(&redis, "a", LIMIT)), Arc::new(rate(&redis, "b", LIMIT))];
    let until = Instant::now() + Duration::from_millis(2500);
    // Two callers per instance, each starting as soon as the rate allows.
    let callers: Vec<_> = (0..4)
        .map(|caller| {
            let rate = Arc::clone(&instances[caller % 2]);
            std::thread::spawn(move || {
                let mut started: Vec<SystemTime> = Vec::new();
                while Instant::now() < until {
                    match rate.try_start(Instant::now()) {
                        Ok(ticket) => started.push(rate.shared_start_time(ticket).expect("decided by Redis")),
                        Err(wait) => std::thread::sleep(wait.min(Duration::from_millis(20))),
                    }
                }
                (caller % 2, started)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut per_instance = [0usize; 2];
    for caller in callers {
        let (instance, started) = caller.join().unwrap();
        per_instance[instance] += started.len();
        all.extend(started);
    }
    all.sort();
    // On Redis's timeline: any LIMIT + 1 consecutive starts span at least one second.
    for span in all.windows(LIMIT + 1) {
        let spread = span[LIMIT].duration_since(span[0]).unwrap();
        assert!(spread >= Duration::from_secs(1), "{} starts within {spread:?}", LIMIT + 1);
    }
    // And the rate is used, not starved: about LIMIT per second for 2.5 s, between both instances.
    assert!(all.len() >= 2 * LIMIT, "{} starts", all.len());
    assert!(per_instance.iter().all(|count| *count > 0), "{per_instance:?}");
    assert_eq!(instances.iter().map(|rate| rate.fallback_starts()).sum::<u64>(), 0);
    eprintln!("{} starts in 2.5 s, {per_instance:?} per instance", all.len());
}

#[test]
fn a_cancelled_start_frees_its_place_for_the_other_instance() {
    let Some(redis) = RedisServer::start_or_skip("a_cancelled_start_frees_its_place_for_the_other_instance") else {
        return;
    };
    let (a, b) = (rate(&redis, "a", 2), rate(&redis, "b", 2));
    let now = Instant::now();
    let first = a.try_start(now).unwrap();
    a.try_start(now).unwrap();
    let wait = b.try_start(now).unwrap_err();
    assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1), "{wait:?}");
    a.cancel(first);
    let ticket = b.try_start(Instant::now()).unwrap();
    assert!(b.shared_start_time(ticket).is_some());
    // Cancelling twice changes nothing.
    a.cancel(first);
    assert!(b.try_start(Instant::now()).is_err());
}

#[test]
fn falls_back_to_the_instance_while_redis_is_down_and_goes_back_when_it_answers() {
    let Some(mut redis) =
        RedisServer::start_or_skip("falls_back_to_the_instance_while_redis_is_down_and_goes_back_when_it_answers")
    else {
        return;
    };
    let rate = rate(&redis, "a", 3);
    let ticket = rate.try_start(Instant::now()).unwrap();
    assert!(rate.shared_start_time(ticket).is_some());
    redis.stop();
    // Still at most 3 per second, counted in-process, and the one start already made counts.
    let now = Instant::now();
    assert!(rate.try_start(now).is_ok());
    assert!(rate.try_start(now).is_ok());
    let wait = rate.try_start(now).unwrap_err();
    assert!(wait <= Duration::from_secs(1));
    assert!(rate.is_falling_back());
    assert_eq!((rate.fallback_starts(), rate.outages()), (2, 1));
    // Many calls during one outage: still one outage.
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..3 {
        let _ = rate.try_start(Instant::now());
    }
    assert_eq!(rate.outages(), 1);
    redis.start_again().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let back = loop {
        if let Ok(ticket) = rate.try_start(Instant::now())
            && rate.shared_start_time(ticket).is_some()
        {
            break ticket;
        }
        assert!(Instant::now() < deadline, "never went back to Redis");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!rate.is_falling_back());
    rate.cancel(back);
    assert_eq!(rate.outages(), 1);
}

#[test]
fn an_endpoints_rate_holds_across_two_instances_and_apart_from_other_endpoints_and_the_global_log() {
    let Some(redis) = RedisServer::start_or_skip(
        "an_endpoints_rate_holds_across_two_instances_and_apart_from_other_endpoints_and_the_global_log",
    ) else {
        return;
    };
    let (a, b) = (rate(&redis, "a", 100), rate(&redis, "b", 100));
    let (a_endpoints, b_endpoints) = (a.endpoint_rate(), b.endpoint_rate());
    let now = Instant::now();
    let first = a_endpoints.try_start(7, 2, now).unwrap();
    assert!(a_endpoints.shared_start_time(7, first).is_some(), "decided by Redis");
    b_endpoints.try_start(7, 2, now).unwrap();
    let wait = a_endpoints.try_start(7, 2, now).unwrap_err();
    assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1), "{wait:?}");
    assert!(b_endpoints.try_start(7, 2, now).is_err(), "endpoint 7 is full for b too");
    // Another endpoint, and the global log, are counted apart.
    assert!(b_endpoints.try_start(8, 1, now).is_ok());
    assert!(a.try_start(now).is_ok() && b.try_start(now).is_ok());
    // A cancelled start of one instance frees its place for the other.
    a_endpoints.cancel(7, first);
    assert!(b_endpoints.try_start(7, 2, Instant::now()).is_ok());
    assert_eq!(a.fallback_starts() + b.fallback_starts(), 0);
}

#[test]
fn endpoint_rates_fall_back_with_the_global_one_while_redis_is_down() {
    let Some(mut redis) =
        RedisServer::start_or_skip("endpoint_rates_fall_back_with_the_global_one_while_redis_is_down")
    else {
        return;
    };
    let global = rate(&redis, "a", 10);
    let endpoints = global.endpoint_rate();
    assert!(endpoints.try_start(3, 2, Instant::now()).is_ok());
    redis.stop();
    // Still at most 2 per second for endpoint 3, counted in-process, the start made before the outage included.
    let now = Instant::now();
    assert!(endpoints.try_start(3, 2, now).is_ok());
    assert!(endpoints.try_start(3, 2, now).is_err());
    assert!(global.is_falling_back(), "one outage state for the global cap and the endpoints");
    assert_eq!((global.fallback_starts(), global.outages()), (1, 1));
    assert!(global.try_start(now).is_ok(), "the global cap is decided in-process at once, without a new outage");
    assert_eq!(global.outages(), 1);
}
