//! The bearer token of a request, which gateway-auth checks (an agent's or the operator's).

use http::HeaderMap;
use http::header::AUTHORIZATION;

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if there is one. Read as bytes:
/// every agent request with agent auth on goes through here.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
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
    use gateway_auth::OperatorAuth;
    use http::HeaderValue;

    use super::*;
    use crate::http::error::ApiError;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(AUTHORIZATION, HeaderValue::from_bytes(value.as_bytes()).unwrap());
        }
        headers
    }

    /// The operator's check as a request meets it: its bearer token, then the token itself, byte for byte.
    fn check(auth: &OperatorAuth, headers: &HeaderMap) -> Result<(), ApiError> {
        auth.check(bearer_token(headers)).map_err(ApiError::from)
    }

    #[test]
    fn accepts_only_the_exact_bearer_token() {
        let auth = OperatorAuth::new("0123456789abcdef");
        assert!(check(&auth, &headers(Some("Bearer 0123456789abcdef"))).is_ok());
        assert!(check(&auth, &headers(Some("bearer 0123456789abcdef"))).is_ok());
        assert!(check(&auth, &headers(Some("BEARER   0123456789abcdef  "))).is_ok());
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
            assert_eq!(check(&auth, &headers(bad)), Err(ApiError::unauthorized()), "{bad:?}");
        }
    }
}
