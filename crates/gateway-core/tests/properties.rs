//! Property tests of the parsers that read what clients send: DecisionLog bodies (both readings), RFC 3339
//! instants, agent tokens, hex, identifiers. For each: no panic on any input, and a round trip where a printer
//! exists. The DecisionLog has two readings of one body (the direct one for valid bodies, the value one that
//! decides and names everything else); they must agree, so the bodies here are written out by hand with the
//! freedoms JSON allows (escapes, whitespace, number forms, repeated keys), which is where two readers differ.
#![allow(clippy::unwrap_used)] // A test fails by panicking.

use gateway_core::encoding::{hex, rfc3339};
use gateway_core::ports::credential::{IssuedToken, PresentedToken, TOKEN_CHARS};
use gateway_core::{AgentId, DecisionLog, IdempotencyKey, Rejection, SchemaInterceptor};
use gateway_testkit::json_text::{assert_each_read_alike, single_changes, style, write};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value, json};
use time::OffsetDateTime;

// --- DecisionLog-shaped values, valid and nearly valid -------------------------------------------------------

/// Text a client might put in a field: in a messy log also empty, control characters, astral, over 256 bytes.
fn text(messy: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof!["[a-z0-9_.:-]{1,12}", "[a-zé😀 \"\\\\/]{1,6}"];
    if !messy {
        return plain.boxed();
    }
    prop_oneof![
        8 => plain,
        1 => Just(String::new()),
        1 => "\\PC{0,8}",
        1 => "[\\x00-\\x1f\u{7f}\u{2028}]{1,3}",
        1 => "[😀é\u{10FFFF}a]{1,4}",
        1 => "x{255,258}",
    ]
    .boxed()
}

fn timestamp(messy: bool) -> BoxedStrategy<String> {
    let valid = (0i64..4_102_444_800, 0u32..1_000_000_000).prop_map(|(seconds, nanos)| {
        rfc3339::format(
            OffsetDateTime::from_unix_timestamp(seconds).unwrap() + time::Duration::nanoseconds(i64::from(nanos)),
        )
    });
    if !messy {
        return prop_oneof![
            valid,
            Just("9999-12-31T23:59:59Z".to_owned()),
            Just("2026-02-22T12:00:00+00:00".to_owned())
        ]
        .boxed();
    }
    prop_oneof![
        4 => valid,
        1 => Just("2026-02-22T12:00:00+01:00".to_owned()),
        1 => Just("2026-02-22T12:00:00".to_owned()),
        1 => text(true),
    ]
    .boxed()
}

/// A value of an unexpected type, for any field.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        Just(json!([])),
        Just(json!(["a", 1])),
        Just(json!({})),
        Just(json!({"success": null})),
        text(true).prop_map(Value::String),
    ]
}

fn count(messy: bool) -> BoxedStrategy<Value> {
    let valid = prop_oneof![(0u64..1_000).prop_map(Value::from), Just(json!(u64::MAX)), Just(json!(0))];
    if !messy {
        return valid.boxed();
    }
    prop_oneof![valid, Just(json!(0.5)), Just(json!(-1)), Just(json!(1.0)), Just(json!(1e3))].boxed()
}

fn score() -> BoxedStrategy<Value> {
    prop_oneof![
        (-1.0e3f64..1.0e3).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (0u64..1_000).prop_map(Value::from),
        Just(json!(-5)),
        Just(json!(1e300)),
    ]
    .boxed()
}

/// One named value of an object: the fitting one, absent, or (in a messy log) of another type.
fn member(name: &'static str, good: BoxedStrategy<Value>, messy: bool) -> BoxedStrategy<(&'static str, Option<Value>)> {
    let value = if messy {
        prop_oneof![10 => good.prop_map(Some), 2 => Just(None), 1 => odd_value().prop_map(Some)].boxed()
    } else {
        prop_oneof![4 => good.prop_map(Some), 1 => Just(None)].boxed()
    };
    value.prop_map(move |value| (name, value)).boxed()
}

fn object(members: Vec<BoxedStrategy<(&'static str, Option<Value>)>>, extra: bool) -> BoxedStrategy<Value> {
    (members, prop::bool::weighted(if extra { 0.2 } else { 0.0 }))
        .prop_map(|(members, extra)| {
            let mut object: Map<String, Value> =
                members.into_iter().filter_map(|(name, value)| value.map(|value| (name.to_owned(), value))).collect();
            if extra {
                object.insert("not_in_the_schema".to_owned(), json!({"deep": [1, {"x": null}]}));
            }
            Value::Object(object)
        })
        .boxed()
}

/// A section whose required fields are always there in a clean log (absent ones are the messy log's business).
fn section(
    required: &[&'static str],
    fields: Vec<(&'static str, BoxedStrategy<Value>)>,
    messy: bool,
) -> BoxedStrategy<Value> {
    let members = fields
        .into_iter()
        .map(|(name, good)| {
            if !messy && required.contains(&name) {
                good.prop_map(move |value| (name, Some(value))).boxed()
            } else {
                member(name, good, messy)
            }
        })
        .collect();
    object(members, true)
}

fn strings(messy: bool) -> BoxedStrategy<Value> {
    prop::collection::vec(text(messy).prop_map(Value::String), 0..3).prop_map(Value::Array).boxed()
}

/// A DecisionLog body as a value: every rule kept (`messy` false: only the writing varies), or broken here and
/// there (`messy` true).
fn decision_log_with(messy: bool) -> BoxedStrategy<Value> {
    let string = || text(messy).prop_map(Value::String).boxed();
    let meta = section(
        &["trace_id", "timestamp"],
        vec![
            ("trace_id", string()),
            ("timestamp", timestamp(messy).prop_map(Value::String).boxed()),
            ("parent_step_id", string()),
            ("cluster_id", string()),
        ],
        messy,
    );
    let identity = section(
        &["agent_id", "agent_type", "capability_version"],
        vec![("agent_id", string()), ("agent_type", string()), ("capability_version", string())],
        messy,
    );
    let cognition = section(
        &["intent"],
        vec![
            ("intent", string()),
            ("reasoning_chain", strings(messy)),
            ("confidence_score", score()),
            ("strategy_used", string()),
            ("entropy_score", score()),
        ],
        messy,
    );
    let tool_input = prop_oneof![
        (0u64..100_000, text(messy)).prop_map(|(delay, note)| json!({"delay_ms": delay, "payload": {"note": note}})),
        (0u64..100_000).prop_map(|delay| Value::String(json!({"delay_ms": delay, "payload": {}}).to_string())),
        Just(json!({"delay_ms": -1, "payload": []})),
    ];
    let status = if messy {
        select(vec!["success", "failure", "pending", "skipped", "Success", ""]).boxed()
    } else {
        select(vec!["success", "failure", "pending", "skipped"]).boxed()
    };
    let action = section(
        &["status"],
        vec![
            ("status", status.prop_map(Value::from).boxed()),
            ("tool_call", prop_oneof![Just(json!("schedule_reminder")), string()].boxed()),
            ("tool_input", tool_input.boxed()),
            ("tool_output_summary", string()),
        ],
        messy,
    );
    let state_delta = section(
        &[],
        vec![
            ("added_to_memory", strings(messy)),
            ("tokens_consumed", count(messy)),
            ("cumulative_session_cost", score()),
        ],
        messy,
    );
    let control = section(
        &[],
        vec![
            ("hitl_required", any::<bool>().prop_map(Value::Bool).boxed()),
            ("interrupt_signal", odd_value().boxed()),
            ("is_terminal", any::<bool>().prop_map(Value::Bool).boxed()),
        ],
        messy,
    );
    object(
        vec![
            member("meta", meta, messy),
            member("identity", identity, messy),
            member("cognition", cognition, messy),
            member("action", action, messy),
            member("state_delta", state_delta, messy),
            member("control", control, messy),
        ],
        messy,
    )
}

/// A value that breaks some rule wherever it is put, or keeps it by chance.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        odd_value(),
        text(true).prop_map(Value::String),
        Just(json!("")),
        Just(json!("2026-02-22T12:00:00+01:00")),
        Just(json!(1.0)),
        Just(json!(-1)),
        Just(json!(f64::MAX)),
        Just(json!(["a", ["b"]])),
        Just(Value::String("x".repeat(257))),
        Just(Value::String("x".repeat(256))),
    ]
}

/// A valid log with one thing changed: one of its fields (any section's, picked evenly) given another value or
/// removed, or a whole section replaced. Where the two readings differ on one rule, this is the body that shows it
/// (a log broken in several places is refused by both for another reason).
fn decision_log_broken_once() -> impl Strategy<Value = Value> {
    (decision_log_with(false), any::<prop::sample::Index>(), 0..4u8, hostile_value()).prop_map(
        |(mut log, pick, how, hostile)| {
            let Some(sections) = log.as_object_mut() else { return log };
            let mut places: Vec<(String, Option<String>)> = Vec::new();
            for (name, section) in sections.iter() {
                places.push((name.clone(), None));
                for field in section.as_object().into_iter().flat_map(|fields| fields.keys()) {
                    places.push((name.clone(), Some(field.clone())));
                }
            }
            if places.is_empty() {
                return log;
            }
            let (name, field) = &places[pick.index(places.len())];
            let Some(section) = sections.get_mut(name) else { return log };
            match (field, section.as_object_mut()) {
                (Some(field), Some(fields)) if how == 0 => {
                    fields.remove(field);
                }
                (Some(field), Some(fields)) => {
                    fields.insert(field.clone(), hostile);
                }
                _ => *section = hostile,
            }
            log
        },
    )
}

fn decision_log() -> impl Strategy<Value = Value> {
    prop_oneof![1 => decision_log_with(false), 3 => decision_log_broken_once(), 1 => decision_log_with(true)]
}

/// `Err` naming the body when the direct reading takes what the value reading refuses (or reads it otherwise),
/// or when the interceptor's answer is not the value reading's.
fn readings_agree(body: &str) -> Result<(), String> {
    let by_value = serde_json::from_str::<Value>(body).map(|value| DecisionLog::from_json(&value));
    if let Some(direct) = DecisionLog::from_valid_body(body.as_bytes()) {
        match &by_value {
            Ok(Ok(read)) if *read == direct => {}
            other => return Err(format!("the direct reading took {body} as {direct:?}; the value reading: {other:?}")),
        }
    }
    match (SchemaInterceptor.inspect(body.as_bytes()), by_value) {
        (Ok(accepted), Ok(Ok(read))) if accepted.log == read => Ok(()),
        (Err(Rejection::SchemaViolation(rejected)), Ok(Err(violation)))
            if rejected.violation == violation
                && rejected.raw_payload_hash.starts_with("sha256:")
                && rejected.agent_id.len() <= 256
                && rejected.capability_version.len() <= 256 =>
        {
            Ok(())
        }
        (Err(Rejection::InvalidJson), Err(_)) => Ok(()),
        (inspected, by_value) => Err(format!("{body}: inspect {inspected:?}, the value reading {by_value:?}")),
    }
}

/// Every single change of a log that has every field: each section or field removed or given each hostile value,
/// written three ways. The property test above samples the rest.
#[test]
fn every_single_change_of_a_full_log_is_read_alike() {
    let full = json!({
        "meta": {"trace_id": "t-1", "timestamp": "2026-02-22T12:00:00.5Z", "parent_step_id": "p", "cluster_id": "c"},
        "identity": {"agent_id": "a-1", "agent_type": "planner", "capability_version": "1.0"},
        "cognition": {"intent": "plan", "reasoning_chain": ["a", "b"], "confidence_score": 0.25, "strategy_used": "s",
                      "entropy_score": 1},
        "action": {"status": "pending", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 10, "payload": {}},
                   "tool_output_summary": "o"},
        "state_delta": {"added_to_memory": ["m"], "tokens_consumed": 12, "cumulative_session_cost": 0.5},
        "control": {"hitl_required": true, "interrupt_signal": "stop", "is_terminal": false}
    });
    let hostile = [
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1.0),
        json!(1.5),
        json!(f64::MAX),
        json!(u64::MAX),
        json!(""),
        json!(" "),
        json!("\u{0}"),
        json!("\u{7f}"),
        json!("\u{2028}"),
        json!("😀"),
        json!("x".repeat(256)),
        json!("x".repeat(257)),
        json!("é".repeat(129)),
        json!([]),
        json!(["a", 1]),
        json!({}),
        json!({"success": null}),
        json!("success"),
        json!("Success"),
        json!("2026-02-22T12:00:00+01:00"),
        json!("2026-02-22T12:00:00"),
        json!("{\"delay_ms\": 5}"),
    ];
    assert_each_read_alike(&single_changes(&full, &hostile), readings_agree);
    assert!(
        readings_agree(&full.to_string()).is_ok()
            && DecisionLog::from_valid_body(full.to_string().as_bytes()).is_some()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// The direct reading may only take bodies the value reading takes, as the same log; and whatever the body,
    /// the interceptor answers without panicking.
    #[test]
    fn both_readings_of_a_decision_log_agree(log in decision_log(), style in style()) {
        let body = write(&log, &style);
        if let Err(disagreement) = readings_agree(&body) {
            prop_assert!(false, "{}", disagreement);
        }
    }

    /// A log the gateway accepted, serialized again (as it is published on `gateway:messages`), reads back as the
    /// same log.
    #[test]
    fn an_accepted_log_round_trips(log in decision_log(), style in style()) {
        let body = write(&log, &style);
        if let Ok(accepted) = SchemaInterceptor.inspect(body.as_bytes()) {
            let printed = serde_json::to_vec(&accepted.log).unwrap();
            let again = SchemaInterceptor.inspect(&printed).map(|accepted| accepted.log);
            prop_assert_eq!(again.ok(), Some(accepted.log));
        }
    }

    #[test]
    fn the_interceptor_takes_any_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = SchemaInterceptor.inspect(&body);
    }

    /// Bodies that are almost a valid log: one byte changed, inserted or cut.
    #[test]
    fn the_interceptor_takes_a_valid_log_with_one_byte_broken(at in any::<prop::sample::Index>(), byte in any::<u8>(), how in 0..3u8) {
        let mut body = serde_json::to_vec(&json!({
            "meta": {"trace_id": "t-1", "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "a-1", "agent_type": "planner", "capability_version": "1"},
            "action": {"status": "success", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 5, "payload": {}}}
        })).unwrap();
        let at = at.index(body.len());
        match how {
            0 => body[at] = byte,
            1 => body.insert(at, byte),
            _ => { body.remove(at); }
        }
        let _ = SchemaInterceptor.inspect(&body);
    }

    /// The same broken bodies, and the load generator's log, are read alike by the direct readings (the hand
    /// reading of plain logs, serde's) and the value reading.
    #[test]
    fn a_log_with_one_byte_broken_is_read_alike(at in any::<prop::sample::Index>(), byte in any::<u8>(), how in 0..3u8, which in 0..2usize) {
        let logs = [
            json!({
                "meta": {"trace_id": "t-1", "timestamp": "2026-02-22T12:00:00Z"},
                "identity": {"agent_id": "a-1", "agent_type": "planner", "capability_version": "1"},
                "action": {"status": "success", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 5, "payload": {}}}
            }),
            json!({
                "meta": {"trace_id": "t-1", "timestamp": "2026-02-22T12:00:00Z"},
                "identity": {"agent_id": "agent-7", "agent_type": "researcher", "capability_version": "1.4.0"},
                "cognition": {"intent": "summarize", "reasoning_chain": ["a", "b", "c"], "confidence_score": 0.8},
                "action": {"status": "success", "tool_call": "search", "tool_input": {"q": "rust", "n": [1, -2.5e3, null, true]}},
                "state_delta": {"tokens_consumed": 512, "cumulative_session_cost": 12},
                "control": {"is_terminal": false, "interrupt_signal": {"why": "x"}}
            }),
        ];
        let mut body = serde_json::to_vec(&logs[which]).unwrap();
        let at = at.index(body.len());
        match how {
            0 => body[at] = byte,
            1 => body.insert(at, byte),
            _ => { body.remove(at); }
        }
        if let Ok(text) = std::str::from_utf8(&body)
            && let Err(disagreement) = readings_agree(text)
        {
            prop_assert!(false, "{}", disagreement);
        }
    }

    #[test]
    fn rfc3339_round_trips_every_instant_it_can_write(seconds in -62_167_219_200i64..253_402_300_800, nanos in 0u32..1_000_000_000) {
        let instant = OffsetDateTime::from_unix_timestamp(seconds).unwrap() + time::Duration::nanoseconds(i64::from(nanos));
        let exact = rfc3339::format_exact(instant);
        prop_assert_eq!(rfc3339::parse(&exact), Some(instant), "{}", exact);
        prop_assert_eq!(rfc3339::parse_utc(&exact), Some(instant), "{}", exact);
        // Written to the millisecond: read back as the instant cut to its millisecond, which writes the same text.
        let text = rfc3339::format(instant);
        let millisecond = instant.replace_nanosecond(nanos / 1_000_000 * 1_000_000).unwrap();
        prop_assert_eq!(rfc3339::parse(&text), Some(millisecond), "{}", text);
        prop_assert_eq!(rfc3339::format(millisecond), text);
    }

    /// Any text, and text shaped like an instant with every field out of range, with any offset: no panic, and
    /// what parses is in the years RFC 3339 can write, in UTC.
    #[test]
    fn rfc3339_parsing_never_panics(
        text in prop_oneof![
            "\\PC{0,40}",
            (0u32..10_000, 0u32..100, 0u32..100, 0u32..100, 0u32..100, 0u32..100, "(\\.[0-9]{1,12})?", prop_oneof![Just("Z".to_owned()), "[+-][0-9]{2}:[0-9]{2}"])
                .prop_map(|(y, mo, d, h, mi, s, fraction, offset)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}{offset}")),
        ]
    ) {
        if let Some(instant) = rfc3339::parse(&text) {
            prop_assert!(instant.offset().is_utc());
            prop_assert!((0..=9999).contains(&instant.year()));
            prop_assert_eq!(rfc3339::parse(&rfc3339::format_exact(instant)), Some(instant));
        }
        let _ = rfc3339::parse_utc(&text);
    }

    #[test]
    fn hex_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let text = hex::encode(&bytes);
        prop_assert_eq!(hex::decode(&text), Some(bytes.clone()));
        prop_assert_eq!(hex::decode(&text.to_uppercase()), Some(bytes));
    }

    #[test]
    fn hex_decoding_never_panics(text in "\\PC{0,32}") {
        if let Some(bytes) = hex::decode(&text) {
            prop_assert_eq!(hex::encode(&bytes), text.to_lowercase());
        }
    }

    /// A token presented in an `Authorization` header: anything that is not exactly an issued token's shape is
    /// refused before any lookup; an issued one parses to its own credential id.
    #[test]
    fn presented_tokens_parse_only_in_the_issued_shape(text in prop_oneof![
        "\\PC{0,80}",
        "agt_[0-9a-fA-F_]{20,80}",
    ]) {
        if let Some(token) = PresentedToken::parse(&text) {
            prop_assert_eq!(text.len(), TOKEN_CHARS);
            prop_assert!(token.credential_id().bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            prop_assert!(text.contains(token.credential_id()));
        }
    }

    /// Identifiers: at most 256 bytes, not empty, no control character; what is accepted is kept as it is.
    #[test]
    fn identifiers_are_validated_not_altered(text in prop_oneof!["\\PC{0,300}", "[\\x00-\\x7f]{0,8}", "x{250,260}"]) {
        let expected = !text.is_empty() && text.len() <= 256 && !text.chars().any(char::is_control);
        match AgentId::new(text.clone()) {
            Ok(id) => { prop_assert!(expected, "{:?}", text); prop_assert_eq!(id.as_str(), text.as_str()); }
            Err(_) => prop_assert!(!expected, "{:?}", text),
        }
        let _ = IdempotencyKey::new(&text);
    }
}

#[test]
fn issued_tokens_parse_back_to_their_credential() {
    let issued = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
    let presented = PresentedToken::parse(issued.expose()).unwrap();
    assert_eq!(presented.credential_id(), issued.credential_id.as_str());
}
