//! The edge: what every request meets before a route looks at it, and what every answer carries
//! (docs/architecture.md, "Bodies before trust").
//!
//! - On a loopback listener without agent auth (`--agent-auth auto` there), anyone who can make this machine send
//!   a request may act as any agent, and a web page can: by posting a form or a `fetch` to `localhost` (CSRF), or
//!   by pointing its own name at 127.0.0.1 and reading the answers as its own (DNS rebinding). A browser always
//!   says which host it meant and, for such requests, which page sent them: a request whose `Host` is not a
//!   loopback name is 421 `misdirected_request`, one whose `Origin` is not the gateway's own is 403 `cross_origin`.
//!   Every route, the console and the operator's included: they need the operator's token, but a rebound page
//!   reading even `/healthz` or `/openapi.json` has no business there, and one rule is easier to trust than a list.
//! - A JSON endpoint refuses a body that says it is something else (415 `unsupported_media_type`): a form or a
//!   `text/plain` body is what a browser can send cross-site without asking first, so refusing it closes CSRF on
//!   any listener. A body without `Content-Type` is still read as JSON (existing clients send none).
//! - Every answer carries `X-Content-Type-Options: nosniff`, and `Cache-Control: no-store` unless its handler set
//!   its own (the console's files are revalidated by ETag): answers carry tokens, agents' reminders and
//!   deliveries' payloads, which no browser or proxy cache should keep.

use std::sync::Arc;

use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST, HeaderValue, ORIGIN, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderMap, Uri};

use crate::http::body_budget::BodyBudget;
use crate::http::error::ApiError;
use crate::http::per_address::ConnectionsPerAddress;
use crate::http::response::Response;

/// The edge's settings, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct EdgeConfig {
    /// The Host and Origin checks: on while agents need no token on a loopback listener.
    pub loopback_rules: bool,
    /// `--max-inflight-body-bytes`.
    pub max_inflight_body_bytes: usize,
    /// `--max-connections-per-address`.
    pub max_connections_per_address: usize,
}

/// The edge's state, shared by every connection.
#[derive(Debug)]
pub struct Edge {
    loopback_rules: bool,
    /// Request-body bytes being read, process-wide.
    pub bodies: Arc<BodyBudget>,
    /// Open connections per client address.
    pub connections: Arc<ConnectionsPerAddress>,
}

impl Edge {
    pub fn new(config: EdgeConfig) -> Self {
        Self {
            loopback_rules: config.loopback_rules,
            bodies: Arc::new(BodyBudget::new(config.max_inflight_body_bytes)),
            connections: Arc::new(ConnectionsPerAddress::new(config.max_connections_per_address)),
        }
    }

    /// 421 `misdirected_request` or 403 `cross_origin` while the loopback rules are on (see the module's
    /// documentation); nothing otherwise.
    pub fn check_caller(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.loopback_rules { loopback_caller(uri, headers) } else { Ok(()) }
    }
}

fn loopback_caller(uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    let mut hosts = headers.get_all(HOST).iter();
    let (host, second_host) = (hosts.next(), hosts.next());
    if second_host.is_some() {
        return Err(ApiError::misdirected_request());
    }
    let host = match host {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| ApiError::misdirected_request())?),
    };
    // A request target in absolute form names the host itself, and wins over `Host` (RFC 9112, 3.2.2): whichever
    // is there must be loopback, and the gateway's own origin is the one the target names.
    let target = uri.authority().map(http::uri::Authority::as_str);
    let own = target.or(host).ok_or_else(ApiError::misdirected_request)?;
    if ![target, host].into_iter().flatten().all(is_loopback_authority) {
        return Err(ApiError::misdirected_request());
    }
    let mut origins = headers.get_all(ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (None, _) => Ok(()),
        (Some(origin), None) if is_origin_of(origin.as_bytes(), own) => Ok(()),
        _ => Err(ApiError::cross_origin()),
    }
}

/// Whether `authority` (a `Host` value: `name`, `name:port`, `[v6]`, `[v6]:port`) names this machine's loopback:
/// `localhost`, an address of 127.0.0.0/8, or `::1` (also as an IPv4-mapped address of 127.0.0.0/8).
pub fn is_loopback_authority(authority: &str) -> bool {
    let valid_port = |port: &str| !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((address, after)) = bracketed.split_once(']') else { return false };
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(valid_port);
        return port_ok
            && address
                .parse::<std::net::Ipv6Addr>()
                .is_ok_and(|v6| std::net::IpAddr::V6(v6).to_canonical().is_loopback());
    }
    let name = match authority.split_once(':') {
        None => authority,
        Some((name, port)) if valid_port(port) => name,
        Some(_) => return false,
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok_and(|v4| v4.is_loopback())
}

/// Whether `origin` is `http://` followed by `authority` (ASCII case aside): the gateway serves plain HTTP, so a
/// page of its own has that origin, and any other scheme or host is another site's page.
fn is_origin_of(origin: &[u8], authority: &str) -> bool {
    const SCHEME: &[u8] = b"http://";
    origin.len() == SCHEME.len() + authority.len()
        && origin[..SCHEME.len()].eq_ignore_ascii_case(SCHEME)
        && origin[SCHEME.len()..].eq_ignore_ascii_case(authority.as_bytes())
}

/// 415 `unsupported_media_type` when a `Content-Type` of `headers` is not JSON.
pub fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    if headers.get_all(CONTENT_TYPE).iter().all(|value| is_json_media_type(value.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type())
    }
}

/// `application/json` or `application/<anything>+json`, with any parameters (`; charset=utf-8`), ASCII case
/// aside.
pub fn is_json_media_type(value: &[u8]) -> bool {
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

/// The headers every answer carries (see the module's documentation).
pub fn stamp(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(target: &str, headers: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        (target.parse().unwrap(), map)
    }

    fn reason(target: &str, headers: &[(&str, &str)]) -> Option<&'static str> {
        let (uri, headers) = request(target, headers);
        loopback_caller(&uri, &headers).err().map(|error| error.reason)
    }

    #[test]
    fn loopback_names_and_addresses_with_any_port_are_loopback_and_nothing_else_is() {
        for loopback in [
            "localhost",
            "LocalHost:4000",
            "127.0.0.1",
            "127.0.0.1:4000",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:4000",
            "[0:0:0:0:0:0:0:1]:80",
            "[::ffff:127.0.0.1]:4000",
        ] {
            assert!(is_loopback_authority(loopback), "{loopback}");
        }
        for foreign in [
            "",
            "evil.example",
            "evil.example:4000",
            "localhost.evil.example",
            "evil.localhost",
            "localhost.",
            "127.0.0.1.nip.io",
            "128.0.0.1",
            "0.0.0.0:4000",
            "10.0.0.1",
            "127.1",
            "2130706433",
            "[::2]:4000",
            "[::]:4000",
            "[::1]x",
            "[::1]:",
            "[::1",
            "::1",
            "localhost:",
            "localhost:abc",
            "localhost:4000:1",
            "localhost:123456",
            "user@localhost",
            "[::ffff:10.0.0.1]",
        ] {
            assert!(!is_loopback_authority(foreign), "{foreign}");
        }
    }

    #[test]
    fn a_foreign_host_is_misdirected_and_a_foreign_origin_is_cross_origin() {
        assert_eq!(reason("/gateway/heartbeat", &[("host", "localhost:4000")]), None);
        assert_eq!(reason("/", &[("host", "127.0.0.1:4000"), ("origin", "http://127.0.0.1:4000")]), None);
        assert_eq!(reason("/", &[("host", "[::1]:4000"), ("origin", "HTTP://[::1]:4000")]), None);
        assert_eq!(reason("/", &[("host", "Localhost:4000"), ("origin", "http://localhost:4000")]), None);
        assert_eq!(reason("/", &[("host", "evil.example")]), Some("misdirected_request"));
        assert_eq!(reason("/", &[("host", "evil.example:4000")]), Some("misdirected_request"));
        assert_eq!(reason("/", &[]), Some("misdirected_request"), "no Host names no loopback");
        assert_eq!(reason("/", &[("host", "localhost"), ("host", "evil.example")]), Some("misdirected_request"));
        // The absolute form's host wins over Host, and both must be loopback.
        assert_eq!(reason("http://evil.example/", &[("host", "localhost")]), Some("misdirected_request"));
        assert_eq!(reason("http://localhost:4000/", &[("host", "evil.example")]), Some("misdirected_request"));
        assert_eq!(reason("http://localhost:4000/", &[]), None);
        assert_eq!(reason("http://localhost:4000/", &[("origin", "http://localhost:4000")]), None);
        for origin in [
            "http://evil.example",
            "http://localhost:4001",
            "http://127.0.0.1:4000",
            "https://localhost:4000",
            "http://localhost:4000/",
            "http://localhost",
            "null",
            "",
        ] {
            assert_eq!(
                reason("/", &[("host", "localhost:4000"), ("origin", origin)]),
                Some("cross_origin"),
                "{origin:?}"
            );
        }
        let two = [("host", "localhost:4000"), ("origin", "http://localhost:4000"), ("origin", "http://evil.example")];
        assert_eq!(reason("/", &two), Some("cross_origin"));
    }

    #[test]
    fn the_rules_apply_only_on_loopback_without_agent_auth() {
        let edge = |loopback_rules| {
            Edge::new(EdgeConfig { loopback_rules, max_inflight_body_bytes: 1, max_connections_per_address: 1 })
        };
        let (uri, headers) = request("/", &[("host", "evil.example"), ("origin", "http://evil.example")]);
        assert!(edge(false).check_caller(&uri, &headers).is_ok());
        assert_eq!(edge(true).check_caller(&uri, &headers).unwrap_err().status.as_u16(), 421);
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
        let (_, mut headers) = request("/", &[("content-type", "application/json")]);
        assert!(check_json_content_type(&headers).is_ok());
        headers.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(check_json_content_type(&headers).unwrap_err().status.as_u16(), 415);
        assert!(check_json_content_type(&HeaderMap::new()).is_ok(), "no Content-Type is read as JSON");
    }

    #[test]
    fn every_answer_is_nosniff_and_not_stored_unless_its_handler_said_how_to_cache_it() {
        let mut json = crate::http::response::json_bytes(http::StatusCode::OK, bytes::Bytes::from_static(b"{}"));
        stamp(&mut json);
        assert_eq!(json.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(json.headers()[CACHE_CONTROL], "no-store");
        let mut revalidated = crate::http::response::json_bytes(http::StatusCode::OK, bytes::Bytes::new());
        revalidated.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        stamp(&mut revalidated);
        assert_eq!(revalidated.headers()[CACHE_CONTROL], "no-cache");
    }
}
