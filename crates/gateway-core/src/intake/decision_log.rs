//! The DecisionLog an agent sends to `POST /gateway/messages`, and its validation.
//!
//! Validation builds the typed log straight from the parsed JSON value, field by field, so every error names the
//! exact field path (`identity.agent_id`) and there is one place that decides what is wrong. Sections are
//! optional; required fields apply within a present section. A `null` section or optional field counts as
//! absent. Fields the schema does not name are ignored and not forwarded.
//!
//! A valid body is first read directly into typed fields ([`DecisionLog::from_valid_body`], several times cheaper than
//! building the JSON value); that reading restates the rules only to accept, and leaves every body it does not accept
//! to the value reading (see [`crate::intake::direct_json`]). Tests hold the two to the same results.

use serde::Serialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::ids::{AgentId, MAX_ID_BYTES};
use crate::intake::direct_json::Object;

/// The first way a DecisionLog breaks the schema: a field path and what is wrong with it. Never carries the
/// offending value, so it is safe to return and to publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct SchemaViolation {
    pub path: String,
    pub reason: String,
}

impl SchemaViolation {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { path: path.into(), reason: reason.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionLog {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cognition: Option<Cognition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_delta: Option<StateDelta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Meta {
    pub trace_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub timestamp: OffsetDateTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_step_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Identity {
    pub agent_id: AgentId,
    pub agent_type: String,
    pub capability_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cognition {
    pub intent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_chain: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence_score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy_used: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entropy_score: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    Success,
    Failure,
    Pending,
    Skipped,
}

impl ActionStatus {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "success" => Some(Self::Success),
            "failure" => Some(Self::Failure),
            "pending" => Some(Self::Pending),
            "skipped" => Some(Self::Skipped),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    pub status: ActionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<String>,
    /// A JSON object, or a string that holds JSON (agents send both).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_output_summary: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_to_memory: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_consumed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cumulative_session_cost: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Control {
    pub hitl_required: bool,
    /// Any JSON value; the schema leaves its shape to the agent framework.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupt_signal: Option<Value>,
    pub is_terminal: bool,
}

impl DecisionLog {
    /// Validates a parsed JSON document and builds the typed log, or names the first failing field.
    pub fn from_json(value: &Value) -> Result<Self, SchemaViolation> {
        let root = value.as_object().ok_or_else(|| SchemaViolation::new("$", "must be a JSON object"))?;
        Ok(Self {
            meta: section(root, "meta")?.map(Meta::read).transpose()?,
            identity: section(root, "identity")?.map(Identity::read).transpose()?,
            cognition: section(root, "cognition")?.map(Cognition::read).transpose()?,
            action: section(root, "action")?.map(Action::read).transpose()?,
            state_delta: section(root, "state_delta")?.map(StateDelta::read).transpose()?,
            control: section(root, "control")?.map(Control::read).transpose()?,
        })
    }

    pub fn trace_id(&self) -> Option<&str> {
        self.meta.as_ref().map(|meta| meta.trace_id.as_str())
    }

    pub fn agent_id(&self) -> Option<&AgentId> {
        self.identity.as_ref().map(|identity| &identity.agent_id)
    }
}

impl DecisionLog {
    /// The log of a body that is certainly valid, read without a JSON tree; `None` for anything else (not JSON,
    /// a broken rule, a repeated key...), which [`Self::from_json`] then decides and names. See
    /// [`crate::intake::direct_json`] and [`DirectLog`]; each check there is one of `from_json`'s rules.
    pub fn from_valid_body(body: &[u8]) -> Option<Self> {
        DirectLog::read(body).map(DirectLog::into_owned)
    }
}

/// A valid DecisionLog read straight from its body, owning almost nothing: its strings are borrowed from the body
/// (unescaped into their own only where the body escapes them), and `tool_input` and `interrupt_signal` stay the
/// JSON text they are (checked as the value reading would check them). The intake reads what every log needs (the
/// identity, the trace id, the tool call) from here, and builds the owned [`DecisionLog`] only for someone who
/// takes it (a subscriber of `gateway:messages`, a reminder): otherwise its dozen strings and its built
/// `tool_input` would be allocated, copied and freed for nothing (docs/benchmarks.md, s28-h and s31-h).
#[derive(Debug)]
pub struct DirectLog<'a> {
    meta: Option<(wire::Meta<'a>, OffsetDateTime)>,
    identity: Option<(AgentId, wire::Identity<'a>)>,
    cognition: Option<wire::Cognition<'a>>,
    action: Option<(ActionStatus, wire::Action<'a>)>,
    state_delta: Option<wire::StateDelta<'a>>,
    control: Option<wire::Control<'a>>,
}

impl<'a> DirectLog<'a> {
    /// The log of a body that is certainly valid, or `None` (see [`DecisionLog::from_valid_body`]).
    pub fn read(body: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(body).ok()?;
        // The plainest logs by hand, every other one by serde; the same rules check either.
        let wire = match wire::scan::log(text) {
            Some(wire) => wire,
            None if crate::intake::direct_json::shallow(text) => crate::intake::direct_json::read_text(text)?,
            None => return None,
        };
        Some(Self {
            meta: valid_section(wire.meta, wire::Meta::valid)?,
            identity: valid_section(wire.identity, wire::Identity::valid)?,
            cognition: valid_section(wire.cognition, wire::Cognition::valid)?,
            action: valid_section(wire.action, wire::Action::valid)?,
            state_delta: valid_section(wire.state_delta, wire::StateDelta::valid)?,
            control: valid_section(wire.control, wire::Control::valid)?,
        })
    }

    pub fn trace_id(&self) -> Option<&str> {
        self.meta.as_ref().map(|(meta, _)| meta.trace_id.as_str())
    }

    pub fn agent_id(&self) -> Option<&AgentId> {
        self.identity.as_ref().map(|(agent_id, _)| agent_id)
    }

    /// `identity`: the agent, its `agent_type` and its `capability_version`.
    pub fn identity(&self) -> Option<(&AgentId, &str, &str)> {
        self.identity
            .as_ref()
            .map(|(agent_id, identity)| (agent_id, identity.agent_type.as_str(), identity.capability_version.as_str()))
    }

    /// `action.tool_call`.
    pub fn tool_call(&self) -> Option<&str> {
        self.action.as_ref()?.1.tool_call.as_ref().map(wire::Text::as_str)
    }

    /// The owned log, exactly as [`DecisionLog::from_json`] builds it from the same body.
    pub fn into_owned(self) -> DecisionLog {
        DecisionLog {
            meta: self.meta.map(|(meta, timestamp)| meta.into_owned(timestamp)),
            identity: self.identity.map(|(agent_id, identity)| identity.into_owned(agent_id)),
            cognition: self.cognition.map(wire::Cognition::into_owned),
            action: self.action.map(|(status, action)| action.into_owned(status)),
            state_delta: self.state_delta.map(wire::StateDelta::into_owned),
            control: self.control.map(wire::Control::into_owned),
        }
    }
}

/// An absent section (`Some(None)`), a valid one, or `None` when it breaks a rule.
fn valid_section<W, T>(section: Option<Object<W>>, valid: impl FnOnce(W) -> Option<T>) -> Option<Option<T>> {
    match section {
        None => Some(None),
        Some(Object(fields)) => valid(fields).map(Some),
    }
}

/// The DecisionLog as the direct reading takes it: the types `from_json` accepts (a field that is `null` or
/// absent is `None`, unknown fields are skipped), borrowed from the body, with the rules serde cannot state
/// checked in `valid`.
mod wire {
    use std::borrow::Cow;
    use std::fmt;

    use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::Value;
    use serde_json::value::RawValue;
    use time::OffsetDateTime;

    use super::{ActionStatus, Object};
    use crate::ids::{AgentId, MAX_ID_BYTES};

    #[derive(serde::Deserialize)]
    pub(super) struct Log<'a> {
        #[serde(borrow)]
        pub(super) meta: Option<Object<Meta<'a>>>,
        #[serde(borrow)]
        pub(super) identity: Option<Object<Identity<'a>>>,
        #[serde(borrow)]
        pub(super) cognition: Option<Object<Cognition<'a>>>,
        #[serde(borrow)]
        pub(super) action: Option<Object<Action<'a>>>,
        #[serde(borrow)]
        pub(super) state_delta: Option<Object<StateDelta<'a>>>,
        #[serde(borrow)]
        pub(super) control: Option<Object<Control<'a>>>,
    }

    /// A JSON string, borrowed from the body when it holds no escape. (serde borrows a `Cow<str>` field only
    /// where the field is the `Cow` itself, never inside an `Option` or a `Vec`.)
    #[derive(Debug)]
    pub(super) struct Text<'a>(Cow<'a, str>);

    impl Text<'_> {
        pub(super) fn as_str(&self) -> &str {
            &self.0
        }

        fn into_owned(self) -> String {
            self.0.into_owned()
        }

        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct TextVisitor;

            impl<'de> Visitor<'de> for TextVisitor {
                type Value = Cow<'de, str>;

                fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                    formatter.write_str("a string")
                }

                fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                    Ok(Cow::Borrowed(text))
                }

                fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                    Ok(Cow::Owned(text.to_owned()))
                }
            }

            deserializer.deserialize_str(TextVisitor).map(Text)
        }
    }

    /// A JSON value read as the value reading reads it, building nothing: numbers must fit an `f64`, a `\u`
    /// escape must make a character. A value kept as its text (`&RawValue`, which serde_json only skips over, and
    /// skipping takes `1e400` and a lone surrogate) is accepted only if it passes this, so the direct reading
    /// never accepts what the value reading refuses.
    struct Checked;

    impl<'de> Deserialize<'de> for Checked {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(CheckedVisitor)
        }
    }

    struct CheckedVisitor;

    impl<'de> Visitor<'de> for CheckedVisitor {
        type Value = Checked;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a JSON value")
        }

        fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_unit<E>(self) -> Result<Checked, E> {
            Ok(Checked)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Checked, A::Error> {
            while items.next_element::<Checked>()?.is_some() {}
            Ok(Checked)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Checked, A::Error> {
            while entries.next_key::<Checked>()?.is_some() {
                entries.next_value::<Checked>()?;
            }
            Ok(Checked)
        }
    }

    /// Whether `raw` is a JSON text the value reading would take (see [`Checked`]).
    fn checked(raw: &Json<'_>) -> bool {
        raw.checked || serde_json::from_str::<Checked>(raw.text).is_ok()
    }

    /// The value of a text that passed [`checked`]; the value reading of the same text cannot fail.
    fn value_of(raw: Json<'_>) -> Option<Value> {
        serde_json::from_str(raw.text).ok()
    }

    /// A JSON value kept as its text, from its first byte to its last; `checked` when it is known to pass
    /// [`Checked`] already.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Json<'a> {
        text: &'a str,
        checked: bool,
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Json<'a> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            <&'de RawValue>::deserialize(deserializer).map(|raw| Json { text: raw.get(), checked: false })
        }
    }

    /// `Some` when a required string is not empty.
    fn non_empty(text: &Text<'_>) -> Option<()> {
        (!text.is_empty()).then_some(())
    }

    /// `Some` when an identity string is not empty and at most [`MAX_ID_BYTES`] long.
    fn bounded(text: &Text<'_>) -> Option<()> {
        (!text.is_empty() && text.as_str().len() <= MAX_ID_BYTES).then_some(())
    }

    /// `Some` when a number is absent or finite (numbers must be).
    fn finite(number: Option<f64>) -> Option<()> {
        number.is_none_or(f64::is_finite).then_some(())
    }

    fn owned_list(list: Option<Vec<Text<'_>>>) -> Option<Vec<String>> {
        list.map(|items| items.into_iter().map(Text::into_owned).collect())
    }

    /// The plainest DecisionLogs read by hand: strict JSON whose strings hold no escape, and no key twice within a
    /// section. serde's reading costs some 200 instructions a key and a string value (its field matching, a visitor
    /// and an `Option` per field), about as much again as the skipping of the same bytes (docs/benchmarks.md,
    /// s31-h); this one compares each key with the names it can be. It only ever takes a log that the serde
    /// reading would read into the same fields, and says `None` to anything else (an escape, a key repeated, a
    /// number in a form it does not read, anything not JSON), which the serde reading then takes or leaves.
    pub(super) mod scan {
        use std::borrow::Cow;

        use super::{Action, Cognition, Control, Identity, Json, Log, Meta, StateDelta, Text};
        use crate::intake::direct_json::Object;

        /// The log of `text`, a body as text.
        pub(in super::super) fn log(text: &str) -> Option<Log<'_>> {
            let mut scan = Scan { text, at: 0, depth: 0 };
            let mut log =
                Log { meta: None, identity: None, cognition: None, action: None, state_delta: None, control: None };
            let mut seen = Seen::default();
            scan.object(|scan, key| match key {
                "meta" => section(scan, seen.first(0)?, &mut log.meta, meta),
                "identity" => section(scan, seen.first(1)?, &mut log.identity, identity),
                "cognition" => section(scan, seen.first(2)?, &mut log.cognition, cognition),
                "action" => section(scan, seen.first(3)?, &mut log.action, action),
                "state_delta" => section(scan, seen.first(4)?, &mut log.state_delta, state_delta),
                "control" => section(scan, seen.first(5)?, &mut log.control, control),
                _ => scan.skip(),
            })?;
            scan.space();
            (scan.at == text.len()).then_some(log)
        }

        /// Which of an object's known keys came already: serde's derive refuses a key given twice, even after a
        /// `null`.
        #[derive(Default)]
        struct Seen(u8);

        impl Seen {
            fn first(&mut self, field: u8) -> Option<()> {
                let bit = 1 << field;
                let first = self.0 & bit == 0;
                self.0 |= bit;
                first.then_some(())
            }
        }

        /// A section: `null` (absent) or an object read by `read`.
        fn section<'a, T>(
            scan: &mut Scan<'a>,
            (): (),
            slot: &mut Option<Object<T>>,
            read: fn(&mut Scan<'a>) -> Option<T>,
        ) -> Option<()> {
            if !scan.null() {
                *slot = Some(Object(read(scan)?));
            }
            Some(())
        }

        fn meta<'a>(scan: &mut Scan<'a>) -> Option<Meta<'a>> {
            let (mut trace_id, mut timestamp, mut parent_step_id, mut cluster_id) = (None, None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "trace_id" => (seen.first(0)?, trace_id = Some(scan.text()?)),
                    "timestamp" => (seen.first(1)?, timestamp = Some(scan.text()?)),
                    "parent_step_id" => (seen.first(2)?, parent_step_id = scan.optional_text()?),
                    "cluster_id" => (seen.first(3)?, cluster_id = scan.optional_text()?),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(Meta { trace_id: trace_id?, timestamp: timestamp?, parent_step_id, cluster_id })
        }

        fn identity<'a>(scan: &mut Scan<'a>) -> Option<Identity<'a>> {
            let (mut agent_id, mut agent_type, mut capability_version) = (None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "agent_id" => (seen.first(0)?, agent_id = Some(scan.text()?)),
                    "agent_type" => (seen.first(1)?, agent_type = Some(scan.text()?)),
                    "capability_version" => (seen.first(2)?, capability_version = Some(scan.text()?)),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(Identity { agent_id: agent_id?, agent_type: agent_type?, capability_version: capability_version? })
        }

        fn cognition<'a>(scan: &mut Scan<'a>) -> Option<Cognition<'a>> {
            let mut intent = None;
            let (mut reasoning_chain, mut confidence_score, mut strategy_used, mut entropy_score) =
                (None, None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "intent" => (seen.first(0)?, intent = Some(scan.text()?)),
                    "reasoning_chain" => (seen.first(1)?, reasoning_chain = scan.optional_texts()?),
                    "confidence_score" => (seen.first(2)?, confidence_score = scan.optional_f64()?),
                    "strategy_used" => (seen.first(3)?, strategy_used = scan.optional_text()?),
                    "entropy_score" => (seen.first(4)?, entropy_score = scan.optional_f64()?),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(Cognition { intent: intent?, reasoning_chain, confidence_score, strategy_used, entropy_score })
        }

        fn action<'a>(scan: &mut Scan<'a>) -> Option<Action<'a>> {
            let mut status = None;
            let (mut tool_call, mut tool_input, mut tool_output_summary) = (None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "status" => (seen.first(0)?, status = Some(scan.string()?)),
                    "tool_call" => (seen.first(1)?, tool_call = scan.optional_text()?),
                    "tool_input" => (seen.first(2)?, tool_input = scan.optional_json()?),
                    "tool_output_summary" => (seen.first(3)?, tool_output_summary = scan.optional_text()?),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(Action { status: Cow::Borrowed(status?), tool_call, tool_input, tool_output_summary })
        }

        fn state_delta<'a>(scan: &mut Scan<'a>) -> Option<StateDelta<'a>> {
            let (mut added_to_memory, mut tokens_consumed, mut cumulative_session_cost) = (None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "added_to_memory" => (seen.first(0)?, added_to_memory = scan.optional_texts()?),
                    "tokens_consumed" => (seen.first(1)?, tokens_consumed = scan.optional_u64()?),
                    "cumulative_session_cost" => (seen.first(2)?, cumulative_session_cost = scan.optional_f64()?),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(StateDelta { added_to_memory, tokens_consumed, cumulative_session_cost })
        }

        fn control<'a>(scan: &mut Scan<'a>) -> Option<Control<'a>> {
            let (mut hitl_required, mut interrupt_signal, mut is_terminal) = (None, None, None);
            let mut seen = Seen::default();
            scan.object(|scan, key| {
                match key {
                    "hitl_required" => (seen.first(0)?, hitl_required = scan.optional_bool()?),
                    "interrupt_signal" => (seen.first(1)?, interrupt_signal = scan.optional_json()?),
                    "is_terminal" => (seen.first(2)?, is_terminal = scan.optional_bool()?),
                    _ => (scan.skip()?, ()),
                };
                Some(())
            })?;
            Some(Control { hitl_required, interrupt_signal, is_terminal })
        }

        /// Where the first `"`, `\\` or control character of `bytes` is, eight bytes at a time: a byte-by-byte
        /// search was two thirds of this reading.
        pub(in super::super) fn special(bytes: &[u8]) -> Option<usize> {
            const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
            const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
            // Bit 7 of each byte below `limit` (at most 0x80); above the first such byte a borrow may mark others,
            // so only the lowest marked byte counts.
            let below = |word: u64, limit: u8| word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS;
            let mut chunks = bytes.chunks_exact(8);
            let mut offset = 0;
            for chunk in chunks.by_ref() {
                let word = u64::from_le_bytes(chunk.try_into().ok()?);
                let marks = below(word ^ (ONES * u64::from(b'"')), 1)
                    | below(word ^ (ONES * u64::from(b'\\')), 1)
                    | below(word, 0x20);
                if marks != 0 {
                    return Some(offset + marks.trailing_zeros() as usize / 8);
                }
                offset += 8;
            }
            let tail = chunks.remainder();
            tail.iter().position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20).map(|at| offset + at)
        }

        /// How deep [`Scan::skip`] goes into the arrays and objects of a value, below the section it is in: far
        /// less than the value reading's limit ([`crate::intake::direct_json::VALUE_DEPTH_LIMIT`]), so no body it
        /// takes nests deeper than that, and its recursion stays short.
        const MAX_SKIPPED_DEPTH: usize = 64;

        /// The longest number [`Scan::skip`] takes (without an exponent): any such is far inside an `f64`'s range.
        const MAX_SKIPPED_NUMBER: usize = 100;

        /// A position in the text; every reading moves past what it read, or says `None`.
        struct Scan<'a> {
            text: &'a str,
            at: usize,
            /// Arrays and objects open in [`Self::skip`]: bounded (see [`MAX_SKIPPED_DEPTH`]).
            depth: usize,
        }

        impl<'a> Scan<'a> {
            /// JSON's whitespace (no other).
            fn space(&mut self) {
                let bytes = self.text.as_bytes();
                while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
                    self.at += 1;
                }
            }

            /// The next byte after whitespace, not taken.
            fn peek(&mut self) -> Option<u8> {
                self.space();
                self.text.as_bytes().get(self.at).copied()
            }

            fn eat(&mut self, byte: u8) -> Option<()> {
                (self.peek()? == byte).then(|| self.at += 1)
            }

            fn literal(&mut self, word: &str) -> bool {
                let found = self.peek().is_some() && self.text.as_bytes()[self.at..].starts_with(word.as_bytes());
                if found {
                    self.at += word.len();
                }
                found
            }

            fn null(&mut self) -> bool {
                self.literal("null")
            }

            /// An object, `field` reading the value of each key (and `None` to give up).
            fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
                self.eat(b'{')?;
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    let key = self.string()?;
                    self.eat(b':')?;
                    field(self, key)?;
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }

            /// A string without escapes or control characters (JSON allows none unescaped), as it stands.
            fn string(&mut self) -> Option<&'a str> {
                self.eat(b'"')?;
                let start = self.at;
                let length = special(&self.text.as_bytes()[start..])?;
                if self.text.as_bytes()[start + length] != b'"' {
                    return None;
                }
                self.at = start + length + 1;
                // Both ends are ASCII bytes of valid UTF-8, so char boundaries.
                self.text.get(start..start + length)
            }

            fn text(&mut self) -> Option<Text<'a>> {
                self.string().map(|text| Text(Cow::Borrowed(text)))
            }

            fn optional_text(&mut self) -> Option<Option<Text<'a>>> {
                if self.null() { Some(None) } else { self.text().map(Some) }
            }

            fn optional_texts(&mut self) -> Option<Option<Vec<Text<'a>>>> {
                if self.null() {
                    return Some(None);
                }
                self.eat(b'[')?;
                let mut texts = Vec::new();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(Some(texts));
                }
                loop {
                    texts.push(self.text()?);
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Some(texts));
                        }
                        _ => return None,
                    }
                }
            }

            fn optional_bool(&mut self) -> Option<Option<bool>> {
                if self.null() {
                    Some(None)
                } else if self.literal("true") {
                    Some(Some(true))
                } else if self.literal("false") {
                    Some(Some(false))
                } else {
                    None
                }
            }

            /// An array, each element skipped.
            fn array(&mut self) -> Option<()> {
                self.eat(b'[')?;
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.skip()?;
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }

            /// A number as JSON writes one, as it stands.
            fn number(&mut self) -> Option<&'a str> {
                self.space();
                let bytes = self.text.as_bytes();
                let start = self.at;
                let mut at = start;
                let digits = |at: &mut usize| {
                    let first = *at;
                    while let Some(b'0'..=b'9') = bytes.get(*at) {
                        *at += 1;
                    }
                    *at > first
                };
                if bytes.get(at) == Some(&b'-') {
                    at += 1;
                }
                match bytes.get(at) {
                    Some(b'0') => at += 1,
                    Some(b'1'..=b'9') => {
                        digits(&mut at);
                    }
                    _ => return None,
                }
                if bytes.get(at) == Some(&b'.') {
                    at += 1;
                    if !digits(&mut at) {
                        return None;
                    }
                }
                if let Some(b'e' | b'E') = bytes.get(at) {
                    at += 1;
                    if let Some(b'+' | b'-') = bytes.get(at) {
                        at += 1;
                    }
                    if !digits(&mut at) {
                        return None;
                    }
                }
                self.at = at;
                self.text.get(start..at)
            }

            /// A number read as serde_json reads one into an `f64`: correctly rounded (its `float_roundtrip`), as
            /// Rust's own parse is, integers too (its integer-to-float conversion rounds to nearest as well).
            /// An infinite one (`1e400`) is refused there, and by the rule here.
            fn optional_f64(&mut self) -> Option<Option<f64>> {
                if self.null() {
                    return Some(None);
                }
                let number: f64 = self.number()?.parse().ok()?;
                number.is_finite().then_some(Some(number))
            }

            /// A count: digits only (serde_json takes `5.0` or `-0` for no `u64`), that fit.
            fn optional_u64(&mut self) -> Option<Option<u64>> {
                if self.null() {
                    return Some(None);
                }
                let number = self.number()?;
                if !number.bytes().all(|byte| byte.is_ascii_digit()) {
                    return None;
                }
                number.parse().ok().map(Some)
            }

            /// Any value, kept as its text.
            fn optional_json(&mut self) -> Option<Option<Json<'a>>> {
                if self.null() {
                    return Some(None);
                }
                self.space();
                let start = self.at;
                self.skip()?;
                // No escape and no number out of an `f64`'s range got past `skip`: what `Checked` refuses.
                self.text.get(start..self.at).map(|text| Some(Json { text, checked: true }))
            }

            /// Any value, checked as strictly as the value reading checks it: strings without escapes, numbers
            /// without an exponent and short enough to be finite as an `f64`, nesting bounded.
            fn skip(&mut self) -> Option<()> {
                match self.peek()? {
                    b'"' => self.string().map(drop),
                    opener @ (b'{' | b'[') => {
                        self.depth += 1;
                        if self.depth > MAX_SKIPPED_DEPTH {
                            return None;
                        }
                        let skipped = if opener == b'{' { self.object(|scan, _| scan.skip()) } else { self.array() };
                        self.depth -= 1;
                        skipped
                    }
                    b't' => self.literal("true").then_some(()),
                    b'f' => self.literal("false").then_some(()),
                    b'n' => self.null().then_some(()),
                    _ => {
                        let number = self.number()?;
                        (number.len() <= MAX_SKIPPED_NUMBER && !number.contains(['e', 'E'])).then_some(())
                    }
                }
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct Meta<'a> {
        #[serde(borrow)]
        pub(super) trace_id: Text<'a>,
        #[serde(borrow)]
        timestamp: Text<'a>,
        #[serde(borrow)]
        parent_step_id: Option<Text<'a>>,
        #[serde(borrow)]
        cluster_id: Option<Text<'a>>,
    }

    impl<'a> Meta<'a> {
        pub(super) fn valid(self) -> Option<(Self, OffsetDateTime)> {
            non_empty(&self.trace_id)?;
            let timestamp = crate::encoding::rfc3339::parse_utc(self.timestamp.as_str())?;
            Some((self, timestamp))
        }

        pub(super) fn into_owned(self, timestamp: OffsetDateTime) -> super::Meta {
            super::Meta {
                trace_id: self.trace_id.into_owned(),
                timestamp,
                parent_step_id: self.parent_step_id.map(Text::into_owned),
                cluster_id: self.cluster_id.map(Text::into_owned),
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct Identity<'a> {
        #[serde(borrow)]
        agent_id: Text<'a>,
        #[serde(borrow)]
        pub(super) agent_type: Text<'a>,
        #[serde(borrow)]
        pub(super) capability_version: Text<'a>,
    }

    impl<'a> Identity<'a> {
        pub(super) fn valid(self) -> Option<(AgentId, Self)> {
            bounded(&self.agent_type)?;
            bounded(&self.capability_version)?;
            Some((AgentId::new(self.agent_id.as_str()).ok()?, self))
        }

        pub(super) fn into_owned(self, agent_id: AgentId) -> super::Identity {
            super::Identity {
                agent_id,
                agent_type: self.agent_type.into_owned(),
                capability_version: self.capability_version.into_owned(),
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct Cognition<'a> {
        #[serde(borrow)]
        intent: Text<'a>,
        #[serde(borrow)]
        reasoning_chain: Option<Vec<Text<'a>>>,
        confidence_score: Option<f64>,
        #[serde(borrow)]
        strategy_used: Option<Text<'a>>,
        entropy_score: Option<f64>,
    }

    impl Cognition<'_> {
        pub(super) fn valid(self) -> Option<Self> {
            finite(self.confidence_score)?;
            finite(self.entropy_score)?;
            non_empty(&self.intent)?;
            Some(self)
        }

        pub(super) fn into_owned(self) -> super::Cognition {
            super::Cognition {
                intent: self.intent.into_owned(),
                reasoning_chain: owned_list(self.reasoning_chain),
                confidence_score: self.confidence_score,
                strategy_used: self.strategy_used.map(Text::into_owned),
                entropy_score: self.entropy_score,
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct Action<'a> {
        /// Read as text: serde's derived enum would also take `{"success": null}`.
        #[serde(borrow)]
        status: Cow<'a, str>,
        #[serde(borrow)]
        pub(super) tool_call: Option<Text<'a>>,
        #[serde(borrow)]
        tool_input: Option<Json<'a>>,
        #[serde(borrow)]
        tool_output_summary: Option<Text<'a>>,
    }

    impl Action<'_> {
        pub(super) fn valid(self) -> Option<(ActionStatus, Self)> {
            let status = ActionStatus::parse(&self.status)?;
            if let Some(input) = &self.tool_input {
                // A raw value starts at its first byte: an object or a string, as the rule wants.
                if !matches!(input.text.as_bytes().first(), Some(b'{' | b'"')) || !checked(input) {
                    return None;
                }
            }
            Some((status, self))
        }

        pub(super) fn into_owned(self, status: ActionStatus) -> super::Action {
            super::Action {
                status,
                tool_call: self.tool_call.map(Text::into_owned),
                tool_input: self.tool_input.and_then(value_of),
                tool_output_summary: self.tool_output_summary.map(Text::into_owned),
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct StateDelta<'a> {
        #[serde(borrow)]
        added_to_memory: Option<Vec<Text<'a>>>,
        tokens_consumed: Option<u64>,
        cumulative_session_cost: Option<f64>,
    }

    impl StateDelta<'_> {
        pub(super) fn valid(self) -> Option<Self> {
            finite(self.cumulative_session_cost)?;
            Some(self)
        }

        pub(super) fn into_owned(self) -> super::StateDelta {
            super::StateDelta {
                added_to_memory: owned_list(self.added_to_memory),
                tokens_consumed: self.tokens_consumed,
                cumulative_session_cost: self.cumulative_session_cost,
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    pub(super) struct Control<'a> {
        hitl_required: Option<bool>,
        #[serde(borrow)]
        interrupt_signal: Option<Json<'a>>,
        is_terminal: Option<bool>,
    }

    impl Control<'_> {
        pub(super) fn valid(self) -> Option<Self> {
            self.interrupt_signal.as_ref().is_none_or(checked).then_some(self)
        }

        pub(super) fn into_owned(self) -> super::Control {
            super::Control {
                hitl_required: self.hitl_required.unwrap_or(false),
                interrupt_signal: self.interrupt_signal.and_then(value_of),
                is_terminal: self.is_terminal.unwrap_or(false),
            }
        }
    }
}

fn section<'a>(root: &'a Map<String, Value>, name: &'static str) -> Result<Option<Fields<'a>>, SchemaViolation> {
    match root.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(fields)) => Ok(Some(Fields { section: name, fields })),
        Some(_) => Err(SchemaViolation::new(name, "must be an object")),
    }
}

/// Typed reads from one section, each error carrying `section.field`.
struct Fields<'a> {
    section: &'static str,
    fields: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn violation(&self, field: &str, reason: impl Into<String>) -> SchemaViolation {
        SchemaViolation::new(format!("{}.{field}", self.section), reason)
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|value| !value.is_null())
    }

    fn required(&self, field: &str) -> Result<&Value, SchemaViolation> {
        self.present(field).ok_or_else(|| self.violation(field, "is required"))
    }

    fn required_string(&self, field: &str) -> Result<String, SchemaViolation> {
        match self.required(field)? {
            Value::String(text) if !text.is_empty() => Ok(text.clone()),
            Value::String(_) => Err(self.violation(field, "must not be empty")),
            _ => Err(self.violation(field, "must be a string")),
        }
    }

    /// A required string of at most [`MAX_ID_BYTES`]: what is kept of a log beyond its publication (the identity,
    /// in the capability map) must not grow with what an agent sends.
    fn bounded_string(&self, field: &str) -> Result<String, SchemaViolation> {
        let text = self.required_string(field)?;
        if text.len() > MAX_ID_BYTES {
            return Err(self.violation(field, format!("must be at most {MAX_ID_BYTES} bytes")));
        }
        Ok(text)
    }

    fn optional_string(&self, field: &str) -> Result<Option<String>, SchemaViolation> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.violation(field, "must be a string")),
        }
    }

    fn optional_number(&self, field: &str) -> Result<Option<f64>, SchemaViolation> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Number(number)) => number
                .as_f64()
                .filter(|value| value.is_finite())
                .map(Some)
                .ok_or_else(|| self.violation(field, "must be a finite number")),
            Some(_) => Err(self.violation(field, "must be a number")),
        }
    }

    fn optional_count(&self, field: &str) -> Result<Option<u64>, SchemaViolation> {
        match self.present(field) {
            None => Ok(None),
            Some(value) => {
                value.as_u64().map(Some).ok_or_else(|| self.violation(field, "must be a non-negative integer"))
            }
        }
    }

    fn optional_bool(&self, field: &str) -> Result<Option<bool>, SchemaViolation> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(_) => Err(self.violation(field, "must be a boolean")),
        }
    }

    fn optional_string_list(&self, field: &str) -> Result<Option<Vec<String>>, SchemaViolation> {
        let Some(value) = self.present(field) else { return Ok(None) };
        let Value::Array(items) = value else {
            return Err(self.violation(field, "must be an array of strings"));
        };
        items
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(text) => Ok(text.clone()),
                _ => Err(self.violation(&format!("{field}[{index}]"), "must be a string")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

impl Meta {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        let trace_id = fields.required_string("trace_id")?;
        let timestamp = crate::encoding::rfc3339::parse_utc(&fields.required_string("timestamp")?)
            .ok_or_else(|| fields.violation("timestamp", "must be an ISO-8601 UTC timestamp"))?;
        Ok(Self {
            trace_id,
            timestamp,
            parent_step_id: fields.optional_string("parent_step_id")?,
            cluster_id: fields.optional_string("cluster_id")?,
        })
    }
}

impl Identity {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        let agent_id = AgentId::new(fields.required_string("agent_id")?)
            .map_err(|error| fields.violation("agent_id", error.to_string()))?;
        Ok(Self {
            agent_id,
            agent_type: fields.bounded_string("agent_type")?,
            capability_version: fields.bounded_string("capability_version")?,
        })
    }
}

impl Cognition {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        Ok(Self {
            intent: fields.required_string("intent")?,
            reasoning_chain: fields.optional_string_list("reasoning_chain")?,
            confidence_score: fields.optional_number("confidence_score")?,
            strategy_used: fields.optional_string("strategy_used")?,
            entropy_score: fields.optional_number("entropy_score")?,
        })
    }
}

impl Action {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        let status = match fields.required("status")? {
            Value::String(text) => ActionStatus::parse(text),
            _ => None,
        }
        .ok_or_else(|| fields.violation("status", "must be one of success, failure, pending, skipped"))?;
        let tool_input = match fields.present("tool_input") {
            None => None,
            Some(value @ (Value::Object(_) | Value::String(_))) => Some(value.clone()),
            Some(_) => return Err(fields.violation("tool_input", "must be an object or a string holding JSON")),
        };
        Ok(Self {
            status,
            tool_call: fields.optional_string("tool_call")?,
            tool_input,
            tool_output_summary: fields.optional_string("tool_output_summary")?,
        })
    }
}

impl StateDelta {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        Ok(Self {
            added_to_memory: fields.optional_string_list("added_to_memory")?,
            tokens_consumed: fields.optional_count("tokens_consumed")?,
            cumulative_session_cost: fields.optional_number("cumulative_session_cost")?,
        })
    }
}

impl Control {
    fn read(fields: Fields<'_>) -> Result<Self, SchemaViolation> {
        Ok(Self {
            hitl_required: fields.optional_bool("hitl_required")?.unwrap_or(false),
            interrupt_signal: fields.present("interrupt_signal").cloned(),
            is_terminal: fields.optional_bool("is_terminal")?.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn full_log() -> Value {
        json!({
            "meta": {"trace_id": "t-1", "timestamp": "2026-02-22T12:00:00Z", "parent_step_id": "s-0", "cluster_id": "mesh-04"},
            "identity": {"agent_id": "agent-7", "agent_type": "researcher", "capability_version": "1.2.0"},
            "cognition": {"intent": "summarize", "reasoning_chain": ["a", "b"], "confidence_score": 0.9, "strategy_used": "cot", "entropy_score": 0.1},
            "action": {"status": "success", "tool_call": "search", "tool_input": {"q": "x"}, "tool_output_summary": "ok"},
            "state_delta": {"added_to_memory": ["m"], "tokens_consumed": 120, "cumulative_session_cost": 0.02},
            "control": {"hitl_required": true, "interrupt_signal": null, "is_terminal": false}
        })
    }

    fn violation_path(value: Value) -> String {
        DecisionLog::from_json(&value).unwrap_err().path
    }

    #[test]
    fn accepts_a_full_log_and_round_trips_its_fields() {
        let log = DecisionLog::from_json(&full_log()).unwrap();
        assert_eq!(log.trace_id(), Some("t-1"));
        assert_eq!(log.agent_id().unwrap().as_str(), "agent-7");
        assert_eq!(log.action.as_ref().unwrap().status, ActionStatus::Success);
        assert_eq!(log.state_delta.as_ref().unwrap().tokens_consumed, Some(120));
        assert!(log.control.as_ref().unwrap().hitl_required);
        let back = serde_json::to_value(&log).unwrap();
        assert_eq!(back["meta"]["timestamp"], "2026-02-22T12:00:00Z");
        assert_eq!(back["cognition"]["reasoning_chain"], json!(["a", "b"]));
        assert_eq!(back["action"]["status"], "success");
    }

    #[test]
    fn every_section_is_optional() {
        let log = DecisionLog::from_json(&json!({})).unwrap();
        assert_eq!(log.trace_id(), None);
        let log = DecisionLog::from_json(&json!({"meta": null, "action": {"status": "pending"}})).unwrap();
        assert!(log.meta.is_none());
    }

    #[test]
    fn control_defaults_are_false() {
        let log = DecisionLog::from_json(&json!({"control": {}})).unwrap();
        let control = log.control.unwrap();
        assert!(!control.hitl_required && !control.is_terminal);
    }

    #[test]
    fn names_the_first_failing_field_path() {
        let mut log = full_log();
        log["identity"].as_object_mut().unwrap().remove("agent_id");
        assert_eq!(violation_path(log), "identity.agent_id");

        let cases = [
            (json!([1, 2]), "$"),
            (json!({"meta": "x"}), "meta"),
            (json!({"meta": {"timestamp": "2026-02-22T12:00:00Z"}}), "meta.trace_id"),
            (json!({"meta": {"trace_id": "t", "timestamp": "yesterday"}}), "meta.timestamp"),
            (json!({"meta": {"trace_id": "t", "timestamp": "2026-02-22T12:00:00+02:00"}}), "meta.timestamp"),
            (json!({"meta": {"trace_id": "", "timestamp": "2026-02-22T12:00:00Z"}}), "meta.trace_id"),
            (json!({"identity": {"agent_id": "a", "agent_type": "t"}}), "identity.capability_version"),
            (
                json!({"identity": {"agent_id": "a\u{7}", "agent_type": "t", "capability_version": "1"}}),
                "identity.agent_id",
            ),
            (
                json!({"identity": {"agent_id": "a", "agent_type": "t".repeat(257), "capability_version": "1"}}),
                "identity.agent_type",
            ),
            (
                json!({"identity": {"agent_id": "a", "agent_type": "t", "capability_version": "1".repeat(257)}}),
                "identity.capability_version",
            ),
            (json!({"cognition": {}}), "cognition.intent"),
            (json!({"cognition": {"intent": "i", "reasoning_chain": ["ok", 3]}}), "cognition.reasoning_chain[1]"),
            (json!({"cognition": {"intent": "i", "confidence_score": "high"}}), "cognition.confidence_score"),
            (json!({"action": {}}), "action.status"),
            (json!({"action": {"status": "done"}}), "action.status"),
            (json!({"action": {"status": "success", "tool_input": 5}}), "action.tool_input"),
            (json!({"state_delta": {"tokens_consumed": -1}}), "state_delta.tokens_consumed"),
            (json!({"state_delta": {"tokens_consumed": 1.5}}), "state_delta.tokens_consumed"),
            (json!({"control": {"is_terminal": "yes"}}), "control.is_terminal"),
        ];
        for (value, path) in cases {
            assert_eq!(violation_path(value.clone()), path, "for {value}");
        }
    }

    /// The direct reading either builds exactly the log `from_json` builds, or leaves the body to it.
    fn direct_agrees(body: &str) -> Option<DecisionLog> {
        let direct = DecisionLog::from_valid_body(body.as_bytes());
        if let Some(log) = &direct {
            let value: Value = serde_json::from_str(body).unwrap();
            assert_eq!(DecisionLog::from_json(&value).as_ref(), Ok(log), "{body}");
        }
        direct
    }

    #[test]
    fn the_direct_reading_takes_valid_logs_and_agrees_with_the_value_reading() {
        let full = full_log().to_string();
        assert!(direct_agrees(&full).is_some());
        assert!(direct_agrees("{}").is_some());
        assert!(
            direct_agrees(r#"{"meta":null,"action":{"status":"pending","tool_input":"{\"a\":1}"},"x":[{}]}"#).is_some()
        );
        let escaped = r#"{"identity":{"agent_\u0069d":"\u00e9t\u00e9","agent_type":"t","capability_version":"1"}}"#;
        assert_eq!(direct_agrees(escaped).unwrap().agent_id().unwrap().as_str(), "été");
        let numbers = r#"{"cognition":{"intent":"i","confidence_score":1,"entropy_score":-0.0},"state_delta":{"tokens_consumed":18446744073709551615,"cumulative_session_cost":1e300}}"#;
        assert!(direct_agrees(numbers).is_some());
        // Left to the value reading, which accepts or refuses each as before.
        let deep_unknown = format!(r#"{{"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        let left_over = [
            r#"{"meta":{"trace_id":"a","timestamp":"2026-02-22T12:00:00Z"},"meta":null}"#.to_owned(),
            r#"{"action":{"status":{"success":null}}}"#.to_owned(),
            r#"{"meta":["t","2026-02-22T12:00:00Z"]}"#.to_owned(),
            r#"[null,null,null,null,null,null]"#.to_owned(),
            r#"{"cognition":{"intent":"i","confidence_score":1e400}}"#.to_owned(),
            r#"{"state_delta":{"tokens_consumed":5.0}}"#.to_owned(),
            r#"{"cognition":{"intent":"i","reasoning_chain":["a",null]}}"#.to_owned(),
            r#"{"identity":{"agent_id":"a","agent_type":"","capability_version":"1"}}"#.to_owned(),
            r#"{"meta":{"trace_id":"t","timestamp":"2026-02-22T12:00:00+02:00"}}"#.to_owned(),
            deep_unknown,
        ];
        for body in &left_over {
            assert!(direct_agrees(body).is_none(), "{body}");
        }
        // The repeated key's last value wins in the value reading, as before.
        let value: Value = serde_json::from_str(&left_over[0]).unwrap();
        assert!(DecisionLog::from_json(&value).unwrap().meta.is_none());
    }

    #[test]
    fn the_direct_reading_refuses_every_violation() {
        let mut missing_agent = full_log();
        missing_agent["identity"].as_object_mut().unwrap().remove("agent_id");
        let cases = [
            missing_agent,
            json!({"meta": "x"}),
            json!({"meta": {"timestamp": "2026-02-22T12:00:00Z"}}),
            json!({"meta": {"trace_id": "t", "timestamp": "yesterday"}}),
            json!({"meta": {"trace_id": "", "timestamp": "2026-02-22T12:00:00Z"}}),
            json!({"meta": {"trace_id": "t", "timestamp": ""}}),
            json!({"identity": {"agent_id": "a\u{7}", "agent_type": "t", "capability_version": "1"}}),
            json!({"identity": {"agent_id": "a", "agent_type": "t", "capability_version": null}}),
            json!({"identity": {"agent_id": "a", "agent_type": "é".repeat(129), "capability_version": "1"}}),
            json!({"identity": {"agent_id": "a", "agent_type": "t", "capability_version": "v".repeat(257)}}),
            json!({"cognition": {"intent": ""}}),
            json!({"cognition": {"intent": "i", "confidence_score": "high"}}),
            json!({"action": {}}),
            json!({"action": {"status": "done"}}),
            json!({"action": {"status": "success", "tool_input": 5}}),
            json!({"action": {"status": "success", "tool_input": [1]}}),
            json!({"action": {"status": "success", "tool_call": 5}}),
            json!({"state_delta": {"tokens_consumed": -1}}),
            json!({"state_delta": {"added_to_memory": "m"}}),
            json!({"control": {"is_terminal": "yes"}}),
            json!({"control": {"hitl_required": 1}}),
        ];
        for value in cases {
            assert!(DecisionLog::from_json(&value).is_err(), "{value}");
            assert_eq!(direct_agrees(&value.to_string()), None, "{value}");
        }
    }

    #[test]
    fn identity_strings_are_bounded_by_bytes_and_the_bound_itself_is_accepted() {
        let identity = |agent_type: String| json!({"identity": {"agent_id": "a", "agent_type": agent_type, "capability_version": "1"}});
        let at_the_bound = identity("t".repeat(MAX_ID_BYTES)).to_string();
        assert!(direct_agrees(&at_the_bound).is_some());
        let violation = DecisionLog::from_json(&identity("é".repeat(129))).unwrap_err();
        assert_eq!(violation.to_string(), "identity.agent_type: must be at most 256 bytes", "258 bytes in 129 chars");
    }

    #[test]
    fn violation_message_never_carries_the_value() {
        let secret = "sk-live-very-secret";
        let violation = DecisionLog::from_json(&json!({"action": {"status": secret}})).unwrap_err().to_string();
        assert!(!violation.contains(secret), "{violation}");
        assert_eq!(violation, "action.status: must be one of success, failure, pending, skipped");
    }

    /// Whether the hand reading took `body` (rather than leaving it to serde's).
    fn scanned(body: &str) -> bool {
        wire::scan::log(body).is_some()
    }

    #[test]
    fn the_hand_reading_takes_plain_logs_as_the_value_reading_does() {
        let full = full_log().to_string();
        assert!(scanned(&full) && direct_agrees(&full).is_some());
        let spaced = serde_json::to_string_pretty(&full_log()).unwrap().replace("  ", "\t \r\n");
        assert!(scanned(&spaced) && direct_agrees(&spaced).is_some());
        let plain = [
            "{}",
            r#" { "x" : [ { } , [ ] , null , true , false , -0 , 0.5 , "s" ] } "#,
            r#"{"meta":null,"identity":null,"cognition":null,"action":null,"state_delta":null,"control":null}"#,
            r#"{"cognition":{"intent":"i","reasoning_chain":[],"confidence_score":-0,"entropy_score":1E-3}}"#,
            r#"{"cognition":{"intent":"i","confidence_score":12345678901234567890123,"entropy_score":-9223372036854775809}}"#,
            r#"{"state_delta":{"tokens_consumed":18446744073709551615,"added_to_memory":["é","😀"],"x":{"y":[1]}}}"#,
            r#"{"action":{"status":"skipped","tool_input":"{\"not\":\"read\"}"}}"#,
            r#"{"action":{"status":"failure","tool_input":{"a":[1,-2.5,{"b":null}]},"tool_call":null}}"#,
            r#"{"control":{"hitl_required":null,"interrupt_signal":[{"k":"v"}],"is_terminal":true}}"#,
        ];
        for body in plain {
            // The escaped tool_input is a string: the hand reading leaves it to serde, which takes it.
            assert_eq!(scanned(body), !body.contains('\\'), "{body}");
            assert!(direct_agrees(body).is_some(), "{body}");
        }
    }

    #[test]
    fn the_hand_reading_leaves_what_it_does_not_read_to_serde() {
        // Taken by serde's reading, and as the value reading takes them.
        let to_serde = [
            r#"{"identity":{"agent_id":"a\"b","agent_type":"t","capability_version":"1"}}"#.to_owned(),
            r#"{"meta":{"trace_id":"t\u0031","timestamp":"2026-02-22T12:00:00Z"}}"#.to_owned(),
            r#"{"action":{"status":"success","tool_input":{"n":1e3}}}"#.to_owned(),
            r#"{"action":{"status":"success","tool_input":{"n":1}},"x":{"y":"\n"}}"#.to_owned(),
            format!(r#"{{"x":{}{}}}"#, "[".repeat(100), "]".repeat(100)),
            format!(r#"{{"x":{}}}"#, "1".repeat(101)),
        ];
        for body in &to_serde {
            assert!(!scanned(body), "{body}");
            assert!(direct_agrees(body).is_some(), "{body}");
        }
        // Refused by both direct readings: a key given twice (serde's derive refuses it, the value reading keeps
        // the last), and values the value reading refuses inside a kept text.
        let refused = [
            r#"{"meta":null,"meta":{"trace_id":"t","timestamp":"2026-02-22T12:00:00Z"}}"#,
            r#"{"identity":{"agent_id":"a","agent_id":"b","agent_type":"t","capability_version":"1"}}"#,
            r#"{"cognition":{"intent":"i","confidence_score":null,"confidence_score":1}}"#,
            r#"{"action":{"status":"success","tool_input":{"n":1e400}}}"#,
            r#"{"action":{"status":"success","tool_input":"\ud800"}}"#,
            r#"{"control":{"interrupt_signal":[-1e999]}}"#,
            r#"{"control":{"interrupt_signal":{"\udc00":1}}}"#,
            r#"{"cognition":{"intent":"i","confidence_score":1e309}}"#,
            r#"{"state_delta":{"tokens_consumed":18446744073709551616}}"#,
            r#"{"state_delta":{"tokens_consumed":-0}}"#,
            r#"{"state_delta":{"tokens_consumed":1.0}}"#,
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":.5}"#,
            r#"{"x":-}"#,
            r#"{"x":nul}"#,
            r#"{"x":truee}"#,
            "{\"x\":\"a\u{1}b\"}",
            "{\u{c}}",
            r#"{"x":[1,]}"#,
            r#"{"x":{"a":1,}}"#,
            r#"{"x":1} {}"#,
            r#"{"x":1"#,
        ];
        for body in refused {
            assert!(!scanned(body), "{body}");
            assert!(direct_agrees(body).is_none(), "{body}");
        }
        // What the value reading makes of the ones the direct readings leave for being out of range.
        for body in [refused[3], refused[4], refused[5], refused[6]] {
            assert!(serde_json::from_str::<Value>(body).is_err(), "{body}");
        }
    }

    #[test]
    fn the_first_quote_backslash_or_control_byte_is_found_in_every_place() {
        let naive = |bytes: &[u8]| bytes.iter().position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20);
        for length in 0..24 {
            for at in 0..length {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    for filler in [b'a', b' ', 0x7f, 0x80, 0xff, b'!', b'#', b'[', b']', b'\\' + 1, b'"' - 1] {
                        let mut bytes = vec![filler; length];
                        bytes[at] = special;
                        // Another special byte after the first must not be taken for it.
                        if at + 1 < length {
                            bytes[length - 1] = b'"';
                        }
                        assert_eq!(wire::scan::special(&bytes), naive(&bytes), "{bytes:?}");
                    }
                }
            }
            let clean = vec![b'x'; length];
            assert_eq!(wire::scan::special(&clean), None);
        }
    }
}
