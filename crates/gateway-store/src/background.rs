//! Periodic store work on a thread of its own: blocking I/O kept off the async runtime, with a backoff while it
//! fails and one warning per outage. The WAL checkpointer and the shared liveness map's flusher run on it.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gateway_core::{StoreError, capped_backoff};

/// A thread running one piece of work every interval until the handle is dropped; dropping stops it and waits for
/// it (a pass in progress finishes first).
#[derive(Debug)]
pub struct PeriodicThread {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PeriodicThread {
    /// Runs `work` every `interval` (the first time one interval after the start), or after a capped backoff up to
    /// `retry_max` while it fails. `what` names the work in the two log lines an outage costs.
    pub(crate) fn spawn(
        name: &str,
        what: &'static str,
        interval: Duration,
        retry_max: Duration,
        mut work: impl FnMut() -> Result<(), StoreError> + Send + 'static,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new().name(name.to_owned()).spawn(move || {
            let mut failures: u32 = 0;
            loop {
                let pause = if failures == 0 { interval } else { capped_backoff(interval, retry_max, failures) };
                match stopped.recv_timeout(pause) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                match work() {
                    Ok(()) if failures > 0 => {
                        tracing::info!(failures, "{what} works again");
                        failures = 0;
                    }
                    Ok(()) => {}
                    Err(error) => {
                        failures = failures.saturating_add(1);
                        if failures == 1 {
                            tracing::warn!(%error, "{what} failed; retrying with backoff");
                        }
                    }
                }
            }
        })?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }

    /// A handle with no thread, for work there is nothing to do for.
    pub(crate) fn idle() -> Self {
        Self { stop: None, thread: None }
    }
}

impl Drop for PeriodicThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
