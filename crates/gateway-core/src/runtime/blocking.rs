//! The one bridge from async code to the synchronous ports.
//!
//! Storage ports are synchronous (Diesel is), so async callers must never call them on a runtime worker: a slow
//! disk or a busy SQLite lock would stall every task on that worker. They go through [`run_blocking`] instead.

/// Error of [`run_blocking`] when the blocking task could not complete (it panicked or the runtime is
/// shutting down).
#[derive(Debug, thiserror::Error)]
#[error("blocking task did not complete: {0}")]
pub struct BlockingTaskFailed(String);

/// Runs `work` on tokio's blocking pool and waits for it.
pub async fn run_blocking<T, F>(work: F) -> Result<T, BlockingTaskFailed>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|join_error| BlockingTaskFailed(join_error.to_string()))
}
