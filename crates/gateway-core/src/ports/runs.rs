//! A cron job's runs (DESIGN §17, docs/scheduler.md "Runs"): what happened at each of its instants. A fired instant
//! is its mailbox entry ([`crate::ports::mailbox`]), which the firing path writes anyway; an instant that was not
//! fired (a misfire the job's policy skipped, a reminder published too late) is a [`SkippedRun`], kept apart from
//! the mailbox so that nothing that delivers, replays, counts or charges mailbox entries ever sees it. Both are kept
//! as long as the mailbox keeps its entries, also after their job is deleted.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::AgentId;
use crate::ports::mailbox::{FiredReminder, MailboxEntry};

/// What a recurring job does about instants it missed (the gateway was down, the job paused, the store
/// unreachable): [`Self::FireOnce`] fires one catch-up for all of them, carrying the newest; [`Self::Skip`] fires
/// none of them and records each as `skipped_misfire`; [`Self::FireAll`] fires each of them, at most
/// `gateway_cron::MAX_MISFIRE_FIRES`, the newest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    #[default]
    FireOnce,
    Skip,
    FireAll,
}

impl MisfirePolicy {
    pub const ALL: [Self; 3] = [Self::FireOnce, Self::Skip, Self::FireAll];

    /// The name the API and the database use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FireOnce => "fire_once",
            Self::Skip => "skip",
            Self::FireAll => "fire_all",
        }
    }

    /// `None` for anything but one of [`Self::ALL`]'s names.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|policy| policy.as_str() == name)
    }
}

/// What happened at one instant of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Published (and recorded in the agent's mailbox).
    Fired,
    /// Missed and not fired: the job's policy is `skip`.
    SkippedMisfire,
    /// A one-time reminder published later than its `max_lateness_ms`: not delivered.
    SkippedLate,
}

impl RunOutcome {
    pub const ALL: [Self; 3] = [Self::Fired, Self::SkippedMisfire, Self::SkippedLate];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fired => "fired",
            Self::SkippedMisfire => "skipped_misfire",
            Self::SkippedLate => "skipped_late",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|outcome| outcome.as_str() == name)
    }
}

/// An instant the scheduler decided not to fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRun {
    /// The `fire_id` the instant would have fired with; unique among skipped runs.
    pub fire_id: String,
    pub job_id: i64,
    pub agent_id: AgentId,
    pub scheduled_for: OffsetDateTime,
    /// When the scheduler decided (the moment it would have published): what ages it out with the mailbox.
    pub skipped_at: OffsetDateTime,
    /// [`RunOutcome::SkippedMisfire`] or [`RunOutcome::SkippedLate`].
    pub outcome: RunOutcome,
}

/// One run of a job, as `GET /gateway/cron/jobs/{id}/runs` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJobRun {
    pub fire_id: String,
    pub scheduled_for: OffsetDateTime,
    /// When it was published, or (skipped) when it was decided not to be.
    pub fired_at: OffsetDateTime,
    pub outcome: RunOutcome,
    /// When a stream of the agent first handed it to a client; never for a skipped run.
    pub received_at: Option<OffsetDateTime>,
}

impl CronJobRun {
    pub fn fired(entry: &MailboxEntry) -> Self {
        let FiredReminder { fire_id, scheduled_for, fired_at, .. } = &entry.reminder;
        Self {
            fire_id: fire_id.clone(),
            scheduled_for: *scheduled_for,
            fired_at: *fired_at,
            outcome: RunOutcome::Fired,
            received_at: entry.received_at,
        }
    }

    pub fn skipped(run: &SkippedRun) -> Self {
        Self {
            fire_id: run.fire_id.clone(),
            scheduled_for: run.scheduled_for,
            fired_at: run.skipped_at,
            outcome: run.outcome,
            received_at: None,
        }
    }

    /// How late it was published (or skipped): `fired_at - scheduled_for` in whole milliseconds, never negative.
    pub fn lateness_ms(&self) -> u64 {
        u64::try_from((self.fired_at - self.scheduled_for).whole_milliseconds()).unwrap_or(0)
    }
}

/// `runs` newest first (by `scheduled_for`, ties by `fire_id`, greater first), at most `limit`: how every store
/// merges a job's fires with its skipped runs.
pub fn newest_first(runs: impl IntoIterator<Item = CronJobRun>, limit: usize) -> Vec<CronJobRun> {
    let mut runs: Vec<CronJobRun> = runs.into_iter().collect();
    runs.sort_by(|a, b| (b.scheduled_for, &b.fire_id).cmp(&(a.scheduled_for, &a.fire_id)));
    runs.truncate(limit);
    runs
}

/// The skipped runs of [`crate::InMemoryCronJobStore`], numbered in the order recorded (as the database numbers
/// them), which is the order pruning takes them in.
#[derive(Debug, Default)]
pub(crate) struct SkipRows {
    last_seq: i64,
    rows: BTreeMap<i64, SkippedRun>,
    by_fire_id: HashMap<String, i64>,
}

impl SkipRows {
    /// `false` when a run with its `fire_id` is recorded already.
    pub(crate) fn record(&mut self, run: &SkippedRun) -> bool {
        if self.by_fire_id.contains_key(&run.fire_id) {
            return false;
        }
        self.last_seq += 1;
        self.by_fire_id.insert(run.fire_id.clone(), self.last_seq);
        self.rows.insert(self.last_seq, run.clone());
        true
    }

    pub(crate) fn of_job(&self, job_id: i64) -> impl Iterator<Item = &SkippedRun> {
        self.rows.values().filter(move |run| run.job_id == job_id)
    }

    /// As the mailbox is pruned: of the first `limit` rows in the order recorded, those skipped before the cutoff.
    pub(crate) fn prune(&mut self, skipped_before: OffsetDateTime, limit: usize) -> usize {
        let old: Vec<i64> = self
            .rows
            .iter()
            .take(limit)
            .filter(|(_, run)| run.skipped_at < skipped_before)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in &old {
            if let Some(run) = self.rows.remove(seq) {
                self.by_fire_id.remove(&run.fire_id);
            }
        }
        old.len()
    }
}
