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

use std::time::Duration;

use gateway_core::FencingToken;
use time::OffsetDateTime;
use tokio::time::Instant;

/// The share of the eviction threshold a pass may come late by (behind its interval, by the monotonic clock or by
/// the wall clock) before the gateway counts that time as unheard: a quarter, so that with the FR-10.2 constants
/// (a heartbeat every 30 s, evicted after 90 s) a stop shorter than 22.5 s holds nothing, and no agent that
/// heartbeats on time can be evicted by a stop that short.
pub const MAX_UNHEARD_SHARE: u32 = 4;

/// What the eviction loop remembers between passes.
#[derive(Debug)]
pub(crate) struct Hearing {
    threshold: Duration,
    interval: Duration,
    /// The end of the last pass of the current term: both clocks, and the term.
    last: Option<(Instant, OffsetDateTime, FencingToken)>,
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
}

impl Hearing {
    pub(crate) fn new(threshold: Duration, interval: Duration) -> Self {
        Self { threshold, interval, last: None, held_until: None }
    }

    /// Called when a pass of term `token` is about to start at `(mono, wall)`.
    pub(crate) fn before_pass(&mut self, mono: Instant, wall: OffsetDateTime, token: FencingToken) -> Verdict {
        let tolerance = self.threshold / MAX_UNHEARD_SHARE;
        // The first pass of a term has nothing to compare with: a new leader judges receipts the other instances
        // kept writing, and a fresh single instance starts with an empty map.
        if let Some((last_mono, last_wall, last_token)) = self.last
            && last_token == token
        {
            let by_monotonic = mono.saturating_duration_since(last_mono);
            let by_wall = Duration::try_from(wall - last_wall).unwrap_or(Duration::ZERO);
            let unheard = by_monotonic.max(by_wall).saturating_sub(self.interval);
            if unheard > tolerance {
                let until = wall + self.threshold;
                tracing::warn!(
                    unheard_s = unheard.as_secs_f64(),
                    by_monotonic_s = by_monotonic.as_secs_f64(),
                    by_wall_s = by_wall.as_secs_f64(),
                    held_until = %until,
                    "the gateway did not hear heartbeats for a while (process stopped, machine asleep, or the clock \
                     stepped forward): evictions held for one threshold"
                );
                self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
            }
        }
        match self.held_until {
            Some(until) if wall < until => Verdict::Hold { until },
            _ => {
                self.held_until = None;
                Verdict::Evict
            }
        }
    }

    /// Called when that pass has ended (whatever its outcome), at `(mono, wall)`.
    pub(crate) fn after_pass(&mut self, mono: Instant, wall: OffsetDateTime, token: FencingToken) {
        self.last = Some((mono, wall, token));
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
                hearing.after_pass(*mono, *wall, TERM);
                verdict
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn passes_on_time_or_a_little_late_evict() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mut mono, mut wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM);
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
            hearing.after_pass(mono, wall, TERM);
            mono += by_mono;
            wall += by_wall;
            let resumed = wall;
            assert_eq!(hearing.before_pass(mono, wall, TERM), Verdict::Hold { until: resumed + THRESHOLD });
            hearing.after_pass(mono, wall, TERM);
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

    #[tokio::test(start_paused = true)]
    async fn a_new_term_compares_with_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mono, wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM);
        // Leading again after an hour as a follower: the first pass of the new term evicts.
        let hour = Duration::from_secs(3600);
        assert_eq!(hearing.before_pass(mono + hour, wall + hour, FencingToken(2)), Verdict::Evict);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backward_step_holds_nothing() {
        let mut hearing = Hearing::new(THRESHOLD, INTERVAL);
        let (mono, wall) = (Instant::now(), START);
        hearing.after_pass(mono, wall, TERM);
        let hour = time::Duration::hours(1);
        assert_eq!(hearing.before_pass(mono + INTERVAL, wall - hour, TERM), Verdict::Evict);
    }
}
