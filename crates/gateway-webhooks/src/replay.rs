//! Replay detection of inbound webhooks: what identifies an accepted request, so that the same request posted
//! again within [`INBOUND_REPLAY_WINDOW`] answers `duplicate` with the first delivery's id instead of making a
//! second delivery.
//!
//! - Standard Webhooks: the `webhook-id`, which its signature covers and which the specification makes the
//!   sender's idempotency key (a retry keeps it).
//! - `X-Observatory-Signature`: the verified digest. It is an HMAC of the exact body under the config's secret, so
//!   it stands for the pair (signature, body): the same body signed again is the same digest, any other body or
//!   secret another one. The digest is decoded first, so a replay that writes the hex in upper case or pads it with
//!   spaces is still the same key.
//!
//! A request that verifies with both schemes is recorded under both keys, and is a duplicate when either was seen:
//! dropping one of the headers from a captured request does not make it new. Keys are hashed (SHA-256), so a
//! receipt holds neither a sender's text nor a digest of the body.

use gateway_core::ReceiptKey;
use ring::digest;

use crate::signature::Verified;

/// How long an accepted inbound request's receipt makes the same request a duplicate (DESIGN.md §14). It is also
/// the longest a captured `X-Observatory-Signature` request can be replayed on a config that accepts that scheme:
/// that scheme has no timestamp (`inbound_require_timestamp` refuses it).
pub const INBOUND_REPLAY_WINDOW: time::Duration = time::Duration::hours(24);

const STANDARD_PREFIX: &str = "webhook-id:";
const OBSERVATORY_PREFIX: &str = "x-observatory-signature:";

/// A prefix and 64 hex digits: always within `ReceiptKey::MAX_BYTES` (the tests hold both prefixes to that).
fn key(prefix: &str, identity: &[u8]) -> Option<ReceiptKey> {
    let hash = digest::digest(&digest::SHA256, identity);
    ReceiptKey::new(format!("{prefix}{}", gateway_core::encoding::hex::encode(hash.as_ref())))
}

/// The receipt keys of a verified request, one per scheme that verified.
pub fn receipt_keys(verified: &Verified) -> Vec<ReceiptKey> {
    let standard = verified.standard_id.as_ref().and_then(|id| key(STANDARD_PREFIX, id.as_bytes()));
    let observatory = verified.observatory_digest.as_ref().and_then(|digest| key(OBSERVATORY_PREFIX, digest));
    standard.into_iter().chain(observatory).collect()
}

#[cfg(test)]
mod tests {
    use gateway_core::WebhookSecret;
    use time::macros::datetime;

    use super::*;
    use crate::signature::{InboundSignature, sign};
    use crate::standard;

    const NOW: time::OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    fn verified(signature: &InboundSignature, body: &[u8]) -> Verified {
        signature.verify(&[&WebhookSecret::new("s")], false, body, NOW).unwrap()
    }

    fn observatory(header: &str) -> InboundSignature {
        InboundSignature { observatory: Some(header.as_bytes().to_vec()), ..InboundSignature::default() }
    }

    fn standard(id: &str, body: &[u8]) -> InboundSignature {
        let timestamp = NOW.unix_timestamp();
        InboundSignature {
            webhook_id: Some(id.as_bytes().to_vec()),
            webhook_timestamp: Some(timestamp.to_string().into_bytes()),
            webhook_signature: Some(standard::sign(&WebhookSecret::new("s"), id, timestamp, body).into_bytes()),
            ..InboundSignature::default()
        }
    }

    #[test]
    fn the_same_signature_written_differently_is_the_same_key_and_another_body_is_not() {
        let body = br#"{"n":1}"#;
        let header = sign(&WebhookSecret::new("s"), body);
        let keys = receipt_keys(&verified(&observatory(&header), body));
        assert_eq!(keys.len(), 1);
        assert!(keys[0].as_str().starts_with(OBSERVATORY_PREFIX) && keys[0].as_str().len() <= ReceiptKey::MAX_BYTES);
        let shouted = format!("  sha256={} ", header["sha256=".len()..].to_uppercase());
        assert_eq!(receipt_keys(&verified(&observatory(&shouted), body)), keys);
        let other = br#"{"n":2}"#;
        let other_keys = receipt_keys(&verified(&observatory(&sign(&WebhookSecret::new("s"), other)), other));
        assert_ne!(other_keys, keys);
        assert!(!keys[0].as_str().contains(&header["sha256=".len()..]), "the digest itself is not stored");
    }

    #[test]
    fn a_standard_webhooks_request_is_keyed_by_its_id_whatever_the_timestamp_and_body() {
        let keys = receipt_keys(&verified(&standard("msg_1", b"{}"), b"{}"));
        assert_eq!(keys.len(), 1);
        assert!(keys[0].as_str().starts_with(STANDARD_PREFIX) && keys[0].as_str().len() <= ReceiptKey::MAX_BYTES);
        assert_eq!(receipt_keys(&verified(&standard("msg_1", b"[1]"), b"[1]")), keys);
        assert_ne!(receipt_keys(&verified(&standard("msg_2", b"{}"), b"{}")), keys);
        assert!(!keys[0].as_str().contains("msg_1"), "the sender's text is hashed");
    }

    #[test]
    fn a_request_signed_both_ways_has_both_keys_and_each_alone_is_one_of_them() {
        let body = br#"{"n":1}"#;
        let alone = standard("msg_1", body);
        let header = sign(&WebhookSecret::new("s"), body);
        let both = InboundSignature { observatory: Some(header.clone().into_bytes()), ..alone.clone() };
        let keys = receipt_keys(&verified(&both, body));
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&receipt_keys(&verified(&alone, body))[0]));
        assert!(keys.contains(&receipt_keys(&verified(&observatory(&header), body))[0]));
    }
}
