//! Rules every [`MailboxStore`] must keep, together with the [`CronJobStore`] whose completions record the fires:
//! a fire is recorded once, in the write that completes it (fenced with it), read back by agent in firing order,
//! marked received once (recorded by the mark when the completion has not written it yet), and pruned by age.

use serde_json::{Map, json};
use time::{Duration, OffsetDateTime};

use crate::mailbox::fire_id;
use crate::{
    AgentId, CronJob, CronJobStore, FencingEpoch, FencingToken, FireCompletion, FireKey, FiredReminder, MailboxEntry,
    MailboxQuery, MailboxStore, NewCronJob, StoreError,
};

use super::cron::lease;

fn agent(id: &str) -> AgentId {
    AgentId::new(id).expect("a valid agent id")
}

fn job(store: &(impl CronJobStore + ?Sized), agent_id: &str, at: OffsetDateTime) -> CronJob {
    let payload = json!({"task": "check_quota", "n": [1, 2]}).as_object().cloned().unwrap_or_else(Map::new);
    let new = NewCronJob {
        agent_id: agent(agent_id),
        schedule: None,
        next_fire_at: at,
        payload,
        is_one_time: true,
        idempotency_key: None,
    };
    store.insert_cron_job(&new).expect("insert")
}

/// The fire of `job` at its instant, published at `fired_at`.
fn fired(job: &CronJob, fired_at: OffsetDateTime) -> FiredReminder {
    FiredReminder {
        fire_id: fire_id(job.id, job.next_fire_at),
        job_id: job.id,
        agent_id: job.agent_id.clone(),
        payload: job.payload.clone(),
        scheduled_for: job.next_fire_at,
        fired_at,
    }
}

/// A fire of no stored job (job ids from 1,000 up), for the rules about reading and marking.
fn fire_of(agent_id: &str, n: i64, at: OffsetDateTime) -> FiredReminder {
    let scheduled_for = at + Duration::milliseconds(n);
    FiredReminder {
        fire_id: fire_id(1_000 + n, scheduled_for),
        job_id: 1_000 + n,
        agent_id: agent(agent_id),
        payload: Map::new(),
        scheduled_for,
        fired_at: scheduled_for + Duration::microseconds(250),
    }
}

fn query(agent_id: &str, unreceived_only: bool, after: i64, through: Option<i64>, limit: usize) -> MailboxQuery {
    MailboxQuery { agent_id: agent(agent_id), unreceived_only, after, through, limit }
}

fn everything(store: &(impl MailboxStore + ?Sized), agent_id: &str) -> Vec<MailboxEntry> {
    store.mailbox_entries(&query(agent_id, false, 0, None, 1_000)).expect("read")
}

fn fire_ids(entries: &[MailboxEntry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.reminder.fire_id.as_str()).collect()
}

/// Records `fires` as the scheduler's completions do (nothing to complete), under token 1.
fn record(store: &(impl CronJobStore + ?Sized), fires: &[FiredReminder]) {
    store.complete_fires("recorder", FencingToken(1), &[], fires).expect("record");
}

/// A completion records each published fire in its agent's mailbox with every field (microsecond timestamps
/// survive), unreceived, in the order given; a fire is recorded even when its completion no longer applies (the
/// row went meanwhile) and even with nothing to complete. Recording a fire again (a refire after a crash, with the
/// same `fire_id`) changes nothing: one entry, its first `fired_at`. Expects an empty store.
pub fn a_completion_records_each_published_fire_once<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let (first, second, other) = (job(store, "agent-7", at), job(store, "agent-7", at), job(store, "agent-8", at));
    let ids = [first.id, second.id, other.id];
    assert_eq!(store.claim_fires(&ids, &lease("a", 1, at)).expect("claim").len(), 3);
    let fired_at = at + Duration::microseconds(1_234);
    let fires = [fired(&first, fired_at), fired(&second, fired_at), fired(&other, fired_at)];
    let deletes: Vec<FireCompletion> =
        ids.iter().map(|id| FireCompletion::Delete(FireKey { job_id: *id, scheduled_for: at })).collect();
    assert!(store.delete_cron_job(second.id).expect("delete"), "an operator deletes it after it was published");
    assert_eq!(store.complete_fires("a", FencingToken(1), &deletes, &fires).expect("complete"), 2);

    let mine = everything(store, "agent-7");
    assert_eq!(mine.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), [&fires[0], &fires[1]]);
    assert!(mine.iter().all(|entry| entry.received_at.is_none()), "nobody received them yet");
    assert!(mine[0].seq < mine[1].seq, "in the order recorded");
    assert_eq!(fire_ids(&everything(store, "agent-8")), [fires[2].fire_id.as_str()]);

    let refired = FiredReminder { fired_at: at + Duration::seconds(10), ..fires[0].clone() };
    assert_eq!(store.complete_fires("b", FencingToken(1), &deletes[..1], &[refired]).expect("complete"), 0);
    assert_eq!(everything(store, "agent-7"), mine, "a refire records nothing new");

    let alone = fire_of("agent-7", 5, at);
    record(store, std::slice::from_ref(&alone));
    let entries = everything(store, "agent-7");
    assert_eq!(entries.last().map(|entry| &entry.reminder), Some(&alone), "recorded with nothing to complete");
    assert!(entries.last().is_some_and(|entry| entry.seq > mine[1].seq));
}

/// The recording is part of the leader-only write: a completion (alone, or combined with claims) under a token
/// older than the newest the store has seen records nothing; under the newest it records. Expects an empty store
/// that has seen no token above 1.
pub fn a_fenced_completion_records_nothing<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + FencingEpoch + ?Sized,
{
    let first = job(store, "agent-7", at);
    let second = job(store, "agent-7", at);
    assert_eq!(store.claim_fires(&[first.id], &lease("leader-5", 5, at)).expect("claim").len(), 1);
    let done = FireCompletion::Delete(FireKey { job_id: first.id, scheduled_for: at });
    let fires = [fired(&first, at)];
    let stale = store.complete_fires("leader-5", FencingToken(4), &[done], &fires);
    assert_eq!(stale, Err(StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) }));
    let stale = store.complete_fires("leader-5", FencingToken(4), &[], &fires);
    assert!(stale.is_err_and(|error| error.is_fenced()), "recording alone is fenced too");
    let combined = store.complete_and_claim("leader-5", &[done], &fires, &[second.id], &lease("leader-5", 4, at));
    assert!(combined.is_err_and(|error| error.is_fenced()));
    assert!(everything(store, "agent-7").is_empty(), "the refused writes recorded nothing");

    let (completed, claimed) = store
        .complete_and_claim("leader-5", &[done], &fires, &[second.id], &lease("leader-5", 5, at))
        .expect("complete and claim");
    assert_eq!((completed, claimed.len()), (1, 1));
    assert_eq!(everything(store, "agent-7").iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), [&fires[0]]);
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(5));
}

/// Reads take one agent's entries in firing order after a cursor, up to a bound and a limit, every entry or only
/// the unreceived ones; a fire's position is its `seq`, found only in its own agent's mailbox. A write records its
/// fires by `fired_at` (ties by `fire_id`) whatever order it was given them in. Expects an empty store.
pub fn reads_page_one_agents_entries_in_firing_order<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let fires: Vec<FiredReminder> =
        (0..7).map(|n| fire_of(if n % 3 == 1 { "agent-8" } else { "agent-7" }, n, at)).collect();
    let mut given = fires.clone();
    given[..4].reverse();
    record(store, &given[..4]);
    record(store, &given[4..]);
    let mine: Vec<&FiredReminder> = fires.iter().filter(|fire| fire.agent_id.as_str() == "agent-7").collect();
    let entries = everything(store, "agent-7");
    assert_eq!(entries.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), mine);
    assert!(entries.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let seqs: Vec<i64> = entries.iter().map(|entry| entry.seq).collect();

    let page = |unreceived_only, after, through, limit| {
        store.mailbox_entries(&query("agent-7", unreceived_only, after, through, limit)).expect("read")
    };
    let seqs_of = |entries: Vec<MailboxEntry>| entries.iter().map(|entry| entry.seq).collect::<Vec<_>>();
    assert_eq!(seqs_of(page(false, 0, None, 2)), seqs[..2]);
    assert_eq!(seqs_of(page(false, seqs[1], None, 2)), seqs[2..4]);
    assert_eq!(seqs_of(page(false, seqs[3], None, 2)), seqs[4..]);
    assert!(page(false, seqs[4], None, 2).is_empty());
    assert_eq!(seqs_of(page(false, seqs[0], Some(seqs[3]), 10)), seqs[1..4], "through is inclusive");
    assert!(page(false, seqs[3], Some(seqs[3]), 10).is_empty());

    store.mark_received(&[mine[1], mine[3]], at).expect("mark");
    assert_eq!(seqs_of(page(true, 0, None, 10)), [seqs[0], seqs[2], seqs[4]]);
    assert_eq!(seqs_of(page(true, seqs[0], None, 1)), [seqs[2]]);
    assert_eq!(seqs_of(page(true, 0, Some(seqs[3]), 10)), [seqs[0], seqs[2]]);
    assert_eq!(seqs_of(page(false, 0, None, 10)), seqs, "every entry, received or not");

    assert_eq!(store.mailbox_position(&agent("agent-7"), &mine[2].fire_id).expect("position"), Some(seqs[2]));
    assert_eq!(store.mailbox_position(&agent("agent-8"), &mine[2].fire_id).expect("position"), None, "not its fire");
    assert_eq!(store.mailbox_position(&agent("agent-7"), "1:2026-01-01T00:00:00Z").expect("position"), None);
    assert!(everything(store, "agent-9").is_empty());
}

/// Marking received sets `received_at` once (a later mark keeps the first), and a fire not recorded yet is
/// recorded by the mark, received, with all its fields; the completion's later record of it changes nothing. A
/// fire named twice in one mark is recorded once. Expects an empty store.
pub fn marking_received_keeps_the_first_time_and_records_fires_not_recorded_yet<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let recorded = fire_of("agent-7", 1, at);
    record(store, std::slice::from_ref(&recorded));
    let first_mark = at + Duration::microseconds(1_500);
    store.mark_received(&[&recorded], first_mark).expect("mark");
    store.mark_received(&[&recorded], at + Duration::seconds(1)).expect("mark again");
    assert_eq!(everything(store, "agent-7")[0].received_at, Some(first_mark));

    let live = fire_of("agent-7", 2, at);
    store.mark_received(&[&live, &live], first_mark).expect("mark before the completion");
    let entries = everything(store, "agent-7");
    assert_eq!(entries.len(), 2, "recorded once");
    assert_eq!((&entries[1].reminder, entries[1].received_at), (&live, Some(first_mark)));
    record(store, &[FiredReminder { fired_at: at + Duration::seconds(2), ..live.clone() }]);
    assert_eq!(everything(store, "agent-7"), entries, "the completion's record changed nothing");
    assert!(store.mailbox_entries(&query("agent-7", true, 0, None, 10)).expect("read").is_empty());
    store.mark_received(&[], at).expect("marking nothing");
}

/// Pruning looks at the first `limit` entries in firing order and deletes those fired before the cutoff, received or
/// not; the rest stay readable, and once the start holds nothing old a call deletes nothing. Expects an empty
/// store.
pub fn pruning_deletes_the_old_entries_among_the_first_in_firing_order<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let fired = |n: i64, fired_at: OffsetDateTime| FiredReminder { fired_at, ..fire_of("agent-7", n, at) };
    let first = fired(1, at - Duration::hours(5));
    let received = fired(2, at - Duration::hours(3));
    // Out of order by its age (fired by an instance whose clock runs ahead): it does not stop the pruning of what
    // follows it, and goes once it is old enough.
    let ahead = fired(3, at - Duration::minutes(30));
    let late = fired(4, at - Duration::hours(2));
    let new = fired(5, at);
    // One write each: recorded in this order.
    for fire in [&first, &received, &ahead, &late, &new] {
        record(store, std::slice::from_ref(fire));
    }
    store.mark_received(&[&received], at).expect("mark");
    let cutoff = at - Duration::hours(1);
    assert_eq!(store.prune_mailbox(cutoff, 1).expect("prune"), 1);
    let left =
        |store: &S| everything(store, "agent-7").into_iter().map(|entry| entry.reminder.job_id).collect::<Vec<_>>();
    assert_eq!(left(store), [received.job_id, ahead.job_id, late.job_id, new.job_id]);
    assert_eq!(store.mailbox_position(&agent("agent-7"), &first.fire_id).expect("position"), None);
    assert_eq!(store.prune_mailbox(cutoff, 3).expect("prune"), 2, "the old ones among the first three");
    assert_eq!(left(store), [ahead.job_id, new.job_id]);
    assert_eq!(store.prune_mailbox(cutoff, 10).expect("prune"), 0, "nothing old is left");
    assert_eq!(store.prune_mailbox(at, 10).expect("prune"), 1);
    assert_eq!(left(store), [new.job_id]);
}
