//! Who sent a request, checked before any route looks at it, on a listener only this machine can reach: a
//! loopback listener where the server trusts whoever connects (the gateway's `--agent-auth auto` on loopback).
//!
//! There, anyone who can make this machine send a request may act as any client, and a web page can: by posting a
//! form or a `fetch` to `localhost` (CSRF), or by pointing its own name at 127.0.0.1 and reading the answers as its
//! own (DNS rebinding). A browser always says which host it meant and, for such requests, which page sent them: a
//! request whose `Host` is not a loopback name is [`Refusal::MisdirectedRequest`] (the gateway's 421
//! `misdirected_request`), one whose `Origin` is not the server's own is [`Refusal::CrossOrigin`] (403
//! `cross_origin`). Every path, the operator's included: they need a token, but a rebound page reading even a health
//! check has no business there, and one rule is easier to trust than a list.

use http::header::{HOST, ORIGIN};
use http::{HeaderMap, Uri};

use crate::Refusal;

/// [`Refusal::MisdirectedRequest`] unless the request names one loopback host (by its `Host`, and by its target when
/// in absolute form); [`Refusal::CrossOrigin`] when it carries an `Origin` other than `http://` and that host.
pub fn check_loopback_caller(uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(HOST).iter();
    let (host, second_host) = (hosts.next(), hosts.next());
    if second_host.is_some() {
        return Err(Refusal::MisdirectedRequest);
    }
    let host = match host {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| Refusal::MisdirectedRequest)?),
    };
    // A request target in absolute form names the host itself, and wins over `Host` (RFC 9112, 3.2.2): whichever
    // is there must be loopback, and the server's own origin is the one the target names.
    let target = uri.authority().map(http::uri::Authority::as_str);
    let own = target.or(host).ok_or(Refusal::MisdirectedRequest)?;
    if ![target, host].into_iter().flatten().all(is_loopback_authority) {
        return Err(Refusal::MisdirectedRequest);
    }
    let mut origins = headers.get_all(ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (None, _) => Ok(()),
        (Some(origin), None) if is_origin_of(origin.as_bytes(), own) => Ok(()),
        _ => Err(Refusal::CrossOrigin),
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

/// Whether `origin` is `http://` followed by `authority` (ASCII case aside): a loopback listener serves plain HTTP,
/// so a page of its own has that origin, and any other scheme or host is another site's page.
fn is_origin_of(origin: &[u8], authority: &str) -> bool {
    const SCHEME: &[u8] = b"http://";
    origin.len() == SCHEME.len() + authority.len()
        && origin[..SCHEME.len()].eq_ignore_ascii_case(SCHEME)
        && origin[SCHEME.len()..].eq_ignore_ascii_case(authority.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn request(target: &str, headers: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        (target.parse().unwrap(), map)
    }

    fn reason(target: &str, headers: &[(&str, &str)]) -> Option<Refusal> {
        let (uri, headers) = request(target, headers);
        check_loopback_caller(&uri, &headers).err()
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
        assert_eq!(reason("/", &[("host", "evil.example")]), Some(Refusal::MisdirectedRequest));
        assert_eq!(reason("/", &[("host", "evil.example:4000")]), Some(Refusal::MisdirectedRequest));
        assert_eq!(reason("/", &[]), Some(Refusal::MisdirectedRequest), "no Host names no loopback");
        assert_eq!(reason("/", &[("host", "localhost"), ("host", "evil.example")]), Some(Refusal::MisdirectedRequest));
        // The absolute form's host wins over Host, and both must be loopback.
        assert_eq!(reason("http://evil.example/", &[("host", "localhost")]), Some(Refusal::MisdirectedRequest));
        assert_eq!(reason("http://localhost:4000/", &[("host", "evil.example")]), Some(Refusal::MisdirectedRequest));
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
                Some(Refusal::CrossOrigin),
                "{origin:?}"
            );
        }
        let two = [("host", "localhost:4000"), ("origin", "http://localhost:4000"), ("origin", "http://evil.example")];
        assert_eq!(reason("/", &two), Some(Refusal::CrossOrigin));
    }
}
