//! Heavy tests take turns: the cluster storms, crash storms and fault tests each start several gateways and
//! servers and measure what happens in real time, which a 2-core CI machine cannot do for two of them at once.
//!
//! `cargo test` runs the tests of one binary on threads of one process, and cargo-nextest runs each test in a
//! process of its own (.config/nextest.toml also puts these tests in one serial group), so the turn is a file lock
//! in the temporary directory, which both respect: a turn is taken by opening the file and locking it, and given
//! back when the [`HeavyTurn`] is dropped (or its process ends, however it ends).

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

/// The lock file, shared by every heavy test of every test process on the machine.
pub const HEAVY_LOCK_FILE: &str = "gateway-heavy-tests.lock";

/// A heavy test's turn; the next one waits until this is dropped.
#[derive(Debug)]
pub struct HeavyTurn {
    _locked: File,
}

/// Waits for the turn of a heavy test and returns it. Panics if the lock file cannot be opened or locked.
pub fn heavy_test_turn() -> HeavyTurn {
    let path: PathBuf = std::env::temp_dir().join(HEAVY_LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|error| panic!("cannot open {}: {error}", path.display()));
    file.lock().unwrap_or_else(|error| panic!("cannot lock {}: {error}", path.display()));
    HeavyTurn { _locked: file }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Two threads of one process (as `cargo test` runs them) never hold a turn together: each open of the file is
    /// locked on its own.
    #[test]
    fn turns_are_taken_one_at_a_time_across_threads() {
        let holding = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let _turn = heavy_test_turn();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    holding.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
