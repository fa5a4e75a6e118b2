//! gateway-core: the agent gateway's domain types, the DecisionLog and its SchemaInterceptor, the ports every
//! component talks through, and in-memory implementations of those ports.
//!
//! Each port lives in one module together with its types and its in-memory implementation, so a port and its
//! fake are found in one place:
//!
//! | module | port | in-memory implementation |
//! | --- | --- | --- |
//! | [`heartbeat`] | [`HeartbeatStore`] | [`InMemoryHeartbeatStore`] |
//! | [`cron`] | [`CronJobStore`] | [`InMemoryCronJobStore`] |
//! | [`mailbox`] | [`MailboxStore`] | [`InMemoryCronJobStore`] (a fire is recorded by the write that completes it) |
//! | [`tool_call`] | [`ToolCallStore`] | [`InMemoryToolCallStore`] |
//! | [`storage`] | [`AgentStorage`] | [`InMemoryAgentStorage`] (over the two above) |
//! | [`webhook`] | [`WebhookStore`], [`WebhookTransport`] | [`InMemoryWebhookStore`], [`FakeTransport`] |
//! | [`liveness`] | [`LivenessMap`] | [`InMemoryLiveness`] |
//! | [`capability`] | [`CapabilityMap`], [`CapabilityNotes`] | [`InMemoryCapabilityMap`] |
//! | [`event`] | [`EventPublisher`] | [`RecordingPublisher`] |
//! | [`rate`] | [`DispatchRate`] | [`SlidingWindowRate`] |
//! | [`rate_limit`] | [`RateLimiter`] | [`FixedWindowLimiter`] |
//! | [`credential`] | [`AgentCredentialStore`] | [`InMemoryAgentCredentialStore`] |
//! | [`admin_token`] | [`AdminTokenStore`] | [`InMemoryAdminTokenStore`] |
//! | [`clock`] | [`Clock`] | [`ManualClock`] (and [`SystemClock`]) |
//! | [`leadership`] | [`Leadership`], [`FencingEpoch`] | [`SingleProcessLeadership`], [`SoleLeadership`], [`SwitchableLeadership`], [`EpochGate`] |
//!
//! [`intake`] holds the DecisionLog intake, [`DecisionLogIntake`], which reaches the scheduler through its
//! [`ReminderDesk`] trait.
//!
//! What the store ports share ([`StoreError`], [`StoreHealth`], [`FencingToken`]) is in [`store`]; what the fakes share
//! ([`sync::lock`], [`sync::FailureSwitch`]) in [`sync`]. With the `conformance` feature, `conformance` holds the rules
//! every implementation of a port must keep, one suite per store port and per coordination port ([`Leadership`],
//! [`RateLimiter`], [`DispatchRate`], [`EventPublisher`]), for adapters' tests.
//!
//! Component crates (heartbeat, cron, webhooks, pubsub) and the storage crate depend on this crate and on
//! nothing else of the workspace.

pub mod admin_token;
pub mod backoff;
pub mod blocking;
pub mod capability;
pub mod clock;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod credential;
pub mod cron;
pub mod decision_log;
pub mod direct_json;
pub mod event;
pub mod group_commit;
pub mod health;
pub mod heartbeat;
pub mod hex;
pub mod ids;
pub mod intake;
pub mod interceptor;
pub mod leadership;
pub mod liveness;
pub mod mailbox;
pub mod periodic;
pub mod rate;
pub mod rate_limit;
pub mod rfc3339;
pub mod stats;
pub mod storage;
pub mod store;
pub mod supervisor;
pub mod sync;
pub mod tool_call;
pub mod webhook;

pub use admin_token::{AdminTokenRecord, AdminTokenStore, InMemoryAdminTokenStore};
pub use backoff::capped_backoff;
pub use blocking::run_blocking;
pub use capability::{CapabilityEntry, CapabilityMap, CapabilityNotes, InMemoryCapabilityMap};
pub use clock::{Clock, ManualClock, SystemClock};
pub use credential::{
    AgentCredentialStore, CredentialId, CredentialKey, CredentialRecord, InMemoryAgentCredentialStore, IssuedToken,
    PresentedToken, TokenHash,
};
pub use cron::{
    ClaimLease, CronJob, CronJobInsert, CronJobStore, FireCompletion, FireKey, InMemoryCronJobStore, NewCronJob,
    PendingFire,
};
pub use decision_log::{DecisionLog, SchemaViolation};
pub use event::{Event, EventPayload, EventPublisher, PublishError, RecordingPublisher, Topic};
pub use health::{ComponentHealth, HealthReport, RunningGuard};
pub use heartbeat::{HeartbeatRecord, HeartbeatStore, InMemoryHeartbeatStore};
pub use ids::{AgentId, ClusterId, CompactAgentId, INLINE_AGENT_ID_BYTES, IdError, IdempotencyKey, ToolCallId};
pub use intake::{
    AcceptedReceipt, DecisionLogIntake, InspectedLog, IntakePorts, ReminderDesk, ReminderNotScheduled, ReminderRefusal,
    ScheduledReminder, Settling,
};
pub use interceptor::{AcceptedLog, Rejection, ReminderRequest, ReminderRequestError, SchemaInterceptor};
pub use leadership::{
    EpochGate, FencingEpoch, FencingToken, Leadership, SingleProcessLeadership, SoleLeadership, SwitchableLeadership,
};
pub use liveness::{InMemoryLiveness, LiveEntry, LivenessMap, LivenessRefusal};
pub use mailbox::{FiredReminder, MailboxEntry, MailboxQuery, MailboxStore, Receipt};
pub use periodic::{LeaderLoop, MaybeFenced, PruningPass};
pub use rate::{DispatchRate, RateTicket, SlidingWindowRate};
pub use rate_limit::{FixedWindowLimiter, RateDecision, RateLimiter};
pub use storage::{AgentStorage, InMemoryAgentStorage, STORED_ROW_CHARGE_BYTES};
pub use store::{StoreError, StoreHealth};
pub use supervisor::{BackgroundLoop, supervise, supervise_loop};
pub use tool_call::{InMemoryToolCallStore, ToolCallRecord, ToolCallStore};
pub use webhook::{
    AttemptOutcome, AttemptRecord, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, DeliveryUpdate,
    DueDelivery, FailureClass, FakeTransport, InMemoryWebhookStore, InboundInsert, NewDelivery, NewWebhookConfig,
    OutboundRequest, ReceiptKey, RetryNowOutcome, UnknownDeliveryStatus, WebhookConfig, WebhookConfigChange,
    WebhookSecret, WebhookStore, WebhookTransport,
};
