//! The SSRF guard's address classification: which resolved addresses an outbound webhook may never reach.
//!
//! IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the IPv4 address inside, so `::ffff:127.0.0.1` is loopback
//! and `::ffff:169.254.169.254` is the cloud metadata service. The transport applies this to every address the
//! resolver returns and connects only to addresses that passed, so there is no DNS-rebinding window.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockedRange {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254/16` (cloud metadata lives here), `fe80::/10`.
    LinkLocal,
    /// RFC 6598 carrier-grade NAT, `100.64/10`.
    SharedAddressSpace,
    /// `255.255.255.255`.
    Broadcast,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// `fc00::/7` (unique local) and the deprecated site-local `fec0::/10`.
    UniqueLocal,
    /// Everything else not meant as a destination: `240/4`, `192.0.0/24`, `192.88.99/24`, `100::/64`, Teredo
    /// `2001::/32`, local-use NAT64 `64:ff9b:1::/48`.
    Reserved,
}

impl BlockedRange {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::SharedAddressSpace => "shared address space (CGNAT)",
            Self::Broadcast => "broadcast",
            Self::Multicast => "multicast",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::UniqueLocal => "unique local",
            Self::Reserved => "reserved",
        }
    }
}

impl fmt::Display for BlockedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The range that makes `address` a forbidden webhook destination, or `None` when it is a public address.
pub fn classify(address: IpAddr) -> Option<BlockedRange> {
    match address {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(address: Ipv4Addr, network: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(address) & mask == u32::from(Ipv4Addr::from(network)) & mask
}

fn classify_v4(address: Ipv4Addr) -> Option<BlockedRange> {
    use BlockedRange::*;
    // Order matters where ranges nest: the broadcast address lies inside 240/4.
    const TABLE: &[([u8; 4], u32, BlockedRange)] = &[
        ([255, 255, 255, 255], 32, Broadcast),
        ([0, 0, 0, 0], 8, Unspecified),
        ([127, 0, 0, 0], 8, Loopback),
        ([10, 0, 0, 0], 8, Private),
        ([172, 16, 0, 0], 12, Private),
        ([192, 168, 0, 0], 16, Private),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([100, 64, 0, 0], 10, SharedAddressSpace),
        ([224, 0, 0, 0], 4, Multicast),
        ([192, 0, 2, 0], 24, Documentation),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([198, 18, 0, 0], 15, Benchmarking),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 88, 99, 0], 24, Reserved),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    TABLE.iter().find(|(network, prefix, _)| in_v4(address, *network, *prefix)).map(|(_, _, range)| *range)
}

fn in_v6(address: Ipv6Addr, network: [u16; 8], prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(address) & mask == u128::from(Ipv6Addr::from(network)) & mask
}

/// The IPv4 address an IPv6 address stands for, when it is one of the embedding forms.
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(address);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if let Some(mapped) = address.to_ipv4_mapped() {
        return Some(mapped);
    }
    // IPv4-compatible (`::a.b.c.d`, deprecated but still parsed by stacks); `::` and `::1` are their own thing.
    if bits >> 32 == 0 && bits > 1 {
        return Some(low32);
    }
    if in_v6(address, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return Some(low32);
    }
    if in_v6(address, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    None
}

fn classify_v6(address: Ipv6Addr) -> Option<BlockedRange> {
    use BlockedRange::*;
    if address.is_unspecified() {
        return Some(Unspecified);
    }
    if address.is_loopback() {
        return Some(Loopback);
    }
    if let Some(v4) = embedded_v4(address) {
        return classify_v4(v4);
    }
    const TABLE: &[([u16; 8], u32, BlockedRange)] = &[
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, LinkLocal),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, UniqueLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, UniqueLocal),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Multicast),
        ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, Documentation),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Documentation),
        ([0x2001, 0x0002, 0, 0, 0, 0, 0, 0], 48, Benchmarking),
        ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, Reserved),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Reserved),
        ([0x0064, 0xff9b, 0x0001, 0, 0, 0, 0, 0], 48, Reserved),
    ];
    TABLE.iter().find(|(network, prefix, _)| in_v6(address, *network, *prefix)).map(|(_, _, range)| *range)
}

#[cfg(test)]
mod tests {
    use super::BlockedRange::*;
    use super::*;

    #[test]
    fn classification_table() {
        let cases: &[(&str, Option<BlockedRange>)] = &[
            // IPv4
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(LinkLocal)),
            ("169.254.0.1", Some(LinkLocal)),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("255.255.255.255", Some(Broadcast)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("192.0.2.10", Some(Documentation)),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.99", Some(Documentation)),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("192.0.0.8", Some(Reserved)),
            ("192.88.99.1", Some(Reserved)),
            ("240.0.0.1", Some(Reserved)),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("93.184.216.34", None),
            ("192.169.0.1", None),
            // IPv6
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456:789a::1", Some(UniqueLocal)),
            ("fec0::1", Some(UniqueLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("3fff::1", Some(Documentation)),
            ("2001:2::1", Some(Benchmarking)),
            ("100::1", Some(Reserved)),
            ("2001::1", Some(Reserved)),
            ("64:ff9b:1::1", Some(Reserved)),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001:80b::200e", None),
            // IPv4 inside IPv6: judged by the IPv4 address.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::10.0.0.1", Some(Private)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:c0a8:101::1", Some(Private)),
            ("2002:808:808::1", None),
        ];
        for (text, expected) in cases {
            let address: IpAddr = text.parse().unwrap();
            assert_eq!(classify(address), *expected, "{text}");
        }
    }

    #[test]
    fn range_names_are_readable() {
        assert_eq!(LinkLocal.to_string(), "link-local");
        assert_eq!(SharedAddressSpace.as_str(), "shared address space (CGNAT)");
    }
}
