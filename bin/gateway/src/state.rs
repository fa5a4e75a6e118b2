//! What every request handler may use: the components, the bus, the store (for readiness), and the limit on open
//! operator event streams (agent streams are gateway-auth's to count).

use std::sync::Arc;

use gateway_auth::Auth;
use gateway_core::{Clock, ComponentHealth, DecisionLogIntake};
use gateway_cron::{CronScheduler, Mailbox, ReminderTools};
use gateway_heartbeat::HeartbeatManager;
use gateway_pubsub::Bus;
use gateway_store::DieselStore;
use gateway_webhooks::{DeliveryRetention, WebhookRouter};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use gateway_pubsub::stream::{SharedFires, StreamLimits};

use crate::cluster::Cluster;
use crate::stats::Metrics;

#[derive(Debug)]
pub(crate) struct AppState {
    /// Who a caller is and what it may do: agent tokens (`--agent-auth`), the operator token, per-agent rate
    /// limits and stream caps.
    pub(crate) auth: Auth,
    pub(crate) store: DieselStore,
    /// Where subscribers of this instance listen.
    pub(crate) bus: Bus,
    /// With Redis: the event bridge's state, whose reconnects make agent streams catch up from the mailbox.
    pub(crate) bridge_status: Option<tokio::sync::watch::Receiver<gateway_pubsub::bridge::BridgeStatus>>,
    /// With Redis: the event bridge, for its counters.
    pub(crate) bridge: Option<gateway_pubsub::bridge::RedisBridge>,
    /// With Redis: what hands every recorded fire to this instance's streams, for its counters.
    pub(crate) feed: Option<gateway_cron::MailboxFeed>,
    pub(crate) heartbeat: HeartbeatManager,
    pub(crate) webhooks: WebhookRouter,
    pub(crate) cron: CronScheduler,
    /// Fired reminders kept for their agents: what agent streams replay.
    pub(crate) mailbox: Mailbox,
    /// What `POST /gateway/messages` hands each body to.
    pub(crate) intake: DecisionLogIntake,
    /// The agents' reminder tools (`POST /gateway/tools/{tool_name}`).
    pub(crate) tools: ReminderTools,
    /// The MCP server of `/mcp`: its sessions (gateway-mcp).
    pub(crate) mcp: gateway_mcp::McpServer,
    /// The tools as MCP's `tools/list` shows them (http/mcp.rs).
    pub(crate) mcp_tools: Vec<gateway_mcp::ToolDescriptor>,
    pub(crate) retention: DeliveryRetention,
    /// This instance's place in its cluster (`/gateway/cluster`, `/readyz`).
    pub(crate) cluster: Cluster,
    pub(crate) clock: Arc<dyn Clock>,
    /// Cancelled when shutdown begins: event streams end, in-flight requests finish.
    pub(crate) shutdown: CancellationToken,
    /// Open `gateway:*` streams.
    pub(crate) operator_event_streams: Arc<Semaphore>,
    /// The fires agent streams hold, one copy each for all of them.
    pub(crate) shared_fires: Arc<SharedFires>,
    pub(crate) stream_limits: StreamLimits,
    /// The edge: request-body budget, connections per address, the loopback rules (gateway-edge).
    pub(crate) edge: gateway_edge::Edge,
    /// What `GET /metrics` reads besides the components' own counts.
    pub(crate) metrics: Metrics,
}

impl AppState {
    /// The loops `/readyz` reports on.
    pub(crate) fn components(&self) -> Vec<ComponentHealth> {
        let [receipts, mailbox_retention] = self.mailbox.health();
        vec![
            self.heartbeat.health(),
            self.webhooks.health(),
            self.cron.health(),
            self.retention.health(),
            receipts,
            mailbox_retention,
            self.tools.health(),
            self.auth.health(),
        ]
    }
}
