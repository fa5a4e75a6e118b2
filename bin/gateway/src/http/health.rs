//! `/healthz` (the process answers) and `/readyz` (the store answers and every loop runs).
//!
//! `/readyz` needs no token, so load balancers can probe it; without the operator token it only names what is not
//! ready. The reasons (store error text, a loop's last failure) can carry paths and internals, so they are shown
//! only to a caller with the token.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gateway_core::{HealthReport, StoreHealth, run_blocking};
use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use crate::cluster::{ClusterView, Role};
use crate::http::auth::bearer_token;
use crate::http::request::Request;
use crate::http::response::{Response, json_bytes, json_response};
use crate::state::AppState;
use gateway_api::Operation;
use gateway_api::common::ErrorStatus;
use gateway_api::literal;
use gateway_api::{STATUS_OK, StatusOk};

/// A store that takes longer than this to answer `SELECT 1` is reported not ready.
pub(super) const STORE_PING_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) fn live() -> Response {
    json_bytes(StatusCode::OK, Bytes::from_static(STATUS_OK))
}

pub(super) async fn ready(state: &Arc<AppState>, request: &Request) -> Response {
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
    let checks = state.auth.check_operator(bearer_token(request.headers())).is_ok().then(|| ReadinessChecks {
        components: components.iter().map(ComponentCheck::of).collect(),
        store: StoreCheck { healthy: store_problem.is_none(), problem: store_problem.as_deref() },
    });
    if not_ready.is_empty() {
        json_response(StatusCode::OK, &Ready { checks, role, status: ReadyStatus })
    } else {
        let body = NotReady { checks, not_ready, reason: NotReadyReason, role, status: ErrorStatus };
        json_response(StatusCode::SERVICE_UNAVAILABLE, &body)
    }
}

// The bodies' fields are in alphabetical order, the order they had when built as JSON maps: the same bytes.

literal!(
    /// `"ready"`.
    ReadyStatus = "ready"
);

literal!(
    /// `"not_ready"`.
    NotReadyReason = "not_ready"
);

// `/readyz` when the store answers and every loop runs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Ready<'a> {
    // With the operator's token only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) checks: Option<ReadinessChecks<'a>>,
    pub(crate) role: Role,
    #[schema(inline)]
    pub(crate) status: ReadyStatus,
}

// `/readyz` when something is not ready: `not_ready` names what.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NotReady<'a> {
    // With the operator's token only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) checks: Option<ReadinessChecks<'a>>,
    pub(crate) not_ready: Vec<&'a str>,
    #[schema(inline)]
    pub(crate) reason: NotReadyReason,
    pub(crate) role: Role,
    #[schema(inline)]
    pub(crate) status: ErrorStatus,
}

// What was checked, for the operator: the reasons can carry paths and internals.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadinessChecks<'a> {
    #[schema(inline)]
    pub(crate) components: Vec<ComponentCheck<'a>>,
    #[schema(inline)]
    pub(crate) store: StoreCheck<'a>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreCheck<'a> {
    pub(crate) healthy: bool,
    #[schema(required = true)]
    pub(crate) problem: Option<&'a str>,
}

// One component's loop.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ComponentCheck<'a> {
    pub(crate) component: &'a str,
    pub(crate) healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) problem: Option<&'a str>,
    pub(crate) running: bool,
}

impl<'a> ComponentCheck<'a> {
    fn of(report: &'a HealthReport) -> Self {
        Self {
            component: report.component,
            healthy: report.healthy,
            problem: report.problem.as_deref(),
            running: report.running,
        }
    }
}

/// `GET /gateway/cluster` (operator): this instance, its role, the leader and its term, Redis reachability.
pub(super) async fn cluster(state: &AppState) -> Response {
    json_response(StatusCode::OK, &state.cluster.view().await)
}

pub(super) fn live_doc() -> Operation {
    Operation::new("liveness", "probes", "Liveness").answer::<StatusOk>(200, "The process answers.")
}

pub(super) fn ready_doc() -> Operation {
    Operation::new("readiness", "probes", "Readiness")
        .describe(
            "With the operator token the body adds `checks` (an invalid token is not refused: it just adds nothing).",
        )
        .answer::<Ready<'static>>(200, "The store answers and every loop runs.")
        .answer::<NotReady<'static>>(503, "Not ready: `not_ready` names what.")
}

pub(super) fn cluster_doc() -> Operation {
    Operation::new("getCluster", "operator", "This instance and its cluster")
        .answer::<ClusterView>(200, "This instance, its role, the leader and its term, Redis reachability.")
}
