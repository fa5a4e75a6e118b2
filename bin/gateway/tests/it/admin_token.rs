//! The operator token's lifecycle through the real binary: generated and printed once at the first start without
//! `--admin-token`, stored (hashed) and used again after a restart without being printed, replaced by
//! `gateway admin-token rotate` while the gateway runs, and never written to the logs or to an error message.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{PATIENCE, eventually, gateway_command};

/// A gateway started without `--admin-token`, killed when dropped.
struct Tokenless {
    child: Child,
    base: String,
    /// The line printed right after the banner, about the admin token (none with `--admin-token`).
    token_line: String,
    logs: Arc<Mutex<String>>,
}

impl Tokenless {
    fn start(dir: &Path, args: &[&str]) -> Self {
        Self::start_on(&database_url(dir), args)
    }

    fn start_on(database_url: &str, args: &[&str]) -> Self {
        let mut child = gateway_command()
            .args(["--listen", "127.0.0.1:0", "--database-url", database_url])
            .args(args)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        thread::spawn({
            let logs = Arc::clone(&logs);
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut logs = logs.lock().unwrap();
                    logs.push_str(&line);
                    logs.push('\n');
                }
            }
        });
        let (lines_tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        let next =
            || lines.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("no banner; stderr:\n{}", logs.lock().unwrap()));
        let base = next().strip_prefix("gateway listening on ").expect("the banner comes first").to_owned();
        // Everything is printed at once, before the gateway serves: with the token given nothing follows.
        let token_line = if args.contains(&"--admin-token") { String::new() } else { next() };
        Self { child, base, token_line, logs }
    }

    /// The status of `GET /gateway/cluster` (an operator route) with `token`.
    fn status_with(&self, token: &str) -> u16 {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(PATIENCE))
            .build()
            .new_agent();
        let url = format!("{}/gateway/cluster", self.base);
        agent.get(url).header("authorization", format!("Bearer {token}")).call().unwrap().status().as_u16()
    }

    fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }
}

impl Drop for Tokenless {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn database_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("gateway.db").display())
}

fn generated_token(line: &str) -> String {
    let token = line.strip_prefix("admin token (generated, shown once): ").unwrap_or_else(|| panic!("{line}"));
    assert_eq!(token.len(), 64, "{token}");
    token.to_owned()
}

fn rotate(dir: &Path, env: &[(&str, &str)]) -> Output {
    gateway_command()
        .args(["admin-token", "rotate", "--database-url", &database_url(dir)])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn rotated_token(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let token =
        stdout.trim_end().strip_prefix("admin token (rotated, shown once): ").unwrap_or_else(|| panic!("{stdout}"));
    token.to_owned()
}

#[test]
fn a_generated_token_is_printed_once_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = Tokenless::start(dir.path(), &[]);
    let token = generated_token(&first.token_line);
    assert_eq!(first.status_with(&token), 200);
    assert_eq!(first.status_with("not-the-operator-token"), 401);
    let first_logs = first.logs();
    drop(first);

    let restarted = Tokenless::start(dir.path(), &[]);
    assert!(restarted.token_line.starts_with("admin token: the one stored"), "{}", restarted.token_line);
    assert!(!restarted.token_line.contains(&token));
    assert_eq!(restarted.status_with(&token), 200, "the stored token survives the restart");
    for logs in [first_logs, restarted.logs()] {
        assert!(!logs.contains(&token), "the token is never logged:\n{logs}");
    }
}

#[test]
fn a_rotation_replaces_the_token_of_a_running_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Tokenless::start(dir.path(), &[]);
    let old = generated_token(&gateway.token_line);
    assert_eq!(gateway.status_with(&old), 200);

    let output = rotate(dir.path(), &[]);
    // The rotation is committed when the command exits; the running gateway re-reads the stored token every 1 s.
    let rotated = Instant::now();
    let new = rotated_token(&output);
    assert_ne!(new, old);
    assert_eq!(new.len(), 64);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refuse the previous one within 1 s"), "{stderr}");
    assert!(!stderr.contains(&new), "{stderr}");
    // Within the refresh interval (docs/operations.md, 1 s), plus a little for the checks themselves on a loaded
    // machine: counted from the rotation's commit, polled every 20 ms.
    eventually("the running gateway to refuse the old token", || gateway.status_with(&old) == 401);
    let refused_after = rotated.elapsed();
    let bound = gateway_auth::ADMIN_TOKEN_REFRESH_INTERVAL + Duration::from_millis(500);
    assert!(
        refused_after <= bound,
        "the old token was still accepted {refused_after:?} after the rotation ({bound:?})"
    );
    assert_eq!(gateway.status_with(&new), 200);
    eventually("the rotation to be logged", || gateway.logs().contains("the stored admin token was rotated"));
    assert!(!gateway.logs().contains(&new) && !gateway.logs().contains(&old), "{}", gateway.logs());
    drop(gateway);

    let restarted = Tokenless::start(dir.path(), &[]);
    assert_eq!((restarted.status_with(&new), restarted.status_with(&old)), (200, 401), "the rotation is stored");
}

#[test]
fn a_token_given_by_flag_is_used_as_is_and_rotate_says_running_gateways_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let given = "a-token-given-on-the-command-line";
    let gateway = Tokenless::start(dir.path(), &["--admin-token", given]);
    assert_eq!(gateway.status_with(given), 200);

    let output = rotate(dir.path(), &[("GATEWAY_ADMIN_TOKEN", given)]);
    let rotated = rotated_token(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("GATEWAY_ADMIN_TOKEN is set here"), "{stderr}");
    assert!(!stderr.contains(given), "{stderr}");
    assert_eq!(gateway.status_with(given), 200, "the flag's token stays");
    drop(gateway);
    let tokenless = Tokenless::start(dir.path(), &[]);
    assert!(tokenless.token_line.starts_with("admin token: the one stored"), "{}", tokenless.token_line);
    assert_eq!(tokenless.status_with(&rotated), 200, "without the flag, the rotated token is the token");
    assert_eq!(tokenless.status_with(given), 401);
}

#[test]
fn a_refused_token_value_is_never_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let database = database_url(dir.path());
    let secret = "hunter2-secret";
    let runs = [
        gateway_command()
            .args(["--listen", "127.0.0.1:0", "--database-url", &database])
            .env("GATEWAY_ADMIN_TOKEN", secret)
            .output()
            .unwrap(),
        gateway_command()
            .args(["--listen", "127.0.0.1:0", "--database-url", &database, "--admin-token", secret])
            .output()
            .unwrap(),
        gateway_command()
            .args(["--listen", "127.0.0.1:0", "--database-url", &database, &format!("--admin-token={secret} x y")])
            .output()
            .unwrap(),
        gateway_command()
            .args(["admin-token", "rotate", "--database-url", &database])
            .env("GATEWAY_ADMIN_TOKEN", secret)
            .output()
            .unwrap(),
    ];
    for output in runs {
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(2), "{printed}");
        assert!(printed.contains("--admin-token"), "the error names the flag: {printed}");
        assert!(!printed.contains("hunter2"), "the value is never repeated: {printed}");
    }
}

/// Several instances starting together on one PostgreSQL database: one generates and prints the token, the others
/// find it stored and print nothing of it, and it works on every one.
#[test]
fn instances_starting_together_on_postgres_share_one_generated_token() {
    let Some(database) = gateway_testkit::postgres::database("it::admin_token") else { return };
    let url = database.url().to_owned();
    let instances: Vec<Tokenless> = thread::scope(|scope| {
        let starting: Vec<_> = (0..3).map(|_| scope.spawn(|| Tokenless::start_on(&url, &[]))).collect();
        starting.into_iter().map(|instance| instance.join().unwrap()).collect()
    });
    let generated: Vec<String> = instances
        .iter()
        .filter(|instance| instance.token_line.starts_with("admin token (generated"))
        .map(|instance| generated_token(&instance.token_line))
        .collect();
    assert_eq!(generated.len(), 1, "{:?}", instances.iter().map(|instance| &instance.token_line).collect::<Vec<_>>());
    for instance in &instances {
        assert_eq!(instance.status_with(&generated[0]), 200);
    }
}
