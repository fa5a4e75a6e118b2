use std::time::Duration;

use gateway_core::StoreError;

/// What can go wrong between the gateway and Redis.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration the adapter refuses at construction (timings in the wrong order, an empty instance id).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time; the connection is dropped and made again on the next call.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered something the adapter's scripts never return (another program uses the same keys).
    #[error("unexpected reply from redis: {0}")]
    Reply(String),
    /// The store could not tell its newest fencing token, so no leadership may start.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl Error {
    /// Whether the failure says Redis is unreachable (as opposed to a refusal or a bug).
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Redis(error) => {
                error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
                    || error.is_timeout()
                    || error.is_unrecoverable_error()
            }
            Self::Config(_) | Self::Reply(_) | Self::Store(_) => false,
        }
    }
}

/// Checks an instance id: what identifies this process in Redis keys and values.
pub(crate) fn check_instance_id(instance_id: &str) -> Result<(), Error> {
    if instance_id.is_empty() || instance_id.len() > 256 {
        return Err(Error::Config("the instance id must be 1 to 256 bytes".into()));
    }
    if instance_id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::Config("the instance id must not contain whitespace or control characters".into()));
    }
    Ok(())
}
