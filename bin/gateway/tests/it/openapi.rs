//! `GET /openapi.json` on the real binary, and schemathesis fuzzing every operation of that document against it:
//! no 5xx, and no answer whose status, content type or body the document does not describe.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Gateway, TOKEN};

/// Test cases per operation and phase: enough to reach every documented refusal, few enough that the run takes
/// well under a minute on a busy two-core machine (docs/api.md has the command for a longer run).
const MAX_EXAMPLES: &str = "25";
/// The same cases on every run, so that a failure in CI can be replayed; a local run picks its own seed.
const SEED: &str = "20261201";
/// The same with agent auth on, where most generated requests stop at 401 or 403 and fewer cases show as much.
const MAX_EXAMPLES_AGENT_AUTH: &str = "10";
/// The same on PostgreSQL.
const MAX_EXAMPLES_POSTGRES: &str = "10";
/// A run that takes longer than this is killed and fails: something hangs.
const RUN_LIMIT: Duration = Duration::from_secs(600);

#[test]
fn the_document_is_served_to_anyone_as_json() {
    let gateway = Gateway::start(&[]);
    let mut response = ureq::get(gateway.url("/openapi.json")).call().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let document: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["paths"]["/openapi.json"]["get"]["security"], serde_json::json!([]));
    let (status, refused) = gateway.get("/gateway/agents");
    assert_eq!((status, refused["reason"].as_str()), (401, Some("unauthorized")), "the operator API is not opened");
}

/// The schemathesis CLI: `GATEWAY_TEST_SCHEMATHESIS` (set by .ci/run to its venv's), else `schemathesis` on `PATH`.
/// Without it the test says so in one line and returns, or fails under CI (`gateway_testkit::running_in_ci`).
fn schemathesis_or_skip(test: &str) -> Option<PathBuf> {
    let found = match std::env::var_os("GATEWAY_TEST_SCHEMATHESIS") {
        Some(path) => Some(PathBuf::from(path)).filter(|path| path.is_file()),
        None => std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths).map(|dir| dir.join("schemathesis")).find(|candidate| candidate.is_file())
        }),
    };
    if found.is_none() {
        assert!(
            !gateway_testkit::running_in_ci(),
            "{test}: schemathesis not found (.ci/run installs it); CI is set, so this fails instead of skipping"
        );
        eprintln!("skipping {test}: schemathesis not found (see docs/api.md, \"OpenAPI document and fuzzing\")");
    }
    found
}

/// A file beside this one: `schemathesis_hooks.py` (keeps generated webhook targets on loopback) and
/// `schemathesis.toml` (bounds how long an event stream is read).
fn beside(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it").join(name)
}

/// Agent auth off (the default on loopback) lets generated agent requests reach their handlers' checks rather than
/// stop at 401; the operator token goes with every request, so operator routes are fuzzed past it too. No agent
/// rate limit (support.rs turns it off), so `rate_limited` does not hide what comes after it.
#[test]
fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let test = "schemathesis_finds_no_server_error_and_no_answer_outside_the_document";
    let Some(schemathesis) = schemathesis_or_skip(test) else { return };
    let gateway = Gateway::start(&[]);
    fuzz(&schemathesis, &gateway, &beside("schemathesis.toml"), MAX_EXAMPLES);
}

/// The same with agent auth on: the agent operations get an agent's token, the others the operator's. The agent is
/// `0`, the id the fuzzer's smallest generated string names, so that generated bodies pass as the token's agent
/// often enough to reach past 403; the rest exercises 401 and 403 under the document.
#[test]
fn with_agent_auth_on_schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let test = "with_agent_auth_on_schemathesis_finds_no_server_error_and_no_answer_outside_the_document";
    let Some(schemathesis) = schemathesis_or_skip(test) else { return };
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let (status, issued) = gateway.operator_post("/gateway/agents/0/credentials", &serde_json::json!({}));
    assert_eq!(status, 201, "{issued}");
    let token = issued["token"].as_str().unwrap();
    let config = gateway.dir.path().join("schemathesis.toml");
    let shared = std::fs::read_to_string(beside("schemathesis.toml")).unwrap();
    let agent =
        format!("[[operations]]\ninclude-tag = \"agents\"\nheaders = {{ Authorization = \"Bearer {token}\" }}\n");
    std::fs::write(&config, format!("{shared}\n{agent}")).unwrap();
    fuzz(&schemathesis, &gateway, &config, MAX_EXAMPLES_AGENT_AUTH);
}

/// The same on PostgreSQL, which refuses some input SQLite stores (text holding NUL): what passes the handlers'
/// checks must not fail in the store.
#[test]
fn on_postgres_schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let test = "on_postgres_schemathesis_finds_no_server_error_and_no_answer_outside_the_document";
    let Some(schemathesis) = schemathesis_or_skip(test) else { return };
    let Some(server) = gateway_testkit::postgres::server("it::openapi") else { return };
    let database = server.create_database("it_openapi");
    let gateway = Gateway::start_on(database.url(), &[]);
    fuzz(&schemathesis, &gateway, &beside("schemathesis.toml"), MAX_EXAMPLES_POSTGRES);
}

/// What a finished (or killed) command wrote, and whether it succeeded.
#[derive(Debug)]
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `command` to its end, reading its stdout and stderr while it runs (each on a thread of its own): a
/// command that writes more than a pipe holds (64 KiB; schemathesis reporting a finding with its reproduction
/// does) would otherwise block on its write, never end, and hang the test. Kills it after `limit` and returns
/// what it wrote so far as the error.
fn run_to_end(command: &mut Command, limit: Duration) -> Result<Ran, Ran> {
    use std::io::Read;
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let ran = Ran {
        success: status.is_some_and(|status| status.success()),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    if status.is_some() { Ok(ran) } else { Err(ran) }
}

/// A command that writes far more than a pipe holds, to both streams, is read to its end: nothing blocks, nothing
/// is lost. (Without the draining threads it blocks on its first full pipe and is killed at the limit.)
#[test]
fn a_command_that_writes_more_than_a_pipe_holds_runs_to_its_end() {
    let script = "head -c 1000000 /dev/zero | tr '\\0' o; head -c 300000 /dev/zero | tr '\\0' e >&2";
    let ran = run_to_end(Command::new("sh").args(["-c", script]), Duration::from_secs(60))
        .unwrap_or_else(|partial| panic!("killed at the limit after {} bytes", partial.stdout.len()));
    assert!(ran.success);
    assert_eq!((ran.stdout.len(), ran.stderr.len()), (1_000_000, 300_000));
}

/// Runs schemathesis on every operation of `gateway`'s document with `config`, and fails on any finding, on an
/// operation left out, or on a panic in the gateway's log.
fn fuzz(schemathesis: &Path, gateway: &Gateway, config: &Path, max_examples: &str) {
    let workdir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut run = Command::new(schemathesis);
    run.arg("--config-file")
        .arg(config)
        .arg("run")
        .arg(gateway.url("/openapi.json"))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", max_examples, "--seed", SEED])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--request-timeout", "20", "--generation-database", "none", "--no-color"])
        .env("SCHEMATHESIS_HOOKS", beside("schemathesis_hooks.py"))
        // Its own files (reports, caches) go to a directory of the test's, not the source tree.
        .current_dir(workdir.path())
        .stdin(Stdio::null());
    let output = run_to_end(&mut run, RUN_LIMIT).unwrap_or_else(|partial| {
        panic!("schemathesis ran for over {RUN_LIMIT:?}:\n{}\n{}", partial.stdout, partial.stderr)
    });
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    let summary = stdout.lines().rev().find(|line| line.contains(" in ") && line.contains('s')).unwrap_or_default();
    eprintln!("schemathesis: {} after {:.0?}", summary.trim_matches(['=', ' ']), started.elapsed());
    assert!(output.success, "schemathesis found problems:\n{stdout}\n{stderr}");
    let selected = stdout.lines().find_map(|line| line.trim().strip_prefix("Operations:")).unwrap_or_default();
    let (fuzzed, total) =
        selected.split_once(" selected / ").unwrap_or_else(|| panic!("no operation count:\n{stdout}"));
    assert_eq!(fuzzed.trim(), total.trim_end_matches(" total").trim(), "every operation is fuzzed:\n{stdout}");
    let logs = gateway.logs();
    assert!(!logs.contains("panicked"), "a handler or a loop panicked under fuzzing:\n{logs}");
}
