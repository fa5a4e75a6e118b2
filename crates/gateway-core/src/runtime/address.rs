//! Who a client is, as every per-address count sees it: gateway-auth's refused tokens and agent streams per
//! address, and gateway-edge's connections per address. One definition, so that the counts agree on who a client
//! is.
//!
//! An IPv4 address is one client; an IPv6 client is its /64, the smallest block a site is given and so the
//! addresses one host can pick from at will; an IPv4-mapped IPv6 address is the IPv4 address it maps.

use std::net::{IpAddr, Ipv4Addr};

/// A client address as it is counted: see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressKey {
    V4(Ipv4Addr),
    /// The first 64 bits of the address.
    V6Prefix(u64),
}

impl AddressKey {
    pub fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) >> 64;
                Self::V6Prefix(u64::try_from(prefix).unwrap_or(u64::MAX))
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
    fn ipv6_clients_are_counted_per_64_and_ipv4_per_address_mapped_or_not() {
        assert_eq!(AddressKey::of(ip("2001:db8:1:2::1")), AddressKey::of(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
        assert_ne!(AddressKey::of(ip("2001:db8:1:2::1")), AddressKey::of(ip("2001:db8:1:3::1")));
        assert_eq!(AddressKey::of(ip("2001:db8:1:2::1")), AddressKey::V6Prefix(0x2001_0db8_0001_0002));
        assert_eq!(AddressKey::of(ip("::ffff:192.0.2.7")), AddressKey::of(ip("192.0.2.7")));
        assert_eq!(AddressKey::of(ip("192.0.2.7")), AddressKey::V4(Ipv4Addr::new(192, 0, 2, 7)));
        assert_ne!(AddressKey::of(ip("192.0.2.7")), AddressKey::of(ip("192.0.2.8")));
        assert_ne!(AddressKey::of(ip("127.0.0.1")), AddressKey::of(ip("127.0.0.2")));
        // `::1` is an IPv6 host of its own, not the IPv4 loopback.
        assert_eq!(AddressKey::of(ip("::1")), AddressKey::V6Prefix(0));
    }
}
