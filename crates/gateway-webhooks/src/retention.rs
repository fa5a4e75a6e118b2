//! Retention: delivered and dead deliveries older than `--retention-days`, with their attempts and idempotency
//! keys, and inbound receipts older than the replay window (24 h), are pruned by a background loop, so the
//! delivery tables do not grow forever. Pending and failed deliveries are never pruned, however old: they still
//! have work to do.
//!
//! Each pass deletes in small batches, one short transaction each with a pause between them, so other writers
//! (heartbeats, enqueues) never wait behind a large delete.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::{BackgroundLoop, Clock, ComponentHealth, LeaderLoop, Leadership, PruningPass, WebhookStore};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::error::WebhookError;
use crate::replay::INBOUND_REPLAY_WINDOW;

/// How long finished deliveries are kept (default of `--retention-days`: 30 days).
pub const RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// How often a pass runs (the first at start).
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(3_600);
/// Deliveries deleted per transaction.
pub const PRUNE_BATCH: usize = 500;
/// Pause between two batches of one pass.
pub const PRUNE_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct RetentionPorts {
    pub store: Arc<dyn WebhookStore>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    pub retention: Duration,
    pub interval: Duration,
    pub batch_size: usize,
    pub pause: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { retention: RETENTION, interval: PRUNE_INTERVAL, batch_size: PRUNE_BATCH, pause: PRUNE_PAUSE }
    }
}

/// The pruning loop. Cheap to clone; run its loop ([`run`](gateway_core::BackgroundLoop::run)) once (on the leader,
/// when there are several instances).
#[derive(Debug, Clone)]
pub struct DeliveryRetention {
    ports: RetentionPorts,
    config: RetentionConfig,
    health: ComponentHealth,
}

impl DeliveryRetention {
    pub fn new(ports: RetentionPorts, mut config: RetentionConfig) -> Self {
        config.batch_size = config.batch_size.max(1);
        config.interval = config.interval.max(Duration::from_millis(1));
        Self { ports, config, health: ComponentHealth::new("webhook_retention") }
    }

    pub fn health(&self) -> ComponentHealth {
        self.health.clone()
    }

    /// How long finished deliveries are kept: the longest window a recover may take.
    pub fn retention(&self) -> Duration {
        self.config.retention
    }

    /// One pass: batches until none is full. Returns how many deliveries went.
    pub async fn prune_once(&self, shutdown: &CancellationToken) -> Result<usize, WebhookError> {
        let pass = PruningPass {
            now: self.ports.clock.now(),
            retention: self.config.retention,
            batch: self.config.batch_size,
            pause: self.config.pause,
            short_batch_ends: true,
        };
        let store = Arc::clone(&self.ports.store);
        Ok(pass.run(shutdown, move |cutoff, limit| store.prune_finished_deliveries(cutoff, limit)).await?)
    }

    /// One pass over inbound receipts: those older than [`INBOUND_REPLAY_WINDOW`] no longer make anything a
    /// duplicate and go, in batches. Returns how many went.
    pub async fn prune_receipts_once(&self, shutdown: &CancellationToken) -> Result<usize, WebhookError> {
        let pass = PruningPass {
            now: self.ports.clock.now(),
            retention: Duration::try_from(INBOUND_REPLAY_WINDOW).unwrap_or(Duration::from_secs(86_400)),
            batch: self.config.batch_size,
            pause: self.config.pause,
            short_batch_ends: true,
        };
        let store = Arc::clone(&self.ports.store);
        Ok(pass.run(shutdown, move |cutoff, limit| store.prune_inbound_receipts(cutoff, limit)).await?)
    }
}

impl BackgroundLoop for DeliveryRetention {
    fn name(&self) -> &'static str {
        "webhook_retention"
    }

    /// A pass every interval (the first at once), only while leader; failures back off (capped) and never stop
    /// the loop.
    async fn run(&self, shutdown: CancellationToken) {
        let passes = LeaderLoop {
            pass: "pruning webhook deliveries",
            interval: self.config.interval,
            first_backoff: self.config.pause,
            max_backoff: gateway_core::runtime::periodic::MAX_PRUNE_BACKOFF,
            health: &self.health,
            leadership: self.ports.leadership.as_ref(),
        };
        passes
            .run(&shutdown, |_| async {
                let pruned = self.prune_once(&shutdown).await?;
                if pruned > 0 {
                    let retention_days = self.config.retention.as_secs() / 86_400;
                    info!(pruned, retention_days, "old webhook deliveries pruned");
                }
                let receipts = self.prune_receipts_once(&shutdown).await?;
                if receipts > 0 {
                    info!(pruned = receipts, "inbound webhook receipts older than the replay window pruned");
                }
                Ok::<_, WebhookError>(())
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::{
        DeliveryStatus, InMemoryWebhookStore, ManualClock, NewDelivery, NewWebhookConfig, SingleProcessLeadership,
        WebhookSecret,
    };

    use super::*;

    fn delivery(webhook_id: i64, created_at: time::OffsetDateTime) -> NewDelivery {
        NewDelivery {
            webhook_id,
            session_id: "s".into(),
            payload: "{}".into(),
            target_url: "https://example.com/a".into(),
            signature: "sha256=00".into(),
            created_at,
            next_retry_at: created_at,
            idempotency_key: None,
            claimed: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_prunes_old_finished_deliveries_in_batches_and_keeps_the_rest() {
        let clock = ManualClock::at_fixed_start();
        let store = Arc::new(InMemoryWebhookStore::default());
        let config = store
            .create_config(&NewWebhookConfig {
                source_identifier: "github".into(),
                event_type: "push".into(),
                agent_intent: "review".into(),
                target_session: "s".into(),
                target_url: "https://example.com/a".into(),
                secret: WebhookSecret::new("k"),
                created_at: clock.now(),
                inbound_secret: None,
                inbound_require_timestamp: false,
                rate_limit_per_second: None,
            })
            .unwrap();
        let old = clock.now();
        for status in [DeliveryStatus::Delivered, DeliveryStatus::Dead, DeliveryStatus::Failed, DeliveryStatus::Pending]
        {
            for _ in 0..5 {
                let row = store.insert_delivery(&delivery(config.id, old)).unwrap();
                store.put_delivery(gateway_core::Delivery { status, ..row });
            }
        }
        clock.advance(time::Duration::days(31));
        store.insert_delivery(&delivery(config.id, clock.now())).unwrap();
        let retention = DeliveryRetention::new(
            RetentionPorts {
                store: store.clone(),
                clock: Arc::new(clock.clone()),
                leadership: Arc::new(SingleProcessLeadership),
            },
            RetentionConfig { batch_size: 3, interval: Duration::from_secs(1), ..RetentionConfig::default() },
        );
        let shutdown = CancellationToken::new();
        assert_eq!(retention.prune_once(&shutdown).await.unwrap(), 10);
        let left = store.deliveries();
        assert_eq!(left.len(), 11);
        assert!(left.iter().all(|row| row.status.is_awaiting_attempt()), "only pending and failed are left");

        // The loop runs a pass at once, and keeps running after a store failure.
        store.failure.set_failing(true);
        let running = tokio::spawn({
            let (retention, shutdown) = (retention.clone(), shutdown.clone());
            async move { retention.run(shutdown).await }
        });
        while retention.health().report().problem.is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        store.failure.set_failing(false);
        while !retention.health().report().healthy {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        running.await.unwrap();
    }
}
