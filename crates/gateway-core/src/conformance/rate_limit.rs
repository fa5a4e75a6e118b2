//! Rules every [`RateLimiter`] must keep, the fixed window of [`crate::ports::rate_limit`]: an agent's first counted
//! request opens a window in which at most `limit` of its requests are allowed; agents are counted apart; a refused
//! request is told when its window ends (never more than a window away, and waiting that long is enough), and is
//! neither counted in the next window nor moves the end of this one; of many requests at once, exactly `limit` are
//! allowed.
//!
//! Each rule asks its fixture for a fresh limiter of the limit and window it needs, and reads and passes the time
//! through the fixture's [`Timeline`]. What one implementation alone decides (how many agents the in-process
//! limiter holds, what the shared one does while Redis is down) is tested beside it.

use std::time::Duration;

use super::timeline::Timeline;
use crate::{AgentId, RateDecision, RateLimiter};

/// How a rule gets the implementation under test.
pub trait RateLimiterFixture {
    /// A limiter of `limit` requests per agent per `window` that has counted nothing yet.
    fn limiter(&self, limit: u32, window: Duration) -> Box<dyn RateLimiter>;

    /// The time the limiter's callers pass.
    fn timeline(&self) -> &dyn Timeline;
}

/// A window that does not end while a rule runs.
const LONG: Duration = Duration::from_secs(60);
/// A window that a rule on a real clock waits out.
const SHORT: Duration = Duration::from_millis(400);

fn agent(id: &str) -> AgentId {
    AgentId::new(id).expect("a valid agent id")
}

/// The `retry_after` of a refusal; panics, saying `what`, when the request was allowed.
fn refused(decision: RateDecision, what: &str) -> Duration {
    match decision {
        RateDecision::Limited { retry_after } => retry_after,
        RateDecision::Allowed => panic!("{what}: allowed, expected a refusal"),
    }
}

/// `limit` requests of an agent are allowed in a window, and every further one is refused, told to retry after
/// more than nothing and at most the window.
pub fn the_limit_holds_within_a_window<F: RateLimiterFixture + ?Sized>(fixture: &F) {
    let limiter = fixture.limiter(5, LONG);
    let time = fixture.timeline();
    let a = agent("agent-a");
    for n in 1..=5 {
        assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed, "request {n} of a limit of 5");
    }
    for n in 6..=8 {
        let retry_after = refused(limiter.check(&a, time.now()), &format!("request {n} of a limit of 5"));
        assert!(retry_after > Duration::ZERO && retry_after <= LONG, "request {n}: retry after {retry_after:?}");
    }
}

/// One agent at its limit holds no other back, and the others' requests do not count towards its limit.
pub fn agents_are_counted_apart<F: RateLimiterFixture + ?Sized>(fixture: &F) {
    let limiter = fixture.limiter(2, LONG);
    let time = fixture.timeline();
    let (a, b) = (agent("agent-a"), agent("agent-b"));
    for _ in 0..2 {
        assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed);
    }
    refused(limiter.check(&a, time.now()), "agent-a over its limit");
    for n in 1..=2 {
        assert_eq!(limiter.check(&b, time.now()), RateDecision::Allowed, "agent-b's request {n}, agent-a at its limit");
    }
    refused(limiter.check(&b, time.now()), "agent-b over its limit");
    refused(limiter.check(&a, time.now()), "agent-a still over its limit");
}

/// Waiting out a refusal's `retry_after` is enough: the next request opens a new window, which allows `limit`
/// requests again (the refused one was not counted in it) and no more.
pub fn a_refused_request_is_told_when_its_window_ends<F: RateLimiterFixture + ?Sized>(fixture: &F) {
    let limiter = fixture.limiter(2, SHORT);
    let time = fixture.timeline();
    let a = agent("agent-a");
    for _ in 0..2 {
        assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed);
    }
    let retry_after = refused(limiter.check(&a, time.now()), "the third request of a limit of 2");
    assert!(retry_after > Duration::ZERO && retry_after <= SHORT, "retry after {retry_after:?}");
    time.wait(retry_after + time.slack());
    for n in 1..=2 {
        assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed, "request {n} of the next window");
    }
    refused(limiter.check(&a, time.now()), "the third request of the next window");
}

/// Refused requests do not push the window's end back: it ends a window after the request that opened it however
/// many were refused in it, and each refusal says so (its `retry_after` shrinks as the end nears).
pub fn refused_requests_do_not_move_the_end_of_the_window<F: RateLimiterFixture + ?Sized>(fixture: &F) {
    let limiter = fixture.limiter(1, SHORT);
    let time = fixture.timeline();
    let a = agent("agent-a");
    assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed, "the request that opens the window");
    let step = SHORT / 4;
    let mut previous = SHORT;
    for n in 1..=3 {
        time.wait(step);
        let retry_after = refused(limiter.check(&a, time.now()), &format!("refusal {n}"));
        assert!(
            retry_after <= previous.saturating_sub(step) + time.slack(),
            "refusal {n}, {step:?} after the one before: retry after {retry_after:?}, {previous:?} before"
        );
        previous = retry_after;
    }
    time.wait(previous + time.slack());
    assert_eq!(limiter.check(&a, time.now()), RateDecision::Allowed, "the window ended when the refusals said");
}

/// Requests of one agent from many threads at once: exactly `limit` are allowed, however they interleave.
pub fn concurrent_requests_allow_exactly_the_limit<F: RateLimiterFixture + ?Sized>(fixture: &F) {
    const LIMIT: u32 = 50;
    let limiter = fixture.limiter(LIMIT, LONG);
    let (limiter, time) = (&*limiter, fixture.timeline());
    let busy = agent("agent-busy");
    let allowed: usize = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| (0..20).filter(|_| limiter.check(&busy, time.now()) == RateDecision::Allowed).count())
            })
            .collect();
        callers.into_iter().map(|caller| caller.join().expect("a caller thread")).sum()
    });
    assert_eq!(allowed, LIMIT as usize, "160 requests at once against a limit of {LIMIT}");
}
