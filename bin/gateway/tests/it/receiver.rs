//! A webhook receiver for the tests: a small HTTP/1.1 server on 127.0.0.1 that records every request and
//! answers with a status the test sets, or holds the request open (to catch the gateway mid-attempt).
#![allow(dead_code, reason = "shared by the webhook tests and the benchmark; not each uses every helper")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::PATIENCE;

/// What the receiver does with the next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Answer at once with this status.
    Status(u16),
    /// Keep the request open (no response) until the behaviour changes.
    Hold,
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    pub fn delivery_id(&self) -> i64 {
        self.header("x-observatory-delivery").and_then(|id| id.parse().ok()).unwrap_or(-1)
    }
}

#[derive(Debug)]
struct Shared {
    behaviour: Mutex<Behaviour>,
    changed: Condvar,
    received: Mutex<Vec<Received>>,
    stopped: AtomicBool,
}

/// The running receiver; stops when dropped.
pub struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    pub fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            behaviour: Mutex::new(behaviour),
            changed: Condvar::new(),
            received: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let connection = Arc::clone(&accepting);
                thread::spawn(move || serve_connection(stream, &connection));
            }
        });
        Self { address, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().unwrap() = behaviour;
        self.shared.changed.notify_all();
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.shared.received.lock().unwrap().len()
    }

    /// Waits until at least `count` requests arrived; panics after [`PATIENCE`].
    pub fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(Instant::now() < deadline, "the receiver got {} of {count} requests", received.len());
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.set(Behaviour::Status(503));
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
    }
}

/// Serves requests on one connection (keep-alive) until the client closes it.
fn serve_connection(stream: TcpStream, shared: &Shared) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let Some(received) = read_request(&mut reader) else { return };
        shared.received.lock().unwrap().push(received);
        let mut behaviour = shared.behaviour.lock().unwrap();
        while *behaviour == Behaviour::Hold && !shared.stopped.load(Ordering::SeqCst) {
            behaviour = shared.changed.wait_timeout(behaviour, Duration::from_millis(200)).unwrap().0;
        }
        let Behaviour::Status(status) = *behaviour else { return };
        drop(behaviour);
        let response = format!("HTTP/1.1 {status} Status\r\ncontent-length: 0\r\n\r\n");
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).ok()? == 0 {
        return None;
    }
    let at = Instant::now();
    let path = request_line.split_whitespace().nth(1)?.to_owned();
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
    let length = headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received { at, path, headers, body })
}
