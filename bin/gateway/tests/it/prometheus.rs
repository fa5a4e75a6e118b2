//! `/metrics` read by Prometheus's own tools (issue "webhook endpoints as operators know them", item 6): the classic
//! text format linted clean by `promtool check metrics`, and the OpenMetrics exposition scraped by a real Prometheus
//! server. Both come from Debian's `prometheus` package, which `.ci/run` installs; without them these tests skip with
//! one line, and fail under CI.
//!
//! Why promtool does not lint the OpenMetrics body: it parses the classic format only, where a counter's HELP must
//! name the series with `_total`, and OpenMetrics names the family without it; a real scrape is the check that body
//! is what Prometheus reads.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::support::{Gateway, TOKEN, eventually};

/// A scrape asking for `accept`: `Content-Type` and body.
fn scrape(gateway: &Gateway, accept: &str) -> (String, String) {
    let mut response = ureq::get(gateway.url("/metrics"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", accept)
        .call()
        .unwrap();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    (content_type, response.body_mut().read_to_string().unwrap())
}

/// The program `name` (or the one `variable` names), or `None` after one printed line outside CI.
fn program(name: &str, variable: &str) -> Option<String> {
    let program = std::env::var(variable).unwrap_or_else(|_| name.to_owned());
    if Command::new(&program).arg("--version").output().is_ok() {
        return Some(program);
    }
    let line = format!("skipped: needs {name} (Debian's prometheus package; or set {variable})");
    assert!(!gateway_testkit::running_in_ci(), "{line}; under CI this fails instead");
    eprintln!("{line}");
    None
}

/// The series a body holds: each sample's name and labels, without its value.
fn series(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.rsplit_once(' ').map_or(line, |(series, _)| series).to_owned())
        .collect()
}

fn heartbeat(gateway: &Gateway) {
    let heartbeat = json!({"type": "heartbeat", "agent_id": "agent-p", "cluster_id": "cluster-p"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &heartbeat).0, 200);
}

#[test]
fn a_scrape_asking_for_the_classic_format_gets_it_and_promtool_finds_nothing_to_lint() {
    let Some(promtool) = program("promtool", "GATEWAY_TEST_PROMTOOL") else { return };
    let gateway = Gateway::start(&[]);
    heartbeat(&gateway);

    let (content_type, classic) = scrape(&gateway, "text/plain;version=0.0.4;q=0.9,*/*;q=0.1");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let (content_type, openmetrics) = scrape(&gateway, "*/*");
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");

    assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"), "{classic}");
    assert!(classic.contains("# TYPE gateway_heartbeats_accepted_total counter\n"), "{classic}");
    assert!(classic.contains("# HELP gateway_heartbeats_accepted_total "), "{classic}");
    assert!(classic.contains("\ngateway_heartbeats_accepted_total 1\n"), "{classic}");
    // The same series in both, whatever their values (the scrapes count themselves).
    let scraped = |body: &str| {
        let mut series = series(body);
        series.retain(|name| !name.starts_with("gateway_http_request"));
        series
    };
    assert_eq!(scraped(&classic), scraped(&openmetrics));

    let mut lint = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin.take().unwrap().write_all(classic.as_bytes()).unwrap();
    let output = lint.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
}

/// A Prometheus server scraping one target every second, in a temp dir, stopped on drop.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(program: &str, target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n\
             scrape_configs:\n  - job_name: gateway\n    authorization: {{credentials: {TOKEN}}}\n    \
             static_configs: [{{targets: ['{target}']}}]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        // A free port for its web API: bound and released, as the test kit's servers do.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(program)
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, url: format!("http://127.0.0.1:{port}"), _dir: dir }
    }

    fn api(&self, path: &str) -> Option<Value> {
        let mut response = ureq::get(format!("{}{path}", self.url)).call().ok()?;
        serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_the_openmetrics_exposition() {
    let Some(program) = program("prometheus", "GATEWAY_TEST_PROMETHEUS") else { return };
    let gateway = Gateway::start(&[]);
    heartbeat(&gateway);
    let target = gateway.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();
    let prometheus = Prometheus::start(&program, &target);

    let mut target_state = Value::Null;
    eventually("Prometheus to scrape the gateway", || {
        target_state = prometheus
            .api("/api/v1/targets")
            .and_then(|answer| answer["data"]["activeTargets"].get(0).cloned())
            .unwrap_or(Value::Null);
        target_state["health"] != "unknown" && !target_state.is_null()
    });
    assert_eq!(target_state["health"], "up", "{target_state}");
    assert_eq!(target_state["lastError"], "", "{target_state}");

    let mut value = Value::Null;
    eventually("the heartbeat counter in Prometheus", || {
        value = prometheus
            .api("/api/v1/query?query=gateway_heartbeats_accepted_total")
            .map(|answer| answer["data"]["result"][0]["value"][1].clone())
            .unwrap_or(Value::Null);
        !value.is_null()
    });
    assert_eq!(value, "1", "the gateway's count, as Prometheus stored it");
}
