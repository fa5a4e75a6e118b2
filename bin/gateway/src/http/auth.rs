//! The operator bearer token, checked in constant time.

use http::HeaderMap;
use http::header::AUTHORIZATION;
use ring::hmac;

use crate::http::error::ApiError;

/// Checks `Authorization: Bearer <token>`. The token is never compared byte by byte: both sides go through
/// HMAC under a per-process random key and `ring::hmac::verify` compares the tags in constant time, so response
/// timing says nothing about how much of a guess was right.
#[derive(Debug)]
pub struct OperatorAuth {
    key: hmac::Key,
    expected: hmac::Tag,
}

impl OperatorAuth {
    pub fn new(token: &str) -> Result<Self, ring::error::Unspecified> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())?;
        let expected = hmac::sign(&key, token.as_bytes());
        Ok(Self { key, expected })
    }

    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let presented = bearer_token(headers).ok_or_else(ApiError::unauthorized)?;
        if self.accepts(presented) { Ok(()) } else { Err(ApiError::unauthorized()) }
    }

    /// Whether `token` is the operator token.
    pub fn accepts(&self, token: &str) -> bool {
        hmac::verify(&self.key, token.as_bytes(), self.expected.as_ref()).is_ok()
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if there is one. Read as bytes:
/// every agent request with agent auth on goes through here.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let (scheme, token) = headers.get(AUTHORIZATION)?.as_bytes().split_at_checked(b"bearer ".len())?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    // What the token may hold is decided by whoever checks it: an agent token's shape, or the operator token byte
    // for byte.
    std::str::from_utf8(token.trim_ascii()).ok()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(AUTHORIZATION, HeaderValue::from_bytes(value.as_bytes()).unwrap());
        }
        headers
    }

    #[test]
    fn accepts_only_the_exact_bearer_token() {
        let auth = OperatorAuth::new("0123456789abcdef").unwrap();
        assert!(auth.check(&headers(Some("Bearer 0123456789abcdef"))).is_ok());
        assert!(auth.check(&headers(Some("bearer 0123456789abcdef"))).is_ok());
        assert!(auth.check(&headers(Some("BEARER   0123456789abcdef  "))).is_ok());
        for bad in [
            None,
            Some("Bearer 0123456789abcdeF"),
            Some("Bearer 0123456789abcde"),
            Some("Basic x"),
            Some("0123456789abcdef"),
            Some("Bearer"),
            Some("Bearer\t0123456789abcdef"),
            Some("Bearer 0123456789abcdef\u{e9}"),
            Some("Bearer 01234567 89abcdef"),
        ] {
            assert_eq!(auth.check(&headers(bad)), Err(ApiError::unauthorized()), "{bad:?}");
        }
    }
}
