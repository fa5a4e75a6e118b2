//! Open connections per client address (the gateway's `--max-connections-per-address`): one host cannot take the
//! whole connection cap (10,080 idle sockets from one machine once made `/healthz` time out for everyone else).
//!
//! Clients are counted as every per-address count counts them ([`gateway_core::AddressKey`]): an IPv4 address is
//! one client, an IPv6 client is its /64.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_core::AddressKey;
use gateway_core::runtime::sync::lock;

/// The default cap of open connections per client address (`--max-connections-per-address`).
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 256;
/// Refused connections are logged at most this often (with how many since the last line): a client hammering at
/// its cap must not flood the log.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The open connections of each client address.
#[derive(Debug)]
pub struct ConnectionsPerAddress {
    limit: usize,
    open: Mutex<HashMap<AddressKey, usize>>,
    refused: AtomicU64,
    /// When a refusal was last logged, and how many were not since.
    log: Mutex<(Option<Instant>, u64)>,
}

impl ConnectionsPerAddress {
    pub fn new(limit: usize) -> Self {
        Self { limit, open: Mutex::default(), refused: AtomicU64::new(0), log: Mutex::default() }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place for a new connection from `address`, held until dropped; `None` when the address holds `limit`.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Option<AddressSlot> {
        let key = AddressKey::of(address);
        {
            let mut open = lock(&self.open);
            let count = open.entry(key).or_insert(0);
            if *count < self.limit {
                *count += 1;
                return Some(AddressSlot { owner: Arc::clone(self), key });
            }
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.log_refusal(address);
        None
    }

    /// Connections refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections open from `address`'s group right now.
    pub fn open_from(&self, address: IpAddr) -> usize {
        lock(&self.open).get(&AddressKey::of(address)).copied().unwrap_or(0)
    }

    fn log_refusal(&self, address: IpAddr) {
        let mut log = lock(&self.log);
        let (last, unlogged) = &mut *log;
        *unlogged += 1;
        if last.is_some_and(|last| last.elapsed() < REFUSAL_LOG_INTERVAL) {
            return;
        }
        tracing::warn!(
            %address,
            refused = *unlogged,
            limit = self.limit,
            "connections refused: the client address holds --max-connections-per-address (behind a reverse proxy, \
             every client has the proxy's address)"
        );
        *last = Some(Instant::now());
        *unlogged = 0;
    }
}

/// One connection's place in its address's count.
#[derive(Debug)]
pub struct AddressSlot {
    owner: Arc<ConnectionsPerAddress>,
    key: AddressKey,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.owner.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_holds_at_most_the_limit_and_a_closed_connection_frees_its_place() {
        let connections = Arc::new(ConnectionsPerAddress::new(2));
        let first = connections.admit(ip("2001:db8::1")).unwrap();
        let _second = connections.admit(ip("2001:db8::2")).unwrap();
        assert!(connections.admit(ip("2001:db8::3")).is_none(), "the same /64");
        let _other = connections.admit(ip("2001:db8:0:1::1")).expect("another /64 is another client");
        assert_eq!(connections.refused(), 1);
        drop(first);
        assert_eq!(connections.open_from(ip("2001:db8::9")), 1);
        let _again = connections.admit(ip("2001:db8::3")).expect("a place was freed");
        drop(_again);
        drop(_second);
        assert_eq!(connections.open_from(ip("2001:db8::9")), 0);
        assert!(lock(&connections.open).len() == 1, "an address with no connection is forgotten");
    }
}
