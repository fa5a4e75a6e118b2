//! Routing: the edge's checks on who sent a request (421, 403: gateway-edge), path → route (404), method (405 with
//! `Allow`), a non-JSON body (415), operator token (401), handler; the API's headers on every answer.
//!
//! Two rules of the API are here rather than in gateway-edge, which knows no API:
//! - A JSON endpoint refuses a body that says it is something else (415 `unsupported_media_type`): a form or a
//!   `text/plain` body is what a browser can send cross-site without asking first, so refusing it closes CSRF on
//!   any listener. A body without `Content-Type` is still read as JSON (existing clients send none).
//! - Every answer carries `X-Content-Type-Options: nosniff`, and `Cache-Control: no-store` unless its handler set
//!   its own (the console's files are revalidated by ETag): answers carry tokens, agents' reminders and
//!   deliveries' payloads, which no browser or proxy cache should keep.
//!
//! The routes themselves are declared once, in http/routes.rs, with `declare_routes!` (http/route_table.rs, which also
//! holds the route's checks): from that one table come
//! the router's path matching, methods and access checks, the handlers' dispatch, the metrics' route labels and
//! the OpenAPI document's paths and operations (http/openapi).

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::{self, Either};
use gateway_edge::Connection;
use http::Method;
use http::header::{CACHE_CONTROL, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::body::Incoming;

use crate::http::error::ApiError;
use crate::http::request::RequestBody;
use crate::http::response::Response;
use crate::http::route_table::walk;
use crate::http::routes::{self, Call, Route};
use crate::state::AppState;

/// The route of `path`: an exact path by a `match` on its text, else the first template it fits.
pub(super) fn resolve(path: &str) -> Option<Route> {
    Route::exact(path).or_else(|| Route::TEMPLATES.iter().copied().find(|route| fits(*route, path)))
}

fn fits(route: Route, path: &str) -> bool {
    walk(route.path(), path, |_, _| {})
}
/// The index of a route's label in [`Route::LABELS`]; `None` (no route) is the last, the unmatched label.
fn label_index(route: Option<Route>) -> usize {
    route.map_or(Route::ALL.len(), |route| route as usize)
}

/// Runs one request: the edge's checks on who sent it (421, 403 `cross_origin`: gateway-edge), the route (404),
/// then the route's checks and handler (`routes::run`); every answer gets the edge's headers. A handler that panics costs one 500 and an error log,
/// not the connection: the panic is caught at the handler's future, which runs on the connection's task (a task
/// per request was a tenth of a request's instructions, see docs/benchmarks.md).
///
/// Built from combinators rather than `async fn`s: an `async fn` keeps its arguments beside the futures it makes
/// of them, which more than doubled the future hyper moves several times per request.
pub(super) fn handle(
    state: Arc<AppState>,
    connection: &Connection,
    request: http::Request<Incoming>,
) -> impl Future<Output = Result<Response, Infallible>> + use<> {
    let started = Instant::now();
    let method = request.method().clone();
    let resolved = resolve(request.uri().path());
    let admitted = state
        .edge
        .check_caller(request.uri(), request.headers())
        .map_err(ApiError::from)
        .and_then(|()| resolved.ok_or_else(ApiError::not_found));
    let route = match admitted {
        Ok(route) => route,
        Err(refusal) => {
            let mut response = refusal.into_response();
            stamp(&mut response);
            let status = response.status().as_u16();
            tracing::debug!(%method, path = request.uri().path(), status, "request");
            state.metrics.http.observe(label_index(resolved), status, started.elapsed());
            return Either::Left(future::ready(Ok(response)));
        }
    };
    let request = request.map(|body| RequestBody::new(body, &state.edge.bodies));
    // Only event streams look at their connection: the other requests do not pay for a copy of it. The client's
    // address is what refused agent tokens are counted against (gateway-auth).
    let client = connection.peer().ip();
    let connection = route.streams().then(|| connection.clone());
    let stats = Arc::clone(&state);
    let call = Call::new(state, request, client, route, connection);
    Either::Right(contain_panics(method.clone(), route, routes::run(call)).map(move |mut response| {
        stamp(&mut response);
        let status = response.status().as_u16();
        stats.metrics.http.observe(label_index(Some(route)), status, started.elapsed());
        tracing::debug!(%method, ?route, status, "request");
        Ok(response)
    }))
}

/// The handler's answer, or a 500 and an error log when it panics.
fn contain_panics(
    method: Method,
    route: Route,
    handler: impl Future<Output = Result<Response, ApiError>>,
) -> impl Future<Output = Response> {
    // Unwind safety: what a handler shares outlives it behind locks that recover from poisoning
    // (`gateway_core::runtime::sync::lock`) or in the store, whose transactions roll back; the same held for the task a
    // handler used to run in, whose panic tokio caught in the same way.
    AssertUnwindSafe(handler).catch_unwind().map(move |outcome| match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.into_response(),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(not a string)");
            tracing::error!(%method, ?route, panic = message, "request handler panicked");
            ApiError::internal().into_response()
        }
    })
}
/// The headers every answer carries (see the module's documentation).
pub(super) fn stamp(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

#[cfg(test)]
mod tests {
    use http::header::CONTENT_TYPE;
    use http::{HeaderMap, StatusCode};

    use super::*;
    use crate::http::health;
    use crate::http::route_table::{Access, check_json_content_type, is_json_media_type};

    #[tokio::test]
    async fn a_panicking_handler_costs_one_500() {
        let handler = async { panic!("handler bug") };
        let response = contain_panics(Method::POST, Route::Heartbeat, handler).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let answered = contain_panics(Method::GET, Route::Healthz, async { Ok(health::live()) }).await;
        assert_eq!(answered.status(), StatusCode::OK);
        let refused = contain_panics(Method::GET, Route::Agents, async { Err(ApiError::unauthorized()) }).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    }

    /// The router and the document are built from the same table, so they cannot disagree; what is left to check
    /// is the matching itself: every declared path, its parameters filled in, resolves to the route that declares
    /// it (no earlier route shadows it), and an exact path is one path, a template has parameters.
    #[test]
    fn every_declared_path_resolves_to_its_own_route() {
        for &route in Route::ALL {
            let template = Route::TEMPLATES.contains(&route);
            assert_eq!(route.path().contains('{'), template, "{route:?}: exact paths have no parameter");
            let sample = route.path().split('/').map(|segment| if segment.starts_with('{') { "1" } else { segment });
            let sample = sample.collect::<Vec<_>>().join("/");
            assert_eq!(resolve(&sample), Some(route), "{sample}");
            assert_eq!(resolve(route.path()), Some(route), "the template's own text: any segment fits a parameter");
            let methods: Vec<&Method> = route.operations().iter().map(|(method, _)| method).collect();
            let mut distinct = methods.clone();
            distinct.dedup();
            assert_eq!(methods, distinct, "{route:?}: a method declared twice");
        }
    }

    #[test]
    fn each_route_has_its_own_metrics_label() {
        let routes = Route::ALL;
        let mut indexes: Vec<usize> = routes.iter().map(|route| label_index(Some(*route))).collect();
        indexes.sort_unstable();
        indexes.dedup();
        let unmatched = label_index(None);
        assert_eq!(indexes, (0..unmatched).collect::<Vec<_>>(), "one label per route, and every label used");
        assert_eq!(Route::LABELS[label_index(Some(Route::WebhookConfig))], "webhook_config");
        assert_eq!(Route::LABELS[label_index(Some(Route::Metrics))], "metrics");
        assert_eq!(Route::LABELS[unmatched], "unmatched");
        let mut names = Route::LABELS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Route::LABELS.len(), "labels are distinct");
    }

    /// The route of `path` and, for the routes whose path has an integer id, that id (`None` for text that is not
    /// one: the same 404 as an id that names nothing).
    fn resolved(path: &str) -> Option<(Route, Option<i64>)> {
        let route = resolve(path)?;
        let mut id = None;
        walk(route.path(), path, |name, segment| {
            if name == "id" || name == "webhook_id" {
                id = segment.parse::<i64>().ok();
            }
        });
        Some((route, id))
    }

    #[test]
    fn resolves_exact_paths_only() {
        let operator_only = |route: Route| route.operations().iter().all(|(_, access)| *access == Access::Operator);
        assert_eq!(resolve("/gateway/heartbeat"), Some(Route::Heartbeat));
        assert_eq!(resolve("/readyz"), Some(Route::Readyz));
        assert_eq!(resolve("/gateway/cluster"), Some(Route::Cluster));
        assert_eq!(resolve("/openapi.json"), Some(Route::OpenApi));
        assert!(!operator_only(Route::OpenApi));
        assert!(operator_only(Route::Cluster));
        assert_eq!(resolved("/gateway/webhooks/7"), Some((Route::WebhookInbound, Some(7))));
        assert_eq!(resolved("/gateway/webhooks/seven"), Some((Route::WebhookInbound, None)));
        assert_eq!(resolved("/gateway/webhook-configs/3"), Some((Route::WebhookConfig, Some(3))));
        assert_eq!(resolved("/gateway/deliveries/12/retry"), Some((Route::DeliveryRetry, Some(12))));
        assert_eq!(resolved("/gateway/deliveries/x"), Some((Route::Delivery, None)));
        assert!(operator_only(Route::Deliveries) && !operator_only(Route::WebhookInbound));
        assert_eq!(resolve("/gateway/cron/jobs"), Some(Route::CronJobs));
        assert_eq!(resolved("/gateway/cron/jobs/42"), Some((Route::CronJob, Some(42))));
        assert_eq!(resolved("/gateway/cron/jobs/x"), Some((Route::CronJob, None)));
        assert_eq!(resolved("/gateway/cron/jobs/42/pause"), Some((Route::CronJobPause, Some(42))));
        assert_eq!(resolved("/gateway/cron/jobs/x/resume"), Some((Route::CronJobResume, None)));
        assert!(operator_only(Route::CronJobPause) && operator_only(Route::CronJobResume));
        assert_eq!(resolve("/gateway/agents/agent-7/reminders"), Some(Route::AgentReminders));
        assert!(!operator_only(Route::AgentReminders), "its handler checks who may read the mailbox");
        assert_eq!(resolve("/gateway/agents/a%2Fb/credentials"), Some(Route::AgentCredentials));
        assert_eq!(resolve("/gateway/agents/a/credentials/019c85388601a1b2c3d4e5f6"), Some(Route::AgentCredential));
        assert_eq!(resolve("/gateway/agents/a/credentials/"), Some(Route::AgentCredential));
        assert!(operator_only(Route::AgentCredentials) && operator_only(Route::AgentCredential));
        assert_eq!(resolve("/gateway/tools/schedule_reminder"), Some(Route::Tool));
        assert_eq!(resolve("/gateway/tools/anything"), Some(Route::Tool), "the handler decides what is a tool");
        assert!(!operator_only(Route::Tool));
        assert_eq!(resolve("/metrics"), Some(Route::Metrics));
        assert!(operator_only(Route::Metrics));
        // An empty segment is an id that names nothing, as any other non-integer.
        assert_eq!(resolved("/gateway/webhooks/"), Some((Route::WebhookInbound, None)));
        assert_eq!(resolved("/gateway/deliveries//retry"), Some((Route::DeliveryRetry, None)));
        assert_eq!(resolved("/gateway/deliveries/-3/retry"), Some((Route::DeliveryRetry, Some(-3))));
        assert_eq!(resolve("/"), Some(Route::Console));
        assert_eq!(resolve("/console/app.js"), Some(Route::ConsoleAsset));
        assert_eq!(resolve("/console/nothing-here"), Some(Route::ConsoleAsset), "the handler decides what is an asset");
        assert!(!operator_only(Route::Console) && !operator_only(Route::ConsoleAsset));
        for unknown in [
            "",
            "/gateway",
            "/gateway/heartbeat/",
            "/gateway/heartbeat/x",
            "gateway/heartbeat",
            "//gateway/heartbeat",
            "/gateway/webhooks/1/x",
            "/gateway/webhook-configs/1/",
            "/gateway/deliveries/1/retry/",
            "/gateway/deliveries/1/x",
            "/gateway/deliveries/1/2/retry",
            "/gateway/cron/jobs/1/x",
            "/gateway/cron/jobs/1/pause/",
            "/gateway/cron/jobs/1/2/resume",
            "/gateway/cron",
            "/gateway/agents/a/reminders/",
            "/gateway/agents/a/b/reminders",
            "/gateway/agents/a",
            "/gateway/agents/a/",
            "/gateway/agents/a/b/credentials",
            "/gateway/agents/a/credentials/x/y",
            "/gateway/agents/a/other",
            "/gateway/tools",
            "/gateway/tools/schedule_reminder/x",
            "/console",
            "/console/a/app.js",
            "/console/../index.html",
        ] {
            assert_eq!(resolve(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn a_template_hands_each_parameter_its_segment() {
        let mut found = Vec::new();
        assert!(walk(
            "/gateway/agents/{agent_id}/credentials/{credential_id}",
            "/gateway/agents/a%2Fb/credentials/c1",
            |name, segment| {
                found.push((name.to_owned(), segment.to_owned()));
            }
        ));
        assert_eq!(found, [("agent_id".to_owned(), "a%2Fb".to_owned()), ("credential_id".to_owned(), "c1".to_owned())]);
        assert!(!walk("/gateway/cron/jobs/{id}", "/gateway/cron/jobs/1/pause", |_, _| {}));
        assert!(walk("/gateway/cron/jobs/{id}/pause", "/gateway/cron/jobs//pause", |_, _| {}));
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn json_and_json_suffixes_are_json_and_forms_and_text_are_not() {
        for json in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=UTF-8",
            " application/json ",
            "application/merge-patch+json",
            "application/vnd.api+json; ext=x",
        ] {
            assert!(is_json_media_type(json.as_bytes()), "{json}");
        }
        for other in [
            "",
            "text/plain",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/+json",
            "text/json",
            "application",
            "json",
            "application/json+xml",
        ] {
            assert!(!is_json_media_type(other.as_bytes()), "{other}");
        }
        let mut headers = headers(&[("content-type", "application/json")]);
        assert!(check_json_content_type(&headers).is_ok());
        headers.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(check_json_content_type(&headers).unwrap_err().status.as_u16(), 415);
        assert!(check_json_content_type(&HeaderMap::new()).is_ok(), "no Content-Type is read as JSON");
    }

    #[test]
    fn every_answer_is_nosniff_and_not_stored_unless_its_handler_said_how_to_cache_it() {
        let mut json = crate::http::response::json_bytes(StatusCode::OK, bytes::Bytes::from_static(b"{}"));
        stamp(&mut json);
        assert_eq!(json.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(json.headers()[CACHE_CONTROL], "no-store");
        let mut revalidated = crate::http::response::json_bytes(StatusCode::OK, bytes::Bytes::new());
        revalidated.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        stamp(&mut revalidated);
        assert_eq!(revalidated.headers()[CACHE_CONTROL], "no-cache");
    }
}
