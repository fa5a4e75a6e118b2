//! The durable cron job port (`cron_jobs`, docs/requirements.md FR-10.6) and its in-memory implementation.
//!
//! The database is the source of truth for every pending job; a scheduler keeps in memory only what is due
//! soon. Firing one instant of one job goes through a *claim*: a conditional write that only one claimer can
//! win while the claim's lease runs, so two loops (or, later, two processes) on one database never both fire
//! the same instant. The claim leaves the row where it is until the fire is completed (the one-time row
//! deleted, the recurring row advanced), so a claimer that dies after publishing leaves a row that is claimed
//! again once its lease runs out, and fires again with the same `fire_id`.
//!
//! The write that completes fires also records them in the agent's mailbox ([`crate::ports::mailbox`]), so the fake's
//! rows and mailbox live together here.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};

use crate::ids::{AgentId, IdempotencyKey};
use crate::ports::failure::FailureSwitch;
use crate::ports::leadership::{EpochGate, FencingEpoch, FencingToken};
use crate::ports::mailbox::{FiredReminder, MailboxEntry, MailboxQuery, MailboxRows, MailboxStore, Receipt};
use crate::ports::runs::{CronJobRun, MisfirePolicy, SkipRows, SkippedRun};
use crate::ports::store::{StoreError, StoreHealth};
use crate::runtime::sync::lock;

/// The time zone of a job written without one: its schedule is read in UTC, as every job was before zones existed
/// (the column's default, migration `cron_job_timezone`).
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// A job to be written; the store assigns the id.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCronJob {
    pub agent_id: AgentId,
    /// The cron expression of a recurring job as the operator wrote it; `None` for a one-time job.
    pub schedule: Option<String>,
    pub next_fire_at: OffsetDateTime,
    pub payload: Map<String, Value>,
    pub is_one_time: bool,
    /// The creating request's `Idempotency-Key`; unique among jobs when present.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The IANA time zone the schedule is read in ([`DEFAULT_TIMEZONE`] for one-time jobs); the store keeps it as
    /// given, gateway-cron checks it.
    pub timezone: String,
    /// What a recurring job does about instants it missed (docs/scheduler.md "Misfires").
    pub misfire_policy: MisfirePolicy,
    /// A one-time job published later than this after its instant is not delivered (recorded `skipped_late`).
    pub max_lateness_ms: Option<u64>,
}

/// One row of `cron_jobs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronJob {
    pub id: i64,
    pub agent_id: AgentId,
    pub schedule: Option<String>,
    /// The instant the job fires next (UTC). While a fire is claimed it stays the claimed instant.
    #[serde(with = "crate::encoding::rfc3339::serde")]
    pub next_fire_at: OffsetDateTime,
    pub payload: Map<String, Value>,
    pub is_one_time: bool,
    /// A paused job keeps its row and its `next_fire_at` but is neither due nor claimable; resumed, it fires once
    /// for the instants it missed (its `next_fire_at` has passed), then follows its schedule.
    pub paused: bool,
    /// The IANA time zone the schedule is read in (docs/scheduler.md, "Time zones").
    pub timezone: String,
    pub misfire_policy: MisfirePolicy,
    pub max_lateness_ms: Option<u64>,
}

/// One job of an [`CronJobStore::insert_cron_jobs`] call: the row that holds it and whether the call wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct CronJobInsert {
    /// The new row, or the row that already held the job's idempotency key.
    pub job: CronJob,
    /// `false` when a row with the job's idempotency key existed, so nothing was written for this job.
    pub inserted: bool,
}

/// One instant of one job: what a claim is about and what `fire_id` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FireKey {
    pub job_id: i64,
    pub scheduled_for: OffsetDateTime,
}

/// A row that is due before some instant, as the scheduler's window needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingFire {
    pub job_id: i64,
    pub scheduled_for: OffsetDateTime,
    /// Set while some claimer holds (or held, if it died) a claim on this instant.
    pub claimed_until: Option<OffsetDateTime>,
    /// The leadership token that claim was made under (set with `claimed_until`).
    pub claim_token: Option<FencingToken>,
}

impl PendingFire {
    /// A row nobody has claimed.
    pub fn unclaimed(job_id: i64, scheduled_for: OffsetDateTime) -> Self {
        Self { job_id, scheduled_for, claimed_until: None, claim_token: None }
    }

    /// The earliest moment a claim on this row can succeed for a claimer under leadership token `claimer` that
    /// claims `claim_ahead` before the instant (see [`ClaimLease::due_by`]): not before that, and not before a
    /// lease on it has ended, unless that lease was taken under an older token than `claimer`'s. A new term takes
    /// a deposed leader's claims over at once (the claim rule of [`CronJobStore`] lets it): a leader killed just
    /// after claiming must not make its reminders wait out its lease.
    pub fn claimable_at(&self, claim_ahead: Duration, claimer: FencingToken) -> OffsetDateTime {
        let ahead = self.scheduled_for - claim_ahead;
        let deposed = self.claim_token.is_some_and(|token| token < claimer);
        match self.claimed_until {
            Some(until) if until > ahead && !deposed => until,
            _ => ahead,
        }
    }
}

/// Who claims, under which leadership term, and until when the claim holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimLease {
    /// Unique per claimer (per scheduler instance); completing a fire requires the same owner.
    pub owner: String,
    pub token: FencingToken,
    /// The claimer's "now": claims whose lease ended at or before it are free again.
    pub now: OffsetDateTime,
    /// Rows due at or before this can be claimed: `now` plus how far ahead the claimer claims. Claiming a few
    /// milliseconds before the instant takes the claim's commit off the path between the instant and the
    /// publish; the claimer still publishes no earlier than the instant.
    pub due_by: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

/// What to do with a claimed row once its reminder is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireCompletion {
    /// A one-time job (or a recurring one with no instant left): the row goes.
    Delete(FireKey),
    /// A recurring job: the row moves to its next instant and the claim is cleared.
    Advance { fire: FireKey, next_fire_at: OffsetDateTime },
}

impl FireCompletion {
    pub fn fire(&self) -> FireKey {
        match self {
            Self::Delete(fire) | Self::Advance { fire, .. } => *fire,
        }
    }
}

/// Durable storage of cron jobs.
///
/// Claim rule, which every implementation must keep: a row is claimed only if it exists, is not paused, is due
/// (`next_fire_at <= lease.due_by`), and is not claimed, or its claim expired (`claimed_until <= lease.now`), or
/// its claim was made under an older leadership token; the claimed instant is the row's `next_fire_at`, which
/// the claim does not change. The check and the write are one atomic step, so one instant of one job has at
/// most one unexpired claim. A completion applies only while the row is still claimed by the same owner.
pub trait CronJobStore: Send + Sync + std::fmt::Debug {
    /// Whether the store takes one write at a time (SQLite): a scheduler then queues its own writes rather than
    /// have them wait on the store's lock. A store whose writes run side by side (PostgreSQL) says `false`.
    fn single_writer(&self) -> bool {
        true
    }
    /// Writes one job; [`StoreError::Conflict`] when its idempotency key is already held by a row.
    fn insert_cron_job(&self, job: &NewCronJob) -> Result<CronJob, StoreError>;
    /// Inserts `jobs` and returns one outcome per job, in the same order. A job whose idempotency key is already
    /// held (by an earlier row, or by an earlier job of the same call) is not written: its outcome is the
    /// holding row with `inserted: false`, and it fails neither the call nor the other jobs. Every other job is
    /// written, all or none. A database adapter should do this in one transaction: the scheduler groups
    /// concurrent `schedule_once` calls into one call of this, so the cost of a commit is shared by every job
    /// in it; the lookup of a held key belongs in that transaction too, so the holder it returns is the row
    /// that made the insert conflict.
    ///
    /// This default is not atomic: a row deleted between the conflict and the lookup makes it report the
    /// conflict.
    fn insert_cron_jobs(&self, jobs: &[NewCronJob]) -> Result<Vec<CronJobInsert>, StoreError> {
        jobs.iter()
            .map(|job| match (self.insert_cron_job(job), &job.idempotency_key) {
                (Ok(job), _) => Ok(CronJobInsert { job, inserted: true }),
                (Err(StoreError::Conflict(conflict)), Some(key)) => match self.cron_job_by_idempotency_key(key)? {
                    Some(job) => Ok(CronJobInsert { job, inserted: false }),
                    None => Err(StoreError::Conflict(conflict)),
                },
                (Err(error), _) => Err(error),
            })
            .collect()
    }
    fn cron_job(&self, id: i64) -> Result<Option<CronJob>, StoreError>;
    /// The job created with this `Idempotency-Key`, if any.
    fn cron_job_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<CronJob>, StoreError>;
    /// Jobs by ascending id, starting after `after_id` (keyset pagination).
    fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, StoreError>;
    /// `true` when a row was deleted.
    fn delete_cron_job(&self, id: i64) -> Result<bool, StoreError>;
    /// Pauses (`true`) or resumes (`false`) job `id` and returns its row as it is then; `None` when there is no
    /// such job. Nothing else of the row changes: a resumed job whose `next_fire_at` passed while it was paused is
    /// due at once, and a claim taken before the pause runs its course (its fire may still be published).
    fn set_cron_job_paused(&self, id: i64, paused: bool) -> Result<Option<CronJob>, StoreError>;
    /// How many jobs there are (each pending its next fire, claimed or not), for metrics.
    fn count_cron_jobs(&self) -> Result<u64, StoreError>;
    /// How many one-time rows `agent_id` has (its pending reminders, claimed or not).
    fn count_one_time_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError>;
    /// `agent_id`'s one-time rows ordered by `(next_fire_at, id)`, at most `limit`.
    fn one_time_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError>;
    /// Deletes row `id` if it is a one-time row of `agent_id` that is not claimed under a lease still running at
    /// `now` (`claimed_until > now`): a fire on its way is not taken back. `true` when a row was deleted.
    fn delete_one_time_job(&self, id: i64, agent_id: &AgentId, now: OffsetDateTime) -> Result<bool, StoreError>;
    /// How many recurring rows `agent_id` has (the jobs its `schedule_recurring` tool calls created, and any an
    /// operator created for it).
    fn count_recurring_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError>;
    /// `agent_id`'s recurring rows ordered by `(next_fire_at, id)`, at most `limit`.
    fn recurring_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError>;
    /// Deletes row `id` if it is a recurring row of `agent_id`, claimed or not (as an operator's delete: a fire
    /// already claimed may still be published, none is claimed afterwards). `true` when a row was deleted.
    fn delete_recurring_job(&self, id: i64, agent_id: &AgentId) -> Result<bool, StoreError>;
    /// Unpaused rows with `next_fire_at < before`, ordered by `(next_fire_at, id)`, at most `limit` (claimed or
    /// not, with the claim's end and token).
    fn pending_fires(&self, before: OffsetDateTime, limit: usize) -> Result<Vec<PendingFire>, StoreError>;
    /// Claims what can be claimed of the rows `job_ids` (all in one transaction) and returns those rows; a
    /// row that cannot be claimed (gone, not due, claimed by someone else) is simply absent from the result.
    /// A leader-only write: [`StoreError::Fenced`], and nothing claimed, when `lease.token` is older than the
    /// newest token the store has seen; a newer one raises it.
    fn claim_fires(&self, job_ids: &[i64], lease: &ClaimLease) -> Result<Vec<CronJob>, StoreError>;
    /// Records every fire of `fired` in its agent's mailbox in firing order (by `fired_at`, ties by `fire_id`),
    /// unless its `fire_id` is recorded already (a refire after a crash records nothing new), and applies the completions whose claim `owner` still holds; all in one
    /// transaction. Returns how many completions applied. A published fire is recorded whether or not its
    /// completion still applies (its row may have been deleted meanwhile): it was published all the same. A
    /// leader-only write, fenced by `token` like [`Self::claim_fires`]: a fenced call records nothing either.
    fn complete_fires(
        &self,
        owner: &str,
        token: FencingToken,
        completions: &[FireCompletion],
        fired: &[FiredReminder],
    ) -> Result<usize, StoreError>;
    /// [`Self::complete_fires`] then [`Self::claim_fires`] (skipped when `job_ids` is empty). A database adapter should do both in one
    /// transaction: a busy scheduler completes one batch and claims the next with a single commit, which
    /// halves what it writes per fire.
    fn complete_and_claim(
        &self,
        owner: &str,
        completions: &[FireCompletion],
        fired: &[FiredReminder],
        job_ids: &[i64],
        lease: &ClaimLease,
    ) -> Result<(usize, Vec<CronJob>), StoreError> {
        let completed = self.complete_fires(owner, lease.token, completions, fired)?;
        let claimed = if job_ids.is_empty() { Vec::new() } else { self.claim_fires(job_ids, lease)? };
        Ok((completed, claimed))
    }
    /// Records instants that were not fired (a misfire skipped, a reminder too late), each once by its `fire_id`
    /// (a repeat after a crash records nothing new), apart from the mailbox: no stream, replay, count or quota sees
    /// them. Returns how many were new. A leader-only write, fenced by `token` like [`Self::claim_fires`]. The
    /// scheduler writes them just before the completion of their row, so a completion that fails leaves them to be
    /// written again by the refire, which finds them recorded.
    fn record_skipped_runs(&self, token: FencingToken, skipped: &[SkippedRun]) -> Result<usize, StoreError>;
    /// Job `job_id`'s runs, newest first (by `scheduled_for`, ties by `fire_id`), at most `limit`: its fires as the
    /// mailbox keeps them and its skipped instants, whether or not the job still exists. Kept as long as the
    /// mailbox keeps its entries.
    fn cron_job_runs(&self, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, StoreError>;
}

#[derive(Debug, Clone)]
struct StoredJob {
    job: CronJob,
    claim: Option<StoredClaim>,
}

#[derive(Debug, Clone)]
struct StoredClaim {
    owner: String,
    token: FencingToken,
    until: OffsetDateTime,
}

#[derive(Debug, Default)]
struct CronRows {
    next_id: i64,
    rows: BTreeMap<i64, StoredJob>,
    by_key: BTreeMap<IdempotencyKey, i64>,
    mailbox: MailboxRows,
    skips: SkipRows,
}

/// `cron_jobs` and `agent_mailbox` in memory. Each switch makes the matching operations report
/// [`StoreError::Unavailable`], so tests can cut the store off entirely or only fail claims or completions (a
/// crash between publishing and deleting looks like a completion that never happened).
#[derive(Debug, Default)]
pub struct InMemoryCronJobStore {
    state: Mutex<CronRows>,
    /// Fails every operation.
    pub failure: FailureSwitch,
    /// Fails only `claim_fires`.
    pub claim_failure: FailureSwitch,
    /// Fails only `complete_fires` (and with it the recording of its fires).
    pub completion_failure: FailureSwitch,
    /// The fencing epoch of the claims and completions.
    pub epoch: EpochGate,
}

impl InMemoryCronJobStore {
    pub fn len(&self) -> usize {
        lock(&self.state).rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What `agent_id`'s pending one-time jobs and mailbox entries are charged ([`crate::AgentStorage`]).
    pub(crate) fn charged_bytes(&self, agent_id: &AgentId) -> Result<u64, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let payload = |payload: &Map<String, Value>| {
            crate::ports::store::row_charge(serde_json::to_string(payload).map_or(0, |json| json.len()))
        };
        let pending: u64 = state
            .rows
            .values()
            .filter(|stored| &stored.job.agent_id == agent_id)
            .map(|stored| payload(&stored.job.payload))
            .sum();
        Ok(pending.saturating_add(state.mailbox.charged_bytes(agent_id, payload)))
    }

    /// The claim currently recorded on a row: `(owner, claimed_until)`.
    pub fn claim_of(&self, id: i64) -> Option<(String, OffsetDateTime)> {
        lock(&self.state).rows.get(&id)?.claim.as_ref().map(|claim| (claim.owner.clone(), claim.until))
    }
}

impl CronRows {
    /// The live row holding `key`; `by_key` keeps entries of deleted rows, which hold nothing.
    fn holder_of(&self, key: &IdempotencyKey) -> Option<&CronJob> {
        self.by_key.get(key).and_then(|id| self.rows.get(id)).map(|stored| &stored.job)
    }

    fn insert(&mut self, job: &NewCronJob) -> Result<CronJob, StoreError> {
        if job.idempotency_key.as_ref().is_some_and(|key| self.holder_of(key).is_some()) {
            return Err(StoreError::Conflict("idempotency key already used".to_owned()));
        }
        self.next_id += 1;
        if let Some(key) = &job.idempotency_key {
            self.by_key.insert(key.clone(), self.next_id);
        }
        let stored = CronJob {
            id: self.next_id,
            agent_id: job.agent_id.clone(),
            schedule: job.schedule.clone(),
            next_fire_at: job.next_fire_at,
            payload: job.payload.clone(),
            is_one_time: job.is_one_time,
            paused: false,
            timezone: job.timezone.clone(),
            misfire_policy: job.misfire_policy,
            max_lateness_ms: job.max_lateness_ms,
        };
        self.rows.insert(stored.id, StoredJob { job: stored.clone(), claim: None });
        Ok(stored)
    }
}

impl CronJobStore for InMemoryCronJobStore {
    fn insert_cron_job(&self, job: &NewCronJob) -> Result<CronJob, StoreError> {
        self.failure.check()?;
        lock(&self.state).insert(job)
    }

    fn insert_cron_jobs(&self, jobs: &[NewCronJob]) -> Result<Vec<CronJobInsert>, StoreError> {
        // Checked once up front and under one lock: all or nothing, like the database's one transaction.
        self.failure.check()?;
        let mut state = lock(&self.state);
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            let held = job.idempotency_key.as_ref().and_then(|key| state.holder_of(key)).cloned();
            outcomes.push(match held {
                Some(job) => CronJobInsert { job, inserted: false },
                None => CronJobInsert { job: state.insert(job)?, inserted: true },
            });
        }
        Ok(outcomes)
    }

    fn cron_job(&self, id: i64) -> Result<Option<CronJob>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).rows.get(&id).map(|stored| stored.job.clone()))
    }

    fn cron_job_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<CronJob>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).holder_of(key).cloned())
    }

    fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let start = after_id.map_or(i64::MIN, |id| id.saturating_add(1));
        Ok(state.rows.range(start..).take(limit).map(|(_, stored)| stored.job.clone()).collect())
    }

    fn delete_cron_job(&self, id: i64) -> Result<bool, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).rows.remove(&id).is_some())
    }

    fn count_cron_jobs(&self) -> Result<u64, StoreError> {
        self.failure.check()?;
        Ok(u64::try_from(lock(&self.state).rows.len()).unwrap_or(u64::MAX))
    }

    fn set_cron_job_paused(&self, id: i64, paused: bool) -> Result<Option<CronJob>, StoreError> {
        self.failure.check()?;
        let mut state = lock(&self.state);
        let Some(stored) = state.rows.get_mut(&id) else { return Ok(None) };
        stored.job.paused = paused;
        Ok(Some(stored.job.clone()))
    }

    fn count_one_time_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        Ok(state.rows.values().filter(|stored| stored.job.is_one_time && &stored.job.agent_id == agent_id).count())
    }

    fn one_time_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let mut jobs: Vec<CronJob> = state
            .rows
            .values()
            .filter(|stored| stored.job.is_one_time && &stored.job.agent_id == agent_id)
            .map(|stored| stored.job.clone())
            .collect();
        jobs.sort_by_key(|job| (job.next_fire_at, job.id));
        jobs.truncate(limit);
        Ok(jobs)
    }

    fn delete_one_time_job(&self, id: i64, agent_id: &AgentId, now: OffsetDateTime) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut state = lock(&self.state);
        let deletable = state.rows.get(&id).is_some_and(|stored| {
            stored.job.is_one_time
                && &stored.job.agent_id == agent_id
                && stored.claim.as_ref().is_none_or(|claim| claim.until <= now)
        });
        Ok(deletable && state.rows.remove(&id).is_some())
    }

    fn count_recurring_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        Ok(state.rows.values().filter(|stored| !stored.job.is_one_time && &stored.job.agent_id == agent_id).count())
    }

    fn recurring_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let mut jobs: Vec<CronJob> = state
            .rows
            .values()
            .filter(|stored| !stored.job.is_one_time && &stored.job.agent_id == agent_id)
            .map(|stored| stored.job.clone())
            .collect();
        jobs.sort_by_key(|job| (job.next_fire_at, job.id));
        jobs.truncate(limit);
        Ok(jobs)
    }

    fn delete_recurring_job(&self, id: i64, agent_id: &AgentId) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut state = lock(&self.state);
        let deletable =
            state.rows.get(&id).is_some_and(|stored| !stored.job.is_one_time && &stored.job.agent_id == agent_id);
        Ok(deletable && state.rows.remove(&id).is_some())
    }

    fn pending_fires(&self, before: OffsetDateTime, limit: usize) -> Result<Vec<PendingFire>, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let mut due: Vec<PendingFire> = state
            .rows
            .values()
            .filter(|stored| stored.job.next_fire_at < before && !stored.job.paused)
            .map(|stored| PendingFire {
                job_id: stored.job.id,
                scheduled_for: stored.job.next_fire_at,
                claimed_until: stored.claim.as_ref().map(|claim| claim.until),
                claim_token: stored.claim.as_ref().map(|claim| claim.token),
            })
            .collect();
        due.sort_by_key(|fire| (fire.scheduled_for, fire.job_id));
        due.truncate(limit);
        Ok(due)
    }

    fn claim_fires(&self, job_ids: &[i64], lease: &ClaimLease) -> Result<Vec<CronJob>, StoreError> {
        self.failure.check()?;
        self.claim_failure.check()?;
        if job_ids.is_empty() {
            // Nothing to write, nothing to admit: as a database adapter skips the transaction.
            return Ok(Vec::new());
        }
        let mut state = lock(&self.state);
        self.epoch.admit(lease.token)?;
        let mut claimed = Vec::with_capacity(job_ids.len());
        for job_id in job_ids {
            let Some(stored) = state.rows.get_mut(job_id) else { continue };
            if stored.job.next_fire_at > lease.due_by || stored.job.paused {
                continue;
            }
            let free = match &stored.claim {
                None => true,
                Some(claim) => claim.until <= lease.now || claim.token < lease.token,
            };
            if free {
                stored.claim =
                    Some(StoredClaim { owner: lease.owner.clone(), token: lease.token, until: lease.expires_at });
                claimed.push(stored.job.clone());
            }
        }
        Ok(claimed)
    }

    fn complete_fires(
        &self,
        owner: &str,
        token: FencingToken,
        completions: &[FireCompletion],
        fired: &[FiredReminder],
    ) -> Result<usize, StoreError> {
        self.failure.check()?;
        if completions.is_empty() && fired.is_empty() {
            return Ok(0);
        }
        self.completion_failure.check()?;
        let mut state = lock(&self.state);
        self.epoch.admit(token)?;
        for reminder in crate::ports::mailbox::in_firing_order(fired) {
            state.mailbox.record(reminder);
        }
        let mut completed = 0;
        for completion in completions {
            let fire = completion.fire();
            // The owner alone identifies a claim: one owner fires one instant of a row at a time. Advancing
            // also checks the instant, so a stale completion never moves a row twice.
            let held = state.rows.get(&fire.job_id).is_some_and(|stored| {
                stored.claim.as_ref().is_some_and(|claim| claim.owner == owner)
                    && (matches!(completion, FireCompletion::Delete(_))
                        || stored.job.next_fire_at == fire.scheduled_for)
            });
            if !held {
                continue;
            }
            match completion {
                FireCompletion::Delete(_) => {
                    state.rows.remove(&fire.job_id);
                }
                FireCompletion::Advance { next_fire_at, .. } => {
                    if let Some(stored) = state.rows.get_mut(&fire.job_id) {
                        stored.job.next_fire_at = *next_fire_at;
                        stored.claim = None;
                    }
                }
            }
            completed += 1;
        }
        Ok(completed)
    }

    fn record_skipped_runs(&self, token: FencingToken, skipped: &[SkippedRun]) -> Result<usize, StoreError> {
        self.failure.check()?;
        if skipped.is_empty() {
            return Ok(0);
        }
        self.completion_failure.check()?;
        let mut state = lock(&self.state);
        self.epoch.admit(token)?;
        Ok(skipped.iter().filter(|run| state.skips.record(run)).count())
    }

    fn cron_job_runs(&self, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, StoreError> {
        self.failure.check()?;
        let state = lock(&self.state);
        let fired = state.mailbox.of_job(job_id).map(CronJobRun::fired);
        let skipped = state.skips.of_job(job_id).map(CronJobRun::skipped);
        Ok(crate::ports::runs::newest_first(fired.chain(skipped), limit))
    }
}

impl MailboxStore for InMemoryCronJobStore {
    fn mailbox_position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).mailbox.position(agent_id, fire_id))
    }

    fn mailbox_entries(&self, query: &MailboxQuery) -> Result<Vec<MailboxEntry>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).mailbox.select(query))
    }

    fn mark_received(&self, receipts: &[Receipt], at: OffsetDateTime) -> Result<Vec<usize>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).mailbox.mark_received(receipts, at))
    }

    fn mailbox_head(&self) -> Result<i64, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).mailbox.head())
    }

    fn mailbox_since(&self, after: i64, also: &[i64], limit: usize) -> Result<Vec<MailboxEntry>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.state).mailbox.since(after, also, limit))
    }

    fn prune_mailbox(&self, fired_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut state = lock(&self.state);
        let pruned = state.mailbox.prune(fired_before, limit);
        Ok(pruned + state.skips.prune(fired_before, limit))
    }
}

impl FencingEpoch for InMemoryCronJobStore {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        self.failure.check()?;
        Ok(self.epoch.newest())
    }
}

impl StoreHealth for InMemoryCronJobStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.failure.check()
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::conformance::cron::lease;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    crate::cron_store_conformance!(Some(Box::<InMemoryCronJobStore>::default()));
    crate::mailbox_store_conformance!(Some(Box::<InMemoryCronJobStore>::default()));

    fn one_time(at: OffsetDateTime) -> NewCronJob {
        NewCronJob {
            agent_id: AgentId::new("agent-7").unwrap(),
            schedule: None,
            next_fire_at: at,
            payload: Map::new(),
            is_one_time: true,
            idempotency_key: None,
            timezone: DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: MisfirePolicy::FireOnce,
            max_lateness_ms: None,
        }
    }

    #[test]
    fn a_group_insert_skips_held_idempotency_keys() {
        let store = InMemoryCronJobStore::default();
        crate::conformance::cron::a_group_with_held_keys_returns_the_holders_and_inserts_the_rest(&store, START);
        assert_eq!(store.len(), 4);
    }

    /// Implements only the required methods, so the trait's default `insert_cron_jobs` is what runs.
    #[derive(Debug, Default)]
    struct RequiredOnly(InMemoryCronJobStore);

    impl CronJobStore for RequiredOnly {
        fn insert_cron_job(&self, job: &NewCronJob) -> Result<CronJob, StoreError> {
            self.0.insert_cron_job(job)
        }
        fn cron_job(&self, id: i64) -> Result<Option<CronJob>, StoreError> {
            self.0.cron_job(id)
        }
        fn cron_job_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<CronJob>, StoreError> {
            self.0.cron_job_by_idempotency_key(key)
        }
        fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, StoreError> {
            self.0.list_cron_jobs(after_id, limit)
        }
        fn delete_cron_job(&self, id: i64) -> Result<bool, StoreError> {
            self.0.delete_cron_job(id)
        }
        fn count_cron_jobs(&self) -> Result<u64, StoreError> {
            self.0.count_cron_jobs()
        }
        fn set_cron_job_paused(&self, id: i64, paused: bool) -> Result<Option<CronJob>, StoreError> {
            self.0.set_cron_job_paused(id, paused)
        }
        fn count_one_time_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
            self.0.count_one_time_jobs(agent_id)
        }
        fn one_time_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
            self.0.one_time_jobs_of(agent_id, limit)
        }
        fn delete_one_time_job(&self, id: i64, agent_id: &AgentId, now: OffsetDateTime) -> Result<bool, StoreError> {
            self.0.delete_one_time_job(id, agent_id, now)
        }
        fn count_recurring_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
            self.0.count_recurring_jobs(agent_id)
        }
        fn recurring_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
            self.0.recurring_jobs_of(agent_id, limit)
        }
        fn delete_recurring_job(&self, id: i64, agent_id: &AgentId) -> Result<bool, StoreError> {
            self.0.delete_recurring_job(id, agent_id)
        }
        fn pending_fires(&self, before: OffsetDateTime, limit: usize) -> Result<Vec<PendingFire>, StoreError> {
            self.0.pending_fires(before, limit)
        }
        fn claim_fires(&self, job_ids: &[i64], lease: &ClaimLease) -> Result<Vec<CronJob>, StoreError> {
            self.0.claim_fires(job_ids, lease)
        }
        fn complete_fires(
            &self,
            owner: &str,
            token: FencingToken,
            completions: &[FireCompletion],
            fired: &[FiredReminder],
        ) -> Result<usize, StoreError> {
            self.0.complete_fires(owner, token, completions, fired)
        }
        fn record_skipped_runs(&self, token: FencingToken, skipped: &[SkippedRun]) -> Result<usize, StoreError> {
            self.0.record_skipped_runs(token, skipped)
        }
        fn cron_job_runs(&self, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, StoreError> {
            self.0.cron_job_runs(job_id, limit)
        }
    }

    #[test]
    fn the_default_group_insert_skips_held_idempotency_keys_too() {
        let store = RequiredOnly::default();
        crate::conformance::cron::a_group_with_held_keys_returns_the_holders_and_inserts_the_rest(&store, START);
        assert_eq!(store.0.len(), 4);
    }

    #[test]
    fn claim_of_shows_the_claim_and_each_switch_fails_its_operations() {
        let store = InMemoryCronJobStore::default();
        let job = store
            .insert_cron_job(&NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(START) })
            .unwrap();
        let fire = FireKey { job_id: job.id, scheduled_for: START };
        store.claim_failure.set_failing(true);
        assert!(matches!(store.claim_fires(&[job.id], &lease("a", 1, START)), Err(StoreError::Unavailable(_))));
        assert_eq!(store.claim_of(job.id), None, "the failed claim took nothing");
        store.claim_failure.set_failing(false);
        store.claim_fires(&[job.id], &lease("a", 1, START)).unwrap();
        assert_eq!(store.claim_of(job.id), Some(("a".to_owned(), START + Duration::seconds(10))));

        let advance = FireCompletion::Advance { fire, next_fire_at: START + Duration::minutes(1) };
        store.completion_failure.set_failing(true);
        assert!(matches!(store.complete_fires("a", FencingToken(1), &[advance], &[]), Err(StoreError::Unavailable(_))));
        assert_eq!(store.cron_job(job.id).unwrap().map(|job| job.next_fire_at), Some(START), "nothing completed");
        store.completion_failure.set_failing(false);
        assert_eq!(store.complete_fires("a", FencingToken(1), &[advance], &[]).unwrap(), 1);
        assert_eq!(store.claim_of(job.id), None, "advancing cleared the claim");

        store.failure.set_failing(true);
        assert!(store.ping().is_err());
        assert!(store.cron_job(job.id).is_err());
        assert!(store.newest_token().is_err());
        store.failure.set_failing(false);
        assert!(store.ping().is_ok());
    }
}
