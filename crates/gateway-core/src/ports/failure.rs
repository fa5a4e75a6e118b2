//! [`FailureSwitch`]: what makes an in-memory implementation of a port fail on demand, so that tests (this
//! crate's, and embedders') can drive the error paths of whatever uses it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ports::store::StoreError;

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
