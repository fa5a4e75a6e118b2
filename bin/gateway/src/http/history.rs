//! `GET /gateway/history?hours=&webhook_id=` (docs/api.md, "History"): the hourly history every instance adds to
//! (history.rs), one value per hour and series.

use std::collections::HashMap;
use std::sync::Arc;

use gateway_api::history::{DEFAULT_HOURS, HistoryBody, HistorySeriesBody};
use gateway_core::encoding::rfc3339;
use gateway_core::ports::history::{MAX_HISTORY_HOURS, WHOLE_GATEWAY, hour_start};
use gateway_core::{HistorySeries, HistoryStore, StoreError, run_blocking};
use http::StatusCode;
use time::OffsetDateTime;

use crate::http::error::ApiError;
use crate::http::request::{Query, Request, invalid_query};
use crate::http::response::{Response, json_response};
use crate::state::AppState;

pub(super) async fn get(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["hours", "webhook_id"])?;
    let hours = match query.get("hours") {
        None => DEFAULT_HOURS,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|hours| (1..=MAX_HISTORY_HOURS).contains(hours))
            .ok_or_else(|| invalid_query(format!("hours must be an integer from 1 to {MAX_HISTORY_HOURS}")))?,
    };
    let webhook_id = match query.get("webhook_id") {
        None => None,
        Some(text) => Some(
            text.parse::<i64>()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| invalid_query("webhook_id must be a positive integer"))?,
        ),
    };
    let current = hour_start(state.clock.now());
    let hour_starts: Vec<OffsetDateTime> =
        (0..hours).rev().map(|back| current - time::Duration::hours(i64::from(back))).collect();
    let from = hour_starts[0];
    let store: Arc<dyn HistoryStore> = Arc::new(state.store.clone());
    let subject = webhook_id.unwrap_or(WHOLE_GATEWAY);
    let points = run_blocking(move || store.history(from, subject)).await.map_err(StoreError::from)??;
    let values: HashMap<(OffsetDateTime, HistorySeries), i64> =
        points.into_iter().map(|point| ((point.hour_start, point.series), point.value)).collect();
    let value = |series: HistorySeries, hour: &OffsetDateTime| values.get(&(*hour, series)).copied();
    let counts = |series| hour_starts.iter().map(|hour| value(series, hour).unwrap_or(0)).collect::<Vec<i64>>();
    let sampled = |series| hour_starts.iter().map(|hour| value(series, hour)).collect::<Vec<Option<i64>>>();
    let gateway_wide = webhook_id.is_none();
    let average = || {
        hour_starts
            .iter()
            .map(|hour| {
                let fires = value(HistorySeries::CronFires, hour).filter(|fires| *fires > 0)?;
                Some(value(HistorySeries::CronLatenessTotalMs, hour).unwrap_or(0) / fires)
            })
            .collect::<Vec<Option<i64>>>()
    };
    let series = HistorySeriesBody {
        cron_fires: gateway_wide.then(|| counts(HistorySeries::CronFires)),
        cron_lateness_avg_ms: gateway_wide.then(average),
        cron_lateness_max_ms: gateway_wide.then(|| sampled(HistorySeries::CronLatenessMaxMs)),
        dead_letters: counts(HistorySeries::DeadLetters),
        deliveries: counts(HistorySeries::Deliveries),
        failed_attempts: counts(HistorySeries::FailedAttempts),
        heartbeats: gateway_wide.then(|| counts(HistorySeries::Heartbeats)),
        live_agents: gateway_wide.then(|| sampled(HistorySeries::LiveAgents)),
    };
    let hour_starts = hour_starts.into_iter().map(rfc3339::format).collect();
    Ok(json_response(StatusCode::OK, &HistoryBody { hour_starts, hours, series, webhook_id }))
}
