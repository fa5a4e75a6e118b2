//! The edge's state, shared by every connection of a listener: the body budget, the connections per address, and
//! whether the loopback rules are on.

use std::sync::Arc;

use http::{HeaderMap, Uri};

use crate::Refusal;
use crate::body_budget::BodyBudget;
use crate::caller::check_loopback_caller;
use crate::per_address::ConnectionsPerAddress;

/// The edge's settings (the gateway's flags).
#[derive(Debug, Clone, Copy)]
pub struct EdgeConfig {
    /// The Host and Origin checks ([`check_loopback_caller`]): on where whoever connects is trusted because only
    /// this machine can connect, since a browser on this machine can connect too.
    pub loopback_rules: bool,
    /// Request-body bytes being read at once, process-wide ([`BodyBudget`]).
    pub max_inflight_body_bytes: usize,
    /// Open connections per client address ([`ConnectionsPerAddress`]), at most [`MAX_CONNECTIONS`](crate::MAX_CONNECTIONS).
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

    /// [`Refusal::MisdirectedRequest`] or [`Refusal::CrossOrigin`] while the loopback rules are on (see
    /// [`check_loopback_caller`]); nothing otherwise.
    pub fn check_caller(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        if self.loopback_rules { check_loopback_caller(uri, headers) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn the_rules_apply_only_on_loopback_without_agent_auth() {
        let edge = |loopback_rules| {
            Edge::new(EdgeConfig { loopback_rules, max_inflight_body_bytes: 1, max_connections_per_address: 1 })
        };
        let mut headers = HeaderMap::new();
        headers.append(http::header::HOST, HeaderValue::from_static("evil.example"));
        headers.append(http::header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        let uri = Uri::from_static("/");
        assert!(edge(false).check_caller(&uri, &headers).is_ok());
        // The gateway answers it 421 (bin/gateway/src/http/error.rs tests the mapping).
        assert_eq!(edge(true).check_caller(&uri, &headers).unwrap_err(), Refusal::MisdirectedRequest);
    }
}
