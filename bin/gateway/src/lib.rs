//! The `gateway` binary as a library: configuration, wiring and the HTTP server, so integration tests and
//! embedders can start the real server on a listener they bound themselves.

// What the library shows is what main.rs, the integration tests and the benchmarks use: the flags, starting a
// gateway, tracing's set-up and the route labels of /metrics. The rest is the binary's own (`pub(crate)`, which the
// `unreachable_pub` lint keeps so).
#![warn(unreachable_pub)]

mod app;
mod cluster;
pub mod config;
mod history;
mod http;
mod metrics;
mod state;
mod stats;
pub mod telemetry;

/// The `route` label of each route in `GET /metrics`, in the route table's order, the unmatched label last.
pub use http::ROUTE_NAMES;
/// The `route` label of requests whose path names no route.
pub use stats::UNMATCHED_ROUTE;

use gateway_auth::{AuthError, OperatorToken};
use gateway_core::run_blocking;
use gateway_store::{DieselStore, OpenError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::config::{AdminToken, Config};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("--database-url: {0}")]
    Store(#[from] OpenError),
    #[error("--listen: cannot bind: {0}")]
    Bind(std::io::Error),
    #[error("cannot start a background thread: {0}")]
    Thread(std::io::Error),
    #[error("--redis-url: {0}")]
    Redis(String),
    #[error("start-up task failed: {0}")]
    Task(String),
    #[error("admin token: {0}")]
    AdminToken(#[from] AuthError),
}

impl StartError {
    /// The process's exit code: 2 for what the operator has to change before trying again, as for a bad flag
    /// (config.rs), 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Store(OpenError::InUse { .. }) | Self::Redis(_) => 2,
            _ => 1,
        }
    }
}

/// A gateway whose store is open and migrated and whose loops run, not yet serving HTTP.
#[derive(Debug)]
pub struct Gateway {
    app: App,
    shutdown: CancellationToken,
}

impl Gateway {
    /// Starts with `admin_token` as the operator token (`--admin-token`), as is.
    pub async fn start(
        config: &Config,
        admin_token: &AdminToken,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        let store = Self::open_store(config).await?;
        Self::start_on(config, store, OperatorToken::Given(admin_token.clone()), shutdown).await
    }

    /// Starts with the operator token stored in the database, generating and storing one if there is none yet
    /// (gateway-auth). Returns the token too when this start generated it: it is shown once, by the caller.
    pub async fn start_with_stored_token(
        config: &Config,
        shutdown: CancellationToken,
    ) -> Result<(Self, Option<AdminToken>), StartError> {
        let store = Self::open_store(config).await?;
        let reader = store.clone();
        let resolved =
            run_blocking(move || gateway_auth::resolve_stored_admin_token(&reader, time::OffsetDateTime::now_utc()))
                .await
                .map_err(|error| StartError::Task(error.to_string()))??;
        let gateway = Self::start_on(config, store, resolved.token, shutdown).await?;
        Ok((gateway, resolved.generated))
    }

    async fn open_store(config: &Config) -> Result<DieselStore, StartError> {
        let url = config.database_url.clone();
        let store = run_blocking(move || DieselStore::open(&url))
            .await
            .map_err(|error| StartError::Task(error.to_string()))??;
        if !store.is_sqlite() && config.redis_url.is_none() {
            // Without coordination every gateway is its own leader, with the same fencing token: two of them on
            // one database would both fire every reminder and both poll every webhook retry.
            tracing::warn!(
                "PostgreSQL without --redis-url: this gateway runs as the only instance on this database; do not \
                 start a second one (docs/operations.md)"
            );
        }
        Ok(store)
    }

    async fn start_on(
        config: &Config,
        store: DieselStore,
        operator_token: OperatorToken,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        let app = App::start(config, store, operator_token, shutdown.clone())?;
        let state = app.state();
        let components = state.components();
        let started = async {
            for component in &components {
                component.running().await;
            }
        };
        tokio::time::timeout(LOOP_START_TIMEOUT, started)
            .await
            .map_err(|_| StartError::Task("the background loops did not start".to_owned()))?;
        Ok(Self { app, shutdown })
    }

    /// Serves on `listener` until the shutdown token is cancelled, drains in-flight requests, stops the loops
    /// and closes the store.
    pub async fn serve(self, listener: TcpListener) {
        http::serve(listener, self.app.state(), self.shutdown.clone()).await;
        self.app.stop().await;
        tracing::info!("gateway stopped");
    }
}

/// How long start-up waits for the background loops to run before giving up.
pub const LOOP_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
