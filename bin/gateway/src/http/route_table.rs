//! The machinery of the route table (http/routes.rs): [`declare_routes!`], from which the table generates its
//! `Route`, its `Call` and the dispatch to the handlers, and the checks every route's calls go through before their
//! handler, in the order docs/architecture.md states (405 with `Allow`, 415 for a body that is not JSON, 401 for an
//! operator route without the operator's token). It knows no route: the table uses it, the router (http/router.rs)
//! runs the table.

use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, StatusCode};

pub(super) use gateway_api::Access;
pub(super) use http::Method;

use gateway_api::Reason;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::Request;
use crate::http::response::Response;
use crate::state::AppState;

/// Declares every route of the gateway, once (see http/routes.rs, its only use):
///
/// ```text
/// call c;  // the name the handlers below give the request's `Call`
/// /// What the route is.
/// Name "metrics_label" exact "/literal/path" {
///     METHOD Access [inline] [stream] => handler(c…), module::operation_doc;
/// }
/// Name "metrics_label" template "/path/{parameter}/more" [opaque_body] { … }
/// ```
///
/// - `exact` paths are matched by a `match` on the path's text, generated here: no table is walked for them (the
///   agents' hot paths, heartbeats and messages, are exact). `template` paths are matched, in order, against the
///   path's text, each `{parameter}` taking one segment (up to the next `/`; possibly empty, so that an empty id
///   gets the same 404 as any id that names nothing).
/// - `opaque_body`: the route takes any body (no 415 for a body that is not JSON): the inbound webhook.
/// - Per method: who may call it ([`Access`]), its handler (an expression over the [`Call`], awaited), and the
///   function that documents it (`fn() -> impl Into<Documented>`). Handlers' futures are boxed, so that the
///   future of every request is not as large as the largest handler's; `inline` ones are not (heartbeats and
///   messages, the two endpoints agents call most: an allocation per request is measurable there). `stream`
///   hands the handler its connection ([`Call::connection`]).
/// - The declaration order is the order of the metrics' route labels (and their series); add new routes at the
///   end.
macro_rules! declare_routes {
    // The exact paths' `match`: arms accumulated from the `exact` declarations, templates skipped.
    (@exact $path:ident [$($arms:tt)*]) => {
        match $path { $($arms)* _ => None }
    };
    (@exact $path:ident [$($arms:tt)*] exact $text:literal $route:ident $($rest:tt)*) => {
        declare_routes!(@exact $path [$($arms)* $text => Some(Route::$route),] $($rest)*)
    };
    (@exact $path:ident [$($arms:tt)*] template $text:literal $route:ident $($rest:tt)*) => {
        declare_routes!(@exact $path [$($arms)*] $($rest)*)
    };
    // The routes whose paths are templates, in declaration order.
    (@templates [$($routes:tt)*]) => {
        &[$($routes)*]
    };
    (@templates [$($routes:tt)*] exact $text:literal $route:ident $($rest:tt)*) => {
        declare_routes!(@templates [$($routes)*] $($rest)*)
    };
    (@templates [$($routes:tt)*] template $text:literal $route:ident $($rest:tt)*) => {
        declare_routes!(@templates [$($routes)* Route::$route,] $($rest)*)
    };
    (@opaque_body) => { false };
    (@opaque_body opaque_body) => { true };
    (@stream) => { false };
    (@stream stream $($rest:ident)*) => { true };
    (@stream $other:ident $($rest:ident)*) => { declare_routes!(@stream $($rest)*) };
    // A handler's call: boxed unless `inline`.
    (@run [] $handler:expr) => {
        Box::pin(async move { $handler.await }).await
    };
    (@run [inline $($rest:ident)*] $handler:expr) => {
        $handler.await
    };
    (@run [$other:ident $($rest:ident)*] $handler:expr) => {
        declare_routes!(@run [$($rest)*] $handler)
    };
    (call $c:ident; $(
        $(#[doc = $doc:literal])*
        $route:ident $label:literal $shape:ident $path:literal $($opaque:ident)? {
            $($method:ident $access:ident $($modifier:ident)* => $handler:expr, $document:path;)+
        }
    )+) => {
        /// What a handler is given: the state, the request, the client's address, the route it resolved to (for its
        /// path parameters) and, for the routes that hold their connection (event streams), the connection.
        #[derive(Debug)]
        pub(crate) struct Call {
            pub(crate) state: std::sync::Arc<$crate::state::AppState>,
            pub(crate) request: $crate::http::request::Request,
            pub(crate) client: std::net::IpAddr,
            route: Route,
            connection: Option<gateway_edge::Connection>,
        }

        impl Call {
            /// A call of `route`, which the router resolved the request's path to.
            pub(crate) fn new(
                state: std::sync::Arc<$crate::state::AppState>,
                request: $crate::http::request::Request,
                client: std::net::IpAddr,
                route: Route,
                connection: Option<gateway_edge::Connection>,
            ) -> Self {
                Self { state, request, client, route, connection }
            }

            /// The route the request resolved to.
            pub(crate) fn route(&self) -> Route {
                self.route
            }

            /// The text of the path parameter `{name}` of the route's path (empty when the route has none of that name).
            pub(crate) fn param(&self, name: &str) -> &str {
                let mut value = "";
                $crate::http::route_table::walk(self.route.path(), self.request.uri().path(), |parameter, segment| {
                    if parameter == name {
                        value = segment;
                    }
                });
                value
            }

            /// The integer id `{name}`: text that is not an `i64` gets the same 404 (`unknown`) as an id that names
            /// nothing: one not-found shape per kind of thing, whatever the id looks like.
            pub(crate) fn id(&self, name: &str, unknown: fn() -> $crate::http::error::ApiError) -> Result<i64, $crate::http::error::ApiError> {
                self.param(name).parse().map_err(|_| unknown())
            }

            /// The connection, for the routes declared `stream`.
            pub(crate) fn connection(&mut self) -> Result<gateway_edge::Connection, $crate::http::error::ApiError> {
                self.connection.take().ok_or_else($crate::http::error::ApiError::internal)
            }
        }
        /// A route of the gateway: a path (or a path template) and the methods it serves.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Route {
            $($(#[doc = $doc])* $route,)+
        }

        impl Route {
            /// Every route, in declaration order.
            pub(crate) const ALL: &'static [Route] = &[$(Route::$route,)+];

            /// The `route` label of each route in `GET /metrics`, in declaration order, then the label of paths
            /// that name no route: the router's own names, never the path, so the label's values are this list
            /// and no more.
            pub(crate) const LABELS: &'static [&'static str] = &[$($label,)+ $crate::stats::UNMATCHED_ROUTE];

            /// The routes whose paths are templates, matched in this order after the exact paths.
            pub(crate) const TEMPLATES: &'static [Route] = declare_routes!(@templates [] $($shape $path $route)+);

            /// The route of an exact path.
            pub(crate) fn exact(path: &str) -> Option<Route> {
                declare_routes!(@exact path [] $($shape $path $route)+)
            }

            /// Its path, as the document shows it: `{name}` for each parameter.
            pub(crate) const fn path(self) -> &'static str {
                match self {
                    $(Route::$route => $path,)+
                }
            }

            /// Whether it takes any body, not only JSON (no 415).
            pub(crate) const fn opaque_body(self) -> bool {
                match self {
                    $(Route::$route => declare_routes!(@opaque_body $($opaque)?),)+
                }
            }

            /// Whether a handler of it holds the request's connection.
            pub(crate) const fn streams(self) -> bool {
                match self {
                    $(Route::$route => false $(|| declare_routes!(@stream $($modifier)*))+,)+
                }
            }

            /// The methods it serves, in declaration order (the `Allow` of a 405), with who may call each.
            pub(crate) fn operations(self) -> &'static [($crate::http::route_table::Method, $crate::http::route_table::Access)] {
                match self {
                    $(Route::$route => &[$(($crate::http::route_table::Method::$method, $crate::http::route_table::Access::$access),)+],)+
                }
            }

            /// Its operations as the OpenAPI document shows them (gateway-api builds the document from them).
            pub(crate) fn documented(self) -> Vec<gateway_api::RouteOperation> {
                match self {
                    $(Route::$route => vec![$(gateway_api::RouteOperation {
                        path: $path,
                        method: stringify!($method),
                        access: gateway_api::Access::$access,
                        opaque_body: self.opaque_body(),
                        documented: gateway_api::Documented::from($document()),
                    },)+],)+
                }
            }
        }

        /// The router's checks of the call ([`refusal`]), then the handler of its route and method.
        ///
        /// One `async fn`, and the handlers use the call as it was passed: the future of every request is this
        /// one's, which hyper moves several times, so it holds the call once and is not wrapped in another (either
        /// cost a heartbeat about 200 instructions more, in copies).
        pub(crate) async fn run(
            #[allow(unused_mut)] mut $c: Call,
        ) -> Result<$crate::http::response::Response, $crate::http::error::ApiError> {
            if let Some(refusal) = $crate::http::route_table::refusal($c.route().operations(), $c.route().opaque_body(), &$c.request, &$c.state) {
                return Ok(refusal);
            }
            match $c.route() {
                $(Route::$route => {
                    $(if *$c.request.method() == $crate::http::route_table::Method::$method {
                        return declare_routes!(@run [$($modifier)*] $handler);
                    })+
                    Err($crate::http::error::ApiError::internal())
                })+
            }
        }
    };
}

pub(crate) use declare_routes;

/// Walks `path` along `template`: its literal text must be the path's, each `{name}` takes one segment of the path
/// (up to the next `/` or the end, possibly empty) and is handed to `parameter`. False when the path does not fit.
pub(crate) fn walk<'p>(template: &str, mut path: &'p str, mut parameter: impl FnMut(&str, &'p str)) -> bool {
    let mut rest = template;
    loop {
        let Some(open) = rest.find('{') else { return path == rest };
        let Some(after) = path.strip_prefix(&rest[..open]) else { return false };
        let Some((name, tail)) = rest[open + 1..].split_once('}') else { return false };
        let end = after.find('/').unwrap_or(after.len());
        parameter(name, &after[..end]);
        path = &after[end..];
        rest = tail;
    }
}

/// The route's checks, in the order docs/architecture.md states (405, 415, 401): the answer the call gets instead
/// of its handler's, if it is refused.
pub(super) fn refusal(
    operations: &[(Method, Access)],
    opaque_body: bool,
    request: &Request,
    state: &AppState,
) -> Option<Response> {
    let Some((_, access)) = operations.iter().find(|(method, _)| method == request.method()) else {
        return Some(method_not_allowed(operations));
    };
    let json_body = !opaque_body && request.body().is_present() && request.method() != Method::GET;
    if json_body && let Err(refused) = check_json_content_type(request.headers()) {
        return Some(refused.into_response());
    }
    if *access == Access::Operator
        && let Err(refused) = state.auth.check_operator(bearer_token(request.headers()))
    {
        return Some(ApiError::from(refused).into_response());
    }
    None
}

fn method_not_allowed(operations: &[(Method, Access)]) -> Response {
    let mut response = ApiError::new(StatusCode::METHOD_NOT_ALLOWED, Reason::MethodNotAllowed).into_response();
    let allow = operations.iter().map(|(method, _)| method.as_str()).collect::<Vec<_>>().join(", ");
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(ALLOW, value);
    }
    response
}

/// 415 `unsupported_media_type` when a `Content-Type` of `headers` is not JSON.
pub(super) fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    if headers.get_all(CONTENT_TYPE).iter().all(|value| is_json_media_type(value.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type())
    }
}

/// `application/json` or `application/<anything>+json`, with any parameters (`; charset=utf-8`), ASCII case
/// aside.
pub(super) fn is_json_media_type(value: &[u8]) -> bool {
    let essence = value.split(|byte| *byte == b';').next().unwrap_or_default().trim_ascii();
    let Some(slash) = essence.iter().position(|byte| *byte == b'/') else { return false };
    let (kind, subtype) = (&essence[..slash], &essence[slash + 1..]);
    let suffix = b"+json";
    kind.eq_ignore_ascii_case(b"application")
        && (subtype.eq_ignore_ascii_case(b"json")
            || (subtype.len() > suffix.len()
                && subtype[subtype.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                && subtype[..subtype.len() - suffix.len()].iter().all(|byte| byte.is_ascii_graphic())))
}
