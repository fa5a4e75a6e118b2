//! Group commit: concurrent callers that each need their own write committed before they return share one
//! store call.
//!
//! One commit per row makes SQLite rewrite the same table and index pages for every row, which caps a single
//! writer far below what the endpoints can take. So each caller queues its item; whoever finds the commit slot
//! free takes everything queued (up to a bound) and writes it in one call, while the others wait for their
//! result. There is no thread of its own: callers (already on blocking threads, see `run_blocking`) do the
//! work, and a caller alone simply commits its own item. Used by the heartbeat upserts and the scheduler's
//! one-time job inserts.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, PoisonError, TryLockError};

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
        // Other callers wait for these tickets: even a panicking store must not leave them waiting forever.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| write(items)))
            .unwrap_or_else(|_| Err(StoreError::Internal("a grouped store write panicked".to_owned())));
        let mut pending = lock(&self.state);
        match outcome {
            Ok(results) if results.len() == tickets.len() => {
                pending.results.extend(tickets.into_iter().zip(results.into_iter().map(Ok)));
            }
            Ok(results) => {
                let error = StoreError::Internal(format!(
                    "a grouped write of {} items returned {} results",
                    tickets.len(),
                    results.len()
                ));
                pending.results.extend(tickets.into_iter().map(|ticket| (ticket, Err(error.clone()))));
            }
            Err(error) => {
                pending.results.extend(tickets.into_iter().map(|ticket| (ticket, Err(error.clone()))));
            }
        }
    }

    #[cfg(test)]
    fn is_drained(&self) -> bool {
        let pending = lock(&self.state);
        pending.queued.is_empty() && pending.results.is_empty()
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
}
