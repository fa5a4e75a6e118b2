//! [`RedisRateLimiter`]: the per-agent rate limit (docs/api.md, "Rate limits") shared by every instance, with the
//! rule of gateway-core's `FixedWindowLimiter`: an agent's first request opens a window in which at most `limit`
//! are allowed.
//!
//! One counter per agent, `gateway:agent-rate:<agent_id>`: a small script `INCR`s it and, when it has no expiry
//! (its first increment), sets one of a window; it answers the count and the time left, so one round trip
//! decides a request. Keys expire with their windows: Redis holds a counter only for agents active in the last
//! minute.
//!
//! Redis unreachable never means no limit (DESIGN §14, issue 16: failing open gave a runaway agent no ceiling at
//! all): each instance then counts the agent's requests itself, with gateway-core's `FixedWindowLimiter` and the
//! same limit and window, so an agent gets at most the limit per instance it reaches (in a cluster of N, at most N
//! times the limit) until Redis answers again. Nor must a guard against runaway agents stop every agent when Redis
//! does, so the fallback never refuses more than the limit would. One warning per outage, a counter of the
//! requests decided in-process ([`RedisRateLimiter::fallback_checks`]), and one probe per [`LIMIT_PROBE_INTERVAL`]
//! until Redis answers; the other requests do not wait for a timeout meanwhile. The in-process windows start with
//! the outage: what the agent sent before it was counted in Redis, which this instance cannot read then.
//!
//! The port is synchronous and each check is a round trip, so the adapter runs the async command on the runtime it
//! was given and blocks the calling thread until it is done: call [`RateLimiter::check`] off the runtime's workers
//! (it says so with `is_shared`), as the binary does on the blocking pool. The one multiplexed connection carries
//! every blocking caller's commands at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gateway_core::runtime::sync::lock;
use gateway_core::{AgentId, FixedWindowLimiter, RateDecision, RateLimiter};
use redis::Script;
use tokio::runtime::Handle;
use tracing::{info, warn};

use crate::Error;
use crate::link::AsyncLink;

/// Prefix of the per-agent counters.
pub const AGENT_RATE_KEY_PREFIX: &str = "gateway:agent-rate:";
/// A check waits at most this long for Redis before the request is decided in-process.
pub const LIMIT_COMMAND_TIMEOUT: Duration = Duration::from_millis(100);
/// While Redis is unreachable, one check per interval tries it again; the others are decided in-process at once.
pub const LIMIT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Count one request; open the window on the first. KEYS[1] the agent's counter; ARGV[1] the window in ms.
/// Returns {count including this request, ms until the window ends}. A counter found without an expiry (its first
/// increment, or one whose expiry something removed) gets one, so no counter lives forever.
const COUNT: &str = r"
local count = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  left = tonumber(ARGV[1])
end
return {count, left}
";

/// The adapter's settings.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// Requests per agent per window (`--agent-rate-limit-per-minute`); zero is taken as one.
    pub limit: u32,
    pub window: Duration,
    pub command_timeout: Duration,
    pub probe_interval: Duration,
}

impl LimiterConfig {
    /// `limit` requests per agent per minute, with the default timeouts.
    pub fn per_minute(limit: u32) -> Self {
        Self {
            limit,
            window: gateway_core::ports::rate_limit::WINDOW,
            command_timeout: LIMIT_COMMAND_TIMEOUT,
            probe_interval: LIMIT_PROBE_INTERVAL,
        }
    }
}

/// The cluster-wide `RateLimiter`.
#[derive(Debug)]
pub struct RedisRateLimiter {
    link: AsyncLink,
    runtime: Handle,
    script: Script,
    limit: u32,
    window_ms: u64,
    config: LimiterConfig,
    outage: Mutex<Outage>,
    /// What decides while Redis does not answer: this process's own count, with the same limit and window.
    fallback: FixedWindowLimiter,
    fallback_checks: AtomicU64,
    outages: AtomicU64,
}

#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    next_probe: Option<Instant>,
}

impl RedisRateLimiter {
    /// Connects lazily (requests are counted in-process until Redis answers). `runtime` runs the commands: the binary's
    /// own runtime, whose workers must never be the threads that call `check`.
    pub fn new(redis: redis::Client, runtime: Handle, config: LimiterConfig) -> Result<Self, Error> {
        if config.window < Duration::from_millis(1)
            || config.command_timeout.is_zero()
            || config.probe_interval.is_zero()
        {
            return Err(Error::Config("the limit's window, timeout and probe interval must be positive".into()));
        }
        let fallback =
            FixedWindowLimiter::new(config.limit, config.window, gateway_core::ports::rate_limit::MAX_LIMITED_AGENTS);
        Ok(Self {
            link: AsyncLink::new(redis),
            runtime,
            script: Script::new(COUNT),
            limit: config.limit.max(1),
            window_ms: u64::try_from(config.window.as_millis()).unwrap_or(u64::MAX),
            config,
            outage: Mutex::new(Outage::default()),
            fallback,
            fallback_checks: AtomicU64::new(0),
            outages: AtomicU64::new(0),
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Requests decided by the in-process limiter because Redis did not answer (a counter for metrics).
    pub fn fallback_checks(&self) -> u64 {
        self.fallback_checks.load(Ordering::Relaxed)
    }

    /// Times Redis became unreachable (a counter for metrics).
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    fn count(&self, agent_id: &AgentId) -> Result<(i64, i64), Error> {
        let key = format!("{AGENT_RATE_KEY_PREFIX}{agent_id}");
        let script = &self.script;
        let window_ms = self.window_ms;
        self.runtime.block_on(self.link.run(self.config.command_timeout, |mut connection| async move {
            script.key(key).arg(window_ms).invoke_async::<(i64, i64)>(&mut connection).await
        }))
    }

    fn went_down(&self, now: Instant, error: &Error) {
        let mut outage = lock(&self.outage);
        outage.next_probe = Some(now + self.config.probe_interval);
        if outage.since.is_none() {
            outage.since = Some(now);
            self.outages.fetch_add(1, Ordering::Relaxed);
            warn!(%error, "redis unreachable: agent rate limits are counted by each instance until it answers");
        }
    }

    fn recovered(&self, now: Instant) {
        let mut outage = lock(&self.outage);
        if let Some(since) = outage.since.take() {
            let outage_ms = u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX);
            info!(outage_ms, "redis answers again: agent rate limits are shared again");
        }
        outage.next_probe = None;
    }

    fn decide_locally(&self, agent_id: &AgentId, now: Instant) -> RateDecision {
        self.fallback_checks.fetch_add(1, Ordering::Relaxed);
        self.fallback.check(agent_id, now)
    }
}

impl RateLimiter for RedisRateLimiter {
    fn check(&self, agent_id: &AgentId, now: Instant) -> RateDecision {
        {
            let mut outage = lock(&self.outage);
            if let Some(next_probe) = outage.next_probe {
                if now < next_probe {
                    drop(outage);
                    return self.decide_locally(agent_id, now);
                }
                // This check probes; the others pass until it has an answer.
                outage.next_probe = Some(now + self.config.probe_interval);
            }
        }
        match self.count(agent_id) {
            Ok((count, left_ms)) => {
                self.recovered(now);
                if count <= i64::from(self.limit) {
                    RateDecision::Allowed
                } else {
                    let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
                    RateDecision::Limited { retry_after: left.clamp(Duration::from_millis(1), self.config.window) }
                }
            }
            Err(error) => {
                self.went_down(now, &error);
                self.decide_locally(agent_id, now)
            }
        }
    }

    fn is_shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_configuration_is_refused() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = || redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let make = |config| RedisRateLimiter::new(client(), runtime.handle().clone(), config);
        assert!(make(LimiterConfig { window: Duration::ZERO, ..LimiterConfig::per_minute(5) }).is_err());
        assert!(make(LimiterConfig { command_timeout: Duration::ZERO, ..LimiterConfig::per_minute(5) }).is_err());
        assert_eq!(make(LimiterConfig::per_minute(0)).unwrap().limit(), 1);
    }

    /// Nothing listens on port 1: each check is decided in-process (the limit still holds, per agent), one warning
    /// for the outage, and only one probe per interval waits for the connection to fail.
    #[test]
    fn without_redis_the_limit_is_counted_in_process() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let limiter = RedisRateLimiter::new(client, runtime.handle().clone(), LimiterConfig::per_minute(3)).unwrap();
        let (a, b) = (AgentId::new("a").unwrap(), AgentId::new("b").unwrap());
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check(&a, now), RateDecision::Allowed);
        }
        assert!(matches!(limiter.check(&a, now), RateDecision::Limited { .. }), "never no limit");
        assert_eq!(limiter.check(&b, now), RateDecision::Allowed, "another agent has its own count");
        assert_eq!((limiter.fallback_checks(), limiter.outages()), (5, 1));
        let probe = limiter.check(&a, now + LIMIT_PROBE_INTERVAL);
        assert!(matches!(probe, RateDecision::Limited { .. }), "the probe fails and is decided in-process too");
        assert_eq!(limiter.outages(), 1, "still the same outage");
        let next_window = now + gateway_core::ports::rate_limit::WINDOW + LIMIT_PROBE_INTERVAL;
        assert_eq!(limiter.check(&a, next_window), RateDecision::Allowed, "a new window opens in-process too");
    }
}
