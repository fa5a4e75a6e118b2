//! The Python agent client of docs/agents.md (docs/examples/agent_client.py), run against the real binary with
//! agent auth required: what the docs tell an agent author must work as written.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::Gateway;
use crate::support::python::{step, steps};

/// The example, from the workspace root.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/agent_client.py")
}

/// `python3` on `PATH`; without it the test says so in one line and returns, or fails under CI (`gateway_testkit::running_in_ci`).
fn python3_or_skip(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("python3")).find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            !gateway_testkit::running_in_ci(),
            "{test}: python3 not found (install python3); CI is set, so this fails instead of skipping"
        );
        eprintln!("skipping {test}: python3 not found (install python3)");
    }
    found
}

fn run_client(python: &Path, gateway: &Gateway, agent: &str, token: &str) -> (bool, Vec<(String, Value)>, String) {
    let output = Command::new(python)
        .arg(example())
        .env("GATEWAY_URL", &gateway.base)
        .env("AGENT_ID", agent)
        .env("AGENT_TOKEN", token)
        .env("REMINDER_DELAY_MS", "800")
        .env("WAIT_SECONDS", "20")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), steps(&stdout), format!("stdout:\n{stdout}\nstderr:\n{stderr}"))
}

#[test]
fn the_documented_python_client_heartbeats_schedules_through_a_tool_and_gets_its_reminder_on_its_stream() {
    let test = "the_documented_python_client_heartbeats_schedules_through_a_tool_and_gets_its_reminder_on_its_stream";
    let Some(python) = python3_or_skip(test) else {
        return;
    };
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let agent = "python-example-agent";
    let (status, issued) = gateway.operator_post(&format!("/gateway/agents/{agent}/credentials"), &json!({}));
    assert_eq!(status, 201, "{issued}");
    let token = issued["token"].as_str().unwrap();

    let (succeeded, steps, output) = run_client(&python, &gateway, agent, token);
    assert!(succeeded, "the client failed:\n{output}");
    assert_eq!(step(&steps, "heartbeat")["status"], 200, "{output}");
    assert_eq!(step(&steps, "stream")["connected"], true, "{output}");
    let scheduled = step(&steps, "scheduled");
    let job_id = scheduled["job_id"].as_i64().unwrap();
    assert_eq!(step(&steps, "retried"), scheduled, "a retried tool call gets the recorded answer:\n{output}");
    assert_eq!(step(&steps, "listed")["job_ids"], json!([job_id]), "{output}");
    assert_eq!(step(&steps, "decision_log")["status"], 202, "{output}");
    let reminder = step(&steps, "reminder");
    assert_eq!(reminder["job_id"], job_id, "{output}");
    assert_eq!(reminder["payload"], json!({"task": "check_quota"}), "{output}");
    assert!(reminder["fire_id"].as_str().unwrap().starts_with(&format!("{job_id}:")), "{output}");

    // The agent shows up as live, with the capability its DecisionLog declared.
    let (_, agents) = gateway.operator_get("/gateway/agents");
    let listed = agents["agents"].as_array().unwrap().iter().find(|entry| entry["agent_id"] == agent).cloned();
    assert!(listed.is_some(), "{agents}");

    // The same client with another agent's token is refused before it does anything, and says why.
    let (status, other) = gateway.operator_post("/gateway/agents/python-example-other/credentials", &json!({}));
    assert_eq!(status, 201, "{other}");
    let (succeeded, steps, output) = run_client(&python, &gateway, agent, other["token"].as_str().unwrap());
    assert!(!succeeded, "{output}");
    assert_eq!(step(&steps, "refused"), &json!({"status": 403, "reason": "identity_mismatch"}), "{output}");
}
