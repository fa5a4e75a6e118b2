//! Leadership and fencing: the [`Leadership`] port ("am I leader, and with which token?"), its single-process
//! implementation, and how stores refuse a deposed leader's writes.
//!
//! Every leader-only write carries its [`FencingToken`]; a store refuses one whose token is older than the newest
//! it has seen ([`crate::StoreError::Fenced`], nothing written), a newer one raises that newest, and the check is
//! part of the write itself. [`FencingEpoch`] reads the newest. The in-memory stores keep the rule with an
//! [`EpochGate`]; a database adapter keeps the epoch in a table and checks it inside the write's transaction.

use std::fmt::Debug;
use std::sync::Mutex;

pub use crate::ports::store::FencingToken;
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// "Am I leader, and with which token?" The timed loops (eviction, cron dispatch, webhook poll) only act
/// while this answers `Some`.
pub trait Leadership: Send + Sync + Debug {
    fn current(&self) -> Option<FencingToken>;

    /// A leader-only write made under `token` was refused by the store ([`StoreError::Fenced`]): another
    /// instance took over. From now on this must not answer `token` again (a lease-based adapter steps down).
    /// A single process is never fenced, so the default does nothing.
    fn fenced(&self, token: FencingToken) {
        let _ = token;
    }
}

/// The newest leadership token a store has accepted: its fencing epoch. A new leader whose token would not be
/// newer (a Redis that lost its data restarts its counter) raises its counter past this first.
pub trait FencingEpoch: Send + Sync + Debug {
    fn newest_token(&self) -> Result<FencingToken, StoreError>;
}

/// The single-process deployment on a store that has only ever had one process: always leader, with token 1.
/// (A store that a cluster used before has a newer epoch, which would refuse every write of token 1: use
/// [`SoleLeadership`] there.)
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcessLeadership;

impl Leadership for SingleProcessLeadership {
    fn current(&self) -> Option<FencingToken> {
        Some(FencingToken(1))
    }
}

/// The single-process deployment on any store: always leader, under a token newer than any the store had accepted
/// when the process started. A gateway started alone on a database that a cluster ran on (its epoch above 1) would
/// otherwise have every leader-only write refused as fenced: no reminder fired, no agent evicted, no retry sent.
#[derive(Debug, Clone, Copy)]
pub struct SoleLeadership {
    token: FencingToken,
}

impl SoleLeadership {
    /// Leads under the token after the store's newest.
    pub fn newer_than(epoch: &dyn FencingEpoch) -> Result<Self, StoreError> {
        let FencingToken(newest) = epoch.newest_token()?;
        Ok(Self { token: FencingToken(newest.saturating_add(1).max(1)) })
    }
}

impl Leadership for SoleLeadership {
    fn current(&self) -> Option<FencingToken> {
        Some(self.token)
    }
}

/// Leadership that can be given and taken away: the fake for tests of leader-only work. Starts as a follower, and
/// leads under token 1 until a store fences it; then, like a lease-based adapter, it follows until it is given
/// leadership again, under the next token.
#[derive(Debug)]
pub struct SwitchableLeadership {
    /// Whether it leads, and the token it leads (or will next lead) under.
    term: Mutex<(bool, FencingToken)>,
}

impl Default for SwitchableLeadership {
    fn default() -> Self {
        Self { term: Mutex::new((false, FencingToken(1))) }
    }
}

impl SwitchableLeadership {
    pub fn leading() -> Self {
        let leadership = Self::default();
        leadership.set_leading(true);
        leadership
    }

    pub fn set_leading(&self, leading: bool) {
        lock(&self.term).0 = leading;
    }
}

impl Leadership for SwitchableLeadership {
    fn current(&self) -> Option<FencingToken> {
        let (leading, token) = *lock(&self.term);
        leading.then_some(token)
    }

    /// Steps down if `token` is the term it leads under; the next term it is given is a newer one. A report about
    /// another term changes nothing.
    fn fenced(&self, token: FencingToken) {
        let mut term = lock(&self.term);
        if *term == (true, token) {
            *term = (false, FencingToken(token.0 + 1));
        }
    }
}

/// Fencing in memory: the newest token seen, and the check of a write's token against it.
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
    use std::time::Duration;

    use super::*;
    use crate::conformance::leadership::LeadershipFixture;

    /// A single process: it leads from the start, and nothing deposes it.
    #[derive(Debug, Default)]
    struct Alone(SingleProcessLeadership);

    impl LeadershipFixture for Alone {
        fn leadership(&self) -> &dyn Leadership {
            &self.0
        }

        async fn lead(&self) -> FencingToken {
            self.0.current().expect("a single process always leads")
        }

        fn deposable(&self) -> bool {
            false
        }

        async fn depose(&self) {
            unreachable!("the rules never depose a leadership that is not deposable");
        }

        fn a_while(&self) -> Duration {
            Duration::ZERO
        }
    }

    /// The switchable fake, switched on and off as its tests do.
    #[derive(Debug, Default)]
    struct Switched(SwitchableLeadership);

    impl LeadershipFixture for Switched {
        fn leadership(&self) -> &dyn Leadership {
            &self.0
        }

        async fn lead(&self) -> FencingToken {
            self.0.set_leading(true);
            self.0.current().expect("leading once switched on")
        }

        async fn depose(&self) {
            self.0.set_leading(false);
        }

        fn a_while(&self) -> Duration {
            Duration::ZERO
        }
    }

    mod single_process {
        use super::*;

        crate::leadership_conformance!(Some(Box::<Alone>::default()));
    }

    mod switchable {
        use super::*;

        crate::leadership_conformance!(Some(Box::<Switched>::default()));
    }

    #[test]
    fn a_switchable_leadership_leads_under_one_token_until_fenced_then_under_the_next() {
        let leadership = SwitchableLeadership::default();
        assert_eq!(leadership.current(), None, "a follower at first");
        leadership.set_leading(true);
        assert_eq!(leadership.current(), Some(FencingToken(1)));
        leadership.set_leading(false);
        leadership.set_leading(true);
        assert_eq!(leadership.current(), Some(FencingToken(1)), "switching alone keeps the token");
        leadership.fenced(FencingToken(1));
        assert_eq!(leadership.current(), None, "a fenced term ends at once");
        leadership.set_leading(true);
        assert_eq!(leadership.current(), Some(FencingToken(2)), "the next term is newer");
        assert_eq!(SwitchableLeadership::leading().current(), Some(FencingToken(1)));
    }

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

    /// On a store a cluster used (its epoch at 7), a process alone leads under 8: its writes pass the store's
    /// fencing, where token 1 would have every one refused.
    #[test]
    fn a_sole_process_leads_under_a_token_newer_than_the_stores() {
        let gate = EpochGate::default();
        gate.admit(FencingToken(7)).unwrap();
        assert!(gate.admit(SingleProcessLeadership.current().unwrap()).unwrap_err().is_fenced(), "token 1 is refused");
        let sole = SoleLeadership::newer_than(&gate).unwrap();
        assert_eq!(sole.current(), Some(FencingToken(8)));
        assert_eq!(gate.admit(sole.current().unwrap()), Ok(()));
        let fresh = SoleLeadership::newer_than(&EpochGate::default()).unwrap();
        assert_eq!(fresh.current(), Some(FencingToken(1)), "a fresh store's epoch is 0: token 1, as before");
    }

    #[test]
    fn a_single_process_always_leads_with_one_token() {
        let leadership = SingleProcessLeadership;
        assert_eq!(leadership.current(), Some(FencingToken(1)));
        leadership.fenced(FencingToken(1));
        assert_eq!(leadership.current(), Some(FencingToken(1)), "a single process is never deposed");
    }
}
