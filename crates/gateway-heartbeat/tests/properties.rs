//! Property tests of the heartbeat body, the most frequent thing agents send. The gateway reads it two ways (the
//! direct reading for a valid body, the value reading that decides and names everything else); the direct one
//! may only take what the value one takes, as the same ping. Bodies are written every way JSON allows.
#![allow(clippy::unwrap_used)] // A test fails by panicking.

use gateway_heartbeat::HeartbeatPing;
use gateway_testkit::json_text::{assert_each_read_alike, single_changes, style, write};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// `Err` naming the body when the two readings disagree.
fn readings_agree(body: &str) -> Result<(), String> {
    let by_value = serde_json::from_str::<Value>(body).map(|value| HeartbeatPing::from_json(&value));
    match (HeartbeatPing::from_valid_body(body.as_bytes()), &by_value) {
        (None, _) => Ok(()),
        (Some(direct), Ok(Ok(read))) if direct == *read => Ok(()),
        (Some(direct), other) => {
            Err(format!("the direct reading took {body} as {direct:?}; the value reading: {other:?}"))
        }
    }
}

fn hostile() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(1.5),
        json!(""),
        json!(" "),
        json!("\u{0}"),
        json!("\u{7f}"),
        json!("😀"),
        json!("x".repeat(256)),
        json!("x".repeat(257)),
        json!("é".repeat(129)),
        json!([]),
        json!(["heartbeat"]),
        json!({}),
        json!("heartbeat"),
        json!("Heartbeat"),
        json!("2026-02-22T12:00:00Z"),
        json!("2026-02-22T12:00:00+01:00"),
        json!("not a time"),
    ]
}

fn field() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        6 => "[a-z0-9:_-]{1,16}".prop_map(|text| Some(Value::String(text))),
        1 => Just(None),
        2 => proptest::sample::select(hostile()).prop_map(Some),
        1 => "\\PC{0,12}".prop_map(|text| Some(Value::String(text))),
    ]
}

fn ping() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![8 => Just(Some(json!("heartbeat"))), 1 => field()];
    let timestamp = prop_oneof![
        4 => (0i64..4_102_444_800).prop_map(|seconds| Some(json!(gateway_core::encoding::rfc3339::format(
            time::OffsetDateTime::from_unix_timestamp(seconds).unwrap()
        )))),
        1 => field(),
    ];
    (kind, field(), field(), timestamp, prop::bool::weighted(0.1)).prop_map(
        |(kind, agent_id, cluster_id, timestamp, extra)| {
            let mut object = Map::new();
            for (name, value) in
                [("type", kind), ("agent_id", agent_id), ("cluster_id", cluster_id), ("timestamp", timestamp)]
            {
                if let Some(value) = value {
                    object.insert(name.to_owned(), value);
                }
            }
            if extra {
                object.insert("capabilities".to_owned(), json!({"tools": ["a"]}));
            }
            Value::Object(object)
        },
    )
}

/// Each field of a full ping removed or given each hostile value, written three ways.
#[test]
fn every_single_change_of_a_ping_is_read_alike() {
    let full =
        json!({"type": "heartbeat", "agent_id": "a-1", "cluster_id": "c-1", "timestamp": "2026-02-22T12:00:00Z"});
    assert_each_read_alike(&single_changes(&full, &hostile()), readings_agree);
    assert!(
        HeartbeatPing::from_valid_body(full.to_string().as_bytes()).is_some(),
        "the direct reading takes a valid ping"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn both_readings_of_a_ping_agree(ping in ping(), style in style()) {
        let body = write(&ping, &style);
        if let Err(disagreement) = readings_agree(&body) {
            prop_assert!(false, "{}", disagreement);
        }
    }

    #[test]
    fn any_bytes_get_an_answer(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = HeartbeatPing::from_valid_body(&body);
        if let Ok(value) = serde_json::from_slice::<Value>(&body) {
            let _ = HeartbeatPing::from_json(&value);
        }
    }
}
