//! `X-Observatory-Signature: sha256=<lowercase hex HMAC-SHA256 of the exact body bytes>`, the scheme GitHub
//! uses for `X-Hub-Signature-256`, so receivers can reuse GitHub verifiers.

use gateway_core::WebhookSecret;
use ring::hmac;

/// The header carrying the signature (lowercase, as the `http` crate spells header names).
pub const SIGNATURE_HEADER: &str = "x-observatory-signature";
/// The header carrying the delivery id, the key receivers deduplicate on.
pub const DELIVERY_HEADER: &str = "x-observatory-delivery";
/// What precedes the hex digest in the signature header.
pub const SIGNATURE_PREFIX: &str = "sha256=";

const DIGEST_BYTES: usize = 32;

/// Why a signature header was refused. Kept apart from the response (always `signature_mismatch`) so logs can
/// say which, without ever showing the header's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("signature header missing")]
    Missing,
    #[error("signature header is not sha256=<64 hex digits>")]
    Malformed,
    #[error("signature does not match the body")]
    Mismatch,
}

/// `sha256=<lowercase hex>` of `body` under `secret`.
pub fn sign(secret: &WebhookSecret, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    let tag = hmac::sign(&key, body);
    format!("{SIGNATURE_PREFIX}{}", gateway_core::hex::encode(tag.as_ref()))
}

/// Checks a signature header against `body`, in constant time (`ring::hmac::verify`). Upper-case hex and
/// surrounding whitespace are tolerated; anything else about the header's shape is [`SignatureError::Malformed`].
pub fn verify(secret: &WebhookSecret, body: &[u8], header: Option<&[u8]>) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let header = std::str::from_utf8(header).map_err(|_| SignatureError::Malformed)?.trim();
    let digest_hex = header.strip_prefix(SIGNATURE_PREFIX).ok_or(SignatureError::Malformed)?;
    let digest = gateway_core::hex::decode(digest_hex).ok_or(SignatureError::Malformed)?;
    if digest.len() != DIGEST_BYTES {
        return Err(SignatureError::Malformed);
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    hmac::verify(&key, body, &digest).map_err(|_| SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's published example for `X-Hub-Signature-256`, the same scheme as ours.
    const GITHUB_SECRET: &str = "It's a Secret to Everybody";
    const GITHUB_BODY: &[u8] = b"Hello, World!";
    const GITHUB_SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn signs_githubs_published_vector() {
        assert_eq!(sign(&WebhookSecret::new(GITHUB_SECRET), GITHUB_BODY), GITHUB_SIGNATURE);
    }

    #[test]
    fn verifies_githubs_published_vector() {
        let secret = WebhookSecret::new(GITHUB_SECRET);
        assert_eq!(verify(&secret, GITHUB_BODY, Some(GITHUB_SIGNATURE.as_bytes())), Ok(()));
        let upper = format!(" sha256={} ", &GITHUB_SIGNATURE[7..].to_uppercase());
        assert_eq!(verify(&secret, GITHUB_BODY, Some(upper.as_bytes())), Ok(()));
    }

    #[test]
    fn refuses_tampered_bodies_wrong_secrets_and_bad_headers() {
        let secret = WebhookSecret::new(GITHUB_SECRET);
        let header = Some(GITHUB_SIGNATURE.as_bytes());
        assert_eq!(verify(&secret, b"Hello, World?", header), Err(SignatureError::Mismatch));
        assert_eq!(verify(&WebhookSecret::new("other"), GITHUB_BODY, header), Err(SignatureError::Mismatch));
        assert_eq!(verify(&secret, GITHUB_BODY, None), Err(SignatureError::Missing));
        let truncated = &GITHUB_SIGNATURE[..GITHUB_SIGNATURE.len() - 2];
        let sha1 = GITHUB_SIGNATURE.replacen("sha256", "sha1", 1);
        for bad in ["", "sha256=", "757107ea", truncated, &sha1, "sha256=zz"] {
            assert_eq!(verify(&secret, GITHUB_BODY, Some(bad.as_bytes())), Err(SignatureError::Malformed), "{bad}");
        }
        assert_eq!(verify(&secret, GITHUB_BODY, Some(&[0xff, 0xfe])), Err(SignatureError::Malformed));
    }
}
