//! Per-agent rate limits (docs/api.md, "Rate limits"): the [`RateLimiter`] port, which counts an agent's requests
//! and says when one is over its limit, and [`FixedWindowLimiter`], its in-process adapter (and fake).
//!
//! The rule is a fixed window per agent: an agent's first counted request opens a window of [`WINDOW`] (a
//! minute), in which at most `limit` requests are allowed; the next request after the window ends opens a new one.
//! This is what a Redis counter with `INCR` and `EXPIRE` keeps, so both adapters answer alike; its price is that an
//! agent may send up to twice the limit within a minute that straddles two windows, which for a guard against
//! runaway agents is good enough (the outbound webhook rate, which the contract states per second window, keeps an
//! exact sliding log instead, see [`crate::ports::rate`]).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ids::AgentId;
use crate::runtime::sync::lock;

/// Requests per agent per window unless configured otherwise (`--agent-rate-limit-per-minute`).
pub const AGENT_RATE_LIMIT_PER_MINUTE: u32 = 60;
/// The length of a window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Agents whose windows the in-process limiter holds at most; an agent beyond them is not limited (and a warning
/// says so) until windows end. Bounds what a flood of made-up agent ids can cost while agent auth is off.
pub const MAX_LIMITED_AGENTS: usize = 100_000;

/// What a request is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    Allowed,
    /// Over the limit: the agent's window ends in `retry_after`.
    Limited {
        retry_after: Duration,
    },
}

/// Counts requests per agent.
pub trait RateLimiter: Send + Sync + Debug {
    /// Counts one request of `agent_id` at `now` (the caller's monotonic time; a shared adapter keeps its own) and
    /// says whether it is allowed. A refused request is not counted.
    fn check(&self, agent_id: &AgentId, now: Instant) -> RateDecision;

    /// Whether the counts are shared with other processes, so that `check` makes a round trip: async callers then
    /// run it on the blocking pool instead of a runtime worker. The in-process limiter answers at once.
    fn is_shared(&self) -> bool {
        false
    }
}

/// At most `limit` requests per agent per window, in this process. Memory is bounded: windows that have ended are
/// dropped once per window length, and at most `max_agents` windows are held.
#[derive(Debug)]
pub struct FixedWindowLimiter {
    limit: u32,
    window: Duration,
    max_agents: usize,
    windows: Mutex<Windows>,
}

#[derive(Debug, Default)]
struct Windows {
    by_agent: HashMap<AgentId, Window>,
    /// When ended windows are dropped next.
    next_sweep: Option<Instant>,
    /// Whether a full map has been warned about since the last sweep.
    warned_full: bool,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    opened: Instant,
    count: u32,
}

impl FixedWindowLimiter {
    /// `limit` requests per agent per `window` (a limit of zero is taken as one: "no limit" is the absence of a
    /// limiter, which the binary decides).
    pub fn new(limit: u32, window: Duration, max_agents: usize) -> Self {
        Self { limit: limit.max(1), window, max_agents, windows: Mutex::new(Windows::default()) }
    }

    /// `limit` requests per agent per minute, for at most [`MAX_LIMITED_AGENTS`] agents at once.
    pub fn per_minute(limit: u32) -> Self {
        Self::new(limit, WINDOW, MAX_LIMITED_AGENTS)
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Agents whose windows are held right now.
    pub fn tracked(&self) -> usize {
        lock(&self.windows).by_agent.len()
    }
}

impl RateLimiter for FixedWindowLimiter {
    fn check(&self, agent_id: &AgentId, now: Instant) -> RateDecision {
        let mut windows = lock(&self.windows);
        if windows.next_sweep.is_none_or(|at| now >= at) {
            let window = self.window;
            windows.by_agent.retain(|_, held| held.opened + window > now);
            windows.next_sweep = Some(now + window);
            windows.warned_full = false;
        }
        let fresh = Window { opened: now, count: 1 };
        if let Some(held) = windows.by_agent.get_mut(agent_id) {
            let ends = held.opened + self.window;
            if ends <= now {
                *held = fresh;
                return RateDecision::Allowed;
            }
            if held.count >= self.limit {
                // A caller that read its clock before a later caller opened the window sees at most one window.
                return RateDecision::Limited { retry_after: (ends - now.min(ends)).min(self.window) };
            }
            held.count += 1;
            return RateDecision::Allowed;
        }
        if windows.by_agent.len() >= self.max_agents {
            if !windows.warned_full {
                windows.warned_full = true;
                tracing::warn!(
                    max_agents = self.max_agents,
                    "agent rate limiter full: agents beyond it are not limited until windows end"
                );
            }
            return RateDecision::Allowed;
        }
        windows.by_agent.insert(agent_id.clone(), fresh);
        RateDecision::Allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::rate_limit::RateLimiterFixture;
    use crate::conformance::timeline::{ManualTimeline, Timeline};

    /// The in-process limiter on a manual timeline: the rules land on every window's end exactly.
    #[derive(Debug, Default)]
    struct InProcess(ManualTimeline);

    impl RateLimiterFixture for InProcess {
        fn limiter(&self, limit: u32, window: Duration) -> Box<dyn RateLimiter> {
            Box::new(FixedWindowLimiter::new(limit, window, MAX_LIMITED_AGENTS))
        }

        fn timeline(&self) -> &dyn Timeline {
            &self.0
        }
    }

    crate::rate_limiter_conformance!(Some(Box::<InProcess>::default()));

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn the_limit_holds_within_a_window_and_a_new_window_starts_after_it() {
        let limiter = FixedWindowLimiter::per_minute(60);
        let start = Instant::now();
        let a = agent("a");
        for n in 0..60 {
            assert_eq!(limiter.check(&a, start + Duration::from_millis(n * 100)), RateDecision::Allowed, "{n}");
        }
        assert_eq!(limiter.check(&a, start + secs(10)), RateDecision::Limited { retry_after: secs(50) });
        assert_eq!(limiter.check(&a, start + secs(59)), RateDecision::Limited { retry_after: secs(1) });
        // The window is half-open: at exactly a minute a new one opens.
        assert_eq!(limiter.check(&a, start + secs(60)), RateDecision::Allowed);
        for _ in 1..60 {
            assert_eq!(limiter.check(&a, start + secs(61)), RateDecision::Allowed);
        }
        assert_eq!(limiter.check(&a, start + secs(70)), RateDecision::Limited { retry_after: secs(50) });
    }

    #[test]
    fn agents_are_counted_apart() {
        let limiter = FixedWindowLimiter::per_minute(2);
        let now = Instant::now();
        assert_eq!(limiter.check(&agent("a"), now), RateDecision::Allowed);
        assert_eq!(limiter.check(&agent("a"), now), RateDecision::Allowed);
        assert!(matches!(limiter.check(&agent("a"), now), RateDecision::Limited { .. }));
        assert_eq!(limiter.check(&agent("b"), now), RateDecision::Allowed);
        assert_eq!(limiter.check(&agent("b"), now), RateDecision::Allowed);
    }

    #[test]
    fn windows_of_idle_agents_are_dropped() {
        let limiter = FixedWindowLimiter::per_minute(5);
        let start = Instant::now();
        for n in 0..1_000 {
            limiter.check(&agent(&format!("agent-{n}")), start);
        }
        assert_eq!(limiter.tracked(), 1_000);
        // The sweep runs once per window length: the first check a minute later drops every ended window.
        limiter.check(&agent("late"), start + secs(30));
        assert_eq!(limiter.tracked(), 1_001);
        limiter.check(&agent("later"), start + secs(61));
        assert_eq!(limiter.tracked(), 2, "only the windows still open are held");
    }

    #[test]
    fn beyond_its_capacity_new_agents_pass_unlimited_and_known_ones_stay_limited() {
        let limiter = FixedWindowLimiter::new(1, WINDOW, 2);
        let now = Instant::now();
        assert_eq!(limiter.check(&agent("a"), now), RateDecision::Allowed);
        assert_eq!(limiter.check(&agent("b"), now), RateDecision::Allowed);
        for _ in 0..3 {
            assert_eq!(limiter.check(&agent("c"), now), RateDecision::Allowed, "not held, so not limited");
        }
        assert!(matches!(limiter.check(&agent("a"), now), RateDecision::Limited { .. }));
        assert_eq!(limiter.tracked(), 2);
        // Once the held windows end, the next agent is held again.
        assert_eq!(limiter.check(&agent("c"), now + WINDOW), RateDecision::Allowed);
        assert!(matches!(limiter.check(&agent("c"), now + WINDOW), RateDecision::Limited { .. }));
    }

    #[test]
    fn an_earlier_instant_than_the_windows_opening_is_told_at_most_a_window() {
        let limiter = FixedWindowLimiter::new(1, WINDOW, 10);
        let start = Instant::now() + secs(5);
        assert_eq!(limiter.check(&agent("a"), start), RateDecision::Allowed);
        assert_eq!(limiter.check(&agent("a"), start - secs(1)), RateDecision::Limited { retry_after: WINDOW });
        assert_eq!(FixedWindowLimiter::per_minute(0).limit(), 1);
    }
}
