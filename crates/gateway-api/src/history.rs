//! `GET /gateway/history` (docs/api.md, "History"): the last hours of the gateway's own activity, one value per
//! hour and series, for the console's charts. The answer's fields are in alphabetical order.

use gateway_core::ports::history::MAX_HISTORY_HOURS;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::{Operation, Reason};

/// Hours answered when `hours` is absent.
pub const DEFAULT_HOURS: u32 = 24;

// Each series: one value per hour, oldest first, as `hour_starts`. Delivery series count attempts as recorded
// (overall, or of `webhook_id`); the others are null with `webhook_id`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistorySeriesBody {
    /// Reminders and cron jobs fired.
    #[schema(required = true)]
    pub cron_fires: Option<Vec<i64>>,
    /// The average lateness of the hour's cron fires in ms (null where none fired).
    #[schema(required = true)]
    pub cron_lateness_avg_ms: Option<Vec<Option<i64>>>,
    /// The latest fire of the hour, in ms (null where none fired).
    #[schema(required = true)]
    pub cron_lateness_max_ms: Option<Vec<Option<i64>>>,
    /// Attempts that left a delivery dead.
    pub dead_letters: Vec<i64>,
    /// Attempts that delivered (2xx).
    pub deliveries: Vec<i64>,
    /// Attempts that failed (a retry scheduled, or dead).
    pub failed_attempts: Vec<i64>,
    #[schema(required = true)]
    pub heartbeats: Option<Vec<i64>>,
    /// The most agents live at once in the hour, as instances sampled it (null before any sample).
    #[schema(required = true)]
    pub live_agents: Option<Vec<Option<i64>>>,
}

// The last `hours` hours, the current one (still counting) last.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryBody {
    /// The start of each hour (UTC), oldest first.
    #[schema(value_type = Vec<String>)]
    pub hour_starts: Vec<String>,
    pub hours: u32,
    pub series: HistorySeriesBody,
    #[schema(required = true)]
    pub webhook_id: Option<i64>,
}

pub fn doc() -> Operation {
    Operation::new("getHistory", "operator", "The last hours, per hour")
        .describe(
            "The gateway's own activity per hour, from every instance (each adds what it counted every few \
             seconds): deliveries, failed attempts and dead letters (overall, or of one webhook config with \
             `webhook_id`), heartbeats, live agents, cron fires and their lateness. Kept 48 hours.",
        )
        .query(
            "hours",
            "How many hours, the current one last.",
            json!({"type": "integer", "minimum": 1, "maximum": MAX_HISTORY_HOURS, "default": DEFAULT_HOURS}),
        )
        .query(
            "webhook_id",
            "Only this webhook config's delivery series (the others are null).",
            json!({"type": "integer", "minimum": 1}),
        )
        .answer::<HistoryBody>(200, "One value per hour and series.")
        .error(503, Reason::StoreUnavailable)
}
