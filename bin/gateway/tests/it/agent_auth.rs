//! Agent credentials and per-agent rate limits against the real binary (docs/api.md, "Agent credentials",
//! "Agent authentication", "Rate limits"). The harness listens on loopback, where `--agent-auth auto` is open, so
//! the tests about authentication pass `--agent-auth required`; it/config.rs checks what `auto` does elsewhere.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{EventStream, Gateway, PATIENCE, TOKEN, eventually};

/// A request with an optional bearer token; the status, headers and JSON body (or `null`).
fn send(gateway: &Gateway, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Answer {
    let agent = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build();
    let agent = agent.new_agent();
    let url = gateway.url(path);
    let authorization = token.map(|token| format!("Bearer {token}"));
    let response = match (method, body) {
        ("POST", body) => {
            let mut request = agent.post(&url).content_type("application/json");
            if let Some(value) = &authorization {
                request = request.header("authorization", value);
            }
            request.send(body.map_or_else(String::new, Value::to_string))
        }
        ("GET", None) | ("DELETE", None) => {
            let mut request = if method == "GET" { agent.get(&url) } else { agent.delete(&url) };
            if let Some(value) = &authorization {
                request = request.header("authorization", value);
            }
            request.call()
        }
        _ => unreachable!("{method} with a body"),
    };
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.body_mut().read_to_string().unwrap();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    Answer { status, headers, body }
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

impl Answer {
    fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or_default()
    }
}

/// Issues a credential for `agent` with the operator token: its id and token.
fn issue(gateway: &Gateway, agent: &str) -> (String, String) {
    let answer = send(gateway, "POST", &format!("/gateway/agents/{agent}/credentials"), Some(TOKEN), None);
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = answer.body["credential_id"].as_str().unwrap().to_owned();
    (id, answer.body["token"].as_str().unwrap().to_owned())
}

fn heartbeat(agent: &str) -> Value {
    json!({"type": "heartbeat", "agent_id": agent, "cluster_id": "c-1", "timestamp": "2026-02-22T12:00:00Z"})
}

fn decision_log(agent: &str, trace: usize) -> Value {
    json!({
        "meta": {"trace_id": format!("trace-{trace}"), "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": agent, "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "success"}
    })
}

fn stream(gateway: &Gateway, agent: &str, token: Option<&str>) -> EventStream {
    EventStream::open(&gateway.url(&format!("/gateway/events?topic=agent:{agent}:scheduled")), token)
}

#[test]
fn credentials_are_issued_once_listed_without_tokens_and_revoked_at_once() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let anonymous = send(&gateway, "POST", "/gateway/agents/agent-a/credentials", None, None);
    assert_eq!((anonymous.status, anonymous.reason()), (401, "unauthorized"));

    let answer = send(&gateway, "POST", "/gateway/agents/agent-a/credentials", Some(TOKEN), Some(&json!({})));
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.headers["cache-control"], "no-store");
    assert_eq!(answer.body["agent_id"], "agent-a");
    let (id, token) = (answer.body["credential_id"].as_str().unwrap(), answer.body["token"].as_str().unwrap());
    assert!(token.starts_with(&format!("agt_{id}_")), "the token carries its credential id");
    let (second_id, second_token) = issue(&gateway, "agent-a");
    let unknown_field =
        send(&gateway, "POST", "/gateway/agents/agent-a/credentials", Some(TOKEN), Some(&json!({"x": 1})));
    assert_eq!((unknown_field.status, unknown_field.reason()), (422, "invalid_field"));

    let listed = send(&gateway, "GET", "/gateway/agents/agent-a/credentials", Some(TOKEN), None);
    assert_eq!(listed.status, 200);
    let credentials = listed.body["credentials"].as_array().unwrap();
    let ids: Vec<&str> = credentials.iter().map(|row| row["credential_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id, second_id.as_str()], "oldest first");
    assert!(credentials.iter().all(|row| row.get("token").is_none() && row["revoked_at"].is_null()));
    assert!(!listed.body.to_string().contains(&token[token.len() - 64..]), "no secret in the list");

    assert_eq!(send(&gateway, "POST", "/gateway/heartbeat", Some(token), Some(&heartbeat("agent-a"))).status, 200);
    let path = format!("/gateway/agents/agent-a/credentials/{id}");
    let revoked = send(&gateway, "DELETE", &path, Some(TOKEN), None);
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.body["status"], "revoked");
    let revoked_at = revoked.body["revoked_at"].as_str().unwrap().to_owned();
    // At once: the very next request with it is refused; the other credential still works.
    let refused = send(&gateway, "POST", "/gateway/heartbeat", Some(token), Some(&heartbeat("agent-a")));
    assert_eq!((refused.status, refused.reason()), (401, "unauthorized"));
    assert_eq!(
        send(&gateway, "POST", "/gateway/heartbeat", Some(&second_token), Some(&heartbeat("agent-a"))).status,
        200
    );

    let again = send(&gateway, "DELETE", &path, Some(TOKEN), None);
    assert_eq!((again.status, again.body["revoked_at"].as_str()), (200, Some(revoked_at.as_str())), "idempotent");
    let elsewhere = send(&gateway, "DELETE", &format!("/gateway/agents/agent-b/credentials/{id}"), Some(TOKEN), None);
    assert_eq!((elsewhere.status, elsewhere.reason()), (404, "unknown_credential"), "another agent's");
    let malformed = send(&gateway, "DELETE", "/gateway/agents/agent-a/credentials/xyz", Some(TOKEN), None);
    assert_eq!((malformed.status, malformed.reason()), (404, "unknown_credential"));
    let by_agent = send(&gateway, "DELETE", &path, Some(&second_token), None);
    assert_eq!(by_agent.status, 401, "only the operator revokes");

    let listed = send(&gateway, "GET", "/gateway/agents/agent-a/credentials?limit=1", Some(TOKEN), None);
    assert_eq!(listed.body["credentials"][0]["revoked_at"], revoked_at.as_str());
    assert_eq!(listed.body["next_after"], id);
    gateway.wait_for_log("agent credential revoked");
    let logs = gateway.logs();
    assert!(!logs.contains(&token[4..]) && !logs.contains(&second_token[4..]), "no token in the logs");
}

/// `GET /gateway/credentials` lists every agent's credentials by id, in pages, operator only; a credential used
/// shows its `last_used_at` (the start of the minute of the use) once the instance has recorded its uses
/// (`--last-use-interval-s 1` here), and one never used stays null.
#[test]
fn every_agents_credentials_list_in_one_place_with_their_last_use() {
    let gateway = Gateway::start(&["--agent-auth", "required", "--last-use-interval-s", "1"]);
    let (used_id, used_token) = issue(&gateway, "agent-a");
    let (unused_id, _) = issue(&gateway, "agent-b");
    let listed = send(&gateway, "GET", "/gateway/credentials", Some(TOKEN), None);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let rows = listed.body["credentials"].as_array().unwrap().clone();
    let ids: Vec<&str> = rows.iter().map(|row| row["credential_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [used_id.as_str(), unused_id.as_str()], "both agents', oldest first");
    assert_eq!(rows[1]["agent_id"], "agent-b");
    assert!(rows.iter().all(|row| row["last_used_at"].is_null() && row.get("token").is_none()), "{rows:?}");

    let before = time::OffsetDateTime::now_utc();
    assert_eq!(
        send(&gateway, "POST", "/gateway/heartbeat", Some(&used_token), Some(&heartbeat("agent-a"))).status,
        200
    );
    let mut last_used_at = String::new();
    eventually("the use to be recorded", || {
        let listed = send(&gateway, "GET", "/gateway/credentials", Some(TOKEN), None);
        last_used_at = listed.body["credentials"][0]["last_used_at"].as_str().unwrap_or_default().to_owned();
        !last_used_at.is_empty()
    });
    let recorded = gateway_core::encoding::rfc3339::parse(&last_used_at).unwrap();
    assert_eq!(recorded.second(), 0, "to the minute: {last_used_at}");
    assert!(recorded <= time::OffsetDateTime::now_utc(), "{last_used_at}");
    assert!(before - recorded < time::Duration::seconds(60), "the minute of the use: {last_used_at}");
    let agent_list = send(&gateway, "GET", "/gateway/agents/agent-a/credentials", Some(TOKEN), None);
    assert_eq!(agent_list.body["credentials"][0]["last_used_at"], last_used_at.as_str(), "the agent's list too");

    let first = send(&gateway, "GET", "/gateway/credentials?limit=1", Some(TOKEN), None);
    assert_eq!(first.body["next_after"], used_id.as_str());
    let rest = send(&gateway, "GET", &format!("/gateway/credentials?after={used_id}"), Some(TOKEN), None);
    assert_eq!(rest.body["credentials"].as_array().unwrap().len(), 1);
    assert!(rest.body["credentials"][0]["last_used_at"].is_null(), "never used: {}", rest.body);
    assert_eq!(send(&gateway, "GET", "/gateway/credentials", None, None).status, 401);
    assert_eq!(send(&gateway, "GET", "/gateway/credentials", Some(&used_token), None).status, 401);
    let bad = send(&gateway, "GET", "/gateway/credentials?after=xyz", Some(TOKEN), None);
    assert_eq!((bad.status, bad.reason()), (400, "invalid_query"));
}

#[test]
fn with_auth_required_an_agent_acts_and_reads_only_as_itself() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let (_, a) = issue(&gateway, "agent-a");
    let (_, b) = issue(&gateway, "agent-b");
    let post = |path: &str, token: Option<&str>, body: &Value| send(&gateway, "POST", path, token, Some(body));

    // 401 before anything about the body: no token, a malformed one, an unknown one.
    let forged = format!("{}{}", &a[..a.len() - 1], if a.ends_with('0') { '1' } else { '0' });
    for token in [None, Some("agt_nonsense"), Some(forged.as_str())] {
        for (path, body) in [("/gateway/heartbeat", heartbeat("agent-a")), ("/gateway/messages", json!({"x": []}))] {
            let answer = post(path, token, &body);
            assert_eq!((answer.status, answer.reason()), (401, "unauthorized"), "{path} {token:?}");
        }
        assert_eq!(stream(&gateway, "agent-a", token).status, 401, "{token:?}");
    }

    assert_eq!(post("/gateway/heartbeat", Some(&a), &heartbeat("agent-a")).status, 200);
    let mismatch = post("/gateway/heartbeat", Some(&a), &heartbeat("agent-b"));
    assert_eq!((mismatch.status, mismatch.reason()), (403, "identity_mismatch"));
    let operator = post("/gateway/heartbeat", Some(TOKEN), &heartbeat("agent-a"));
    assert_eq!((operator.status, operator.reason()), (403, "identity_mismatch"), "the operator is not an agent");

    assert_eq!(post("/gateway/messages", Some(&a), &decision_log("agent-a", 1)).status, 202);
    let as_other = post("/gateway/messages", Some(&a), &decision_log("agent-b", 2));
    assert_eq!((as_other.status, as_other.reason()), (403, "identity_mismatch"));
    let anonymous_log = json!({"meta": {"trace_id": "t", "timestamp": "2026-02-22T12:00:00Z"}});
    let nameless = post("/gateway/messages", Some(&a), &anonymous_log);
    assert_eq!((nameless.status, nameless.reason()), (403, "identity_mismatch"), "a log must name its agent");
    // An invalid log naming another agent is refused as the other agent's; one whose agent cannot be read gets
    // its schema answer.
    let invalid_other = post("/gateway/messages", Some(&a), &json!({"identity": {"agent_id": "agent-b"}}));
    assert_eq!(invalid_other.status, 403);
    let invalid = post("/gateway/messages", Some(&a), &json!({"identity": {"agent_type": "x"}}));
    assert_eq!((invalid.status, invalid.body["reason"].as_str()), (422, Some("schema_violation")));

    let own = stream(&gateway, "agent-a", Some(&a));
    assert_eq!(own.status, 200);
    assert_eq!(stream(&gateway, "agent-a", Some(&b)).status, 403);
    assert_eq!(stream(&gateway, "agent-a", Some(TOKEN)).status, 200, "the operator may read any agent's stream");
    assert_eq!(gateway.subscribe("gateway:messages").status, 200, "operator topics as before");

    // The mailbox endpoint admits whoever the stream admits.
    let reminders = "/gateway/agents/agent-a/reminders";
    for (token, status) in [(None, 401), (Some(b.as_str()), 403), (Some(a.as_str()), 200), (Some(TOKEN), 200)] {
        assert_eq!(send(&gateway, "GET", reminders, token, None).status, status, "{token:?}");
    }
}

#[test]
fn a_stream_opened_with_a_credential_ends_when_it_is_revoked() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let (id, token) = issue(&gateway, "agent-a");
    let (_, other) = issue(&gateway, "agent-a");
    let revoked_stream = stream(&gateway, "agent-a", Some(&token));
    let other_stream = stream(&gateway, "agent-a", Some(&other));
    assert_eq!((revoked_stream.status, other_stream.status), (200, 200));
    let path = format!("/gateway/agents/agent-a/credentials/{id}");
    assert_eq!(send(&gateway, "DELETE", &path, Some(TOKEN), None).status, 200);
    assert!(revoked_stream.ended_within(PATIENCE), "the revoked credential's stream is closed");
    assert!(!other_stream.ended_within(Duration::from_millis(300)), "the other credential's stream stays open");
}

#[test]
fn the_61st_message_of_a_minute_is_refused_with_retry_after_and_nothing_else_is() {
    let gateway = Gateway::start(&["--agent-rate-limit-per-minute", "60"]);
    let post = |path: &str, body: &Value| send(&gateway, "POST", path, None, Some(body));
    for n in 0..60 {
        assert_eq!(post("/gateway/messages", &decision_log("agent-a", n)).status, 202, "message {n}");
    }
    let limited = post("/gateway/messages", &decision_log("agent-a", 60));
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert_eq!(limited.body, json!({"status": "error", "reason": "rate_limited"}));
    let retry_after: u64 = limited.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "Retry-After: {retry_after}");
    // Invalid logs naming the agent are counted, so refused as well.
    assert_eq!(post("/gateway/messages", &json!({"identity": {"agent_id": "agent-a"}})).status, 429);

    assert_eq!(post("/gateway/messages", &decision_log("agent-b", 1)).status, 202, "another agent is unaffected");
    for _ in 0..5 {
        assert_eq!(post("/gateway/heartbeat", &heartbeat("agent-a")).status, 200, "heartbeats are not limited");
    }
}

#[test]
fn with_auth_on_the_limit_counts_the_tokens_agent() {
    let gateway = Gateway::start(&["--agent-auth", "required", "--agent-rate-limit-per-minute", "2"]);
    let (_, a) = issue(&gateway, "agent-a");
    let post = |body: &Value| send(&gateway, "POST", "/gateway/messages", Some(&a), Some(body));
    assert_eq!(post(&json!("not an object")).status, 422, "an invalid body counts too");
    assert_eq!(post(&decision_log("agent-a", 1)).status, 202);
    let limited = post(&decision_log("agent-a", 2));
    assert_eq!((limited.status, limited.reason()), (429, "rate_limited"));
    let unauthenticated = send(&gateway, "POST", "/gateway/messages", None, Some(&decision_log("agent-a", 3)));
    assert_eq!(unauthenticated.status, 401, "authentication comes first");
}

/// Two instances on one database and one Redis: a credential issued through one works on the other, the limit
/// is shared, and a revocation made through one stops the credential on the other.
#[test]
fn credentials_revocations_and_limits_hold_across_instances() {
    let args = ["--agent-auth", "required", "--agent-rate-limit-per-minute", "3"];
    let Some(cluster) = crate::support::cluster::Cluster::start("agent_auth_across_instances", 2, &args) else {
        return;
    };
    let (first, second) = (cluster.gateway(0), cluster.gateway(1));
    let (id, token) = issue(first, "agent-a");
    assert_eq!(send(second, "POST", "/gateway/heartbeat", Some(&token), Some(&heartbeat("agent-a"))).status, 200);

    let mut statuses = Vec::new();
    for n in 0..4 {
        let through = if n % 2 == 0 { first } else { second };
        statuses
            .push(send(through, "POST", "/gateway/messages", Some(&token), Some(&decision_log("agent-a", n))).status);
    }
    assert_eq!(statuses, [202, 202, 202, 429], "three per minute between both instances");

    let path = format!("/gateway/agents/agent-a/credentials/{id}");
    assert_eq!(send(first, "DELETE", &path, Some(TOKEN), None).status, 200);
    eventually("the other instance to refuse the revoked credential", || {
        send(second, "POST", "/gateway/heartbeat", Some(&token), Some(&heartbeat("agent-a"))).status == 401
    });
}

/// Two instances on one database: a token used on either has its last use recorded (each instance writes its own
/// uses), and the list through either instance shows it.
#[test]
fn a_credentials_last_use_is_recorded_by_whichever_instance_saw_it() {
    let args = ["--agent-auth", "required", "--last-use-interval-s", "1"];
    let Some(cluster) = crate::support::cluster::Cluster::start("agent_auth_last_use_across_instances", 2, &args)
    else {
        return;
    };
    let (first, second) = (cluster.gateway(0), cluster.gateway(1));
    let (first_id, first_token) = issue(first, "agent-a");
    let (second_id, second_token) = issue(first, "agent-b");
    assert_eq!(send(first, "POST", "/gateway/heartbeat", Some(&first_token), Some(&heartbeat("agent-a"))).status, 200);
    assert_eq!(
        send(second, "POST", "/gateway/heartbeat", Some(&second_token), Some(&heartbeat("agent-b"))).status,
        200
    );
    eventually("both uses to be recorded", || {
        let listed = send(first, "GET", "/gateway/credentials", Some(TOKEN), None);
        let rows = listed.body["credentials"].as_array().cloned().unwrap_or_default();
        let used = |id: &str| rows.iter().any(|row| row["credential_id"] == id && row["last_used_at"].is_string());
        used(&first_id) && used(&second_id)
    });
    let through_second = send(second, "GET", "/gateway/credentials", Some(TOKEN), None);
    assert!(
        through_second.body["credentials"].as_array().unwrap().iter().all(|row| row["last_used_at"].is_string()),
        "{}",
        through_second.body
    );
}

#[test]
fn tool_calls_need_the_agents_own_token_and_count_with_its_messages() {
    let gateway = Gateway::start(&["--agent-auth", "required", "--agent-rate-limit-per-minute", "4"]);
    let (_, a) = issue(&gateway, "agent-a");
    let call = |token: Option<&str>, agent: &str, id: &str| {
        let body = json!({"agent_id": agent, "tool_call_id": id, "params": {}});
        send(&gateway, "POST", "/gateway/tools/list_reminders", token, Some(&body))
    };
    assert_eq!(call(None, "agent-a", "t-0").status, 401);
    let listed = call(Some(&a), "agent-a", "t-1");
    assert_eq!(listed.status, 200, "{}", listed.body);
    let mismatch = call(Some(&a), "agent-b", "t-2");
    assert_eq!((mismatch.status, mismatch.reason()), (403, "identity_mismatch"));
    let unreadable = send(&gateway, "POST", "/gateway/tools/list_reminders", Some(&a), Some(&json!([])));
    assert_eq!(unreadable.status, 422, "a body without a readable agent is counted against the token's");
    // Three counted so far (the 401 is not); a message is the fourth, and the limit is reached for both.
    let message = |trace| send(&gateway, "POST", "/gateway/messages", Some(&a), Some(&decision_log("agent-a", trace)));
    assert_eq!(message(1).status, 202);
    let limited = call(Some(&a), "agent-a", "t-3");
    assert_eq!((limited.status, limited.reason()), (429, "rate_limited"));
    assert!(limited.headers.contains_key("retry-after"));
    assert_eq!(message(2).status, 429);
}
