//! Group commit: concurrent callers that each need their own write committed before they return share one
//! store call.
//!
//! One commit per row makes SQLite rewrite the same table and index pages for every row, which caps a single
//! writer far below what the endpoints can take. So each caller queues its item; whoever finds the commit slot
//! free takes everything queued (up to a bound) and writes it in one call, while the others wait for their
//! result. [`GroupCommit`] is for synchronous callers (already on blocking threads, see `run_blocking`): they do
//! the work themselves, and a caller alone simply commits its own item; the scheduler's one-time job inserts use
//! it. [`AsyncGroupCommit`] is for async callers, who await a reply instead; the heartbeat upserts use it.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, PoisonError, TryLockError};

use tokio::sync::oneshot;

use crate::memory::lock;
use crate::ports::StoreError;

/// Most yields a group's writer spends waiting for more callers to queue.
const LINGER_YIELDS: usize = 16;

/// Shares commits among concurrent callers. `T` is what a caller writes, `R` what it gets back.
pub struct GroupCommit<T, R> {
    max_group: usize,
    state: Mutex<Pending<T, R>>,
    /// Signalled whenever a group's results are in.
    finished: Condvar,
    /// Held by the caller that is writing a group.
    slot: Mutex<()>,
}

struct Pending<T, R> {
    next_ticket: u64,
    queued: Vec<(u64, T)>,
    results: HashMap<u64, Result<R, StoreError>>,
}

impl<T, R> fmt::Debug for GroupCommit<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = lock(&self.state);
        f.debug_struct("GroupCommit")
            .field("max_group", &self.max_group)
            .field("queued", &pending.queued.len())
            .field("unclaimed_results", &pending.results.len())
            .finish()
    }
}

impl<T, R> GroupCommit<T, R> {
    /// At most `max_group` items per store call (bounds a transaction's length and how long it holds the
    /// write lock).
    pub fn new(max_group: usize) -> Self {
        Self {
            max_group: max_group.max(1),
            state: Mutex::new(Pending { next_ticket: 0, queued: Vec::new(), results: HashMap::new() }),
            finished: Condvar::new(),
            slot: Mutex::new(()),
        }
    }

    /// Commits `item`, possibly together with other callers' items, and returns its result. `write` gets a
    /// group in queue order and must return one result per item, in the same order; it runs on whichever
    /// caller's thread takes the slot. Blocking.
    pub fn submit(&self, item: T, write: impl Fn(Vec<T>) -> Result<Vec<R>, StoreError>) -> Result<R, StoreError> {
        let ticket = {
            let mut pending = lock(&self.state);
            let ticket = pending.next_ticket;
            pending.next_ticket = pending.next_ticket.wrapping_add(1);
            pending.queued.push((ticket, item));
            ticket
        };
        loop {
            let slot = match self.slot.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(slot) = slot {
                self.write_group(&write);
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
    /// other thread is runnable, and under load it turns many one-item commits into one commit of many.
    fn linger(&self) {
        let mut queued = lock(&self.state).queued.len();
        for _ in 0..LINGER_YIELDS {
            std::thread::yield_now();
            let now = lock(&self.state).queued.len();
            if now == queued || now >= self.max_group {
                break;
            }
            queued = now;
        }
    }

    fn writing(&self) -> bool {
        matches!(self.slot.try_lock(), Err(TryLockError::WouldBlock))
    }

    /// Takes up to `max_group` queued items, writes them in one call and files the results. Called with the
    /// slot held; the caller wakes the waiters after releasing it.
    fn write_group(&self, write: &impl Fn(Vec<T>) -> Result<Vec<R>, StoreError>) {
        self.linger();
        let (tickets, items): (Vec<u64>, Vec<T>) = {
            let mut pending = lock(&self.state);
            let take = pending.queued.len().min(self.max_group);
            pending.queued.drain(..take).unzip()
        };
        if tickets.is_empty() {
            return;
        }
        let results = write_shared(write, items, tickets.len());
        lock(&self.state).results.extend(tickets.into_iter().zip(results));
    }

    #[cfg(test)]
    fn is_drained(&self) -> bool {
        let pending = lock(&self.state);
        pending.queued.is_empty() && pending.results.is_empty()
    }
}

/// Writes one group and gives each item its result. Other callers wait for these results: even a panicking
/// store, or one that answers with the wrong number of results, must not leave them waiting forever.
fn write_shared<T, R>(
    write: &impl Fn(Vec<T>) -> Result<Vec<R>, StoreError>,
    items: Vec<T>,
    count: usize,
) -> Vec<Result<R, StoreError>> {
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

/// The same sharing for async callers, who await their result instead of each parking a blocking thread.
///
/// [`GroupCommit`] suits synchronous callers (already on blocking threads). An async endpoint that used it would
/// hold a blocking thread per request in flight, and every finished group would wake all of them: under load
/// the process spends its time switching threads (a third of the gateway's CPU at 64 concurrent heartbeats).
/// Here a caller queues its item with a one-shot reply; the first caller that finds no writer running starts one
/// on the blocking pool, which writes groups while anything is queued and then stops. Items that arrive while a
/// group is being written form the next group.
pub struct AsyncGroupCommit<T, R> {
    max_group: usize,
    write: Box<GroupWrite<T, R>>,
    state: Mutex<AsyncPending<T, R>>,
}

struct AsyncPending<T, R> {
    queued: Vec<(T, oneshot::Sender<Result<R, StoreError>>)>,
    /// A writer is running on the blocking pool (and will look at `queued` again before it stops).
    writing: bool,
}

impl<T, R> fmt::Debug for AsyncGroupCommit<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = lock(&self.state);
        f.debug_struct("AsyncGroupCommit")
            .field("max_group", &self.max_group)
            .field("queued", &pending.queued.len())
            .field("writing", &pending.writing)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Send + 'static> AsyncGroupCommit<T, R> {
    /// `write` gets a group in queue order (at most `max_group` items) and must return one result per item, in
    /// the same order.
    pub fn new(max_group: usize, write: impl Fn(Vec<T>) -> Result<Vec<R>, StoreError> + Send + Sync + 'static) -> Self {
        Self {
            max_group: max_group.max(1),
            write: Box::new(write),
            state: Mutex::new(AsyncPending { queued: Vec::new(), writing: false }),
        }
    }

    /// Commits `item`, possibly together with other callers' items, and returns its result. Must be called
    /// within a tokio runtime (the writer runs on its blocking pool).
    pub async fn submit(self: &Arc<Self>, item: T) -> Result<R, StoreError> {
        let (reply, result) = oneshot::channel();
        let start_writer = {
            let mut pending = lock(&self.state);
            pending.queued.push((item, reply));
            !std::mem::replace(&mut pending.writing, true)
        };
        if start_writer {
            let writer = Arc::clone(self);
            // Not awaited: the writer answers through the replies, and a writer that dies drops them.
            drop(tokio::task::spawn_blocking(move || writer.write_while_queued()));
        }
        result.await.unwrap_or_else(|_| Err(StoreError::Internal("the group writer stopped".to_owned())))
    }

    fn write_while_queued(&self) {
        loop {
            let group: Vec<_> = {
                let mut pending = lock(&self.state);
                if pending.queued.is_empty() {
                    // Cleared under the lock that `submit` queues under: an item queued after this starts a new
                    // writer, one queued before it is in this loop's next group.
                    pending.writing = false;
                    return;
                }
                let take = pending.queued.len().min(self.max_group);
                pending.queued.drain(..take).collect()
            };
            let (items, replies): (Vec<T>, Vec<_>) = group.into_iter().unzip();
            let count = items.len();
            for (reply, result) in replies.into_iter().zip(write_shared(&self.write, items, count)) {
                // The caller may have gone away (its request was cancelled): its item was written all the same.
                let _ = reply.send(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn concurrent_callers_each_get_their_own_result_in_fewer_calls() {
        let group = Arc::new(GroupCommit::<u64, u64>::new(64));
        let calls = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|thread| {
                let (group, calls) = (Arc::clone(&group), Arc::clone(&calls));
                std::thread::spawn(move || {
                    for n in 0..500 {
                        let item = thread * 10_000 + n;
                        let doubled = group
                            .submit(item, |items| {
                                calls.fetch_add(1, Ordering::Relaxed);
                                assert!(items.len() <= 64);
                                Ok(items.into_iter().map(|item| item * 2).collect())
                            })
                            .unwrap();
                        assert_eq!(doubled, item * 2);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(calls.load(Ordering::Relaxed) <= 4_000);
        assert!(group.is_drained(), "nothing left behind");
    }

    #[test]
    fn a_panicking_write_fails_the_callers_instead_of_leaving_them_waiting() {
        let group = GroupCommit::<u8, ()>::new(8);
        let panicking = |_: Vec<u8>| -> Result<Vec<()>, StoreError> { panic!("adapter bug") };
        assert!(matches!(group.submit(1, panicking), Err(StoreError::Internal(_))));
        assert!(matches!(group.submit(2, panicking), Err(StoreError::Internal(_))));
        assert!(group.is_drained());
    }

    #[test]
    fn a_failed_group_fails_each_caller_and_the_next_one_works() {
        let group = GroupCommit::<u8, u8>::new(8);
        let failing = |_: Vec<u8>| Err(StoreError::Unavailable("down".to_owned()));
        assert!(matches!(group.submit(1, failing), Err(StoreError::Unavailable(_))));
        assert_eq!(group.submit(2, |items: Vec<u8>| Ok(items)).unwrap(), 2);
        let short = |_: Vec<u8>| Ok(Vec::new());
        assert!(matches!(group.submit(3, short), Err(StoreError::Internal(_))));
        assert!(group.is_drained());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_callers_each_get_their_own_result_in_fewer_writes() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        // The first write waits at this gate until every caller has queued, so sharing does not depend on timing.
        let (open_gate, gate) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let in_first_write = Arc::new(AtomicUsize::new(0));
        let in_write = Arc::clone(&in_first_write);
        let group = Arc::new(AsyncGroupCommit::<u64, u64>::new(64, move |items: Vec<u64>| {
            if counted.fetch_add(1, Ordering::Relaxed) == 0 {
                in_write.store(items.len(), Ordering::SeqCst);
                let _ = lock(&gate).recv();
            }
            assert!(items.len() <= 64);
            Ok(items.into_iter().map(|item| item * 2).collect())
        }));
        let callers: Vec<_> = (0..256u64)
            .map(|item| {
                let group = Arc::clone(&group);
                tokio::spawn(async move { (item, group.submit(item).await) })
            })
            .collect();
        while lock(&group.state).queued.len() + in_first_write.load(Ordering::SeqCst) < 256 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        open_gate.send(()).unwrap();
        for caller in callers {
            let (item, doubled) = caller.await.unwrap();
            assert_eq!(doubled, Ok(item * 2));
        }
        assert!(calls.load(Ordering::Relaxed) < 256, "some writes were shared");
        assert!(!lock(&group.state).writing, "the writer stops when nothing is queued");
        // A later caller starts a new writer.
        assert_eq!(group.submit(21).await, Ok(42));
    }

    #[tokio::test]
    async fn an_async_group_that_panics_or_miscounts_fails_its_callers() {
        let panicking = Arc::new(AsyncGroupCommit::<u8, ()>::new(8, |_| panic!("adapter bug")));
        assert!(matches!(panicking.submit(1).await, Err(StoreError::Internal(_))));
        assert!(matches!(panicking.submit(2).await, Err(StoreError::Internal(_))));
        let miscounting = Arc::new(AsyncGroupCommit::<u8, ()>::new(8, |_| Ok(Vec::new())));
        assert!(matches!(miscounting.submit(1).await, Err(StoreError::Internal(_))));
        let failing =
            Arc::new(AsyncGroupCommit::<u8, ()>::new(8, |_| Err(StoreError::Unavailable("locked".to_owned()))));
        assert_eq!(failing.submit(1).await, Err(StoreError::Unavailable("locked".to_owned())));
    }
}
