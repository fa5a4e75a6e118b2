//! What a claimed row publishes when its instant has come (docs/scheduler.md "Misfires"): its instant, or — when
//! the row fell behind its schedule (the gateway was down, the job paused, the store unreachable) — what the job's
//! misfire policy says about the instants it missed; and for a one-time reminder, nothing once it is later than
//! its `max_lateness_ms`.
//!
//! An instant is *missed* when a later instant of the same job is also due, or when it is more than
//! [`MISFIRE_THRESHOLD`] late. A job due a few milliseconds ago in normal operation has missed nothing: its instant
//! is the newest due and only milliseconds late.

use gateway_core::{CronJob, MisfirePolicy, RunOutcome};
use time::{Duration, OffsetDateTime};

/// Most instants one catch-up of a `fire_all` job publishes (the newest ones), and most missed instants one
/// catch-up of a `skip` job records.
pub const MAX_MISFIRE_FIRES: usize = 100;

/// How late the newest due instant of a recurring job may be and still count as on time (fired whatever the
/// policy): Quartz's default misfire threshold. Older due instants are missed however late they are.
pub const MISFIRE_THRESHOLD: std::time::Duration = std::time::Duration::from_secs(60);

/// How far back the search for the newest missed instants looks first; doubled until it holds enough of them.
const FIRST_LOOKBACK: Duration = Duration::minutes(1);

/// What a claimed row does at `now`: the instants it publishes and those it records as skipped, each oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Verdict {
    pub fire: Vec<OffsetDateTime>,
    pub skip: Vec<(OffsetDateTime, RunOutcome)>,
}

impl Verdict {
    fn fire(instants: &[OffsetDateTime]) -> Self {
        Self { fire: instants.to_vec(), skip: Vec::new() }
    }
}

/// The verdict on a one-time row at `now`: fired, or skipped as late past its `max_lateness_ms`.
pub(crate) fn one_time(job: &CronJob, now: OffsetDateTime) -> Verdict {
    let late = now - job.next_fire_at;
    let too_late = job
        .max_lateness_ms
        .is_some_and(|limit| late > Duration::milliseconds(i64::try_from(limit).unwrap_or(i64::MAX)));
    if too_late {
        Verdict { fire: Vec::new(), skip: vec![(job.next_fire_at, RunOutcome::SkippedLate)] }
    } else {
        Verdict::fire(&[job.next_fire_at])
    }
}

/// The verdict on a recurring row at `now` under its policy. `next_after` is the job's schedule (the instant
/// strictly after a given one); the row's `next_fire_at` is its oldest due instant.
pub(crate) fn recurring(
    job: &CronJob,
    now: OffsetDateTime,
    next_after: impl Fn(OffsetDateTime) -> Option<OffsetDateTime>,
) -> Verdict {
    let due = newest_due(job.next_fire_at, now, MAX_MISFIRE_FIRES, next_after);
    let Some(&newest) = due.last() else { return Verdict::default() };
    let newest_on_time = now - newest <= MISFIRE_THRESHOLD;
    let missed = if newest_on_time { &due[..due.len() - 1] } else { &due[..] };
    if missed.is_empty() {
        return Verdict::fire(&[newest]);
    }
    match job.misfire_policy {
        MisfirePolicy::FireOnce => Verdict::fire(&[newest]),
        MisfirePolicy::FireAll => Verdict::fire(&due),
        MisfirePolicy::Skip => Verdict {
            fire: if newest_on_time { vec![newest] } else { Vec::new() },
            skip: missed.iter().map(|instant| (*instant, RunOutcome::SkippedMisfire)).collect(),
        },
    }
}

/// The newest `keep` instants from `first` (included) to `now` (included), oldest first; empty when `first` is
/// after `now`. A job every second down for a month is 2.6 million instants behind: rather than walk them all, the
/// search starts a minute back and doubles its reach until it holds `keep` instants or reaches `first`.
fn newest_due(
    first: OffsetDateTime,
    now: OffsetDateTime,
    keep: usize,
    next_after: impl Fn(OffsetDateTime) -> Option<OffsetDateTime>,
) -> Vec<OffsetDateTime> {
    if first > now || keep == 0 {
        return Vec::new();
    }
    let mut lookback = FIRST_LOOKBACK;
    loop {
        let from = now.checked_sub(lookback);
        let reaches_first = from.is_none_or(|from| from <= first);
        let mut instant = match from {
            Some(from) if !reaches_first => next_after(from),
            _ => Some(first),
        };
        let mut found = std::collections::VecDeque::with_capacity(keep + 1);
        while let Some(at) = instant.filter(|at| *at <= now) {
            found.push_back(at);
            if found.len() > keep {
                found.pop_front();
            }
            instant = next_after(at);
        }
        if reaches_first || found.len() >= keep {
            return found.into();
        }
        lookback = lookback.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::AgentId;
    use serde_json::Map;
    use time::macros::datetime;

    use super::*;
    use crate::schedule::CronSchedule;

    const NOW: OffsetDateTime = datetime!(2026-12-21 12:00:00.005 UTC);

    fn job(schedule: &str, next_fire_at: OffsetDateTime, misfire_policy: MisfirePolicy) -> CronJob {
        CronJob {
            id: 1,
            agent_id: AgentId::new("agent-1").unwrap(),
            schedule: Some(schedule.to_owned()),
            next_fire_at,
            payload: Map::new(),
            is_one_time: false,
            paused: false,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy,
            max_lateness_ms: None,
        }
    }

    fn verdict(schedule: &str, next_fire_at: OffsetDateTime, policy: MisfirePolicy, now: OffsetDateTime) -> Verdict {
        let parsed = CronSchedule::parse(schedule).unwrap();
        recurring(&job(schedule, next_fire_at, policy), now, |after| parsed.next_after(after))
    }

    fn seconds_before(now: OffsetDateTime, seconds: i64) -> OffsetDateTime {
        now.replace_millisecond(0).unwrap() - Duration::seconds(seconds)
    }

    #[test]
    fn a_job_due_milliseconds_ago_has_missed_nothing_whatever_its_policy() {
        let due = seconds_before(NOW, 0);
        for policy in MisfirePolicy::ALL {
            assert_eq!(verdict("* * * * * *", due, policy, NOW), Verdict::fire(&[due]), "{policy:?}");
        }
    }

    #[test]
    fn fire_once_fires_the_newest_missed_instant_once() {
        let oldest = seconds_before(NOW, 5);
        let newest = seconds_before(NOW, 0);
        assert_eq!(verdict("* * * * * *", oldest, MisfirePolicy::FireOnce, NOW), Verdict::fire(&[newest]));
    }

    #[test]
    fn fire_all_fires_every_missed_instant_oldest_first() {
        let oldest = seconds_before(NOW, 3);
        let all: Vec<_> = (0..=3).rev().map(|back| seconds_before(NOW, back)).collect();
        assert_eq!(verdict("* * * * * *", oldest, MisfirePolicy::FireAll, NOW), Verdict::fire(&all));
    }

    #[test]
    fn fire_all_fires_at_most_the_newest_hundred() {
        // A month behind on a schedule every second: 2.6 million instants, of which the newest hundred fire.
        let oldest = NOW - Duration::days(30);
        let fired = verdict("* * * * * *", oldest, MisfirePolicy::FireAll, NOW).fire;
        assert_eq!(fired.len(), MAX_MISFIRE_FIRES);
        assert_eq!(fired.last(), Some(&seconds_before(NOW, 0)));
        assert_eq!(fired.first(), Some(&seconds_before(NOW, 99)));
        assert!(fired.windows(2).all(|pair| pair[1] - pair[0] == Duration::SECOND));
    }

    #[test]
    fn skip_records_the_missed_instants_and_fires_only_an_instant_on_time() {
        let oldest = seconds_before(NOW, 2);
        let skipped = verdict("* * * * * *", oldest, MisfirePolicy::Skip, NOW);
        let missed = [seconds_before(NOW, 2), seconds_before(NOW, 1)];
        assert_eq!(skipped.fire, [seconds_before(NOW, 0)], "the newest instant is milliseconds late: on time");
        assert_eq!(skipped.skip, missed.map(|at| (at, RunOutcome::SkippedMisfire)));
    }

    #[test]
    fn an_instant_later_than_the_threshold_is_missed_even_when_it_is_the_only_one() {
        // Daily at 09:00, the gateway back at 12:00: three hours late, one instant due.
        let nine = datetime!(2026-12-21 09:00 UTC);
        let skipped = verdict("0 9 * * *", nine, MisfirePolicy::Skip, NOW);
        assert_eq!(skipped, Verdict { fire: vec![], skip: vec![(nine, RunOutcome::SkippedMisfire)] });
        assert_eq!(verdict("0 9 * * *", nine, MisfirePolicy::FireOnce, NOW), Verdict::fire(&[nine]));
        assert_eq!(verdict("0 9 * * *", nine, MisfirePolicy::FireAll, NOW), Verdict::fire(&[nine]));
        let just_in_time = nine + Duration::try_from(MISFIRE_THRESHOLD).unwrap();
        assert_eq!(verdict("0 9 * * *", nine, MisfirePolicy::Skip, just_in_time), Verdict::fire(&[nine]));
    }

    #[test]
    fn skip_records_at_most_the_newest_hundred_missed_instants() {
        let skipped = verdict("* * * * * *", NOW - Duration::days(1), MisfirePolicy::Skip, NOW);
        assert_eq!(skipped.fire, [seconds_before(NOW, 0)]);
        assert_eq!(skipped.skip.len(), MAX_MISFIRE_FIRES - 1, "the newest hundred due, less the one fired");
        assert_eq!(skipped.skip.first().map(|(at, _)| *at), Some(seconds_before(NOW, 99)));
    }

    #[test]
    fn a_reminder_later_than_its_max_lateness_is_skipped_and_one_within_it_fires() {
        let due = NOW - Duration::milliseconds(500);
        let reminder = |max_lateness_ms| CronJob {
            schedule: None,
            is_one_time: true,
            max_lateness_ms,
            ..job("* * * * *", due, MisfirePolicy::FireOnce)
        };
        assert_eq!(one_time(&reminder(None), NOW), Verdict::fire(&[due]));
        assert_eq!(one_time(&reminder(Some(500)), NOW), Verdict::fire(&[due]), "exactly at the limit");
        let late = one_time(&reminder(Some(499)), NOW);
        assert_eq!(late, Verdict { fire: vec![], skip: vec![(due, RunOutcome::SkippedLate)] });
    }
}
