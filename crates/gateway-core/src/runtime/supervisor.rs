//! Keeps a background loop alive: a loop that panics is restarted after a capped backoff, so the API never keeps
//! accepting work (reminders, deliveries) for a loop that is gone (H-4 and H-5 in docs/requirements.md: loops never
//! die, backoff is bounded).
//!
//! While a loop is down, its `RunningGuard` is dropped and its component reports itself stopped: `/readyz` says
//! so until the restart.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::runtime::backoff::capped_backoff;

/// Pause before the first restart; doubled per panic in a row up to [`RESTART_MAX`].
pub const RESTART_INITIAL: Duration = Duration::from_millis(100);
/// Longest pause between restarts.
pub const RESTART_MAX: Duration = Duration::from_secs(30);
/// A loop that ran this long before it panicked starts again from [`RESTART_INITIAL`]: it was not crash-looping.
pub const STABLE_RUN: Duration = Duration::from_secs(60);

/// The shape every component's background loop has: a cheap-to-clone handle whose `run` works until `shutdown`
/// is cancelled (and returns then, never before), catching and backing off from its own errors.
pub trait BackgroundLoop: Clone + Send + Sync + 'static {
    /// The loop's name in logs.
    fn name(&self) -> &'static str;
    fn run(&self, shutdown: CancellationToken) -> impl Future<Output = ()> + Send;
}

/// [`supervise`] for a component: its loop runs until `shutdown`, restarted after any panic.
pub async fn supervise_loop<L: BackgroundLoop>(component: L, shutdown: CancellationToken) {
    let name = component.name();
    let stop = shutdown.clone();
    supervise(name, shutdown, move || {
        let (component, stop) = (component.clone(), stop.clone());
        async move { component.run(stop).await }
    })
    .await;
}

/// Runs the loop `start` makes, in its own task, until it returns (it does when `shutdown` is cancelled) or
/// `shutdown` is cancelled during a pause; after a panic it logs and starts a new one.
pub async fn supervise<F, Fut>(name: &'static str, shutdown: CancellationToken, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut panics_in_a_row: u32 = 0;
    loop {
        let started = Instant::now();
        match tokio::spawn(start()).await {
            Ok(()) => return,
            Err(error) if error.is_panic() => {
                if started.elapsed() >= STABLE_RUN {
                    panics_in_a_row = 0;
                }
                panics_in_a_row = panics_in_a_row.saturating_add(1);
                let pause = capped_backoff(RESTART_INITIAL, RESTART_MAX, panics_in_a_row);
                tracing::error!(
                    background_loop = name,
                    %error,
                    panics_in_a_row,
                    restart_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "background loop panicked; restarting it"
                );
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            // Cancelled: the runtime is shutting down.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_panicking_loop_is_restarted_with_growing_pauses_until_it_runs() {
        let starts = Arc::new(AtomicU32::new(0));
        let shutdown = CancellationToken::new();
        let began = Instant::now();
        let supervisor = tokio::spawn({
            let (starts, shutdown) = (Arc::clone(&starts), shutdown.clone());
            supervise("test", shutdown.clone(), move || {
                let (starts, shutdown) = (Arc::clone(&starts), shutdown.clone());
                async move {
                    if starts.fetch_add(1, Ordering::SeqCst) < 3 {
                        panic!("loop bug");
                    }
                    shutdown.cancelled().await;
                }
            })
        });
        while starts.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Three panics: pauses of 100, 200 and 400 ms before the fourth start.
        let elapsed = began.elapsed();
        assert!(elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(800), "{elapsed:?}");
        shutdown.cancel();
        supervisor.await.unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_during_a_pause_ends_the_supervisor() {
        let shutdown = CancellationToken::new();
        let supervisor = tokio::spawn(supervise("test", shutdown.clone(), || async { panic!("always") }));
        tokio::time::sleep(Duration::from_millis(50)).await;
        shutdown.cancel();
        supervisor.await.unwrap();
    }
}
