//! Start-up configuration errors: one line naming the flag, exit code 2.

use std::process::{Command, Output};

use crate::support::gateway_command;

fn run_gateway(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("g.db").display());
    gateway_command()
        .args(["--listen", "127.0.0.1:0", "--database-url", &database])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_bad_flag_value_exits_2_with_one_line_naming_the_flag() {
    let cases: [(&[&str], &str); 7] = [
        (&["--heartbeat-check-interval-ms", "0"], "--heartbeat-check-interval-ms"),
        (&["--max-inflight-body-bytes", "1000"], "--max-inflight-body-bytes"),
        (&["--max-connections-per-address", "0"], "--max-connections-per-address"),
        (&["--webhook-retry-schedule-s", ""], "--webhook-retry-schedule-s"),
        (&["--database-url", "mysql://db"], "--database-url"),
        (&["--max-tracked-agents", "many"], "--max-tracked-agents"),
        (&["--admin-token", "short"], "--admin-token"),
    ];
    for (args, flag) in cases {
        let output = run_gateway(args, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

#[test]
fn a_bad_environment_value_names_the_flag_too() {
    let output = run_gateway(&[], &[("GATEWAY_HEARTBEAT_EVICTION_THRESHOLD_S", "0")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--heartbeat-eviction-threshold-s"), "{stderr}");
}

#[test]
fn an_unwritable_database_path_fails_with_a_clear_line() {
    let output = gateway_command()
        .args(["--listen", "127.0.0.1:0", "--database-url", "sqlite:///nonexistent-dir/sub/g.db"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.lines().any(|line| line.starts_with("error: --database-url")), "{stderr}");
}

#[test]
fn turning_the_ssrf_guard_off_is_warned_about_at_start() {
    let guarded = crate::support::Gateway::start(&[]);
    let unguarded = crate::support::Gateway::start(&["--webhook-allow-private-targets"]);
    unguarded.wait_for_log("the SSRF guard is off");
    guarded.wait_for_log("gateway started");
    assert!(!guarded.logs().contains("SSRF guard is off"), "{}", guarded.logs());
}

/// The tests' gateways run on their own flags, whatever `GATEWAY_*` variables the shell running the tests has
/// set (`support::gateway_command`). Shown by running one test of this binary again with a variable that stops
/// any gateway that sees it from starting.
#[test]
fn the_callers_gateway_variables_do_not_reach_the_tests_gateways() {
    const HOSTILE: (&str, &str) = ("GATEWAY_MAX_TRACKED_AGENTS", "many");
    let seen = run_gateway(&[], &[HOSTILE]);
    assert_eq!(seen.status.code(), Some(2), "a gateway that sees {HOSTILE:?} does not start");

    let inner = "events::unknown_topics_are_400";
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", inner, "--test-threads", "1"])
        .env(HOSTILE.0, HOSTILE.1)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{inner} failed with {HOSTILE:?} set:\n{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{inner} did not run:\n{stdout}");
}

fn heartbeat() -> serde_json::Value {
    serde_json::json!({"type": "heartbeat", "agent_id": "agent-1", "cluster_id": "c", "timestamp": "2026-02-22T12:00:00Z"})
}

/// `--agent-auth auto` (the default) on every interface means required: like Redis's protected mode, a gateway
/// other machines can reach does not serve anonymous agents unless told to. (The test connects over loopback.)
#[test]
fn auto_agent_auth_on_every_interface_requires_agent_tokens() {
    let gateway = crate::support::Gateway::start_listening("0.0.0.0:0", &[]);
    let (status, body) = gateway.post_json("/gateway/heartbeat", &heartbeat());
    assert_eq!((status, body["reason"].as_str()), (401, Some("unauthorized")), "{body}");
    gateway.wait_for_log("agent auth required");
    let local = crate::support::Gateway::start(&[]);
    assert_eq!(local.post_json("/gateway/heartbeat", &heartbeat()).0, 200, "open on loopback");
}

#[test]
fn agent_auth_off_on_every_interface_is_warned_about_once() {
    const WARNING: &str = "--agent-auth off on a listener other machines can reach";
    let exposed = crate::support::Gateway::start_listening("0.0.0.0:0", &["--agent-auth", "off"]);
    exposed.wait_for_log(WARNING);
    assert_eq!(exposed.post_json("/gateway/heartbeat", &heartbeat()).0, 200);
    exposed.wait_for_log("gateway started");
    assert_eq!(exposed.logs().matches(WARNING).count(), 1, "{}", exposed.logs());
    let local = crate::support::Gateway::start(&["--agent-auth", "off"]);
    local.wait_for_log("gateway started");
    assert!(!local.logs().contains(WARNING), "{}", local.logs());
}
