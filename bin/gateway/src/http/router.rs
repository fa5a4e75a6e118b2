//! Routing: the edge's checks on who sent a request (421, 403: http/edge.rs), path → route (404), method (405 with
//! `Allow`), a non-JSON body (415), operator token (401), handler; the edge's headers on every answer.

use std::convert::Infallible;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::{self, Either};

use http::header::{ALLOW, HeaderValue};
use http::{Method, StatusCode};
use hyper::body::Incoming;

use crate::http::auth::bearer_token;
use crate::http::connection::Connection;
use crate::http::error::ApiError;
use crate::http::request::{Request, RequestBody};
use crate::http::response::Response;
use crate::http::response::text_response;
use crate::http::{
    agents, console, credentials, cron, edge, events, health, heartbeat, messages, openapi, reminders, tools, webhooks,
};
use crate::metrics;
use crate::state::AppState;

/// A resolved path. Ids that are not integers resolve too (`None`), so that they get the same 404 as an id that
/// names nothing: one not-found shape per kind of thing, whatever the id looks like. (The tests list every variant
/// to hold the router and the OpenAPI document to the same routes.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(strum::EnumIter))]
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
    CronJobPause(Option<i64>),
    CronJobResume(Option<i64>),
    Cluster,
    /// `/gateway/agents/{agent_id}/reminders`; the handler reads the agent id from the path.
    AgentReminders,
    /// `/gateway/tools/{tool_name}`; the handler reads the name from the path.
    Tool,
    /// `/gateway/agents/{agent_id}/credentials`; the handler reads the agent id from the path.
    AgentCredentials,
    /// `/gateway/agents/{agent_id}/credentials/{credential_id}`.
    AgentCredential,
    /// `/`: the operator console's page.
    Console,
    /// `/console/{asset}`; the handler serves only the files it embeds.
    ConsoleAsset,
    /// `/metrics`: the Prometheus scrape.
    Metrics,
    /// `/openapi.json`: the document of this API (http/openapi.rs).
    OpenApi,
}

/// The `route` label of each route in `GET /metrics`, in [`Route::index`] order, then the label of paths that name
/// no route: the router's own names, never the path, so the label's values are this list and no more.
pub const ROUTE_NAMES: &[&str] = &[
    "heartbeat",
    "messages",
    "events",
    "agents",
    "healthz",
    "readyz",
    "webhook_inbound",
    "webhook_configs",
    "webhook_config",
    "deliveries",
    "delivery",
    "delivery_retry",
    "cron_jobs",
    "cron_job",
    "cluster",
    "agent_reminders",
    "tool",
    "agent_credentials",
    "agent_credential",
    "metrics",
    "cron_job_pause",
    "cron_job_resume",
    "console",
    "console_asset",
    "openapi",
    metrics::UNMATCHED_ROUTE,
];

/// The index of [`metrics::UNMATCHED_ROUTE`] in [`ROUTE_NAMES`].
const UNMATCHED: usize = ROUTE_NAMES.len() - 1;

const TOOLS_PREFIX: &str = "/gateway/tools/";

fn resolve(path: &str) -> Option<Route> {
    // Matched on the path text, segment by segment, without collecting segments: this runs for every request.
    let id = |text: &str| text.parse::<i64>().ok();
    // One path segment: the rest of the path when it holds no further `/` (an empty segment is an id too).
    let segment = |rest: &str| (!rest.contains('/')).then_some(());
    let route = match path {
        "/gateway/heartbeat" => Route::Heartbeat,
        "/gateway/messages" => Route::Messages,
        "/gateway/events" => Route::Events,
        "/gateway/agents" => Route::Agents,
        "/healthz" => Route::Healthz,
        "/readyz" => Route::Readyz,
        "/gateway/webhook-configs" => Route::WebhookConfigs,
        "/gateway/deliveries" => Route::Deliveries,
        "/gateway/cron/jobs" => Route::CronJobs,
        "/gateway/cluster" => Route::Cluster,
        "/" => Route::Console,
        "/metrics" => Route::Metrics,
        "/openapi.json" => Route::OpenApi,
        _ => {
            if let Some(webhook) = path.strip_prefix("/gateway/webhooks/") {
                segment(webhook).map(|()| Route::WebhookInbound(id(webhook)))?
            } else if let Some(config) = path.strip_prefix("/gateway/webhook-configs/") {
                segment(config).map(|()| Route::WebhookConfig(id(config)))?
            } else if let Some(job) = path.strip_prefix("/gateway/cron/jobs/") {
                match job.split_once('/') {
                    None => Route::CronJob(id(job)),
                    Some((job, "pause")) => Route::CronJobPause(id(job)),
                    Some((job, "resume")) => Route::CronJobResume(id(job)),
                    Some(_) => return None,
                }
            } else if let Some(tool) = path.strip_prefix(TOOLS_PREFIX) {
                segment(tool).map(|()| Route::Tool)?
            } else if let Some(agent) = path.strip_prefix("/gateway/agents/") {
                agent_route(agent)?
            } else if let Some(asset) = path.strip_prefix("/console/") {
                segment(asset).map(|()| Route::ConsoleAsset)?
            } else {
                let delivery = path.strip_prefix("/gateway/deliveries/")?;
                match delivery.split_once('/') {
                    None => Route::Delivery(id(delivery)),
                    Some((delivery, "retry")) => Route::DeliveryRetry(id(delivery)),
                    Some(_) => return None,
                }
            }
        }
    };
    Some(route)
}

/// What follows `/gateway/agents/`: an agent id segment (percent-encoded, so without `/`), then the resource.
fn agent_route(rest: &str) -> Option<Route> {
    let (_agent, resource) = rest.split_once('/')?;
    match resource.split_once('/') {
        None if resource == "credentials" => Some(Route::AgentCredentials),
        None if resource == "reminders" => Some(Route::AgentReminders),
        Some(("credentials", credential)) if !credential.contains('/') => Some(Route::AgentCredential),
        _ => None,
    }
}

impl Route {
    /// This route's place in [`ROUTE_NAMES`].
    fn index(self) -> usize {
        match self {
            Self::Heartbeat => 0,
            Self::Messages => 1,
            Self::Events => 2,
            Self::Agents => 3,
            Self::Healthz => 4,
            Self::Readyz => 5,
            Self::WebhookInbound(_) => 6,
            Self::WebhookConfigs => 7,
            Self::WebhookConfig(_) => 8,
            Self::Deliveries => 9,
            Self::Delivery(_) => 10,
            Self::DeliveryRetry(_) => 11,
            Self::CronJobs => 12,
            Self::CronJob(_) => 13,
            Self::Cluster => 14,
            Self::AgentReminders => 15,
            Self::Tool => 16,
            Self::AgentCredentials => 17,
            Self::AgentCredential => 18,
            Self::Metrics => 19,
            Self::CronJobPause(_) => 20,
            Self::CronJobResume(_) => 21,
            Self::Console => 22,
            Self::ConsoleAsset => 23,
            Self::OpenApi => 24,
        }
    }

    fn methods(self) -> &'static [Method] {
        match self {
            Self::Heartbeat | Self::Messages | Self::Tool => &[Method::POST],
            Self::Events | Self::Agents | Self::Healthz | Self::Readyz | Self::Cluster | Self::AgentReminders => {
                &[Method::GET]
            }
            Self::Metrics => &[Method::GET],
            Self::WebhookInbound(_) | Self::DeliveryRetry(_) => &[Method::POST],
            Self::CronJobPause(_) | Self::CronJobResume(_) => &[Method::POST],
            Self::WebhookConfigs | Self::Deliveries => &[Method::GET, Method::POST],
            Self::WebhookConfig(_) => &[Method::GET, Method::DELETE, Method::PATCH],
            Self::Delivery(_) => &[Method::GET],
            Self::CronJobs => &[Method::GET, Method::POST],
            Self::CronJob(_) => &[Method::GET, Method::DELETE],
            Self::AgentCredentials => &[Method::GET, Method::POST],
            Self::AgentCredential => &[Method::DELETE],
            Self::Console | Self::ConsoleAsset => &[Method::GET],
            Self::OpenApi => &[Method::GET],
        }
    }

    /// Routes whose request bodies, where they read one, are JSON: every route but the inbound webhook, whose body
    /// is the sender's, kept as sent.
    fn reads_json(self) -> bool {
        !matches!(self, Self::WebhookInbound(_))
    }

    /// Routes behind the operator token. (The event stream decides per topic, in its handler, and so does an
    /// agent's reminders endpoint, which will take the agent's own token too; `/readyz` shows details only with
    /// the token.)
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
                | Self::CronJobPause(_)
                | Self::CronJobResume(_)
                | Self::Cluster
                | Self::AgentCredentials
                | Self::AgentCredential
                | Self::Metrics
        )
    }
}

/// Runs one request: the edge's checks on who sent it (421, 403 `cross_origin`: http/edge.rs), the route (404),
/// then [`dispatch`]; every answer gets the edge's headers. A handler that panics costs one 500 and an error log,
/// not the connection: the panic is caught at the handler's future, which runs on the connection's task (a task
/// per request was a tenth of a request's instructions, see docs/benchmarks.md).
///
/// Built from combinators rather than `async fn`s: an `async fn` keeps its arguments beside the futures it makes
/// of them, which more than doubled the future hyper moves several times per request.
pub fn handle(
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
        .and_then(|()| resolved.ok_or_else(ApiError::not_found));
    let route = match admitted {
        Ok(route) => route,
        Err(refusal) => {
            let mut response = refusal.into_response();
            edge::stamp(&mut response);
            let status = response.status().as_u16();
            tracing::debug!(%method, path = request.uri().path(), status, "request");
            state.metrics.http.observe(resolved.map_or(UNMATCHED, Route::index), status, started.elapsed());
            return Either::Left(future::ready(Ok(response)));
        }
    };
    let request = request.map(|body| RequestBody::new(body, &state.edge.bodies));
    // Only event streams look at their connection: the other requests do not pay for a copy of it. The client's
    // address is what refused agent tokens are counted against (gateway-auth).
    let client = connection.peer().ip();
    let connection = (route == Route::Events).then(|| connection.clone());
    let stats = Arc::clone(&state);
    Either::Right(contain_panics(method.clone(), route, dispatch(state, route, request, connection, client)).map(
        move |mut response| {
            edge::stamp(&mut response);
            let status = response.status().as_u16();
            stats.metrics.http.observe(route.index(), status, started.elapsed());
            tracing::debug!(%method, ?route, status, "request");
            Ok(response)
        },
    ))
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

async fn dispatch(
    state: Arc<AppState>,
    route: Route,
    request: Request,
    connection: Option<Connection>,
    client: IpAddr,
) -> Result<Response, ApiError> {
    if !route.methods().contains(request.method()) {
        return Ok(method_not_allowed(route.methods()));
    }
    if route.reads_json() && request.body().is_present() && request.method() != Method::GET {
        edge::check_json_content_type(request.headers())?;
    }
    if route.operator_only() {
        state.auth.check_operator(bearer_token(request.headers()))?;
    }
    match route {
        Route::Heartbeat => heartbeat::post(&state, request, client).await,
        Route::Messages => messages::post(&state, request, client).await,
        // A future is as large as the largest one it may await, and hyper moves a request's future several times:
        // the other routes are boxed so that their futures do not weigh on the two endpoints agents call most.
        _ => Box::pin(dispatch_rest(&state, route, request, connection, client)).await,
    }
}

async fn dispatch_rest(
    state: &Arc<AppState>,
    route: Route,
    request: Request,
    connection: Option<Connection>,
    client: IpAddr,
) -> Result<Response, ApiError> {
    let unknown_webhook = || ApiError::unknown("unknown_webhook", "webhook config");
    let unknown_delivery = || ApiError::unknown("unknown_delivery", "delivery");
    let unknown_job = || ApiError::unknown("unknown_cron_job", "cron job");
    let is_post = request.method() == Method::POST;
    let is_delete = request.method() == Method::DELETE;
    match route {
        Route::Heartbeat => heartbeat::post(state, request, client).await,
        Route::Messages => messages::post(state, request, client).await,
        Route::Events => match connection {
            Some(connection) => events::get(state, &request, connection).await,
            None => Err(ApiError::internal()),
        },
        Route::Agents => agents::list(state, &request).await,
        Route::AgentReminders => reminders::list(state, &request, client).await,
        Route::Healthz => Ok(health::live()),
        Route::Cluster => Ok(health::cluster(state).await),
        Route::Readyz => Ok(health::ready(state, &request).await),
        Route::WebhookInbound(id) => webhooks::inbound(state, id.ok_or_else(unknown_webhook)?, request).await,
        Route::WebhookConfigs if is_post => webhooks::create_config(state, request).await,
        Route::WebhookConfigs => webhooks::list_configs(state, &request).await,
        Route::WebhookConfig(id) if request.method() == Method::PATCH => {
            webhooks::update_config(state, id.ok_or_else(unknown_webhook)?, request).await
        }
        Route::WebhookConfig(id) => {
            let id = id.ok_or_else(unknown_webhook)?;
            if is_delete { webhooks::delete_config(state, id).await } else { webhooks::show_config(state, id).await }
        }
        Route::Deliveries if is_post => webhooks::enqueue(state, request).await,
        Route::Deliveries => webhooks::list_deliveries(state, &request).await,
        Route::Delivery(id) => webhooks::show_delivery(state, id.ok_or_else(unknown_delivery)?).await,
        Route::DeliveryRetry(id) => webhooks::retry(state, id.ok_or_else(unknown_delivery)?).await,
        Route::Tool => {
            let name = request.uri().path().strip_prefix(TOOLS_PREFIX).unwrap_or_default().to_owned();
            tools::call(state, &name, request, client).await
        }
        Route::CronJobs if is_post => cron::create(state, request).await,
        Route::CronJobs => cron::list(state, &request).await,
        Route::CronJob(id) => {
            let id = id.ok_or_else(unknown_job)?;
            if is_delete { cron::delete(state, id).await } else { cron::show(state, id).await }
        }
        Route::CronJobPause(id) => cron::pause(state, id.ok_or_else(unknown_job)?).await,
        Route::CronJobResume(id) => cron::resume(state, id.ok_or_else(unknown_job)?).await,
        Route::AgentCredentials if is_post => credentials::issue(state, request).await,
        Route::AgentCredentials => credentials::list(state, &request).await,
        Route::AgentCredential => credentials::revoke(state, &request).await,
        Route::Console => Ok(console::page(&request)),
        Route::ConsoleAsset => console::asset(&request),
        Route::Metrics => Ok(text_response(metrics::CONTENT_TYPE, metrics::scrape(state).await)),
        Route::OpenApi => Ok(openapi::get()),
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

    /// Holds the router and the OpenAPI document to the same routes: every path of the document resolves to a
    /// route that serves exactly the document's methods there, and every route (the compiler's list of
    /// `Route`'s variants) is reached by some path of the document.
    #[test]
    fn the_openapi_document_names_every_route_and_method_and_nothing_else() {
        use strum::IntoEnumIterator;

        const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
        let document = openapi::document();
        let mut documented_routes = Vec::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            // Any value in a `{parameter}` reaches the route: ids that are not ids resolve too.
            let sample: String = path
                .split('/')
                .map(|segment| if segment.starts_with('{') && segment.ends_with('}') { "1" } else { segment })
                .collect::<Vec<_>>()
                .join("/");
            let route =
                resolve(&sample).unwrap_or_else(|| panic!("{path} is in the OpenAPI document; no route serves it"));
            let mut documented: Vec<String> =
                item.as_object().unwrap().keys().filter(|key| METHODS.contains(&key.as_str())).cloned().collect();
            let mut served: Vec<String> = route.methods().iter().map(|method| method.as_str().to_lowercase()).collect();
            documented.sort();
            served.sort();
            assert_eq!(documented, served, "methods of {path}: the OpenAPI document's, then the router's");
            documented_routes.push(std::mem::discriminant(&route));
        }
        for route in Route::iter() {
            assert!(
                documented_routes.contains(&std::mem::discriminant(&route)),
                "{route:?} is served but no path of the OpenAPI document (http/openapi.rs) reaches it"
            );
        }
    }

    #[test]
    fn each_route_has_its_own_metrics_label() {
        let routes = [
            Route::Heartbeat,
            Route::Messages,
            Route::Events,
            Route::Agents,
            Route::Healthz,
            Route::Readyz,
            Route::WebhookInbound(None),
            Route::WebhookConfigs,
            Route::WebhookConfig(Some(1)),
            Route::Deliveries,
            Route::Delivery(None),
            Route::DeliveryRetry(Some(2)),
            Route::CronJobs,
            Route::CronJob(None),
            Route::Cluster,
            Route::AgentReminders,
            Route::Tool,
            Route::AgentCredentials,
            Route::AgentCredential,
            Route::Metrics,
            Route::CronJobPause(None),
            Route::CronJobResume(Some(3)),
            Route::Console,
            Route::ConsoleAsset,
            Route::OpenApi,
        ];
        let mut indexes: Vec<usize> = routes.iter().map(|route| route.index()).collect();
        indexes.sort_unstable();
        indexes.dedup();
        assert_eq!(indexes, (0..UNMATCHED).collect::<Vec<_>>(), "one label per route, and every label used");
        assert_eq!(ROUTE_NAMES[Route::WebhookConfig(None).index()], "webhook_config");
        assert_eq!(ROUTE_NAMES[Route::Metrics.index()], "metrics");
        assert_eq!(ROUTE_NAMES[UNMATCHED], "unmatched");
        let mut names = ROUTE_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ROUTE_NAMES.len(), "labels are distinct");
    }

    #[test]
    fn resolves_exact_paths_only() {
        assert_eq!(resolve("/gateway/heartbeat"), Some(Route::Heartbeat));
        assert_eq!(resolve("/readyz"), Some(Route::Readyz));
        assert_eq!(resolve("/gateway/cluster"), Some(Route::Cluster));
        assert_eq!(resolve("/openapi.json"), Some(Route::OpenApi));
        assert!(!Route::OpenApi.operator_only());
        assert!(Route::Cluster.operator_only());
        assert_eq!(resolve("/gateway/webhooks/7"), Some(Route::WebhookInbound(Some(7))));
        assert_eq!(resolve("/gateway/webhooks/seven"), Some(Route::WebhookInbound(None)));
        assert_eq!(resolve("/gateway/webhook-configs/3"), Some(Route::WebhookConfig(Some(3))));
        assert_eq!(resolve("/gateway/deliveries/12/retry"), Some(Route::DeliveryRetry(Some(12))));
        assert_eq!(resolve("/gateway/deliveries/x"), Some(Route::Delivery(None)));
        assert!(Route::Deliveries.operator_only() && !Route::WebhookInbound(None).operator_only());
        assert_eq!(resolve("/gateway/cron/jobs"), Some(Route::CronJobs));
        assert_eq!(resolve("/gateway/cron/jobs/42"), Some(Route::CronJob(Some(42))));
        assert_eq!(resolve("/gateway/cron/jobs/x"), Some(Route::CronJob(None)));
        assert_eq!(resolve("/gateway/cron/jobs/42/pause"), Some(Route::CronJobPause(Some(42))));
        assert_eq!(resolve("/gateway/cron/jobs/x/resume"), Some(Route::CronJobResume(None)));
        assert!(Route::CronJobPause(None).operator_only() && Route::CronJobResume(None).operator_only());
        assert_eq!(resolve("/gateway/agents/agent-7/reminders"), Some(Route::AgentReminders));
        assert!(!Route::AgentReminders.operator_only(), "its handler checks who may read the mailbox");
        assert_eq!(resolve("/gateway/agents/a%2Fb/credentials"), Some(Route::AgentCredentials));
        assert_eq!(resolve("/gateway/agents/a/credentials/019c85388601a1b2c3d4e5f6"), Some(Route::AgentCredential));
        assert_eq!(resolve("/gateway/agents/a/credentials/"), Some(Route::AgentCredential));
        assert!(Route::AgentCredentials.operator_only() && Route::AgentCredential.operator_only());
        assert_eq!(resolve("/gateway/tools/schedule_reminder"), Some(Route::Tool));
        assert_eq!(resolve("/gateway/tools/anything"), Some(Route::Tool), "the handler decides what is a tool");
        assert!(!Route::Tool.operator_only());
        assert_eq!(resolve("/metrics"), Some(Route::Metrics));
        assert!(Route::Metrics.operator_only());
        // An empty segment is an id that names nothing, as any other non-integer.
        assert_eq!(resolve("/gateway/webhooks/"), Some(Route::WebhookInbound(None)));
        assert_eq!(resolve("/gateway/deliveries//retry"), Some(Route::DeliveryRetry(None)));
        assert_eq!(resolve("/gateway/deliveries/-3/retry"), Some(Route::DeliveryRetry(Some(-3))));
        assert_eq!(resolve("/"), Some(Route::Console));
        assert_eq!(resolve("/console/app.js"), Some(Route::ConsoleAsset));
        assert_eq!(resolve("/console/nothing-here"), Some(Route::ConsoleAsset), "the handler decides what is an asset");
        assert!(!Route::Console.operator_only() && !Route::ConsoleAsset.operator_only());
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
}
