//! The leader epoch every outbound attempt carries (docs/webhooks.md, "Fencing: `X-Gateway-Epoch`"): the
//! leadership term it was made under, so that a receiver keeping the highest it has seen can refuse the work of a
//! deposed leader (Kleppmann's fencing token, carried to the receiver).
//!
//! Neither body signature covers a header (GitHub's signs the body; Standard Webhooks signs
//! `"{id}.{timestamp}.{body}"`, and its verifiers check exactly that), and the body is the stored payload, the same
//! for every attempt, while the epoch is the attempt's. So the epoch has its own signature,
//! `X-Gateway-Epoch-Signature: v1,<base64>`: HMAC-SHA256, under the key the Standard Webhooks signature uses, of
//! `"{webhook-id}.{webhook-timestamp}.{epoch}"`. It names the attempt (delivery id and send second) the epoch
//! belongs to, so a captured request replayed with a raised epoch fails it, and it ages like the Standard
//! signature (a receiver checks the timestamp against its tolerance once, for both). Verifiers of either body
//! scheme ignore both headers.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use gateway_core::WebhookSecret;
use ring::hmac;

use crate::error::SignatureError;
use crate::standard::key_bytes;

/// The attempt's leadership term, in decimal (lowercase, as the `http` crate spells header names).
pub const EPOCH_HEADER: &str = "x-gateway-epoch";
/// `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{epoch}">`.
pub const EPOCH_SIGNATURE_HEADER: &str = "x-gateway-epoch-signature";

const VERSION: &str = "v1";

fn signed_content(message_id: &str, timestamp: i64, epoch: u64) -> String {
    format!("{message_id}.{timestamp}.{epoch}")
}

/// The `X-Gateway-Epoch-Signature` of an attempt: `message_id` is the delivery id (`webhook-id`), `timestamp` the
/// attempt's `webhook-timestamp`.
pub fn sign(secret: &WebhookSecret, message_id: &str, timestamp: i64, epoch: u64) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key_bytes(secret));
    let tag = hmac::sign(&key, signed_content(message_id, timestamp, epoch).as_bytes());
    format!("{VERSION},{}", STANDARD.encode(tag.as_ref()))
}

/// What a receiver written in Rust does with the headers (after it has verified the body and the timestamp): the
/// epoch they carry, if the signature is the one of `secret` for this attempt; compared in constant time.
pub fn verify(
    secret: &WebhookSecret,
    message_id: &str,
    timestamp: i64,
    epoch_header: &str,
    signature_header: &str,
) -> Result<u64, SignatureError> {
    let epoch_text = epoch_header.trim();
    if epoch_text.is_empty() || !epoch_text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(SignatureError::Malformed);
    }
    let epoch: u64 = epoch_text.parse().map_err(|_| SignatureError::Malformed)?;
    let (version, encoded) = signature_header.trim().split_once(',').ok_or(SignatureError::Malformed)?;
    if version != VERSION {
        return Err(SignatureError::Malformed);
    }
    let digest = STANDARD.decode(encoded).map_err(|_| SignatureError::Malformed)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key_bytes(secret));
    hmac::verify(&key, signed_content(message_id, timestamp, epoch).as_bytes(), &digest)
        .map_err(|_| SignatureError::Mismatch)?;
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_binds_the_epoch_to_its_attempt_and_verifies_only_unchanged() {
        let secret = WebhookSecret::new("It's a Secret to Everybody");
        let signature = sign(&secret, "42", 1_700_000_000, 7);
        assert!(signature.starts_with("v1,"), "{signature}");
        assert_eq!(verify(&secret, "42", 1_700_000_000, "7", &signature), Ok(7));
        // A raised epoch, another attempt (delivery or second), another secret: refused.
        assert_eq!(verify(&secret, "42", 1_700_000_000, "8", &signature), Err(SignatureError::Mismatch));
        assert_eq!(verify(&secret, "43", 1_700_000_000, "7", &signature), Err(SignatureError::Mismatch));
        assert_eq!(verify(&secret, "42", 1_700_000_001, "7", &signature), Err(SignatureError::Mismatch));
        let other = WebhookSecret::new("another secret");
        assert_eq!(verify(&other, "42", 1_700_000_000, "7", &signature), Err(SignatureError::Mismatch));
        for malformed in ["", "-1", "7x", "99999999999999999999999"] {
            assert_eq!(verify(&secret, "42", 1_700_000_000, malformed, &signature), Err(SignatureError::Malformed));
        }
        assert_eq!(verify(&secret, "42", 1_700_000_000, "7", "v2,AAAA"), Err(SignatureError::Malformed));
    }

    /// The content is the Standard Webhooks key's HMAC of `"{id}.{timestamp}.{epoch}"`, recomputable by hand (a
    /// `whsec_` secret is keyed by its decoded bytes, as for the Standard signature).
    #[test]
    fn the_content_is_recomputable_from_the_documented_recipe() {
        let secret = WebhookSecret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), b"42.1700000000.7");
        assert_eq!(sign(&secret, "42", 1_700_000_000, 7), format!("v1,{}", STANDARD.encode(tag.as_ref())));
    }
}
