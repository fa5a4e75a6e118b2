//! Rules every [`DispatchRate`] must keep, the exact sliding window of [`crate::ports::rate`]: in any window at most
//! `limit` requests start; a refused start is told how long until one may, and waiting that long is enough; the
//! window slides one start at a time (unlike a token bucket, which would let a second burst follow the first at
//! once); a cancelled start gives its place back, once, and cancelling one that has left the window frees nothing;
//! of many starts at once exactly `limit` succeed, each with its own ticket.
//!
//! Each rule asks its fixture for a fresh rate of the limit and window it needs, and reads and passes the time
//! through the fixture's [`Timeline`]. What one implementation alone decides (what the shared one does while Redis
//! is down, that two instances share one log) is tested beside it.

use std::collections::HashSet;
use std::time::Duration;

use super::timeline::Timeline;
use crate::{DispatchRate, EndpointRate, RateTicket};

/// How a rule gets the implementation under test.
pub trait DispatchRateFixture {
    /// A rate of at most `limit` starts in any `window` that has recorded no start yet.
    fn rate(&self, limit: usize, window: Duration) -> Box<dyn DispatchRate>;

    /// The time the rate's callers pass.
    fn timeline(&self) -> &dyn Timeline;
}

/// A window that does not end while a rule runs.
const LONG: Duration = Duration::from_secs(60);
/// A window that a rule on a real clock waits out.
const SHORT: Duration = Duration::from_millis(400);

/// The wait of a refusal; panics, saying `what`, when the start was allowed.
fn refused(outcome: Result<RateTicket, Duration>, what: &str) -> Duration {
    match outcome {
        Err(wait) => wait,
        Ok(ticket) => panic!("{what}: started ({ticket:?}), expected a refusal"),
    }
}

fn started(outcome: Result<RateTicket, Duration>, what: &str) -> RateTicket {
    outcome.unwrap_or_else(|wait| panic!("{what}: refused (wait {wait:?}), expected a start"))
}

/// `limit` starts at once succeed; every further one is refused, told to wait more than nothing and at most the
/// window.
pub fn never_more_than_the_limit_start_in_a_window<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.rate(3, LONG);
    let time = fixture.timeline();
    for n in 1..=3 {
        started(rate.try_start(time.now()), &format!("start {n} of a limit of 3"));
    }
    for n in 4..=5 {
        let wait = refused(rate.try_start(time.now()), &format!("start {n} of a limit of 3"));
        assert!(wait > Duration::ZERO && wait <= LONG, "start {n}: wait {wait:?}");
    }
}

/// Waiting out a refusal's wait is enough for the next start.
pub fn a_refused_start_is_told_when_one_may_start<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.rate(2, SHORT);
    let time = fixture.timeline();
    for _ in 0..2 {
        started(rate.try_start(time.now()), "a start within the limit");
    }
    let wait = refused(rate.try_start(time.now()), "the third start of a limit of 2");
    assert!(wait > Duration::ZERO && wait <= SHORT, "wait {wait:?}");
    time.wait(wait + time.slack());
    started(rate.try_start(time.now()), "a start once the wait is over");
}

/// The window slides: once the oldest start leaves it, one place frees, not `limit` of them. With a limit of 2, a
/// start half a window after the first one is still in the window when the first leaves it, so after the first
/// leaves, one start goes and the next waits for the second to leave (a token bucket would let both go).
pub fn the_window_slides_one_start_at_a_time<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    let window = Duration::from_millis(600);
    let rate = fixture.rate(2, window);
    let time = fixture.timeline();
    started(rate.try_start(time.now()), "the first start");
    time.wait(window / 2);
    started(rate.try_start(time.now()), "the second start, half a window later");
    let first_leaves = refused(rate.try_start(time.now()), "a third start while both are in the window");
    assert!(first_leaves <= window / 2 + time.slack(), "told to wait {first_leaves:?} for the first to leave");
    time.wait(first_leaves + time.slack());
    started(rate.try_start(time.now()), "a start once the first has left the window");
    let second_leaves = refused(rate.try_start(time.now()), "another start while the second is still in the window");
    assert!(second_leaves < window, "told to wait {second_leaves:?} for the second to leave");
    time.wait(second_leaves + time.slack());
    started(rate.try_start(time.now()), "a start once the second has left the window");
}

/// Cancelling a start (its request did not happen) frees its place at once; cancelling the same ticket again frees
/// nothing more.
pub fn a_cancelled_start_gives_its_place_back_once<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.rate(2, LONG);
    let time = fixture.timeline();
    let first = started(rate.try_start(time.now()), "the first start");
    started(rate.try_start(time.now()), "the second start");
    refused(rate.try_start(time.now()), "a third start of a limit of 2");
    rate.cancel(first);
    started(rate.try_start(time.now()), "a start in the place the cancelled one gave back");
    rate.cancel(first);
    refused(rate.try_start(time.now()), "a start after cancelling the same ticket twice");
}

/// A start that has left the window holds no place any more, so cancelling it frees none.
pub fn cancelling_a_start_that_left_the_window_frees_nothing<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.rate(1, SHORT);
    let time = fixture.timeline();
    let old = started(rate.try_start(time.now()), "the first start");
    time.wait(SHORT + time.slack());
    started(rate.try_start(time.now()), "a start a window later");
    rate.cancel(old);
    refused(rate.try_start(time.now()), "a start after cancelling one that had left the window");
}

/// Starts from many threads at once: exactly `limit` succeed, each with a ticket of its own (what `cancel` takes
/// back).
pub fn concurrent_starts_take_exactly_the_limit_with_distinct_tickets<F: DispatchRateFixture + ?Sized>(fixture: &F) {
    const LIMIT: usize = 10;
    let rate = fixture.rate(LIMIT, LONG);
    let (rate, time) = (&*rate, fixture.timeline());
    let tickets: Vec<RateTicket> = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| (0..10).filter_map(|_| rate.try_start(time.now()).ok()).collect::<Vec<_>>()))
            .collect();
        callers.into_iter().flat_map(|caller| caller.join().expect("a caller thread")).collect()
    });
    assert_eq!(tickets.len(), LIMIT, "80 starts at once against a limit of {LIMIT}");
    assert_eq!(tickets.iter().collect::<HashSet<_>>().len(), LIMIT, "tickets {tickets:?}");
}

/// How a rule of the per-endpoint rate gets the implementation under test.
pub trait EndpointRateFixture {
    /// Per-endpoint logs of `window` that have recorded no start yet.
    fn endpoint_rate(&self, window: Duration) -> Box<dyn EndpointRate>;

    /// The time the rate's callers pass.
    fn timeline(&self) -> &dyn Timeline;
}

/// Endpoints are counted apart: one at its limit refuses, and the others, with their own limits, still start.
pub fn each_endpoint_has_its_own_limit_and_window<F: EndpointRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.endpoint_rate(LONG);
    let time = fixture.timeline();
    for n in 1..=2 {
        started(rate.try_start(1, 2, time.now()), &format!("endpoint 1, start {n} of a limit of 2"));
    }
    let wait = refused(rate.try_start(1, 2, time.now()), "endpoint 1, start 3 of a limit of 2");
    assert!(wait > Duration::ZERO && wait <= LONG, "wait {wait:?}");
    for n in 1..=3 {
        started(rate.try_start(2, 3, time.now()), &format!("endpoint 2, start {n} of a limit of 3 beside a full 1"));
    }
    refused(rate.try_start(2, 3, time.now()), "endpoint 2, start 4 of a limit of 3");
    refused(rate.try_start(1, 2, time.now()), "endpoint 1 still full");
}

/// Waiting out an endpoint's refusal is enough for its next start.
pub fn a_refused_endpoint_start_is_told_when_one_may_start<F: EndpointRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.endpoint_rate(SHORT);
    let time = fixture.timeline();
    started(rate.try_start(7, 1, time.now()), "the first start");
    let wait = refused(rate.try_start(7, 1, time.now()), "the second start of a limit of 1");
    assert!(wait > Duration::ZERO && wait <= SHORT, "wait {wait:?}");
    time.wait(wait + time.slack());
    started(rate.try_start(7, 1, time.now()), "a start once the wait is over");
}

/// A cancelled start gives its place back to its endpoint, once; the other endpoints' logs are untouched.
pub fn a_cancelled_endpoint_start_frees_only_its_endpoint<F: EndpointRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.endpoint_rate(LONG);
    let time = fixture.timeline();
    let first = started(rate.try_start(1, 1, time.now()), "endpoint 1's start");
    started(rate.try_start(2, 1, time.now()), "endpoint 2's start");
    rate.cancel(1, first);
    refused(rate.try_start(2, 1, time.now()), "endpoint 2 after endpoint 1's start was cancelled");
    started(rate.try_start(1, 1, time.now()), "endpoint 1 in the place its cancelled start gave back");
    rate.cancel(1, first);
    refused(rate.try_start(1, 1, time.now()), "endpoint 1 after cancelling the same ticket twice");
}

/// A limit passed with a start applies to that start: raised, more may start at once; lowered, fewer.
pub fn a_changed_limit_applies_from_the_next_start<F: EndpointRateFixture + ?Sized>(fixture: &F) {
    let rate = fixture.endpoint_rate(LONG);
    let time = fixture.timeline();
    started(rate.try_start(3, 1, time.now()), "the first start of a limit of 1");
    refused(rate.try_start(3, 1, time.now()), "a second start of a limit of 1");
    started(rate.try_start(3, 2, time.now()), "a second start once the limit is 2");
    refused(rate.try_start(3, 2, time.now()), "a third start of a limit of 2");
    refused(rate.try_start(3, 1, time.now()), "a start once the limit is back to 1");
}

/// Starts of one endpoint from many threads at once: exactly its limit succeed.
pub fn concurrent_endpoint_starts_take_exactly_the_limit<F: EndpointRateFixture + ?Sized>(fixture: &F) {
    const LIMIT: usize = 4;
    let rate = fixture.endpoint_rate(LONG);
    let (rate, time) = (&*rate, fixture.timeline());
    let tickets: Vec<RateTicket> = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| (0..5).filter_map(|_| rate.try_start(9, LIMIT, time.now()).ok()).collect::<Vec<_>>())
            })
            .collect();
        callers.into_iter().flat_map(|caller| caller.join().expect("a caller thread")).collect()
    });
    assert_eq!(tickets.len(), LIMIT, "30 starts at once against a limit of {LIMIT}");
    assert_eq!(tickets.iter().collect::<HashSet<_>>().len(), LIMIT, "tickets {tickets:?}");
}
