//! One async connection to Redis, made on first use and made again after a failure: the adapters' loops never
//! hold a dead connection, and every command has a time limit, so a Redis that hangs costs a timeout, not a stuck
//! loop.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};
use tokio::sync::Mutex;

use crate::Error;

#[derive(Debug)]
pub(crate) struct AsyncLink {
    client: Client,
    connection: Mutex<Option<MultiplexedConnection>>,
}

impl AsyncLink {
    pub(crate) fn new(client: Client) -> Self {
        Self { client, connection: Mutex::new(None) }
    }

    /// Runs `command` on the connection (made first if there is none), within `limit` all told. A failure that says
    /// Redis is unreachable, or a timeout, drops the connection so the next call makes a fresh one.
    pub(crate) async fn run<T, F, Fut>(&self, limit: Duration, command: F) -> Result<T, Error>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        let attempt = async {
            let connection = self.connection().await?;
            command(connection).await.map_err(Error::from)
        };
        let outcome = match tokio::time::timeout(limit, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Timeout(limit)),
        };
        if outcome.as_ref().is_err_and(Error::is_unreachable) {
            *self.connection.lock().await = None;
        }
        outcome
    }

    async fn connection(&self) -> Result<MultiplexedConnection, Error> {
        let mut held = self.connection.lock().await;
        if let Some(connection) = held.as_ref() {
            return Ok(connection.clone());
        }
        // The caller's `limit` bounds connecting and every command (in `run`); redis-rs's own defaults would cut a
        // command at 500 ms whatever the caller allowed.
        let config = AsyncConnectionConfig::new().set_connection_timeout(None).set_response_timeout(None);
        let connection = self.client.get_multiplexed_async_connection_with_config(&config).await?;
        *held = Some(connection.clone());
        Ok(connection)
    }
}
