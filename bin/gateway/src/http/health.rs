//! `/healthz` (the process answers) and `/readyz` (the store answers and every loop runs).
//!
//! `/readyz` needs no token, so load balancers can probe it; without the operator token it only names what is not
//! ready. The reasons (store error text, a loop's last failure) can carry paths and internals, so they are shown
//! only to a caller with the token.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gateway_core::{StoreHealth, run_blocking};
use http::StatusCode;
use serde_json::json;

use crate::http::auth::bearer_token;
use crate::http::request::Request;
use crate::http::response::{Response, STATUS_OK, json_bytes, json_response};
use crate::state::AppState;

/// A store that takes longer than this to answer `SELECT 1` is reported not ready.
pub const STORE_PING_TIMEOUT: Duration = Duration::from_secs(2);

pub fn live() -> Response {
    json_bytes(StatusCode::OK, Bytes::from_static(STATUS_OK))
}

pub async fn ready(state: &Arc<AppState>, request: &Request) -> Response {
    let store = state.store.clone();
    let store_problem = match tokio::time::timeout(STORE_PING_TIMEOUT, run_blocking(move || store.ping())).await {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(error))) => Some(error.to_string()),
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some("store did not answer in time".to_owned()),
    };
    let components: Vec<_> = state.components().iter().map(|component| component.report()).collect();
    let mut not_ready: Vec<&str> = Vec::new();
    if store_problem.is_some() {
        not_ready.push("store");
    }
    not_ready.extend(components.iter().filter(|report| !report.healthy).map(|report| report.component));
    let role = state.cluster.role();
    let mut body = if not_ready.is_empty() {
        json!({"status": "ready", "role": role})
    } else {
        json!({"status": "error", "reason": "not_ready", "not_ready": not_ready, "role": role})
    };
    if state.auth.check_operator(bearer_token(request.headers())).is_ok() {
        body["checks"] = json!({
            "store": {"healthy": store_problem.is_none(), "problem": store_problem},
            "components": components,
        });
    }
    let status = if not_ready.is_empty() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    json_response(status, &body)
}

/// `GET /gateway/cluster` (operator): this instance, its role, the leader and its term, Redis reachability.
pub async fn cluster(state: &AppState) -> Response {
    json_response(StatusCode::OK, &json!(state.cluster.view().await))
}
