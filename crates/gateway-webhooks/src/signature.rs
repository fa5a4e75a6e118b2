//! `X-Observatory-Signature: sha256=<lowercase hex HMAC-SHA256 of the exact body bytes>`, the scheme GitHub
//! uses for `X-Hub-Signature-256`, so receivers can reuse GitHub verifiers.

use gateway_core::{WebhookConfig, WebhookSecret};
use ring::hmac;
use time::OffsetDateTime;

// Defined beside the crate's error, which carries it; `standard` reports it too.
pub use crate::error::SignatureError;
use crate::standard::{self, StandardHeaders};

/// The header carrying the signature (lowercase, as the `http` crate spells header names).
pub const SIGNATURE_HEADER: &str = "x-observatory-signature";
/// The header carrying the delivery id, the key receivers deduplicate on.
pub const DELIVERY_HEADER: &str = "x-observatory-delivery";
/// What precedes the hex digest in the signature header.
pub const SIGNATURE_PREFIX: &str = "sha256=";

const DIGEST_BYTES: usize = 32;

/// `sha256=<lowercase hex>` of `body` under `secret`.
pub fn sign(secret: &WebhookSecret, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    let tag = hmac::sign(&key, body);
    format!("{SIGNATURE_PREFIX}{}", gateway_core::encoding::hex::encode(tag.as_ref()))
}

/// Checks a signature header against `body`, in constant time (`ring::hmac::verify`). Upper-case hex and
/// surrounding whitespace are tolerated; anything else about the header's shape is [`SignatureError::Malformed`].
pub fn verify(secret: &WebhookSecret, body: &[u8], header: Option<&[u8]>) -> Result<(), SignatureError> {
    let digest = parse(header)?;
    verify_digest(secret, body, &digest)
}

/// The digest a header carries: 32 bytes, whatever the case of its hex or the whitespace around it, so that the
/// same signature written differently is still the same signature (replay detection keys on it).
fn parse(header: Option<&[u8]>) -> Result<Vec<u8>, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let header = std::str::from_utf8(header).map_err(|_| SignatureError::Malformed)?.trim();
    let digest_hex = header.strip_prefix(SIGNATURE_PREFIX).ok_or(SignatureError::Malformed)?;
    let digest = gateway_core::encoding::hex::decode(digest_hex).ok_or(SignatureError::Malformed)?;
    if digest.len() != DIGEST_BYTES {
        return Err(SignatureError::Malformed);
    }
    Ok(digest)
}

fn verify_digest(secret: &WebhookSecret, body: &[u8], digest: &[u8]) -> Result<(), SignatureError> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    hmac::verify(&key, body, digest).map_err(|_| SignatureError::Mismatch)
}

/// How long after a rotation inbound signatures made with the previous secret are still accepted, so senders can
/// switch to the new secret at their own pace. `PATCH … {"revoke_previous": true}` ends it at once.
pub const SECRET_ROTATION_GRACE: time::Duration = time::Duration::hours(24);

/// The secrets an inbound signature may be made with at `now`. With an inbound secret: that one, and the inbound
/// secret it replaced until [`SECRET_ROTATION_GRACE`] after that rotation; the outbound secret never, so a receiver
/// of outbound deliveries cannot post them back in. Without one: the secret, and the previous one until the grace
/// after its rotation ends.
pub fn accepted_secrets(config: &WebhookConfig, now: OffsetDateTime) -> Vec<&WebhookSecret> {
    let (current, previous, rotated_at) = match &config.inbound_secret {
        Some(inbound) => (inbound, &config.previous_inbound_secret, config.inbound_secret_rotated_at),
        None => (&config.secret, &config.previous_secret, config.secret_rotated_at),
    };
    let mut secrets = vec![current];
    if let (Some(previous), Some(rotated_at)) = (previous, rotated_at)
        && now < rotated_at + SECRET_ROTATION_GRACE
    {
        secrets.push(previous);
    }
    secrets
}

/// What a verified inbound request was signed with: each scheme that verified, with what identifies its message
/// (the key of replay detection, `crate::replay`). At least one of them is set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verified {
    /// The `X-Observatory-Signature` digest (32 bytes), when that scheme verified.
    pub observatory_digest: Option<Vec<u8>>,
    /// The Standard Webhooks `webhook-id` (trimmed), when that scheme verified: its signature covers the id.
    pub standard_id: Option<String>,
}

/// The signature headers of an inbound webhook, as received: either scheme may sign it.
#[derive(Debug, Clone, Default)]
pub struct InboundSignature {
    /// `X-Observatory-Signature`.
    pub observatory: Option<Vec<u8>>,
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature` (Standard Webhooks).
    pub webhook_id: Option<Vec<u8>>,
    pub webhook_timestamp: Option<Vec<u8>>,
    pub webhook_signature: Option<Vec<u8>>,
}

impl InboundSignature {
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        let value = |name: &str| headers.get(name).map(|value| value.as_bytes().to_vec());
        Self {
            observatory: value(SIGNATURE_HEADER),
            webhook_id: value(standard::ID_HEADER),
            webhook_timestamp: value(standard::TIMESTAMP_HEADER),
            webhook_signature: value(standard::SIGNATURE_HEADER),
        }
    }

    /// Accepts the body when a present scheme verifies with one of `secrets`: `X-Observatory-Signature`, or a
    /// Standard Webhooks signature whose timestamp is within the tolerance of `now`. Both schemes are checked when
    /// both are present, and [`Verified`] names each that verified: a replay that drops one header must still meet
    /// the receipt of the other. With `require_timestamp`, `X-Observatory-Signature` is ignored, and a request
    /// without Standard Webhooks headers is [`SignatureError::TimestampRequired`]. When nothing verifies, the reason
    /// is the most telling of the schemes' (a stale timestamp, then a mismatch, then a malformed header).
    pub fn verify(
        &self,
        secrets: &[&WebhookSecret],
        require_timestamp: bool,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<Verified, SignatureError> {
        let mut verified = Verified::default();
        let mut reasons = Vec::with_capacity(2);
        if require_timestamp && self.webhook_signature.is_none() {
            return Err(SignatureError::TimestampRequired);
        }
        if let Some(header) = self.observatory.as_deref().filter(|_| !require_timestamp) {
            match parse(Some(header)) {
                Ok(digest) => {
                    let mut reason = SignatureError::Mismatch;
                    for secret in secrets {
                        match verify_digest(secret, body, &digest) {
                            Ok(()) => {
                                verified.observatory_digest = Some(digest);
                                break;
                            }
                            Err(refused) => reason = refused,
                        }
                    }
                    if verified.observatory_digest.is_none() {
                        reasons.push(reason);
                    }
                }
                Err(reason) => reasons.push(reason),
            }
        }
        if self.webhook_signature.is_some() {
            let headers = StandardHeaders {
                id: self.webhook_id.as_deref(),
                timestamp: self.webhook_timestamp.as_deref(),
                signature: self.webhook_signature.as_deref(),
            };
            match standard::verify_message(secrets, headers, body, now) {
                Ok(id) => verified.standard_id = Some(id.to_owned()),
                Err(reason) => reasons.push(reason),
            }
        }
        if verified.observatory_digest.is_some() || verified.standard_id.is_some() {
            return Ok(verified);
        }
        let rank = |reason: &SignatureError| match reason {
            SignatureError::Stale => 3,
            SignatureError::Mismatch => 2,
            SignatureError::Malformed => 1,
            SignatureError::Missing | SignatureError::TimestampRequired => 0,
        };
        Err(reasons.into_iter().max_by_key(rank).unwrap_or(SignatureError::Missing))
    }
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

    /// docs/webhooks.md's table: this scheme keys with a `whsec_` secret's text as written (GitHub's verifiers
    /// know no prefix), where the Standard Webhooks scheme keys with the bytes it decodes to.
    #[test]
    fn a_whsec_secret_keys_this_scheme_with_its_literal_text() {
        let text = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let literal = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, text.as_bytes()), GITHUB_BODY);
        let expected = format!("{SIGNATURE_PREFIX}{}", gateway_core::encoding::hex::encode(literal.as_ref()));
        assert_eq!(sign(&WebhookSecret::new(text), GITHUB_BODY), expected);
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
