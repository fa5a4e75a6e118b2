//! The operator's token, checked in constant time.

use std::sync::{Arc, Mutex};

use gateway_core::TokenHash;
use gateway_core::runtime::sync::lock;

use crate::AuthError;
use crate::admin_token::OperatorToken;

/// Checks a presented token against the operator token's SHA-256, as agent tokens are checked: the presented token
/// is hashed and the hashes compared in constant time ([`TokenHash::matches`]), so response timing says nothing
/// about how much of a guess was right. Only the hash is held, and it can change while the process runs (a rotation
/// of the stored token, followed by [`crate::Auth`]'s loop). Clones share it.
#[derive(Debug, Clone)]
pub struct OperatorAuth {
    /// `None`: there is no operator ([`OperatorToken::Disabled`]), and no token is its.
    expected: Arc<Mutex<Option<TokenHash>>>,
}

impl OperatorAuth {
    pub fn new(token: &str) -> Self {
        Self::from_hash(TokenHash::of(token))
    }

    pub fn from_hash(hash: TokenHash) -> Self {
        Self { expected: Arc::new(Mutex::new(Some(hash))) }
    }

    /// The check for `token`, as configured.
    pub fn of(token: &OperatorToken) -> Self {
        match token {
            OperatorToken::Given(token) => Self::from_hash(token.hash()),
            OperatorToken::Stored(hash) => Self::from_hash(*hash),
            OperatorToken::Disabled => Self { expected: Arc::new(Mutex::new(None)) },
        }
    }

    /// `Ok` when `presented` (the bearer token of a request, if it had one) is the operator token, else
    /// [`AuthError::Refused`].
    pub fn check(&self, presented: Option<&str>) -> Result<(), AuthError> {
        match presented {
            Some(token) if self.accepts(token) => Ok(()),
            Some(_) | None => Err(AuthError::Refused),
        }
    }

    /// Whether `token` is the operator token.
    pub fn accepts(&self, token: &str) -> bool {
        let presented = TokenHash::of(token);
        let expected = *lock(&self.expected);
        expected.is_some_and(|expected| expected.matches(&presented))
    }

    /// Makes `hash` the operator token's from now on; `true` when it differs from the one held.
    pub fn replace(&self, hash: TokenHash) -> bool {
        let mut expected = lock(&self.expected);
        let changed = *expected != Some(hash);
        *expected = Some(hash);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AdminToken;

    #[test]
    fn a_replaced_token_is_refused_by_every_clone_and_the_new_one_accepted() {
        let auth = OperatorAuth::new("0123456789abcdef");
        let clone = auth.clone();
        assert!(!auth.replace(TokenHash::of("0123456789abcdef")), "the same token: no change");
        assert!(clone.replace(TokenHash::of("fedcba9876543210")));
        assert!(!auth.accepts("0123456789abcdef"));
        assert!(auth.check(Some("fedcba9876543210")).is_ok());
    }

    #[test]
    fn without_an_operator_no_token_is_its() {
        let auth = OperatorAuth::of(&OperatorToken::Disabled);
        for token in ["", "0123456789abcdef"] {
            assert_eq!(auth.check(Some(token)), Err(AuthError::Refused));
        }
        assert_eq!(auth.check(None), Err(AuthError::Refused));
        let given = OperatorAuth::of(&OperatorToken::Given(AdminToken::new("0123456789abcdef".to_owned())));
        assert!(given.check(Some("0123456789abcdef")).is_ok());
        assert_eq!(given.check(None), Err(AuthError::Refused));
    }
}
