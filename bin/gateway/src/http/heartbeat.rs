//! `POST /gateway/heartbeat` (FR-10.3).

use gateway_heartbeat::HeartbeatPing;
use http::StatusCode;
use serde_json::json;

use crate::http::error::ApiError;
use crate::http::request::{Request, read_json};
use crate::http::response::{Response, json_response};
use crate::state::AppState;

pub async fn post(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body = read_json(request).await?;
    let ping = HeartbeatPing::from_json(&body)?;
    state.heartbeat.accept(ping).await?;
    Ok(json_response(StatusCode::OK, &json!({"status": "ok"})))
}
