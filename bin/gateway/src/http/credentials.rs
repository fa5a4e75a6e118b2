//! The operator's agent credential endpoints (docs/api.md, "Agent credentials"):
//! `POST /gateway/agents/{agent_id}/credentials` issues a token (shown once),
//! `GET /gateway/agents/{agent_id}/credentials` lists them without tokens,
//! `DELETE /gateway/agents/{agent_id}/credentials/{credential_id}` revokes one at once,
//! `GET /gateway/credentials` lists every agent's.

use std::time::Duration;

use gateway_api::credentials::{
    CredentialBody, CredentialPage, DEFAULT_PAGE, IssuedCredential, MAX_PAGE, RevokedCredential,
};
use gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S;
use gateway_core::{CredentialId, encoding::rfc3339};
use http::StatusCode;
use http::header::{CACHE_CONTROL, HeaderValue};

use crate::http::agents::path_agent_id;
use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Query, Request, next_cursor, read_body};
use crate::http::response::{Response, json_response};
use crate::state::AppState;
use gateway_api::Reason;

/// 201 `{"credential_id","token","agent_id","created_at","expires_at"}`. The body is empty, `{}`, or
/// `{"expires_in_s": N}` (1 to [`MAX_TOKEN_LIFETIME_S`], ten years): the agent is in the path; `expires_at` is null for
/// a token that never expires.
pub(super) async fn issue(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let agent_id = path_agent_id(request.uri().path())?;
    let body = read_body(request).await?;
    let expires_in_s = if body.trim_ascii().is_empty() { None } else { expires_in_s(JsonObject::parse(&body)?)? };
    let issued = state.auth.issue(agent_id, expires_in_s.map(Duration::from_secs)).await?;
    let record = &issued.record;
    let body = IssuedCredential {
        agent_id: &record.agent_id,
        created_at: rfc3339::format(record.created_at),
        credential_id: &record.credential_id,
        expires_at: record.expires_at.map(rfc3339::format),
        token: issued.token.expose(),
    };
    let mut response = json_response(StatusCode::CREATED, &body);
    // The one response that carries the token: no cache along the way may keep it.
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `?limit=&after=` → `{"credentials":[…],"next_after":…}`, oldest first, revoked ones included, never a token.
pub(super) async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let agent_id = path_agent_id(request.uri().path())?;
    let query = Query::parse(request.uri(), &["limit", "after"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", CredentialId::parse)?;
    let rows = state.auth.credentials_of(agent_id, page.after, page.limit).await?;
    let next_after = next_cursor(&rows, page.limit, |row| row.credential_id.clone());
    let credentials = rows.iter().map(CredentialBody::of).collect();
    Ok(json_response(StatusCode::OK, &CredentialPage { credentials, next_after }))
}

/// `?limit=&after=` → `{"credentials":[…],"next_after":…}`: every agent's credentials, oldest first (by id).
pub(super) async fn list_all(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", CredentialId::parse)?;
    let rows = state.auth.all_credentials(page.after, page.limit).await?;
    let next_after = next_cursor(&rows, page.limit, |row| row.credential_id.clone());
    let credentials = rows.iter().map(CredentialBody::of).collect();
    Ok(json_response(StatusCode::OK, &CredentialPage { credentials, next_after }))
}

/// 200 `{"status":"revoked","credential_id","agent_id","revoked_at"}`, also for a credential revoked before (with
/// its first `revoked_at`); 404 `unknown_credential` when the agent has no such credential. The credential stops
/// authenticating on this instance before the answer, and on the others when the revocation event reaches them.
pub(super) async fn revoke(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let path = request.uri().path();
    let agent_id = path_agent_id(path)?;
    let unknown = || ApiError::unknown(Reason::UnknownCredential, "credential of this agent");
    let credential_id = path.rsplit('/').next().and_then(CredentialId::parse).ok_or_else(unknown)?;
    let revoked = state.auth.revoke(agent_id, credential_id).await?;
    Ok(json_response(StatusCode::OK, &RevokedCredential::of(&revoked)))
}

/// The issue body's `expires_in_s`, if any: a whole number of seconds from 1 to [`MAX_TOKEN_LIFETIME_S`], else 422
/// `invalid_field` naming the field (never the value).
fn expires_in_s(mut body: JsonObject) -> Result<Option<u64>, ApiError> {
    let invalid = || {
        ApiError::unprocessable(
            Reason::InvalidField,
            format!("expires_in_s: must be an integer from 1 to {MAX_TOKEN_LIFETIME_S} (ten years)"),
        )
    };
    let seconds = match body.take_raw("expires_in_s") {
        None => None,
        Some(raw) if raw.get() == "null" => None,
        Some(raw) => Some(
            raw.get()
                .parse::<u64>()
                .ok()
                .filter(|seconds| (1..=MAX_TOKEN_LIFETIME_S).contains(seconds))
                .ok_or_else(invalid)?,
        ),
    };
    body.finish(&["expires_in_s"])?;
    Ok(seconds)
}
