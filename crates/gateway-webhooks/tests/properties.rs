//! Property tests of the signature headers an inbound webhook carries, both schemes: whatever the bytes of the
//! headers, verification answers without panicking and accepts only what the secret signed; what the gateway
//! signs, it verifies.
#![allow(clippy::unwrap_used)] // A test fails by panicking.

use base64::Engine as _;
use gateway_core::WebhookSecret;
use gateway_webhooks::standard::{self, StandardHeaders, TIMESTAMP_TOLERANCE};
use gateway_webhooks::{InboundSignature, SignatureError, signature};
use proptest::prelude::*;
use time::OffsetDateTime;

fn secret() -> impl Strategy<Value = WebhookSecret> {
    prop_oneof![
        "\\PC{1,40}",
        prop::collection::vec(any::<u8>(), 1..48)
            .prop_map(|key| format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key))),
        "whsec_[A-Za-z0-9+/=]{0,12}",
    ]
    .prop_map(WebhookSecret::new)
}

fn header_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::of(prop_oneof![
        prop::collection::vec(any::<u8>(), 0..96),
        "sha256=[0-9a-fA-F]{60,68}".prop_map(String::into_bytes),
        "(v1|v1a|v2),[A-Za-z0-9+/=]{0,48}( v1,[A-Za-z0-9+/=]{0,48}){0,3}".prop_map(String::into_bytes),
        "[0-9]{0,22}".prop_map(String::into_bytes),
        "-?[0-9]{1,12}".prop_map(String::into_bytes),
    ])
}

const NOW: i64 = 1_800_000_000;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(NOW).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn an_observatory_signature_verifies_its_body_and_no_other(
        secret in secret(),
        body in prop::collection::vec(any::<u8>(), 0..256),
        flip in any::<prop::sample::Index>(),
        padding in "[ \t]{0,2}",
    ) {
        let header = signature::sign(&secret, &body);
        prop_assert!(header.starts_with("sha256=") && header.len() == 7 + 64);
        let padded = format!("{padding}{header}{padding}");
        prop_assert_eq!(signature::verify(&secret, &body, Some(padded.as_bytes())), Ok(()));
        prop_assert_eq!(signature::verify(&secret, &body, Some(header.to_uppercase().replace("SHA256=", "sha256=").as_bytes())), Ok(()));
        let mut other = body.clone();
        if other.is_empty() { other.push(0) } else { let at = flip.index(other.len()); other[at] ^= 1 }
        prop_assert_eq!(signature::verify(&secret, &other, Some(header.as_bytes())), Err(SignatureError::Mismatch));
        let wrong = WebhookSecret::new(format!("{}x", secret.expose()));
        prop_assert_eq!(signature::verify(&wrong, &body, Some(header.as_bytes())), Err(SignatureError::Mismatch));
    }

    /// Any header at all: refused unless it is, trimmed and up to the case of its hex digits, the body's signature.
    #[test]
    fn an_observatory_header_of_any_bytes_is_refused_unless_it_is_the_signature(
        secret in secret(),
        body in prop::collection::vec(any::<u8>(), 0..64),
        header in header_bytes(),
    ) {
        let verified = signature::verify(&secret, &body, header.as_deref());
        if verified.is_ok() {
            let text = std::str::from_utf8(header.as_deref().unwrap()).unwrap().trim().to_lowercase();
            prop_assert_eq!(text, signature::sign(&secret, &body));
        }
    }

    #[test]
    fn a_standard_signature_verifies_within_the_tolerance_among_other_entries(
        secret in secret(),
        id in "[A-Za-z0-9_.-]{1,40}",
        body in prop::collection::vec(any::<u8>(), 0..256),
        skew in -TIMESTAMP_TOLERANCE.whole_seconds()..=TIMESTAMP_TOLERANCE.whole_seconds(),
        others in prop::collection::vec("(v1|v1a|v2),[A-Za-z0-9+/]{43}=", 0..3),
        position in any::<prop::sample::Index>(),
    ) {
        let timestamp = NOW + skew;
        let signed = standard::sign(&secret, &id, timestamp, &body);
        prop_assert!(signed.starts_with("v1,"));
        let mut entries = others.clone();
        entries.insert(position.index(entries.len() + 1), signed.clone());
        let list = entries.join(" ");
        let stamp = timestamp.to_string();
        let headers = StandardHeaders { id: Some(id.as_bytes()), timestamp: Some(stamp.as_bytes()), signature: Some(list.as_bytes()) };
        prop_assert_eq!(standard::verify(&[&secret], headers, &body, now()), Ok(()));
        // Signed by another key, or for another id, or replayed outside the tolerance: refused.
        let wrong = WebhookSecret::new(format!("other-{}", secret.expose()));
        prop_assert_eq!(standard::verify(&[&wrong], headers, &body, now()), Err(SignatureError::Mismatch));
        let other_id = format!("{id}x");
        prop_assert_eq!(
            standard::verify(&[&secret], StandardHeaders { id: Some(other_id.as_bytes()), ..headers }, &body, now()),
            Err(SignatureError::Mismatch)
        );
        let late = now() + TIMESTAMP_TOLERANCE + time::Duration::seconds(1 + skew.max(0));
        prop_assert_eq!(standard::verify(&[&secret], headers, &body, late), Err(SignatureError::Stale));
    }

    /// Any three headers: no panic, and a refusal is one of the reasons the API maps; acceptance only when one of the
    /// listed `v1` entries is the signature of the id, timestamp and body.
    #[test]
    fn standard_headers_of_any_bytes_are_refused_unless_signed(
        secret in secret(),
        body in prop::collection::vec(any::<u8>(), 0..64),
        id in header_bytes(),
        timestamp in header_bytes(),
        signature in header_bytes(),
    ) {
        let headers = StandardHeaders { id: id.as_deref(), timestamp: timestamp.as_deref(), signature: signature.as_deref() };
        if standard::verify(&[&secret], headers, &body, now()).is_ok() {
            let text = |bytes: Option<&[u8]>| std::str::from_utf8(bytes.unwrap()).unwrap().trim().to_owned();
            let stamp: i64 = text(headers.timestamp).parse().unwrap();
            let expected = standard::sign(&secret, &text(headers.id), stamp, &body);
            prop_assert!(text(headers.signature).split(' ').any(|entry| entry == expected));
        }
    }

    /// The inbound request's headers as hyper hands them over, any mix of the two schemes, under one or two
    /// secrets (a rotation's grace), with or without the config's `inbound_require_timestamp`: an answer, never a
    /// panic; what it says verified did (the replay keys are taken from it), and a required timestamp is never
    /// met by `X-Observatory-Signature`.
    #[test]
    fn inbound_headers_of_any_shape_get_an_answer(
        secrets in prop::collection::vec(secret(), 1..3),
        body in prop::collection::vec(any::<u8>(), 0..64),
        observatory in header_bytes(),
        id in header_bytes(),
        timestamp in header_bytes(),
        signature in header_bytes(),
        require_timestamp in any::<bool>(),
    ) {
        let inbound = InboundSignature { observatory, webhook_id: id, webhook_timestamp: timestamp, webhook_signature: signature };
        let secrets: Vec<&WebhookSecret> = secrets.iter().collect();
        if let Ok(verified) = inbound.verify(&secrets, require_timestamp, &body, now()) {
            prop_assert!(verified.observatory_digest.is_some() || verified.standard_id.is_some());
            if require_timestamp {
                prop_assert!(verified.observatory_digest.is_none() && verified.standard_id.is_some());
            }
            if let Some(digest) = verified.observatory_digest {
                let expected: Vec<String> = secrets.iter().map(|secret| signature::sign(secret, &body)).collect();
                let header = format!("sha256={}", gateway_core::encoding::hex::encode(&digest));
                prop_assert!(expected.contains(&header));
            }
        }
    }

    #[test]
    fn any_secret_text_gives_a_key(text in "\\PC{0,60}") {
        let secret = WebhookSecret::new(text.clone());
        let key = standard::key_bytes(&secret);
        prop_assert!(!key.is_empty() || text.is_empty());
        // A secret the API accepts is used as the receiver's libraries use it.
        if text.starts_with("whsec_") && standard::secret_problem(&text).is_none() {
            prop_assert_ne!(key.as_ref(), text.as_bytes());
        }
    }
}
