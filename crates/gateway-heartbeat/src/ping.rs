//! The heartbeat body (FR-10.3).

use std::borrow::Cow;

use gateway_core::ids::MAX_ID_BYTES;
use gateway_core::{AgentId, ClusterId};
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::HeartbeatError;

/// A validated `{"type":"heartbeat","agent_id","cluster_id","timestamp"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatPing {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    /// The agent's own timestamp; `None` when absent or unparsable (the row then records the receipt time).
    pub timestamp: Option<OffsetDateTime>,
}

impl HeartbeatPing {
    /// Checks `type` first, then the two ids, so the error matches the contract's precedence.
    pub fn from_json(body: &Value) -> Result<Self, HeartbeatError> {
        if body.get("type").and_then(Value::as_str) != Some("heartbeat") {
            return Err(HeartbeatError::InvalidType);
        }
        let agent_id = required_id(body, "agent_id", AgentId::new)?;
        let cluster_id = required_id(body, "cluster_id", ClusterId::new)?;
        let timestamp = match body.get("timestamp").and_then(Value::as_str) {
            Some(text) if text.len() > MAX_ID_BYTES => {
                let reason = format!("must be at most {MAX_ID_BYTES} bytes");
                return Err(HeartbeatError::InvalidField { field: "timestamp", reason });
            }
            text => text.and_then(gateway_core::encoding::rfc3339::parse_utc),
        };
        Ok(Self { agent_id, cluster_id, timestamp })
    }

    /// The ping of a body that is certainly valid, read without a JSON tree; `None` for anything else (not JSON,
    /// a refused field, or a shape the direct reading leaves to the other, such as a timestamp that is not a
    /// string), which [`Self::from_json`] then decides. See `gateway_core::intake::direct_json`.
    ///
    /// Pings as agents send them (one flat object of plain strings) are read by [`plain_fields`], which costs a
    /// fifth of serde's reading; any other shape goes through serde's.
    pub fn from_valid_body(body: &[u8]) -> Option<Self> {
        if let Some(plain) = plain_fields(body) {
            return Self::valid(plain.kind, plain.agent_id.to_owned(), plain.cluster_id.to_owned(), plain.timestamp);
        }
        let ping: PingFields<'_> = gateway_core::intake::direct_json::read(body)?;
        Self::valid(&ping.kind, ping.agent_id, ping.cluster_id, ping.timestamp.as_deref())
    }

    /// The rules of [`Self::from_json`] for fields read directly; `None` where it would refuse (it then names why).
    fn valid(kind: &str, agent_id: String, cluster_id: String, timestamp: Option<&str>) -> Option<Self> {
        if kind != "heartbeat" || timestamp.is_some_and(|text| text.len() > MAX_ID_BYTES) {
            return None;
        }
        Some(Self {
            agent_id: AgentId::new(agent_id).ok()?,
            cluster_id: ClusterId::new(cluster_id).ok()?,
            timestamp: timestamp.and_then(gateway_core::encoding::rfc3339::parse_utc),
        })
    }
}

/// A ping's fields, borrowed from a body in its plainest form.
#[derive(Debug, PartialEq, Eq)]
struct PlainFields<'a> {
    kind: &'a str,
    agent_id: &'a str,
    cluster_id: &'a str,
    timestamp: Option<&'a str>,
}

/// The fields of a body that is one JSON object whose every value is a string without escapes, with `type`,
/// `agent_id` and `cluster_id` each present once (`timestamp` at most once); `None` for any other body, which the
/// serde reading then takes.
///
/// It accepts only JSON, and reads it as the value reading does: the whole body is checked as UTF-8, strings
/// may hold neither a backslash nor a control character (JSON forbids raw ones), whitespace is JSON's four
/// bytes, nothing but whitespace may follow the object, and fields it does not name are skipped (the value
/// reading ignores them too). A repeated field is left to the other readings (the value reading keeps the last).
fn plain_fields(body: &[u8]) -> Option<PlainFields<'_>> {
    let text = std::str::from_utf8(body).ok()?;
    let mut scan = Scan { bytes: text.as_bytes(), at: 0 };
    let (mut kind, mut agent_id, mut cluster_id, mut timestamp) = (None, None, None, None);
    scan.expect(b'{')?;
    loop {
        let (key_start, key_end) = scan.string()?;
        scan.expect(b':')?;
        let value = scan.string()?;
        let mut other = None;
        let field = match &text[key_start..key_end] {
            "type" => &mut kind,
            "agent_id" => &mut agent_id,
            "cluster_id" => &mut cluster_id,
            "timestamp" => &mut timestamp,
            _ => &mut other,
        };
        if field.replace(value).is_some() {
            return None;
        }
        match scan.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    scan.skip_whitespace();
    if scan.at != scan.bytes.len() {
        return None;
    }
    // Byte offsets of ASCII delimiters in a `str`: every slice taken above is on a character boundary.
    let slice = |(start, end): (usize, usize)| &text[start..end];
    Some(PlainFields {
        kind: slice(kind?),
        agent_id: slice(agent_id?),
        cluster_id: slice(cluster_id?),
        timestamp: timestamp.map(slice),
    })
}

/// A cursor over a body for [`plain_fields`]; strings are handed out as byte ranges of it.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn skip_whitespace(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        self.skip_whitespace();
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// The next value, which must be a string without escapes or control characters: the range of its content.
    fn string(&mut self) -> Option<(usize, usize)> {
        self.expect(b'"')?;
        let start = self.at;
        let end = start + string_length(&self.bytes[start..])?;
        if self.bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        Some((start, end))
    }
}

/// Where the string that `bytes` starts ends: the first `"`, backslash or control character. Eight bytes at a time
/// while none is among them (byte by byte, the scan cost as much as serde's whole reading).
fn string_length(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // High bit of a byte set when some byte of the word is zero, or below `n` (at most 0x80): exact as to whether
    // there is one (a borrow may also mark bytes after it, which the byte-wise scan below does not need).
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    let mut at = 0;
    while let Some(word) = bytes.get(at..at + 8).and_then(|chunk| <[u8; 8]>::try_from(chunk).ok()) {
        let word = u64::from_ne_bytes(word);
        if below(word ^ (ONES * u64::from(b'"')), 1) | below(word ^ (ONES * u64::from(b'\\')), 1) | below(word, 0x20) != 0 {
            break;
        }
        at += 8;
    }
    bytes[at..].iter().position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20).map(|length| at + length)
}

/// The fields of a heartbeat as the direct reading takes them (strings borrowed from the body where they can be).
#[derive(Deserialize)]
struct PingFields<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    agent_id: String,
    cluster_id: String,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
}

fn required_id<T>(
    body: &Value,
    field: &'static str,
    make: impl FnOnce(String) -> Result<T, gateway_core::IdError>,
) -> Result<T, HeartbeatError> {
    match body.get(field).and_then(Value::as_str) {
        Some(text) if !text.is_empty() => {
            make(text.to_owned()).map_err(|error| HeartbeatError::InvalidField { field, reason: error.to_string() })
        }
        _ => Err(HeartbeatError::MissingRequiredField(field)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    /// The direct reading either agrees with the value reading or leaves the body to it. `None`: not a JSON
    /// value (the HTTP layer's 400).
    fn both_readings(body: &str) -> Option<Result<HeartbeatPing, HeartbeatError>> {
        let direct = HeartbeatPing::from_valid_body(body.as_bytes());
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            assert_eq!(direct, None, "{body}");
            return None;
        };
        let by_value = HeartbeatPing::from_json(&value);
        if let Some(direct) = direct {
            assert_eq!(Ok(&direct), by_value.as_ref(), "{body}");
        }
        Some(by_value)
    }

    #[test]
    fn the_direct_reading_takes_plain_pings_and_agrees_with_the_value_reading() {
        let plain =
            r#"{"type":"heartbeat","agent_id":"agent-1","cluster_id":"c-1","timestamp":"2026-02-22T12:00:00Z"}"#;
        assert!(HeartbeatPing::from_valid_body(plain.as_bytes()).is_some());
        let escaped = r#"{"type":"heart\u0062eat","agent_\u0069d":"a\n","cluster_id":"c","extra":{"x":[1]}}"#;
        assert!(HeartbeatPing::from_valid_body(escaped.as_bytes()).is_none(), "a control character in the id");
        let deep = format!(
            r#"{{"type":"heartbeat","agent_id":"a","cluster_id":"c","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let bodies = [
            plain.to_owned(),
            escaped.to_owned(),
            deep,
            r#"{"type":"heart\u0062eat","agent_\u0069d":"a","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":12}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":null}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":"yesterday"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","agent_id":"b","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":7,"cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"status","agent_id":"a","cluster_id":"c"}"#.to_owned(),
            r#"["heartbeat","a","c",null]"#.to_owned(),
            format!(r#"{{"type":"heartbeat","agent_id":"{}","cluster_id":"c"}}"#, "x".repeat(300)),
        ];
        for body in &bodies {
            let _ = both_readings(body);
        }
        assert_eq!(both_readings(&bodies[2]), None, "too deep for the value reading");
        assert_eq!(both_readings(&bodies[3]).unwrap().unwrap().agent_id.as_str(), "a");
        assert_eq!(both_readings(&bodies[7]).unwrap().unwrap().agent_id.as_str(), "b", "the last of repeated keys");
        assert!(HeartbeatPing::from_valid_body(bodies[12].as_bytes()).is_none(), "an array is not a ping");
    }

    /// The plain reading takes only JSON objects of plain strings, and reads them as the value reading does; every
    /// other body is left to the serde reading (and then the value reading), whose answers are checked above.
    #[test]
    fn the_plain_reading_takes_flat_pings_only_and_agrees_with_the_value_reading() {
        let load = r#"{"type":"heartbeat","agent_id":"agent-7","cluster_id":"bench","timestamp":"2026-02-22T12:00:00Z"}"#;
        let taken = [
            load,
            " {\"cluster_id\" : \"c\",\r\n\t\"agent_id\":\"é-1\", \"type\":\"heartbeat\" } \n",
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","extra":"x","other":""}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":"yesterday"}"#,
            r#"{"type":"status","agent_id":"a","cluster_id":"c"}"#,
            r#"{"type":"heartbeat","agent_id":"","cluster_id":"c"}"#,
        ];
        for body in taken {
            let plain = plain_fields(body.as_bytes()).unwrap_or_else(|| panic!("not read plainly: {body}"));
            let value: Value = serde_json::from_str(body).unwrap();
            assert_eq!(Some(plain.kind), value["type"].as_str(), "{body}");
            assert_eq!(Some(plain.agent_id), value["agent_id"].as_str(), "{body}");
            assert_eq!(Some(plain.cluster_id), value["cluster_id"].as_str(), "{body}");
            assert_eq!(plain.timestamp, value["timestamp"].as_str(), "{body}");
            assert_eq!(
                HeartbeatPing::from_valid_body(body.as_bytes()).as_ref(),
                HeartbeatPing::from_json(&value).as_ref().ok(),
                "{body}"
            );
        }
        let left = [
            // Not JSON.
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c",}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c"} x"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c"}}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c""#,
            r#"{"type":"heartbeat" "agent_id":"a","cluster_id":"c"}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id"}"#,
            r#"{,"type":"heartbeat","agent_id":"a","cluster_id":"c"}"#,
            "{\"type\":\"heartbeat\",\"agent_id\":\"a\tb\",\"cluster_id\":\"c\"}",
            "{\"type\":\"heartbeat\",\"agent_id\":\"a\",\"cluster_id\":\"c\"}\u{b}",
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c"}"#.trim_end_matches('}'),
            "",
            "{}",
            // JSON, but not plain: escapes, other types, repeated or missing fields, not an object.
            r#"{"type":"heartbeat","agent_id":"a\u0041","cluster_id":"c"}"#,
            r#"{"typ\u0065":"heartbeat","agent_id":"a","cluster_id":"c"}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":null}"#,
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","extra":{"x":[1]}}"#,
            r#"{"type":"heartbeat","agent_id":7,"cluster_id":"c"}"#,
            r#"{"type":"heartbeat","agent_id":"a","agent_id":"b","cluster_id":"c"}"#,
            r#"{"type":"heartbeat","cluster_id":"c"}"#,
            r#"["heartbeat","a","c"]"#,
        ];
        for body in left {
            assert_eq!(plain_fields(body.as_bytes()), None, "{body}");
            let _ = both_readings(body);
        }
        let mut invalid_utf8 = load.as_bytes().to_vec();
        invalid_utf8[33] = 0xff;
        assert_eq!(plain_fields(&invalid_utf8), None);
    }

    #[test]
    fn a_string_ends_at_its_first_quote_backslash_or_control_character() {
        for length in 0..40 {
            for stop in [b'"', b'\\', 0, 0x1f] {
                let mut text = vec![b'a'; length];
                text.push(stop);
                text.extend_from_slice(b"\"\\\x01tail");
                assert_eq!(string_length(&text), Some(length), "{length} {stop}");
            }
            let mut text = "é~ ".repeat(length).into_bytes();
            assert_eq!(string_length(&text), None, "{length}: no end");
            text.extend_from_slice(b"\x7f\x20\x21\"");
            assert_eq!(string_length(&text), Some(text.len() - 1), "{length}: only the quote ends it");
        }
    }

    #[test]
    fn parses_a_well_formed_ping() {
        let ping = HeartbeatPing::from_json(&json!({"type": "heartbeat", "agent_id": "agent-42",
            "cluster_id": "cluster-west", "timestamp": "2026-02-22T12:00:00Z"}))
        .unwrap();
        assert_eq!(ping.agent_id.as_str(), "agent-42");
        assert_eq!(ping.timestamp, Some(datetime!(2026-02-22 12:00:00 UTC)));
    }

    #[test]
    fn missing_or_bad_timestamp_is_none_not_an_error() {
        for timestamp in [json!(null), json!("yesterday"), json!(12)] {
            let ping = HeartbeatPing::from_json(
                &json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": timestamp}),
            )
            .unwrap();
            assert_eq!(ping.timestamp, None);
        }
    }

    #[test]
    fn refusals_follow_the_contract() {
        let cases = [
            (json!({"type": "status_update", "agent_id": "a", "cluster_id": "c"}), HeartbeatError::InvalidType),
            (json!({"agent_id": "a", "cluster_id": "c"}), HeartbeatError::InvalidType),
            (json!([1]), HeartbeatError::InvalidType),
            (json!({"type": "heartbeat", "cluster_id": "c"}), HeartbeatError::MissingRequiredField("agent_id")),
            (
                json!({"type": "heartbeat", "agent_id": "", "cluster_id": "c"}),
                HeartbeatError::MissingRequiredField("agent_id"),
            ),
            (
                json!({"type": "heartbeat", "agent_id": 7, "cluster_id": "c"}),
                HeartbeatError::MissingRequiredField("agent_id"),
            ),
            (json!({"type": "heartbeat", "agent_id": "a"}), HeartbeatError::MissingRequiredField("cluster_id")),
        ];
        for (body, expected) in cases {
            assert_eq!(HeartbeatPing::from_json(&body), Err(expected), "{body}");
        }
        assert!(matches!(
            HeartbeatPing::from_json(&json!({"type": "heartbeat", "agent_id": "x".repeat(300), "cluster_id": "c"})),
            Err(HeartbeatError::InvalidField { field: "agent_id", .. })
        ));
        let long_stamp = json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": "9".repeat(257)});
        assert_eq!(
            HeartbeatPing::from_json(&long_stamp),
            Err(HeartbeatError::InvalidField { field: "timestamp", reason: "must be at most 256 bytes".into() })
        );
        assert_eq!(
            HeartbeatPing::from_valid_body(long_stamp.to_string().as_bytes()),
            None,
            "left to the value reading"
        );
        let at_bound = json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": "9".repeat(256)});
        assert_eq!(HeartbeatPing::from_json(&at_bound).unwrap().timestamp, None, "unparsable but within the bound");
    }
}
