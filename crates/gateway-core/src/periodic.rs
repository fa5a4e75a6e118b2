//! The loop shape of timed work done only by the leader: a pass every interval (the first at once), skipped while
//! another instance leads; a failed pass marks the component degraded and backs off (capped) before the next, and
//! nothing but `shutdown` ends the loop (H-4 and H-5 in docs/requirements.md).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::backoff::capped_backoff;
use crate::health::ComponentHealth;
use crate::ports::Leadership;

/// One leader-only periodic loop.
#[derive(Debug)]
pub struct LeaderLoop<'a> {
    /// What a pass is, for the warning when one fails ("webhook poll").
    pub pass: &'static str,
    pub interval: Duration,
    /// The first pause after a failed pass, doubled per failure in a row, at most `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    pub health: &'a ComponentHealth,
    pub leadership: &'a dyn Leadership,
}

impl LeaderLoop<'_> {
    /// Runs `pass` every interval until `shutdown`, holding the component's running guard meanwhile.
    pub async fn run<F, Fut, E>(&self, shutdown: &CancellationToken, mut pass: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let _running = self.health.start();
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut failures: u32 = 0;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            if self.leadership.current().is_none() {
                continue;
            }
            match pass().await {
                Ok(()) => {
                    failures = 0;
                    self.health.recovered();
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
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use super::*;
    use crate::ports::FencingToken;

    #[derive(Debug, Default)]
    struct Switch(AtomicBool);

    impl Leadership for Switch {
        fn current(&self) -> Option<FencingToken> {
            self.0.load(Ordering::SeqCst).then_some(FencingToken(1))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn passes_run_at_once_then_every_interval_only_while_leader_and_failures_back_off() {
        let health = ComponentHealth::new("test");
        let leadership = Switch::default();
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
        let driver = async {
            // Not leader for the first two ticks: no pass.
            tokio::time::sleep(Duration::from_secs(15)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 0);
            leadership.0.store(true, Ordering::SeqCst);
            // Ticks at 20 s (fails: degraded, 1 s backoff), 30 s (fails, 2 s), 40 s (works).
            tokio::time::sleep(Duration::from_secs(6)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 1);
            assert!(health.report().problem.as_deref().is_some_and(|problem| problem.starts_with("test pass failed")));
            tokio::time::sleep(Duration::from_secs(20)).await;
            assert_eq!(passes.load(Ordering::SeqCst), 3);
            assert!(health.report().healthy);
            shutdown.cancel();
        };
        let work = runner.run(&shutdown, || {
            let count = passes.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if count < 3 { Err("store down") } else { Ok(()) } }
        });
        tokio::join!(work, driver);
        assert!(started.elapsed() >= Duration::from_secs(41));
        assert!(!health.is_running(), "the guard is dropped when the loop ends");
    }
}
