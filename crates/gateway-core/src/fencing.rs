//! Fencing in memory: what the in-memory stores use to keep the rule every store keeps (a leader-only write with
//! an older token than the newest seen is refused, a newer one raises the epoch, in the same step as the write).
//! A database adapter keeps the epoch in a table and checks it inside the write's transaction.

use std::sync::Mutex;

use crate::memory::lock;
use crate::ports::{FencingEpoch, FencingToken, StoreError};

/// The newest token seen, and the check of a write's token against it.
#[derive(Debug, Default)]
pub struct EpochGate {
    newest: Mutex<FencingToken>,
}

impl EpochGate {
    /// Admits a write made under `token`: refused when it is older than the newest seen, which it raises
    /// otherwise. Call it while holding the lock the write itself takes, so the check and the write are one step.
    pub fn admit(&self, token: FencingToken) -> Result<(), StoreError> {
        let mut newest = lock(&self.newest);
        if token < *newest {
            return Err(StoreError::Fenced { token, newest: *newest });
        }
        *newest = token;
        Ok(())
    }

    pub fn newest(&self) -> FencingToken {
        *lock(&self.newest)
    }
}

impl FencingEpoch for EpochGate {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        Ok(self.newest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_tokens_are_refused_newer_ones_raise_the_epoch() {
        let gate = EpochGate::default();
        assert_eq!(gate.admit(FencingToken(3)), Ok(()));
        assert_eq!(gate.admit(FencingToken(3)), Ok(()), "the same term writes again");
        assert_eq!(
            gate.admit(FencingToken(2)),
            Err(StoreError::Fenced { token: FencingToken(2), newest: FencingToken(3) })
        );
        assert_eq!(gate.admit(FencingToken(5)), Ok(()));
        assert_eq!(gate.newest_token(), Ok(FencingToken(5)));
        assert!(gate.admit(FencingToken(3)).unwrap_err().is_fenced());
    }
}
