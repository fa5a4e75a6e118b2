//! Validated identifiers.
//!
//! Agent and cluster ids arrive from untrusted agents and end up as map keys, SQL values, topic names and log
//! fields, so they are checked once at the edge and carried as types afterwards.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Longest accepted id, in bytes. Bounds the memory a flood of made-up ids can take in the liveness map.
pub const MAX_ID_BYTES: usize = 256;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_ID_BYTES} bytes")]
    TooLong,
    #[error("must not contain control characters")]
    ControlCharacter,
    #[error("must be visible ASCII characters only")]
    NotVisibleAscii,
}

pub(crate) fn validate_id(value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty);
    }
    if value.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong);
    }
    if value.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter);
    }
    Ok(())
}

macro_rules! validated_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Checks `value` and wraps it.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate_id(&value)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_inner(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(value: &str) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Self::new(value).map_err(serde::de::Error::custom)
            }
        }
    };
}

validated_id!(
    /// The id an agent calls itself by: non-empty, at most [`MAX_ID_BYTES`] bytes, no control characters.
    AgentId
);
validated_id!(
    /// The cluster an agent says it belongs to; same rules as [`AgentId`].
    ClusterId
);
validated_id!(
    /// An agent's own id for one of its tool calls (`POST /gateway/tools/{tool_name}`); same rules as
    /// [`AgentId`]. Unique per agent: a call with an id the agent used before is a retry of that call.
    ToolCallId
);

/// Bytes of an agent id that a [`CompactAgentId`] holds in place.
pub const INLINE_AGENT_ID_BYTES: usize = 62;

/// An [`AgentId`] held in place when it is at most [`INLINE_AGENT_ID_BYTES`] long (most are), else as the id
/// itself: a copy that a cache entry keeps inside its own cache lines, so that comparing it follows no pointer.
/// Made only from an [`AgentId`], so it is always a valid one.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactAgentId(Compact);

#[derive(Clone, PartialEq, Eq)]
enum Compact {
    Inline { len: u8, bytes: [u8; INLINE_AGENT_ID_BYTES] },
    Heap(AgentId),
}

impl CompactAgentId {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Always valid UTF-8: the bytes are a whole `str`'s, copied from an `AgentId`.
            Compact::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Compact::Heap(id) => id.as_str(),
        }
    }

    /// The id as an [`AgentId`] of its own (a copy when held in place).
    pub fn to_agent_id(&self) -> AgentId {
        match &self.0 {
            Compact::Inline { .. } => AgentId(self.as_str().to_owned()),
            Compact::Heap(id) => id.clone(),
        }
    }

    /// Whether `id` is this id.
    pub fn is(&self, id: &AgentId) -> bool {
        self.as_str() == id.as_str()
    }
}

impl From<&AgentId> for CompactAgentId {
    fn from(id: &AgentId) -> Self {
        let text = id.as_str().as_bytes();
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= INLINE_AGENT_ID_BYTES => {
                let mut bytes = [0u8; INLINE_AGENT_ID_BYTES];
                bytes[..text.len()].copy_from_slice(text);
                Self(Compact::Inline { len, bytes })
            }
            _ => Self(Compact::Heap(id.clone())),
        }
    }
}

impl fmt::Debug for CompactAgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Longest accepted `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// A client's `Idempotency-Key`: 1 to 255 visible ASCII characters (a UUID, a hash, `order-42:retry`). A create
/// request repeated with the same key returns the first request's result instead of creating a second one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        if value.is_empty() {
            return Err(IdError::Empty);
        }
        if value.len() > MAX_IDEMPOTENCY_KEY_BYTES {
            return Err(IdError::TooLong);
        }
        if !value.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(IdError::NotVisibleAscii);
        }
        Ok(Self(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_agent_id_is_the_id_it_was_made_from_held_in_place_when_short() {
        assert_eq!(size_of::<CompactAgentId>(), 64, "one cache line");
        for text in ["a", "agent-0042", "é-agent", &"x".repeat(INLINE_AGENT_ID_BYTES), &"y".repeat(MAX_ID_BYTES)] {
            let id = AgentId::new(text).unwrap();
            let compact = CompactAgentId::from(&id);
            assert_eq!(compact.as_str(), text);
            assert_eq!(compact.to_agent_id(), id);
            assert!(compact.is(&id));
            assert_eq!(matches!(compact.0, Compact::Inline { .. }), text.len() <= INLINE_AGENT_ID_BYTES, "{text}");
        }
        let short = CompactAgentId::from(&AgentId::new("agent-1").unwrap());
        for other in ["agent-10", "agent-", "Agent-1", "agent-2"] {
            assert!(!short.is(&AgentId::new(other).unwrap()), "{other}");
        }
        assert_eq!(format!("{short:?}"), "\"agent-1\"");
    }

    #[test]
    fn idempotency_keys_are_short_visible_ascii() {
        assert!(IdempotencyKey::new("7f1c2b9e-0d3a-4c55-9a43-1f1e2d3c4b5a").is_ok());
        assert_eq!(IdempotencyKey::new(""), Err(IdError::Empty));
        assert_eq!(IdempotencyKey::new("k".repeat(256)), Err(IdError::TooLong));
        assert_eq!(IdempotencyKey::new("with space"), Err(IdError::NotVisibleAscii));
        assert_eq!(IdempotencyKey::new("ünïcode"), Err(IdError::NotVisibleAscii));
    }

    #[test]
    fn accepts_ordinary_ids() {
        assert_eq!(AgentId::new("researcher-alpha-9").unwrap().as_str(), "researcher-alpha-9");
        assert!(ClusterId::new("mesh-04").is_ok());
        assert!(AgentId::new("ünïcode:ok/with spaces").is_ok());
    }

    #[test]
    fn rejects_empty_long_and_control() {
        assert_eq!(AgentId::new(""), Err(IdError::Empty));
        assert_eq!(AgentId::new("a".repeat(MAX_ID_BYTES + 1)), Err(IdError::TooLong));
        assert!(AgentId::new("a".repeat(MAX_ID_BYTES)).is_ok());
        assert_eq!(AgentId::new("bad\nid"), Err(IdError::ControlCharacter));
        assert_eq!(ClusterId::new("nul\0"), Err(IdError::ControlCharacter));
    }

    #[test]
    fn deserialize_validates() {
        assert!(serde_json::from_str::<AgentId>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<AgentId>("\"\"").is_err());
    }
}
