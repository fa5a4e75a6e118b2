//! The fencing rule that spans ports: a store keeps one fencing epoch, so a leadership token raised through one of
//! its ports fences the leader-only writes of every other. Each port's own suite proves that a refused write
//! leaves nothing behind; this rule proves the epoch is shared.
//!
//! A store that implements several ports (the SQLite adapter: cron jobs and webhooks over one epoch table) runs the
//! rule once with the writes of all of them; the in-memory fakes each keep their own epoch, so each runs it with its
//! own writes alone.
//!
//! ```ignore
//! let cron = fencing::cron_writes(&store, START);
//! let writes: Vec<_> = cron.into_iter().chain(fencing::webhook_writes(&store, START)).collect();
//! fencing::a_token_raised_through_one_port_fences_every_port(&store, &writes);
//! ```

use std::fmt;

use time::{Duration, OffsetDateTime};

use crate::{
    ClaimLease, CronJobStore, FencingEpoch, FencingToken, FireCompletion, FireKey, LivenessMap, StoreError,
    WebhookStore,
};

/// One kind of leader-only write, made under the token it is given.
pub struct FencedWrite<'a> {
    /// Which port and method, for the failure message.
    pub name: &'static str,
    pub write: Box<dyn Fn(FencingToken) -> Result<(), StoreError> + 'a>,
}

impl fmt::Debug for FencedWrite<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedWrite").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<'a> FencedWrite<'a> {
    pub fn new(name: &'static str, write: impl Fn(FencingToken) -> Result<(), StoreError> + 'a) -> Self {
        Self { name, write: Box::new(write) }
    }
}

/// A row id no store of these rules holds: the writes below name it, so admitting them changes no row.
const NO_SUCH_ROW: i64 = i64::MAX - 7;

/// The leader-only writes of a [`CronJobStore`]: `claim_fires`, `complete_fires` and `complete_and_claim`, each
/// naming a row that does not exist.
pub fn cron_writes(store: &dyn CronJobStore, at: OffsetDateTime) -> Vec<FencedWrite<'_>> {
    let lease = move |token| ClaimLease {
        owner: "fencing".into(),
        token,
        now: at,
        due_by: at,
        expires_at: at + Duration::seconds(10),
    };
    let completion = FireCompletion::Delete(FireKey { job_id: NO_SUCH_ROW, scheduled_for: at });
    vec![
        FencedWrite::new("CronJobStore::claim_fires", move |token| {
            store.claim_fires(&[NO_SUCH_ROW], &lease(token)).map(drop)
        }),
        FencedWrite::new("CronJobStore::complete_fires", move |token| {
            store.complete_fires("fencing", token, &[completion], &[]).map(drop)
        }),
        FencedWrite::new("CronJobStore::complete_and_claim", move |token| {
            store.complete_and_claim("fencing", &[completion], &[], &[NO_SUCH_ROW], &lease(token)).map(drop)
        }),
    ]
}

/// The leader-only writes of a [`WebhookStore`]: the poll's `claim_fenced`, naming a row that does not exist, and
/// `release_deposed_claims`, in a store whose poll has claimed nothing.
pub fn webhook_writes(store: &dyn WebhookStore, at: OffsetDateTime) -> Vec<FencedWrite<'_>> {
    vec![
        FencedWrite::new("WebhookStore::claim_fenced", move |token| {
            store.claim_fenced(&[NO_SUCH_ROW], at, at + Duration::seconds(10), token).map(drop)
        }),
        FencedWrite::new("WebhookStore::release_deposed_claims", move |token| {
            store.release_deposed_claims(token, at).map(drop)
        }),
    ]
}

/// The leader-only write of a [`LivenessMap`]: `evict_silent`, with a threshold no agent of these rules exceeds.
pub fn liveness_writes(map: &dyn LivenessMap, at: OffsetDateTime) -> Vec<FencedWrite<'_>> {
    vec![FencedWrite::new("LivenessMap::evict_silent", move |token| {
        map.evict_silent(at, Duration::days(365), token).map(drop)
    })]
}

/// For each write in turn: a newer token through it is admitted and becomes the newest
/// ([`FencingEpoch::newest_token`]), after which every write, through any port, is refused under the token before
/// it ([`StoreError::Fenced`], naming both) and admitted under the newest. So one epoch fences them all. Expects
/// `epoch` and `writes` to be one store that has seen no token above 1, and each write to be checked against the
/// epoch whether or not it finds a row to change.
pub fn a_token_raised_through_one_port_fences_every_port(epoch: &dyn FencingEpoch, writes: &[FencedWrite<'_>]) {
    assert!(!writes.is_empty(), "no leader-only write to drive");
    for (step, raiser) in (1_u64..).zip(writes) {
        let newest = FencingToken(10 * step);
        let older = FencingToken(10 * step - 1);
        (raiser.write)(newest).unwrap_or_else(|error| panic!("{} under the newest token: {error}", raiser.name));
        assert_eq!(epoch.newest_token().expect("epoch"), newest, "{} raised the epoch", raiser.name);
        for write in writes {
            assert_eq!(
                (write.write)(older),
                Err(StoreError::Fenced { token: older, newest }),
                "{} under a token older than the one {} raised",
                write.name,
                raiser.name
            );
            (write.write)(newest).unwrap_or_else(|error| panic!("{} under the newest token: {error}", write.name));
        }
        assert_eq!(epoch.newest_token().expect("epoch"), newest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::START;
    use crate::{InMemoryCronJobStore, InMemoryLiveness, InMemoryWebhookStore};

    // The fakes keep an epoch each, so each runs the rule with its own writes.

    #[test]
    fn the_cron_fake_keeps_one_epoch_across_its_writes() {
        let store = InMemoryCronJobStore::default();
        a_token_raised_through_one_port_fences_every_port(&store, &cron_writes(&store, START));
    }

    #[test]
    fn the_webhook_fake_fences_its_polls_claims() {
        let store = InMemoryWebhookStore::default();
        a_token_raised_through_one_port_fences_every_port(&store, &webhook_writes(&store, START));
    }

    #[test]
    fn the_liveness_fake_fences_its_evictions() {
        let map = InMemoryLiveness::new(1);
        a_token_raised_through_one_port_fences_every_port(&map, &liveness_writes(&map, START));
    }

    /// The rule fails a store whose ports keep separate epochs: here two fakes posing as one store.
    #[test]
    #[should_panic(expected = "under a token older than the one")]
    fn separate_epochs_fail_the_rule() {
        let (cron, webhooks) = (InMemoryCronJobStore::default(), InMemoryWebhookStore::default());
        let writes: Vec<FencedWrite<'_>> =
            cron_writes(&cron, START).into_iter().chain(webhook_writes(&webhooks, START)).collect();
        a_token_raised_through_one_port_fences_every_port(&cron, &writes);
    }
}
