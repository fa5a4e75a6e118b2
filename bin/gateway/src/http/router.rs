//! Routing: path → route (404), method (405 with `Allow`), operator token (401), handler.

use std::convert::Infallible;
use std::sync::Arc;

use http::header::{ALLOW, HeaderValue};
use http::{Method, StatusCode};

use crate::http::error::ApiError;
use crate::http::request::Request;
use crate::http::response::Response;
use crate::http::{agents, cron, events, health, heartbeat, messages, webhooks};
use crate::state::AppState;

/// A resolved path. Ids that are not integers resolve too (`None`), so that they get the same 404 as an id that
/// names nothing: one not-found shape per kind of thing, whatever the id looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Heartbeat,
    Messages,
    Events,
    Agents,
    Healthz,
    Readyz,
    WebhookInbound(Option<i64>),
    WebhookConfigs,
    WebhookConfig(Option<i64>),
    Deliveries,
    Delivery(Option<i64>),
    DeliveryRetry(Option<i64>),
    CronJobs,
    CronJob(Option<i64>),
}

fn resolve(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let id = |text: &str| text.parse::<i64>().ok();
    match segments.as_slice() {
        ["gateway", "heartbeat"] => Some(Route::Heartbeat),
        ["gateway", "messages"] => Some(Route::Messages),
        ["gateway", "events"] => Some(Route::Events),
        ["gateway", "agents"] => Some(Route::Agents),
        ["healthz"] => Some(Route::Healthz),
        ["readyz"] => Some(Route::Readyz),
        ["gateway", "webhooks", webhook] => Some(Route::WebhookInbound(id(webhook))),
        ["gateway", "webhook-configs"] => Some(Route::WebhookConfigs),
        ["gateway", "webhook-configs", config] => Some(Route::WebhookConfig(id(config))),
        ["gateway", "deliveries"] => Some(Route::Deliveries),
        ["gateway", "deliveries", delivery] => Some(Route::Delivery(id(delivery))),
        ["gateway", "deliveries", delivery, "retry"] => Some(Route::DeliveryRetry(id(delivery))),
        ["gateway", "cron", "jobs"] => Some(Route::CronJobs),
        ["gateway", "cron", "jobs", job] => Some(Route::CronJob(id(job))),
        _ => None,
    }
}

impl Route {
    fn methods(self) -> &'static [Method] {
        match self {
            Self::Heartbeat | Self::Messages => &[Method::POST],
            Self::Events | Self::Agents | Self::Healthz | Self::Readyz => &[Method::GET],
            Self::WebhookInbound(_) | Self::DeliveryRetry(_) => &[Method::POST],
            Self::WebhookConfigs | Self::Deliveries => &[Method::GET, Method::POST],
            Self::WebhookConfig(_) => &[Method::GET, Method::DELETE],
            Self::Delivery(_) => &[Method::GET],
            Self::CronJobs => &[Method::GET, Method::POST],
            Self::CronJob(_) => &[Method::GET, Method::DELETE],
        }
    }

    /// Routes behind the operator token. (The event stream decides per topic, in its handler; `/readyz` shows
    /// details only with the token.)
    fn operator_only(self) -> bool {
        matches!(
            self,
            Self::Agents
                | Self::WebhookConfigs
                | Self::WebhookConfig(_)
                | Self::Deliveries
                | Self::Delivery(_)
                | Self::DeliveryRetry(_)
                | Self::CronJobs
                | Self::CronJob(_)
        )
    }
}

/// Runs one request. The handler runs in its own task so that a bug that panics costs one 500, not the
/// connection, and is logged.
pub async fn handle(state: Arc<AppState>, request: Request) -> Result<Response, Infallible> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = match tokio::spawn(dispatch(state, request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.into_response(),
        Err(join_error) => {
            tracing::error!(%method, %path, %join_error, "request handler failed");
            ApiError::internal().into_response()
        }
    };
    tracing::debug!(%method, %path, status = response.status().as_u16(), "request");
    Ok(response)
}

async fn dispatch(state: Arc<AppState>, request: Request) -> Result<Response, ApiError> {
    let route = resolve(request.uri().path()).ok_or_else(ApiError::not_found)?;
    if !route.methods().contains(request.method()) {
        return Ok(method_not_allowed(route.methods()));
    }
    if route.operator_only() {
        state.operator.check(request.headers())?;
    }
    let unknown_webhook = || ApiError::unknown("unknown_webhook", "webhook config");
    let unknown_delivery = || ApiError::unknown("unknown_delivery", "delivery");
    let unknown_job = || ApiError::unknown("unknown_cron_job", "cron job");
    let is_post = request.method() == Method::POST;
    let is_delete = request.method() == Method::DELETE;
    match route {
        Route::Heartbeat => heartbeat::post(&state, request).await,
        Route::Messages => messages::post(&state, request).await,
        Route::Events => events::get(&state, &request),
        Route::Agents => agents::list(&state, &request),
        Route::Healthz => Ok(health::live()),
        Route::Readyz => Ok(health::ready(&state, &request).await),
        Route::WebhookInbound(id) => webhooks::inbound(&state, id.ok_or_else(unknown_webhook)?, request).await,
        Route::WebhookConfigs if is_post => webhooks::create_config(&state, request).await,
        Route::WebhookConfigs => webhooks::list_configs(&state, &request).await,
        Route::WebhookConfig(id) => {
            let id = id.ok_or_else(unknown_webhook)?;
            if is_delete { webhooks::delete_config(&state, id).await } else { webhooks::show_config(&state, id).await }
        }
        Route::Deliveries if is_post => webhooks::enqueue(&state, request).await,
        Route::Deliveries => webhooks::list_deliveries(&state, &request).await,
        Route::Delivery(id) => webhooks::show_delivery(&state, id.ok_or_else(unknown_delivery)?).await,
        Route::DeliveryRetry(id) => webhooks::retry(&state, id.ok_or_else(unknown_delivery)?).await,
        Route::CronJobs if is_post => cron::create(&state, request).await,
        Route::CronJobs => cron::list(&state, &request).await,
        Route::CronJob(id) => {
            let id = id.ok_or_else(unknown_job)?;
            if is_delete { cron::delete(&state, id).await } else { cron::show(&state, id).await }
        }
    }
}

fn method_not_allowed(allowed: &[Method]) -> Response {
    let mut response = ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").into_response();
    let allow = allowed.iter().map(Method::as_str).collect::<Vec<_>>().join(", ");
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(ALLOW, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_exact_paths_only() {
        assert_eq!(resolve("/gateway/heartbeat"), Some(Route::Heartbeat));
        assert_eq!(resolve("/readyz"), Some(Route::Readyz));
        assert_eq!(resolve("/gateway/webhooks/7"), Some(Route::WebhookInbound(Some(7))));
        assert_eq!(resolve("/gateway/webhooks/seven"), Some(Route::WebhookInbound(None)));
        assert_eq!(resolve("/gateway/webhook-configs/3"), Some(Route::WebhookConfig(Some(3))));
        assert_eq!(resolve("/gateway/deliveries/12/retry"), Some(Route::DeliveryRetry(Some(12))));
        assert_eq!(resolve("/gateway/deliveries/x"), Some(Route::Delivery(None)));
        assert!(Route::Deliveries.operator_only() && !Route::WebhookInbound(None).operator_only());
        assert_eq!(resolve("/gateway/cron/jobs"), Some(Route::CronJobs));
        assert_eq!(resolve("/gateway/cron/jobs/42"), Some(Route::CronJob(Some(42))));
        assert_eq!(resolve("/gateway/cron/jobs/x"), Some(Route::CronJob(None)));
        for unknown in ["/", "", "/gateway", "/gateway/heartbeat/", "/gateway/heartbeat/x", "gateway/heartbeat"] {
            assert_eq!(resolve(unknown), None, "{unknown}");
        }
    }
}
