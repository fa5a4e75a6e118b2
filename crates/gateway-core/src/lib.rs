//! gateway-core: the agent gateway's domain types, the DecisionLog and its SchemaInterceptor, the ports every
//! component talks through, and in-memory implementations of those ports.
//!
//! Component crates (heartbeat, cron, webhooks, pubsub) and the storage crate depend on this crate and on
//! nothing else of the workspace.

pub mod backoff;
pub mod blocking;
pub mod clock;
pub mod cron;
#[cfg(any(test, feature = "conformance"))]
pub mod cron_conformance;
pub mod decision_log;
pub mod direct_json;
pub mod event;
pub mod fencing;
pub mod group_commit;
pub mod health;
pub mod hex;
pub mod ids;
pub mod interceptor;
pub mod liveness;
pub mod memory;
pub mod periodic;
pub mod ports;
pub mod rate;
pub mod rfc3339;
pub mod supervisor;
pub mod webhook;
pub mod webhook_memory;

pub use backoff::capped_backoff;
pub use blocking::run_blocking;
pub use clock::{Clock, ManualClock, SystemClock};
pub use cron::{
    ClaimLease, CronJob, CronJobInsert, CronJobStore, FireCompletion, FireKey, InMemoryCronJobStore, NewCronJob,
    PendingFire,
};
pub use decision_log::{DecisionLog, SchemaViolation};
pub use event::{Event, EventPayload, Topic};
pub use fencing::EpochGate;
pub use health::{ComponentHealth, HealthReport, RunningGuard};
pub use ids::{AgentId, ClusterId, IdError, IdempotencyKey};
pub use interceptor::{AcceptedLog, Rejection, ReminderRequest, ReminderRequestError, SchemaInterceptor};
pub use liveness::{InMemoryLiveness, LiveEntry, LivenessMap, LivenessRefusal};
pub use periodic::{LeaderLoop, MaybeFenced};
pub use ports::{
    CapabilityEntry, CapabilityMap, EventPublisher, FencingEpoch, FencingToken, HeartbeatRecord, HeartbeatStore,
    Leadership, PublishError, SingleProcessLeadership, StoreError, StoreHealth,
};
pub use rate::{DispatchRate, RateTicket, SlidingWindowRate};
pub use supervisor::{BackgroundLoop, supervise, supervise_loop};
pub use webhook::{
    AttemptOutcome, AttemptRecord, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, DeliveryUpdate,
    DueDelivery, FailureClass, NewDelivery, NewWebhookConfig, OutboundRequest, RetryNowOutcome, UnknownDeliveryStatus,
    WebhookConfig, WebhookSecret, WebhookStore, WebhookTransport,
};
