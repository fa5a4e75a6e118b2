//! The operator bearer token, checked in constant time.

use std::sync::{Arc, Mutex};

use gateway_core::TokenHash;
use gateway_core::sync::lock;
use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::http::error::ApiError;

/// Checks `Authorization: Bearer <token>` against the operator token's SHA-256, as agent tokens are checked: the
/// presented token is hashed and the hashes compared in constant time ([`TokenHash::matches`]), so response timing
/// says nothing about how much of a guess was right. Only the hash is held, and it can change while the gateway
/// runs (a rotation of the stored token, see `admin_token`). Clones share it.
#[derive(Debug, Clone)]
pub struct OperatorAuth {
    expected: Arc<Mutex<TokenHash>>,
}

impl OperatorAuth {
    pub fn new(token: &str) -> Self {
        Self::from_hash(TokenHash::of(token))
    }

    pub fn from_hash(hash: TokenHash) -> Self {
        Self { expected: Arc::new(Mutex::new(hash)) }
    }

    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let presented = bearer_token(headers).ok_or_else(ApiError::unauthorized)?;
        if self.accepts(presented) { Ok(()) } else { Err(ApiError::unauthorized()) }
    }

    /// Whether `token` is the operator token.
    pub fn accepts(&self, token: &str) -> bool {
        let presented = TokenHash::of(token);
        let expected = *lock(&self.expected);
        expected.matches(&presented)
    }

    /// Makes `hash` the operator token's from now on; `true` when it differs from the one held.
    pub fn replace(&self, hash: TokenHash) -> bool {
        let mut expected = lock(&self.expected);
        let changed = *expected != hash;
        *expected = hash;
        changed
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
        let auth = OperatorAuth::new("0123456789abcdef");
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

    #[test]
    fn a_replaced_token_is_refused_by_every_clone_and_the_new_one_accepted() {
        let auth = OperatorAuth::new("0123456789abcdef");
        let clone = auth.clone();
        assert!(!auth.replace(TokenHash::of("0123456789abcdef")), "the same token: no change");
        assert!(clone.replace(TokenHash::of("fedcba9876543210")));
        assert!(!auth.accepts("0123456789abcdef"));
        assert!(auth.check(&headers(Some("Bearer fedcba9876543210"))).is_ok());
    }
}
