//! The process-wide bound on request-body bytes being read (the gateway's docs/architecture.md, "Bodies before
//! trust").
//!
//! Anyone who can open a connection can make the gateway read a body, before it knows who sent it (an inbound
//! webhook is verified only once its body is in). One body is at most 1 MiB, but the connections are many: 600 of
//! them, each holding back the last byte of a 1 MiB body, once took the process from 17 MB to 854 MB. So every
//! body is read against one budget: a declared `Content-Length` is reserved in full before the first byte is read,
//! a chunked body reserves what it has buffered as it grows, and a request that would pass the budget is refused
//! ([`Refusal::Overloaded`]; the gateway answers 503 `overloaded`) instead of being read. The memory of bodies being read is so the budget, whatever the
//! number of connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::Refusal;

/// The default budget (the gateway's `--max-inflight-body-bytes`): 64 bodies of the largest size (1 MiB) at once,
/// or thousands of usual ones.
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Request-body bytes reserved by the requests being read right now, and the limit they may not pass together.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    in_flight: AtomicUsize,
    /// Requests refused because their body would have passed the limit.
    refused: AtomicU64,
}

impl BodyBudget {
    pub fn new(limit: usize) -> Self {
        Self { limit, in_flight: AtomicUsize::new(0), refused: AtomicU64::new(0) }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes reserved right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Reservations refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// A reservation of `bytes`; [`Refusal::Overloaded`] when the budget cannot hold them beside what is reserved.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, Refusal> {
        let mut reservation = Reservation { budget: Arc::clone(self), bytes: 0 };
        reservation.cover(bytes)?;
        Ok(reservation)
    }

    fn take(&self, bytes: usize) -> bool {
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                now.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok();
        if !taken {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }
}

/// Bytes one body holds in the budget, given back when dropped: when the body has been read and dropped, or when
/// its read ends early (refused, timed out, the client gone, the handler's future dropped).
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Reservation {
    /// Grows the reservation to `total` bytes (a chunked body's buffer growing); [`Refusal::Overloaded`] when the
    /// budget cannot hold the growth, the reservation then staying as it was.
    pub fn cover(&mut self, total: usize) -> Result<(), Refusal> {
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return Ok(());
        }
        if !self.budget.take(more) {
            return Err(Refusal::Overloaded);
        }
        self.bytes = total;
        Ok(())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.in_flight.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_pass_the_limit_never_and_give_their_bytes_back_when_dropped() {
        let budget = Arc::new(BodyBudget::new(1_000));
        let first = budget.reserve(600).unwrap();
        let refused = budget.reserve(401).unwrap_err();
        // The gateway answers it 503 `overloaded` with Retry-After 1 (bin/gateway/src/http/error.rs tests that).
        assert_eq!(refused, Refusal::Overloaded);
        assert_eq!(budget.in_flight(), 600, "a refused reservation takes nothing");
        let mut second = budget.reserve(400).unwrap();
        assert_eq!(budget.in_flight(), 1_000);
        drop(first);
        assert_eq!(budget.in_flight(), 400);
        second.cover(900).unwrap();
        assert_eq!((second.bytes(), budget.in_flight()), (900, 900));
        second.cover(500).unwrap();
        assert_eq!(second.bytes(), 900, "covering less keeps what is held");
        assert_eq!(second.cover(1_001), Err(Refusal::Overloaded));
        assert_eq!((second.bytes(), budget.in_flight()), (900, 900), "a refused growth keeps what was held");
        drop(second);
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(budget.refused(), 2);
    }

    #[test]
    fn an_empty_reservation_is_always_granted() {
        let budget = Arc::new(BodyBudget::new(10));
        let _full = budget.reserve(10).unwrap();
        let mut chunked = budget.reserve(0).unwrap();
        assert_eq!(chunked.cover(1), Err(Refusal::Overloaded), "its first byte is refused");
    }
}
