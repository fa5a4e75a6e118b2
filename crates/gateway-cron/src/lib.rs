#![doc = include_str!("../README.md")]

mod error;
mod feed;
mod firing;
mod jobs;
mod mailbox;
mod reminders;
mod schedule;
mod scheduler;
mod tools;
mod window;

pub use error::CronError;
pub use feed::{
    FEED_GAP_PATIENCE, FEED_INTERVAL, FEED_MAX_GAPS, FEED_PAGE, FeedStats, MailboxFeed, MailboxFeedConfig,
    MailboxFeedPorts,
};
pub use jobs::{MAX_DELAY_MS, MAX_LIST_LIMIT, fire_id, preview};
pub use mailbox::{
    MAILBOX_CONCURRENT_READS, MAILBOX_PAGE, MAILBOX_PRUNE_BATCH, MAILBOX_PRUNE_INTERVAL, MAILBOX_PRUNE_PAUSE,
    MAILBOX_RETENTION, Mailbox, MailboxConfig, MailboxPorts, RECEIPT_BATCH, RECEIPT_PATIENCE, RECEIPT_QUEUE,
    RECEIPT_RECHECK, RECEIPT_RETRY_INITIAL, RECEIPT_RETRY_MAX, RECEIPTS_HELD, Replay,
};
pub use reminders::{
    DEFAULT_MAX_PENDING_REMINDERS_PER_AGENT, DEFAULT_REMINDER_PAYLOAD_MAX_BYTES, MAX_PENDING_REMINDERS_PER_AGENT,
    MAX_REMINDER_PAYLOAD_BYTES,
};
pub use schedule::{CronSchedule, MAX_SCHEDULE_LEN, PREVIEW_INSTANTS};
pub use scheduler::{
    CLAIM_LEASE, CronConfig, CronPorts, CronScheduler, DEFAULT_BATCH_SIZE, DEFAULT_CLAIM_AHEAD, DEFAULT_LOOKAHEAD,
    DEFAULT_REFILL_INTERVAL, DEFAULT_WINDOW_CAPACITY, LEADERSHIP_POLL, LoopProgress, MAX_INSERT_GROUP, RETRY_INITIAL,
    RETRY_MAX,
};
pub use tools::{
    DEFAULT_TOOL_CALL_RETENTION, MAX_LISTED_PAYLOAD_BYTES, MAX_LISTED_REMINDERS, ReminderTool, ReminderTools,
    TOOL_CALL_PRUNE_BATCH, TOOL_CALL_PRUNE_INTERVAL, TOOL_CALL_PRUNE_PAUSE, ToolAnswer, ToolConfig, ToolName,
    ToolPorts,
};
