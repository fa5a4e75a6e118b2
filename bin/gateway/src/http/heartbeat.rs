//! `POST /gateway/heartbeat` (FR-10.3).

use bytes::Bytes;
use gateway_heartbeat::HeartbeatPing;
use http::StatusCode;

use crate::http::error::ApiError;
use crate::http::request::{Request, read_json};
use crate::http::response::{Response, STATUS_OK, json_bytes};
use crate::state::AppState;

pub async fn post(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body = read_json(request).await?;
    let ping = HeartbeatPing::from_json(&body)?;
    state.heartbeat.accept(ping).await?;
    Ok(json_bytes(StatusCode::OK, Bytes::from_static(STATUS_OK)))
}
