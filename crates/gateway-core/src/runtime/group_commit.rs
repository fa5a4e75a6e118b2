//! Group commit: concurrent callers that each need their own write committed before they return share one
//! store call.
//!
//! One commit per row makes SQLite rewrite the same table and index pages for every row, which caps a single
//! writer far below what the endpoints can take. So each caller queues its item and awaits its result; one writer
//! takes everything queued (up to a bound) and writes it in one store call. The heartbeat upserts and the
//! scheduler's one-time job inserts use it. A 200 or 201 still means the caller's row is committed.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// Writes one group and gives each item its result. Other callers wait for these results: even a panicking
/// store, or one that answers with the wrong number of results, must not leave them waiting forever.
fn write_shared<T, R>(write: &GroupWrite<T, R>, items: Vec<T>, count: usize) -> Vec<Result<R, StoreError>> {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| write(items)))
        .unwrap_or_else(|_| Err(StoreError::Internal("a grouped store write panicked".to_owned())));
    match outcome {
        Ok(results) if results.len() == count => results.into_iter().map(Ok).collect(),
        Ok(results) => {
            let error =
                StoreError::Internal(format!("a grouped write of {count} items returned {} results", results.len()));
            (0..count).map(|_| Err(error.clone())).collect()
        }
        Err(error) => (0..count).map(|_| Err(error.clone())).collect(),
    }
}

/// Writes a group in one store call: one result per item, in order.
type GroupWrite<T, R> = dyn Fn(Vec<T>) -> Result<Vec<R>, StoreError> + Send + Sync;

/// Shares commits among concurrent async callers, who await their result.
///
/// A caller queues its item with a one-shot reply; the first caller that finds no writer running starts one on
/// the blocking pool, which writes groups while anything is queued and then stops. Items that arrive while a
/// group is being written form the next group. (Callers that each parked a blocking thread until their group was
/// written, woken all at once when it was, spent a third of the gateway's CPU switching threads at 64 concurrent
/// heartbeats: that is why callers await a reply instead.)
///
/// Under load, callers that each send their next item once answered split into two cohorts that take turns: the
/// one answered by a group comes back while the other is being written, and forms the next group but one. Each
/// group then carries half the callers and costs a whole commit (on PostgreSQL, with 32 callers: groups of 16,
/// measured by benches/ingest_table.rs). So after a group of several items the writer waits, a little, for the
/// callers it has just answered: until as many items are queued as the group it wrote plus those queued when it
/// finished, or for at most [`LINGER_SHARE`] of that group's write time (capped by [`MAX_LINGER`]). A lone caller
/// (groups of one) never waits for anyone. Only a group made [`lingering`](Self::lingering) waits: it pays where
/// every caller comes back at once and a commit is dear (heartbeats on PostgreSQL: 0.36 → 0.6 of SQLite), and it
/// cost the cron scheduler's insert groups 15–20 % on SQLite (their writer takes turns with the firing loop's
/// transaction, so waiting only delays it), measured side by side in one session.
pub struct GroupCommit<T, R> {
    max_group: usize,
    write: Arc<GroupWrite<T, R>>,
    state: Mutex<Pending<T, R>>,
    /// Signalled when a waiting writer's target is queued.
    arrived: Condvar,
    /// Signalled, for a writer on the runtime, when its target is queued.
    came_back: Notify,
    /// Whether the writer waits for the callers it answered (see above).
    linger: bool,
    /// Whether the writer is a task on the runtime that hands only the store call to a thread of its own
    /// ([`Self::replying_from_runtime`]).
    on_runtime: bool,
    /// That thread, started with the first group; `None` inside when it could not be started (the store calls then
    /// go to the blocking pool).
    store_thread: OnceLock<Option<StoreThread<T, R>>>,
}

/// A group on its way to the store thread, with where its results go.
type StoreCall<T, R> = (Vec<T>, oneshot::Sender<Vec<Result<R, StoreError>>>);

/// The one long-lived thread that makes a runtime-side writer's store calls, parked on its channel between groups.
///
/// Handed to tokio's blocking pool instead, each group went to whichever idle pool thread the pool woke (another one
/// group after group), through the pool's queue, lock and a task allocation. On SQLite that made no measurable
/// difference against this thread; PostgreSQL's and cluster mode's heartbeats ran faster with it in every pair
/// measured (docs/benchmarks.md, s30-h). The thread holds the write function, not the group, and stops when the
/// group (the channel's sender) is dropped.
struct StoreThread<T, R> {
    calls: mpsc::Sender<StoreCall<T, R>>,
}

impl<T: Send + 'static, R: Send + 'static> StoreThread<T, R> {
    fn start(write: Arc<GroupWrite<T, R>>) -> Option<Self> {
        let (calls, queue) = mpsc::channel::<StoreCall<T, R>>();
        let serve = move || {
            // `write_shared` catches a panicking store, so one bad group does not stop the thread.
            while let Ok((items, results)) = queue.recv() {
                let count = items.len();
                let _ = results.send(write_shared(&*write, items, count));
            }
        };
        std::thread::Builder::new().name("group-store-call".to_owned()).spawn(serve).ok().map(|_| Self { calls })
    }
}

/// How long, at most, a writer waits for callers to come back, as a share of the last group's write time.
pub const LINGER_SHARE: f64 = 1.0;
/// The longest wait, whatever the write time.
pub const MAX_LINGER: Duration = Duration::from_millis(1);

type Reply<R> = oneshot::Sender<Result<R, StoreError>>;

struct Pending<T, R> {
    queued: Vec<(T, Reply<R>)>,
    /// A writer is running on the blocking pool (and will look at `queued` again before it stops).
    writing: bool,
    /// A writer waits until this many items are queued.
    awaited: Option<usize>,
}

impl<T, R> Pending<T, R> {
    /// Starts a writer's wait for the callers it answered: it waits until as many items are queued as the group it
    /// wrote (`size`) plus those queued when it finished, at most a group.
    fn await_company(&mut self, size: usize, max_group: usize) -> usize {
        let target = (size + self.queued.len()).min(max_group);
        self.awaited = Some(target);
        target
    }

    /// The next group to write, split into items and replies; with nothing queued, `None`, and the writer is marked
    /// stopped. Called under the lock `submit` queues under: an item queued after this starts a new writer, one
    /// queued before it is in this group.
    fn take_group(&mut self, max_group: usize) -> Option<(Vec<T>, Vec<Reply<R>>)> {
        if self.queued.is_empty() {
            self.writing = false;
            return None;
        }
        let take = self.queued.len().min(max_group);
        Some(self.queued.drain(..take).unzip())
    }
}

/// How long a writer waits for company after a group that took `took` to write.
fn linger_bound(took: Duration) -> Duration {
    took.mul_f64(LINGER_SHARE).min(MAX_LINGER)
}

/// Sends each caller its result. A caller may have gone away (its request was cancelled): its item was written all
/// the same.
fn answer<R>(replies: Vec<Reply<R>>, results: Vec<Result<R, StoreError>>) {
    for (reply, result) in replies.into_iter().zip(results) {
        let _ = reply.send(result);
    }
}

impl<T, R> fmt::Debug for GroupCommit<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = lock(&self.state);
        f.debug_struct("GroupCommit")
            .field("max_group", &self.max_group)
            .field("queued", &pending.queued.len())
            .field("writing", &pending.writing)
            .field("linger", &self.linger)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Send + 'static> GroupCommit<T, R> {
    /// `write` gets a group in queue order (at most `max_group` items) and must return one result per item, in
    /// the same order.
    pub fn new(max_group: usize, write: impl Fn(Vec<T>) -> Result<Vec<R>, StoreError> + Send + Sync + 'static) -> Self {
        Self {
            max_group: max_group.max(1),
            write: Arc::new(write),
            state: Mutex::new(Pending { queued: Vec::new(), writing: false, awaited: None }),
            arrived: Condvar::new(),
            came_back: Notify::new(),
            linger: false,
            on_runtime: false,
            store_thread: OnceLock::new(),
        }
    }

    /// After writing a group of several items, the writer waits a little for the callers it answered (see the
    /// type's documentation).
    #[must_use]
    pub fn lingering(mut self) -> Self {
        self.linger = true;
        self
    }

    /// The writer runs as a task on the runtime and awaits only each group's store call on a thread of its own, so
    /// that it answers its callers from a runtime thread: waking a caller there queues it on that thread, where a
    /// writer on the blocking pool wakes the runtime's worker once per reply (a syscall, and on a busy core a
    /// context switch each: 0.46 per heartbeat on SQLite, docs/benchmarks.md, issue 18 item 2). The store call,
    /// the results and the lingering are the same; a linger that times out may wait up to the runtime timer's
    /// millisecond more.
    #[must_use]
    pub fn replying_from_runtime(mut self) -> Self {
        self.on_runtime = true;
        self
    }

    /// Commits `item`, possibly together with other callers' items, and returns its result. Must be called
    /// within a tokio runtime (the writer runs on its blocking pool).
    pub async fn submit(self: &Arc<Self>, item: T) -> Result<R, StoreError> {
        let (reply, result) = oneshot::channel();
        let start_writer = {
            let mut pending = lock(&self.state);
            pending.queued.push((item, reply));
            if pending.awaited.is_some_and(|target| pending.queued.len() >= target) {
                if self.on_runtime {
                    self.came_back.notify_one();
                } else {
                    self.arrived.notify_one();
                }
            }
            !std::mem::replace(&mut pending.writing, true)
        };
        if start_writer {
            let writer = Arc::clone(self);
            // Not awaited: the writer answers through the replies, and a writer that dies drops them.
            if self.on_runtime {
                drop(tokio::spawn(writer.write_from_runtime()));
            } else {
                drop(tokio::task::spawn_blocking(move || writer.write_while_queued()));
            }
        }
        result.await.unwrap_or_else(|_| Err(StoreError::Internal("the group writer stopped".to_owned())))
    }

    fn write_while_queued(&self) {
        // The size and write time of the group written last.
        let mut last: Option<(usize, Duration)> = None;
        loop {
            let group = {
                let mut pending = lock(&self.state);
                if let Some((size, took)) = last.filter(|(size, _)| self.linger && *size > 1) {
                    let target = pending.await_company(size, self.max_group);
                    let deadline = Instant::now() + linger_bound(took);
                    while pending.queued.len() < target {
                        let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
                        pending = self
                            .arrived
                            .wait_timeout(pending, left)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                    }
                    pending.awaited = None;
                }
                pending.take_group(self.max_group)
            };
            let Some((items, replies)) = group else { return };
            let count = items.len();
            let started = Instant::now();
            let results = write_shared(&*self.write, items, count);
            last = Some((count, started.elapsed()));
            answer(replies, results);
        }
    }
}

impl<T: Send + 'static, R: Send + 'static> GroupCommit<T, R> {
    /// [`Self::write_while_queued`] as a task on the runtime: the same groups, each store call on the group's store
    /// thread.
    async fn write_from_runtime(self: Arc<Self>) {
        let mut last: Option<(usize, Duration)> = None;
        loop {
            if let Some((size, took)) = last.filter(|(size, _)| self.linger && *size > 1) {
                self.linger_on_runtime(size, took).await;
            }
            let Some((items, replies)) = lock(&self.state).take_group(self.max_group) else { return };
            let count = items.len();
            let started = Instant::now();
            let results = self.call_store(items).await.unwrap_or_else(|stopped| {
                let error = StoreError::Internal(format!("a grouped store write did not complete: {stopped}"));
                (0..count).map(|_| Err(error.clone())).collect()
            });
            last = Some((count, started.elapsed()));
            answer(replies, results);
        }
    }

    /// One group's store call, off the runtime: on the store thread, or on the blocking pool when that thread could
    /// not be started or has stopped.
    async fn call_store(&self, items: Vec<T>) -> Result<Vec<Result<R, StoreError>>, String> {
        let thread = self.store_thread.get_or_init(|| StoreThread::start(Arc::clone(&self.write)));
        let items = match thread {
            Some(thread) => {
                let (sent, results) = oneshot::channel();
                match thread.calls.send((items, sent)) {
                    Ok(()) => return results.await.map_err(|_| "the store thread stopped".to_owned()),
                    Err(mpsc::SendError((items, _))) => items,
                }
            }
            None => items,
        };
        let write = Arc::clone(&self.write);
        let count = items.len();
        tokio::task::spawn_blocking(move || write_shared(&*write, items, count))
            .await
            .map_err(|stopped| stopped.to_string())
    }

    /// The writer's wait for the callers it answered, on the runtime: until as many items are queued as the group
    /// it wrote plus those queued when it finished, or for at most [`LINGER_SHARE`] of `took`.
    async fn linger_on_runtime(&self, size: usize, took: Duration) {
        let deadline = tokio::time::Instant::now() + linger_bound(took);
        let target = lock(&self.state).await_company(size, self.max_group);
        loop {
            let came_back = self.came_back.notified();
            tokio::pin!(came_back);
            // Registered before the queue is looked at, so a caller that reaches the target in between is seen.
            came_back.as_mut().enable();
            if lock(&self.state).queued.len() >= target {
                break;
            }
            if tokio::time::timeout_at(deadline, came_back).await.is_err() {
                break;
            }
        }
        lock(&self.state).awaited = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_callers_each_get_their_own_result_in_fewer_writes() {
        callers_share_writes(|group| group).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_answered_from_the_runtime_each_get_their_own_result_in_fewer_writes() {
        callers_share_writes(GroupCommit::replying_from_runtime).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lingering_writers_on_either_side_answer_every_caller() {
        callers_share_writes(GroupCommit::lingering).await;
        callers_share_writes(|group| group.lingering().replying_from_runtime()).await;
    }

    /// 256 callers through a group built by `shape`: each gets its own result, in fewer writes than callers, and a
    /// caller after the writer stopped starts a new one.
    async fn callers_share_writes(shape: fn(GroupCommit<u64, u64>) -> GroupCommit<u64, u64>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        // The first write waits at this gate until every caller has queued, so sharing does not depend on timing.
        let (open_gate, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let in_first_write = Arc::new(AtomicUsize::new(0));
        let in_write = Arc::clone(&in_first_write);
        let group = Arc::new(shape(GroupCommit::<u64, u64>::new(64, move |items: Vec<u64>| {
            if counted.fetch_add(1, Ordering::Relaxed) == 0 {
                in_write.store(items.len(), Ordering::SeqCst);
                let _ = lock(&gate).recv();
            }
            assert!(items.len() <= 64);
            Ok(items.into_iter().map(|item| item * 2).collect())
        })));
        let callers: Vec<_> = (0..256u64)
            .map(|item| {
                let group = Arc::clone(&group);
                tokio::spawn(async move { (item, group.submit(item).await) })
            })
            .collect();
        // Bounded, so that a writer that answers callers before their group is written fails here instead of hanging.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&group.state).queued.len() + in_first_write.load(Ordering::SeqCst) < 256 {
            assert!(Instant::now() < deadline, "the callers never all waited for the first write");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        open_gate.send(()).unwrap();
        for caller in callers {
            let (item, doubled) = caller.await.unwrap();
            assert_eq!(doubled, Ok(item * 2));
        }
        assert!(calls.load(Ordering::Relaxed) < 256, "some writes were shared");
        // The writer answers its callers before it looks at the queue again, so it stops a moment after them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&group.state).writing {
            assert!(Instant::now() < deadline, "the writer did not stop with nothing queued");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A later caller starts a new writer.
        assert_eq!(group.submit(21).await, Ok(42));
    }

    #[tokio::test]
    async fn a_writer_on_the_runtime_still_makes_its_store_calls_off_it() {
        let runtime_thread = std::thread::current().id();
        let group = Arc::new(
            GroupCommit::<u8, bool>::new(8, move |items: Vec<u8>| {
                Ok(items.iter().map(|_| std::thread::current().id() != runtime_thread).collect())
            })
            .replying_from_runtime(),
        );
        assert_eq!(group.submit(1).await, Ok(true), "the store call ran on the runtime's thread");
    }

    /// What a runtime-side writer's store call saw: its thread, and whether that thread runs inside a runtime (the
    /// blocking pool's threads do).
    type Seen = Vec<(std::thread::ThreadId, bool)>;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_on_the_runtime_makes_every_store_call_on_one_thread_of_its_own_that_outlives_a_panic() {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let record = Arc::clone(&seen);
        let group = Arc::new(
            GroupCommit::<u8, u8>::new(8, move |items: Vec<u8>| {
                let on_runtime = tokio::runtime::Handle::try_current().is_ok();
                lock(&record).push((std::thread::current().id(), on_runtime));
                assert!(!items.contains(&0), "adapter bug");
                Ok(items)
            })
            .replying_from_runtime(),
        );
        assert_eq!(group.submit(1).await, Ok(1));
        assert!(matches!(group.submit(0).await, Err(StoreError::Internal(_))));
        assert_eq!(group.submit(2).await, Ok(2));
        let seen = lock(&seen).clone();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|(thread, _)| *thread == seen[0].0), "the store calls moved between threads: {seen:?}");
        assert!(seen.iter().all(|(_, on_runtime)| !on_runtime), "a store call ran on the runtime's pool: {seen:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_of_a_writer_on_the_runtime_is_answered_only_once_its_store_call_returned() {
        let (open_gate, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let entered = Arc::new(AtomicUsize::new(0));
        let returned = Arc::new(AtomicUsize::new(0));
        let (inside, done) = (Arc::clone(&entered), Arc::clone(&returned));
        let group = Arc::new(
            GroupCommit::<u8, u8>::new(8, move |items: Vec<u8>| {
                inside.fetch_add(1, Ordering::SeqCst);
                let _ = lock(&gate).recv();
                done.fetch_add(1, Ordering::SeqCst);
                Ok(items)
            })
            .replying_from_runtime(),
        );
        let caller = {
            let group = Arc::clone(&group);
            tokio::spawn(async move { group.submit(7).await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while entered.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the store call was never made");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // However long the caller is given, the store call it waits for has not returned.
        for _ in 0..20 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(!caller.is_finished(), "the caller was answered while its store call was still running");
        }
        open_gate.send(()).unwrap();
        assert_eq!(caller.await.unwrap(), Ok(7));
        assert_eq!(returned.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_async_group_that_panics_or_miscounts_fails_its_callers() {
        fails_its_callers(|group| group).await;
    }

    #[tokio::test]
    async fn a_group_answered_from_the_runtime_that_panics_or_miscounts_fails_its_callers() {
        fails_its_callers(GroupCommit::replying_from_runtime).await;
    }

    async fn fails_its_callers(shape: fn(GroupCommit<u8, ()>) -> GroupCommit<u8, ()>) {
        let panicking = Arc::new(shape(GroupCommit::<u8, ()>::new(8, |_| panic!("adapter bug"))));
        assert!(matches!(panicking.submit(1).await, Err(StoreError::Internal(_))));
        assert!(matches!(panicking.submit(2).await, Err(StoreError::Internal(_))));
        let miscounting = Arc::new(shape(GroupCommit::<u8, ()>::new(8, |_| Ok(Vec::new()))));
        assert!(matches!(miscounting.submit(1).await, Err(StoreError::Internal(_))));
        let failing =
            Arc::new(shape(GroupCommit::<u8, ()>::new(8, |_| Err(StoreError::Unavailable("locked".to_owned())))));
        assert_eq!(failing.submit(1).await, Err(StoreError::Unavailable("locked".to_owned())));
    }
}
