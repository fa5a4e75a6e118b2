//! Running the Python programs of the docs and the official client libraries against the binary: finding an
//! interpreter that has a library, and reading the `step: <name> <json>` lines the example programs print.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The Python interpreter of `.ci/venv` (`GATEWAY_TEST_PYTHON_VENV`), else `python3` on `PATH`, if it can run
/// `import {imports}`; without one the test says so in one line (naming `package`) and returns `None`, or fails under
/// CI (`gateway_testkit::running_in_ci`).
pub fn python_with_or_skip(test: &str, package: &str, imports: &str) -> Option<PathBuf> {
    let python = std::env::var_os("GATEWAY_TEST_PYTHON_VENV").map(PathBuf::from).or_else(|| {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths).map(|dir| dir.join("python3")).find(|candidate| candidate.is_file())
    });
    let usable = python.as_ref().is_some_and(|python| {
        Command::new(python)
            .args(["-c", &format!("import {imports}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if usable {
        return python;
    }
    assert!(
        !gateway_testkit::running_in_ci(),
        "{test}: no Python with the {package} package (GATEWAY_TEST_PYTHON_VENV, see .ci/run); CI is set, so this \
         fails instead of skipping"
    );
    eprintln!("skipping {test}: no Python with the {package} package (set GATEWAY_TEST_PYTHON_VENV, see .ci/run)");
    None
}

/// The `step: <name> <json>` lines an example printed, in order.
pub fn steps(stdout: &str) -> Vec<(String, Value)> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("step: "))
        .map(|step| {
            let (name, value) = step.split_once(' ').unwrap();
            (name.to_owned(), serde_json::from_str(value).unwrap())
        })
        .collect()
}

/// The value of the step `name`; a missing step fails the test, naming the steps there were.
pub fn step<'a>(steps: &'a [(String, Value)], name: &str) -> &'a Value {
    &steps.iter().find(|(step, _)| step == name).unwrap_or_else(|| panic!("no `{name}` step in {steps:?}")).1
}
