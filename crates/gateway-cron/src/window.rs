//! The in-memory part of the timing engine: the fires due before a horizon, bounded in number.
//!
//! The database holds every pending job; this holds only what is due soon, so a million pending jobs cost a
//! database index, not a million timers. Invariant: every row whose `next_fire_at` is before `horizon` is in
//! `entries` (or being fired). Entries may be stale (the row was deleted or moved on): their claim fails and
//! they are dropped, so the window never needs to learn of deletions.

use std::collections::{BTreeMap, HashSet};

use gateway_core::{FencingToken, PendingFire};
use time::{Duration, OffsetDateTime};

/// How long before a fire just beyond the horizon becomes claimable a window with room starts reloading. A
/// window bounded by its capacity ends at its last loaded row; the reload query takes 10-15 ms for 10,000 rows,
/// and the fires right after that row must not wait for it.
const RELOAD_AHEAD: Duration = Duration::milliseconds(250);

#[derive(Debug)]
pub(crate) struct Window {
    /// `(claimable_at, job_id) -> scheduled_for`.
    entries: BTreeMap<(OffsetDateTime, i64), OffsetDateTime>,
    horizon: OffsetDateTime,
    capacity: usize,
    /// How long before its instant a fire is claimed (see `CronConfig::claim_ahead`).
    claim_ahead: Duration,
    /// The leadership term the window was loaded for: a claim made under an older one is claimable at once
    /// ([`PendingFire::claimable_at`]), so a deposed leader's claims do not wait out their lease.
    term: FencingToken,
    /// Set at start, after a store error and when leadership was lost: the window must be reloaded.
    stale: bool,
    /// When to reload even if nothing seems missing: rows written by other processes appear this way.
    periodic_refill_at: OffsetDateTime,
    /// A reload is in flight ([`Self::reload_started`]).
    reloading: bool,
    /// The earliest instant dropped (beyond the horizon, or trimmed) while a reload was in flight. Such a row may
    /// have been committed after the reload's query read the table, so the reload cannot vouch for it: the
    /// horizon the reload sets stops there. (Without this, those rows waited for the periodic reload, 5 s, which
    /// made the cron throughput benchmark bimodal: 15-18k jobs/s when a few rows were lost so, 42k when none.)
    dropped_while_reloading: Option<OffsetDateTime>,
}

impl Window {
    pub(crate) fn new(capacity: usize, claim_ahead: Duration) -> Self {
        Self {
            entries: BTreeMap::new(),
            horizon: OffsetDateTime::UNIX_EPOCH,
            capacity: capacity.max(1),
            claim_ahead,
            term: FencingToken(0),
            stale: true,
            periodic_refill_at: OffsetDateTime::UNIX_EPOCH,
            reloading: false,
            dropped_while_reloading: None,
        }
    }

    /// A reload's query is about to run: what is dropped from now until it lands is remembered.
    pub(crate) fn reload_started(&mut self) {
        self.reloading = true;
        self.dropped_while_reloading = None;
    }

    fn dropped(&mut self, scheduled_for: OffsetDateTime) {
        if self.reloading {
            self.dropped_while_reloading =
                Some(self.dropped_while_reloading.map_or(scheduled_for, |earliest| earliest.min(scheduled_for)));
        }
    }

    pub(crate) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Forgets everything (leadership lost: another instance owns the timed work now).
    pub(crate) fn reset(&mut self) {
        self.entries.clear();
        self.horizon = OffsetDateTime::UNIX_EPOCH;
        self.stale = true;
        self.reloading = false;
        self.dropped_while_reloading = None;
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn has_due(&self, now: OffsetDateTime) -> bool {
        self.entries.first_key_value().is_some_and(|((at, _), _)| *at <= now)
    }

    pub(crate) fn needs_refill(&self, now: OffsetDateTime) -> bool {
        // Past the horizon the window no longer knows what is due, but while it still holds due entries (a
        // backlog bigger than the capacity) those are fired first instead of reloading on every batch.
        let passed = now >= self.horizon && !self.has_due(now);
        // Half empty: a reload adds rows rather than re-reading those held, and cannot repeat in a loop.
        let approaching = now < self.horizon
            && now + self.claim_ahead + RELOAD_AHEAD >= self.horizon
            && self.entries.len() <= self.capacity / 2;
        self.stale || now >= self.periodic_refill_at || passed || approaching
    }

    /// Merges a reload of the rows due before `before`, fetched with `limit`, for a claimer leading under `term`.
    /// Rows in `held` are being fired by the caller (claimed, or awaiting their completion): they are not pending
    /// any more, whatever the query saw.
    #[allow(clippy::too_many_arguments, reason = "one reload's facts, each from a different place of the loop")]
    pub(crate) fn refill(
        &mut self,
        now: OffsetDateTime,
        before: OffsetDateTime,
        rows: &[PendingFire],
        limit: usize,
        refill_interval: Duration,
        held: &HashSet<i64>,
        term: FencingToken,
    ) {
        self.term = term;
        for row in rows.iter().filter(|row| !held.contains(&row.job_id)) {
            self.entries.insert((row.claimable_at(self.claim_ahead, term), row.job_id), row.scheduled_for);
        }
        // Merged, not replaced: a job armed while the query ran is kept even if the query missed it.
        self.horizon = match rows.last() {
            Some(last) if rows.len() >= limit => last.scheduled_for,
            _ => before,
        };
        if let Some(dropped) = self.dropped_while_reloading.take() {
            self.horizon = self.horizon.min(dropped);
        }
        self.reloading = false;
        self.stale = false;
        self.periodic_refill_at = now + refill_interval;
        self.trim();
    }

    /// Adds a fire the scheduler just created or advanced. Returns `true` when it is now the earliest entry,
    /// so the loop must be woken to shorten its sleep.
    pub(crate) fn push(&mut self, fire: PendingFire) -> bool {
        // While stale the horizon means nothing; keeping the entry closes the race with a reload in flight.
        if fire.scheduled_for >= self.horizon && !self.stale {
            self.dropped(fire.scheduled_for);
            return false;
        }
        let key = (fire.claimable_at(self.claim_ahead, self.term), fire.job_id);
        self.entries.insert(key, fire.scheduled_for);
        self.trim();
        self.entries.first_key_value().is_some_and(|(first, _)| *first == key)
    }

    /// Drops every entry of `job_id` (a paused job). A scan of the window: an operator's action, not a fire's.
    pub(crate) fn remove(&mut self, job_id: i64) {
        self.entries.retain(|(_, id), _| *id != job_id);
    }

    /// Removes and returns up to `max` jobs claimable at `now` (their ids), earliest first.
    pub(crate) fn pop_due(&mut self, now: OffsetDateTime, max: usize) -> Vec<i64> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.entries.first_key_value() {
                Some(((at, _), _)) if *at <= now => {}
                _ => break,
            }
            if let Some(((_, job_id), _)) = self.entries.pop_first() {
                due.push(job_id);
            }
        }
        due
    }

    /// When the earliest entry becomes claimable.
    pub(crate) fn first_claimable_at(&self) -> Option<OffsetDateTime> {
        self.entries.first_key_value().map(|((at, _), _)| *at)
    }

    /// When the loop must look again: the earliest entry, the horizon, or the periodic reload. A horizon
    /// already passed does not count: the loop reloads right after firing a batch when it needs to, and a
    /// window whose every entry is held by another claimer must not spin.
    pub(crate) fn next_wake(&self, now: OffsetDateTime) -> OffsetDateTime {
        let mut wake = self.periodic_refill_at;
        if self.horizon > now {
            wake = wake.min(self.horizon);
        }
        if let Some(((at, _), _)) = self.entries.first_key_value() {
            wake = wake.min(*at);
        }
        wake
    }

    fn trim(&mut self) {
        while self.entries.len() > self.capacity {
            if let Some((_, scheduled_for)) = self.entries.pop_last() {
                self.horizon = self.horizon.min(scheduled_for);
                self.dropped(scheduled_for);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);
    /// The term every test's window is loaded for.
    const TERM: FencingToken = FencingToken(5);

    /// `pending` claimed until `until` under leadership term `token`.
    fn claimed(fire: PendingFire, until: OffsetDateTime, token: u64) -> PendingFire {
        PendingFire { claimed_until: Some(until), claim_token: Some(FencingToken(token)), ..fire }
    }

    fn pending(job_id: i64, seconds: i64) -> PendingFire {
        PendingFire::unclaimed(job_id, NOW + Duration::seconds(seconds))
    }

    #[test]
    fn starts_stale_and_refill_sets_horizon_and_period() {
        let mut window = Window::new(10, Duration::ZERO);
        assert!(window.needs_refill(NOW));
        window.refill(
            NOW,
            NOW + Duration::seconds(30),
            &[pending(1, 5)],
            10,
            Duration::seconds(5),
            &HashSet::new(),
            TERM,
        );
        assert!(!window.needs_refill(NOW));
        assert!(window.needs_refill(NOW + Duration::seconds(5)));
        assert_eq!(window.next_wake(NOW), NOW + Duration::seconds(5));
        assert!(window.pop_due(NOW + Duration::seconds(4), 10).is_empty());
        assert_eq!(window.pop_due(NOW + Duration::seconds(5), 10), vec![1]);
    }

    #[test]
    fn a_full_reload_shrinks_the_horizon_to_the_last_row() {
        let mut window = Window::new(10, Duration::ZERO);
        let rows = [pending(1, -20), pending(2, -10)];
        window.refill(NOW, NOW + Duration::seconds(30), &rows, 2, Duration::seconds(5), &HashSet::new(), TERM);
        // The backlog is fired before the window reloads again.
        assert!(!window.needs_refill(NOW));
        assert_eq!(window.pop_due(NOW, 1).len(), 1);
        assert!(!window.needs_refill(NOW));
        assert_eq!(window.pop_due(NOW, 1).len(), 1);
        assert!(window.needs_refill(NOW), "drained past the horizon: reload");
    }

    #[test]
    fn pushes_beyond_the_horizon_wait_for_a_reload_and_earliest_wakes() {
        let mut window = Window::new(10, Duration::ZERO);
        window.refill(
            NOW,
            NOW + Duration::seconds(30),
            &[pending(1, 10)],
            10,
            Duration::seconds(5),
            &HashSet::new(),
            TERM,
        );
        assert!(window.push(pending(2, 3)), "earlier than everything: wake the loop");
        assert!(!window.push(pending(3, 20)), "later than the earliest: no wake");
        assert!(!window.push(pending(4, 31)), "beyond the horizon");
        assert_eq!(window.len(), 3);
    }

    #[test]
    fn claimed_rows_wait_for_their_lease() {
        let mut window = Window::new(10, Duration::ZERO);
        let claimed = claimed(pending(1, -1), NOW + Duration::seconds(10), TERM.0);
        window.refill(NOW, NOW + Duration::seconds(30), &[claimed], 10, Duration::seconds(60), &HashSet::new(), TERM);
        assert_eq!(window.next_wake(NOW), NOW + Duration::seconds(10));
        assert!(window.pop_due(NOW, 10).is_empty());
        assert_eq!(window.pop_due(NOW + Duration::seconds(10), 10), vec![1]);
    }

    /// A claim of the previous term (a leader killed just after claiming) is no reason to wait: the new term takes
    /// it over as soon as it is due, its lease notwithstanding; a claim of this very term still waits.
    #[test]
    fn claims_of_an_older_term_are_claimable_at_once() {
        let mut window = Window::new(10, Duration::milliseconds(50));
        let lease_end = NOW + Duration::seconds(10);
        let rows = [claimed(pending(1, -1), lease_end, TERM.0 - 1), claimed(pending(2, 1), lease_end, TERM.0 - 1)];
        window.refill(NOW, NOW + Duration::seconds(30), &rows, 10, Duration::seconds(60), &HashSet::new(), TERM);
        assert_eq!(window.pop_due(NOW, 10), vec![1], "overdue: at once");
        assert_eq!(window.next_wake(NOW), NOW + Duration::milliseconds(950), "due: at its instant less the margin");
        assert_eq!(window.pop_due(NOW + Duration::milliseconds(950), 10), vec![2]);
        assert!(window.push(claimed(pending(3, 2), lease_end, TERM.0)), "the window's own term");
        assert_eq!(window.next_wake(NOW), lease_end, "waits for the lease");
    }

    #[test]
    fn fires_are_claimable_ahead_of_their_instant_but_not_ahead_of_a_lease() {
        let mut window = Window::new(10, Duration::milliseconds(50));
        let leased = claimed(pending(2, 5), NOW + Duration::seconds(10), TERM.0);
        window.refill(
            NOW,
            NOW + Duration::seconds(30),
            &[pending(1, 1), leased],
            10,
            Duration::seconds(60),
            &HashSet::new(),
            TERM,
        );
        let ahead_of_first = NOW + Duration::milliseconds(950);
        assert_eq!(window.next_wake(NOW), ahead_of_first);
        assert!(window.pop_due(ahead_of_first - Duration::milliseconds(1), 10).is_empty());
        assert_eq!(window.pop_due(ahead_of_first, 10), vec![1]);
        assert_eq!(window.next_wake(NOW), NOW + Duration::seconds(10), "a lease ends when it ends");
    }

    #[test]
    fn a_window_cut_short_by_its_capacity_reloads_before_its_horizon() {
        let mut window = Window::new(4, Duration::milliseconds(50));
        let rows: Vec<PendingFire> = (1..=4).map(|n| pending(n, n)).collect();
        window.refill(NOW, NOW + Duration::seconds(30), &rows, 4, Duration::seconds(60), &HashSet::new(), TERM);
        // Full: the horizon is the last row loaded (4 s). No reload while the window is more than half full.
        assert!(!window.needs_refill(NOW + Duration::milliseconds(3_800)));
        assert_eq!(window.pop_due(NOW + Duration::milliseconds(3_000), 10), vec![1, 2, 3]);
        let reload_at = NOW + Duration::seconds(4) - Duration::milliseconds(50) - RELOAD_AHEAD;
        assert!(!window.needs_refill(reload_at - Duration::milliseconds(1)));
        assert!(window.needs_refill(reload_at), "reloads before the fires after the horizon are claimable");
        // Rows the caller is firing are not taken back in.
        let held = HashSet::from([3]);
        let reloaded = [pending(3, 3), pending(4, 4), pending(5, 5)];
        window.refill(reload_at, reload_at + Duration::seconds(30), &reloaded, 4, Duration::seconds(60), &held, TERM);
        assert_eq!(window.pop_due(NOW + Duration::seconds(10), 10), vec![4, 5]);
    }

    /// A row pushed while a reload runs, and dropped (beyond the horizon, or trimmed), may have been committed after
    /// the reload's query read the table: the reload's horizon stops before it, so the next reload finds it instead
    /// of the periodic one seconds later.
    #[test]
    fn rows_dropped_while_a_reload_runs_are_not_vouched_for_by_it() {
        for trimmed in [false, true] {
            let mut window = Window::new(2, Duration::ZERO);
            window.refill(NOW, NOW + Duration::seconds(1), &[], 2, Duration::seconds(60), &HashSet::new(), TERM);
            window.reload_started();
            if trimmed {
                window.push(pending(1, 0));
                window.push(pending(2, 0));
                window.push(pending(3, 0));
            } else {
                assert!(!window.push(pending(3, 2)), "beyond the horizon");
            }
            let missed = if trimmed { NOW } else { NOW + Duration::seconds(2) };
            // The reload's query ran before row 3 was committed.
            let rows = if trimmed { vec![pending(1, 0), pending(2, 0)] } else { Vec::new() };
            window.refill(NOW, NOW + Duration::seconds(30), &rows, 10, Duration::seconds(60), &HashSet::new(), TERM);
            assert_eq!(window.horizon, missed, "trimmed: {trimmed}");
            window.pop_due(missed, 10);
            assert!(window.needs_refill(missed), "trimmed: {trimmed}");
            // A reload with nothing dropped meanwhile vouches for its whole span.
            window.reload_started();
            window.refill(
                missed,
                missed + Duration::seconds(30),
                &[],
                10,
                Duration::seconds(60),
                &HashSet::new(),
                TERM,
            );
            assert_eq!(window.horizon, missed + Duration::seconds(30));
        }
    }

    #[test]
    fn removing_a_job_drops_each_of_its_entries_only() {
        let mut window = Window::new(10, Duration::ZERO);
        window.refill(
            NOW,
            NOW + Duration::seconds(30),
            &[pending(1, 1), pending(2, 2)],
            10,
            Duration::seconds(5),
            &HashSet::new(),
            TERM,
        );
        window.push(claimed(pending(1, 1), NOW + Duration::seconds(3), TERM.0));
        assert_eq!(window.len(), 3);
        window.remove(1);
        assert_eq!(window.pop_due(NOW + Duration::seconds(10), 10), vec![2]);
    }

    #[test]
    fn capacity_bounds_memory_and_pulls_the_horizon_in() {
        let mut window = Window::new(2, Duration::ZERO);
        window.refill(NOW, NOW + Duration::seconds(30), &[], 2, Duration::seconds(5), &HashSet::new(), TERM);
        window.push(pending(1, 1));
        window.push(pending(2, 2));
        window.push(pending(3, 3));
        assert_eq!(window.len(), 2);
        // Job 3 was dropped, so the horizon moved to its instant: it is reloaded later, never lost.
        assert!(!window.push(pending(4, 3)));
        assert!(window.push(pending(5, 0)));
        assert_eq!(window.len(), 2);
        window.reset();
        assert_eq!(window.len(), 0);
        assert!(window.needs_refill(NOW));
    }
}
