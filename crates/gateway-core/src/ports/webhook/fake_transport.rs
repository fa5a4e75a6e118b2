//! [`FakeTransport`]: scripted outcomes, recorded requests, and a gate that holds attempts in flight so tests can
//! observe concurrency.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::{AttemptOutcome, OutboundRequest, WebhookTransport};
use crate::runtime::sync::lock;

#[derive(Debug, Default)]
struct Script {
    outcomes: VecDeque<AttemptOutcome>,
    fallback: Option<AttemptOutcome>,
    requests: Vec<OutboundRequest>,
    held: bool,
    in_flight: usize,
}

/// A transport that records every request and answers from a script: queued outcomes first, then the
/// fallback (a 200 unless changed). While [`Self::hold`] is on, attempts block inside `post` until
/// [`Self::release`], so a test can count how many are in flight at once.
#[derive(Debug, Default)]
pub struct FakeTransport {
    script: Mutex<Script>,
    changed: Condvar,
    max_in_flight: AtomicUsize,
}

impl FakeTransport {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues the outcome of the next attempt not yet scripted.
    pub fn push_outcome(&self, outcome: AttemptOutcome) {
        lock(&self.script).outcomes.push_back(outcome);
    }

    /// The outcome of every attempt once the queue is empty.
    pub fn set_fallback(&self, outcome: AttemptOutcome) {
        lock(&self.script).fallback = Some(outcome);
    }

    /// Every request received so far, in arrival order (an attempt is recorded when it starts).
    pub fn requests(&self) -> Vec<OutboundRequest> {
        lock(&self.script).requests.clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.script).requests.len()
    }

    /// The most attempts that were inside `post` at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.script).in_flight
    }

    /// Makes attempts block inside `post` until [`Self::release`].
    pub fn hold(&self) {
        lock(&self.script).held = true;
    }

    pub fn release(&self) {
        lock(&self.script).held = false;
        self.changed.notify_all();
    }

    /// Blocks the calling thread until at least `count` requests have started, or `limit` passes (a safety
    /// net so a broken test fails instead of hanging). Returns whether the count was reached. Call it from a
    /// blocking task, never on an async runtime worker.
    pub fn wait_for_requests(&self, count: usize, limit: Duration) -> bool {
        let script = lock(&self.script);
        let (script, _) = self
            .changed
            .wait_timeout_while(script, limit, |script| script.requests.len() < count)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        script.requests.len() >= count
    }
}

impl WebhookTransport for FakeTransport {
    fn post(&self, request: &OutboundRequest) -> AttemptOutcome {
        let mut script = lock(&self.script);
        script.requests.push(request.clone());
        script.in_flight += 1;
        self.max_in_flight.fetch_max(script.in_flight, Ordering::SeqCst);
        self.changed.notify_all();
        let mut script =
            self.changed.wait_while(script, |script| script.held).unwrap_or_else(std::sync::PoisonError::into_inner);
        script.in_flight -= 1;
        let fallback = script.fallback.clone().unwrap_or(AttemptOutcome::Delivered { status_code: 200 });
        script.outcomes.pop_front().unwrap_or(fallback)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ports::webhook::FailureClass;

    #[test]
    fn fake_transport_scripts_outcomes_and_counts_concurrency() {
        let transport = Arc::new(FakeTransport::new());
        transport.push_outcome(AttemptOutcome::Failed { class: FailureClass::Timeout, detail: None });
        let request = OutboundRequest {
            delivery_id: 1,
            url: "u".into(),
            body: "{}".into(),
            signature: "s".into(),
            timestamp: 0,
            standard_signature: "v1,AA==".into(),
            epoch: 1,
            epoch_signature: "v1,AA==".into(),
        };
        assert_eq!(transport.post(&request), AttemptOutcome::Failed { class: FailureClass::Timeout, detail: None });
        assert_eq!(transport.post(&request), AttemptOutcome::Delivered { status_code: 200 });

        transport.hold();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let transport = Arc::clone(&transport);
                let request = request.clone();
                std::thread::spawn(move || transport.post(&request))
            })
            .collect();
        assert!(transport.wait_for_requests(5, Duration::from_secs(10)));
        assert_eq!(transport.in_flight(), 3);
        transport.release();
        for worker in workers {
            assert_eq!(worker.join().unwrap(), AttemptOutcome::Delivered { status_code: 200 });
        }
        assert_eq!(transport.max_in_flight(), 3);
        assert_eq!(transport.request_count(), 5);
    }
}
