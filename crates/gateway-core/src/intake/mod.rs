//! The DecisionLog intake: what the gateway does with the body of `POST /gateway/messages`, whoever serves it
//! (the HTTP binary, an embedder).
//!
//! The body goes through the [`SchemaInterceptor`](interceptor::SchemaInterceptor), which validates it into a typed
//! [`DecisionLog`](decision_log::DecisionLog) ([`decision_log`]; valid bodies are read straight into typed fields by
//! [`direct_json`], several times cheaper than through a JSON value). A valid log has its identity noted in the
//! capability map, its `schedule_reminder` call (if any) handed to the [`ReminderDesk`] and awaited, and only then
//! is it published on `gateway:messages` (FR-10.7, docs/requirements.md: the reminder is handed to the scheduler
//! before the log is published). Whatever happens to the reminder, the log is accepted: a reminder that cannot be
//! scheduled is a warning in the log, never an error to the agent. A log that breaks the schema is refused, and a
//! `schema_violation` event carrying only the body's hash is published on `gateway:violations`.
//!
//! Here rather than in the binary so that every embedder gets the same rules, and here rather than in a component
//! crate because it joins three of them (the scheduler, the heartbeat manager's capability map, the bus), which
//! may not depend on each other: it reaches each through a small trait of this crate (docs/architecture.md).

pub mod decision_log;
pub mod direct_json;
pub mod interceptor;
mod receive;

pub use receive::{
    AcceptedReceipt, BoxFuture, DecisionLogIntake, InspectedLog, IntakePorts, ReminderDesk, ReminderNotScheduled,
    ReminderRefusal, ScheduledReminder, Settling,
};
