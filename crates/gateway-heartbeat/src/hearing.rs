//! Whether the gateway could hear heartbeats since its last eviction pass.
//!
//! Silence is judged by receipts, in wall-clock time. If the gateway itself could not receive for a while — the
//! process stopped (SIGSTOP, a debugger), the machine asleep (a laptop's lid, a paused VM), or the wall clock
//! stepped forward (NTP correcting a board without a real-time clock) — every receipt looks that much older at
//! the next pass, and a pass would evict the whole fleet at once for a silence that was the gateway's own. So a
//! pass that comes later than its interval by more than [`MAX_UNHEARD_SHARE`] of the threshold, by either clock,
//! holds evictions until the gateway has heard for one whole threshold again: an agent still alive has had the
//! time to heartbeat, and an agent that really went silent is evicted one threshold late. Kubernetes' node
//! controller makes the same choice by judging leases by its own observation time.
//!
//! A store that could not be reached is the same silence by another road: in a cluster, the heartbeats answered
//! 503 meanwhile left their receipts waiting on each instance until the store is back, and the first pass that
//! reaches it would judge the outage as every agent's silence. So passes that fail for longer than the same
//! tolerance make the next pass judge silence as of the last instant the store was reached (it evicts only the
//! agents already overdue then), and once one gets through, evictions are held for one threshold. And a process
//! that has just started holds them until it has listened for one threshold ([`Hearing::listening_since`]).

use std::time::Duration;

use gateway_core::FencingToken;
use time::OffsetDateTime;
use tokio::time::Instant;

/// The share of the eviction threshold a pass may come late by (behind its interval, by the monotonic clock or by
/// the wall clock) before the gateway counts that time as unheard: a quarter, so that with the FR-10.2 constants
/// (a heartbeat every 30 s, evicted after 90 s) a stop shorter than 22.5 s holds nothing, and no agent that
/// heartbeats on time can be evicted by a stop that short. Passes failing for longer than that count the same.
pub const MAX_UNHEARD_SHARE: u32 = 4;

/// An instant by both clocks.
type Moment = (Instant, OffsetDateTime);

/// What the eviction loop remembers between passes.
#[derive(Debug)]
pub(crate) struct Hearing {
    threshold: Duration,
    interval: Duration,
    /// The end of the last pass of the current term: both clocks, and the term.
    last: Option<(Instant, OffsetDateTime, FencingToken)>,
    /// When the pass under way started, and when the last one of this term that did not fail did.
    started: Option<Moment>,
    done: Option<Moment>,
    /// While the current term's passes fail: the start of the last one that did not (or of the first failure, when
    /// none did), the last instant the gateway knows its store could hear.
    failing_since: Option<Moment>,
    /// Evictions are held until then (wall clock).
    held_until: Option<OffsetDateTime>,
}

/// What a pass about to start should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Evict,
    /// Hold: the gateway did not hear for a while; the pass evicts nobody before the instant.
    Hold {
        until: OffsetDateTime,
    },
    /// The store could not be reached for a while: judge silence as of `as_of`, the last instant it was, so that
    /// only the agents already overdue then go.
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
        Self { threshold, interval, last: None, started: None, done: None, failing_since: None, held_until: None }
    }

    /// Evictions held until one threshold after `started`, when the loop began to listen: a process that has just
    /// started cannot tell how long its cluster was down (every instance stopped for an upgrade, a whole-site
    /// outage), and would judge that time as every agent's silence. An instance judges nobody silent for longer than
    /// it has itself been listening; an agent heard since it started cannot be overdue before then anyway.
    pub(crate) fn listening_since(mut self, started: OffsetDateTime) -> Self {
        self.held_until = Some(started + self.threshold);
        self
    }

    fn tolerance(&self) -> Duration {
        self.threshold / MAX_UNHEARD_SHARE
    }

    /// How much longer than an interval lies between `since` and `(mono, wall)`, by whichever clock says more.
    fn beyond_interval(&self, since: Moment, mono: Instant, wall: OffsetDateTime) -> (Duration, Duration, Duration) {
        let by_monotonic = mono.saturating_duration_since(since.0);
        let by_wall = Duration::try_from(wall - since.1).unwrap_or(Duration::ZERO);
        (by_monotonic.max(by_wall).saturating_sub(self.interval), by_monotonic, by_wall)
    }

    /// Called when a pass of term `token` is about to start at `(mono, wall)`.
    pub(crate) fn before_pass(&mut self, mono: Instant, wall: OffsetDateTime, token: FencingToken) -> Verdict {
        // The first pass of a term has nothing to compare with: a new leader judges receipts the other instances
        // kept writing, and a fresh single instance starts with an empty map.
        let same_term = self.last.is_some_and(|(_, _, last_token)| last_token == token);
        if !same_term {
            self.done = None;
            self.failing_since = None;
        }
        self.started = Some((mono, wall));
        if let Some((last_mono, last_wall, _)) = self.last
            && same_term
        {
            let (unheard, by_monotonic, by_wall) = self.beyond_interval((last_mono, last_wall), mono, wall);
            if unheard > self.tolerance() {
                let until = wall + self.threshold;
                tracing::warn!(
                    unheard_s = unheard.as_secs_f64(),
                    by_monotonic_s = by_monotonic.as_secs_f64(),
                    by_wall_s = by_wall.as_secs_f64(),
                    held_until = %until,
                    "the gateway did not hear heartbeats for a while (process stopped, machine asleep, or the clock \
                     stepped forward): evictions held for one threshold"
                );
                self.hold_until(until);
            }
        }
        if let Some(until) = self.held_until {
            if wall < until {
                return Verdict::Hold { until };
            }
            self.held_until = None;
        }
        match self.failing_since {
            Some(since) if self.beyond_interval(since, mono, wall).0 > self.tolerance() => {
                Verdict::EvictAsOf { as_of: since.1 }
            }
            _ => Verdict::Evict,
        }
    }

    /// Called when that pass has ended, at `(mono, wall)`.
    pub(crate) fn after_pass(&mut self, mono: Instant, wall: OffsetDateTime, token: FencingToken, outcome: Outcome) {
        match outcome {
            Outcome::Failed => {
                let since = self.done.or(self.started).unwrap_or((mono, wall));
                self.failing_since.get_or_insert(since);
            }
            Outcome::Done => {
                self.done = self.started;
                if let Some(since) = self.failing_since.take() {
                    let (unreached, _, _) = self.beyond_interval(since, mono, wall);
                    if unreached > self.tolerance() {
                        let until = wall + self.threshold;
                        tracing::warn!(
                            unreached_s = unreached.as_secs_f64(),
                            held_until = %until,
                            "the store could not be reached for a while (heartbeats meanwhile wait on each instance \
                             to be recorded): evictions held for one threshold"
                        );
                        self.hold_until(until);
                    }
                }
            }
        }
        self.last = Some((mono, wall, token));
    }

    fn hold_until(&mut self, until: OffsetDateTime) {
        self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);
    const THRESHOLD: Duration = Duration::from_secs(90);
    const INTERVAL: Duration = Duration::from_secs(30);
    const TERM: FencingToken = FencingToken(1);

    /// Passes `count` times, each `interval` of both clocks after the previous one's end (a pass takes no time).
    fn on_time(hearing: &mut Hearing, mono: &mut Instant, wall: &mut OffsetDateTime, count: u32) -> Vec<Verdict> {
        (0..count)
            .map(|_| {
                *mono += INTERVAL;
                *wall += INTERVAL;
                let verdict = hearing.before_pass(*mono, *wall, TERM);
                hearing.after_pass(*mono, *wall, TERM, Outcome::Done);
                verdict
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn passes_on_time_or_a_little_late_evict() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mut mono, mut wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM, Outcome::Done);
        assert!(on_time(&mut hearing, &mut mono, &mut wall, 5).iter().all(|v| *v == Verdict::Evict));
        // Late by exactly the tolerance: still heard.
        let late = INTERVAL + THRESHOLD / MAX_UNHEARD_SHARE;
        assert_eq!(hearing.before_pass(mono + late, wall + late, TERM), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_or_a_forward_step_holds_evictions_for_one_threshold_then_they_resume() {
        let late = INTERVAL + THRESHOLD / MAX_UNHEARD_SHARE + Duration::from_secs(1);
        // A stopped process or a sleeping machine (both clocks), the wall clock alone, the monotonic clock alone.
        for (by_mono, by_wall) in [(late, late), (INTERVAL, late), (late, INTERVAL), (Duration::from_secs(3600), late)]
        {
            let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
            let (mut mono, mut wall) = (Instant::now(), START);
            hearing.after_pass(mono, wall, TERM, Outcome::Done);
            mono += by_mono;
            wall += by_wall;
            let resumed = wall;
            assert_eq!(hearing.before_pass(mono, wall, TERM), Verdict::Hold { until: resumed + THRESHOLD });
            hearing.after_pass(mono, wall, TERM, Outcome::Done);
            // Held while less than a threshold has passed since; then passes evict again.
            let verdicts = on_time(&mut hearing, &mut mono, &mut wall, 3);
            assert_eq!(
                verdicts,
                vec![
                    Verdict::Hold { until: resumed + THRESHOLD },
                    Verdict::Hold { until: resumed + THRESHOLD },
                    Verdict::Evict
                ],
                "{by_mono:?} / {by_wall:?}"
            );
        }
    }

    /// One pass each `interval` after the previous, each ending as `outcomes` says; the verdicts.
    fn passes(
        hearing: &mut Hearing,
        (mono, wall): (&mut Instant, &mut OffsetDateTime),
        interval: Duration,
        outcomes: &[Outcome],
    ) -> Vec<Verdict> {
        outcomes
            .iter()
            .map(|outcome| {
                *mono += interval;
                *wall += interval;
                let verdict = hearing.before_pass(*mono, *wall, TERM);
                hearing.after_pass(*mono, *wall, TERM, *outcome);
                verdict
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn passes_failing_past_the_tolerance_judge_as_of_the_last_reach_then_hold_one_threshold() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mut mono, mut wall) = (Instant::now(), START);
        assert_eq!(hearing.before_pass(mono, wall, TERM), Verdict::Evict);
        hearing.after_pass(mono + Duration::from_secs(2), wall + Duration::from_secs(2), TERM, Outcome::Done);
        // As of the instant that pass judged, not its end.
        let reached = wall;
        let (failed, done) = (Outcome::Failed, Outcome::Done);
        // Failing from the pass at +30 s: the one at +60 s is an interval and more than the tolerance past the last
        // reach, and judges as of it; the store is back for the one at +120 s.
        let verdicts = passes(&mut hearing, (&mut mono, &mut wall), INTERVAL, &[failed, failed, failed, done]);
        let as_of = Verdict::EvictAsOf { as_of: reached };
        assert_eq!(verdicts, vec![Verdict::Evict, as_of, as_of, as_of]);
        let back = wall;
        // Held one threshold from there; the failures start nothing new.
        let verdicts = passes(&mut hearing, (&mut mono, &mut wall), INTERVAL, &[done, done, done, done]);
        let held = Verdict::Hold { until: back + THRESHOLD };
        assert_eq!(verdicts, vec![held, held, Verdict::Evict, Verdict::Evict]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_within_the_tolerance_hold_nothing() {
        let interval = Duration::from_secs(5);
        let mut hearing = Hearing::new(THRESHOLD, interval);
        let (mut mono, mut wall) = (Instant::now(), START);
        assert_eq!(hearing.before_pass(mono, wall, TERM), Verdict::Evict);
        hearing.after_pass(mono, wall, TERM, Outcome::Done);
        // Four failed passes: 25 s from the last reach to the fifth pass, 20 s more than an interval.
        let mut outcomes = vec![Outcome::Failed; 4];
        outcomes.extend([Outcome::Done; 4]);
        let verdicts = passes(&mut hearing, (&mut mono, &mut wall), interval, &outcomes);
        assert!(verdicts.iter().all(|verdict| *verdict == Verdict::Evict), "{verdicts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_term_forgets_the_failures_of_the_last_one() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mono, wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM, Outcome::Failed);
        let hour = Duration::from_secs(3600);
        hearing.after_pass(mono + hour, wall + hour, TERM, Outcome::Failed);
        let later = hour + INTERVAL;
        assert_eq!(hearing.before_pass(mono + later, wall + later, FencingToken(2)), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_instance_judges_nobody_silent_for_longer_than_it_has_listened() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL).listening_since(START);
        let (mut mono, mut wall) = (Instant::now(), START);
        let held = Verdict::Hold { until: START + THRESHOLD };
        assert_eq!(hearing.before_pass(mono, wall, TERM), held);
        hearing.after_pass(mono, wall, TERM, Outcome::Done);
        let verdicts = on_time(&mut hearing, &mut mono, &mut wall, 4);
        assert_eq!(verdicts, vec![held, held, Verdict::Evict, Verdict::Evict]);
        // Leading for the first time long after it started: nothing to hold.
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL).listening_since(START);
        let hour = Duration::from_secs(3600);
        assert_eq!(hearing.before_pass(Instant::now() + hour, START + hour, TERM), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_term_compares_with_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mono, wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM, Outcome::Done);
        // Leading again after an hour as a follower: the first pass of the new term evicts.
        let hour = Duration::from_secs(3600);
        assert_eq!(hearing.before_pass(mono + hour, wall + hour, FencingToken(2)), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backward_step_holds_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mono, wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM, Outcome::Done);
        let hour = time::Duration::hours(1);
        assert_eq!(hearing.before_pass(mono + INTERVAL, wall - hour, TERM), Verdict::Evict);
    }
}
