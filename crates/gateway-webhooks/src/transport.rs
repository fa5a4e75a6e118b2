//! The real [`WebhookTransport`]: a blocking ureq 3 agent behind the SSRF guard.
//!
//! - The guard is a ureq [`Resolver`]: it resolves the host with ureq's own resolver (which honours the
//!   attempt's time limit), drops every address in a refused range, and hands ureq only what is left. ureq
//!   connects to exactly those addresses, so a DNS answer that changes between the check and the connect (DNS
//!   rebinding) has nothing to exploit.
//! - Redirects are not followed (a 3xx is a failure `http_3xx`), and 4xx/5xx come back as responses with their
//!   status rather than as errors.
//! - Proxies from the environment are ignored: through a proxy, the address checked would be the proxy's, not
//!   the target's.
//!
//! Call it from async code through [`gateway_core::run_blocking`]; it blocks for up to the attempt timeout.

use std::fmt;
use std::io::{self, Read};
use std::time::Duration;

use gateway_core::{AttemptOutcome, FailureClass, OutboundRequest, WebhookTransport};
use ureq::http::{Response, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use crate::signature::{DELIVERY_HEADER, SIGNATURE_HEADER};
use crate::ssrf::{BlockedRange, classify};

/// How much of a response body is read (and thrown away) so the connection can be reused.
const DRAINED_RESPONSE_BYTES: u64 = 64 * 1024;
const USER_AGENT: &str = concat!("agent-gateway-webhooks/", env!("CARGO_PKG_VERSION"));

/// Settings of the ureq transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportSettings {
    /// One attempt's time limit, resolving and reading the response included (`--webhook-timeout-ms`).
    pub timeout: Duration,
    /// Turns the SSRF guard off (`--webhook-allow-private-targets`).
    pub allow_private_targets: bool,
}

/// The resolver refused every address of the target.
#[derive(Debug)]
struct SsrfRefused {
    address: std::net::IpAddr,
    range: BlockedRange,
}

impl fmt::Display for SsrfRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {}", self.address, self.range)
    }
}

impl std::error::Error for SsrfRefused {}

/// The host name did not resolve (kept apart from connection errors, which ureq also reports as I/O errors).
#[derive(Debug)]
struct LookupFailed(String);

impl fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LookupFailed {}

/// ureq's resolver, then the SSRF filter.
#[derive(Debug, Default)]
struct GuardedResolver {
    inner: DefaultResolver,
    allow_private_targets: bool,
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = self.inner.resolve(uri, config, timeout).map_err(|error| match error {
            ureq::Error::HostNotFound => ureq::Error::Other(Box::new(LookupFailed("host not found".into()))),
            ureq::Error::Io(io) => ureq::Error::Other(Box::new(LookupFailed(io.to_string()))),
            other => other,
        })?;
        if self.allow_private_targets {
            return Ok(resolved);
        }
        let mut allowed = self.empty();
        let mut refused = None;
        for address in resolved.iter().copied() {
            match classify(address.ip()) {
                None => allowed.push(address),
                Some(range) => refused = refused.or(Some(SsrfRefused { address: address.ip(), range })),
            }
        }
        match refused {
            Some(refused) if allowed.is_empty() => Err(ureq::Error::Other(Box::new(refused))),
            _ => Ok(allowed),
        }
    }
}

/// Idle keep-alive connections older than this are not reused: receivers close idle connections on their own
/// schedule (Node.js after 5 s by default), and reusing one they already closed fails the attempt.
const MAX_IDLE_AGE: Duration = Duration::from_secs(4);

/// The ureq transport. One agent (and connection pool) shared by every attempt, plus a pool-less agent for the
/// one retry of an attempt whose reused connection turned out to be closed.
#[derive(Debug)]
pub struct UreqTransport {
    pooled: ureq::Agent,
    fresh: ureq::Agent,
    timeout: Duration,
}

impl UreqTransport {
    pub fn new(settings: TransportSettings) -> Self {
        let agent = |max_idle_connections: usize| {
            let config = ureq::Agent::config_builder()
                .timeout_global(Some(settings.timeout))
                .max_redirects(0)
                .http_status_as_error(false)
                .proxy(None)
                .user_agent(USER_AGENT)
                .max_idle_connections(max_idle_connections)
                .max_idle_age(MAX_IDLE_AGE)
                .build();
            let resolver = GuardedResolver {
                inner: DefaultResolver::default(),
                allow_private_targets: settings.allow_private_targets,
            };
            ureq::Agent::with_parts(config, DefaultConnector::default(), resolver)
        };
        Self { pooled: agent(DEFAULT_MAX_IDLE_CONNECTIONS), fresh: agent(0), timeout: settings.timeout }
    }

    fn send(
        agent: &ureq::Agent,
        uri: Uri,
        request: &OutboundRequest,
        timeout: Duration,
    ) -> Result<Response<ureq::Body>, ureq::Error> {
        agent
            .post(uri)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("content-type", "application/json")
            .header(SIGNATURE_HEADER, &request.signature)
            .header(DELIVERY_HEADER, request.delivery_id.to_string())
            .send(request.body.as_bytes())
    }
}

/// ureq's default size of the idle pool.
const DEFAULT_MAX_IDLE_CONNECTIONS: usize = 10;

impl WebhookTransport for UreqTransport {
    fn post(&self, request: &OutboundRequest) -> AttemptOutcome {
        let uri: Uri = match request.url.parse() {
            Ok(uri) => uri,
            Err(error) => return AttemptOutcome::failed(FailureClass::InvalidUrl, error.to_string()),
        };
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return AttemptOutcome::failed(FailureClass::InvalidUrl, "not an absolute http(s) URL");
        }
        let started = std::time::Instant::now();
        let sent = match Self::send(&self.pooled, uri.clone(), request, self.timeout) {
            // The connection was closed under us before any response: most likely a pooled keep-alive connection
            // the receiver had already closed. One retry on a new connection, within what is left of the time
            // limit. Should the receiver have processed the first request after all, it sees the same
            // X-Observatory-Delivery twice, which at-least-once delivery allows anyway.
            Err(error) if closed_before_response(&error) => match self.timeout.checked_sub(started.elapsed()) {
                Some(left) if !left.is_zero() => Self::send(&self.fresh, uri, request, left),
                _ => Err(error),
            },
            sent => sent,
        };
        match sent {
            Ok(mut response) => {
                let status = response.status().as_u16();
                // Reading the rest lets ureq pool the connection; what the receiver said is not kept.
                let mut reader = response.body_mut().as_reader().take(DRAINED_RESPONSE_BYTES);
                let _ = io::copy(&mut reader, &mut io::sink());
                if (200..300).contains(&status) {
                    AttemptOutcome::Delivered { status_code: status }
                } else {
                    AttemptOutcome::Failed { class: FailureClass::Http(status), detail: None }
                }
            }
            Err(error) => classify_error(error),
        }
    }
}

fn closed_before_response(error: &ureq::Error) -> bool {
    matches!(error, ureq::Error::Io(io) if matches!(
        io.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    ))
}

fn classify_error(error: ureq::Error) -> AttemptOutcome {
    match error {
        ureq::Error::StatusCode(status) => AttemptOutcome::Failed { class: FailureClass::Http(status), detail: None },
        ureq::Error::Timeout(which) => {
            AttemptOutcome::failed(FailureClass::Timeout, format!("{which:?}").to_lowercase())
        }
        ureq::Error::HostNotFound => AttemptOutcome::failed(FailureClass::Dns, "host not found"),
        ureq::Error::Other(inner) => {
            if let Some(refused) = inner.downcast_ref::<SsrfRefused>() {
                AttemptOutcome::failed(FailureClass::SsrfBlocked, refused.to_string())
            } else if let Some(lookup) = inner.downcast_ref::<LookupFailed>() {
                AttemptOutcome::failed(FailureClass::Dns, lookup.to_string())
            } else {
                AttemptOutcome::failed(FailureClass::Connect, inner.to_string())
            }
        }
        ureq::Error::Io(io) if io.kind() == io::ErrorKind::TimedOut => {
            AttemptOutcome::failed(FailureClass::Timeout, io.to_string())
        }
        ureq::Error::Io(io) => AttemptOutcome::failed(FailureClass::Connect, io.to_string()),
        ureq::Error::BadUri(detail) => AttemptOutcome::failed(FailureClass::InvalidUrl, detail),
        error @ (ureq::Error::Http(_) | ureq::Error::RequireHttpsOnly(_)) => {
            AttemptOutcome::failed(FailureClass::InvalidUrl, error.to_string())
        }
        error @ (ureq::Error::Protocol(_)
        | ureq::Error::LargeResponseHeader(..)
        | ureq::Error::BodyExceedsLimit(_)
        | ureq::Error::Decompress(..)
        | ureq::Error::TooManyRedirects
        | ureq::Error::RedirectFailed) => AttemptOutcome::failed(FailureClass::Protocol, error.to_string()),
        // TLS failures, proxy failures and whatever ureq adds later: the connection could not be made.
        error => AttemptOutcome::failed(FailureClass::Connect, error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::signature::sign;

    /// What a test server saw of one request.
    #[derive(Debug)]
    struct Seen {
        request_line: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
        }
    }

    fn read_request(stream: &TcpStream) -> Option<Seen> {
        let mut reader = BufReader::new(stream);
        let mut request_line = String::new();
        reader.read_line(&mut request_line).ok()?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).ok()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (key, value) = line.split_once(':')?;
            headers.push((key.trim().to_owned(), value.trim().to_owned()));
        }
        let length: usize = headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        Some(Seen { request_line: request_line.trim_end().to_owned(), headers, body })
    }

    /// Serves `responses` (one raw HTTP response per connection, in order) on a loopback port and reports
    /// each request it read.
    fn serve(responses: Vec<&'static str>) -> (SocketAddr, mpsc::Receiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            for response in responses {
                let Ok((mut stream, _)) = listener.accept() else { return };
                if let Some(seen) = read_request(&stream) {
                    let _ = sender.send(seen);
                }
                let _ = stream.write_all(response.as_bytes());
            }
        });
        (address, receiver)
    }

    fn transport(allow_private_targets: bool) -> UreqTransport {
        UreqTransport::new(TransportSettings { timeout: Duration::from_secs(5), allow_private_targets })
    }

    fn request_to(url: String) -> OutboundRequest {
        let body = r#"{"hello":"world"}"#.to_owned();
        let signature = sign(&gateway_core::WebhookSecret::new("s3cret"), body.as_bytes());
        OutboundRequest { delivery_id: 42, url, body, signature }
    }

    #[test]
    fn posts_the_signed_payload_with_its_headers() {
        let (address, seen) = serve(vec!["HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"]);
        let request = request_to(format!("http://{address}/hooks/in?x=1"));
        assert_eq!(transport(true).post(&request), AttemptOutcome::Delivered { status_code: 204 });
        let seen = seen.recv().unwrap();
        assert_eq!(seen.request_line, "POST /hooks/in?x=1 HTTP/1.1");
        assert_eq!(seen.body, request.body.as_bytes());
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(seen.header("x-observatory-signature"), Some(request.signature.as_str()));
        assert_eq!(seen.header("x-observatory-delivery"), Some("42"));
    }

    #[test]
    fn a_receiver_that_closes_idle_connections_gets_every_attempt() {
        // Each connection is closed right after its response, without `connection: close`: the pooled
        // connection ureq keeps is dead when the next attempt picks it up.
        let (address, seen) = serve(vec!["HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"; 20]);
        let transport = transport(true);
        let request = request_to(format!("http://{address}/"));
        for attempt in 0..20 {
            assert_eq!(transport.post(&request), AttemptOutcome::Delivered { status_code: 200 }, "attempt {attempt}");
        }
        assert_eq!(seen.iter().take(20).count(), 20);
    }

    #[test]
    fn error_statuses_are_recorded_and_redirects_not_followed() {
        let (address, seen) = serve(vec![
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy",
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/elsewhere\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        ]);
        let transport = transport(true);
        let request = request_to(format!("http://{address}/"));
        assert_eq!(transport.post(&request).error_detail().as_deref(), Some("http_503"));
        let redirected = transport.post(&request);
        assert_eq!(redirected, AttemptOutcome::Failed { class: FailureClass::Http(302), detail: None });
        // Had the redirect been followed, the third response would have gone to port 1, not here.
        assert_eq!(transport.post(&request).status_code(), Some(404));
        assert_eq!(seen.iter().take(3).count(), 3);
    }

    #[test]
    fn private_targets_are_refused_before_any_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let guarded = transport(false);
        for url in [
            format!("http://{address}/"),
            format!("http://localhost:{}/", address.port()),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "http://[::ffff:127.0.0.1]:9/".to_owned(),
            "http://10.0.0.1/".to_owned(),
            "http://0.0.0.0/".to_owned(),
        ] {
            let outcome = guarded.post(&request_to(url.clone()));
            let AttemptOutcome::Failed { class: FailureClass::SsrfBlocked, detail: Some(detail) } = &outcome else {
                panic!("{url}: {outcome:?}");
            };
            assert!(detail.contains(" is "), "{detail}");
        }
        assert!(listener.accept().is_err(), "the guard let a connection through");
    }

    #[test]
    fn connection_failures_timeouts_and_bad_urls_get_their_class() {
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let outcome = transport(true).post(&request_to(format!("http://{closed}/")));
        assert!(matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Connect, .. }), "{outcome:?}");

        // A server that accepts and never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_address = silent.local_addr().unwrap();
        let quick =
            UreqTransport::new(TransportSettings { timeout: Duration::from_millis(300), allow_private_targets: true });
        let outcome = quick.post(&request_to(format!("http://{silent_address}/")));
        assert!(matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Timeout, .. }), "{outcome:?}");
        drop(silent);

        for url in ["ftp://example.com/", "/relative", "not a url"] {
            let outcome = transport(true).post(&request_to(url.into()));
            assert!(matches!(outcome, AttemptOutcome::Failed { class: FailureClass::InvalidUrl, .. }), "{url}");
        }
    }

    #[test]
    fn unresolvable_hosts_are_dns_failures() {
        // `.invalid` never resolves (RFC 6761).
        let outcome = transport(false).post(&request_to("http://no-such-host.invalid/".into()));
        assert!(matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Dns, .. }), "{outcome:?}");
    }
}
