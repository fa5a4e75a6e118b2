//! The dispatch rate port: how many outbound requests may start now (FR-10.12 in docs/requirements.md: "MUST
//! NOT dispatch more than 5 outbound HTTP requests per second").
//!
//! The rule is exact, not averaged: in any one-second window at most `limit` requests start. A token bucket would
//! let a full bucket go at the end of one second and another at the start of the next; a sliding log of the last
//! `limit` starts cannot. [`SlidingWindowRate`] is the in-process adapter (and the fake); a cluster-wide adapter
//! keeps the same log in shared storage.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runtime::sync::lock;

/// One recorded start, to take back with [`DispatchRate::cancel`] if the request does not happen after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateTicket(pub u64);

/// Counts outbound request starts.
pub trait DispatchRate: Send + Sync + Debug {
    /// Records a start at `now` (the caller's monotonic time; an adapter with a shared clock may use its own) if
    /// fewer than the limit started in the second before it; otherwise how long until one may.
    fn try_start(&self, now: Instant) -> Result<RateTicket, Duration>;

    /// Takes back a start that did not happen (the row it was for was claimed by someone else), so the rate is
    /// not spent on nothing.
    fn cancel(&self, ticket: RateTicket);

    /// Whether the log is shared with other processes, so that `try_start` and `cancel` make a round trip: async
    /// callers then run them on the blocking pool instead of a runtime worker. The in-process log answers at once.
    fn is_shared(&self) -> bool {
        false
    }
}

/// At most `limit` starts in any window of `window`, in this process.
#[derive(Debug)]
pub struct SlidingWindowRate {
    limit: usize,
    window: Duration,
    starts: Mutex<Starts>,
}

#[derive(Debug, Default)]
struct Starts {
    next_ticket: u64,
    /// The starts of the last `window`, oldest first; never more than the largest limit a start was checked against.
    recent: VecDeque<(Instant, RateTicket)>,
}

impl SlidingWindowRate {
    /// `limit` starts per `window` (a limit of zero is taken as one: a dispatcher that can never start is a
    /// misconfiguration that the binary refuses at start anyway).
    pub fn new(limit: usize, window: Duration) -> Self {
        Self { limit: limit.max(1), window, starts: Mutex::new(Starts::default()) }
    }

    /// `limit` starts per second.
    pub fn per_second(limit: usize) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// No start of the window that ends at `now` is left in the log (a keeper of many logs may drop it).
    pub fn is_idle(&self, now: Instant) -> bool {
        lock(&self.starts).recent.back().is_none_or(|(at, _)| *at + self.window <= now)
    }
}

impl SlidingWindowRate {
    /// [`DispatchRate::try_start`] against `limit` instead of the rate's own (at least one): what a per-endpoint log
    /// whose limit may change between starts uses. A lowered limit leaves more starts in the log than it allows;
    /// the wait is then until enough of them have left it.
    pub fn try_start_within(&self, limit: usize, now: Instant) -> Result<RateTicket, Duration> {
        let limit = limit.max(1);
        let mut starts = lock(&self.starts);
        // A start exactly one window ago is outside the window that ends now: windows are half-open.
        while starts.recent.front().is_some_and(|(at, _)| *at + self.window <= now) {
            starts.recent.pop_front();
        }
        if let Some(excess) = starts.recent.len().checked_sub(limit)
            && let Some((blocking, _)) = starts.recent.get(excess)
        {
            return Err(*blocking + self.window - now);
        }
        let ticket = RateTicket(starts.next_ticket);
        starts.next_ticket += 1;
        // Callers read their clock before taking the lock, so a concurrent caller may bring an earlier instant:
        // keep the log ordered, or the expiry above would stop at the wrong entry.
        let position = starts.recent.partition_point(|(at, _)| *at <= now);
        starts.recent.insert(position, (now, ticket));
        Ok(ticket)
    }
}

impl DispatchRate for SlidingWindowRate {
    fn try_start(&self, now: Instant) -> Result<RateTicket, Duration> {
        self.try_start_within(self.limit, now)
    }

    fn cancel(&self, ticket: RateTicket) {
        let mut starts = lock(&self.starts);
        if let Some(position) = starts.recent.iter().rposition(|(_, held)| *held == ticket) {
            starts.recent.remove(position);
        }
    }
}

/// Counts the outbound request starts of each webhook endpoint (a config's optional `rate_limit_per_second`), apart
/// from the global [`DispatchRate`]: an attempt to a limited endpoint needs a start of both. The rule per endpoint is
/// the global one's (an exact sliding log); each endpoint has a log of its own, and its limit is passed with every
/// start, so a changed limit applies from the next start on.
pub trait EndpointRate: Send + Sync + Debug {
    /// Records a start of `endpoint` at `now` if fewer than `limit` of its starts happened in the window before it;
    /// otherwise how long until one may.
    fn try_start(&self, endpoint: i64, limit: usize, now: Instant) -> Result<RateTicket, Duration>;

    /// Takes back a start of `endpoint` that did not happen.
    fn cancel(&self, endpoint: i64, ticket: RateTicket);

    /// Whether the logs are shared with other processes (each call a round trip), as [`DispatchRate::is_shared`].
    fn is_shared(&self) -> bool {
        false
    }
}

/// Most endpoints whose logs [`InProcessEndpointRate`] keeps before it drops those with no start left in the window.
const KEPT_IDLE_ENDPOINTS: usize = 1024;

/// [`EndpointRate`] in this process (and the fake): one [`SlidingWindowRate`] per endpoint, made at its first
/// start, each start checked against the limit it brings.
#[derive(Debug)]
pub struct InProcessEndpointRate {
    window: Duration,
    endpoints: Mutex<std::collections::HashMap<i64, SlidingWindowRate>>,
}

impl InProcessEndpointRate {
    pub fn new(window: Duration) -> Self {
        Self { window, endpoints: Mutex::new(std::collections::HashMap::new()) }
    }

    pub fn per_second() -> Self {
        Self::new(Duration::from_secs(1))
    }
}

impl Default for InProcessEndpointRate {
    fn default() -> Self {
        Self::per_second()
    }
}

impl EndpointRate for InProcessEndpointRate {
    fn try_start(&self, endpoint: i64, limit: usize, now: Instant) -> Result<RateTicket, Duration> {
        let mut endpoints = lock(&self.endpoints);
        if endpoints.len() >= KEPT_IDLE_ENDPOINTS {
            endpoints.retain(|_, rate| !rate.is_idle(now));
        }
        let rate = endpoints.entry(endpoint).or_insert_with(|| SlidingWindowRate::new(limit, self.window));
        rate.try_start_within(limit, now)
    }

    fn cancel(&self, endpoint: i64, ticket: RateTicket) {
        if let Some(rate) = lock(&self.endpoints).get(&endpoint) {
            rate.cancel(ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::rate::DispatchRateFixture;
    use crate::conformance::timeline::{ManualTimeline, Timeline};

    /// The in-process log on a manual timeline: the rules land on every window's end exactly.
    #[derive(Debug, Default)]
    struct InProcess(ManualTimeline);

    impl DispatchRateFixture for InProcess {
        fn rate(&self, limit: usize, window: Duration) -> Box<dyn DispatchRate> {
            Box::new(SlidingWindowRate::new(limit, window))
        }

        fn timeline(&self) -> &dyn Timeline {
            &self.0
        }
    }

    crate::dispatch_rate_conformance!(Some(Box::<InProcess>::default()));

    impl crate::conformance::rate::EndpointRateFixture for InProcess {
        fn endpoint_rate(&self, window: Duration) -> Box<dyn EndpointRate> {
            Box::new(InProcessEndpointRate::new(window))
        }

        fn timeline(&self) -> &dyn Timeline {
            &self.0
        }
    }

    crate::endpoint_rate_conformance!(Some(Box::<InProcess>::default()));

    #[test]
    fn idle_endpoints_are_dropped_past_the_kept_number_and_busy_ones_kept() {
        let rate = InProcessEndpointRate::per_second();
        let start = Instant::now();
        assert!(rate.try_start(-1, 1, start + ms(1500)).is_ok());
        for endpoint in 0..KEPT_IDLE_ENDPOINTS as i64 {
            assert!(rate.try_start(endpoint, 1, start).is_ok());
        }
        // A second later every log but -1's is empty: the next start drops them, and -1 still refuses.
        assert!(rate.try_start(5000, 1, start + ms(2000)).is_ok());
        assert_eq!(lock(&rate.endpoints).len(), 2);
        assert!(rate.try_start(-1, 1, start + ms(2000)).is_err());
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn never_more_than_the_limit_in_any_window() {
        let rate = SlidingWindowRate::per_second(5);
        let start = Instant::now();
        for _ in 0..5 {
            assert!(rate.try_start(start).is_ok());
        }
        assert_eq!(rate.try_start(start), Err(ms(1000)));
        assert_eq!(rate.try_start(start + ms(400)), Err(ms(600)));
        // Exactly one second after the first five, the next five may start; not a moment before.
        assert_eq!(rate.try_start(start + ms(999)), Err(ms(1)));
        for _ in 0..5 {
            assert!(rate.try_start(start + ms(1000)).is_ok());
        }
        assert!(rate.try_start(start + ms(1999)).is_err());
    }

    #[test]
    fn spread_starts_free_up_one_at_a_time() {
        let rate = SlidingWindowRate::per_second(2);
        let start = Instant::now();
        assert!(rate.try_start(start).is_ok());
        assert!(rate.try_start(start + ms(300)).is_ok());
        // The window (start + 0.5 s - 1 s, start + 0.5 s] holds both; the first leaves it at start + 1 s.
        assert_eq!(rate.try_start(start + ms(500)), Err(ms(500)));
        assert!(rate.try_start(start + ms(1000)).is_ok());
        assert_eq!(rate.try_start(start + ms(1000)), Err(ms(300)));
    }

    #[test]
    fn a_cancelled_start_gives_its_place_back() {
        let rate = SlidingWindowRate::per_second(1);
        let start = Instant::now();
        let ticket = rate.try_start(start).unwrap();
        assert!(rate.try_start(start).is_err());
        rate.cancel(ticket);
        assert!(rate.try_start(start + ms(1)).is_ok());
        // Cancelling twice, or a ticket that has left the window, changes nothing.
        rate.cancel(ticket);
        assert!(rate.try_start(start + ms(2)).is_err());
    }

    #[test]
    fn an_out_of_order_start_keeps_the_log_ordered() {
        let rate = SlidingWindowRate::per_second(2);
        let start = Instant::now();
        assert!(rate.try_start(start + ms(500)).is_ok());
        assert!(rate.try_start(start).is_ok());
        // The earlier start expires first.
        assert_eq!(rate.try_start(start + ms(600)), Err(ms(400)));
        assert!(rate.try_start(start + ms(1000)).is_ok());
    }

    #[test]
    fn a_zero_limit_is_one() {
        assert_eq!(SlidingWindowRate::per_second(0).limit(), 1);
    }
}
