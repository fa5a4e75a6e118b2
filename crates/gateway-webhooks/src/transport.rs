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
//! - Names are looked up by ureq's resolver (the system's) in production; [`UreqTransport::with_lookup`] puts a
//!   [`HostLookup`] in its place (tests, embedders with their own name service). The guard is the same either
//!   way.
//!
//! Call it from async code through [`gateway_core::run_blocking`]; it blocks for up to the attempt timeout.

use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use gateway_core::{AttemptOutcome, FailureClass, OutboundRequest, WebhookTransport};
use ureq::http::{Response, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use crate::signature::{DELIVERY_HEADER, SIGNATURE_HEADER};
use crate::ssrf::{BlockedRange, classify};
use crate::{epoch, standard};

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
    /// The most attempts in flight at once (`--webhook-max-per-cycle`): as many connections to one host are kept
    /// open for reuse. With fewer, a burst to one receiver opened (and closed) a connection per attempt.
    pub max_in_flight: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            timeout: crate::ATTEMPT_TIMEOUT,
            allow_private_targets: false,
            max_in_flight: crate::DEFAULT_MAX_PER_CYCLE,
        }
    }
}

/// The resolver refused every address of the target.
#[derive(Debug)]
struct SsrfRefused {
    address: IpAddr,
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

/// Looks host names up in place of the system resolver (see [`UreqTransport::with_lookup`]). The SSRF guard
/// filters whatever it returns, exactly as it filters the system's answers.
pub trait HostLookup: fmt::Debug + Send + Sync + 'static {
    /// The addresses of `host` (a name: IP literals never get here), each with `port`. No address, or an error,
    /// means the name does not resolve: the attempt fails as `dns`. It runs on the attempt's thread, outside the
    /// attempt's time limit, so it should answer promptly.
    fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// Where [`GuardedResolver`] gets its addresses.
#[derive(Debug)]
enum Lookup {
    /// ureq's resolver: the system's, within the attempt's time limit.
    System(DefaultResolver),
    Custom(Arc<dyn HostLookup>),
}

/// The lookup, then the SSRF filter.
#[derive(Debug)]
struct GuardedResolver {
    lookup: Lookup,
    allow_private_targets: bool,
    names: ResolvedNames,
}

impl GuardedResolver {
    /// The address of a URL whose host is an IP literal: no lookup needed. (ureq's own resolver would start a
    /// thread to "resolve" it within the time limit, on every request.)
    fn literal(&self, uri: &Uri) -> Option<ResolvedSocketAddrs> {
        let host = uri.host()?;
        let literal = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(host);
        let address = literal.parse::<IpAddr>().ok()?;
        let mut resolved = self.empty();
        resolved.push(SocketAddr::new(address, port_of(uri)));
        Some(resolved)
    }

    fn look_up(&self, lookup: &dyn HostLookup, uri: &Uri) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().ok_or(ureq::Error::HostNotFound)?;
        let port = port_of(uri);
        let mut resolved = self.empty();
        let found = lookup.lookup(host, port).map_err(|error| lookup_failed(error.to_string()))?;
        for address in found {
            if resolved.try_push(address).is_err() {
                break;
            }
        }
        if resolved.is_empty() { Err(lookup_failed("host not found".to_owned())) } else { Ok(resolved) }
    }
}

fn port_of(uri: &Uri) -> u16 {
    uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 })
}

/// How long a host name's addresses are reused. ureq resolves before every request, even one that then reuses a
/// pooled connection, and its resolver starts a thread per lookup to keep within the time limit: at thousands of
/// attempts a second that was a thread per attempt. The SSRF guard still judges the addresses on every attempt,
/// and the connection goes to the addresses it judged.
pub const RESOLVED_NAME_TTL: Duration = Duration::from_secs(30);
/// Most host names remembered; past it the oldest is forgotten.
const MAX_RESOLVED_NAMES: usize = 1_024;

/// Recently resolved host names (system lookups only).
#[derive(Debug, Default)]
struct ResolvedNames {
    by_host: std::sync::Mutex<std::collections::HashMap<(String, u16), (std::time::Instant, ResolvedSocketAddrs)>>,
}

impl ResolvedNames {
    fn get(&self, uri: &Uri) -> Option<ResolvedSocketAddrs> {
        let host = uri.host()?;
        let by_host = gateway_core::runtime::sync::lock(&self.by_host);
        let (at, addresses) = by_host.get(&(host.to_owned(), port_of(uri)))?;
        (at.elapsed() < RESOLVED_NAME_TTL).then(|| addresses.clone())
    }

    fn put(&self, uri: &Uri, addresses: &ResolvedSocketAddrs) {
        let Some(host) = uri.host() else { return };
        let mut by_host = gateway_core::runtime::sync::lock(&self.by_host);
        if by_host.len() >= MAX_RESOLVED_NAMES {
            let oldest = by_host.iter().min_by_key(|(_, (at, _))| *at).map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                by_host.remove(&oldest);
            }
        }
        by_host.insert((host.to_owned(), port_of(uri)), (std::time::Instant::now(), addresses.clone()));
    }
}

fn lookup_failed(reason: String) -> ureq::Error {
    ureq::Error::Other(Box::new(LookupFailed(reason)))
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = match (self.literal(uri), &self.lookup) {
            (Some(literal), _) => literal,
            (None, Lookup::System(system)) => match self.names.get(uri) {
                Some(cached) => cached,
                None => {
                    let found = system.resolve(uri, config, timeout).map_err(|error| match error {
                        ureq::Error::HostNotFound => lookup_failed("host not found".into()),
                        ureq::Error::Io(io) => lookup_failed(io.to_string()),
                        other => other,
                    })?;
                    self.names.put(uri, &found);
                    found
                }
            },
            (None, Lookup::Custom(lookup)) => self.look_up(lookup.as_ref(), uri)?,
        };
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
    /// The transport the gateway runs: names resolve through the system resolver.
    pub fn new(settings: TransportSettings) -> Self {
        Self::build(settings, || Lookup::System(DefaultResolver::default()))
    }

    /// The same transport with names looked up by `lookup` instead of the system resolver: for tests (no test
    /// may depend on the machine's DNS, or reach beyond loopback) and for embedders with their own name
    /// service. IP literals in URLs are used as they are, and the SSRF guard applies unchanged.
    pub fn with_lookup(settings: TransportSettings, lookup: Arc<dyn HostLookup>) -> Self {
        Self::build(settings, || Lookup::Custom(Arc::clone(&lookup)))
    }

    fn build(settings: TransportSettings, lookup: impl Fn() -> Lookup) -> Self {
        let per_host = settings.max_in_flight.clamp(MIN_IDLE_CONNECTIONS, MAX_IDLE_PER_HOST);
        let agent = |max_idle_connections: usize| {
            let config = ureq::Agent::config_builder()
                .timeout_global(Some(settings.timeout))
                .max_redirects(0)
                .http_status_as_error(false)
                .proxy(None)
                .user_agent(USER_AGENT)
                .max_idle_connections(max_idle_connections)
                .max_idle_connections_per_host(per_host.min(max_idle_connections))
                .max_idle_age(MAX_IDLE_AGE)
                .build();
            let resolver = GuardedResolver {
                lookup: lookup(),
                allow_private_targets: settings.allow_private_targets,
                names: ResolvedNames::default(),
            };
            ureq::Agent::with_parts(config, DefaultConnector::default(), resolver)
        };
        let pooled = (per_host * HOSTS_KEPT).min(MAX_IDLE_CONNECTIONS);
        Self { pooled: agent(pooled), fresh: agent(0), timeout: settings.timeout }
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
            .header(standard::ID_HEADER, request.delivery_id.to_string())
            .header(standard::TIMESTAMP_HEADER, request.timestamp.to_string())
            .header(standard::SIGNATURE_HEADER, &request.standard_signature)
            .header(epoch::EPOCH_HEADER, request.epoch.to_string())
            .header(epoch::EPOCH_SIGNATURE_HEADER, &request.epoch_signature)
            .send(request.body.as_bytes())
    }
}

/// Idle connections kept per host at least (ureq's default) and at most, and in all at most. ureq finds a pooled
/// connection by scanning the pool, so a pool of hundreds costs every request; attempts in flight to one host at
/// a time rarely number more than a few dozen even at thousands a second (each takes a millisecond or so).
const MIN_IDLE_CONNECTIONS: usize = 3;
const MAX_IDLE_PER_HOST: usize = 32;
const MAX_IDLE_CONNECTIONS: usize = 128;
/// The idle pool holds a full set of connections for this many hosts.
const HOSTS_KEPT: usize = 4;

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

    /// The production transport, for URLs with IP literals (which never reach the system resolver).
    fn transport(allow_private_targets: bool) -> UreqTransport {
        UreqTransport::new(TransportSettings {
            timeout: Duration::from_secs(5),
            allow_private_targets,
            ..TransportSettings::default()
        })
    }

    /// A name service for the tests: a few names, all on loopback; everything else does not resolve. No test
    /// depends on the machine's DNS, nor reaches beyond loopback.
    #[derive(Debug)]
    struct LoopbackNames;

    impl HostLookup for LoopbackNames {
        fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
            match host {
                "localhost" | "receiver.test" => Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]),
                "dual-stack.test" => {
                    Ok(vec![SocketAddr::from(([127, 0, 0, 1], port)), SocketAddr::from(([0; 16], port))])
                }
                "broken-resolver.test" => Err(io::Error::other("resolver unreachable")),
                _ => Ok(Vec::new()),
            }
        }
    }

    /// The transport with [`LoopbackNames`] in place of the system resolver.
    fn with_names(allow_private_targets: bool) -> UreqTransport {
        UreqTransport::with_lookup(
            TransportSettings {
                timeout: Duration::from_secs(5),
                allow_private_targets,
                ..TransportSettings::default()
            },
            Arc::new(LoopbackNames),
        )
    }

    fn request_to(url: String) -> OutboundRequest {
        let body = r#"{"hello":"world"}"#.to_owned();
        let secret = gateway_core::WebhookSecret::new("s3cret");
        let signature = sign(&secret, body.as_bytes());
        let standard_signature = standard::sign(&secret, "42", 1_700_000_000, body.as_bytes());
        let epoch_signature = epoch::sign(&secret, "42", 1_700_000_000, 7);
        OutboundRequest {
            delivery_id: 42,
            url,
            body,
            signature,
            timestamp: 1_700_000_000,
            standard_signature,
            epoch: 7,
            epoch_signature,
        }
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
        assert_eq!(seen.header("webhook-id"), Some("42"));
        assert_eq!(seen.header("webhook-timestamp"), Some("1700000000"));
        assert_eq!(seen.header("webhook-signature"), Some(request.standard_signature.as_str()));
        assert_eq!(seen.header("x-gateway-epoch"), Some("7"));
        assert_eq!(seen.header("x-gateway-epoch-signature"), Some(request.epoch_signature.as_str()));
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
        let literals = [
            format!("http://{address}/"),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "http://[::ffff:127.0.0.1]:9/".to_owned(),
            "http://10.0.0.1/".to_owned(),
            "http://0.0.0.0/".to_owned(),
        ];
        // By name, the guard judges what the name resolves to: every address of it, whichever lookup answered.
        let names = [
            format!("http://localhost:{}/", address.port()),
            format!("http://receiver.test:{}/", address.port()),
            format!("https://dual-stack.test:{}/", address.port()),
        ];
        let cases =
            literals.iter().map(|url| (transport(false), url)).chain(names.iter().map(|url| (with_names(false), url)));
        for (guarded, url) in cases {
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
        let quick = UreqTransport::new(TransportSettings {
            timeout: Duration::from_millis(300),
            allow_private_targets: true,
            ..TransportSettings::default()
        });
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
        for guard in [false, true] {
            let outcome = with_names(guard).post(&request_to("http://no-such-host.invalid/".into()));
            assert_eq!(outcome, AttemptOutcome::failed(FailureClass::Dns, "host not found"), "guard off: {guard}");
            let outcome = with_names(guard).post(&request_to("http://broken-resolver.test/".into()));
            assert_eq!(
                outcome,
                AttemptOutcome::failed(FailureClass::Dns, "resolver unreachable"),
                "guard off: {guard}"
            );
        }
    }

    #[test]
    fn a_name_goes_to_the_address_the_lookup_gave_on_the_port_of_the_url() {
        let (address, seen) = serve(vec!["HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]);
        let request = request_to(format!("http://receiver.test:{}/by-name", address.port()));
        assert_eq!(with_names(true).post(&request), AttemptOutcome::Delivered { status_code: 200 });
        let seen = seen.recv().unwrap();
        assert_eq!(seen.request_line, "POST /by-name HTTP/1.1");
        assert_eq!(seen.header("host"), Some(format!("receiver.test:{}", address.port()).as_str()));
    }
}
