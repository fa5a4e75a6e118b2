use std::future::Future;
use std::time::Duration;

use gateway_redis::LeaseTimings;
use tokio::time::Instant;

/// How long a test waits for something that should happen (generous: the machine may be busy).
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Polls `check` every 10 ms until it answers `Some`, for at most [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A plain connection for what the tests do to Redis behind the adapters' backs.
pub async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The default lease timings divided by 20 (30 s / 10 s / 20 s become 1.5 s / 0.5 s / 1 s), with a follower trying
/// every 100 ms.
pub fn small() -> LeaseTimings {
    LeaseTimings {
        ttl: Duration::from_millis(1500),
        renew_interval: Duration::from_millis(500),
        renew_retry: Duration::from_millis(100),
        step_down_after: Duration::from_millis(1000),
        max_failed_renewals: 3,
        acquire_interval: Duration::from_millis(100),
        clock_drift_margin: Duration::from_millis(50),
        command_timeout: Duration::from_millis(250),
    }
}
