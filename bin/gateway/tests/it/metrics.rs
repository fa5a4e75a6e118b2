//! `GET /metrics` through the real binary: behind the operator token, in the Prometheus text format, and moving
//! with what the gateway does (docs/operations.md, "Metrics").

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, TOKEN, eventually};

/// Every series family the gateway exposes, as its `# TYPE` line names it, with its type.
const FAMILIES: &[(&str, &str)] = &[
    ("gateway_http_requests", "counter"),
    ("gateway_http_request_duration_seconds", "histogram"),
    ("gateway_request_body_bytes_in_flight", "gauge"),
    ("gateway_request_bodies_refused", "counter"),
    ("gateway_connections_refused", "counter"),
    ("gateway_heartbeats_accepted", "counter"),
    ("gateway_agents_live", "gauge"),
    ("gateway_agents_evicted", "counter"),
    ("gateway_agent_eviction_pass_duration_seconds", "histogram"),
    ("gateway_cron_fires", "counter"),
    ("gateway_cron_fire_lateness_seconds", "histogram"),
    ("gateway_cron_runs", "counter"),
    ("gateway_cron_jobs_pending", "gauge"),
    ("gateway_webhook_deliveries", "counter"),
    ("gateway_webhook_attempts", "counter"),
    ("gateway_webhook_dead_letters", "gauge"),
    ("gateway_webhook_due_backlog", "gauge"),
    ("gateway_sse_streams_open", "gauge"),
    ("gateway_sse_lagged_events", "counter"),
    ("gateway_agent_credential_reads", "counter"),
    ("gateway_agent_credentials_cached", "gauge"),
    ("gateway_leader", "gauge"),
    ("gateway_leader_epoch", "gauge"),
];

/// A scrape: status, `Content-Type`, body.
fn scrape(gateway: &Gateway, token: Option<&str>) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut request = agent.get(gateway.url("/metrics"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let content_type =
        response.headers().get("content-type").map(|value| value.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.body_mut().read_to_string().unwrap();
    (response.status().as_u16(), content_type, body)
}

/// One sample line: its name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: the families' types and the samples.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the one sample `name` with `labels`, if there is one.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: BTreeMap<String, String> =
            labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        self.samples.iter().find(|sample| sample.name == name && sample.labels == labels).map(|sample| sample.value)
    }
}

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_' || first == ':')
        && chars.all(|rest| rest.is_ascii_alphanumeric() || rest == '_' || rest == ':')
}

/// Parses the text format strictly enough to fail on a malformed line: comments are `# HELP`, `# TYPE`, `# UNIT`
/// of a valid name (a family's TYPE before its samples, once), the body ends with `# EOF`, and every other line is
/// `name{label="value",...} number` whose name belongs to a declared family.
fn parse(body: &str) -> Exposition {
    let mut exposition = Exposition::default();
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the exposition ends with # EOF");
    assert!(body.ends_with('\n'));
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let (keyword, rest) = comment.split_once(' ').unwrap_or_else(|| panic!("bad comment: {line}"));
            let (name, text) = rest.split_once(' ').unwrap_or_else(|| panic!("bad comment: {line}"));
            assert!(is_name(name), "bad family name: {line}");
            match keyword {
                "TYPE" => {
                    assert!(["counter", "gauge", "histogram", "summary", "info", "unknown"].contains(&text), "{line}");
                    let earlier = exposition.types.insert(name.to_owned(), text.to_owned());
                    assert!(earlier.is_none(), "family declared twice: {line}");
                }
                "HELP" => assert!(!text.trim().is_empty(), "empty help: {line}"),
                "UNIT" => assert!(is_name(text), "bad unit: {line}"),
                _ => panic!("unknown comment: {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            number => number.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}"));
                let pairs = labels
                    .split(',')
                    .map(|pair| {
                        let (key, quoted) = pair.split_once('=').unwrap_or_else(|| panic!("bad label: {line}"));
                        assert!(is_name(key), "bad label name: {line}");
                        let value = quoted
                            .strip_prefix('"')
                            .and_then(|rest| rest.strip_suffix('"'))
                            .unwrap_or_else(|| panic!("unquoted label value: {line}"));
                        assert!(!value.contains(['"', '\\', '\n']), "label value needing escapes: {line}");
                        (key.to_owned(), value.to_owned())
                    })
                    .collect();
                (name, pairs)
            }
        };
        assert!(is_name(name), "bad sample name: {line}");
        let family = exposition
            .types
            .keys()
            .find(|family| {
                name.strip_prefix(family.as_str())
                    .is_some_and(|suffix| ["", "_total", "_bucket", "_count", "_sum", "_created"].contains(&suffix))
            })
            .unwrap_or_else(|| panic!("a sample of no declared family: {line}"));
        assert!(!family.is_empty());
        exposition.samples.push(Sample { name: name.to_owned(), labels, value });
    }
    check_histograms(&exposition);
    exposition
}

/// Each histogram series' buckets count cumulatively, in ascending `le` order, up to `+Inf`, which is its count.
fn check_histograms(exposition: &Exposition) {
    // (family, labels without `le`) -> (bound, cumulative count) in exposition order.
    type Buckets = Vec<(f64, f64)>;
    let mut series: BTreeMap<(String, Vec<(String, String)>), Buckets> = BTreeMap::new();
    for sample in &exposition.samples {
        let Some(family) = sample.name.strip_suffix("_bucket") else { continue };
        let le = sample.labels.get("le").unwrap_or_else(|| panic!("a bucket without le: {sample:?}"));
        let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
        let rest = sample.labels.iter().filter(|(key, _)| *key != "le").map(|(k, v)| (k.clone(), v.clone())).collect();
        series.entry((family.to_owned(), rest)).or_default().push((bound, sample.value));
    }
    for ((family, labels), buckets) in series {
        assert!(buckets.windows(2).all(|pair| pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1), "{family} {labels:?}");
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let count = exposition.value(&format!("{family}_count"), &labels);
        assert_eq!(buckets.last().map(|bucket| (bucket.0, Some(bucket.1))), Some((f64::INFINITY, count)), "{family}");
    }
}

#[test]
fn the_scrape_needs_the_operator_token() {
    let gateway = Gateway::start(&[]);
    assert_eq!(scrape(&gateway, None).0, 401);
    assert_eq!(scrape(&gateway, Some("not-the-operator-token")).0, 401);
    let (status, content_type, body) = scrape(&gateway, Some(TOKEN));
    assert_eq!(status, 200);
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let exposition = parse(&body);
    assert_eq!(
        exposition.value("gateway_http_requests_total", &[("route", "metrics"), ("status", "401")]),
        Some(2.0),
        "refused scrapes count under their route: {body}"
    );
}

#[test]
fn the_counters_move_with_a_heartbeat_a_reminder_and_a_webhook_delivery() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&["--webhook-allow-private-targets"]);
    let reminders = gateway.subscribe("agent:agent-m:scheduled");

    let heartbeat = json!({"type": "heartbeat", "agent_id": "agent-m", "cluster_id": "cluster-m"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &heartbeat).0, 200);
    assert_eq!(gateway.get("/no/such/path").0, 404);

    let log = json!({
        "meta": {"trace_id": "trace-metrics", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "agent-m", "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": 200, "payload": {"task": "metrics"}}}
    });
    assert_eq!(gateway.post_json("/gateway/messages", &log).0, 202);
    reminders.expect("reminder");

    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "metrics", "event_type": "push", "agent_intent": "review",
                "target_session": "s", "target_url": receiver.url("/hooks"), "secret": "metrics-secret"}),
    );
    assert_eq!(status, 201, "{config}");
    let (status, delivery) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": config["id"], "session_id": "s", "payload": {"n": 1}}),
    );
    assert_eq!(status, 201, "{delivery}");
    receiver.wait_for(1);

    // The reminder's fire and the delivery's outcome are counted by the loops that made them, a moment after the
    // client saw them.
    let mut exposition = Exposition::default();
    eventually("the scrape shows the fire and the delivery", || {
        let (status, _, body) = scrape(&gateway, Some(TOKEN));
        assert_eq!(status, 200);
        exposition = parse(&body);
        exposition.value("gateway_cron_fires_total", &[]) == Some(1.0)
            && exposition.value("gateway_webhook_deliveries_total", &[("outcome", "delivered")]) == Some(1.0)
    });

    for (family, kind) in FAMILIES {
        assert_eq!(exposition.types.get(*family).map(String::as_str), Some(*kind), "family {family}");
    }
    let value = |name: &str, labels: &[(&str, &str)]| exposition.value(name, labels);
    let requests =
        |route: &str, status: &str| value("gateway_http_requests_total", &[("route", route), ("status", status)]);
    assert_eq!(requests("heartbeat", "200"), Some(1.0));
    assert_eq!(requests("messages", "202"), Some(1.0));
    assert_eq!(requests("deliveries", "201"), Some(1.0));
    assert_eq!(requests("unmatched", "404"), Some(1.0), "an unknown path counts under one label, not its own");
    assert!(!exposition.samples.iter().any(|sample| sample.labels.values().any(|label| label.contains('/'))));
    let heartbeat_latency = [("route", "heartbeat"), ("status", "200")];
    assert_eq!(value("gateway_http_request_duration_seconds_count", &heartbeat_latency), Some(1.0));
    assert_eq!(
        value(
            "gateway_http_request_duration_seconds_bucket",
            &[("route", "heartbeat"), ("status", "200"), ("le", "+Inf")]
        ),
        Some(1.0)
    );

    assert_eq!(value("gateway_request_body_bytes_in_flight", &[]), Some(0.0), "every body was read and dropped");
    assert_eq!(value("gateway_request_bodies_refused_total", &[]), Some(0.0));
    assert_eq!(value("gateway_connections_refused_total", &[]), Some(0.0));
    assert_eq!(value("gateway_heartbeats_accepted_total", &[]), Some(1.0));
    assert_eq!(value("gateway_agents_live", &[]), Some(1.0));
    assert_eq!(value("gateway_agents_evicted_total", &[]), Some(0.0));
    assert_eq!(value("gateway_cron_fire_lateness_seconds_count", &[]), Some(1.0));
    assert_eq!(value("gateway_cron_runs_total", &[("outcome", "fired")]), Some(1.0));
    assert_eq!(value("gateway_cron_runs_total", &[("outcome", "skipped_misfire")]), Some(0.0));
    assert_eq!(value("gateway_cron_runs_total", &[("outcome", "skipped_late")]), Some(0.0));
    assert_eq!(value("gateway_cron_fire_lateness_seconds_bucket", &[("le", "+Inf")]), Some(1.0));
    assert_eq!(value("gateway_cron_jobs_pending", &[]), Some(0.0), "the fired reminder's row is gone");
    assert_eq!(value("gateway_webhook_attempts_total", &[]), Some(1.0));
    assert_eq!(value("gateway_webhook_deliveries_total", &[("outcome", "failed_retrying")]), Some(0.0));
    assert_eq!(value("gateway_webhook_deliveries_total", &[("outcome", "dead")]), Some(0.0));
    assert_eq!(value("gateway_webhook_dead_letters", &[]), Some(0.0));
    assert_eq!(value("gateway_webhook_due_backlog", &[]), Some(0.0));
    assert_eq!(value("gateway_sse_streams_open", &[("scope", "agent")]), Some(1.0), "the reminder stream");
    assert_eq!(value("gateway_sse_streams_open", &[("scope", "operator")]), Some(0.0));
    assert_eq!(value("gateway_sse_lagged_events_total", &[]), Some(0.0));
    assert_eq!(value("gateway_agent_credential_reads_total", &[]), Some(0.0), "agent auth is off here");
    assert_eq!(value("gateway_agent_credentials_cached", &[]), Some(0.0));
    assert_eq!(value("gateway_leader", &[]), Some(1.0), "a single process leads");
    assert_eq!(value("gateway_leader_epoch", &[]), Some(1.0));
}

#[test]
fn pending_jobs_and_the_due_backlog_are_counted_in_the_database() {
    let gateway = Gateway::start(&["--webhook-allow-private-targets", "--webhook-retry-schedule-s", "3600"]);
    for n in 0..3 {
        let (status, job) = gateway.operator_post(
            "/gateway/cron/jobs",
            &json!({"agent_id": format!("agent-{n}"), "schedule": "0 0 1 1 *", "payload": {}}),
        );
        assert_eq!(status, 201, "{job}");
    }
    // A target that refuses connections: the attempt fails and the delivery waits an hour for its next one.
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "closed", "event_type": "push", "agent_intent": "review",
                "target_session": "s", "target_url": "http://127.0.0.1:9/closed", "secret": "metrics-secret"}),
    );
    assert_eq!(status, 201, "{config}");
    assert_eq!(
        gateway
            .operator_post(
                "/gateway/deliveries",
                &json!({"webhook_id": config["id"], "session_id": "s", "payload": {}})
            )
            .0,
        201
    );
    let mut families = BTreeSet::new();
    eventually("three jobs pending and the failed attempt counted", || {
        let exposition = parse(&scrape(&gateway, Some(TOKEN)).2);
        families = exposition.types.keys().cloned().collect();
        exposition.value("gateway_cron_jobs_pending", &[]) == Some(3.0)
            && exposition.value("gateway_webhook_deliveries_total", &[("outcome", "failed_retrying")]) == Some(1.0)
            && exposition.value("gateway_webhook_due_backlog", &[]) == Some(0.0)
            && exposition.value("gateway_webhook_dead_letters", &[]) == Some(0.0)
    });
    assert!(families.contains("gateway_webhook_due_backlog"));
}

/// With agent auth on, a credential is read from the database once and then answered from memory: three
/// heartbeats, one read; a made-up credential id is one read too, and remembered as refused.
#[test]
fn credential_reads_count_what_the_cache_could_not_answer() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let (status, issued) = gateway.operator_post("/gateway/agents/agent-c/credentials", &json!({}));
    assert_eq!(status, 201, "{issued}");
    let token = issued["token"].as_str().unwrap();
    let made_up = format!("agt_{}_{}", "0".repeat(24), "0".repeat(64));
    let heartbeat = json!({"type": "heartbeat", "agent_id": "agent-c", "cluster_id": "cluster-c"}).to_string();
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let send = |token: &str| {
        let request =
            agent.post(&gateway.url("/gateway/heartbeat")).header("authorization", &format!("Bearer {token}"));
        request.content_type("application/json").send(&heartbeat).unwrap().status().as_u16()
    };
    for _ in 0..3 {
        assert_eq!(send(token), 200);
        assert_eq!(send(&made_up), 401);
    }
    let (status, _, body) = scrape(&gateway, Some(TOKEN));
    assert_eq!(status, 200);
    let exposition = parse(&body);
    assert_eq!(exposition.value("gateway_agent_credential_reads_total", &[]), Some(2.0), "{body}");
    assert_eq!(exposition.value("gateway_agent_credentials_cached", &[]), Some(1.0), "{body}");
}
