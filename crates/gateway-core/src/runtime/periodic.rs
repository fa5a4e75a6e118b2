//! The loop shape of timed work done only by the leader: a pass every interval (the first at once), skipped while
//! another instance leads, given the leadership token its writes carry; a pass the store fenced tells the
//! leadership (which steps down); a failed pass marks the component degraded and is tried again after a backoff
//! (doubling, capped) without waiting for the next tick; nothing but `shutdown` ends the loop (H-4, H-5 and H-8 in
//! docs/requirements.md).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::ports::leadership::{FencingToken, Leadership};
use crate::ports::store::StoreError;
use crate::runtime::backoff::capped_backoff;
use crate::runtime::blocking::run_blocking;
use crate::runtime::health::ComponentHealth;

/// An error a leader-only write can end with: was it refused by fencing?
pub trait MaybeFenced {
    fn is_fenced(&self) -> bool;
}

impl MaybeFenced for StoreError {
    fn is_fenced(&self) -> bool {
        StoreError::is_fenced(self)
    }
}

/// One pass of a retention loop: `prune(cutoff, batch)` on the blocking pool, batch after batch with `pause`
/// between them (so that other writers never queue behind one long delete), where `cutoff` is `now - retention`
/// (the epoch when that underflows). The pass ends at shutdown or when a batch deleted nothing; with
/// `short_batch_ends` also when it deleted fewer than `batch` (right for a store that deletes the oldest rows
/// first; a store that looks at a window of rows may delete fewer while older ones remain). Returns how many
/// rows went.
#[derive(Debug, Clone, Copy)]
pub struct PruningPass {
    pub now: time::OffsetDateTime,
    pub retention: Duration,
    pub batch: usize,
    pub pause: Duration,
    pub short_batch_ends: bool,
}

impl PruningPass {
    pub async fn run<P>(self, shutdown: &CancellationToken, prune: P) -> Result<usize, StoreError>
    where
        P: Fn(time::OffsetDateTime, usize) -> Result<usize, StoreError> + Clone + Send + 'static,
    {
        let retention = time::Duration::try_from(self.retention).unwrap_or(time::Duration::MAX);
        let cutoff = self.now.checked_sub(retention).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        let mut pruned = 0;
        loop {
            let (prune, batch) = (prune.clone(), self.batch);
            let deleted = run_blocking(move || prune(cutoff, batch)).await.map_err(StoreError::from)??;
            pruned += deleted;
            let last = deleted == 0 || (self.short_batch_ends && deleted < batch);
            if last || shutdown.is_cancelled() {
                return Ok(pruned);
            }
            tokio::time::sleep(self.pause).await;
        }
    }
}

/// The longest wait the retention loops back off to after consecutive failed pruning passes. A failed pass marks
/// its loop unhealthy (and `/readyz` 503) until one succeeds, so the wait is short: after a store outage the gateway
/// is ready again within this of the store, and a pass that fails for good costs one batch every 10 s.
pub const MAX_PRUNE_BACKOFF: Duration = Duration::from_secs(10);

/// One leader-only periodic loop.
#[derive(Debug)]
pub struct LeaderLoop<'a> {
    /// What a pass is, for the warning when one fails ("webhook poll").
    pub pass: &'static str,
    pub interval: Duration,
    /// The pause before a failed pass is tried again, doubled per failure in a row, at most `max_backoff`; the
    /// regular passes resume an interval after the one that gets through.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    pub health: &'a ComponentHealth,
    pub leadership: &'a dyn Leadership,
}

impl LeaderLoop<'_> {
    /// Runs `pass` every interval until `shutdown`, holding the component's running guard meanwhile.
    pub async fn run<F, Fut, E>(&self, shutdown: &CancellationToken, mut pass: F)
    where
        F: FnMut(FencingToken) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display + MaybeFenced,
    {
        let _running = self.health.start();
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut failures: u32 = 0;
        loop {
            // A failed pass is tried again once its backoff is over, not at the next tick: a failed pass leaves
            // the component degraded (and `/readyz` 503), and an hourly loop that waited for its next tick kept
            // the leader out of a load balancer's rotation for an hour after a blip of its store.
            if failures == 0 {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return,
                    _ = ticks.tick() => {}
                }
            }
            // A follower runs no pass, so nothing of this loop is failing: a problem reported while it led (or by
            // the component's other work, such as recording an attempt during an outage) must not keep the
            // instance unready once it follows (`/readyz` checks the store itself).
            let Some(token) = self.leadership.current() else {
                failures = 0;
                self.health.recovered();
                continue;
            };
            match pass(token).await {
                Ok(()) => {
                    if failures > 0 {
                        // The next pass an interval after this one, not at the tick the retries ran past.
                        ticks.reset();
                    }
                    failures = 0;
                    self.health.recovered();
                }
                Err(error) if error.is_fenced() => {
                    tracing::warn!(pass = self.pass, %error, "fenced by a newer leader; stepping down");
                    failures = 0;
                    self.leadership.fenced(token);
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    self.health.degraded(format!("{} failed: {error}", self.pass));
                    let backoff = capped_backoff(self.first_backoff, self.max_backoff, failures);
                    tracing::warn!(
                        pass = self.pass,
                        %error,
                        failures,
                        backoff_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                        "periodic pass failed; backing off"
                    );
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A pass that failed while leading leaves the loop degraded; once the instance follows, its next tick reports
    /// it healthy (it used to stay degraded, and the instance unready, until it led and passed again).
    #[tokio::test(start_paused = true)]
    async fn a_loop_that_failed_while_leading_is_healthy_again_once_it_follows() {
        let health = ComponentHealth::new("test");
        let leadership = crate::SwitchableLeadership::leading();
        let shutdown = CancellationToken::new();
        let runner = LeaderLoop {
            pass: "test pass",
            interval: Duration::from_secs(10),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            health: &health,
            leadership: &leadership,
        };
        let driver = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!health.report().healthy, "the first pass failed");
            leadership.set_leading(false);
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert!(health.report().healthy, "{:?}", health.report());
            shutdown.cancel();
        };
        let work = runner.run(&shutdown, |_| async { Err::<(), _>(StoreError::Unavailable("store down".into())) });
        tokio::join!(work, driver);
    }

    #[tokio::test(start_paused = true)]
    async fn passes_run_at_once_then_every_interval_only_while_leader_and_failures_back_off() {
        let health = ComponentHealth::new("test");
        let leadership = crate::SwitchableLeadership::default();
        let passes = AtomicU32::new(0);
        let shutdown = CancellationToken::new();
        let runner = LeaderLoop {
            pass: "test pass",
            interval: Duration::from_secs(10),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            health: &health,
            leadership: &leadership,
        };
        let started = tokio::time::Instant::now();
        let seen = |at: f64, count: u32| {
            assert_eq!(passes.load(Ordering::SeqCst), count, "passes by {at} s");
        };
        let driver = async {
            // Not leader for the first two ticks: no pass.
            tokio::time::sleep(Duration::from_secs(15)).await;
            seen(15.0, 0);
            leadership.set_leading(true);
            // The tick at 20 s fails (degraded, 1 s backoff), its retry at 21 s fails (2 s), the one at 23 s works;
            // the regular passes then come an interval after it: 33 s, 43 s.
            tokio::time::sleep(Duration::from_millis(5_500)).await;
            seen(20.5, 1);
            assert!(health.report().problem.as_deref().is_some_and(|problem| problem.starts_with("test pass failed")));
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen(21.5, 2);
            tokio::time::sleep(Duration::from_secs(2)).await;
            seen(23.5, 3);
            assert!(health.report().healthy);
            tokio::time::sleep(Duration::from_secs(9)).await;
            seen(32.5, 3);
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen(33.5, 4);
            shutdown.cancel();
        };
        let work = runner.run(&shutdown, |token| {
            assert_eq!(token, FencingToken(1));
            let count = passes.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if count < 3 { Err(StoreError::Unavailable("store down".into())) } else { Ok(()) } }
        });
        tokio::join!(work, driver);
        assert!(started.elapsed() >= Duration::from_secs(33));
        assert!(!health.is_running(), "the guard is dropped when the loop ends");
    }

    /// An hourly loop (the retention passes) whose pass meets a blip of the store is ready again once a retry gets
    /// through, seconds later: it used to wait for the next tick, and the leader answered `/readyz` 503 for the hour.
    #[tokio::test(start_paused = true)]
    async fn an_hourly_pass_that_failed_once_is_healthy_again_after_its_backoff() {
        let health = ComponentHealth::new("test");
        let leadership = crate::SwitchableLeadership::leading();
        let passes = AtomicU32::new(0);
        let shutdown = CancellationToken::new();
        let runner = LeaderLoop {
            pass: "pruning",
            interval: Duration::from_secs(3_600),
            first_backoff: Duration::from_secs(1),
            max_backoff: MAX_PRUNE_BACKOFF,
            health: &health,
            leadership: &leadership,
        };
        let driver = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(!health.report().healthy, "the first pass failed");
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 2);
            assert!(health.report().healthy, "{:?}", health.report());
            tokio::time::sleep(Duration::from_secs(3_598)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 2, "no pass before an hour after the one that got through");
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 3);
            shutdown.cancel();
        };
        let work = runner.run(&shutdown, |_| {
            let count = passes.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if count == 1 { Err(StoreError::Unavailable("store blip".into())) } else { Ok(()) } }
        });
        tokio::join!(work, driver);
    }
}

#[cfg(test)]
mod fenced_tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Default)]
    struct Deposable(Mutex<Vec<FencingToken>>);

    impl Leadership for Deposable {
        fn current(&self) -> Option<FencingToken> {
            crate::runtime::sync::lock(&self.0).is_empty().then_some(FencingToken(4))
        }
        fn fenced(&self, token: FencingToken) {
            crate::runtime::sync::lock(&self.0).push(token);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_pass_steps_the_leader_down_without_degrading_the_component() {
        let (health, leadership, shutdown) =
            (ComponentHealth::new("test"), Deposable::default(), CancellationToken::new());
        let runner = LeaderLoop {
            pass: "test pass",
            interval: Duration::from_secs(1),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            health: &health,
            leadership: &leadership,
        };
        let passes = std::sync::atomic::AtomicU32::new(0);
        let driver = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            shutdown.cancel();
        };
        let work = runner.run(&shutdown, |token| {
            passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Err::<(), _>(StoreError::Fenced { token, newest: FencingToken(5) }) }
        });
        tokio::join!(work, driver);
        assert_eq!(passes.load(std::sync::atomic::Ordering::SeqCst), 1, "no pass after stepping down");
        assert_eq!(*crate::runtime::sync::lock(&leadership.0), [FencingToken(4)]);
        assert!(health.report().problem.is_none(), "being fenced is not a failure of the component");
    }
}
