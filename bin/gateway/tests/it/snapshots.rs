//! Snapshots of every route's answers, successes and refusals (`snapshots/it__snapshots__*.snap`, one file per
//! route, named by its metrics label, plus the OpenAPI document): a change of a body's shape, a status, a reason or
//! a detail is a visible diff of a committed file. `cargo insta review` (or `INSTA_UPDATE=always`) accepts an
//! intended change.
//!
//! One gateway on a fresh SQLite file answers a fixed sequence of requests, so ids are the same on every run;
//! instants, tokens and instance ids are replaced by placeholders ([`redact`]).

use std::collections::BTreeMap;
use std::io::{Read, Write};

use ring::hmac;
use serde_json::{Value, json};

use crate::support::{Gateway, PATIENCE, TOKEN, eventually};

/// One request and what came back.
struct Exchange {
    request: String,
    status: u16,
    /// The headers a client acts on (`Allow`, `Retry-After`, `Idempotent-Replayed`, `Content-Type` of non-JSON
    /// answers), when present.
    headers: BTreeMap<String, String>,
    body: Value,
}

/// Sends requests and keeps their exchanges by route label.
struct Recorder {
    gateway: Gateway,
    agent: ureq::Agent,
    routes: BTreeMap<&'static str, Vec<Exchange>>,
    /// Text of requests that differs from run to run (a credential id in a path), and what is shown instead.
    masks: Vec<(String, &'static str)>,
}

/// Who sends a request.
#[derive(Clone, Copy)]
enum As {
    Anyone,
    Operator,
}

const KEPT_HEADERS: [&str; 4] = ["allow", "retry-after", "idempotent-replayed", "cache-control"];

impl Recorder {
    fn new(gateway: Gateway) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(PATIENCE))
            .build()
            .new_agent();
        Self { gateway, agent, routes: BTreeMap::new(), masks: Vec::new() }
    }

    /// Sends `method path` with `body` (JSON unless `headers` say otherwise) and records it under `route`.
    fn send(
        &mut self,
        route: &'static str,
        who: As,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Value {
        let mut request = http::Request::builder().method(method).uri(self.gateway.url(path));
        if let As::Operator = who {
            request = request.header("authorization", format!("Bearer {TOKEN}"));
        }
        if body.is_some() && !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.unwrap_or_default().to_owned()).unwrap();
        let mut response = self.agent.run(request).unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers().get("content-type").map(|value| value.to_str().unwrap().to_owned());
        let mut kept: BTreeMap<String, String> = KEPT_HEADERS
            .iter()
            .filter_map(|name| Some(((*name).to_owned(), response.headers().get(*name)?.to_str().ok()?.to_owned())))
            .collect();
        let text = response.body_mut().read_to_string().unwrap();
        let sent = body;
        let body = match content_type.as_deref() {
            Some("application/json") => serde_json::from_str(&text).unwrap(),
            // A scrape or a console file: its type is the contract here (a scrape's series change with every
            // request; it/metrics.rs reads them).
            other => {
                kept.insert("content-type".to_owned(), other.unwrap_or("(none)").to_owned());
                json!(format!("({} text)", other.unwrap_or("no").split(';').next().unwrap_or_default()))
            }
        };
        let mut shown = format!("{method} {path}");
        if let As::Operator = who {
            shown.push_str(" (operator)");
        }
        for (name, value) in headers {
            shown.push_str(&format!(" [{name}: {value}]"));
        }
        if let Some(sent) = sent {
            shown.push_str(&format!(" {}", sent.chars().take(200).collect::<String>()));
        }
        for (text, placeholder) in &self.masks {
            shown = shown.replace(text.as_str(), placeholder);
        }
        let answer = body.clone();
        self.routes.entry(route).or_default().push(Exchange { request: shown, status, headers: kept, body });
        answer
    }

    fn operator(&mut self, route: &'static str, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|body| body.to_string());
        self.send(route, As::Operator, method, path, body.as_deref(), &[])
    }

    fn anyone(&mut self, route: &'static str, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|body| body.to_string());
        self.send(route, As::Anyone, method, path, body.as_deref(), &[])
    }

    /// Records the opening of an event stream: its status, headers and first bytes (a stream does not end).
    fn open_stream(&mut self, route: &'static str, path: &str) {
        let address = self.gateway.authority().to_owned();
        let mut connection = std::net::TcpStream::connect(&address).unwrap();
        connection.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(connection, "GET {path} HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\n\r\n").unwrap();
        let mut received = Vec::new();
        let mut buffer = [0; 1024];
        while !String::from_utf8_lossy(&received).contains(": connected") {
            let read = connection.read(&mut buffer).unwrap();
            assert!(read > 0, "the stream ended: {}", String::from_utf8_lossy(&received));
            received.extend_from_slice(&buffer[..read]);
        }
        let text = String::from_utf8_lossy(&received).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter_map(|line| line.split_once(": "))
            .filter(|(name, _)| ["content-type", "cache-control"].contains(&name.to_ascii_lowercase().as_str()))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
            .collect();
        // Chunked: the first chunk's size line, then the opening comment.
        let opening = body.lines().find(|line| line.starts_with(':')).unwrap_or_default().to_owned();
        let request = format!("GET {path} (operator)");
        self.routes.entry(route).or_default().push(Exchange { request, status, headers, body: json!(opening) });
    }
}

/// Replaces what differs from run to run (instants, tokens, instance ids, fire ids, measured durations) by
/// placeholders; `null`s stay, so that a field's nullability shows.
fn redact(value: &mut Value) {
    const IDS: [&str; 4] = ["token", "credential_id", "instance_id", "fire_id"];
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match field {
                    Value::String(_) if IDS.contains(&key.as_str()) => *field = json!(format!("[{key}]")),
                    // An attempt's duration is measured: 0 or 1 ms on loopback, depending on the machine's load.
                    Value::Number(_) if key == "duration_ms" => *field = json!("[duration_ms]"),
                    Value::String(_) if key == "next_after" && fields_cursor(field) => *field = json!("[cursor]"),
                    _ => redact(field),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) if gateway_core::encoding::rfc3339::parse(text).is_some() => {
            assert_one_instant_shape(text);
            *value = json!("[instant]");
        }
        _ => {}
    }
}

/// A credential cursor (24 hex digits) rather than an agent id.
fn fields_cursor(value: &Value) -> bool {
    value.as_str().is_some_and(|text| text.len() == 24 && text.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

#[test]
fn every_routes_answers_match_their_snapshots() {
    let mut recorder = Recorder::new(Gateway::start(&[]));
    let r = &mut recorder;

    // Probes.
    r.anyone("healthz", "GET", "/healthz", None);
    r.anyone("readyz", "GET", "/readyz", None);
    r.operator("readyz", "GET", "/readyz", None);
    r.operator("cluster", "GET", "/gateway/cluster", None);
    r.anyone("cluster", "GET", "/gateway/cluster", None);

    // Heartbeats and the live agents.
    let heartbeat = json!({"type": "heartbeat", "agent_id": "snap-agent", "cluster_id": "mesh-1",
                           "timestamp": "2026-02-22T12:00:00Z"});
    r.anyone("heartbeat", "POST", "/gateway/heartbeat", Some(heartbeat.clone()));
    r.anyone(
        "heartbeat",
        "POST",
        "/gateway/heartbeat",
        Some(json!({"type": "ping", "agent_id": "a", "cluster_id": "c"})),
    );
    r.anyone("heartbeat", "POST", "/gateway/heartbeat", Some(json!({"type": "heartbeat", "cluster_id": "c"})));
    r.anyone(
        "heartbeat",
        "POST",
        "/gateway/heartbeat",
        Some(json!({"type": "heartbeat", "agent_id": 7, "cluster_id": "c"})),
    );
    r.send("heartbeat", As::Anyone, "POST", "/gateway/heartbeat", Some("{"), &[]);
    r.send("heartbeat", As::Anyone, "POST", "/gateway/heartbeat", Some("x"), &[("content-type", "text/plain")]);
    r.send("heartbeat", As::Anyone, "POST", "/gateway/heartbeat", Some("{}"), &[("host", "example.com")]);
    r.send("heartbeat", As::Anyone, "POST", "/gateway/heartbeat", Some("{}"), &[("origin", "http://example.com")]);
    r.anyone("heartbeat", "GET", "/gateway/heartbeat", None);

    let log = json!({
        "meta": {"trace_id": "trace-1", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "snap-agent", "agent_type": "researcher", "capability_version": "1.4.0"},
        "cognition": {"intent": "check the quota"},
        "action": {"status": "success"},
    });
    r.anyone("messages", "POST", "/gateway/messages", Some(log));
    r.anyone("messages", "POST", "/gateway/messages", Some(json!({"meta": {"trace_id": "trace-2"}})));
    r.anyone(
        "messages",
        "POST",
        "/gateway/messages",
        Some(json!({"meta": {"trace_id": "t", "timestamp": "2026-02-22T12:00:00Z"}})),
    );

    r.operator("agents", "GET", "/gateway/agents", None);
    r.operator("agents", "GET", "/gateway/agents?limit=0", None);
    r.anyone("agents", "GET", "/gateway/agents", None);

    // Tools and the mailbox.
    let call = |tool_call_id: &str, params: Value| json!({"agent_id": "snap-agent", "tool_call_id": tool_call_id, "params": params});
    r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_reminder",
        Some(call("call-1", json!({"delay_ms": 1, "payload": {"task": "now"}}))),
    );
    r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_reminder",
        Some(call("call-1", json!({"delay_ms": 1, "payload": {"task": "now"}}))),
    );
    r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_reminder",
        Some(call("call-1", json!({"delay_ms": 2, "payload": {}}))),
    );
    r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_reminder",
        Some(call("call-2", json!({"delay_ms": 0, "payload": {}}))),
    );
    let later = r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_reminder",
        Some(call("call-3", json!({"delay_ms": 3_600_000, "payload": {"task": "later"}}))),
    );
    let later_job = later["result"]["job_id"].as_i64().unwrap();
    let mailbox = "/gateway/agents/snap-agent/reminders";
    let gateway = &r.gateway;
    eventually("the reminder in the mailbox", || {
        gateway.get(mailbox).1["reminders"].as_array().is_some_and(|reminders| !reminders.is_empty())
    });
    r.anyone("tool", "POST", "/gateway/tools/list_reminders", Some(call("call-4", json!({}))));
    r.anyone("tool", "POST", "/gateway/tools/cancel_reminder", Some(call("call-5", json!({"job_id": later_job}))));
    r.anyone("tool", "POST", "/gateway/tools/cancel_reminder", Some(call("call-6", json!({"job_id": later_job}))));
    r.anyone("tool", "POST", "/gateway/tools/cancel_reminder", Some(call("call-7", json!({}))));
    r.anyone("tool", "POST", "/gateway/tools/forget_everything", Some(call("call-8", json!({}))));
    r.anyone("tool", "POST", "/gateway/tools/list_reminders", Some(json!({"agent_id": "snap-agent"})));

    r.anyone("agent_reminders", "GET", mailbox, None);
    r.anyone("agent_reminders", "GET", "/gateway/agents/snap-agent/reminders?after=x%00y", None);
    r.anyone("agent_reminders", "GET", "/gateway/agents/snap-agent/reminders?limit=5000", None);
    r.anyone("agent_reminders", "GET", "/gateway/agents/%0A/reminders", None);

    r.anyone("events", "GET", "/gateway/events", None);
    r.anyone("events", "GET", "/gateway/events?topic=gateway:elsewhere", None);
    r.anyone("events", "GET", "/gateway/events?topic=gateway:messages", None);
    r.open_stream("events", "/gateway/events?topic=gateway:messages");

    // Agent credentials.
    let credentials = "/gateway/agents/snap-agent/credentials";
    let issued = r.operator("agent_credentials", "POST", credentials, Some(json!({"expires_in_s": 86_400})));
    r.operator("agent_credentials", "POST", credentials, None);
    r.operator("agent_credentials", "POST", credentials, Some(json!({"expires_in_s": 0})));
    r.operator("agent_credentials", "POST", credentials, Some(json!({"scope": "all"})));
    r.operator("agent_credentials", "GET", credentials, None);
    r.operator("agent_credentials", "GET", &format!("{credentials}?limit=1"), None);
    r.anyone("agent_credentials", "GET", credentials, None);
    let credential = issued["credential_id"].as_str().unwrap().to_owned();
    r.masks.push((credential.clone(), "{credential_id}"));
    r.operator("agent_credential", "DELETE", &format!("{credentials}/{credential}"), None);
    r.operator("agent_credential", "DELETE", &format!("{credentials}/{credential}"), None);
    r.operator("agent_credential", "DELETE", &format!("{credentials}/0123456789abcdef01234567"), None);
    r.operator("agent_credential", "GET", &format!("{credentials}/{credential}"), None);
    r.operator("credentials", "GET", "/gateway/credentials", None);
    r.operator("credentials", "GET", "/gateway/credentials?limit=1", None);
    r.operator("credentials", "GET", "/gateway/credentials?after=xyz", None);
    r.anyone("credentials", "GET", "/gateway/credentials", None);
    // The hourly history: a config with no deliveries, so that its values do not depend on timing.
    r.operator("history", "GET", "/gateway/history?hours=2&webhook_id=999999", None);
    r.operator("history", "GET", "/gateway/history?hours=0", None);
    r.anyone("history", "GET", "/gateway/history", None);

    // Webhook configs, inbound webhooks and deliveries (targets on loopback are refused: each attempt fails at
    // once, the same way on every run).
    let config = json!({"source_identifier": "github", "event_type": "push", "agent_intent": "review_code",
                        "target_session": "session-1", "target_url": "http://127.0.0.1:9/in", "secret": "snap-secret"});
    let created = r.operator("webhook_configs", "POST", "/gateway/webhook-configs", Some(config.clone()));
    r.operator("webhook_configs", "POST", "/gateway/webhook-configs", Some(config));
    r.operator("webhook_configs", "POST", "/gateway/webhook-configs", Some(json!({"source_identifier": "github"})));
    r.operator("webhook_configs", "GET", "/gateway/webhook-configs", None);
    r.operator("webhook_configs", "GET", "/gateway/webhook-configs?limit=1", None);
    r.anyone("webhook_configs", "GET", "/gateway/webhook-configs", None);
    let webhook = created["id"].as_i64().unwrap();
    let config_path = format!("/gateway/webhook-configs/{webhook}");
    r.operator("webhook_config", "GET", &config_path, None);
    r.operator("webhook_config", "PATCH", &config_path, Some(json!({"agent_intent": "triage"})));
    r.operator("webhook_config", "PATCH", &config_path, Some(json!({})));
    r.operator("webhook_config", "GET", "/gateway/webhook-configs/999", None);
    r.operator("webhook_config", "GET", "/gateway/webhook-configs/x", None);
    r.operator("webhook_config", "PUT", &config_path, Some(json!({})));
    r.operator("webhook_config", "PATCH", &config_path, Some(json!({"rate_limit_per_second": 2})));
    r.operator("webhook_config", "PATCH", &config_path, Some(json!({"rate_limit_per_second": 0})));
    r.operator("webhook_config", "PATCH", &config_path, Some(json!({"rate_limit_per_second": null})));

    let inbound = format!("/gateway/webhooks/{webhook}");
    let payload = br#"{"ref":"main"}"#;
    let signed = signature("snap-secret", payload);
    let body = std::str::from_utf8(payload).unwrap();
    r.send("webhook_inbound", As::Anyone, "POST", &inbound, Some(body), &[("x-observatory-signature", &signed)]);
    r.send("webhook_inbound", As::Anyone, "POST", &inbound, Some(body), &[("x-observatory-signature", &signed)]);
    r.send("webhook_inbound", As::Anyone, "POST", &inbound, Some(body), &[("x-observatory-signature", "sha256=00")]);
    r.send("webhook_inbound", As::Anyone, "POST", "/gateway/webhooks/999", Some(body), &[]);

    let delivery = json!({"webhook_id": webhook, "session_id": "session-1", "payload": {"order": 17}});
    let enqueued = r.send(
        "deliveries",
        As::Operator,
        "POST",
        "/gateway/deliveries",
        Some(&delivery.to_string()),
        &[("idempotency-key", "snap-1")],
    );
    let delivery_id = enqueued["id"].as_i64().unwrap();
    let delivery_path = format!("/gateway/deliveries/{delivery_id}");
    let gateway = &r.gateway;
    // Both deliveries (the inbound one, and this) are attempted at once: their first attempts are waited for.
    for id in 1..=delivery_id {
        eventually("a delivery's first attempt", || {
            gateway.operator_get(&format!("/gateway/deliveries/{id}")).1["attempt_count"] == 1
        });
    }
    r.send(
        "deliveries",
        As::Operator,
        "POST",
        "/gateway/deliveries",
        Some(&delivery.to_string()),
        &[("idempotency-key", "snap-1")],
    );
    r.operator(
        "deliveries",
        "POST",
        "/gateway/deliveries",
        Some(json!({"webhook_id": 999, "session_id": "s", "payload": 1})),
    );
    r.operator("deliveries", "POST", "/gateway/deliveries", Some(json!({"webhook_id": webhook, "session_id": "s"})));
    // After the inbound delivery, whose envelope (and so its size and signature) carries the instant it came in.
    r.operator("deliveries", "GET", "/gateway/deliveries?session_id=session-1&after_id=1", None);
    r.operator("deliveries", "GET", &format!("/gateway/deliveries?session_id=session-1&after_id={delivery_id}"), None);
    r.operator("deliveries", "GET", "/gateway/deliveries?status=gone", None);
    r.operator("delivery", "GET", &delivery_path, None);
    r.operator("delivery", "GET", "/gateway/deliveries/999", None);
    r.operator("delivery_retry", "POST", &format!("{delivery_path}/retry"), None);
    r.operator("delivery_retry", "POST", "/gateway/deliveries/999/retry", None);

    // Fan-out: the config above is subscribed to "push".
    let event = json!({"event_type": "push", "payload": {"ref": "main"}}).to_string();
    let keyed = [("idempotency-key", "snap-event")];
    let published = r.send("webhook_events", As::Operator, "POST", "/gateway/webhook-events", Some(&event), &keyed);
    // Its delivery's first attempt is waited for, as the others' are: the metrics below count it.
    let fanned_out = published["delivery_ids"][0].as_i64().unwrap();
    eventually("the fanned-out delivery's first attempt", || {
        r.gateway.operator_get(&format!("/gateway/deliveries/{fanned_out}")).1["attempt_count"] == 1
    });
    r.send("webhook_events", As::Operator, "POST", "/gateway/webhook-events", Some(&event), &keyed);
    let other = json!({"event_type": "push", "payload": {"ref": "dev"}}).to_string();
    r.send("webhook_events", As::Operator, "POST", "/gateway/webhook-events", Some(&other), &keyed);
    let unheard = json!({"event_type": "release", "payload": {}});
    r.operator("webhook_events", "POST", "/gateway/webhook-events", Some(unheard));
    r.operator("webhook_events", "POST", "/gateway/webhook-events", Some(json!({"event_type": "*", "payload": {}})));
    r.operator("webhook_events", "POST", "/gateway/webhook-events", Some(json!({"event_type": "push"})));
    r.anyone("webhook_events", "POST", "/gateway/webhook-events", Some(json!({"event_type": "push", "payload": {}})));

    // Cron jobs.
    let job = json!({"agent_id": "snap-agent", "schedule": "0 0 1 1 *", "payload": {"task": "yearly"}});
    let created = r.operator("cron_jobs", "POST", "/gateway/cron/jobs", Some(job));
    r.operator(
        "cron_jobs",
        "POST",
        "/gateway/cron/jobs",
        Some(json!({"agent_id": "snap-agent", "schedule": "61 * * * *"})),
    );
    r.operator("cron_jobs", "POST", "/gateway/cron/jobs", Some(json!({"schedule": "* * * * *"})));
    r.operator("cron_jobs", "GET", "/gateway/cron/jobs", None);
    r.operator("cron_jobs", "GET", "/gateway/cron/jobs?after_id=x", None);
    let job_path = format!("/gateway/cron/jobs/{}", created["id"]);
    r.operator("cron_job", "GET", &job_path, None);
    r.operator("cron_job_pause", "POST", &format!("{job_path}/pause"), None);
    r.operator("cron_job_pause", "POST", "/gateway/cron/jobs/999/pause", None);
    r.operator("cron_job_resume", "POST", &format!("{job_path}/resume"), None);
    r.operator("cron_job_resume", "GET", &format!("{job_path}/resume"), None);
    r.operator(
        "cron_jobs",
        "POST",
        "/gateway/cron/jobs",
        Some(json!({"agent_id": "snap-agent", "schedule": "0 0 1 1 *", "misfire_policy": "skip"})),
    );
    r.operator(
        "cron_jobs",
        "POST",
        "/gateway/cron/jobs",
        Some(json!({"agent_id": "snap-agent", "schedule": "0 0 1 1 *", "misfire_policy": "later"})),
    );
    // A job that has not fired yet has no runs; a fired one's runs carry instants and lateness that differ from run
    // to run, which the misfire tests check instead.
    r.operator("cron_job_runs", "GET", &format!("{job_path}/runs"), None);
    r.operator("cron_job_runs", "GET", &format!("{job_path}/runs?limit=500"), None);
    r.operator("cron_job_runs", "GET", &format!("{job_path}/runs?limit=501"), None);
    r.operator("cron_job_runs", "GET", &format!("{job_path}/runs?limit=0"), None);
    r.operator("cron_job_runs", "GET", &format!("{job_path}/runs?after_id=1"), None);
    r.operator("cron_job_runs", "GET", "/gateway/cron/jobs/999/runs", None);
    r.operator("cron_job_runs", "POST", &format!("{job_path}/runs"), None);
    r.operator("cron_job", "DELETE", &job_path, None);
    r.operator("cron_job", "GET", &job_path, None);
    // In a time zone (preview_local), and one the tz database does not know.
    let zoned = json!({"agent_id": "snap-agent", "schedule": "30 2 * * *", "timezone": "America/New_York"});
    let zoned = r.operator("cron_jobs", "POST", "/gateway/cron/jobs", Some(zoned));
    r.operator(
        "cron_jobs",
        "POST",
        "/gateway/cron/jobs",
        Some(json!({"agent_id": "snap-agent", "schedule": "30 2 * * *", "timezone": "Mars/Olympus_Mons"})),
    );
    r.operator("cron_job", "DELETE", &format!("/gateway/cron/jobs/{}", zoned["id"]), None);

    // The agent's recurring job, through its tool: scheduled, refused in a zone that does not exist, listed,
    // cancelled.
    let call = |tool_call_id: &str, params: Value| json!({"agent_id": "snap-agent", "tool_call_id": tool_call_id, "params": params});
    let recurring = json!({"schedule": "0 9 * * mon-fri", "timezone": "Europe/Paris", "payload": {"task": "standup"}});
    let scheduled = r.anyone("tool", "POST", "/gateway/tools/schedule_recurring", Some(call("call-9", recurring)));
    r.anyone(
        "tool",
        "POST",
        "/gateway/tools/schedule_recurring",
        Some(call("call-10", json!({"schedule": "0 9 * * *", "timezone": "Mars/Olympus_Mons", "payload": {}}))),
    );
    r.anyone("tool", "POST", "/gateway/tools/list_reminders", Some(call("call-11", json!({}))));
    let recurring_job = scheduled["result"]["job_id"].clone();
    r.anyone("tool", "POST", "/gateway/tools/cancel_reminder", Some(call("call-12", json!({"job_id": recurring_job}))));

    // Recover, resend, test (DESIGN.md §18). The new deliveries' first attempts are waited for, as the others' are.
    let recover_path = format!("{config_path}/recover");
    let window = json!({"since": "2026-02-22T00:00:00Z", "until": "2026-02-23T00:00:00Z"});
    r.operator("webhook_config_recover", "POST", &recover_path, Some(window));
    let backwards = json!({"since": "2026-02-23T00:00:00Z", "until": "2026-02-22T00:00:00Z"});
    r.operator("webhook_config_recover", "POST", &recover_path, Some(backwards));
    r.operator("webhook_config_recover", "POST", &recover_path, Some(json!({})));
    r.operator(
        "webhook_config_recover",
        "POST",
        "/gateway/webhook-configs/999/recover",
        Some(json!({"since": "2026-02-22T00:00:00Z", "until": "2026-02-23T00:00:00Z"})),
    );
    let tested = r.operator("webhook_config_test", "POST", &format!("{config_path}/test"), None);
    r.operator("webhook_config_test", "POST", "/gateway/webhook-configs/999/test", None);
    let resent = r.operator(
        "webhook_delivery_resend",
        "POST",
        &format!("/gateway/webhook-deliveries/{delivery_id}/resend"),
        None,
    );
    r.operator("webhook_delivery_resend", "POST", "/gateway/webhook-deliveries/999/resend", None);
    r.operator("webhook_delivery_resend", "GET", &format!("/gateway/webhook-deliveries/{delivery_id}/resend"), None);
    for id in [&tested, &resent].map(|answer| answer["delivery_id"].as_i64().unwrap()) {
        eventually("a new delivery's first attempt", || {
            r.gateway.operator_get(&format!("/gateway/deliveries/{id}")).1["attempt_count"] == 1
        });
    }

    // Deletes last: a config takes its deliveries with it.
    r.operator("webhook_config", "DELETE", &config_path, None);
    r.operator("webhook_config", "DELETE", &config_path, None);

    // MCP (`/mcp`): on this open loopback gateway the agent is named in X-Agent-Id.
    let agent = ("x-agent-id", "snap-agent");
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "snap", "version": "1"}}})
    .to_string();
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&initialize), &[]);
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&initialize), &[agent]);
    let answer = r.agent.post(r.gateway.url("/mcp")).header(agent.0, agent.1).send(initialize.as_str()).unwrap();
    let session = answer.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    r.masks.push((session.clone(), "[session]"));
    let in_session = [agent, ("mcp-session-id", session.as_str())];
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&ping), &[agent]);
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&ping), &[agent, ("mcp-session-id", "no-such-session")]);
    let refused = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "schedule_reminder", "arguments": {"delay_ms": 0, "payload": {}}}});
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&refused.to_string()), &in_session);
    let unknown = json!({"jsonrpc": "2.0", "id": 3, "method": "no/such"}).to_string();
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&unknown), &in_session);
    r.send("mcp", As::Anyone, "POST", "/mcp", Some("{\"jsonrpc\":"), &in_session);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    r.send("mcp", As::Anyone, "POST", "/mcp", Some(&initialized), &in_session);
    r.send("mcp", As::Anyone, "GET", "/mcp", None, &[agent]);
    r.send("mcp", As::Anyone, "DELETE", "/mcp", None, &in_session);
    r.send("mcp", As::Anyone, "DELETE", "/mcp", None, &in_session);

    // The operator surface.
    r.operator("metrics", "GET", "/metrics", None);
    r.anyone("metrics", "GET", "/metrics", None);
    r.anyone("console", "GET", "/", None);
    r.anyone("console_asset", "GET", "/console/app.js", None);
    r.anyone("console_asset", "GET", "/console/nothing.js", None);
    r.anyone("openapi", "GET", "/openapi.json", None);
    r.anyone(gateway::UNMATCHED_ROUTE, "GET", "/gateway/nothing", None);

    // Every route is snapshotted: the labels are the route table's.
    let labels: Vec<&str> = gateway::ROUTE_NAMES.to_vec();
    let recorded: Vec<&str> = recorder.routes.keys().copied().collect();
    let mut expected = labels.clone();
    expected.sort_unstable();
    assert_eq!(recorded, expected, "one snapshot per route label");

    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots");
    settings.bind(|| {
        for (label, exchanges) in recorder.routes {
            let shown: Vec<Value> = exchanges
                .into_iter()
                .map(|exchange| {
                    let mut body = exchange.body;
                    if label == "openapi" {
                        // The whole document is its own snapshot, below; this one shows the answer.
                        body = json!("(the document)");
                    }
                    redact(&mut body);
                    let mut shown = json!({"request": exchange.request, "status": exchange.status, "body": body});
                    if !exchange.headers.is_empty() {
                        shown["headers"] = json!(exchange.headers);
                    }
                    shown
                })
                .collect();
            insta::assert_json_snapshot!(label, shown);
        }
    });
}

/// The OpenAPI document as served (its version aside): every change of a path, an operation or a schema shows.
#[test]
fn the_openapi_document_matches_its_snapshot() {
    let gateway = Gateway::start(&[]);
    let (status, mut document) = gateway.get("/openapi.json");
    assert_eq!(status, 200);
    document["info"]["version"] = json!("[version]");
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots");
    settings.bind(|| insta::assert_json_snapshot!("openapi_document", document));
}

/// Every instant an answer holds is written one way (docs/api.md, "Instants"): to the second, or to the millisecond
/// with one to three digits, the last not a zero — never the 6 or 9 digits some fields had.
fn assert_one_instant_shape(text: &str) {
    let seconds_end = "2026-02-22T12:00:05".len();
    let fraction = text.get(seconds_end..).and_then(|rest| rest.strip_prefix('.'));
    if let Some(fraction) = fraction {
        let digits: String = fraction.chars().take_while(char::is_ascii_digit).collect();
        assert!((1..=3).contains(&digits.len()) && !digits.ends_with('0'), "an instant written as {text}");
    }
}
