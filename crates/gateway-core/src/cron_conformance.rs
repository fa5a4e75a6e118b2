//! Rules every [`CronJobStore`] must keep, written once and run against each implementation: the in-memory
//! fake in this crate's tests, the database adapters in theirs (through the `conformance` feature).

use serde_json::Map;
use time::{Duration, OffsetDateTime};

use crate::{
    AgentId, ClaimLease, CronJob, CronJobStore, FencingEpoch, FencingToken, FireCompletion, FireKey, IdempotencyKey,
    NewCronJob, StoreError,
};

fn one_time(at: OffsetDateTime) -> NewCronJob {
    NewCronJob {
        agent_id: AgentId::new("agent-7").expect("a valid agent id"),
        schedule: None,
        next_fire_at: at,
        payload: Map::new(),
        is_one_time: true,
        idempotency_key: None,
    }
}

fn keyed(key: &str, at: OffsetDateTime) -> NewCronJob {
    NewCronJob { idempotency_key: Some(IdempotencyKey::new(key).expect("a valid key")), ..one_time(at) }
}

fn one_time_job(store: &dyn CronJobStore, at: OffsetDateTime) -> CronJob {
    store.insert_cron_job(&one_time(at)).expect("insert")
}

/// A group insert (what concurrent `schedule_once` calls share): a job whose key a row already holds gets that
/// row back (`inserted: false`, even with another instant), a key repeated within the group gets the row the
/// group's earlier job wrote, every other job is written, and nothing fails the group. The single insert, which
/// operator keys use, still refuses a held key; once the holder is deleted its key is free again. Expects an
/// empty store.
pub fn a_group_with_held_keys_returns_the_holders_and_inserts_the_rest(store: &dyn CronJobStore, at: OffsetDateTime) {
    let first = store.insert_cron_jobs(&[keyed("reminder:a", at)]).expect("insert").remove(0);
    assert!(first.inserted);
    let later = at + Duration::seconds(9);
    let group =
        [one_time(at), keyed("reminder:a", later), keyed("reminder:b", at), keyed("reminder:b", later), one_time(at)];
    let outcomes = store.insert_cron_jobs(&group).expect("insert");
    let inserted: Vec<bool> = outcomes.iter().map(|outcome| outcome.inserted).collect();
    assert_eq!(inserted, [true, false, true, false, true]);
    assert_eq!(outcomes[1].job, first.job, "the held key answers with the existing row, unchanged");
    assert_eq!(outcomes[3].job, outcomes[2].job, "a key repeated within the group answers with its first row");
    let expected: Vec<CronJob> =
        [&first, &outcomes[0], &outcomes[2], &outcomes[4]].iter().map(|outcome| outcome.job.clone()).collect();
    assert_eq!(store.list_cron_jobs(None, 10).expect("list"), expected, "no duplicate rows");
    assert!(matches!(store.insert_cron_job(&keyed("reminder:b", at)), Err(StoreError::Conflict(_))));
    assert!(store.delete_cron_job(first.job.id).expect("delete"));
    let key = IdempotencyKey::new("reminder:a").expect("a valid key");
    assert_eq!(store.cron_job_by_idempotency_key(&key).expect("read"), None);
    let again = store.insert_cron_jobs(&[keyed("reminder:a", at)]).expect("insert").remove(0);
    assert!(again.inserted);
    assert_ne!(again.job.id, first.job.id);
}

/// A lease of 10 s taken at `now` by `owner` under leadership term `token`, for rows due by `now`.
pub fn lease(owner: &str, token: u64, now: OffsetDateTime) -> ClaimLease {
    ClaimLease {
        owner: owner.to_owned(),
        token: FencingToken(token),
        now,
        due_by: now,
        expires_at: now + Duration::seconds(10),
    }
}

/// A row is claimed once it is due; while the claim is live nobody else claims it; once the lease has run out
/// without a completion the same instant is claimable again, and only the new holder can complete it.
pub fn one_claim_per_instant_until_the_lease_runs_out(store: &dyn CronJobStore, at: OffsetDateTime) {
    let job = one_time_job(store, at);
    let fire = FireKey { job_id: job.id, scheduled_for: at };
    let claim = |owner: &str, now: OffsetDateTime| store.claim_fires(&[job.id], &lease(owner, 1, now)).expect("claim");
    assert!(claim("a", at - Duration::seconds(1)).is_empty(), "not due yet");
    assert_eq!(claim("a", at), vec![job.clone()]);
    assert!(claim("b", at + Duration::seconds(9)).is_empty(), "the claim is live");
    let pending = store.pending_fires(at + Duration::seconds(1), 10).expect("pending");
    assert_eq!(pending[0].claimable_at(Duration::ZERO), at + Duration::seconds(10));
    assert_eq!(claim("b", at + Duration::seconds(10)).len(), 1, "the lease ran out");
    let token = FencingToken(1);
    assert_eq!(store.complete_fires("a", token, &[FireCompletion::Delete(fire)]).expect("complete"), 0);
    assert_eq!(store.complete_fires("b", token, &[FireCompletion::Delete(fire)]).expect("complete"), 1);
    assert_eq!(store.cron_job(job.id).expect("read"), None);
}

/// A newer leadership term takes over a live claim at once (an equal one does not, an older one is fenced), and
/// the old holder can no longer complete it; a missing row is never claimed.
pub fn a_newer_term_takes_over_and_missing_rows_are_not_claimed(store: &dyn CronJobStore, at: OffsetDateTime) {
    let job = one_time_job(store, at);
    let fire = FireKey { job_id: job.id, scheduled_for: at };
    let claim = |owner: &str, token: u64| store.claim_fires(&[job.id], &lease(owner, token, at));
    assert_eq!(claim("old-leader", 2).expect("claim").len(), 1);
    assert!(claim("rival", 2).expect("claim").is_empty());
    assert!(claim("stale-leader", 1).is_err_and(|error| error.is_fenced()));
    assert_eq!(claim("new-leader", 3).expect("claim").len(), 1);
    let old = store.complete_fires("old-leader", FencingToken(2), &[FireCompletion::Delete(fire)]);
    assert!(old.is_err_and(|error| error.is_fenced()), "the deposed leader cannot complete");
    assert!(store.claim_fires(&[job.id + 100], &lease("x", 3, at)).expect("claim").is_empty());
    let new = store.complete_fires("new-leader", FencingToken(3), &[FireCompletion::Delete(fire)]);
    assert_eq!(new.expect("complete"), 1);
}

/// Fencing, which cannot be seen from outside when it works: a leader-only write under an older token than the
/// newest the store has seen is refused with nothing written (not even part of a combined write), a newer one
/// raises the newest, and the newest is what [`FencingEpoch::newest_token`] reports. Expects an empty store
/// that has seen no token above 1.
pub fn fencing_refuses_older_tokens_whole_and_newer_ones_raise_the_epoch<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + FencingEpoch,
{
    let first = one_time_job(store, at);
    let second = one_time_job(store, at);
    let done = FireCompletion::Delete(FireKey { job_id: first.id, scheduled_for: at });
    assert_eq!(store.claim_fires(&[first.id], &lease("leader-5", 5, at)).expect("claim").len(), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(5));

    let stale = store.claim_fires(&[second.id], &lease("leader-4", 4, at));
    assert_eq!(stale, Err(StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) }));
    let combined = store.complete_and_claim("leader-5", &[done], &[second.id], &lease("leader-5", 4, at));
    assert!(combined.is_err_and(|error| error.is_fenced()), "a combined write under an old token");
    assert!(store.cron_job(first.id).expect("read").is_some(), "its completion was not applied either");
    let pending = store.pending_fires(at + Duration::seconds(1), 10).expect("pending");
    let second_claim = pending.iter().find(|fire| fire.job_id == second.id).and_then(|fire| fire.claimed_until);
    assert_eq!(second_claim, None, "the refused claim left no trace");

    assert_eq!(store.complete_fires("leader-5", FencingToken(6), &[done]).expect("complete"), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6), "a newer token raised the epoch");
}

/// A claim takes rows due by `due_by` (the claimer's margin) without moving their instant, and judges a live
/// lease by `now` alone: a rival whose margin reaches past the end of a lease still waits for that end.
pub fn claim_ahead_takes_rows_due_by_its_margin_but_judges_leases_by_now(store: &dyn CronJobStore, at: OffsetDateTime) {
    let job = one_time_job(store, at);
    let claim = |owner: &str, now: OffsetDateTime, margin_ms: i64| {
        let lease = ClaimLease { due_by: now + Duration::milliseconds(margin_ms), ..lease(owner, 1, now) };
        store.claim_fires(&[job.id], &lease).expect("claim")
    };
    let early = at - Duration::milliseconds(50);
    assert!(claim("a", early, 49).is_empty(), "not due by the margin");
    let claimed = claim("a", early, 50);
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].next_fire_at, at, "the claim does not move the instant");
    let lease_end = early + Duration::seconds(10);
    assert!(claim("b", lease_end - Duration::milliseconds(1), 1_000).is_empty(), "the lease is live until it ends");
    assert_eq!(claim("b", lease_end, 50).len(), 1);
}
