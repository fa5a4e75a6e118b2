#![doc = include_str!("../README.md")]

pub mod encoding;
pub mod ids;
pub mod intake;
pub mod ports;
pub mod runtime;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

// The domain types every crate names, and the intake.
pub use ids::{AgentId, ClusterId, CompactAgentId, INLINE_AGENT_ID_BYTES, IdError, IdempotencyKey, ToolCallId};
pub use intake::decision_log::{DecisionLog, DirectLog, SchemaViolation};
pub use intake::interceptor::{
    AcceptedLog, ReadLog, RejectedLog, Rejection, ReminderRequest, ReminderRequestError, SchemaInterceptor,
};
pub use intake::{
    AcceptedReceipt, DecisionLogIntake, InspectedLog, IntakePorts, ReminderDesk, ReminderNotScheduled, ReminderRefusal,
    ScheduledReminder, Settling,
};

// Every port, its types and its in-memory implementation.
pub use ports::admin_token::{AdminTokenRecord, AdminTokenStore, InMemoryAdminTokenStore};
pub use ports::capability::{CapabilityEntry, CapabilityMap, CapabilityNotes, InMemoryCapabilityMap};
pub use ports::clock::{Clock, ManualClock, SystemClock};
pub use ports::credential::{
    AgentCredentialStore, CredentialId, CredentialKey, CredentialRecord, InMemoryAgentCredentialStore, IssuedToken,
    PresentedToken, TokenHash,
};
pub use ports::cron::{
    ClaimLease, CronJob, CronJobInsert, CronJobStore, DEFAULT_TIMEZONE, FireCompletion, FireKey, InMemoryCronJobStore,
    NewCronJob, PendingFire,
};
pub use ports::event::{Event, EventPayload, EventPublisher, PacedPublish, PublishError, RecordingPublisher, Topic};
pub use ports::heartbeat::{HeartbeatRecord, HeartbeatStore, InMemoryHeartbeatStore};
pub use ports::history::{HistoryPoint, HistorySeries, HistoryStore, InMemoryHistoryStore};
pub use ports::leadership::{
    EpochGate, FencingEpoch, FencingToken, Leadership, SingleProcessLeadership, SoleLeadership, SwitchableLeadership,
};
pub use ports::liveness::{InMemoryLiveness, LiveEntry, LivePage, LivenessMap, LivenessRefusal};
pub use ports::mailbox::{FiredReminder, MailboxEntry, MailboxQuery, MailboxStore, Receipt};
pub use ports::rate::{DispatchRate, EndpointRate, InProcessEndpointRate, RateTicket, SlidingWindowRate};
pub use ports::rate_limit::{FixedWindowLimiter, RateDecision, RateLimiter};
pub use ports::replay::{InMemoryCursor, InMemoryReplaySource, ReplaySource};
pub use ports::runs::{CronJobRun, MisfirePolicy, RunOutcome, SkippedRun};
pub use ports::storage::{AgentStorage, InMemoryAgentStorage, STORED_ROW_CHARGE_BYTES};
pub use ports::store::{StoreError, StoreHealth};
pub use ports::tool_call::{InMemoryToolCallStore, ToolCallRecord, ToolCallStore};
pub use ports::webhook::{
    AttemptOutcome, AttemptRecord, AttemptRecorded, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryMaker,
    DeliveryStatus, DeliveryUpdate, DisabledReason, DueDelivery, EndpointDisabled, EndpointStats, FailureClass,
    FakeTransport, FanOut, InMemoryWebhookStore, InboundInsert, InsertedToConfig, NewDelivery, NewWebhookConfig,
    NewWebhookEvent, OutboundRequest, ReceiptKey, RecoverWindow, RetryNowOutcome, UnknownDeliveryStatus,
    WILDCARD_EVENT_TYPE, WebhookConfig, WebhookConfigChange, WebhookEvent, WebhookSecret, WebhookStore,
    WebhookTransport, insert_deliveries_reading_configs,
};

// What every component calls to run its work.
pub use runtime::address::AddressKey;
pub use runtime::backoff::capped_backoff;
pub use runtime::blocking::run_blocking;
pub use runtime::group_commit::GroupCommit;
pub use runtime::health::{ComponentHealth, HealthReport, RunningGuard};
pub use runtime::periodic::{LeaderLoop, MaybeFenced, PruningPass};
pub use runtime::supervisor::{BackgroundLoop, supervise, supervise_loop};
