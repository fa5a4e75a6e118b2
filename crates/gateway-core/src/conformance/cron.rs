//! Rules every [`CronJobStore`] must keep: rows and their idempotency keys, the order of due fires, the claim
//! protocol (one unexpired claim per instant, leases, leadership terms), completions, and fencing.

use serde_json::{Map, json};
use time::{Duration, OffsetDateTime};

use crate::{
    AgentId, ClaimLease, CronJob, CronJobStore, FencingEpoch, FencingToken, FireCompletion, FireKey, IdempotencyKey,
    NewCronJob, PendingFire, StoreError,
};

fn one_time(at: OffsetDateTime) -> NewCronJob {
    NewCronJob {
        agent_id: AgentId::new("agent-7").expect("a valid agent id"),
        schedule: None,
        next_fire_at: at,
        payload: Map::new(),
        is_one_time: true,
        idempotency_key: None,
        timezone: crate::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: crate::MisfirePolicy::FireOnce,
        max_lateness_ms: None,
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
    assert_eq!(pending[0].claimable_at(Duration::ZERO, FencingToken(1)), at + Duration::seconds(10));
    assert_eq!(claim("b", at + Duration::seconds(10)).len(), 1, "the lease ran out");
    let token = FencingToken(1);
    assert_eq!(store.complete_fires("a", token, &[FireCompletion::Delete(fire)], &[]).expect("complete"), 0);
    assert_eq!(store.complete_fires("b", token, &[FireCompletion::Delete(fire)], &[]).expect("complete"), 1);
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
    let old = store.complete_fires("old-leader", FencingToken(2), &[FireCompletion::Delete(fire)], &[]);
    assert!(old.is_err_and(|error| error.is_fenced()), "the deposed leader cannot complete");
    assert!(store.claim_fires(&[job.id + 100], &lease("x", 3, at)).expect("claim").is_empty());
    let new = store.complete_fires("new-leader", FencingToken(3), &[FireCompletion::Delete(fire)], &[]);
    assert_eq!(new.expect("complete"), 1);
}

/// A claim made under token 5 (a leader that died right after claiming) is claimable at once by token 6, the next
/// term, long before its lease ends, while another claimer of term 5 still waits for that end. The pending fire
/// carries the claim's token, so a scheduler of term 6 knows to try at once ([`PendingFire::claimable_at`]), and the
/// claim rule lets it; the deposed claimer can then neither complete it nor claim again.
pub fn a_newer_term_claims_a_deposed_leaders_fire_at_once_an_equal_term_waits_for_its_lease(
    store: &dyn CronJobStore,
    at: OffsetDateTime,
) {
    let job = one_time_job(store, at);
    let fire = FireKey { job_id: job.id, scheduled_for: at };
    assert_eq!(store.claim_fires(&[job.id], &lease("leader-5", 5, at)).expect("claim").len(), 1);
    let lease_end = at + Duration::seconds(10);
    let pending = store.pending_fires(at + Duration::seconds(1), 10).expect("pending");
    let claimed = PendingFire {
        claimed_until: Some(lease_end),
        claim_token: Some(FencingToken(5)),
        ..PendingFire::unclaimed(job.id, at)
    };
    assert_eq!(pending, [claimed]);
    assert_eq!(claimed.claimable_at(Duration::ZERO, FencingToken(5)), lease_end, "the same term waits for the lease");
    assert_eq!(claimed.claimable_at(Duration::ZERO, FencingToken(6)), at, "a newer term need not");
    assert_eq!(claimed.claimable_at(Duration::milliseconds(50), FencingToken(6)), at - Duration::milliseconds(50));

    let soon = at + Duration::milliseconds(100);
    assert!(store.claim_fires(&[job.id], &lease("rival-5", 5, soon)).expect("claim").is_empty(), "the lease is live");
    let taken = store.claim_fires(&[job.id], &lease("leader-6", 6, soon)).expect("claim");
    assert_eq!(ids(&taken), [job.id], "taken over at once, {:?} before the lease ends", lease_end - soon);
    let pending = store.pending_fires(at + Duration::seconds(1), 10).expect("pending");
    assert_eq!(pending[0].claim_token, Some(FencingToken(6)));
    assert_eq!(pending[0].claimed_until, Some(soon + Duration::seconds(10)));
    assert!(store.claim_fires(&[job.id], &lease("leader-5", 5, soon)).is_err_and(|error| error.is_fenced()));
    let deposed = store.complete_fires("leader-5", FencingToken(5), &[FireCompletion::Delete(fire)], &[]);
    assert!(deposed.is_err_and(|error| error.is_fenced()), "the deposed leader cannot complete");
    let done = store.complete_fires("leader-6", FencingToken(6), &[FireCompletion::Delete(fire)], &[]);
    assert_eq!(done.expect("complete"), 1);
}

/// Fencing, which cannot be seen from outside when it works: a leader-only write under an older token than the
/// newest the store has seen is refused with nothing written (not even part of a combined write), a newer one
/// raises the newest, and the newest is what [`FencingEpoch::newest_token`] reports. A claim or a completion of no
/// rows is no write: neither refused nor raising. Expects an empty store that has seen no token above 1.
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
    let combined = store.complete_and_claim("leader-5", &[done], &[], &[second.id], &lease("leader-5", 4, at));
    assert!(combined.is_err_and(|error| error.is_fenced()), "a combined write under an old token");
    assert!(store.cron_job(first.id).expect("read").is_some(), "its completion was not applied either");
    let pending = store.pending_fires(at + Duration::seconds(1), 10).expect("pending");
    let second_claim = pending.iter().find(|fire| fire.job_id == second.id).and_then(|fire| fire.claimed_until);
    assert_eq!(second_claim, None, "the refused claim left no trace");

    assert_eq!(store.complete_fires("leader-5", FencingToken(6), &[done], &[]).expect("complete"), 1);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6), "a newer token raised the epoch");

    // A claim or a completion of nothing writes nothing, so it is neither refused nor raises the epoch.
    assert_eq!(store.claim_fires(&[], &lease("leader-4", 4, at)), Ok(Vec::new()));
    assert_eq!(store.complete_fires("leader-4", FencingToken(4), &[], &[]), Ok(0));
    assert_eq!(store.claim_fires(&[], &lease("leader-9", 9, at)), Ok(Vec::new()));
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(6));
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

fn ids(jobs: &[CronJob]) -> Vec<i64> {
    jobs.iter().map(|job| job.id).collect()
}

fn recurring(at: OffsetDateTime) -> NewCronJob {
    NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(at) }
}

/// A job reads back as written: its instant to the millisecond, its schedule, its JSON payload (nested values
/// included), its kind. Jobs list by ascending id in keyset pages (`after_id` excluded, at most `limit`); a delete
/// answers whether it removed a row, and a deleted job is neither read nor listed. Expects an empty store.
pub fn rows_round_trip_and_list_in_keyset_pages(store: &dyn CronJobStore, at: OffsetDateTime) {
    let payload = json!({"task": "check_quota", "n": [1, 2], "nested": {"ok": true, "none": null}});
    let exact = NewCronJob {
        next_fire_at: at + Duration::milliseconds(5_123),
        payload: payload.as_object().cloned().expect("an object"),
        ..one_time(at)
    };
    let first = store.insert_cron_job(&exact).expect("insert");
    assert_eq!(first.next_fire_at, at + Duration::milliseconds(5_123));
    assert_eq!(first.payload, exact.payload);
    assert_eq!(store.cron_job(first.id).expect("read"), Some(first.clone()));
    let every_five = NewCronJob { schedule: Some("*/5 * * * *".into()), is_one_time: false, ..one_time(at) };
    let second = store.insert_cron_job(&every_five).expect("insert");
    let read = store.cron_job(second.id).expect("read").expect("the row");
    assert_eq!((read.schedule.as_deref(), read.is_one_time), (Some("*/5 * * * *"), false));
    let rest: Vec<CronJob> = (0..3).map(|_| one_time_job(store, at)).collect();
    let all: Vec<i64> = [first.id, second.id].into_iter().chain(ids(&rest)).collect();
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "ids ascend in insertion order: {all:?}");

    assert_eq!(store.list_cron_jobs(None, 10).expect("list"), [&[first.clone(), second.clone()][..], &rest].concat());
    assert_eq!(ids(&store.list_cron_jobs(None, 2).expect("list")), all[..2]);
    assert_eq!(ids(&store.list_cron_jobs(Some(all[1]), 2).expect("list")), all[2..4]);
    assert_eq!(ids(&store.list_cron_jobs(Some(all[3]), 2).expect("list")), all[4..]);
    assert!(store.list_cron_jobs(Some(all[4]), 2).expect("list").is_empty());

    assert!(store.delete_cron_job(first.id).expect("delete"));
    assert!(!store.delete_cron_job(first.id).expect("delete"), "nothing left to delete");
    assert_eq!(store.cron_job(first.id).expect("read"), None);
    assert_eq!(ids(&store.list_cron_jobs(None, 10).expect("list")), all[1..]);
}

/// A group insert (what concurrent `schedule_once` calls share) answers one outcome per job in the order given,
/// each written with ascending ids; an empty group writes nothing. Expects an empty store.
pub fn a_group_insert_returns_its_rows_in_order(store: &dyn CronJobStore, at: OffsetDateTime) {
    let group: Vec<NewCronJob> = (0..300).map(|n| one_time(at + Duration::milliseconds(n))).collect();
    let outcomes = store.insert_cron_jobs(&group).expect("insert");
    assert!(outcomes.iter().all(|outcome| outcome.inserted));
    let stored: Vec<CronJob> = outcomes.into_iter().map(|outcome| outcome.job).collect();
    assert_eq!(stored.len(), 300);
    assert!(stored.windows(2).all(|pair| pair[0].id < pair[1].id));
    assert!(stored.iter().zip(&group).all(|(row, new)| row.next_fire_at == new.next_fire_at));
    assert_eq!(store.list_cron_jobs(None, 1_000).expect("list"), stored);
    assert!(store.insert_cron_jobs(&[]).expect("insert").is_empty());
    assert_eq!(store.list_cron_jobs(None, 1_000).expect("list").len(), 300);
}

/// An `Idempotency-Key` is unique among jobs: a single insert with a held key is a [`StoreError::Conflict`] and
/// writes nothing, the key finds its job, an unknown key finds none, jobs without a key never collide, and deleting
/// the holder frees the key. Expects an empty store.
pub fn an_idempotency_key_is_unique_finds_its_job_and_is_freed_with_it(store: &dyn CronJobStore, at: OffsetDateTime) {
    let key = IdempotencyKey::new("nightly-report").expect("a valid key");
    let first = store.insert_cron_job(&keyed("nightly-report", at)).expect("insert");
    let again = store.insert_cron_job(&keyed("nightly-report", at + Duration::seconds(1)));
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(store.cron_job_by_idempotency_key(&key).expect("read"), Some(first.clone()));
    let unknown = IdempotencyKey::new("weekly-report").expect("a valid key");
    assert_eq!(store.cron_job_by_idempotency_key(&unknown).expect("read"), None);
    one_time_job(store, at);
    one_time_job(store, at);
    assert_eq!(store.list_cron_jobs(None, 10).expect("list").len(), 3, "the refused insert wrote nothing");

    assert!(store.delete_cron_job(first.id).expect("delete"));
    assert_eq!(store.cron_job_by_idempotency_key(&key).expect("read"), None);
    let reused = store.insert_cron_job(&keyed("nightly-report", at)).expect("the key is free again");
    assert_eq!(store.cron_job_by_idempotency_key(&key).expect("read"), Some(reused));
}

/// Pending fires are the rows due strictly before `before`, claimed or not, soonest first, ties by id, at most
/// `limit`: each with its instant and, while claimed, the end of its claim. Expects an empty store.
pub fn pending_fires_come_soonest_first_ties_by_id_up_to_the_limit(store: &dyn CronJobStore, at: OffsetDateTime) {
    let before = at + Duration::seconds(30);
    let late = one_time_job(store, at + Duration::seconds(5));
    let early = one_time_job(store, at - Duration::hours(2));
    let tied = one_time_job(store, at + Duration::seconds(5));
    one_time_job(store, before);
    one_time_job(store, at + Duration::minutes(5));
    let fire = |job: &CronJob, claimed_until: Option<OffsetDateTime>| PendingFire {
        job_id: job.id,
        scheduled_for: job.next_fire_at,
        claimed_until,
        claim_token: claimed_until.map(|_| FencingToken(1)),
    };

    let due = store.pending_fires(before, 10).expect("pending");
    assert_eq!(due, [fire(&early, None), fire(&late, None), fire(&tied, None)]);
    assert_eq!(store.pending_fires(before, 2).expect("pending"), [fire(&early, None), fire(&late, None)]);

    let lease = lease("a", 1, at + Duration::seconds(5));
    assert_eq!(store.claim_fires(&[tied.id], &lease).expect("claim").len(), 1);
    let due = store.pending_fires(before, 10).expect("pending");
    assert_eq!(due, [fire(&early, None), fire(&late, None), fire(&tied, Some(lease.expires_at))]);
}

/// A claim of a batch takes every row of it that is free and leaves the rest: a rival claiming the whole batch gets
/// exactly the rows not claimed yet, and each claimer completes exactly its own. Expects an empty store.
pub fn batches_claim_what_they_can(store: &dyn CronJobStore, at: OffsetDateTime) {
    let fires: Vec<FireKey> = (0..50)
        .map(|n| {
            let instant = at + Duration::milliseconds(n);
            FireKey { job_id: one_time_job(store, instant).id, scheduled_for: instant }
        })
        .collect();
    let job_ids: Vec<i64> = fires.iter().map(|fire| fire.job_id).collect();
    let due_at = at + Duration::seconds(1);
    assert_eq!(ids(&store.claim_fires(&job_ids[..20], &lease("a", 1, due_at)).expect("claim")), job_ids[..20]);
    let mut rival = ids(&store.claim_fires(&job_ids, &lease("b", 1, due_at)).expect("claim"));
    rival.sort_unstable();
    assert_eq!(rival, job_ids[20..]);
    let deletes: Vec<FireCompletion> = fires.iter().map(|fire| FireCompletion::Delete(*fire)).collect();
    assert_eq!(store.complete_fires("b", FencingToken(1), &deletes, &[]).expect("complete"), 30);
    assert_eq!(store.list_cron_jobs(None, 100).expect("list").len(), 20, "b completed only its own");
    assert_eq!(store.complete_fires("a", FencingToken(1), &deletes, &[]).expect("complete"), 20);
    assert!(store.list_cron_jobs(None, 100).expect("list").is_empty());
}

/// A claim names one instant (the row's `next_fire_at`, unchanged by the claim). Advancing a recurring row under
/// its claim moves it to its next instant and clears the claim; only the claim's owner can, and only once: the same
/// completion again finds the row moved on. The next instant is claimable by anyone once due, not before.
/// Expects an empty store.
pub fn advancing_moves_the_row_to_its_next_instant_and_clears_the_claim_once(
    store: &dyn CronJobStore,
    at: OffsetDateTime,
) {
    let job = store.insert_cron_job(&recurring(at)).expect("insert");
    let fire = FireKey { job_id: job.id, scheduled_for: at };
    let claimed = store.claim_fires(&[job.id], &lease("a", 1, at)).expect("claim");
    assert_eq!(claimed.iter().map(|job| job.next_fire_at).collect::<Vec<_>>(), [at]);
    let next = at + Duration::minutes(1);
    let advance = FireCompletion::Advance { fire, next_fire_at: next };
    assert_eq!(store.complete_fires("b", FencingToken(1), &[advance], &[]).expect("complete"), 0, "not b's claim");
    assert_eq!(store.complete_fires("a", FencingToken(1), &[advance], &[]).expect("complete"), 1);
    assert_eq!(store.cron_job(job.id).expect("read").map(|job| job.next_fire_at), Some(next));
    assert_eq!(store.complete_fires("a", FencingToken(1), &[advance], &[]).expect("complete"), 0, "completed already");
    let pending = store.pending_fires(next + Duration::seconds(1), 10).expect("pending");
    assert_eq!(pending, [PendingFire::unclaimed(job.id, next)]);
    assert!(store.claim_fires(&[job.id], &lease("b", 1, next - Duration::seconds(1))).expect("claim").is_empty());
    let claimed = store.claim_fires(&[job.id], &lease("b", 1, next)).expect("claim");
    assert_eq!(claimed.iter().map(|job| job.next_fire_at).collect::<Vec<_>>(), [next]);
}

/// [`CronJobStore::complete_and_claim`] completes one batch and claims the next in one call: the completed row is
/// gone and the claimed one is held by the caller (a rival cannot claim it, the caller can complete it). With
/// nothing to complete or claim it does nothing. Expects an empty store.
pub fn completing_one_batch_and_claiming_the_next_is_one_call(store: &dyn CronJobStore, at: OffsetDateTime) {
    let first = one_time_job(store, at);
    let second = one_time_job(store, at + Duration::milliseconds(1));
    let due_at = at + Duration::seconds(1);
    store.claim_fires(&[first.id], &lease("a", 1, due_at)).expect("claim");
    let done = FireCompletion::Delete(FireKey { job_id: first.id, scheduled_for: at });
    let (completed, claimed) =
        store.complete_and_claim("a", &[done], &[], &[second.id], &lease("a", 1, due_at)).expect("complete and claim");
    assert_eq!((completed, ids(&claimed)), (1, vec![second.id]));
    assert_eq!(store.cron_job(first.id).expect("read"), None);
    let pending = store.pending_fires(due_at, 10).expect("pending");
    assert_eq!(
        pending.iter().map(|fire| (fire.job_id, fire.claimed_until)).collect::<Vec<_>>(),
        [(second.id, Some(due_at + Duration::seconds(10)))]
    );
    assert!(store.claim_fires(&[second.id], &lease("b", 1, due_at)).expect("claim").is_empty(), "a holds it");
    assert_eq!(store.complete_and_claim("a", &[], &[], &[], &lease("a", 1, due_at)).expect("nothing"), (0, vec![]));
    let second_done = FireCompletion::Delete(FireKey { job_id: second.id, scheduled_for: second.next_fire_at });
    assert_eq!(store.complete_fires("a", FencingToken(1), &[second_done], &[]).expect("complete"), 1);
}

/// An agent's pending reminders are its one-time rows: counted and listed soonest first (ties by id), at most
/// `limit`; recurring rows and other agents' rows are neither counted nor listed, and a row goes from both once
/// deleted. Expects an empty store.
pub fn an_agents_one_time_jobs_are_counted_and_listed_soonest_first(store: &dyn CronJobStore, at: OffsetDateTime) {
    let agent = AgentId::new("agent-7").expect("a valid agent id");
    assert_eq!(store.count_one_time_jobs(&agent).expect("count"), 0);
    let later = one_time_job(store, at + Duration::seconds(30));
    let sooner = one_time_job(store, at + Duration::seconds(10));
    let tied = one_time_job(store, at + Duration::seconds(10));
    store
        .insert_cron_job(&NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(at) })
        .expect("insert");
    let other = AgentId::new("agent-8").expect("a valid agent id");
    store.insert_cron_job(&NewCronJob { agent_id: other.clone(), ..one_time(at) }).expect("insert");

    assert_eq!(store.count_one_time_jobs(&agent).expect("count"), 3);
    assert_eq!(store.count_one_time_jobs(&other).expect("count"), 1);
    assert_eq!(store.one_time_jobs_of(&agent, 10).expect("list"), vec![sooner.clone(), tied.clone(), later.clone()]);
    assert_eq!(store.one_time_jobs_of(&agent, 2).expect("list"), vec![sooner.clone(), tied]);
    assert!(store.delete_cron_job(sooner.id).expect("delete"));
    assert_eq!(store.count_one_time_jobs(&agent).expect("count"), 2);
    let nobody = AgentId::new("agent-9").expect("a valid agent id");
    assert_eq!(store.one_time_jobs_of(&nobody, 10).expect("list"), Vec::<CronJob>::new());
    assert_eq!(store.count_one_time_jobs(&nobody).expect("count"), 0);
}

/// A job's time zone comes back as written from every read of a row (by id, by key, in a list, an agent's list, a
/// claim, a pause) and is unchanged when the row advances; a row written with the default zone reads it back.
/// Expects an empty store.
pub fn a_jobs_time_zone_round_trips_through_every_read(store: &dyn CronJobStore, at: OffsetDateTime) {
    let zoned = NewCronJob {
        timezone: "Australia/Sydney".to_owned(),
        idempotency_key: Some(IdempotencyKey::new("zoned").expect("a valid key")),
        ..recurring(at)
    };
    let job = store.insert_cron_job(&zoned).expect("insert");
    assert_eq!(job.timezone, "Australia/Sydney");
    let utc = store.insert_cron_job(&recurring(at + Duration::seconds(1))).expect("insert");
    assert_eq!(utc.timezone, crate::DEFAULT_TIMEZONE);
    let grouped = store
        .insert_cron_jobs(&[NewCronJob { timezone: "America/New_York".to_owned(), ..one_time(at) }])
        .expect("insert");
    assert_eq!(grouped[0].job.timezone, "America/New_York", "a group insert keeps each row's zone");

    assert_eq!(store.cron_job(job.id).expect("read"), Some(job.clone()));
    let key = IdempotencyKey::new("zoned").expect("a valid key");
    assert_eq!(store.cron_job_by_idempotency_key(&key).expect("read"), Some(job.clone()));
    let listed = store.list_cron_jobs(None, 10).expect("list");
    let zones: Vec<&str> = listed.iter().map(|job| job.timezone.as_str()).collect();
    assert_eq!(zones, ["Australia/Sydney", crate::DEFAULT_TIMEZONE, "America/New_York"]);
    let agent = AgentId::new("agent-7").expect("a valid agent id");
    assert_eq!(store.recurring_jobs_of(&agent, 10).expect("list"), [job.clone(), utc]);
    let paused = store.set_cron_job_paused(job.id, true).expect("pause").expect("the row");
    assert_eq!(paused.timezone, "Australia/Sydney");
    store.set_cron_job_paused(job.id, false).expect("resume");
    let claimed = store.claim_fires(&[job.id], &lease("a", 1, at)).expect("claim");
    assert_eq!(claimed, std::slice::from_ref(&job), "a claim reads the zone back");
    let fire = FireKey { job_id: job.id, scheduled_for: at };
    let next = at + Duration::days(1);
    let advance = FireCompletion::Advance { fire, next_fire_at: next };
    assert_eq!(store.complete_fires("a", FencingToken(1), &[advance], &[]).expect("complete"), 1);
    let advanced = store.cron_job(job.id).expect("read").expect("the row");
    assert_eq!((advanced.next_fire_at, advanced.timezone.as_str()), (next, "Australia/Sydney"));
}

/// `agent_id`'s recurring rows are counted and listed soonest first (ties by id) up to `limit`; one-time rows and
/// other agents' rows are neither. `delete_recurring_job` deletes a recurring row only for its agent, claimed or
/// not, and once; a one-time row never. Expects an empty store.
pub fn an_agents_recurring_jobs_are_counted_listed_and_deleted_only_for_it(
    store: &dyn CronJobStore,
    at: OffsetDateTime,
) {
    let agent = AgentId::new("agent-7").expect("a valid agent id");
    let other = AgentId::new("agent-8").expect("a valid agent id");
    assert_eq!(store.count_recurring_jobs(&agent).expect("count"), 0);
    let later = store.insert_cron_job(&recurring(at + Duration::seconds(30))).expect("insert");
    let sooner = store.insert_cron_job(&recurring(at + Duration::seconds(10))).expect("insert");
    let tied = store.insert_cron_job(&recurring(at + Duration::seconds(10))).expect("insert");
    let once = one_time_job(store, at);
    let others = store.insert_cron_job(&NewCronJob { agent_id: other.clone(), ..recurring(at) }).expect("insert");

    assert_eq!(store.count_recurring_jobs(&agent).expect("count"), 3);
    assert_eq!(store.count_recurring_jobs(&other).expect("count"), 1);
    assert_eq!(store.recurring_jobs_of(&agent, 10).expect("list"), [sooner.clone(), tied.clone(), later.clone()]);
    assert_eq!(store.recurring_jobs_of(&agent, 2).expect("list"), [sooner.clone(), tied.clone()]);

    assert!(!store.delete_recurring_job(others.id, &agent).expect("delete"), "another agent's job");
    assert!(!store.delete_recurring_job(once.id, &agent).expect("delete"), "a one-time job");
    assert!(store.cron_job(once.id).expect("read").is_some());
    assert_eq!(store.claim_fires(&[sooner.id], &lease("a", 1, sooner.next_fire_at)).expect("claim").len(), 1);
    assert!(store.delete_recurring_job(sooner.id, &agent).expect("delete"), "claimed or not");
    assert!(!store.delete_recurring_job(sooner.id, &agent).expect("delete"), "gone already");
    assert!(!store.delete_recurring_job(987_654, &agent).expect("delete"), "no such job");
    assert_eq!(store.count_recurring_jobs(&agent).expect("count"), 2);
    assert_eq!(store.recurring_jobs_of(&agent, 10).expect("list"), [tied, later]);
}

/// Every row counts as a job, one-time or recurring, claimed or not, until it is deleted. Expects an empty store.
pub fn every_row_counts_as_a_job_until_it_is_deleted(store: &dyn CronJobStore, at: OffsetDateTime) {
    assert_eq!(store.count_cron_jobs().expect("count"), 0);
    let first = one_time_job(store, at);
    one_time_job(store, at + Duration::seconds(10));
    store
        .insert_cron_job(&NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(at) })
        .expect("insert");
    assert_eq!(store.count_cron_jobs().expect("count"), 3);
    assert_eq!(store.claim_fires(&[first.id], &lease("claimer", 1, at)).expect("claim").len(), 1);
    assert_eq!(store.count_cron_jobs().expect("count"), 3, "a claimed row is still a job");
    assert!(store.delete_cron_job(first.id).expect("delete"));
    assert_eq!(store.count_cron_jobs().expect("count"), 2);
}

/// A one-time row is deleted by `delete_one_time_job` only for its own agent, only while it is not claimed under
/// a live lease (a claim whose lease ended counts as not claimed), and once; a recurring row never. Expects an
/// empty store.
pub fn a_one_time_job_is_deleted_only_for_its_agent_and_not_while_claimed(
    store: &dyn CronJobStore,
    at: OffsetDateTime,
) {
    let agent = AgentId::new("agent-7").expect("a valid agent id");
    let other = AgentId::new("agent-8").expect("a valid agent id");
    let job = one_time_job(store, at);
    assert!(!store.delete_one_time_job(job.id, &other, at).expect("delete"), "another agent's job");
    assert!(store.cron_job(job.id).expect("read").is_some());

    assert_eq!(store.claim_fires(&[job.id], &lease("a", 1, at)).expect("claim").len(), 1);
    assert!(!store.delete_one_time_job(job.id, &agent, at + Duration::seconds(9)).expect("delete"), "claimed");
    assert!(store.cron_job(job.id).expect("read").is_some());
    assert!(store.delete_one_time_job(job.id, &agent, at + Duration::seconds(10)).expect("delete"), "lease over");
    assert_eq!(store.cron_job(job.id).expect("read"), None);
    assert!(!store.delete_one_time_job(job.id, &agent, at).expect("delete"), "gone already");

    let recurring = store
        .insert_cron_job(&NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(at) })
        .expect("insert");
    assert!(!store.delete_one_time_job(recurring.id, &agent, at).expect("delete"), "a recurring job");
    assert!(store.cron_job(recurring.id).expect("read").is_some());
    assert!(!store.delete_one_time_job(987_654, &agent, at).expect("delete"), "no such job");
}

/// A paused job keeps its row, reads back `paused`, is neither listed as due nor claimable; resumed it is both
/// again at the instant it had (a recurring job that missed instants while paused is due at once). Pausing or
/// resuming twice changes nothing more, and an unknown id is `None`. A new job is not paused. Expects an empty
/// store.
pub fn a_paused_job_keeps_its_row_but_is_neither_due_nor_claimable_until_resumed(
    store: &dyn CronJobStore,
    at: OffsetDateTime,
) {
    let job = store.insert_cron_job(&recurring(at)).expect("insert");
    let other = one_time_job(store, at + Duration::milliseconds(1));
    assert!(!job.paused && !other.paused, "a new job runs");
    let paused = store.set_cron_job_paused(job.id, true).expect("pause").expect("the row");
    assert_eq!(paused, CronJob { paused: true, ..job.clone() }, "only the flag changes");
    assert_eq!(store.set_cron_job_paused(job.id, true).expect("pause again"), Some(paused.clone()));
    assert_eq!(store.cron_job(job.id).expect("read"), Some(paused.clone()));
    assert_eq!(store.list_cron_jobs(None, 10).expect("list"), [paused, other.clone()]);
    let later = at + Duration::minutes(10);
    let due = store.pending_fires(later, 10).expect("pending");
    assert_eq!(due.iter().map(|fire| fire.job_id).collect::<Vec<_>>(), [other.id], "the paused row is not due");
    assert!(store.claim_fires(&[job.id], &lease("a", 1, later)).expect("claim").is_empty(), "nor claimable");

    let resumed = store.set_cron_job_paused(job.id, false).expect("resume").expect("the row");
    assert_eq!(resumed, job, "resumed at the instant it had");
    assert_eq!(store.set_cron_job_paused(job.id, false).expect("resume again"), Some(job.clone()));
    let due = store.pending_fires(later, 10).expect("pending");
    assert_eq!(due.iter().map(|fire| fire.job_id).collect::<Vec<_>>(), [job.id, other.id]);
    let claimed = store.claim_fires(&[job.id], &lease("a", 1, later)).expect("claim");
    assert_eq!(claimed.iter().map(|job| job.next_fire_at).collect::<Vec<_>>(), [at], "the first missed instant");
    assert_eq!(store.set_cron_job_paused(other.id + 1_000, true).expect("pause"), None);
}

/// Pausing a job whose instant is claimed leaves the claim alone: its completion still applies (the fire was on
/// its way), and the advanced row stays paused. Expects an empty store.
pub fn a_claim_taken_before_a_pause_completes_and_the_row_stays_paused(store: &dyn CronJobStore, at: OffsetDateTime) {
    let job = store.insert_cron_job(&recurring(at)).expect("insert");
    assert_eq!(store.claim_fires(&[job.id], &lease("a", 1, at)).expect("claim").len(), 1);
    store.set_cron_job_paused(job.id, true).expect("pause").expect("the row");
    let next = at + Duration::minutes(1);
    let advance = FireCompletion::Advance { fire: FireKey { job_id: job.id, scheduled_for: at }, next_fire_at: next };
    assert_eq!(store.complete_fires("a", FencingToken(1), &[advance], &[]).expect("complete"), 1);
    let row = store.cron_job(job.id).expect("read").expect("the row");
    assert_eq!((row.next_fire_at, row.paused), (next, true));
    assert!(store.pending_fires(next + Duration::hours(1), 10).expect("pending").is_empty());
}
