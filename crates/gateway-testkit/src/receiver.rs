//! A recording HTTP/1.1 server on 127.0.0.1, the target of webhook deliveries in tests and benchmarks.
//!
//! hyper reads the requests (keep-alive, `content-length` and chunked bodies alike); the receiver only records
//! them and answers as the test scripted. It runs on its own thread and runtime, so it works the same from a
//! synchronous test, from inside another runtime, and in a benchmark that measures the caller's runtime.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, watch};

/// How the receiver answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// This status at once, with an empty body.
    Status(u16),
    /// This status after `delay`: a slow target.
    Delayed { status: u16, delay: Duration },
    /// No answer, the request held open, until [`Receiver::set`] makes the fallback something other than
    /// `Hold`; the request then gets that. Catches a sender in the middle of an attempt.
    Hold,
}

impl Reply {
    /// Panics on a status hyper cannot send, at the test's own call rather than inside the server.
    fn checked(self) -> Self {
        if let Self::Status(status) | Self::Delayed { status, .. } = self {
            assert!(StatusCode::from_u16(status).is_ok(), "{status} is not an HTTP status code");
        }
        self
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// The request target as sent: path and query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the whole body had arrived.
    pub at: Instant,
}

impl Request {
    /// The first value of header `name`, if it is visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// `x-observatory-delivery`: the delivery id the gateway sends with each attempt.
    pub fn delivery_id(&self) -> Option<i64> {
        self.header("x-observatory-delivery").and_then(|id| id.parse().ok())
    }

    /// `x-observatory-signature`: `sha256=<hex HMAC of the body>`.
    pub fn signature(&self) -> Option<&str> {
        self.header("x-observatory-signature")
    }
}

/// [`Receiver::wait_for`] ran out of time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the receiver got {received} of {wanted} requests within {waited:?}")]
pub struct TimedOut {
    pub received: usize,
    pub wanted: usize,
    pub waited: Duration,
}

/// What the connections share. The requests and the script are under one lock so that the n-th request to
/// arrive is the one that takes the n-th scripted reply.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
    fallback: watch::Sender<Reply>,
}

#[derive(Debug, Default)]
struct State {
    requests: Vec<Request>,
    script: VecDeque<Reply>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; the records are still good to read.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `request` and returns how to answer it.
    fn record(&self, request: Request) -> Reply {
        let mut state = self.state();
        state.requests.push(request);
        let reply = state.script.pop_front().unwrap_or_else(|| *self.fallback.borrow());
        drop(state);
        self.arrived.notify_all();
        reply
    }

    /// Waits while the fallback is [`Reply::Hold`], then returns it.
    async fn released(&self) -> Reply {
        let mut fallback = self.fallback.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let released = fallback.wait_for(|reply| *reply != Reply::Hold).await.map(|reply| *reply);
        released.unwrap_or(Reply::Status(503))
    }
}

/// The running receiver, on `127.0.0.1` and a port of its own; stops when dropped, closing every connection
/// (held requests included).
#[derive(Debug)]
pub struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Starts a receiver that answers every request with `fallback` (see [`Receiver::script`] for others).
    pub fn start(fallback: Reply) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            arrived: Condvar::new(),
            fallback: watch::Sender::new(fallback.checked()),
        });
        let (stop, stopped) = oneshot::channel();
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("receiver-{}", address.port()))
            .spawn(move || runtime.block_on(accept(listener, serving, stopped)))?;
        // The runtime is dropped when the thread ends, and with it every connection task.
        Ok(Self { address, shared, stop: Some(stop), thread: Some(thread) })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Answers the next requests with `replies`, one each in order of arrival, before the fallback applies
    /// again. Adds to what is still queued.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        let replies: Vec<Reply> = replies.into_iter().map(Reply::checked).collect();
        self.shared.state().script.extend(replies);
    }

    /// Sets the fallback: how requests are answered once the script is used up. Held requests are answered
    /// with it unless it is [`Reply::Hold`] again.
    pub fn set(&self, fallback: Reply) {
        self.shared.fallback.send_replace(fallback.checked());
    }

    /// Every request so far (since the last [`Receiver::clear`]), in order of arrival.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.state().requests.clone()
    }

    pub fn count(&self) -> usize {
        self.shared.state().requests.len()
    }

    /// Forgets the requests recorded so far; the script and the fallback stay.
    pub fn clear(&self) {
        self.shared.state().requests.clear();
    }

    /// Waits until at least `count` requests have arrived and returns them all, or fails after `timeout`.
    pub fn wait_for(&self, count: usize, timeout: Duration) -> Result<Vec<Request>, TimedOut> {
        self.wait(count, timeout, |requests| requests.to_vec())
    }

    /// [`Receiver::wait_for`] without copying the requests: for a loop that waits after every request.
    pub fn wait_for_count(&self, count: usize, timeout: Duration) -> Result<(), TimedOut> {
        self.wait(count, timeout, |_| ())
    }

    fn wait<T>(&self, count: usize, timeout: Duration, take: impl FnOnce(&[Request]) -> T) -> Result<T, TimedOut> {
        let started = Instant::now();
        let state = self.shared.state();
        let (state, _) = self
            .shared
            .arrived
            .wait_timeout_while(state, timeout, |state| state.requests.len() < count)
            .unwrap_or_else(PoisonError::into_inner);
        if state.requests.len() < count {
            return Err(TimedOut { received: state.requests.len(), wanted: count, waited: started.elapsed() });
        }
        Ok(take(&state.requests))
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Joined so that the port is closed once the receiver is gone.
            let _ = thread.join();
        }
    }
}

async fn accept(listener: tokio::net::TcpListener, shared: Arc<Shared>, mut stopped: oneshot::Receiver<()>) {
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors, most likely: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(Arc::clone(&shared), request));
            // A client that goes away mid-request ends its connection; nothing to report.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Records the request once its body is in, then answers as scripted. A body that breaks off fails the
/// connection and is not recorded.
async fn answer(
    shared: Arc<Shared>,
    request: hyper::Request<Incoming>,
) -> Result<Response<Empty<Bytes>>, hyper::Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let at = Instant::now();
    let path = parts.uri.path_and_query().map_or_else(|| parts.uri.to_string(), ToString::to_string);
    let mut reply = shared.record(Request { method: parts.method, path, headers: parts.headers, body, at });
    let status = loop {
        match reply {
            Reply::Status(status) => break status,
            Reply::Delayed { status, delay } => {
                tokio::time::sleep(delay).await;
                break status;
            }
            Reply::Hold => reply = shared.released().await,
        }
    };
    let mut response = Response::new(Empty::new());
    // Every reply was checked when it was set.
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Ok(response)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::TcpStream;
    use std::sync::mpsc;

    use super::*;

    const PATIENCE: Duration = Duration::from_secs(20);

    fn client() -> ureq::Agent {
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent()
    }

    fn post(agent: &ureq::Agent, url: &str, body: &str) -> u16 {
        agent.post(url).content_type("application/json").send(body).unwrap().status().as_u16()
    }

    #[test]
    fn records_each_request_as_sent() {
        let receiver = Receiver::start(Reply::Status(204)).unwrap();
        let before = Instant::now();
        let status = client()
            .post(receiver.url("/hooks/in?x=1"))
            .header("x-observatory-delivery", "42")
            .header("x-observatory-signature", "sha256=00ff")
            .content_type("application/json")
            .send(r#"{"hello":"world"}"#)
            .unwrap()
            .status()
            .as_u16();
        let after = Instant::now();
        assert_eq!(status, 204);
        let requests = receiver.wait_for(1, PATIENCE).unwrap();
        let [request] = requests.as_slice() else { panic!("{requests:?}") };
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.path, "/hooks/in?x=1");
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("X-Observatory-Delivery"), Some("42"), "header names are case-insensitive");
        assert_eq!((request.delivery_id(), request.signature()), (Some(42), Some("sha256=00ff")));
        assert_eq!(request.header("x-not-sent"), None);
        assert_eq!(&request.body[..], br#"{"hello":"world"}"#);
        assert!(before <= request.at && request.at <= after, "arrival is stamped while the request is in flight");
    }

    #[test]
    fn scripted_replies_come_first_in_order_then_the_fallback() {
        let receiver = Receiver::start(Reply::Status(200)).unwrap();
        receiver.script([Reply::Status(500), Reply::Status(503)]);
        receiver.script([Reply::Status(429)]);
        let agent = client();
        let statuses: Vec<u16> = (0..5).map(|n| post(&agent, &receiver.url("/"), &format!("{{\"n\":{n}}}"))).collect();
        assert_eq!(statuses, [500, 503, 429, 200, 200]);
        receiver.set(Reply::Status(410));
        assert_eq!(post(&agent, &receiver.url("/"), "{}"), 410);
        let bodies: Vec<Bytes> = receiver.requests().into_iter().map(|request| request.body).collect();
        assert_eq!(bodies[..5], ["{\"n\":0}", "{\"n\":1}", "{\"n\":2}", "{\"n\":3}", "{\"n\":4}"].map(Bytes::from));
        assert_eq!(receiver.count(), 6);
        receiver.clear();
        assert_eq!(receiver.count(), 0);
    }

    #[test]
    fn a_held_request_is_recorded_at_once_and_answered_on_release() {
        let receiver = Receiver::start(Reply::Hold).unwrap();
        let (answered, answer) = mpsc::channel();
        let url = receiver.url("/held");
        let sender = std::thread::spawn(move || answered.send(post(&client(), &url, "{}")).unwrap());
        receiver.wait_for(1, PATIENCE).unwrap();
        assert_eq!(answer.try_recv(), Err(mpsc::TryRecvError::Empty), "no answer while held");
        receiver.set(Reply::Status(202));
        assert_eq!(answer.recv_timeout(PATIENCE), Ok(202));
        sender.join().unwrap();
    }

    #[test]
    fn a_delayed_reply_takes_at_least_its_delay() {
        let delay = Duration::from_millis(200);
        let receiver = Receiver::start(Reply::Status(200)).unwrap();
        receiver.script([Reply::Delayed { status: 201, delay }]);
        let agent = client();
        let started = Instant::now();
        assert_eq!(post(&agent, &receiver.url("/slow"), "{}"), 201);
        assert!(started.elapsed() >= delay, "answered after {:?}", started.elapsed());
        assert_eq!(post(&agent, &receiver.url("/"), "{}"), 200);
    }

    #[test]
    fn waiting_for_more_than_arrived_times_out_with_the_count() {
        let receiver = Receiver::start(Reply::Status(200)).unwrap();
        post(&client(), &receiver.url("/"), "{}");
        let timed_out = receiver.wait_for(2, Duration::from_millis(50)).unwrap_err();
        assert_eq!((timed_out.received, timed_out.wanted), (1, 2));
        assert!(timed_out.to_string().starts_with("the receiver got 1 of 2 requests within "), "{timed_out}");
        assert_eq!(receiver.wait_for_count(1, PATIENCE), Ok(()));
    }

    #[test]
    fn concurrent_senders_are_all_recorded() {
        let receiver = Receiver::start(Reply::Status(204)).unwrap();
        let senders: Vec<_> = (0..8)
            .map(|sender| {
                let url = receiver.url(&format!("/from/{sender}"));
                std::thread::spawn(move || {
                    let agent = client();
                    (0..10).map(|_| post(&agent, &url, "{}")).collect::<Vec<u16>>()
                })
            })
            .collect();
        for sender in senders {
            assert_eq!(sender.join().unwrap(), [204; 10]);
        }
        assert_eq!(receiver.wait_for(80, PATIENCE).unwrap().len(), 80);
    }

    #[test]
    fn dropping_the_receiver_closes_its_port() {
        let receiver = Receiver::start(Reply::Hold).unwrap();
        let address = receiver.address();
        TcpStream::connect(address).unwrap();
        drop(receiver);
        assert!(TcpStream::connect(address).is_err(), "still accepting after the drop");
    }

    #[test]
    #[should_panic(expected = "1000 is not an HTTP status code")]
    fn an_impossible_status_is_refused_where_it_is_set() {
        Receiver::start(Reply::Status(1000)).unwrap();
    }
}
