//! A webhook receiver for the tests: gateway-testkit's recording HTTP server on 127.0.0.1, under the names the
//! webhook tests use. It records every request and answers with a status the test sets, or holds the request
//! open (to catch the gateway mid-attempt).
#![allow(dead_code, reason = "shared by the webhook tests; not each uses every helper")]

use std::time::Instant;

use gateway_testkit::{Reply, Request};

use crate::support::PATIENCE;

/// What the receiver does with the next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Answer at once with this status.
    Status(u16),
    /// Keep the request open (no response) until the behaviour changes.
    Hold,
}

impl From<Behaviour> for Reply {
    fn from(behaviour: Behaviour) -> Self {
        match behaviour {
            Behaviour::Status(status) => Self::Status(status),
            Behaviour::Hold => Self::Hold,
        }
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    /// When the whole request had arrived.
    pub at: Instant,
    /// The request target: path and query.
    pub path: String,
    /// Names in lower case, as HTTP/1 headers are case-insensitive.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// `x-observatory-delivery`, or -1 without one.
    pub fn delivery_id(&self) -> i64 {
        self.header("x-observatory-delivery").and_then(|id| id.parse().ok()).unwrap_or(-1)
    }
}

impl From<Request> for Received {
    fn from(request: Request) -> Self {
        let headers = request
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect();
        Self { at: request.at, path: request.path, headers, body: request.body.to_vec() }
    }
}

/// The running receiver; stops when dropped.
#[derive(Debug)]
pub struct Receiver {
    inner: gateway_testkit::Receiver,
}

impl Receiver {
    pub fn start(behaviour: Behaviour) -> Self {
        Self { inner: gateway_testkit::Receiver::start(behaviour.into()).unwrap() }
    }

    pub fn url(&self, path: &str) -> String {
        self.inner.url(path)
    }

    pub fn set(&self, behaviour: Behaviour) {
        self.inner.set(behaviour.into());
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.requests().into_iter().map(Received::from).collect()
    }

    pub fn count(&self) -> usize {
        self.inner.count()
    }

    /// Waits until at least `count` requests arrived; panics after [`PATIENCE`].
    pub fn wait_for(&self, count: usize) -> Vec<Received> {
        let requests = self.inner.wait_for(count, PATIENCE).unwrap_or_else(|timed_out| panic!("{timed_out}"));
        requests.into_iter().map(Received::from).collect()
    }

    /// The receiver underneath, for what the names above do not cover (a script of statuses, delays).
    pub fn testkit(&self) -> &gateway_testkit::Receiver {
        &self.inner
    }
}
