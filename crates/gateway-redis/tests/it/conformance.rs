//! The Redis adapters against gateway-core's conformance suites of the ports they implement (the same suites run
//! against the in-process implementations in gateway-core's tests): `RedisLeadership` (`Leadership`),
//! `RedisRateLimiter` (`RateLimiter`) and `RedisDispatchRate` (`DispatchRate`). Each rule runs on a throwaway
//! `redis-server` of its own, on the real clock (the adapters keep time by Redis's), with windows and lease timings
//! of a fraction of a second.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::conformance::leadership::LeadershipFixture;
use gateway_core::conformance::rate::{DispatchRateFixture, EndpointRateFixture};
use gateway_core::conformance::rate_limit::RateLimiterFixture;
use gateway_core::conformance::timeline::{RealTimeline, Timeline};
use gateway_core::{
    BackgroundLoop, DispatchRate, EndpointRate, EpochGate, FencingEpoch, FencingToken, Leadership, RateLimiter,
};
use gateway_redis::leadership::LEADER_KEY;
use gateway_redis::{
    LeadershipConfig, LeadershipPorts, LimiterConfig, RateConfig, RedisDispatchRate, RedisLeadership, RedisRateLimiter,
};
use gateway_testkit::redis::RedisServer;
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use crate::support::{connection, eventually, small};

/// The instance that deposes the one under test by holding the lease.
const RIVAL: &str = "rival";

/// One instance's lease, its loop running, on a Redis of its own, with the small timings of the failover tests;
/// deposed the way a lease is lost: another instance holds the key when it renews.
#[derive(Debug)]
struct Lease {
    leadership: RedisLeadership,
    redis: RedisServer,
    shutdown: CancellationToken,
}

impl Lease {
    fn start(test: &str) -> Option<Box<Self>> {
        let redis = RedisServer::start_or_skip(test)?;
        let epoch: Arc<dyn FencingEpoch> = Arc::new(EpochGate::default());
        let leadership = RedisLeadership::new(
            LeadershipPorts { redis: redis::Client::open(redis.url()).unwrap(), epoch },
            LeadershipConfig { instance_id: "conformance".into(), timings: small() },
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn({
            let (leadership, shutdown) = (leadership.clone(), shutdown.clone());
            async move { leadership.run(shutdown).await }
        });
        Some(Box::new(Self { leadership, redis, shutdown }))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl LeadershipFixture for Lease {
    fn leadership(&self) -> &dyn Leadership {
        &self.leadership
    }

    /// The rival, if it holds the lease, stops; the instance takes the lease at its next try.
    async fn lead(&self) -> FencingToken {
        let mut redis = connection(&self.redis.url()).await;
        let holder: Option<String> = redis.get(LEADER_KEY).await.unwrap();
        if holder.as_deref() == Some(RIVAL) {
            let _: () = redis.del(LEADER_KEY).await.unwrap();
        }
        eventually("leadership", || async { self.leadership.current() }).await
    }

    /// The rival holds the key (as after this instance's lease lapsed and the rival took it): the next renewal
    /// finds it gone.
    async fn depose(&self) {
        let mut redis = connection(&self.redis.url()).await;
        let _: () = redis.set_ex(LEADER_KEY, RIVAL, 60).await.unwrap();
        eventually("stepping down", || async { self.leadership.current().is_none().then_some(()) }).await;
    }

    /// Two renewals and a half.
    fn a_while(&self) -> Duration {
        small().renew_interval * 5 / 2
    }
}

mod lease {
    use super::*;

    gateway_core::leadership_conformance!(Lease::start(module_path!()));
}

/// The runtime the limiter runs its commands on; the rules call it from their own threads, never its workers, as
/// the binary calls it from its blocking pool.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

/// Empties Redis: what a limiter or a rate asked of the fixture has counted nothing.
fn flush(redis: &RedisServer) {
    let mut connection = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    redis::cmd("FLUSHALL").query::<()>(&mut connection).unwrap();
}

/// The shared per-agent limit on a Redis of its own.
#[derive(Debug)]
struct SharedLimits {
    redis: RedisServer,
    runtime: tokio::runtime::Runtime,
}

impl SharedLimits {
    fn start(test: &str) -> Option<Box<Self>> {
        Some(Box::new(Self { redis: RedisServer::start_or_skip(test)?, runtime: runtime() }))
    }
}

impl RateLimiterFixture for SharedLimits {
    fn limiter(&self, limit: u32, window: Duration) -> Box<dyn RateLimiter> {
        flush(&self.redis);
        let config = LimiterConfig { window, ..LimiterConfig::per_minute(limit) };
        let client = redis::Client::open(self.redis.url()).unwrap();
        Box::new(RedisRateLimiter::new(client, self.runtime.handle().clone(), config).unwrap())
    }

    fn timeline(&self) -> &dyn Timeline {
        &RealTimeline
    }
}

mod agent_rate_limit {
    use super::*;

    gateway_core::rate_limiter_conformance!(SharedLimits::start(module_path!()));
}

/// The cluster-wide outbound rate on a Redis of its own.
#[derive(Debug)]
struct SharedRate {
    redis: RedisServer,
}

impl DispatchRateFixture for SharedRate {
    fn rate(&self, limit: usize, window: Duration) -> Box<dyn DispatchRate> {
        flush(&self.redis);
        let config = RateConfig { window, ..RateConfig::per_second("conformance", limit) };
        Box::new(RedisDispatchRate::new(redis::Client::open(self.redis.url()).unwrap(), config).unwrap())
    }

    fn timeline(&self) -> &dyn Timeline {
        &RealTimeline
    }
}

mod outbound_rate {
    use super::*;

    gateway_core::dispatch_rate_conformance!(
        RedisServer::start_or_skip(module_path!()).map(|redis| Box::new(SharedRate { redis }))
    );
}

impl EndpointRateFixture for SharedRate {
    fn endpoint_rate(&self, window: Duration) -> Box<dyn EndpointRate> {
        flush(&self.redis);
        let config = RateConfig { window, ..RateConfig::per_second("conformance", 5) };
        let global = RedisDispatchRate::new(redis::Client::open(self.redis.url()).unwrap(), config).unwrap();
        Box::new(global.endpoint_rate())
    }

    fn timeline(&self) -> &dyn Timeline {
        &RealTimeline
    }
}

mod endpoint_rate {
    use super::*;

    gateway_core::endpoint_rate_conformance!(
        RedisServer::start_or_skip(module_path!()).map(|redis| Box::new(SharedRate { redis }))
    );
}
