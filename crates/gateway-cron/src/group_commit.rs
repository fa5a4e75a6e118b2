//! Group commit of one-time job inserts.
//!
//! Each `schedule_once` must have its row committed before it returns (the row is the durability promise).
//! One commit per row makes SQLite rewrite the same table, index and sequence pages for every job, which
//! caps a single writer far below the target rate. So concurrent callers share commits: each queues its
//! job; whoever finds the commit slot free takes everything queued and writes it in one store call, while
//! the others wait for their result. No thread of its own: the callers (already on blocking threads) do the
//! work, and one caller alone simply commits its own job.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, PoisonError, TryLockError};

use gateway_core::memory::lock;
use gateway_core::{CronJob, CronJobStore, NewCronJob, StoreError};

/// Most jobs written in one store call; bounds a transaction's length (and how long the write lock is held).
pub(crate) const MAX_GROUP: usize = 1_024;
/// Most yields a group's writer spends waiting for more callers to queue.
const LINGER_YIELDS: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<Pending>,
    /// Signalled whenever a group's results are in.
    finished: Condvar,
    /// Held by the caller that is writing a group.
    slot: Mutex<()>,
}

#[derive(Debug, Default)]
struct Pending {
    next_ticket: u64,
    queued: Vec<(u64, NewCronJob)>,
    results: HashMap<u64, Result<CronJob, StoreError>>,
}

impl GroupCommit {
    /// Writes `job`, possibly together with other callers' jobs, and returns it as stored.
    /// `writes` is held around the store call (see [`crate::scheduler`]'s write gate).
    pub(crate) fn insert(
        &self,
        store: &dyn CronJobStore,
        writes: &Mutex<()>,
        job: NewCronJob,
    ) -> Result<CronJob, StoreError> {
        let ticket = {
            let mut pending = lock(&self.state);
            let ticket = pending.next_ticket;
            pending.next_ticket = pending.next_ticket.wrapping_add(1);
            pending.queued.push((ticket, job));
            ticket
        };
        loop {
            let slot = match self.slot.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(slot) = slot {
                self.write_group(store, writes);
                drop(slot);
                // Taking the state lock once the slot is free orders this wake-up after the check of every
                // waiter that saw the slot busy (they hold the state lock from that check until they wait).
                drop(lock(&self.state));
                self.finished.notify_all();
            }
            let mut pending = lock(&self.state);
            loop {
                if let Some(result) = pending.results.remove(&ticket) {
                    return result;
                }
                // Still queued and nobody writing: go and take the slot.
                if pending.queued.iter().any(|(queued, _)| *queued == ticket) && !self.writing() {
                    break;
                }
                pending = self.finished.wait(pending).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Lets callers that are about to queue do so before the group is taken: yielding costs nothing when no
    /// other thread is runnable, and under load it turns many one-job commits into one commit of many jobs.
    fn linger(&self) {
        let mut queued = lock(&self.state).queued.len();
        for _ in 0..LINGER_YIELDS {
            std::thread::yield_now();
            let now = lock(&self.state).queued.len();
            if now == queued || now >= MAX_GROUP {
                break;
            }
            queued = now;
        }
    }

    fn writing(&self) -> bool {
        matches!(self.slot.try_lock(), Err(TryLockError::WouldBlock))
    }

    /// Takes up to [`MAX_GROUP`] queued jobs, writes them in one store call and files the results. Called
    /// with the slot held; the caller wakes the waiters after releasing it.
    fn write_group(&self, store: &dyn CronJobStore, writes: &Mutex<()>) {
        self.linger();
        let group: Vec<(u64, NewCronJob)> = {
            let mut pending = lock(&self.state);
            let take = pending.queued.len().min(MAX_GROUP);
            pending.queued.drain(..take).collect()
        };
        if group.is_empty() {
            return;
        }
        let (tickets, jobs): (Vec<u64>, Vec<NewCronJob>) = group.into_iter().unzip();
        // Other callers wait for these tickets: even a panicking store must not leave them waiting forever.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _writing = lock(writes);
            store.insert_cron_jobs(&jobs)
        }))
        .unwrap_or_else(|_| Err(StoreError::Internal("inserting cron jobs panicked".to_owned())));
        let mut pending = lock(&self.state);
        match outcome {
            Ok(stored) if stored.len() == tickets.len() => {
                pending.results.extend(tickets.into_iter().zip(stored.into_iter().map(Ok)));
            }
            Ok(stored) => {
                let error = StoreError::Internal(format!(
                    "insert of {} cron jobs returned {} rows",
                    tickets.len(),
                    stored.len()
                ));
                pending.results.extend(tickets.into_iter().map(|ticket| (ticket, Err(error.clone()))));
            }
            Err(error) => {
                pending.results.extend(tickets.into_iter().map(|ticket| (ticket, Err(error.clone()))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gateway_core::{AgentId, InMemoryCronJobStore};
    use serde_json::Map;
    use time::macros::datetime;

    use super::*;

    fn job(n: i64) -> NewCronJob {
        NewCronJob {
            agent_id: AgentId::new(format!("agent-{n}")).unwrap(),
            schedule: None,
            next_fire_at: datetime!(2026-02-22 12:00:00 UTC) + time::Duration::milliseconds(n),
            payload: Map::new(),
            is_one_time: true,
        }
    }

    #[test]
    fn concurrent_callers_each_get_their_own_row() {
        let store = Arc::new(InMemoryCronJobStore::default());
        let group = Arc::new(GroupCommit::default());
        let threads: Vec<_> = (0..8)
            .map(|thread| {
                let (store, group) = (Arc::clone(&store), Arc::clone(&group));
                std::thread::spawn(move || {
                    (0..200)
                        .map(|n| {
                            let wanted = job(thread * 1_000 + n);
                            let stored = group.insert(store.as_ref(), &Mutex::new(()), wanted.clone()).unwrap();
                            assert_eq!((stored.agent_id, stored.next_fire_at), (wanted.agent_id, wanted.next_fire_at));
                            stored.id
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<i64> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 1_600);
        assert_eq!(store.len(), 1_600);
        let pending = lock(&group.state);
        assert!(pending.queued.is_empty() && pending.results.is_empty(), "nothing left behind");
    }

    /// A store whose insert panics, as a buggy adapter might.
    #[derive(Debug, Default)]
    struct PanickingStore(InMemoryCronJobStore);

    impl CronJobStore for PanickingStore {
        fn insert_cron_job(&self, _job: &NewCronJob) -> Result<CronJob, StoreError> {
            panic!("adapter bug")
        }
        fn cron_job(&self, id: i64) -> Result<Option<CronJob>, StoreError> {
            self.0.cron_job(id)
        }
        fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, StoreError> {
            self.0.list_cron_jobs(after_id, limit)
        }
        fn delete_cron_job(&self, id: i64) -> Result<bool, StoreError> {
            self.0.delete_cron_job(id)
        }
        fn pending_fires(
            &self,
            before: time::OffsetDateTime,
            limit: usize,
        ) -> Result<Vec<gateway_core::PendingFire>, StoreError> {
            self.0.pending_fires(before, limit)
        }
        fn claim_fires(&self, job_ids: &[i64], lease: &gateway_core::ClaimLease) -> Result<Vec<CronJob>, StoreError> {
            self.0.claim_fires(job_ids, lease)
        }
        fn complete_fires(
            &self,
            owner: &str,
            completions: &[gateway_core::FireCompletion],
        ) -> Result<usize, StoreError> {
            self.0.complete_fires(owner, completions)
        }
    }

    #[test]
    fn a_panicking_store_fails_the_callers_instead_of_leaving_them_waiting() {
        let store = PanickingStore::default();
        let group = GroupCommit::default();
        let writes = Mutex::new(());
        assert!(matches!(group.insert(&store, &writes, job(1)), Err(StoreError::Internal(_))));
        assert!(matches!(group.insert(&store, &writes, job(2)), Err(StoreError::Internal(_))));
        assert!(lock(&group.state).results.is_empty());
    }

    #[test]
    fn a_failed_group_fails_each_caller_and_the_next_one_works() {
        let store = InMemoryCronJobStore::default();
        let group = GroupCommit::default();
        store.failure.set_failing(true);
        assert!(matches!(group.insert(&store, &Mutex::new(()), job(1)), Err(StoreError::Unavailable(_))));
        store.failure.set_failing(false);
        assert_eq!(group.insert(&store, &Mutex::new(()), job(2)).unwrap().id, 1);
        assert!(lock(&group.state).results.is_empty());
    }
}
