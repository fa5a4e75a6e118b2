//! Agents' reminders: [`CronScheduler::schedule_reminder`], the one function that schedules an agent's reminder
//! (from a DecisionLog's `schedule_reminder` call, through the intake's [`ReminderDesk`], and from the
//! `schedule_reminder` tool), with the limits an agent is held to; and what the other tools need (an agent's
//! pending reminders, and cancelling one).
//!
//! The limits are the scheduler's, so every way in keeps them: the longest delay ([`crate::MAX_DELAY_MS`]), the
//! payload's size as JSON (`reminder_payload_max_bytes`) and the agent's pending one-time jobs
//! (`max_pending_reminders_per_agent`). The pending count is read before the insert, outside its transaction
//! (the insert goes through the group commit that concurrent reminders share), so one agent's reminders take turns
//! on this instance ([`PendingGates`](crate::scheduler::PendingGates)) from the count to the commit: the cap is exact on one instance; with several,
//! an agent whose reminders reach different instances at the same moment at the limit may end up over it by up to
//! one per instance. docs/scheduler.md.
//!
//! The agent's storage quota (`agent_storage_quota_bytes`, [`gateway_core::ports::storage`]) is decided in the same
//! turn: the reminder is charged when it is accepted (its payload, as the pending row and later as the mailbox entry it
//! becomes), so a reminder once accepted is never refused when it fires, however full the mailbox is by then. The same
//! holds for it across instances as for the cap: over by at most one reminder per instance.

use gateway_core::intake::{BoxFuture, ReminderDesk, ReminderRefusal, ScheduledReminder};
use gateway_core::{AgentId, CronJob, IdempotencyKey, ReminderRequest, StoreError};
use serde_json::{Map, Value};
use tracing::info;

use crate::error::CronError;
use crate::jobs::MAX_DELAY_MS;
use crate::scheduler::CronScheduler;

/// What a tool reserves of the quota for its recorded answer before it runs: more than any answer of
/// `schedule_reminder` or `cancel_reminder` takes (`{"fire_at":"…","job_id":…}` is at most about 70 bytes), plus the
/// row charge.
pub const ANSWER_RESERVE_BYTES: u64 = 96 + gateway_core::STORED_ROW_CHARGE_BYTES;

/// What `schedule_recurring` reserves for its recorded answer: more than its answer takes
/// (`{"fire_at":"…","fire_at_local":"…","job_id":…}` is at most about 110 bytes), plus the row charge.
pub const RECURRING_ANSWER_RESERVE_BYTES: u64 = 160 + gateway_core::STORED_ROW_CHARGE_BYTES;

/// An agent's recurring job, as its `schedule_recurring` tool call asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurringRequest {
    pub agent_id: AgentId,
    /// Crontab, read in `timezone`.
    pub schedule: String,
    /// An IANA time zone name.
    pub timezone: String,
    pub payload: Map<String, Value>,
    /// Derived from the tool call (`tool_reminder_idempotency_key`): a retry finds the job its first attempt wrote.
    pub idempotency_key: Option<IdempotencyKey>,
}

impl CronScheduler {
    /// Schedules an agent's one-time reminder under the agent limits, and under the request's idempotency key
    /// when it has one (a retry then gets the pending job back, `already_scheduled`, and nothing is written).
    /// Returns once the row is committed and armed. Refused, with nothing written: a delay of 0 or over ten years,
    /// a payload over `reminder_payload_max_bytes` as JSON, an agent with `max_pending_reminders_per_agent`
    /// pending one-time jobs already, or whose stored bytes the reminder would take past `agent_storage_quota_bytes`
    /// (unless the key finds its pending job: a retry is not a new reminder).
    pub async fn schedule_reminder(&self, request: ReminderRequest) -> Result<ScheduledReminder, ReminderRefusal> {
        self.schedule_reminder_reserving(request, 0).await
    }

    /// [`Self::schedule_reminder`] for a caller that will store `reserve` more bytes for the agent once it is
    /// scheduled (a tool's recorded answer): the quota is checked with them counted.
    pub async fn schedule_reminder_reserving(
        &self,
        request: ReminderRequest,
        reserve: u64,
    ) -> Result<ScheduledReminder, ReminderRefusal> {
        let ReminderRequest { agent_id, delay_ms, payload, idempotency_key, max_lateness_ms } = request;
        let delay = i64::try_from(delay_ms)
            .ok()
            .filter(|delay| (1..=MAX_DELAY_MS).contains(delay))
            .ok_or(ReminderRefusal::InvalidDelay(delay_ms))?;
        let limit = self.inner.config.reminder_payload_max_bytes;
        let payload_bytes = json_len(&payload);
        if payload_bytes > limit {
            return Err(ReminderRefusal::PayloadTooLarge { limit });
        }
        let cap = self.inner.config.max_pending_reminders_per_agent;
        let quota = self.inner.config.agent_storage_quota_bytes;
        let _turn = self.inner.pending_gates.gate(&agent_id).lock().await;
        let (pending, stored) = {
            let agent_id = agent_id.clone();
            self.blocking(move |scheduler| {
                let pending = scheduler.inner.store.count_one_time_jobs(&agent_id)?;
                Ok((pending, scheduler.inner.storage.agent_storage_bytes(&agent_id)?))
            })
            .await
        }
        .map_err(refusal)?;
        let needed = gateway_core::ports::storage::row_charge(payload_bytes).saturating_add(reserve);
        let over_quota = stored.saturating_add(needed) > quota;
        if pending >= cap || over_quota {
            let held = match idempotency_key {
                Some(key) => self
                    .blocking(move |scheduler| Ok(scheduler.inner.store.cron_job_by_idempotency_key(&key)?))
                    .await
                    .map_err(refusal)?,
                None => None,
            };
            return match held {
                Some(job) if job.is_one_time && job.agent_id == agent_id => {
                    Ok(ScheduledReminder { job, already_scheduled: true })
                }
                _ if pending >= cap => Err(ReminderRefusal::TooManyPending { limit: cap }),
                _ => Err(ReminderRefusal::QuotaExceeded { limit: quota }),
            };
        }
        let (job, already_scheduled) = self
            .schedule_once_with(agent_id, delay, payload, idempotency_key, max_lateness_ms)
            .await
            .map_err(refusal)?;
        Ok(ScheduledReminder { job, already_scheduled })
    }

    /// Files `agent_id`'s recurring job under the same limits as its reminders, checked in the same turn: the
    /// schedule and zone must parse, the payload fit `reminder_payload_max_bytes`, the agent have fewer than
    /// `max_pending_reminders_per_agent` recurring jobs (counted apart from its one-time reminders, so neither kind
    /// crowds out the other), and the row (its payload) plus `reserve` fit the storage quota. A retry whose key
    /// finds the job its first attempt wrote gets it back (`true`) even at a limit. Each fire is then charged to the
    /// agent as a mailbox entry, as a reminder's is (docs/agents.md).
    pub async fn schedule_recurring_reserving(
        &self,
        request: RecurringRequest,
        reserve: u64,
    ) -> Result<(CronJob, bool), CronError> {
        let RecurringRequest { agent_id, schedule, timezone, payload, idempotency_key } = request;
        crate::schedule::CronSchedule::parse_in(&schedule, &timezone)?;
        let limit = self.inner.config.reminder_payload_max_bytes;
        let payload_bytes = json_len(&payload);
        if payload_bytes > limit {
            return Err(CronError::InvalidToolParams(format!("params.payload: must be at most {limit} bytes as JSON")));
        }
        let cap = self.inner.config.max_pending_reminders_per_agent;
        let quota = self.inner.config.agent_storage_quota_bytes;
        let _turn = self.inner.pending_gates.gate(&agent_id).lock().await;
        let (recurring, stored) = {
            let agent_id = agent_id.clone();
            self.blocking(move |scheduler| {
                let recurring = scheduler.inner.store.count_recurring_jobs(&agent_id)?;
                Ok((recurring, scheduler.inner.storage.agent_storage_bytes(&agent_id)?))
            })
            .await?
        };
        let needed = gateway_core::ports::storage::row_charge(payload_bytes).saturating_add(reserve);
        if recurring >= cap || stored.saturating_add(needed) > quota {
            let held = match idempotency_key.clone() {
                Some(key) => {
                    self.blocking(move |scheduler| Ok(scheduler.inner.store.cron_job_by_idempotency_key(&key)?)).await?
                }
                None => None,
            };
            return match held {
                Some(job) if !job.is_one_time && job.agent_id == agent_id => Ok((job, true)),
                _ if recurring >= cap => Err(CronError::TooManyRecurringJobs { limit: cap }),
                _ => Err(CronError::QuotaExceeded { limit: quota }),
            };
        }
        self.add_recurring_in(agent_id, &schedule, &timezone, payload, idempotency_key).await
    }

    /// `agent_id`'s recurring jobs, soonest first, at most `limit`.
    pub async fn recurring_jobs_of(&self, agent_id: AgentId, limit: usize) -> Result<Vec<CronJob>, CronError> {
        self.blocking(move |scheduler| Ok(scheduler.inner.store.recurring_jobs_of(&agent_id, limit)?)).await
    }

    /// Deletes job `job_id` if it is `agent_id`'s: a one-time job only while still pending, a recurring job at
    /// any time (a fire of it already claimed may still be published, as after an operator's delete). `false`
    /// for a job that is another agent's, gone (fired, cancelled), or a reminder being fired right now (claimed
    /// under a live lease; its reminder is on its way).
    pub async fn cancel_reminder(&self, agent_id: AgentId, job_id: i64) -> Result<bool, CronError> {
        let now = self.inner.clock.now();
        let log_agent = agent_id.clone();
        let cancelled = self
            .blocking(move |scheduler| {
                let _writing = scheduler.inner.writes.take();
                let store = &scheduler.inner.store;
                Ok(store.delete_one_time_job(job_id, &agent_id, now)?
                    || store.delete_recurring_job(job_id, &agent_id)?)
            })
            .await?;
        if cancelled {
            info!(agent_id = %log_agent, job_id, "reminder cancelled");
        }
        Ok(cancelled)
    }

    /// [`CronError::QuotaExceeded`] when storing `bytes` more for `agent_id` would take it past its quota: what a
    /// tool that records an answer without scheduling anything (`cancel_reminder`) checks first.
    pub async fn check_quota(&self, agent_id: AgentId, bytes: u64) -> Result<(), CronError> {
        let quota = self.inner.config.agent_storage_quota_bytes;
        let stored =
            self.blocking(move |scheduler| Ok(scheduler.inner.storage.agent_storage_bytes(&agent_id)?)).await?;
        if stored.saturating_add(bytes) > quota {
            return Err(CronError::QuotaExceeded { limit: quota });
        }
        Ok(())
    }

    /// `agent_id`'s pending one-time jobs, soonest first, at most `limit`.
    pub async fn pending_reminders(&self, agent_id: AgentId, limit: usize) -> Result<Vec<CronJob>, CronError> {
        self.blocking(move |scheduler| Ok(scheduler.inner.store.one_time_jobs_of(&agent_id, limit)?)).await
    }
}

/// The intake's way to the scheduler: a DecisionLog's reminder goes through the same function as a tool call's.
impl ReminderDesk for CronScheduler {
    fn schedule(&self, request: ReminderRequest) -> BoxFuture<'_, Result<ScheduledReminder, ReminderRefusal>> {
        Box::pin(self.schedule_reminder(request))
    }
}

/// The scheduler's errors on the reminder path: a delay it refused, or the store.
fn refusal(error: CronError) -> ReminderRefusal {
    match error {
        CronError::Store(error) => ReminderRefusal::Store(error),
        CronError::InvalidDelay(delay) => ReminderRefusal::InvalidDelay(u64::try_from(delay).unwrap_or(0)),
        other => ReminderRefusal::Store(StoreError::Internal(other.to_string())),
    }
}

/// The length of `payload` serialized as JSON, counted without building the text.
pub(crate) fn json_len(payload: &Map<String, Value>) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing a map of JSON values cannot fail, and counting never does.
    let _ = serde_json::to_writer(&mut counter, payload);
    counter.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_payload_is_measured_as_its_compact_json() {
        let payload = json!({"task": "check_quota", "n": [1, 2], "s": "é\""}).as_object().cloned().unwrap();
        assert_eq!(json_len(&payload), serde_json::to_vec(&payload).unwrap().len());
        assert_eq!(json_len(&Map::new()), 2);
    }
}
