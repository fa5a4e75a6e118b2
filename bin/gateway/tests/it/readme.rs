//! The README's examples, run in the order written against a fresh gateway, so that what they show is what a
//! newcomer who pastes them sees — ids included.
//!
//! Every ```sh block of README.md is run, in order, in one bash process (a variable one example sets, such as
//! `BODY`, is there for the next), except blocks that start with `cargo` (building and starting the gateway is
//! what this test does). `localhost:4000` is this test's gateway, and `$TOKEN` its operator token (the README
//! says to `export TOKEN=`). A comment line right after a command that starts with a JSON body, optionally after
//! a status code (`# {"status":"ok"}`, `# 202 {"status":"accepted",…}`), is that command's expected answer: the
//! status must match, and the body must match with `…` standing for anything and every RFC 3339 instant for any
//! instant (the examples were written on another day); text after two spaces and a `(` is a remark. Other
//! comments are prose. Event streams (`curl -N`) run for a second and are not compared: what they show arrives
//! when the examples' reminders fire, a minute later.

use std::process::Command;

use regex::Regex;

use crate::support::{Gateway, TOKEN};

const README: &str = include_str!("../../../../README.md");
/// An RFC 3339 instant, in UTC or with an offset.
const INSTANT: &str = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})";
/// Printed between two commands' outputs.
const SEPARATOR: &str = "@@readme-example-done@@";

/// One command of an example and the answer the README shows for it.
#[derive(Debug)]
struct Example {
    command: String,
    expected: Option<String>,
}

/// The ```sh blocks of `markdown`, each as its lines.
fn shell_blocks(markdown: &str) -> Vec<Vec<&str>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// Whether `text` leaves a single-quoted string open (the README's JSON bodies span lines inside one).
fn opens_quote(text: &str) -> bool {
    text.matches('\'').count() % 2 == 1
}

/// The commands of a block with their expected answers.
fn examples(block: &[&str]) -> Vec<Example> {
    let mut examples: Vec<Example> = Vec::new();
    let mut command = String::new();
    let mut just_ended = false;
    for line in block {
        if command.is_empty() {
            let comment = line.trim_start().strip_prefix('#').map(str::trim);
            match comment {
                Some(text) if just_ended => {
                    let last = examples.last_mut().expect("a command just ended");
                    if last.expected.is_none() && is_answer(text) {
                        last.expected = Some(text.to_owned());
                        continue;
                    }
                    just_ended = false;
                }
                Some(_) => {}
                None if line.trim().is_empty() => just_ended = false,
                None => {
                    command.push_str(line);
                    command.push('\n');
                }
            }
            if comment.is_some() || line.trim().is_empty() {
                continue;
            }
        } else {
            command.push_str(line);
            command.push('\n');
        }
        if !line.trim_end().ends_with('\\') && !opens_quote(&command) {
            examples.push(Example { command: std::mem::take(&mut command), expected: None });
            just_ended = true;
        }
    }
    assert!(command.is_empty(), "a command of the README is never closed: {command}");
    examples
}

/// An answer line: a JSON body, optionally after a status code.
fn is_answer(text: &str) -> bool {
    let body = text.split_once(' ').filter(|(status, _)| is_status(status)).map_or(text, |(_, body)| body);
    body.starts_with('{') || body.starts_with('[')
}

fn is_status(text: &str) -> bool {
    text.len() == 3 && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// The expected answer as (status, body pattern).
fn expectation(text: &str) -> (Option<&str>, Regex) {
    let text = text.split_once("  (").map_or(text, |(answer, _)| answer).trim_end();
    let (status, body) = match text.split_once(' ') {
        Some((status, body)) if is_status(status) => (Some(status), body),
        _ => (None, text),
    };
    let instant = Regex::new(INSTANT).unwrap();
    let mut pattern = String::from("^");
    let mut rest = body;
    while !rest.is_empty() {
        let next_instant = instant.find(rest).map(|found| (found.start(), found.end()));
        let next_ellipsis = rest.find('…').map(|at| (at, at + '…'.len_utf8()));
        let (start, end, wildcard) = match (next_instant, next_ellipsis) {
            (Some(i), Some(e)) if e.0 < i.0 => (e.0, e.1, ".*"),
            (Some(i), _) => (i.0, i.1, INSTANT),
            (None, Some(e)) => (e.0, e.1, ".*"),
            (None, None) => (rest.len(), rest.len(), ""),
        };
        pattern.push_str(&regex::escape(&rest[..start]));
        pattern.push_str(wildcard);
        rest = &rest[end..];
    }
    pattern.push('$');
    (status, Regex::new(&pattern).unwrap())
}

#[test]
fn the_readme_examples_answer_what_the_readme_shows() {
    for tool in ["bash", "curl", "openssl"] {
        if Command::new(tool).arg("--version").output().is_err() {
            let line = format!("skipped: the README's examples need {tool}");
            assert!(!gateway_testkit::running_in_ci(), "{line}; under CI this fails instead");
            eprintln!("{line}");
            return;
        }
    }
    let gateway = Gateway::start(&[]);
    let address = gateway.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();

    let examples: Vec<Example> = shell_blocks(README)
        .iter()
        .filter(|block| !block.iter().any(|line| line.trim_start().starts_with("cargo ")))
        .flat_map(|block| examples(block))
        .collect();
    assert!(examples.len() >= 10, "the README's examples were not found: {examples:#?}");
    assert!(examples.iter().filter(|example| example.expected.is_some()).count() >= 8, "{examples:#?}");

    // `curl` as the README writes it, against this gateway, printing the status after the body; a stream is cut
    // after a second.
    let mut script = String::from(
        r#"curl() {
    local args=() stream=()
    for arg in "$@"; do
        args+=("${arg//localhost:4000/$GATEWAY_ADDRESS}")
        [ "$arg" = "-N" ] && stream=(--max-time 1)
    done
    command curl -sS "${stream[@]}" -w '\n%{http_code}\n' "${args[@]}"
}
"#,
    );
    for example in &examples {
        script.push_str(&example.command);
        script.push_str(&format!("echo '{SEPARATOR}'\n"));
    }
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("GATEWAY_ADDRESS", &address)
        .env("TOKEN", TOKEN)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outputs: Vec<&str> = stdout.split(&format!("{SEPARATOR}\n")).collect();
    assert_eq!(
        outputs.len(),
        examples.len() + 1,
        "every example ran: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let mut failures = Vec::new();
    for (example, output) in examples.iter().zip(&outputs) {
        let Some(expected) = &example.expected else { continue };
        let lines: Vec<&str> = output.trim_end().lines().collect();
        let (status, body) = match lines.split_last() {
            Some((status, body)) => (*status, body.join("\n")),
            None => ("", String::new()),
        };
        let (expected_status, pattern) = expectation(expected);
        let status_ok = expected_status.is_none_or(|expected| expected == status);
        if !status_ok || !pattern.is_match(body.trim()) {
            failures.push(format!(
                "{}  README shows: {expected}\n  the gateway answered: {status} {body}",
                example.command
            ));
        }
    }
    assert!(failures.is_empty(), "README examples that do not answer what it shows:\n\n{}", failures.join("\n\n"));
}

#[test]
fn answers_are_told_from_prose_and_patterns_allow_what_may_differ() {
    let block = [
        "# an agent asks",
        "curl -s localhost:4000/x -d '{",
        "  \"a\": 1}'",
        "# 202 {\"id\":1,…,\"at\":\"2026-02-22T12:01:00Z\"}     (401 when not)",
        "# the same again: 200 {\"status\":\"duplicate\"}",
        "",
        "curl -s localhost:4000/y \\",
        "  -H 'x: y'",
    ];
    let examples = examples(&block);
    assert_eq!(examples.len(), 2, "{examples:#?}");
    assert_eq!(examples[0].command, "curl -s localhost:4000/x -d '{\n  \"a\": 1}'\n");
    let (status, pattern) = expectation(examples[0].expected.as_deref().unwrap());
    assert_eq!(status, Some("202"));
    assert!(pattern.is_match(r#"{"id":1,"x":2,"at":"2027-01-01T00:00:00.5Z"}"#));
    assert!(!pattern.is_match(r#"{"id":2,"x":2,"at":"2027-01-01T00:00:00.5Z"}"#));
    assert_eq!(examples[1].expected, None);
}
