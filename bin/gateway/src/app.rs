//! Wiring: concrete adapters handed to the components, their loops spawned under a supervisor, and stopped again
//! on shutdown.

use std::sync::Arc;

use gateway_core::{
    Clock, InMemoryCapabilityMap, InMemoryLiveness, Leadership, SingleProcessLeadership, SlidingWindowRate,
    SystemClock, supervise_loop,
};
use gateway_cron::{CronConfig, CronPorts, CronScheduler};
use gateway_heartbeat::{HeartbeatManager, HeartbeatPorts};
use gateway_pubsub::Bus;
use gateway_store::{DieselStore, WalCheckpointer};
use gateway_webhooks::{DeliveryRetention, RetentionPorts, RouterPorts, UreqTransport, WebhookRouter};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::StartError;
use crate::cluster::SingleInstance;
use crate::config::{AdminToken, Config};
use crate::http::auth::OperatorAuth;
use crate::state::{AppState, MAX_EVENT_STREAMS, MAX_OPERATOR_EVENT_STREAMS};

/// At shutdown, webhook attempts in flight get their timeout plus this to finish and record their outcome.
pub const WEBHOOK_DRAIN_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The running application: shared state plus its background loops.
#[derive(Debug)]
pub struct App {
    state: Arc<AppState>,
    loops: JoinSet<()>,
    /// The loops' own stop signal, cancelled only after HTTP has drained: a request still in flight when
    /// shutdown begins must find the components running.
    stop_loops: CancellationToken,
    /// Keeps SQLite's WAL short off the commit paths; stopped (by drop) after the loops, before the store closes.
    wal_checkpointer: Option<WalCheckpointer>,
}

impl App {
    /// Builds the components on `store` and spawns their loops. `shutdown` ends the HTTP side (event streams
    /// included); the loops run until [`App::stop`].
    pub fn start(
        config: &Config,
        store: DieselStore,
        admin_token: &AdminToken,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        if config.webhook_allow_private_targets {
            tracing::warn!(
                "--webhook-allow-private-targets is set: the SSRF guard is off, and outbound webhooks may reach \
                 loopback, private and link-local addresses (cloud metadata included)"
            );
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let leadership: Arc<dyn Leadership> = Arc::new(SingleProcessLeadership);
        let bus = Bus::default();
        let heartbeat_config = config.heartbeat();
        let heartbeat = HeartbeatManager::new(
            HeartbeatPorts {
                liveness: Arc::new(InMemoryLiveness::new(heartbeat_config.max_tracked_agents)),
                store: Arc::new(store.clone()),
                capabilities: Arc::new(InMemoryCapabilityMap::new(heartbeat_config.max_tracked_agents)),
                publisher: Arc::new(bus.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            heartbeat_config,
        );
        let cron = CronScheduler::new(
            CronPorts {
                store: Arc::new(store.clone()),
                publisher: Arc::new(bus.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            CronConfig::default(),
        );
        let webhooks = WebhookRouter::new(
            RouterPorts {
                store: Arc::new(store.clone()),
                transport: Arc::new(UreqTransport::new(config.webhook_transport())),
                publisher: Arc::new(bus.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
                rate: Arc::new(SlidingWindowRate::per_second(config.webhook_max_per_second())),
            },
            config.webhook_router(),
        );

        let retention = DeliveryRetention::new(
            RetentionPorts {
                store: Arc::new(store.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.retention(),
        );

        let stop_loops = CancellationToken::new();
        let mut loops = JoinSet::new();
        loops.spawn(supervise_loop(heartbeat.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(webhooks.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(cron.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(retention.clone(), stop_loops.clone()));

        let wal_checkpointer =
            store.start_wal_checkpointer(gateway_store::CHECKPOINT_INTERVAL).map_err(StartError::Thread)?;
        let state = AppState {
            operator: OperatorAuth::new(admin_token.expose()).map_err(|_| StartError::Entropy)?,
            store,
            bus,
            heartbeat,
            webhooks,
            cron,
            retention,
            cluster: Arc::new(SingleInstance { instance_id: config.instance_id(), since: clock.now() }),
            clock,
            shutdown,
            event_streams: Arc::new(Semaphore::new(MAX_EVENT_STREAMS)),
            operator_event_streams: Arc::new(Semaphore::new(MAX_OPERATOR_EVENT_STREAMS)),
        };
        Ok(Self { state: Arc::new(state), loops, stop_loops, wal_checkpointer: Some(wal_checkpointer) })
    }

    pub fn state(&self) -> Arc<AppState> {
        Arc::clone(&self.state)
    }

    /// Stops the loops and waits for each to finish.
    pub async fn stop(mut self) {
        self.stop_loops.cancel();
        while let Some(outcome) = self.loops.join_next().await {
            if let Err(error) = outcome {
                tracing::error!(%error, "a background loop's supervisor ended abnormally");
            }
        }
        // Webhook attempts in flight finish (each is bounded by its timeout) and record their outcome before the
        // store goes away; one still running past that is due again when its claim ends.
        let webhooks = &self.state.webhooks;
        let drain = webhooks.router_config().attempt_timeout + WEBHOOK_DRAIN_MARGIN;
        if tokio::time::timeout(drain, webhooks.wait_idle()).await.is_err() {
            tracing::warn!("webhook attempts still running at shutdown; they will be retried after restart");
        }
        drop(self.wal_checkpointer.take());
    }
}
