//! `/healthz` (the process answers) and `/readyz` (the store answers and every loop runs).

use std::sync::Arc;
use std::time::Duration;

use gateway_core::{StoreHealth, run_blocking};
use http::StatusCode;
use serde_json::json;

use crate::app::AppState;
use crate::http::response::{Response, json_response};

/// A store that takes longer than this to answer `SELECT 1` is reported not ready.
pub const STORE_PING_TIMEOUT: Duration = Duration::from_secs(2);

pub fn live() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

pub async fn ready(state: &Arc<AppState>) -> Response {
    let store = state.store.clone();
    let store_problem = match tokio::time::timeout(STORE_PING_TIMEOUT, run_blocking(move || store.ping())).await {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(error))) => Some(error.to_string()),
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some("store did not answer in time".to_owned()),
    };
    let components: Vec<_> = state.components().iter().map(|component| component.report()).collect();
    let ready = store_problem.is_none() && components.iter().all(|report| report.healthy);
    let checks =
        json!({"store": {"healthy": store_problem.is_none(), "problem": store_problem}, "components": components});
    if ready {
        json_response(StatusCode::OK, &json!({"status": "ready", "checks": checks}))
    } else {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "error", "reason": "not_ready", "checks": checks}),
        )
    }
}
