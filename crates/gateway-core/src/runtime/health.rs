//! What `/readyz` reports: whether each background loop is running and whether it can reach what it needs.
//!
//! A loop holds a [`RunningGuard`] for as long as it runs; dropping it (a normal stop, or a panic unwinding the
//! task) marks the component stopped, so the API never keeps accepting work for a loop that is gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::runtime::sync::lock;

#[derive(Debug)]
struct HealthState {
    running: AtomicBool,
    problem: Mutex<Option<String>>,
    /// Woken when the component starts running.
    started: tokio::sync::Notify,
}

/// The health of one component; clones share state.
#[derive(Debug, Clone)]
pub struct ComponentHealth {
    name: &'static str,
    state: Arc<HealthState>,
}

/// One component's line in the readiness report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    pub component: &'static str,
    pub running: bool,
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl ComponentHealth {
    pub fn new(name: &'static str) -> Self {
        let state = HealthState {
            running: AtomicBool::new(false),
            problem: Mutex::new(None),
            started: tokio::sync::Notify::new(),
        };
        Self { name, state: Arc::new(state) }
    }

    /// Marks the component running until the returned guard is dropped.
    pub fn start(&self) -> RunningGuard {
        self.state.running.store(true, Ordering::SeqCst);
        self.state.started.notify_waiters();
        RunningGuard { state: Arc::clone(&self.state) }
    }

    /// Waits until the component runs (at once if it does). A server awaits this before it accepts requests, so
    /// the first request does not find a loop that was spawned but has not started yet.
    pub async fn running(&self) {
        loop {
            let started = self.state.started.notified();
            if self.is_running() {
                return;
            }
            started.await;
        }
    }

    pub fn is_running(&self) -> bool {
        self.state.running.load(Ordering::SeqCst)
    }

    /// Records why the component cannot do its work right now (kept until [`Self::recovered`]).
    pub fn degraded(&self, problem: impl Into<String>) {
        *lock(&self.state.problem) = Some(problem.into());
    }

    pub fn recovered(&self) {
        *lock(&self.state.problem) = None;
    }

    pub fn report(&self) -> HealthReport {
        let running = self.is_running();
        let problem = lock(&self.state.problem).clone();
        HealthReport { component: self.name, running, healthy: running && problem.is_none(), problem }
    }
}

/// Held by a running loop; marks it stopped when dropped.
#[derive(Debug)]
pub struct RunningGuard {
    state: Arc<HealthState>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.state.running.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_follows_the_guard_and_problems_make_it_unhealthy() {
        let health = ComponentHealth::new("loop");
        assert!(!health.report().running);
        let guard = health.start();
        assert!(health.report().healthy);
        health.degraded("store unreachable");
        let report = health.report();
        assert!(report.running && !report.healthy);
        assert_eq!(report.problem.as_deref(), Some("store unreachable"));
        health.recovered();
        assert!(health.report().healthy);
        drop(guard);
        assert!(!health.report().running);
    }

    #[tokio::test]
    async fn running_resolves_once_the_loop_starts() {
        let health = ComponentHealth::new("loop");
        let waiter = tokio::spawn({
            let health = health.clone();
            async move { health.running().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        let _guard = health.start();
        waiter.await.unwrap();
        health.running().await;
    }

    #[test]
    fn a_panicking_task_marks_the_component_stopped() {
        let health = ComponentHealth::new("loop");
        let inner = health.clone();
        let outcome = std::thread::spawn(move || {
            let _guard = inner.start();
            panic!("loop crashed");
        })
        .join();
        assert!(outcome.is_err());
        assert!(!health.is_running());
    }
}
