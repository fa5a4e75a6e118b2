//! `POST /gateway/heartbeat` (FR-10.3).

use std::net::IpAddr;

use bytes::Bytes;
use gateway_auth::{Access, Named};
use gateway_heartbeat::HeartbeatPing;
use http::StatusCode;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{Request, parse_json, read_body};
use crate::http::response::{Response, json_bytes};
use crate::state::AppState;
use gateway_api::STATUS_OK;

pub(super) async fn post(state: &AppState, request: Request, client: IpAddr) -> Result<Response, ApiError> {
    let caller = state.auth.authenticate(bearer_token(request.headers()), client).await?;
    let body = read_body(request).await?;
    // The direct reading takes the well-formed pings; the value reading decides and names everything else.
    let ping = match HeartbeatPing::from_valid_body(&body) {
        Some(ping) => ping,
        None => HeartbeatPing::from_json(&parse_json(&body)?)?,
    };
    state.auth.admit(&caller, Named::Agent(&ping.agent_id), Access::Heartbeat).await?;
    state.heartbeat.accept(ping).await?;
    Ok(json_bytes(StatusCode::OK, Bytes::from_static(STATUS_OK)))
}
