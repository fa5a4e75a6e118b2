//! Refused agent tokens, counted per client address (DESIGN §14, "Refused tokens cost nothing"; docs/architecture.md
//! "Refused tokens").
//!
//! A made-up token costs the gateway a credential read (its id is not cached: issue 16 measured 280,000 made-up
//! tokens in 12 s as 280,000 database reads). So every token an address presents that is refused (malformed,
//! unknown, revoked, expired, a wrong secret) is counted against that address in whole seconds; past
//! [`MAX_REFUSALS_PER_SECOND`] in one second, every agent token the address presents, valid ones included, is refused
//! with [`crate::AuthError::TooManyRefusals`] (429 `too_many_refusals` over HTTP) for the rest of that second, decided
//! here before the cache or the store is asked.
//!
//! Bounded memory whatever the number of addresses: an IPv6 client counts per /64 (one host holds a /64, so its
//! addresses are one client), IPv4 (and IPv4-mapped IPv6) per address; at most [`MAX_REFUSAL_ADDRESSES`] are held,
//! those of earlier seconds dropped first. Past that, in one second, the addresses not held share one count, so a
//! flood from more addresses than that is still throttled (the addresses held keep their own).
//!
//! The check costs an address that is not throttled one atomic load: the map is looked at only in a second in which
//! some address was throttled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use gateway_core::runtime::sync::lock;
use tokio::time::Instant;

use gateway_core::AddressKey;

/// Refused tokens one client address may present in one second: once it has, every agent token it presents is
/// refused ([`crate::AuthError::TooManyRefusals`]) for the rest of the second.
pub const MAX_REFUSALS_PER_SECOND: u32 = 20;
/// Client addresses (IPv6 /64s) whose refusals are counted at once.
pub const MAX_REFUSAL_ADDRESSES: usize = 65_536;

/// Who refusals are counted against: a client as connections count them (an IPv4 address, an IPv6 /64), or every
/// address not held when the map is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    Address(AddressKey),
    Overflow,
}

impl Client {
    fn of(address: IpAddr) -> Self {
        Self::Address(AddressKey::of(address))
    }
}

/// One client's refusals in its latest second.
#[derive(Debug, Clone, Copy)]
struct Count {
    second: u64,
    refused: u32,
}

#[derive(Debug, Default)]
struct Counts {
    by_client: HashMap<Client, Count>,
    /// The second the map was last cleared of earlier seconds' counts: at most once a second, so that a flood from
    /// many addresses does not make every refusal walk the whole map.
    swept: Option<u64>,
}

/// The per-address refusal counts. Cheap to share behind an `Arc`; one per process.
#[derive(Debug)]
pub struct RefusalThrottle {
    started: Instant,
    limit: u32,
    capacity: usize,
    counts: Mutex<Counts>,
    /// 1 + the latest second in which some client went over the limit (0: none yet): while it is not the current
    /// second, nobody is throttled and the map need not be looked at.
    throttled_second: AtomicU64,
}

impl Default for RefusalThrottle {
    fn default() -> Self {
        Self::new(MAX_REFUSALS_PER_SECOND, MAX_REFUSAL_ADDRESSES)
    }
}

impl RefusalThrottle {
    pub fn new(limit: u32, capacity: usize) -> Self {
        Self {
            started: Instant::now(),
            limit,
            capacity: capacity.max(1),
            counts: Mutex::new(Counts::default()),
            throttled_second: AtomicU64::new(0),
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_secs()
    }

    /// Whether `address` has presented the limit of refused tokens in the current second.
    pub fn is_throttled(&self, address: IpAddr) -> bool {
        let second = self.second(Instant::now());
        if self.throttled_second.load(Ordering::Relaxed) != second + 1 {
            return false;
        }
        let counts = &lock(&self.counts).by_client;
        let over = |client: &Client| {
            counts.get(client).is_some_and(|count| count.second == second && count.refused >= self.limit)
        };
        let client = Client::of(address);
        over(&client) || (!counts.contains_key(&client) && over(&Client::Overflow))
    }

    /// Counts one refused token presented by `address`.
    pub fn refused(&self, address: IpAddr) {
        let second = self.second(Instant::now());
        let mut counts = lock(&self.counts);
        let mut client = Client::of(address);
        if !counts.by_client.contains_key(&client) && counts.by_client.len() >= self.capacity {
            if counts.swept != Some(second) {
                counts.swept = Some(second);
                counts.by_client.retain(|_, count| count.second == second);
            }
            if counts.by_client.len() >= self.capacity {
                client = Client::Overflow;
            }
        }
        let count = counts.by_client.entry(client).or_insert(Count { second, refused: 0 });
        if count.second != second {
            *count = Count { second, refused: 0 };
        }
        count.refused = count.refused.saturating_add(1);
        if count.refused >= self.limit {
            self.throttled_second.store(second + 1, Ordering::Relaxed);
        }
    }

    /// Clients whose counts are held (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        lock(&self.counts).by_client.len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Duration;

    use super::*;

    fn v4(last: u8) -> IpAddr {
        IpAddr::from(Ipv4Addr::new(10, 0, 0, last))
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_limit_an_address_is_throttled_for_the_rest_of_its_second_and_only_it() {
        let throttle = RefusalThrottle::new(20, 100);
        for _ in 0..19 {
            throttle.refused(v4(1));
        }
        assert!(!throttle.is_throttled(v4(1)), "19 refusals and the next token is still looked at");
        throttle.refused(v4(1));
        assert!(throttle.is_throttled(v4(1)), "after the 20th, the 21st token is refused unseen");
        assert!(!throttle.is_throttled(v4(2)), "another address is not");
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(throttle.is_throttled(v4(1)), "for the rest of that second");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!throttle.is_throttled(v4(1)), "the next second starts afresh");
        throttle.refused(v4(1));
        assert!(!throttle.is_throttled(v4(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_ipv6_client_counts_per_64_and_a_mapped_ipv4_as_itself() {
        let throttle = RefusalThrottle::new(2, 100);
        let host = |last: u16| IpAddr::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, last));
        for last in 1..=2 {
            throttle.refused(host(last));
        }
        assert!(throttle.is_throttled(host(99)), "one /64, one client");
        assert!(!throttle.is_throttled(IpAddr::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 8, 0, 0, 0, 1))));
        for _ in 0..2 {
            throttle.refused(IpAddr::from(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()));
        }
        assert!(throttle.is_throttled(IpAddr::from(Ipv4Addr::new(192, 0, 2, 1))));
    }

    /// More addresses than the map holds: those of earlier seconds go first; in one second, the ones that find no
    /// room share one count, so they are throttled together and memory stays bounded.
    #[tokio::test(start_paused = true)]
    async fn the_map_is_bounded_and_addresses_beyond_it_share_one_count() {
        let throttle = RefusalThrottle::new(2, 4);
        for last in 1..=4 {
            throttle.refused(v4(last));
        }
        for last in 5..=6 {
            throttle.refused(v4(last));
        }
        assert_eq!(throttle.held(), 5, "four addresses and the shared count");
        assert!(throttle.is_throttled(v4(200)), "two refusals beyond the map: everyone beyond it is throttled");
        assert!(!throttle.is_throttled(v4(1)), "an address held keeps its own count");
        tokio::time::advance(Duration::from_secs(1)).await;
        throttle.refused(v4(8));
        assert_eq!(throttle.held(), 1, "the earlier second's counts made room");
        assert!(!throttle.is_throttled(v4(200)));
    }
}
