//! Whether the eviction loop could hear heartbeats, and judge them, since its last pass.
//!
//! Silence is judged by receipts, in wall-clock time, and a pass is only as good as the receipts it can see. Each
//! of these leaves a stretch of time the loop could not judge, and the next pass would take it for every agent's
//! silence, evicting the whole fleet at once:
//! - the process stopped (SIGSTOP, a debugger), the machine asleep (a laptop's lid, a paused VM), the wall clock
//!   stepped forward (NTP correcting a board without a real-time clock);
//! - the store out of reach: heartbeats answered 503 meanwhile leave their receipts waiting on each instance of a
//!   cluster until it is back, while the passes fail, or hang on the store until it answers;
//! - the process just started: a cluster stopped whole (an upgrade, a site outage) left receipts as old as the
//!   outage.
//!
//! So the loop remembers when its last pass that did not fail started (the last instant it judged). A pass later than
//! one interval after that by more than [`MAX_UNHEARD_SHARE`] of the threshold, by either clock, judges silence as
//! of that instant — only agents already overdue then go — and once such a pass gets through, evictions are held for
//! one threshold: an agent still alive has had the time to heartbeat again, one that really went silent is evicted
//! one threshold late. A started process holds them until it has listened for one threshold. Kubernetes' node
//! controller makes the same choice by judging leases by its own observation time.

use std::time::Duration;

use gateway_core::FencingToken;
use time::OffsetDateTime;
use tokio::time::Instant;

/// The share of the eviction threshold the loop may go without judging (beyond its interval, by the monotonic clock
/// or by the wall clock) before that time counts as unheard: a quarter, so that with the FR-10.2 constants (a
/// heartbeat every 30 s, evicted after 90 s) a stop or an outage shorter than 22.5 s holds nothing, and no agent that
/// heartbeats on time can be evicted by one that short.
pub const MAX_UNHEARD_SHARE: u32 = 4;

/// An instant by both clocks, in a leadership term.
type Moment = (Instant, OffsetDateTime, FencingToken);

/// What the eviction loop remembers between passes.
#[derive(Debug)]
pub(crate) struct Hearing {
    threshold: Duration,
    interval: Duration,
    /// When the pass under way started.
    started: Option<Moment>,
    /// When the last pass that did not fail started: the last instant the loop judged.
    judged: Option<Moment>,
    /// How long the loop had not judged when the pass under way started, if that was past the tolerance.
    unheard: Option<Duration>,
    /// Evictions are held until then (wall clock).
    held_until: Option<OffsetDateTime>,
}

/// What a pass about to start should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Evict,
    /// Hold: the loop could not judge for a while, and agents have not yet had a threshold to be heard again.
    Hold {
        until: OffsetDateTime,
    },
    /// The loop could not judge for a while: judge silence as of `as_of`, the last instant it did.
    EvictAsOf {
        as_of: OffsetDateTime,
    },
}

/// How a pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It examined the map, or was held.
    Done,
    /// The store refused or could not be reached.
    Failed,
}

impl Hearing {
    pub(crate) fn new(threshold: Duration, interval: Duration) -> Self {
        Self { threshold, interval, started: None, judged: None, unheard: None, held_until: None }
    }

    /// Evictions held until one threshold after `started`, when the loop began to listen: a process that has just
    /// started cannot tell how long its cluster was down, and would judge that time as every agent's silence. An
    /// instance judges nobody silent for longer than it has itself been listening; an agent heard since it started
    /// cannot be overdue before then anyway.
    pub(crate) fn listening_since(mut self, started: OffsetDateTime) -> Self {
        self.held_until = Some(started + self.threshold);
        self
    }

    /// Called when a pass of term `token` is about to start at `(mono, wall)`.
    pub(crate) fn before_pass(&mut self, mono: Instant, wall: OffsetDateTime, token: FencingToken) -> Verdict {
        self.started = Some((mono, wall, token));
        self.unheard = None;
        if let Some(until) = self.held_until {
            if wall < until {
                return Verdict::Hold { until };
            }
            self.held_until = None;
        }
        // The first pass of a term has nothing to compare with: a new leader judges receipts the other instances
        // kept writing.
        let Some((judged_mono, judged_wall, _)) = self.judged.filter(|(_, _, judged_token)| *judged_token == token)
        else {
            return Verdict::Evict;
        };
        let by_monotonic = mono.saturating_duration_since(judged_mono);
        let by_wall = Duration::try_from(wall - judged_wall).unwrap_or(Duration::ZERO);
        let unheard = by_monotonic.max(by_wall).saturating_sub(self.interval);
        if unheard > self.threshold / MAX_UNHEARD_SHARE {
            self.unheard = Some(unheard);
            return Verdict::EvictAsOf { as_of: judged_wall };
        }
        Verdict::Evict
    }

    /// Called when that pass has ended, at `ended` (wall clock).
    pub(crate) fn after_pass(&mut self, ended: OffsetDateTime, outcome: Outcome) {
        let started = self.started.take();
        if outcome == Outcome::Failed {
            return;
        }
        if let Some(unheard) = self.unheard.take() {
            let until = ended + self.threshold;
            tracing::warn!(
                unheard_s = unheard.as_secs_f64(),
                held_until = %until,
                "the eviction loop could not judge heartbeats for a while (the process stopped, the machine asleep, \
                 the clock stepped forward, or the store out of reach): evictions held for one threshold"
            );
            self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
        }
        self.judged = started;
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);
    const THRESHOLD: Duration = Duration::from_secs(90);
    const INTERVAL: Duration = Duration::from_secs(30);
    const TOLERANCE: Duration = Duration::from_millis(22_500);
    const TERM: FencingToken = FencingToken(1);

    /// Both clocks, moved together or apart.
    struct Clocks {
        mono: Instant,
        wall: OffsetDateTime,
    }

    impl Clocks {
        fn new() -> Self {
            Self { mono: Instant::now(), wall: START }
        }

        fn advance(&mut self, by: Duration) -> &mut Self {
            self.mono += by;
            self.wall += by;
            self
        }
    }

    /// A pass now that takes no time and ends as `outcome` says.
    fn pass(hearing: &mut Hearing, clocks: &Clocks, outcome: Outcome) -> Verdict {
        let verdict = hearing.before_pass(clocks.mono, clocks.wall, TERM);
        hearing.after_pass(clocks.wall, outcome);
        verdict
    }

    /// One pass each `interval`, ending as `outcomes` say; the verdicts.
    fn passes(hearing: &mut Hearing, clocks: &mut Clocks, interval: Duration, outcomes: &[Outcome]) -> Vec<Verdict> {
        outcomes.iter().map(|outcome| pass(hearing, clocks.advance(interval), *outcome)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn passes_on_time_or_a_little_late_evict() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let mut clocks = Clocks::new();
        assert_eq!(pass(&mut hearing, &clocks, Outcome::Done), Verdict::Evict);
        let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[Outcome::Done; 5]);
        assert!(verdicts.iter().all(|v| *v == Verdict::Evict), "{verdicts:?}");
        // Late by exactly the tolerance: still heard.
        assert_eq!(pass(&mut hearing, clocks.advance(INTERVAL + TOLERANCE), Outcome::Done), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_or_a_forward_step_judges_as_of_the_last_pass_then_holds_one_threshold() {
        let late = INTERVAL + TOLERANCE + Duration::from_secs(1);
        // A stopped process or a sleeping machine (both clocks), the wall clock alone, the monotonic clock alone.
        for (by_mono, by_wall) in [(late, late), (INTERVAL, late), (late, INTERVAL), (Duration::from_secs(3600), late)]
        {
            let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
            let mut clocks = Clocks::new();
            pass(&mut hearing, &clocks, Outcome::Done);
            clocks.mono += by_mono;
            clocks.wall += by_wall;
            let resumed = clocks.wall;
            assert_eq!(pass(&mut hearing, &clocks, Outcome::Done), Verdict::EvictAsOf { as_of: START });
            // Held while less than a threshold has passed since; then passes evict again.
            let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[Outcome::Done; 3]);
            let held = Verdict::Hold { until: resumed + THRESHOLD };
            assert_eq!(verdicts, vec![held, held, Verdict::Evict], "{by_mono:?} / {by_wall:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_held_up_past_the_tolerance_makes_the_next_judge_as_of_it() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let mut clocks = Clocks::new();
        pass(&mut hearing, &clocks, Outcome::Done);
        // A pass that waited on its store for longer than an interval and the tolerance, then got through.
        let held_up = clocks.advance(INTERVAL).wall;
        assert_eq!(hearing.before_pass(clocks.mono, clocks.wall, TERM), Verdict::Evict);
        clocks.advance(INTERVAL + TOLERANCE + Duration::from_secs(1));
        hearing.after_pass(clocks.wall, Outcome::Done);
        let back = clocks.wall;
        assert_eq!(pass(&mut hearing, &clocks, Outcome::Done), Verdict::EvictAsOf { as_of: held_up });
        let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[Outcome::Done; 3]);
        let held = Verdict::Hold { until: back + THRESHOLD };
        assert_eq!(verdicts, vec![held, held, Verdict::Evict]);
    }

    #[tokio::test(start_paused = true)]
    async fn passes_failing_past_the_tolerance_judge_as_of_the_last_that_did_not_then_hold_one_threshold() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let mut clocks = Clocks::new();
        hearing.before_pass(clocks.mono, clocks.wall, TERM);
        // As of the instant that pass judged, not its end.
        hearing.after_pass(clocks.wall + Duration::from_secs(2), Outcome::Done);
        let (failed, done) = (Outcome::Failed, Outcome::Done);
        // Failing from the pass at +30 s: the one at +60 s is an interval and more than the tolerance past the last
        // judgement, and judges as of it; the store is back for the one at +120 s.
        let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[failed, failed, failed, done]);
        let as_of = Verdict::EvictAsOf { as_of: START };
        assert_eq!(verdicts, vec![Verdict::Evict, as_of, as_of, as_of]);
        let back = clocks.wall;
        let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[done; 4]);
        let held = Verdict::Hold { until: back + THRESHOLD };
        assert_eq!(verdicts, vec![held, held, Verdict::Evict, Verdict::Evict]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_within_the_tolerance_hold_nothing() {
        let interval = Duration::from_secs(5);
        let mut hearing = Hearing::new(THRESHOLD, interval);
        let mut clocks = Clocks::new();
        pass(&mut hearing, &clocks, Outcome::Done);
        // Four failed passes: 25 s from the last judgement to the fifth pass, 20 s more than an interval.
        let mut outcomes = vec![Outcome::Failed; 4];
        outcomes.extend([Outcome::Done; 4]);
        let verdicts = passes(&mut hearing, &mut clocks, interval, &outcomes);
        assert!(verdicts.iter().all(|verdict| *verdict == Verdict::Evict), "{verdicts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_instance_judges_nobody_silent_for_longer_than_it_has_listened() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL).listening_since(START);
        let mut clocks = Clocks::new();
        let held = Verdict::Hold { until: START + THRESHOLD };
        assert_eq!(pass(&mut hearing, &clocks, Outcome::Done), held);
        let verdicts = passes(&mut hearing, &mut clocks, INTERVAL, &[Outcome::Done; 4]);
        assert_eq!(verdicts, vec![held, held, Verdict::Evict, Verdict::Evict]);
        // Leading for the first time long after it started: nothing to hold.
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL).listening_since(START);
        let hour = Duration::from_secs(3600);
        assert_eq!(pass(&mut hearing, Clocks::new().advance(hour), Outcome::Done), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_term_compares_with_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let mut clocks = Clocks::new();
        pass(&mut hearing, &clocks, Outcome::Done);
        // Leading again after an hour as a follower, and after failures that ended the last term: the first pass of
        // the new term evicts.
        clocks.advance(Duration::from_secs(3600));
        hearing.before_pass(clocks.mono, clocks.wall, TERM);
        hearing.after_pass(clocks.wall, Outcome::Failed);
        clocks.advance(INTERVAL);
        assert_eq!(hearing.before_pass(clocks.mono, clocks.wall, FencingToken(2)), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backward_step_holds_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let mut clocks = Clocks::new();
        pass(&mut hearing, &clocks, Outcome::Done);
        clocks.mono += INTERVAL;
        clocks.wall -= time::Duration::hours(1);
        assert_eq!(pass(&mut hearing, &clocks, Outcome::Done), Verdict::Evict);
    }
}
