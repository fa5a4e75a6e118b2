//! `POST /gateway/heartbeat` (FR-10.3).

use std::net::IpAddr;

use bytes::Bytes;
use futures_util::TryFutureExt;
use futures_util::future::Either;
use gateway_auth::{Access, Caller, Named};
use gateway_core::intake::BoxFuture;
use gateway_heartbeat::HeartbeatPing;
use http::StatusCode;
use http::header::AUTHORIZATION;

use crate::http::auth::bearer_token_of;
use crate::http::error::ApiError;
use crate::http::request::{Request, parse_json, read_body};
use crate::http::response::{Response, json_bytes};
use crate::state::AppState;
use gateway_api::STATUS_OK;

/// A plain `fn` returning the handler's future, as `POST /gateway/messages`'s (see there why): the request's head
/// is dropped before the future is made.
pub(super) fn post(
    state: &AppState,
    request: Request,
    client: IpAddr,
) -> impl Future<Output = Result<Response, ApiError>> + '_ {
    let authorization = request.headers().get(AUTHORIZATION).cloned();
    let body = read_body(request);
    async move {
        let caller = state.auth.authenticate(bearer_token_of(authorization.as_ref()), client).await?;
        let body = body.await?;
        let accepting = match admit(state, &caller, &body)? {
            Ok(ping) => Either::Left(state.heartbeat.accept(ping).map_err(ApiError::from)),
            Err(waiting) => Either::Right(waiting),
        };
        accepting.await?;
        Ok(json_bytes(StatusCode::OK, Bytes::from_static(STATUS_OK)))
    }
}

/// The ping of the body, admitted; or, when admitting it needs a round trip, a boxed future that admits and
/// accepts it, so that the handler's future does not hold the ping across that await beside the one it accepts it
/// with.
fn admit<'a>(
    state: &'a AppState,
    caller: &Caller,
    body: &[u8],
) -> Result<Result<HeartbeatPing, BoxFuture<'a, Result<(), ApiError>>>, ApiError> {
    // The direct reading takes the well-formed pings; the value reading decides and names everything else.
    let ping = match HeartbeatPing::from_valid_body(body) {
        Some(ping) => ping,
        None => HeartbeatPing::from_json(&parse_json(body)?)?,
    };
    match state.auth.admit_now(caller, Named::Agent(&ping.agent_id), Access::Heartbeat) {
        Some(admitted) => admitted.map(|()| Ok(ping)).map_err(ApiError::from),
        None => {
            let caller = caller.clone();
            Ok(Err(Box::pin(async move {
                state.auth.admit(&caller, Named::Agent(&ping.agent_id), Access::Heartbeat).await?;
                Ok(state.heartbeat.accept(ping).await?)
            })))
        }
    }
}
