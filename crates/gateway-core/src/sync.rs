//! What the in-memory implementations of the ports share: [`lock`], the one way this workspace takes a mutex, and
//! [`FailureSwitch`], which makes a fake store fail on demand so tests can drive the error paths.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::store::StoreError;

/// Locks a mutex, ignoring poisoning: every critical section here leaves the data consistent.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A switch tests flip to make a fake store report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct FailureSwitch(AtomicBool);

impl FailureSwitch {
    pub fn set_failing(&self, failing: bool) {
        self.0.store(failing, Ordering::SeqCst);
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.0.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("in-memory store set to fail".to_owned()))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_switch_fails_only_while_set() {
        let switch = FailureSwitch::default();
        assert_eq!(switch.check(), Ok(()));
        switch.set_failing(true);
        assert!(matches!(switch.check(), Err(StoreError::Unavailable(_))));
        switch.set_failing(false);
        assert_eq!(switch.check(), Ok(()));
    }
}
