//! Agent credentials (docs/api.md, "Agent credentials"): the bearer tokens an agent proves its identity with, the
//! [`AgentCredentialStore`] port that keeps their hashes (`agent_credentials`), and its in-memory implementation.
//!
//! A token is `agt_<credential id>_<secret>`: 12 bytes of id and 32 random bytes of secret, both as lowercase hex
//! (93 characters in all). The id travels in the token so that checking one is a lookup by primary key and one
//! hash comparison, never a scan over every stored hash. Only a SHA-256 is stored, of the token's 44 bytes (id and
//! secret, decoded from hex: one block of the hash, where the 93 characters would be two): the secret is 256 bits
//! from the operating system's generator, so no guess can find a token from its hash however fast the hash is, and
//! a slow password KDF (bcrypt, Argon2), which exists to make guessing *low-entropy* secrets expensive, would only
//! cost every request time for no gain. Hashes are compared in constant time ([`TokenHash::matches`]).
//!
//! Credential ids sort by issue time: their first 6 bytes are the issue instant in milliseconds since the Unix
//! epoch, the other 6 are random (one more than the last id's within a millisecond). An agent's credentials
//! listed by id are so listed oldest first.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use ring::rand::SecureRandom;
use serde::Serialize;
use time::OffsetDateTime;

use crate::ids::AgentId;
use crate::ports::failure::FailureSwitch;
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// What every agent token starts with: tells it from the operator's token, and makes one found in a log or a
/// repository recognizable for what it is.
pub const TOKEN_PREFIX: &str = "agt_";
/// Bytes of a credential id: 6 of issue time, 6 random.
const ID_BYTES: usize = 12;
/// The largest value of an id's 6 random bytes.
const RANDOM_MAX: u64 = (1 << 48) - 1;

/// An id's bytes: the 6 low bytes of `millis`, then those of `tail`, big-endian.
fn id_bytes(millis: u64, tail: u64) -> [u8; ID_BYTES] {
    let mut bytes = [0u8; ID_BYTES];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&tail.to_be_bytes()[2..]);
    bytes
}
/// Hex digits of a credential id.
pub const CREDENTIAL_ID_CHARS: usize = 2 * ID_BYTES;
/// Bytes of a token's secret.
const SECRET_BYTES: usize = 32;
/// Characters of a whole token: prefix, id, `_`, secret.
pub const TOKEN_CHARS: usize = TOKEN_PREFIX.len() + CREDENTIAL_ID_CHARS + 1 + 2 * SECRET_BYTES;

/// Longest lifetime a token may be issued with (`expires_in_s`): ten years. Longer is as good as never expiring, and
/// the bound keeps the arithmetic on instants far from overflowing.
pub const MAX_TOKEN_LIFETIME_S: u64 = 10 * 365 * 86_400;

/// A credential id as its 12 bytes: what a map of credentials is keyed by, compared in place rather than through
/// a pointer to text.
pub type CredentialKey = [u8; ID_BYTES];

/// Bytes a token's hash covers: its id, then its secret.
const TOKEN_BYTES: usize = ID_BYTES + SECRET_BYTES;

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// Decodes lowercase hex into `out` (exactly twice its length); `false` on anything else. Every request with agent
/// auth on decodes a token, so each digit is one table lookup, and the validity of all of them one check at the end.
fn decode_lower_hex(text: &[u8], out: &mut [u8]) -> bool {
    /// A digit's value, or 0xFF for a byte that is not a lowercase hex digit.
    const VALUES: [u8; 256] = {
        let mut values = [0xFF; 256];
        let mut digit = 0;
        while digit < 16 {
            values[b"0123456789abcdef"[digit] as usize] = digit as u8;
            digit += 1;
        }
        values
    };
    if text.len() != 2 * out.len() {
        return false;
    }
    let mut invalid = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (VALUES[usize::from(pair[0])], VALUES[usize::from(pair[1])]);
        invalid |= (high | low) & 0xF0;
        *byte = high << 4 | (low & 0x0F);
    }
    invalid == 0
}

/// A credential's id: 24 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CredentialId(String);

impl CredentialId {
    /// `None` unless `text` is 24 lowercase hex digits: anything else names no credential.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == CREDENTIAL_ID_CHARS && is_lower_hex(text)).then(|| Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id whose bytes `key` is.
    pub fn from_key(key: &CredentialKey) -> Self {
        Self(crate::encoding::hex::encode(key))
    }

    pub fn key(&self) -> CredentialKey {
        let mut key = [0u8; ID_BYTES];
        // Always decodes: the text was checked when the id was made.
        decode_lower_hex(self.0.as_bytes(), &mut key);
        key
    }

    /// The issue instant in milliseconds, then 6 random bytes: the id's bytes. Within one millisecond of one
    /// process, the random part of each id after the first is the one before plus one, so that credentials issued
    /// together (a script, the console) still list in the order they were issued.
    fn generate(at: OffsetDateTime, random: &dyn SecureRandom) -> Result<[u8; ID_BYTES], ring::error::Unspecified> {
        /// The millisecond and the random part of this process's last id.
        static LAST: Mutex<(u64, u64)> = Mutex::new((0, 0));
        let millis = u64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        let mut fresh = [0u8; 8];
        random.fill(&mut fresh[2..])?;
        let mut last = lock(&LAST);
        // An instant before the last (the clock stepped back) takes fresh bytes and leaves the last as it was.
        let tail = match *last {
            (last_millis, last_tail) if last_millis == millis && last_tail < RANDOM_MAX => last_tail + 1,
            (last_millis, _) if last_millis > millis => return Ok(id_bytes(millis, u64::from_be_bytes(fresh))),
            _ => u64::from_be_bytes(fresh),
        };
        *last = (millis, tail);
        drop(last);
        Ok(id_bytes(millis, tail))
    }
}

impl fmt::Display for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lets a map keyed by ids be searched with the id's text, as a presented token gives it, without allocating.
impl Borrow<str> for CredentialId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// The SHA-256 of a token's bytes: what the store keeps instead of the token. `==` (for tests and stored rows)
/// is not how a presented token is checked: [`TokenHash::matches`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The SHA-256 of `bytes` (a token's are its id's and its secret's, see [`PresentedToken::hash`]).
    pub fn of(bytes: impl AsRef<[u8]>) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes.as_ref());
        let mut hash = [0u8; 32];
        hash.copy_from_slice(digest.as_ref());
        Self(hash)
    }

    /// Whether `presented` is this hash, in constant time: how long it takes says nothing about how many bytes
    /// agree.
    pub fn matches(&self, presented: &TokenHash) -> bool {
        use subtle::ConstantTimeEq;
        // Word by word: every request with agent auth on compares one hash, and subtle's byte-wise slice comparison
        // was ten times the instructions of four words.
        let word = |hash: &[u8; 32], index: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&hash[8 * index..8 * index + 8]);
            u64::from_le_bytes(bytes)
        };
        let (stored, given) = (&self.0, &presented.0);
        let equal =
            (0..4).fold(subtle::Choice::from(1), |equal, index| equal & word(stored, index).ct_eq(&word(given, index)));
        equal.into()
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits, as the store keeps it.
    pub fn to_hex(&self) -> String {
        crate::encoding::hex::encode(&self.0)
    }

    pub fn from_hex(text: &str) -> Option<Self> {
        let bytes = crate::encoding::hex::decode(text)?;
        Some(Self(bytes.try_into().ok()?))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// A token just issued: the one moment its text exists in the gateway. Debug never shows it.
pub struct IssuedToken {
    pub credential_id: CredentialId,
    pub hash: TokenHash,
    token: String,
}

impl IssuedToken {
    /// The row that stores this token for `agent_id`: its id and hash, never the token.
    pub fn record(&self, agent_id: AgentId, created_at: OffsetDateTime) -> CredentialRecord {
        CredentialRecord {
            credential_id: self.credential_id.clone(),
            agent_id,
            token_hash: self.hash,
            created_at,
            revoked_at: None,
            expires_at: None,
        }
    }

    /// A new token, its id stamped with `at`. Fails only when the operating system has no randomness source.
    pub fn issue(at: OffsetDateTime) -> Result<Self, ring::error::Unspecified> {
        let random = ring::rand::SystemRandom::new();
        let mut bytes = [0u8; TOKEN_BYTES];
        bytes[..ID_BYTES].copy_from_slice(&CredentialId::generate(at, &random)?);
        random.fill(&mut bytes[ID_BYTES..])?;
        let credential_id = CredentialId(crate::encoding::hex::encode(&bytes[..ID_BYTES]));
        let token = format!("{TOKEN_PREFIX}{credential_id}_{}", crate::encoding::hex::encode(&bytes[ID_BYTES..]));
        Ok(Self { hash: TokenHash::of(bytes), credential_id, token })
    }

    /// The token's text, for the one response that hands it to the operator.
    pub fn expose(&self) -> &str {
        &self.token
    }
}

impl fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedToken").field("credential_id", &self.credential_id).finish_non_exhaustive()
    }
}

/// A token as a client presented it, well-formed: its credential id, and its bytes to hash. Debug never shows the
/// secret.
#[derive(Clone, Copy)]
pub struct PresentedToken<'a> {
    credential_id: &'a str,
    bytes: [u8; TOKEN_BYTES],
}

impl<'a> PresentedToken<'a> {
    /// `None` unless `text` has the shape of an agent token: what does not can be refused without a lookup.
    pub fn parse(text: &'a str) -> Option<Self> {
        let rest = text.strip_prefix(TOKEN_PREFIX)?;
        let (credential_id, secret) = rest.split_at_checked(CREDENTIAL_ID_CHARS)?;
        let secret = secret.strip_prefix('_')?;
        let mut bytes = [0u8; TOKEN_BYTES];
        let (id_bytes, secret_bytes) = bytes.split_at_mut(ID_BYTES);
        let well_formed =
            decode_lower_hex(credential_id.as_bytes(), id_bytes) && decode_lower_hex(secret.as_bytes(), secret_bytes);
        well_formed.then_some(Self { credential_id, bytes })
    }

    /// The credential id the token names (24 lowercase hex digits).
    pub fn credential_id(&self) -> &'a str {
        self.credential_id
    }

    /// The credential id's bytes.
    pub fn credential_key(&self) -> CredentialKey {
        let mut key = [0u8; ID_BYTES];
        key.copy_from_slice(&self.bytes[..ID_BYTES]);
        key
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash::of(self.bytes)
    }
}

impl fmt::Debug for PresentedToken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresentedToken").field("credential_id", &self.credential_id()).finish_non_exhaustive()
    }
}

/// One row of `agent_credentials`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRecord {
    pub credential_id: CredentialId,
    pub agent_id: AgentId,
    pub token_hash: TokenHash,
    pub created_at: OffsetDateTime,
    /// When it was revoked; a revoked credential stays listed but authenticates nothing.
    pub revoked_at: Option<OffsetDateTime>,
    /// When it stops authenticating by itself (`expires_in_s` at issue); `None`: never. An expired credential stays
    /// listed, and its token is refused as expired (not as unknown) so the agent knows to ask for a new one.
    pub expires_at: Option<OffsetDateTime>,
}

impl CredentialRecord {
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether it has expired at `now` (its expiry instant included).
    pub fn is_expired(&self, now: OffsetDateTime) -> bool {
        self.expires_at.is_some_and(|expires_at| expires_at <= now)
    }
}

/// Agent credentials, by id.
pub trait AgentCredentialStore: Send + Sync + fmt::Debug {
    /// Stores a new, unrevoked credential, with its expiry if it has one. An id already stored is [`StoreError::Conflict`], and nothing is
    /// written.
    fn insert_credential(&self, credential: &CredentialRecord) -> Result<(), StoreError>;

    fn credential(&self, id: &CredentialId) -> Result<Option<CredentialRecord>, StoreError>;

    /// The credentials revoked at or after `since`, each once, in no particular order: what a cache of verified
    /// credentials polls to drop the ones revoked elsewhere (a stored credential changes only by being revoked, so
    /// this is all it needs to know). Answered from an index on `revoked_at`: the work is the revocations', not
    /// the credentials'.
    fn revoked_since(&self, since: OffsetDateTime) -> Result<Vec<CredentialId>, StoreError>;

    /// `agent_id`'s credentials, revoked ones included, by credential id (so oldest first), after `after`, at
    /// most `limit`.
    fn agent_credentials(
        &self,
        agent_id: &AgentId,
        after: Option<&CredentialId>,
        limit: usize,
    ) -> Result<Vec<CredentialRecord>, StoreError>;

    /// Revokes `id` at `at` if it is `agent_id`'s and not revoked yet, and returns the row as it is then: a
    /// credential revoked earlier keeps its first `revoked_at`. `None` when `agent_id` has no credential `id`.
    fn revoke_credential(
        &self,
        agent_id: &AgentId,
        id: &CredentialId,
        at: OffsetDateTime,
    ) -> Result<Option<CredentialRecord>, StoreError>;
}

/// `agent_credentials` in memory. [`Self::failure`] makes every operation report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct InMemoryAgentCredentialStore {
    rows: Mutex<BTreeMap<CredentialId, CredentialRecord>>,
    pub failure: FailureSwitch,
}

impl AgentCredentialStore for InMemoryAgentCredentialStore {
    fn insert_credential(&self, credential: &CredentialRecord) -> Result<(), StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        if rows.contains_key(&credential.credential_id) {
            return Err(StoreError::Conflict("insert credential: unique constraint".to_owned()));
        }
        let stored = CredentialRecord { revoked_at: None, ..credential.clone() };
        rows.insert(credential.credential_id.clone(), stored);
        Ok(())
    }

    fn credential(&self, id: &CredentialId) -> Result<Option<CredentialRecord>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows).get(id).cloned())
    }

    fn revoked_since(&self, since: OffsetDateTime) -> Result<Vec<CredentialId>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows)
            .values()
            .filter(|row| row.revoked_at.is_some_and(|at| at >= since))
            .map(|row| row.credential_id.clone())
            .collect())
    }

    fn agent_credentials(
        &self,
        agent_id: &AgentId,
        after: Option<&CredentialId>,
        limit: usize,
    ) -> Result<Vec<CredentialRecord>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows)
            .values()
            .filter(|row| &row.agent_id == agent_id && after.is_none_or(|after| &row.credential_id > after))
            .take(limit)
            .cloned()
            .collect())
    }

    fn revoke_credential(
        &self,
        agent_id: &AgentId,
        id: &CredentialId,
        at: OffsetDateTime,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        let Some(row) = rows.get_mut(id).filter(|row| &row.agent_id == agent_id) else { return Ok(None) };
        row.revoked_at.get_or_insert(at);
        Ok(Some(row.clone()))
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    crate::agent_credential_store_conformance!(Some(Box::<InMemoryAgentCredentialStore>::default()));

    #[test]
    fn an_issued_token_parses_back_to_its_id_and_hash() {
        let at = datetime!(2026-02-22 12:00:00.123 UTC);
        let issued = IssuedToken::issue(at).unwrap();
        let token = issued.expose();
        assert_eq!(token.len(), TOKEN_CHARS);
        assert!(token.starts_with("agt_"));
        let presented = PresentedToken::parse(token).unwrap();
        assert_eq!(presented.credential_id(), issued.credential_id.as_str());
        assert_eq!(presented.credential_key(), issued.credential_id.key());
        assert_eq!(presented.hash(), issued.hash);
        assert!(issued.hash.matches(&presented.hash()));
        for byte in [0, 7, 8, 31] {
            let mut other = *issued.hash.as_bytes();
            other[byte] ^= 0x01;
            assert!(!issued.hash.matches(&TokenHash(other)), "a difference in byte {byte}");
        }
        assert!(!issued.hash.matches(&TokenHash::of(issued.expose())), "the bytes are hashed, not the text");
        assert_eq!(TokenHash::from_hex(&issued.hash.to_hex()), Some(issued.hash));
        assert_ne!(IssuedToken::issue(at).unwrap().expose(), token, "each token is random");
    }

    #[test]
    fn credential_ids_issued_in_one_millisecond_sort_in_issue_order() {
        // Later than any other test's instant, so that none of theirs (run on other threads) comes between.
        let at = datetime!(2999-01-01 00:00:00.003 UTC);
        let ids: Vec<CredentialId> = (0..64).map(|_| IssuedToken::issue(at).unwrap().credential_id).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
        let millis = format!("{:012x}", at.unix_timestamp_nanos() / 1_000_000);
        assert!(ids.iter().all(|id| id.as_str().starts_with(&millis)), "{ids:?}");
    }

    #[test]
    fn credential_ids_sort_by_issue_time() {
        let early = IssuedToken::issue(datetime!(2026-02-22 12:00:00.001 UTC)).unwrap().credential_id;
        let late = IssuedToken::issue(datetime!(2026-02-22 12:00:00.002 UTC)).unwrap().credential_id;
        assert!(early < late, "{early} < {late}");
        assert_eq!(&early.as_str()[..12], "019c85388601", "milliseconds since the epoch, big-endian");
        assert_eq!(CredentialId::parse(early.as_str()), Some(early.clone()));
        for bad in
            ["", "019c858ec7c1", "019C858EC7C1000000000000", "019c858ec7c10000000000000", "zz9c858ec7c1000000000000"]
        {
            assert_eq!(CredentialId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_well_formed_tokens_parse() {
        let good = format!("agt_{}_{}", "0".repeat(24), "a".repeat(64));
        assert!(PresentedToken::parse(&good).is_some());
        for bad in [
            String::new(),
            "agt_".to_owned(),
            good.replace("agt_", "agx_"),
            good.to_uppercase(),
            format!("{good}0"),
            good[..good.len() - 1].to_owned(),
            format!("agt_{}-{}", "0".repeat(24), "a".repeat(64)),
            format!("agt_{}_{}", "0".repeat(23), "a".repeat(65)),
            format!("agt_{}_{}", "0".repeat(24), "g".repeat(64)),
            "agt_ü".to_owned(),
            format!("agt_{}_{}", "0".repeat(24), "/".repeat(64)),
            format!("agt_{}:_{}", "0".repeat(23), "a".repeat(64)),
        ] {
            assert!(PresentedToken::parse(&bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_a_token() {
        let issued = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
        let secret = &issued.expose()[TOKEN_PREFIX.len() + CREDENTIAL_ID_CHARS + 1..];
        let shown = format!("{issued:?} {:?} {:?}", PresentedToken::parse(issued.expose()).unwrap(), issued.hash);
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains(&issued.hash.to_hex()), "{shown}");
    }

    #[test]
    fn the_switch_fails_every_operation() {
        let store = InMemoryAgentCredentialStore::default();
        store.failure.set_failing(true);
        let id = CredentialId::parse(&"0".repeat(24)).unwrap();
        let agent = AgentId::new("a").unwrap();
        assert!(store.credential(&id).is_err());
        assert!(store.revoked_since(OffsetDateTime::now_utc()).is_err());
        assert!(store.agent_credentials(&agent, None, 10).is_err());
        assert!(store.revoke_credential(&agent, &id, OffsetDateTime::now_utc()).is_err());
    }
}
