//! Property tests of the console's SSE parser (console/sse.js, the code that reads every live tail in the operator's
//! browser), run in Node.js: the parser is fed
//! - the gateway's own frames of events with any content (ids, agent ids, payloads with newlines, quotes,
//!   non-ASCII and astral characters), cut into chunks anywhere: it gives back each event exactly;
//! - any stream the SSE format allows (fields, comments, blank lines, lines ending in LF, CRLF or CR, a CRLF cut
//!   between two chunks), against a model of the HTML standard's event stream interpretation written here.
//!
//! The browser test (console.rs) runs the same file in Chromium on fixed inputs; Node runs it on thousands. Without
//! `node` the test prints one line and passes; under CI it fails instead.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use gateway_core::{AgentId, ClusterId, Event, EventPayload};
use gateway_pubsub::PublishedEvent;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use time::OffsetDateTime;

/// Reads one JSON case per line (`{"chunks": [...]}`), answers one line: the events and comments the parser gave.
const RUNNER: &str = r#"
import { createInterface } from 'node:readline';
import { SseParser } from './sse.js';

for await (const line of createInterface({ input: process.stdin })) {
  const { chunks } = JSON.parse(line);
  const events = [];
  const comments = [];
  const parser = new SseParser({ onEvent: (event) => events.push(event), onComment: (text) => comments.push(text) });
  for (const chunk of chunks) parser.push(chunk);
  process.stdout.write(JSON.stringify({ events, comments, lastEventId: parser.lastEventId }) + '\n');
}
"#;

/// The console's parser, running in a Node.js process.
struct Parser {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    _dir: tempfile::TempDir,
}

impl Parser {
    /// `None` (after one printed line) without Node.js, outside CI.
    fn start() -> Option<Self> {
        let node = std::env::var("GATEWAY_TEST_NODE").unwrap_or_else(|_| "node".to_owned());
        if Command::new(&node).arg("--version").output().is_err() {
            let line = format!("skipped: the console's SSE parser property tests need Node.js ({node} not found)");
            assert!(!gateway_testkit::running_in_ci(), "{line}; under CI this fails instead");
            eprintln!("{line}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        // The console's modules as the binary embeds them; `dom.js` touches `document` only when called.
        std::fs::write(dir.path().join("package.json"), r#"{"type": "module"}"#).unwrap();
        std::fs::write(dir.path().join("sse.js"), include_str!("../../console/sse.js")).unwrap();
        std::fs::write(dir.path().join("api.js"), include_str!("../../console/api.js")).unwrap();
        std::fs::write(dir.path().join("dom.js"), include_str!("../../console/dom.js")).unwrap();
        std::fs::write(dir.path().join("runner.js"), RUNNER).unwrap();
        let mut child = Command::new(&node)
            .arg("runner.js")
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Some(Self { child, input, output, _dir: dir })
    }

    fn parse(&mut self, chunks: &[String]) -> Parsed {
        writeln!(self.input, "{}", json!({ "chunks": chunks })).unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("node answered {line:?}"));
        let events = answer["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| SseEvent {
                event_type: event["type"].as_str().unwrap().to_owned(),
                data: event["data"].as_str().unwrap().to_owned(),
                id: event["id"].as_str().map(str::to_owned),
            })
            .collect();
        let comments = answer["comments"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
        Parsed { events, comments }
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SseEvent {
    event_type: String,
    data: String,
    /// The last event id seen when the event was dispatched.
    id: Option<String>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed {
    events: Vec<SseEvent>,
    comments: Vec<String>,
}

/// `text` cut at the given fractions of its length (on character boundaries; a CRLF may be cut in two).
fn cut(text: &str, at: &[prop::sample::Index]) -> Vec<String> {
    let bounds: Vec<usize> = text.char_indices().map(|(index, _)| index).chain([text.len()]).collect();
    let mut cuts: Vec<usize> = at.iter().map(|index| bounds[index.index(bounds.len())]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut start = 0;
    for end in cuts.into_iter().chain([text.len()]) {
        chunks.push(text[start..end].to_owned());
        start = end;
    }
    chunks
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9 :_-]{0,12}", "\\PC{0,12}", "[\"\\\\\u{2028}\u{2029}é😀\u{fffd}]{1,6}"]
}

/// Events of every kind the gateway streams, with client-chosen text where a client chooses it.
fn event() -> impl Strategy<Value = Event> {
    let at = (0i64..4_102_444_800).prop_map(|seconds| OffsetDateTime::from_unix_timestamp(seconds).unwrap());
    let agent = "[!-~]{1,24}".prop_map(|text| AgentId::new(text).unwrap());
    let payload = prop::collection::btree_map(
        text(),
        prop_oneof![
            text().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            Just(json!(["a\nb", {"c": null}]))
        ],
        0..4,
    )
    .prop_map(|map| map.into_iter().collect::<serde_json::Map<_, _>>());
    let reminder =
        (any::<u32>(), agent.clone(), at.clone(), payload).prop_map(|(job_id, agent_id, scheduled_for, payload)| {
            let fire_id = format!("{job_id}:{}", gateway_core::encoding::rfc3339::format(scheduled_for));
            EventPayload::Reminder { job_id: i64::from(job_id), agent_id, scheduled_for, payload, fire_id, epoch: 1 }
        });
    let evicted = (agent, "[!-~]{1,24}", at.clone()).prop_map(|(agent_id, cluster, last_seen)| {
        EventPayload::AgentEvicted { agent_id, cluster_id: ClusterId::new(cluster).unwrap(), last_seen }
    });
    let violation = (text(), text(), text()).prop_map(|(agent_id, capability_version, violation_reason)| {
        EventPayload::SchemaViolation {
            agent_id,
            capability_version,
            violation_reason,
            raw_payload_hash: "sha256:00".to_owned(),
        }
    });
    let dlq = (any::<i64>(), any::<i64>(), text(), any::<i32>(), prop::option::of(text())).prop_map(
        |(delivery_id, webhook_id, session_id, attempt_count, error_detail)| EventPayload::WebhookDlq {
            delivery_id,
            webhook_id,
            session_id,
            attempt_count,
            error_detail,
        },
    );
    (prop_oneof![reminder, evicted, violation, dlq], at).prop_map(|(payload, timestamp)| match &payload {
        EventPayload::Reminder { fire_id, .. } => Event { id: fire_id.clone(), timestamp, payload },
        _ => Event::new(payload, timestamp),
    })
}

/// One line of an SSE stream, as a generator writes it (without its line end).
#[derive(Debug, Clone)]
enum Line {
    Field(String, String),
    /// A field without a colon: its whole line is the name.
    Bare(String),
    Comment(String),
    Blank,
}

fn line() -> impl Strategy<Value = Line> {
    let name = prop_oneof![
        Just("data".to_owned()),
        Just("event".to_owned()),
        Just("id".to_owned()),
        Just("retry".to_owned()),
        "[a-z]{1,5}"
    ];
    let value = prop_oneof!["[a-z0-9 :{}\",]{0,10}", " [a-z]{0,4}", "  x", "[é😀\u{0}]{0,3}", "\\PC{0,8}"]
        .prop_map(|value: String| value.replace(['\r', '\n'], ""));
    prop_oneof![
        4 => (name.clone(), value.clone()).prop_map(|(name, value)| Line::Field(name, value)),
        1 => name.prop_map(Line::Bare),
        1 => value.prop_map(Line::Comment),
        3 => Just(Line::Blank),
    ]
}

/// The stream's text, each line ended by LF, CRLF or CR as `ends` says, and the last by LF (a stream ending in CR
/// is complete only once the next chunk shows that no LF follows).
fn render(lines: &[Line], ends: &[u8]) -> String {
    let mut text = String::new();
    let mut after_cr = false;
    for (index, line) in lines.iter().enumerate() {
        match line {
            Line::Field(name, value) => text.push_str(&format!("{name}:{value}")),
            Line::Bare(name) => text.push_str(name),
            Line::Comment(value) => text.push_str(&format!(":{value}")),
            Line::Blank => {}
        }
        let end = if index + 1 == lines.len() { 0 } else { ends[index % ends.len()] % 3 };
        // An empty line ended by LF right after a CR would read as one CRLF: end it with CRLF instead.
        let end = if end == 0 && after_cr && matches!(line, Line::Blank) { 1 } else { end };
        text.push_str(["\n", "\r\n", "\r"][usize::from(end)]);
        after_cr = end == 2;
    }
    text
}

/// The HTML standard's interpretation of the lines (what the console keeps of it: type, data, id; comments
/// trimmed as the console shows them). A trailing event without its blank line is not dispatched.
fn model(lines: &[Line]) -> Parsed {
    let mut parsed = Parsed::default();
    let (mut event_type, mut data, mut last_id): (String, Vec<String>, Option<String>) =
        (String::new(), Vec::new(), None);
    for line in lines {
        let (name, value) = match line {
            Line::Blank => {
                if !data.is_empty() {
                    let event_type = if event_type.is_empty() { "message".to_owned() } else { event_type.clone() };
                    parsed.events.push(SseEvent { event_type, data: data.join("\n"), id: last_id.clone() });
                }
                event_type.clear();
                data.clear();
                continue;
            }
            Line::Comment(value) => {
                parsed.comments.push(value.strip_prefix(' ').unwrap_or(value).trim_end().to_owned());
                continue;
            }
            Line::Bare(name) => (name.as_str(), ""),
            Line::Field(name, value) => (name.as_str(), value.strip_prefix(' ').unwrap_or(value)),
        };
        match name {
            "event" => event_type = value.to_owned(),
            "data" => data.push(value.to_owned()),
            "id" if !value.contains('\0') => last_id = Some(value.to_owned()),
            _ => {}
        }
    }
    parsed
}

#[test]
fn the_console_parses_every_frame_the_gateway_sends_cut_anywhere() {
    let Some(parser) = Parser::start() else { return };
    // The runner takes a `Fn`: the one Node process is borrowed per case.
    let parser = RefCell::new(parser);
    let mut runner = TestRunner::new(Config::with_cases(512));
    let cuts = prop::collection::vec(any::<prop::sample::Index>(), 0..6);
    runner
        .run(&(prop::collection::vec(event(), 1..4), cuts), |(events, cuts)| {
            let frames: Vec<PublishedEvent> = events.iter().map(PublishedEvent::of).collect();
            let stream: String =
                frames.iter().map(|frame| std::str::from_utf8(frame.frame()).unwrap()).collect::<Vec<_>>().concat();
            let parsed = parser.borrow_mut().parse(&cut(&stream, &cuts));
            prop_assert_eq!(parsed.events.len(), events.len(), "{:?}", stream);
            for (got, event) in parsed.events.iter().zip(&events) {
                prop_assert_eq!(&got.event_type, event.event_type());
                prop_assert_eq!(got.id.as_deref(), Some(event.id.as_str()));
                let data: Value = serde_json::from_str(&got.data).unwrap();
                prop_assert_eq!(data, serde_json::to_value(event).unwrap());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_console_parses_any_event_stream_as_the_standard_does() {
    let Some(parser) = Parser::start() else { return };
    // The runner takes a `Fn`: the one Node process is borrowed per case.
    let parser = RefCell::new(parser);
    let mut runner = TestRunner::new(Config::with_cases(1024));
    let stream = (
        prop::collection::vec(line(), 0..16),
        prop::collection::vec(any::<u8>(), 1..4),
        prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    );
    runner
        .run(&stream, |(lines, ends, cuts)| {
            let mut lines = lines;
            lines.push(Line::Blank);
            let text = render(&lines, &ends);
            prop_assert_eq!(parser.borrow_mut().parse(&cut(&text, &cuts)), model(&lines), "{:?}", text);
            Ok(())
        })
        .unwrap();
}
