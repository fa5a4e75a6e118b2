//! How many event streams of agents' reminders may be open at once (docs/architecture.md, "Stream memory"): per
//! agent (issue 16: one agent's token from 33 loopback addresses took all 1,024 slots), per client address (counted
//! as [`AddressKey`] counts it, never by a header a client could set), and in all. A stream that would pass one of
//! them is refused ([`AuthError::TooManyStreams`]), the agent's own cap first since it is the agent's to fix; an
//! admitted stream holds its places for as long as it is open ([`AdmittedStream`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use gateway_core::AgentId;
use gateway_core::runtime::sync::lock;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::AuthError;
use crate::credentials::StreamGuard;
use gateway_core::AddressKey;

/// Open agent streams from one client address (an IP address; the port does not count) unless configured otherwise
/// (`--agent-streams-per-address`).
pub const DEFAULT_STREAMS_PER_ADDRESS: usize = 32;
/// Open agent streams of one agent, whatever addresses they come from, unless configured otherwise
/// (`--agent-streams-per-agent`). An agent needs one; a few more cover reconnects that overlap with a stream the
/// gateway has not seen close yet, and a handful of processes sharing one identity.
pub const DEFAULT_STREAMS_PER_AGENT: usize = 8;
/// Open agent streams of one instance, in all: past this, new ones are refused so that streams cannot exhaust
/// memory or file handles. Also the ceiling of the two caps above.
pub const MAX_AGENT_STREAMS: usize = 1024;

/// Which cap a refused stream met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamCap {
    #[error("this agent has as many event streams open as it may: close one first")]
    Agent,
    #[error("this client address has as many agent streams open as it may")]
    Address,
    #[error("the gateway serves as many agent streams as it can")]
    Instance,
}

/// Open streams counted by what they share: a client address or an agent. Only keys with an open stream are held,
/// so the map is bounded by the streams themselves.
#[derive(Debug)]
struct OpenStreams<K> {
    open: Mutex<HashMap<K, usize>>,
}

impl<K> Default for OpenStreams<K> {
    fn default() -> Self {
        Self { open: Mutex::new(HashMap::new()) }
    }
}

impl<K: std::hash::Hash + Eq + Clone> OpenStreams<K> {
    /// A slot for `key`, or `None` when it holds `limit` already.
    fn acquire(self: &Arc<Self>, key: &K, limit: usize) -> Option<StreamSlot<K>> {
        let mut open = lock(&self.open);
        let count = open.entry(key.clone()).or_insert(0);
        if *count >= limit {
            if *count == 0 {
                open.remove(key);
            }
            return None;
        }
        *count += 1;
        Some(StreamSlot { streams: Arc::clone(self), key: key.clone() })
    }

    /// Streams open for `key` right now.
    fn open_for(&self, key: &K) -> usize {
        lock(&self.open).get(key).copied().unwrap_or(0)
    }
}

/// One stream's place in its key's count, given back when dropped.
#[derive(Debug)]
struct StreamSlot<K: std::hash::Hash + Eq + Clone> {
    streams: Arc<OpenStreams<K>>,
    key: K,
}

impl<K: std::hash::Hash + Eq + Clone> Drop for StreamSlot<K> {
    fn drop(&mut self) {
        let mut open = lock(&self.streams.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The three counts of open agent streams.
#[derive(Debug)]
pub(crate) struct AgentStreams {
    per_address: Arc<OpenStreams<AddressKey>>,
    per_agent: Arc<OpenStreams<AgentId>>,
    total: Arc<Semaphore>,
    limits: StreamLimits,
}

/// The caps of [`AgentStreams`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamLimits {
    pub(crate) per_address: usize,
    pub(crate) per_agent: usize,
    pub(crate) total: usize,
}

impl AgentStreams {
    pub(crate) fn new(limits: StreamLimits) -> Self {
        Self {
            per_address: Arc::default(),
            per_agent: Arc::default(),
            total: Arc::new(Semaphore::new(limits.total.min(Semaphore::MAX_PERMITS))),
            limits,
        }
    }

    /// Places for one more stream of `agent_id` from `client`, checked in the order the refusals are answered in.
    pub(crate) fn admit(&self, agent_id: &AgentId, client: IpAddr) -> Result<StreamPlaces, AuthError> {
        let agent = self
            .per_agent
            .acquire(agent_id, self.limits.per_agent)
            .ok_or(AuthError::TooManyStreams(StreamCap::Agent))?;
        let address = self
            .per_address
            .acquire(&AddressKey::of(client), self.limits.per_address)
            .ok_or(AuthError::TooManyStreams(StreamCap::Address))?;
        let total =
            Arc::clone(&self.total).try_acquire_owned().map_err(|_| AuthError::TooManyStreams(StreamCap::Instance))?;
        Ok(StreamPlaces { _agent: agent, _address: address, _total: total })
    }

    /// Agent streams open right now.
    pub(crate) fn open(&self) -> usize {
        self.limits.total.min(Semaphore::MAX_PERMITS).saturating_sub(self.total.available_permits())
    }

    /// Streams of `agent_id` open right now.
    pub(crate) fn open_for_agent(&self, agent_id: &AgentId) -> usize {
        self.per_agent.open_for(agent_id)
    }
}

/// One stream's places in the three counts.
#[derive(Debug)]
pub(crate) struct StreamPlaces {
    _agent: StreamSlot<AgentId>,
    _address: StreamSlot<AddressKey>,
    _total: OwnedSemaphorePermit,
}

/// An agent stream let in ([`crate::Auth::admit_stream`]): it holds the stream's places in the caps, and, for a
/// stream opened with an agent's credential, the stream's registration with the credential cache, until dropped.
#[derive(Debug)]
pub struct AdmittedStream {
    pub(crate) stop: CancellationToken,
    pub(crate) _places: StreamPlaces,
    pub(crate) _revocation: Option<StreamGuard>,
}

impl AdmittedStream {
    /// Cancelled when the stream must end: at shutdown, or when the credential it was opened with is revoked or
    /// expires.
    pub fn stop(&self) -> &CancellationToken {
        &self.stop
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn a_client_address_holds_at_most_its_share_of_streams() {
        let streams = Arc::new(OpenStreams::<AddressKey>::default());
        let key = |address: Ipv4Addr| AddressKey::of(IpAddr::from(address));
        let (one, two) = (key(Ipv4Addr::new(10, 0, 0, 1)), key(Ipv4Addr::new(10, 0, 0, 2)));
        let first = streams.acquire(&one, 2).unwrap();
        let _second = streams.acquire(&one, 2).unwrap();
        assert!(streams.acquire(&one, 2).is_none());
        let _other = streams.acquire(&two, 2).unwrap();
        drop(first);
        assert_eq!(streams.open_for(&one), 1);
        assert!(streams.acquire(&one, 2).is_some());
        assert_eq!(streams.open_for(&one), 1, "the slot just taken was dropped");
        drop(_other);
        assert_eq!(lock(&streams.open).len(), 1, "an address without streams is not held");
    }

    /// The agent's own cap is met first (the agent's to fix), then the address's, then the instance's; a refused
    /// stream holds no place, and a closed one gives its places back.
    #[test]
    fn the_agents_cap_comes_first_then_the_address_then_the_instance() {
        let streams = AgentStreams::new(StreamLimits { per_address: 2, per_agent: 1, total: 3 });
        let agent = |name: &str| AgentId::new(name).unwrap();
        let client = |last: u8| IpAddr::from(Ipv4Addr::new(10, 0, 0, last));
        let first = streams.admit(&agent("a"), client(1)).unwrap();
        let refused = streams.admit(&agent("a"), client(1)).unwrap_err();
        assert_eq!(refused, AuthError::TooManyStreams(StreamCap::Agent), "the agent's cap before the address's");
        let _b = streams.admit(&agent("b"), client(1)).unwrap();
        assert_eq!(streams.admit(&agent("c"), client(1)).unwrap_err(), AuthError::TooManyStreams(StreamCap::Address));
        let _c = streams.admit(&agent("c"), client(2)).unwrap();
        assert_eq!(streams.admit(&agent("d"), client(3)).unwrap_err(), AuthError::TooManyStreams(StreamCap::Instance));
        assert_eq!((streams.open(), streams.open_for_agent(&agent("d"))), (3, 0), "refused streams hold nothing");
        drop(first);
        assert_eq!(streams.open(), 2);
        assert!(streams.admit(&agent("a"), client(3)).is_ok());
    }
}
