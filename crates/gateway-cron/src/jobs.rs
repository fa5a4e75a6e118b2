//! The job API: one-time reminders, recurring jobs, removal and listing. Every call writes the row first and
//! arms the firing loop after, so a job that was acknowledged survives a crash.

use gateway_core::runtime::sync::lock;
use gateway_core::{
    AgentId, CronJob, CronJobRun, DEFAULT_TIMEZONE, Event, EventPayload, IdempotencyKey, MisfirePolicy, NewCronJob,
    PendingFire, StoreError, Topic, run_blocking,
};
use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};
use tracing::{debug, info};

use crate::error::CronError;
use crate::schedule::{CronSchedule, PREVIEW_INSTANTS, time_zone};
use crate::scheduler::{CronScheduler, duration};

/// Longest accepted one-time delay: ten years (of 365.25 days). Longer is almost surely a unit mistake
/// (seconds or microseconds sent as milliseconds), and a row that fires after the operator's retirement only
/// clutters the table.
pub const MAX_DELAY_MS: i64 = 10 * 36_525 * 86_400_000 / 100;

/// Most jobs one `list` call returns.
pub const MAX_LIST_LIMIT: usize = 1_000;

/// Runs a `runs` call returns when the caller names no limit.
pub const DEFAULT_RUNS_LIMIT: usize = 50;
/// Most runs one `runs` call returns: five `fire_all` catch-ups' worth.
pub const MAX_RUNS_LIMIT: usize = 500;

pub use gateway_core::ports::mailbox::fire_id;

/// The instants a job fires next: its `next_fire_at`, then (recurring jobs) the following ones in its time zone,
/// up to [`PREVIEW_INSTANTS`] in all. Shown by the API so a mistaken expression is seen before it fires.
pub fn preview(job: &CronJob) -> Vec<OffsetDateTime> {
    let mut instants = vec![job.next_fire_at];
    if let Some(Ok(schedule)) = job.schedule.as_deref().map(|schedule| CronSchedule::parse_in(schedule, &job.timezone))
    {
        instants.extend(schedule.upcoming(job.next_fire_at, PREVIEW_INSTANTS - 1));
    }
    instants
}

/// [`preview`]'s instants as RFC 3339 with the offset of the job's time zone at each
/// (`2027-03-14T03:00:00-04:00`): the wall-clock times an operator reads the schedule in. A zone the tz database
/// does not know (a row edited outside the API) is shown as UTC, which is also how such a row is previewed.
pub fn preview_local(job: &CronJob) -> Vec<String> {
    let zone = time_zone(&job.timezone).unwrap_or(chrono_tz::Tz::UTC);
    preview(job).into_iter().map(|instant| local_rfc3339(instant, zone)).collect()
}

/// `instant` in `zone`, RFC 3339 with the zone's offset, fractional seconds only when there are any.
fn local_rfc3339(instant: OffsetDateTime, zone: chrono_tz::Tz) -> String {
    use chrono::TimeZone;
    match chrono::Utc.timestamp_opt(instant.unix_timestamp(), instant.nanosecond()).single() {
        Some(utc) => utc.with_timezone(&zone).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false),
        None => gateway_core::encoding::rfc3339::format(instant),
    }
}

impl CronScheduler {
    /// Files a one-time reminder for `agent_id` in `delay_ms` milliseconds (FR-10.5). The row is committed
    /// first and the timer armed after, so a job that was acknowledged survives a crash. Concurrent calls
    /// share one commit (group commit), which is what lets SQLite take tens of thousands of them a second.
    pub async fn schedule_once(
        &self,
        agent_id: AgentId,
        delay_ms: i64,
        payload: Map<String, Value>,
    ) -> Result<CronJob, CronError> {
        Ok(self.schedule_once_idempotent(agent_id, delay_ms, payload, None).await?.0)
    }

    /// [`Self::schedule_once`] under an idempotency key (a retried DecisionLog's reminder): while a row holds
    /// the key, nothing is written or armed and that row comes back with `true` (already scheduled), even if
    /// it was asked for with another delay or payload — the first request stands. That is never an error and
    /// never fails the other calls sharing the commit. Once the row is gone (fired, or removed) the key is free
    /// and a call with it schedules again.
    pub async fn schedule_once_idempotent(
        &self,
        agent_id: AgentId,
        delay_ms: i64,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(CronJob, bool), CronError> {
        self.schedule_once_with(agent_id, delay_ms, payload, idempotency_key, None).await
    }

    /// [`Self::schedule_once_idempotent`] with a `max_lateness_ms`: published later than that after its instant
    /// (the gateway was down, the store unreachable), the reminder is not delivered and its run is recorded
    /// `skipped_late` (docs/scheduler.md "Misfires").
    pub async fn schedule_once_with(
        &self,
        agent_id: AgentId,
        delay_ms: i64,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
        max_lateness_ms: Option<u64>,
    ) -> Result<(CronJob, bool), CronError> {
        if !(1..=MAX_DELAY_MS).contains(&delay_ms) {
            return Err(CronError::InvalidDelay(delay_ms));
        }
        let next_fire_at = ceil_to_millisecond(self.inner.clock.now() + Duration::milliseconds(delay_ms));
        // Kept only to tell a differing replay apart, so only keyed calls pay for the copy.
        let requested = idempotency_key.as_ref().map(|_| (agent_id.clone(), payload.clone()));
        let new_job = NewCronJob {
            agent_id,
            schedule: None,
            next_fire_at,
            payload,
            is_one_time: true,
            idempotency_key,
            timezone: DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: MisfirePolicy::FireOnce,
            max_lateness_ms,
        };
        let outcome = self.inner.inserts.submit(new_job).await?;
        let job = outcome.job;
        if !outcome.inserted {
            let same = requested.is_some_and(|(agent_id, payload)| {
                job.is_one_time && job.agent_id == agent_id && job.payload == payload
            });
            if !same {
                // The payload is the agent's data: only the fact that it differs is logged.
                info!(job_id = job.id, agent_id = %job.agent_id,
                    "the job already holding this key differs from the one requested; the first one stands");
            }
            return Ok((job, true));
        }
        debug!(job_id = job.id, agent_id = %job.agent_id, delay_ms, "one-time job scheduled");
        self.arm(&job);
        Ok((job, false))
    }

    /// Adds a recurring job; `schedule` is crontab (5 fields, `@` shorthands) or 6/7 fields with seconds.
    pub async fn add_recurring(
        &self,
        agent_id: AgentId,
        schedule: &str,
        payload: Map<String, Value>,
    ) -> Result<CronJob, CronError> {
        Ok(self.add_recurring_idempotent(agent_id, schedule, payload, None).await?.0)
    }

    /// [`Self::add_recurring`] under an `Idempotency-Key`: the first request with a key creates the job; a
    /// later one with the same key, agent, schedule and payload gets that job back (`true`: replayed) and
    /// creates nothing; with anything different it is refused.
    pub async fn add_recurring_idempotent(
        &self,
        agent_id: AgentId,
        schedule: &str,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(CronJob, bool), CronError> {
        self.add_recurring_with(agent_id, schedule, DEFAULT_TIMEZONE, payload, idempotency_key, MisfirePolicy::FireOnce)
            .await
    }

    /// [`Self::add_recurring_idempotent`] with the schedule read in the IANA time zone `timezone`
    /// ([`CronError::UnknownTimezone`] for a name the tz database does not know). A replay must name the same zone.
    pub async fn add_recurring_in(
        &self,
        agent_id: AgentId,
        schedule: &str,
        timezone: &str,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(CronJob, bool), CronError> {
        self.add_recurring_with(agent_id, schedule, timezone, payload, idempotency_key, MisfirePolicy::FireOnce).await
    }

    /// [`Self::add_recurring_in`] with a misfire policy (docs/scheduler.md "Misfires"). A replay under the same key
    /// must ask for the same zone and policy.
    pub async fn add_recurring_with(
        &self,
        agent_id: AgentId,
        schedule: &str,
        timezone: &str,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
        misfire_policy: MisfirePolicy,
    ) -> Result<(CronJob, bool), CronError> {
        let parsed = CronSchedule::parse_in(schedule, timezone)?;
        self.blocking(move |scheduler| {
            scheduler.add_parsed_recurring(agent_id, &parsed, payload, idempotency_key, misfire_policy)
        })
        .await
    }

    /// The store half of [`Self::add_recurring_idempotent`], on a blocking thread: a lookup, then an insert
    /// that may still lose the key to a concurrent request.
    fn add_parsed_recurring(
        &self,
        agent_id: AgentId,
        parsed: &CronSchedule,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
        misfire_policy: MisfirePolicy,
    ) -> Result<(CronJob, bool), CronError> {
        let replay = |existing: CronJob| {
            let same = existing.agent_id == agent_id
                && existing.schedule.as_deref() == Some(parsed.source())
                && existing.timezone == parsed.timezone()
                && existing.payload == payload
                && existing.misfire_policy == misfire_policy;
            if same { Ok((existing, true)) } else { Err(CronError::IdempotencyKeyReused) }
        };
        if let Some(key) = &idempotency_key
            && let Some(existing) = self.inner.store.cron_job_by_idempotency_key(key)?
        {
            return replay(existing);
        }
        let next_fire_at = parsed
            .next_after(self.inner.clock.now())
            .ok_or_else(|| CronError::InvalidSchedule("the schedule has no upcoming instant".to_owned()))?;
        let new_job = NewCronJob {
            agent_id: agent_id.clone(),
            schedule: Some(parsed.source().to_owned()),
            next_fire_at,
            payload: payload.clone(),
            is_one_time: false,
            idempotency_key: idempotency_key.clone(),
            timezone: parsed.timezone().to_owned(),
            misfire_policy,
            max_lateness_ms: None,
        };
        let inserted = {
            let _writing = self.inner.writes.take();
            self.inner.store.insert_cron_job(&new_job)
        };
        let job = match (inserted, &idempotency_key) {
            (Ok(job), _) => job,
            // The key was taken by a concurrent request between the lookup and the insert.
            (Err(StoreError::Conflict(conflict)), Some(key)) => {
                return match self.inner.store.cron_job_by_idempotency_key(key)? {
                    Some(existing) => replay(existing),
                    None => Err(StoreError::Conflict(conflict).into()),
                };
            }
            (Err(error), _) => return Err(error.into()),
        };
        info!(job_id = job.id, agent_id = %job.agent_id, schedule = parsed.source(), timezone = parsed.timezone(),
            "recurring job added");
        self.arm(&job);
        Ok((job, false))
    }

    /// Deletes a job. A fire of it already claimed may still be published; none is claimed afterwards.
    pub async fn remove(&self, job_id: i64) -> Result<(), CronError> {
        let deleted = self
            .blocking(move |scheduler| {
                let _writing = scheduler.inner.writes.take();
                Ok(scheduler.inner.store.delete_cron_job(job_id)?)
            })
            .await?;
        if deleted {
            info!(job_id, "cron job removed");
            Ok(())
        } else {
            Err(CronError::NotFound(job_id))
        }
    }

    /// Pauses a job: its row stays, and it does not fire until resumed. Idempotent. The store refuses to claim a
    /// paused row, which is what stops it on every instance, leader or not, at once (as for a deleted row, an entry
    /// the leader's window still holds fails its claim and is dropped); this instance also drops its own entry. A
    /// fire already claimed (at most `claim_ahead` before its instant) may still be published.
    pub async fn pause(&self, job_id: i64) -> Result<CronJob, CronError> {
        let job = self.set_paused(job_id, true).await?;
        lock(&self.inner.window).remove(job_id);
        info!(job_id, "cron job paused");
        Ok(job)
    }

    /// Resumes a job. Idempotent. A job whose `next_fire_at` passed while it was paused fires once at once (a
    /// recurring one for all the instants it missed, then on its schedule; a one-time one as it would have). It is
    /// armed here and, when another instance leads, announced to it, as a new job is.
    pub async fn resume(&self, job_id: i64) -> Result<CronJob, CronError> {
        let job = self.set_paused(job_id, false).await?;
        info!(job_id, "cron job resumed");
        self.arm(&job);
        Ok(job)
    }

    async fn set_paused(&self, job_id: i64, paused: bool) -> Result<CronJob, CronError> {
        self.blocking(move |scheduler| {
            let _writing = scheduler.inner.writes.take();
            scheduler.inner.store.set_cron_job_paused(job_id, paused)?.ok_or(CronError::NotFound(job_id))
        })
        .await
    }

    pub async fn job(&self, job_id: i64) -> Result<CronJob, CronError> {
        self.blocking(move |scheduler| scheduler.inner.store.cron_job(job_id)?.ok_or(CronError::NotFound(job_id))).await
    }

    /// Job `job_id`'s runs, newest first, at most `limit` (capped at [`MAX_RUNS_LIMIT`]): also those of a job deleted
    /// since, as long as the mailbox keeps them. [`CronError::NotFound`] only when there is neither the job nor a run.
    pub async fn runs(&self, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, CronError> {
        let limit = limit.min(MAX_RUNS_LIMIT);
        self.blocking(move |scheduler| {
            let runs = scheduler.inner.store.cron_job_runs(job_id, limit)?;
            if !runs.is_empty() || scheduler.inner.store.cron_job(job_id)?.is_some() {
                return Ok(runs);
            }
            // A one-time job that fired between the two reads is gone with its run written (one transaction): read
            // the runs once more before calling the job unknown.
            let runs = scheduler.inner.store.cron_job_runs(job_id, limit)?;
            if runs.is_empty() {
                return Err(CronError::NotFound(job_id));
            }
            Ok(runs)
        })
        .await
    }

    /// Jobs by ascending id after `after_id`, at most `limit` (capped at [`MAX_LIST_LIMIT`]).
    pub async fn list(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, CronError> {
        let limit = limit.min(MAX_LIST_LIMIT);
        self.blocking(move |scheduler| Ok(scheduler.inner.store.list_cron_jobs(after_id, limit)?)).await
    }

    /// Runs store work on tokio's blocking pool: a slow disk or SQLite's write lock never stalls a runtime
    /// worker.
    pub(crate) async fn blocking<T, F>(&self, work: F) -> Result<T, CronError>
    where
        F: FnOnce(&Self) -> Result<T, CronError> + Send + 'static,
        T: Send + 'static,
    {
        let scheduler = self.clone();
        run_blocking(move || work(&scheduler)).await.map_err(|failed| CronError::Store(failed.into()))?
    }

    fn arm(&self, job: &CronJob) {
        self.arm_fire(job.id, job.next_fire_at);
        // The leader is another instance: it learns of the job at its next refill (every few seconds), too late
        // for a short reminder, unless it is told now. Best effort: a lost announcement costs that refill's wait.
        let soon = self.inner.clock.now() + duration(self.inner.config.lookahead);
        if self.inner.leadership.current().is_none() && job.next_fire_at <= soon {
            let payload = EventPayload::JobScheduled { job_id: job.id, next_fire_at: job.next_fire_at };
            let event = Event::new(payload, self.inner.clock.now());
            if let Err(error) = self.inner.publisher.publish(&Topic::ScheduledJobs, &event) {
                debug!(job_id = job.id, %error, "job not announced to the leader; it is armed at its next refill");
            }
        }
    }

    /// Arms a job another instance has just scheduled (it announced it on [`Topic::ScheduledJobs`]), if this
    /// instance leads: it then fires on time instead of at the next refill. Any other instance ignores it.
    pub fn arm_announced(&self, job_id: i64, next_fire_at: OffsetDateTime) {
        if self.inner.leadership.current().is_some() {
            self.arm_fire(job_id, next_fire_at);
        }
    }

    fn arm_fire(&self, job_id: i64, scheduled_for: OffsetDateTime) {
        let fire = PendingFire::unclaimed(job_id, scheduled_for);
        if lock(&self.inner.window).push(fire) {
            self.inner.wake.notify_one();
        }
    }
}

/// Rounds up to whole milliseconds: the instant survives the database round trip unchanged (so the fire_id
/// is the same after a restart), and a reminder never fires before its full delay.
fn ceil_to_millisecond(instant: OffsetDateTime) -> OffsetDateTime {
    let sub_millisecond = i64::from(instant.nanosecond() % 1_000_000);
    if sub_millisecond == 0 { instant } else { instant + Duration::nanoseconds(1_000_000 - sub_millisecond) }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn fire_id_names_job_and_instant_in_rfc3339_utc() {
        assert_eq!(fire_id(42, datetime!(2026-02-22 12:00:05 UTC)), "42:2026-02-22T12:00:05Z");
        assert_eq!(fire_id(7, datetime!(2026-02-22 14:00:05.25 +02:00)), "7:2026-02-22T12:00:05.25Z");
    }

    #[test]
    fn ten_years_is_the_longest_delay() {
        assert_eq!(MAX_DELAY_MS, 315_576_000_000);
    }

    #[test]
    fn rounding_up_to_milliseconds_never_fires_early() {
        let exact = datetime!(2026-02-22 12:00:00.005 UTC);
        assert_eq!(ceil_to_millisecond(exact), exact);
        assert_eq!(
            ceil_to_millisecond(datetime!(2026-02-22 12:00:00.005000001 UTC)),
            exact + Duration::milliseconds(1)
        );
    }
}
