//! The loop that fires jobs: it keeps the fires due soon in a bounded window, claims each instant in the
//! database (a little ahead of time), publishes its `reminder` at the instant, and completes the row after.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use gateway_core::runtime::sync::lock;
use gateway_core::{
    BackgroundLoop, ClaimLease, CronJob, FencingToken, FireCompletion, FireKey, FiredReminder, PendingFire, RunOutcome,
    SkippedRun, StoreError, Topic, run_blocking,
};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::jobs::fire_id;
use crate::misfire::{self, Verdict};
use crate::schedule::CronSchedule;
use crate::scheduler::{CronConfig, CronScheduler, Inner, duration};

/// Store work running on the blocking pool while the loop goes on: the loop is woken when it lands, and takes
/// the outcome in its next cycle.
#[derive(Debug)]
struct InFlight<T> {
    landed: Arc<Mutex<Option<Result<T, StoreError>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Send + 'static> InFlight<T> {
    fn start(inner: &Arc<Inner>, work: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static) -> Self {
        let landed = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let inner = Arc::clone(inner);
            let landed = Arc::clone(&landed);
            async move {
                let worker = Arc::clone(&inner);
                let outcome = run_blocking(move || work(&worker)).await;
                *lock(&landed) = Some(outcome.unwrap_or_else(|failed| Err(StoreError::from(failed))));
                inner.wake.notify_one();
            }
        });
        Self { landed, task }
    }

    /// The outcome, once it has landed.
    fn take(&self) -> Option<Result<T, StoreError>> {
        lock(&self.landed).take()
    }
}

/// A window reload: a reload of thousands of rows takes milliseconds, and fires due meanwhile must not wait
/// for it.
#[derive(Debug)]
struct Refill {
    started: OffsetDateTime,
    before: OffsetDateTime,
    limit: usize,
    rows: InFlight<Vec<PendingFire>>,
}

/// One store transaction: the completions of published fires and their mailbox records, then the claims of the
/// fires due within the claim-ahead margin. At most one at a time.
#[derive(Debug)]
struct Write {
    completions: Vec<FireCompletion>,
    /// The jobs this write claims.
    claiming: Vec<i64>,
    /// When the claims this write makes run out.
    expires_at: OffsetDateTime,
    /// Rows completed, and the jobs claimed.
    outcome: InFlight<(usize, Vec<CronJob>)>,
}

/// A fire this scheduler has claimed and not yet published.
#[derive(Debug)]
struct Claimed {
    job: CronJob,
    expires_at: OffsetDateTime,
}

/// What the loop carries from one cycle to the next.
#[derive(Debug, Default)]
struct LoopState {
    refill: Option<Refill>,
    write: Option<Write>,
    /// Claimed fires by `(scheduled_for, job_id)`, published when their instant comes.
    claimed: BTreeMap<(OffsetDateTime, i64), Claimed>,
    /// Completions of published fires, written by the next write.
    deferred: Vec<FireCompletion>,
    /// What those fires published, recorded in their agents' mailboxes by the same write.
    fired: Vec<FiredReminder>,
    /// The instants those fires did not publish (misfires skipped, reminders too late), recorded by the same write.
    skipped: Vec<SkippedRun>,
    /// The leadership term of the last cycle, which completions left over on the way out are written under.
    term: Option<FencingToken>,
}

impl LoopState {
    /// The jobs this loop is firing: claimed (or being claimed) and not yet completed.
    fn held(&self) -> HashSet<i64> {
        let claimed = self.claimed.values().map(|held| held.job.id);
        let published = self.deferred.iter().map(|completion| completion.fire().job_id);
        let writing = self.write.iter().flat_map(|write| {
            write.claiming.iter().copied().chain(write.completions.iter().map(|completion| completion.fire().job_id))
        });
        claimed.chain(published).chain(writing).collect()
    }
}

/// What the loop does after a cycle.
enum Next {
    Immediately,
    At(OffsetDateTime),
}

impl BackgroundLoop for CronScheduler {
    fn name(&self) -> &'static str {
        "cron_scheduler"
    }

    /// Fires jobs until `shutdown`. Never returns early: store errors are logged, backed off (capped) and
    /// reported through [`Self::health`]; fires happen only while leadership says so.
    async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        let _running = inner.health.start();
        info!(claimer = %inner.owner, "cron scheduler started");
        // A run that follows one that died (a panic, restarted by a supervisor) starts from the store: what the
        // window held may have been popped and claimed by the lost loop state. Those claims expire by their
        // lease and are fired again with the same fire_id.
        lock(&inner.window).reset();
        let mut failures: u32 = 0;
        let mut state = LoopState::default();
        loop {
            // `false`: sleep without listening to wake-ups (backing off, or not leader).
            let (pause, wakeable) = match inner.leadership.current() {
                None => {
                    self.step_down(&mut state).await;
                    (inner.config.leadership_poll, false)
                }
                Some(token) => match self.cycle(token, &mut state) {
                    Ok((next, reached_store)) => {
                        // A cycle that only started a reload or a write has not shown the store is back.
                        if reached_store {
                            if failures > 0 {
                                info!(failures, "cron scheduler reaches the store again");
                                inner.health.recovered();
                            }
                            failures = 0;
                        }
                        match next {
                            Next::Immediately => (std::time::Duration::ZERO, true),
                            Next::At(at) => (until(inner.clock.now(), at), true),
                        }
                    }
                    Err(store_error) if store_error.is_fenced() => {
                        // A newer leader wrote to the store: this process leads no more, whatever its lease says.
                        warn!(error = %store_error, "cron scheduler fenced by a newer leader; stepping down");
                        inner.leadership.fenced(token);
                        self.step_down(&mut state).await;
                        (inner.config.leadership_poll, false)
                    }
                    Err(store_error) => {
                        failures = failures.saturating_add(1);
                        let delay = backoff(&inner.config, failures);
                        warn!(error = %store_error, failures, retry_in_ms = delay.as_millis(),
                            "cron dispatch failed; backing off");
                        inner.health.degraded(format!("cannot reach the cron store: {store_error}"));
                        lock(&inner.window).mark_stale();
                        if let Some(abandoned) = state.refill.take() {
                            abandoned.rows.task.abort();
                        }
                        (delay, false)
                    }
                },
            };
            let fired = inner.published.load(Ordering::Relaxed);
            let (reloading, writing) = (state.refill.is_some(), state.write.is_some());
            inner.progress.send_modify(|progress| {
                progress.cycles += 1;
                progress.fired = fired;
                progress.failures = failures;
                progress.reloading = reloading;
                progress.writing = writing;
            });
            if pause.is_zero() {
                tokio::task::yield_now().await;
                if shutdown.is_cancelled() {
                    break;
                }
                continue;
            }
            let woken = async {
                if wakeable {
                    inner.wake.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = woken => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        if let Some(abandoned) = state.refill.take() {
            abandoned.rows.task.abort();
        }
        self.finish(&mut state).await;
        info!("cron scheduler stopped");
    }
}

impl CronScheduler {
    /// One pass: take in a landed reload or write, start a reload if needed, publish the claimed fires that are
    /// due, start the next write (completions of what was published, claims of what is due within the
    /// claim-ahead margin), and say when to look again. Never waits for the store: reloads and writes run on
    /// the blocking pool and wake the loop when they land, so a slow commit delays no fire that is already
    /// claimed. Also says whether the store answered in this cycle.
    fn cycle(&self, token: FencingToken, state: &mut LoopState) -> Result<(Next, bool), StoreError> {
        let inner = &self.inner;
        if state.term.is_some_and(|term| term != token) {
            // A new term without a step-down seen in between: what the window knows was judged for the old one.
            lock(&inner.window).reset();
        }
        state.term = Some(token);
        let mut reached_store = false;
        if let Some(in_flight) = state.refill.take() {
            let outcome = in_flight.rows.take();
            match outcome {
                Some(rows) => {
                    let rows = rows?;
                    reached_store = true;
                    debug!(rows = rows.len(), "cron window reloaded");
                    let interval = duration(inner.config.refill_interval);
                    let held = state.held();
                    let mut window = lock(&inner.window);
                    window.refill(in_flight.started, in_flight.before, &rows, in_flight.limit, interval, &held, token);
                }
                None => state.refill = Some(in_flight),
            }
        }
        if let Some(in_flight) = state.write.take() {
            let outcome = in_flight.outcome.take();
            match outcome {
                Some(outcome) => {
                    self.landed(in_flight, outcome, state)?;
                    reached_store = true;
                }
                None => state.write = Some(in_flight),
            }
        }
        let now = inner.clock.now();
        if state.refill.is_none() && lock(&inner.window).needs_refill(now) {
            state.refill = Some(self.start_refill(now));
        }
        self.publish_due(state);
        if state.write.is_none() {
            let now = inner.clock.now();
            let due = lock(&inner.window).pop_due(now, inner.config.batch_size.max(1));
            if !due.is_empty() || !state.deferred.is_empty() {
                let completions = std::mem::take(&mut state.deferred);
                let fired = std::mem::take(&mut state.fired);
                let skipped = std::mem::take(&mut state.skipped);
                state.write = Some(self.start_write(token, completions, (fired, skipped), due, now));
            }
        }
        let now = inner.clock.now();
        let window = lock(&inner.window);
        if state.refill.is_none() && window.needs_refill(now) {
            return Ok((Next::Immediately, reached_store));
        }
        // A write or reload in flight wakes the loop when it lands; until then the window's entries cannot be
        // claimed (one write at a time) or may be incomplete (reload), so only what is held counts.
        let window_wake = match (&state.write, &state.refill) {
            (Some(_), _) => None,
            (None, Some(_)) => window.first_claimable_at(),
            (None, None) => Some(window.next_wake(now)),
        };
        let claimed_wake = state.claimed.first_key_value().map(|((at, _), _)| *at);
        let idle_until = now + duration(inner.config.lookahead);
        let wake = [window_wake, claimed_wake].into_iter().flatten().fold(idle_until, OffsetDateTime::min);
        Ok((Next::At(wake), reached_store))
    }

    fn start_refill(&self, now: OffsetDateTime) -> Refill {
        let before = now + duration(self.inner.config.lookahead);
        let limit = self.inner.config.window_capacity.max(1);
        lock(&self.inner.window).reload_started();
        let rows = InFlight::start(&self.inner, move |inner| inner.store.pending_fires(before, limit));
        Refill { started: now, before, limit, rows }
    }

    /// Starts one transaction that writes `completions` (fires already published) with the mailbox records of
    /// those fires (`fired`, and the runs they skipped) and claims `due` (fires due by `now` plus the claim-ahead
    /// margin).
    fn start_write(
        &self,
        token: FencingToken,
        completions: Vec<FireCompletion>,
        (fired, skipped): (Vec<FiredReminder>, Vec<SkippedRun>),
        due: Vec<i64>,
        now: OffsetDateTime,
    ) -> Write {
        let claiming = due.clone();
        let config = &self.inner.config;
        let lease = ClaimLease {
            owner: self.inner.owner.clone(),
            token,
            now,
            due_by: now + duration(config.claim_ahead),
            expires_at: now + duration(config.claim_lease),
        };
        let expires_at = lease.expires_at;
        let writing = completions.clone();
        let outcome = InFlight::start(&self.inner, move |inner| {
            let _writing = inner.writes.take();
            // Skipped runs are rare (a misfire, a late reminder) and written on their own, before the completion
            // that settles their row: the usual write stays one transaction.
            if !skipped.is_empty() {
                inner.store.record_skipped_runs(lease.token, &skipped)?;
            }
            inner.store.complete_and_claim(&inner.owner, &writing, &fired, &due, &lease)
        });
        Write { completions, claiming, expires_at, outcome }
    }

    /// Applies a landed write: its completions are settled (advanced rows go back into the window) and its
    /// claims join the fires held for publishing. Published fires count as fired once their completion has
    /// landed, written or not; if it was not, the rows fire again once their claims expire, with the same
    /// fire_id.
    fn landed(
        &self,
        write: Write,
        outcome: Result<(usize, Vec<CronJob>), StoreError>,
        state: &mut LoopState,
    ) -> Result<(), StoreError> {
        self.inner.published.fetch_add(u64::try_from(write.completions.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let (completed, claimed) = outcome?;
        self.completed(write.completions, completed);
        for job in claimed {
            state.claimed.insert((job.next_fire_at, job.id), Claimed { job, expires_at: write.expires_at });
        }
        Ok(())
    }

    /// Publishes a reminder per held fire whose instant has come; their completions wait for the next write.
    fn publish_due(&self, state: &mut LoopState) {
        let inner = &self.inner;
        loop {
            let now = inner.clock.now();
            let Some(entry) = state.claimed.first_entry() else { return };
            if entry.key().0 > now {
                return;
            }
            let Claimed { job, expires_at } = entry.remove();
            let fire = FireKey { job_id: job.id, scheduled_for: job.next_fire_at };
            if now >= expires_at {
                // Someone else may hold this instant by now; publishing could make it a double fire.
                let fire_id = fire_id(job.id, job.next_fire_at);
                warn!(job_id = job.id, fire_id, "claim lease ran out before publishing; the fire is claimed again");
                continue;
            }
            let (completion, verdict) = completion(&job, now);
            let fired_at = whole_milliseconds(now);
            let skipped: Vec<SkippedRun> = verdict
                .skip
                .iter()
                .map(|(at, outcome)| SkippedRun {
                    fire_id: fire_id(job.id, *at),
                    job_id: job.id,
                    agent_id: job.agent_id.clone(),
                    scheduled_for: *at,
                    skipped_at: fired_at,
                    outcome: *outcome,
                })
                .collect();
            if verdict.fire.len() > 1 || !skipped.is_empty() {
                info!(
                    job_id = job.id,
                    fired = verdict.fire.len(),
                    skipped = skipped.len(),
                    policy = job.misfire_policy.as_str(),
                    "the job missed instants; its misfire policy decides"
                );
            }
            let topic = Topic::AgentScheduled(job.agent_id.clone());
            // The payload moves into the last fire: one copy fewer, and none for the usual single fire.
            let mut payload = Some(job.payload);
            let count = verdict.fire.len();
            // The term whose claim these fires are (a new term drops the claims of the old one: `step_down`).
            let epoch = state.term.map_or(0, |FencingToken(term)| term);
            let reminders: Vec<FiredReminder> = verdict
                .fire
                .iter()
                .enumerate()
                .map(|(index, at)| FiredReminder {
                    fire_id: fire_id(job.id, *at),
                    job_id: job.id,
                    agent_id: job.agent_id.clone(),
                    payload: if index + 1 == count { payload.take() } else { payload.clone() }.unwrap_or_default(),
                    scheduled_for: *at,
                    fired_at,
                    epoch,
                })
                .collect();
            let unpublished = reminders.iter().find_map(|reminder| {
                inner.publisher.publish(&topic, &reminder.event()).err().map(|error| (reminder, error))
            });
            if let Some((reminder, publish_error)) = unpublished {
                warn!(job_id = fire.job_id, fire_id = reminder.fire_id.as_str(), error = %publish_error,
                    "reminder not published; it fires again when its claim lease ends");
                lock(&inner.window).push(PendingFire {
                    job_id: fire.job_id,
                    scheduled_for: fire.scheduled_for,
                    claimed_until: Some(expires_at),
                    claim_token: state.term,
                });
                continue;
            }
            for reminder in &reminders {
                debug!(job_id = fire.job_id, fire_id = reminder.fire_id.as_str(), %topic, "reminder fired");
                inner.stats.fired.increment();
                let lateness = until(reminder.scheduled_for, now);
                inner.stats.lateness.observe(lateness);
                inner.stats.lateness_peak_ms.raise(u64::try_from(lateness.as_millis()).unwrap_or(u64::MAX));
            }
            for run in &skipped {
                match run.outcome {
                    RunOutcome::SkippedLate => inner.stats.skipped_late.increment(),
                    _ => inner.stats.skipped_misfire.increment(),
                }
            }
            state.deferred.push(completion);
            state.fired.extend(reminders);
            state.skipped.extend(skipped);
        }
    }

    /// Another instance owns the timed work now: what this one claimed is left to its lease (or to the new term,
    /// which takes it over at once), its published fires are completed if the store still takes this term's
    /// writes, and the window starts again from the store when this process leads again.
    async fn step_down(&self, state: &mut LoopState) {
        self.settle_write(state).await;
        state.claimed.clear();
        self.flush(state).await;
        state.term = None;
        lock(&self.inner.window).reset();
        if let Some(abandoned) = state.refill.take() {
            abandoned.rows.task.abort();
        }
    }

    /// Waits for the write in flight, if any, and applies it.
    async fn settle_write(&self, state: &mut LoopState) {
        let Some(mut in_flight) = state.write.take() else { return };
        // The task fills `landed` before it ends; one that panicked leaves it empty.
        let _ = (&mut in_flight.outcome.task).await;
        let outcome = in_flight.outcome.take();
        let settled = match outcome {
            Some(outcome) => self.landed(in_flight, outcome, state),
            None => Err(StoreError::Unavailable("the cron write task ended without an outcome".to_owned())),
        };
        if let Err(store_error) = settled {
            warn!(error = %store_error, "cron write failed; its fires repeat after their claims expire");
        }
    }

    /// On the way out: the write in flight lands, fires already claimed (due within the claim-ahead margin)
    /// are published on time rather than left to wait for their lease after a restart, and completions are
    /// written.
    async fn finish(&self, state: &mut LoopState) {
        self.settle_write(state).await;
        if let Some(((last, _), _)) = state.claimed.last_key_value() {
            let wait = until(self.inner.clock.now(), *last).min(self.inner.config.claim_ahead);
            tokio::time::sleep(wait).await;
            self.publish_due(state);
        }
        self.flush(state).await;
    }

    /// Writes completions (and the mailbox records of their fires) on their own, under `token`, waiting for them.
    async fn complete(
        &self,
        token: FencingToken,
        completions: Vec<FireCompletion>,
        (fired, skipped): (Vec<FiredReminder>, Vec<SkippedRun>),
    ) -> Result<(), StoreError> {
        let count = u64::try_from(completions.len()).unwrap_or(u64::MAX);
        let writer = Arc::clone(&self.inner);
        let written = run_blocking(move || {
            let _writing = writer.writes.take();
            if !skipped.is_empty() {
                writer.store.record_skipped_runs(token, &skipped)?;
            }
            writer.store.complete_fires(&writer.owner, token, &completions, &fired).map(|count| (count, completions))
        })
        .await;
        self.inner.published.fetch_add(count, Ordering::Relaxed);
        let (completed, completions) = written??;
        self.completed(completions, completed);
        Ok(())
    }

    /// Best effort on the way out (shutdown, leadership lost): a completion not written now only means a refire
    /// with the same fire_id after the claim expires.
    async fn flush(&self, state: &mut LoopState) {
        let Some(term) = state.term else { return };
        if state.deferred.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut state.deferred);
        let fired = std::mem::take(&mut state.fired);
        let skipped = std::mem::take(&mut state.skipped);
        let count = pending.len();
        if let Err(store_error) = self.complete(term, pending, (fired, skipped)).await {
            warn!(error = %store_error, count, "completions not written; those fires repeat after their claims expire");
        }
    }

    /// After completions were written: advanced rows go back into the window.
    fn completed(&self, completions: Vec<FireCompletion>, written: usize) {
        if written < completions.len() {
            debug!(written, attempted = completions.len(), "some fires were deleted or taken over meanwhile");
        }
        let mut window = lock(&self.inner.window);
        for completion in completions {
            if let FireCompletion::Advance { fire, next_fire_at } = completion {
                window.push(PendingFire::unclaimed(fire.job_id, next_fire_at));
            }
        }
    }
}

/// `instant` truncated to whole milliseconds, the precision instants are written with (and within both databases'
/// microseconds): the mailbox keeps a fire's `fired_at` exactly as its live event carried it, so a replayed event
/// is the same event.
fn whole_milliseconds(instant: OffsetDateTime) -> OffsetDateTime {
    instant.replace_nanosecond(instant.nanosecond() / 1_000_000 * 1_000_000).unwrap_or(instant)
}

/// What a fire of `job` at `now` leaves behind — no row (one-time) or the row at its next instant after now — and
/// what it publishes ([`misfire`]: its instant, or what its policy says about the instants it missed).
fn completion(job: &CronJob, now: OffsetDateTime) -> (FireCompletion, Verdict) {
    let fire = FireKey { job_id: job.id, scheduled_for: job.next_fire_at };
    if job.is_one_time {
        return (FireCompletion::Delete(fire), misfire::one_time(job, now));
    }
    match job.schedule.as_deref().map(|schedule| CronSchedule::parse_in(schedule, &job.timezone)) {
        Some(Ok(schedule)) => {
            let verdict = misfire::recurring(job, now, |after| schedule.next_after(after));
            // Strictly after now, not after the missed instant: the missed instants are settled by the verdict.
            let completion = match schedule.next_after(now) {
                Some(next_fire_at) => FireCompletion::Advance { fire, next_fire_at },
                None => {
                    info!(job_id = job.id, "recurring job has no instant left; removing it");
                    FireCompletion::Delete(fire)
                }
            };
            (completion, verdict)
        }
        _ => {
            error!(
                job_id = job.id,
                "recurring job has no valid schedule or zone (edited outside the API?); removing it"
            );
            (FireCompletion::Delete(fire), misfire::one_time(job, now))
        }
    }
}

fn backoff(config: &CronConfig, failures: u32) -> std::time::Duration {
    gateway_core::capped_backoff(config.retry_initial, config.retry_max, failures)
}

/// The pause until `at`, zero if it has passed.
fn until(now: OffsetDateTime, at: OffsetDateTime) -> std::time::Duration {
    std::time::Duration::try_from(at - now).unwrap_or(std::time::Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{RETRY_INITIAL, RETRY_MAX};

    #[test]
    fn backoff_doubles_and_is_capped() {
        let config = CronConfig::default();
        let delays: Vec<_> = (1..=10).map(|failures| backoff(&config, failures)).collect();
        assert_eq!(delays[0], RETRY_INITIAL);
        assert_eq!(delays[1], RETRY_INITIAL * 2);
        assert_eq!(delays[2], RETRY_INITIAL * 4);
        assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(delays[9], RETRY_MAX);
        assert_eq!(backoff(&config, u32::MAX), RETRY_MAX);
    }
}
