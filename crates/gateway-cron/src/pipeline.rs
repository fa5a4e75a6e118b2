//! Insert groups that overlap: the next group's statement runs while the previous group's commit waits for its
//! flush.
//!
//! On PostgreSQL each insert group's commit waits for its WAL to reach the disk, and with one group in flight
//! the server idles through that wait and the callers queued behind it wait twice (docs/benchmarks.md, s31-c: a
//! run's µs a job follow the disk's flush latency). Two groups in flight as two independent writers halve the
//! groups (s27-c: twice the commits, slower). Here the groups still form one at a time, and only a group's
//! statement is exclusive: the writer that holds the statement turn takes everything queued, runs the statement,
//! hands the turn on, and only then waits for its commit. So the next group forms while a statement runs and
//! starts as soon as it ends; PostgreSQL flushes WAL in order, so its commit rides on the same flush or the next.
//! Each caller is still answered only after its own group's commit returned.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex};

use gateway_core::runtime::sync::lock;
use gateway_core::{CronJobInsert, CronJobStore, NewCronJob, StoreError};
use tokio::sync::oneshot;

type Reply = oneshot::Sender<Result<CronJobInsert, StoreError>>;

#[derive(Debug)]
struct State {
    queued: Vec<(NewCronJob, Reply)>,
    /// No writer is between taking a group and its statement's end.
    turn_free: bool,
    /// Writer threads started (they stay, parked, until the pipeline is dropped).
    writers: usize,
    /// Writers parked, waiting for the turn and something queued.
    idle: usize,
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    store: Arc<dyn CronJobStore>,
    max_group: usize,
    depth: usize,
    state: Mutex<State>,
    wake: Condvar,
}

/// Up to `depth` groups in flight, their statements one after the other (see the module's documentation).
#[derive(Debug)]
pub(crate) struct InsertPipeline {
    shared: Arc<Shared>,
}

impl Drop for InsertPipeline {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.wake.notify_all();
    }
}

impl InsertPipeline {
    pub(crate) fn new(store: Arc<dyn CronJobStore>, max_group: usize, depth: usize) -> Self {
        let state = State { queued: Vec::new(), turn_free: true, writers: 0, idle: 0, closed: false };
        Self {
            shared: Arc::new(Shared {
                store,
                max_group: max_group.max(1),
                depth: depth.max(1),
                state: Mutex::new(state),
                wake: Condvar::new(),
            }),
        }
    }

    pub(crate) async fn submit(&self, job: NewCronJob) -> Result<CronJobInsert, StoreError> {
        let (reply, result) = oneshot::channel();
        let start_writer = {
            let mut state = lock(&self.shared.state);
            state.queued.push((job, reply));
            // A parked writer is woken only when it could take the group now; otherwise the writer that hands the
            // turn on wakes one.
            let start = state.turn_free && state.idle == 0 && state.writers < self.shared.depth;
            if start {
                state.writers += 1;
            } else if state.turn_free && state.idle > 0 {
                self.shared.wake.notify_one();
            }
            start
        };
        if start_writer {
            spawn_writer(Arc::clone(&self.shared));
        }
        result.await.unwrap_or_else(|_| Err(StoreError::Internal("the insert writer stopped".to_owned())))
    }
}

impl Shared {
    fn write(self: Arc<Self>) {
        loop {
            let (jobs, replies): (Vec<NewCronJob>, Vec<Reply>) = {
                let mut state = lock(&self.state);
                loop {
                    if state.turn_free && !state.queued.is_empty() {
                        break;
                    }
                    if state.closed && state.queued.is_empty() {
                        state.writers -= 1;
                        return;
                    }
                    state.idle += 1;
                    state = self.wake.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
                    state.idle -= 1;
                }
                state.turn_free = false;
                let take = state.queued.len().min(self.max_group);
                state.queued.drain(..take).unzip()
            };
            let count = jobs.len();
            let mut handed_on = false;
            let mut hand_on = || {
                if !std::mem::replace(&mut handed_on, true) {
                    self.hand_on();
                }
            };
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.store.insert_cron_jobs_overlapping(&jobs, &mut hand_on)
            }))
            .unwrap_or_else(|_| Err(StoreError::Internal("a grouped store write panicked".to_owned())));
            // A write that failed (or panicked) before its statement's end hands the turn on here.
            hand_on();
            let results: Vec<Result<CronJobInsert, StoreError>> = match outcome {
                Ok(results) if results.len() == count => results.into_iter().map(Ok).collect(),
                Ok(results) => {
                    let error = StoreError::Internal(format!(
                        "a grouped write of {count} items returned {} results",
                        results.len()
                    ));
                    (0..count).map(|_| Err(error.clone())).collect()
                }
                Err(error) => (0..count).map(|_| Err(error.clone())).collect(),
            };
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
    }

    /// The statement turn passes on: to a parked writer if anything is queued, else to the next caller's writer.
    fn hand_on(self: &Arc<Self>) {
        let start = {
            let mut state = lock(&self.state);
            state.turn_free = true;
            if state.queued.is_empty() {
                false
            } else if state.idle > 0 {
                self.wake.notify_one();
                false
            } else if state.writers < self.depth {
                state.writers += 1;
                true
            } else {
                false
            }
        };
        if start {
            spawn_writer(Arc::clone(self));
        }
    }
}

/// Starts a writer thread, counted in `writers` by the caller. Without a thread the queued callers are failed
/// if no writer runs at all (one that runs takes them).
fn spawn_writer(shared: Arc<Shared>) {
    let writer = Arc::clone(&shared);
    if std::thread::Builder::new().name("cron-insert-group".to_owned()).spawn(move || writer.write()).is_err() {
        let mut state = lock(&shared.state);
        state.writers -= 1;
        if state.writers == 0 {
            for (_, reply) in state.queued.drain(..) {
                let _ = reply.send(Err(StoreError::Internal("no insert writer could be started".to_owned())));
            }
        }
    }
}
