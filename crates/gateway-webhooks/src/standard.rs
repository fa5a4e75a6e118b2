//! Standard Webhooks signatures (<https://www.standardwebhooks.com>), sent beside `X-Observatory-Signature` so
//! receivers can verify with the official `standardwebhooks` libraries, and accepted on inbound webhooks.
//!
//! The signed content is `"{webhook-id}.{webhook-timestamp}.{body}"`, HMAC-SHA256, sent as
//! `webhook-signature: v1,<base64>` (a space-separated list of such signatures is accepted). The key is the
//! secret's UTF-8 bytes, or, for a `whsec_<base64>` secret, the bytes the base64 decodes to, as the spec's
//! libraries do.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::{GeneralPurpose, PAD_INDIFFERENT};
use gateway_core::WebhookSecret;
use ring::hmac;
use time::OffsetDateTime;

use crate::error::SignatureError;

/// The message id header: the delivery id, the same across every attempt of a delivery.
pub const ID_HEADER: &str = "webhook-id";
/// Unix seconds at which the attempt was signed.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// `v1,<base64>` (space-separated when there are several).
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// What marks a secret as a base64-encoded key.
pub const SECRET_PREFIX: &str = "whsec_";
/// An inbound signature whose timestamp is further than this from now, in the past or the future, is refused:
/// a captured request cannot be replayed later (the spec's tolerance).
pub const TIMESTAMP_TOLERANCE: time::Duration = time::Duration::minutes(5);

const VERSION: &str = "v1";
const DIGEST_BYTES: usize = 32;

/// Standard base64, padded or not (the official libraries accept both in `whsec_` secrets).
const BASE64: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, PAD_INDIFFERENT);

/// The HMAC key of `secret`: the decoded bytes of a `whsec_<base64>` secret, else the secret's UTF-8 bytes. A
/// `whsec_` secret that does not decode (the API refuses those; only rows from before that check can hold one)
/// is used as its UTF-8 bytes.
pub fn key_bytes(secret: &WebhookSecret) -> Cow<'_, [u8]> {
    let text = secret.expose();
    match text.strip_prefix(SECRET_PREFIX).map(|encoded| BASE64.decode(encoded)) {
        Some(Ok(key)) if !key.is_empty() => Cow::Owned(key),
        _ => Cow::Borrowed(text.as_bytes()),
    }
}

/// Why a secret cannot be a Standard Webhooks key, if it cannot: a `whsec_` secret must be base64 of a non-empty
/// key (otherwise a receiver's library would decode something else than the gateway signs with).
pub fn secret_problem(secret: &str) -> Option<&'static str> {
    let encoded = secret.strip_prefix(SECRET_PREFIX)?;
    match BASE64.decode(encoded) {
        Ok(key) if !key.is_empty() => None,
        _ => Some("a secret starting with whsec_ must continue with the base64 of a non-empty key"),
    }
}

fn signed_content(message_id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(message_id.len() + 22 + body.len());
    content.extend_from_slice(message_id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.to_string().as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    content
}

/// `v1,<base64 HMAC-SHA256 of "{message_id}.{timestamp}.{body}">` under `secret`.
pub fn sign(secret: &WebhookSecret, message_id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key_bytes(secret));
    let tag = hmac::sign(&key, &signed_content(message_id, timestamp, body));
    format!("{VERSION},{}", BASE64.encode(tag.as_ref()))
}

/// The three Standard Webhooks headers of an inbound request, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct StandardHeaders<'a> {
    pub id: Option<&'a [u8]>,
    pub timestamp: Option<&'a [u8]>,
    pub signature: Option<&'a [u8]>,
}

fn header_text(value: &[u8]) -> Result<&str, SignatureError> {
    std::str::from_utf8(value).map(str::trim).map_err(|_| SignatureError::Malformed)
}

/// Checks Standard Webhooks headers against `body` under any of `secrets`, at `now`: the timestamp must be unix
/// seconds within [`TIMESTAMP_TOLERANCE`] of `now` ([`SignatureError::Stale`] otherwise), and one `v1` signature
/// of the list must match, compared in constant time (`ring::hmac::verify`). Signatures of other versions are
/// skipped.
pub fn verify(
    secrets: &[&WebhookSecret],
    headers: StandardHeaders<'_>,
    body: &[u8],
    now: OffsetDateTime,
) -> Result<(), SignatureError> {
    verify_message(secrets, headers, body, now).map(|_| ())
}

/// [`verify`], answering the message id (the `webhook-id` header, trimmed) the signature covers.
pub fn verify_message<'a>(
    secrets: &[&WebhookSecret],
    headers: StandardHeaders<'a>,
    body: &[u8],
    now: OffsetDateTime,
) -> Result<&'a str, SignatureError> {
    let (Some(id), Some(timestamp), Some(signatures)) = (headers.id, headers.timestamp, headers.signature) else {
        return Err(SignatureError::Missing);
    };
    let (id, timestamp, signatures) = (header_text(id)?, header_text(timestamp)?, header_text(signatures)?);
    if id.is_empty() || !timestamp.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(SignatureError::Malformed);
    }
    let timestamp: i64 = timestamp.parse().map_err(|_| SignatureError::Malformed)?;
    let signed_at = OffsetDateTime::from_unix_timestamp(timestamp).map_err(|_| SignatureError::Stale)?;
    if (now - signed_at).abs() > TIMESTAMP_TOLERANCE {
        return Err(SignatureError::Stale);
    }
    let digests: Vec<Vec<u8>> = signatures
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == VERSION)
        .filter_map(|(_, encoded)| BASE64.decode(encoded).ok())
        .filter(|digest| digest.len() == DIGEST_BYTES)
        .collect();
    if digests.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let content = signed_content(id, timestamp, body);
    let matches = secrets.iter().any(|secret| {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &key_bytes(secret));
        // Every digest is checked, so how many there are, not which one matched, is all the timing shows.
        digests.iter().fold(false, |found, digest| hmac::verify(&key, &content, digest).is_ok() | found)
    });
    if matches { Ok(id) } else { Err(SignatureError::Mismatch) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification and of its libraries' test suites (recomputed here
    /// from the spec's algorithm).
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TIMESTAMP: i64 = 1_614_265_330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(seconds: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(seconds).unwrap()
    }

    fn headers<'a>(id: &'a str, timestamp: &'a str, signature: &'a str) -> StandardHeaders<'a> {
        StandardHeaders {
            id: Some(id.as_bytes()),
            timestamp: Some(timestamp.as_bytes()),
            signature: Some(signature.as_bytes()),
        }
    }

    fn spec_headers(signature: &str) -> StandardHeaders<'_> {
        headers(SPEC_ID, "1614265330", signature)
    }

    #[test]
    fn signs_the_specifications_example() {
        assert_eq!(sign(&WebhookSecret::new(SPEC_SECRET), SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY), SPEC_SIGNATURE);
    }

    #[test]
    fn verifies_the_specifications_example_within_the_tolerance() {
        let secret = WebhookSecret::new(SPEC_SECRET);
        for now in [SPEC_TIMESTAMP, SPEC_TIMESTAMP + 300, SPEC_TIMESTAMP - 300] {
            assert_eq!(verify(&[&secret], spec_headers(SPEC_SIGNATURE), SPEC_BODY, at(now)), Ok(()), "{now}");
        }
        let tampered = br#"{"test": 2432232315}"#;
        let result = verify(&[&secret], spec_headers(SPEC_SIGNATURE), tampered, at(SPEC_TIMESTAMP));
        assert_eq!(result, Err(SignatureError::Mismatch));
        let other_id = headers("msg_other", "1614265330", SPEC_SIGNATURE);
        assert_eq!(verify(&[&secret], other_id, SPEC_BODY, at(SPEC_TIMESTAMP)), Err(SignatureError::Mismatch));
    }

    #[test]
    fn an_old_or_future_timestamp_is_refused_even_with_a_valid_signature() {
        let secret = WebhookSecret::new(SPEC_SECRET);
        for now in [SPEC_TIMESTAMP + 301, SPEC_TIMESTAMP + 86_400, SPEC_TIMESTAMP - 301] {
            let result = verify(&[&secret], spec_headers(SPEC_SIGNATURE), SPEC_BODY, at(now));
            assert_eq!(result, Err(SignatureError::Stale), "{now}");
        }
        let far_future = headers(SPEC_ID, "99999999999999999", SPEC_SIGNATURE);
        assert_eq!(verify(&[&secret], far_future, SPEC_BODY, at(SPEC_TIMESTAMP)), Err(SignatureError::Stale));
    }

    #[test]
    fn one_matching_v1_signature_in_a_list_is_enough() {
        let secret = WebhookSecret::new(SPEC_SECRET);
        let now = at(SPEC_TIMESTAMP);
        let wrong = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        for list in [
            format!("{wrong} {SPEC_SIGNATURE}"),
            format!("v2,abc {SPEC_SIGNATURE}"),
            format!("{SPEC_SIGNATURE} {wrong}"),
            format!("v1a,xyz {wrong} {SPEC_SIGNATURE}"),
        ] {
            assert_eq!(verify(&[&secret], spec_headers(&list), SPEC_BODY, now), Ok(()), "{list}");
        }
        assert_eq!(verify(&[&secret], spec_headers(wrong), SPEC_BODY, now), Err(SignatureError::Mismatch));
        let unsupported = SPEC_SIGNATURE.replacen("v1", "v2", 1);
        assert_eq!(verify(&[&secret], spec_headers(&unsupported), SPEC_BODY, now), Err(SignatureError::Malformed));
    }

    #[test]
    fn any_of_several_secrets_may_match() {
        let old = WebhookSecret::new(SPEC_SECRET);
        let new = WebhookSecret::new("a fresh secret");
        let now = at(SPEC_TIMESTAMP);
        assert_eq!(verify(&[&new, &old], spec_headers(SPEC_SIGNATURE), SPEC_BODY, now), Ok(()));
        assert_eq!(verify(&[&new], spec_headers(SPEC_SIGNATURE), SPEC_BODY, now), Err(SignatureError::Mismatch));
    }

    #[test]
    fn missing_or_malformed_headers_are_refused() {
        let secret = WebhookSecret::new(SPEC_SECRET);
        let now = at(SPEC_TIMESTAMP);
        let mut missing = spec_headers(SPEC_SIGNATURE);
        missing.timestamp = None;
        assert_eq!(verify(&[&secret], missing, SPEC_BODY, now), Err(SignatureError::Missing));
        for bad in [
            headers(SPEC_ID, "1614265330.5", SPEC_SIGNATURE),
            headers(SPEC_ID, "-1614265330", SPEC_SIGNATURE),
            headers(SPEC_ID, "soon", SPEC_SIGNATURE),
            headers("", "1614265330", SPEC_SIGNATURE),
            headers(SPEC_ID, "1614265330", "v1,not base64!"),
            headers(SPEC_ID, "1614265330", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
            headers(SPEC_ID, "1614265330", "v1,AAAA"),
        ] {
            assert_eq!(verify(&[&secret], bad, SPEC_BODY, now), Err(SignatureError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn whsec_secrets_are_decoded_and_others_are_their_utf8_bytes() {
        let spec_secret = WebhookSecret::new(SPEC_SECRET);
        let decoded = key_bytes(&spec_secret);
        assert_eq!(decoded.len(), 24);
        assert_eq!(&*decoded, &BASE64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()[..]);
        // Unpadded base64 decodes too, as in the official libraries.
        assert_eq!(&*key_bytes(&WebhookSecret::new("whsec_AAEC")), &[0, 1, 2]);
        assert_eq!(&*key_bytes(&WebhookSecret::new("whsec_AAE")), &[0, 1]);
        assert_eq!(&*key_bytes(&WebhookSecret::new("whsec_AAE=")), &[0, 1]);
        assert_eq!(&*key_bytes(&WebhookSecret::new("It's a Secret")), b"It's a Secret");
        assert_eq!(&*key_bytes(&WebhookSecret::new("whsec_!!")), b"whsec_!!");
        assert_eq!(secret_problem(SPEC_SECRET), None);
        assert_eq!(secret_problem("plain secret"), None);
        assert!(secret_problem("whsec_!!").is_some());
        assert!(secret_problem("whsec_").is_some());
        let utf8 = WebhookSecret::new("It's a Secret");
        let signature = sign(&utf8, "7", 1_700_000_000, b"{}");
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"It's a Secret");
        let expected = BASE64.encode(hmac::sign(&key, b"7.1700000000.{}").as_ref());
        assert_eq!(signature, format!("v1,{expected}"));
    }
}
