//! Rules every [`MailboxStore`] must keep, together with the [`CronJobStore`] whose completions record the fires:
//! a fire is recorded once, in the write that completes it (fenced with it), and only by it; read back by agent in
//! firing order, and across agents after a cursor; marked received once, and only in its own agent's mailbox; and
//! pruned by age.

use serde_json::{Map, json};
use time::{Duration, OffsetDateTime};

use crate::ports::mailbox::fire_id;
use crate::{
    AgentId, CronJob, CronJobRun, CronJobStore, FencingEpoch, FencingToken, FireCompletion, FireKey, FiredReminder,
    MailboxEntry, MailboxQuery, MailboxStore, NewCronJob, Receipt, RunOutcome, SkippedRun, StoreError,
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
        timezone: crate::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: crate::MisfirePolicy::FireOnce,
        max_lateness_ms: None,
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
        epoch: 1,
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
        // Kept and read back as it was (a term per fire here, so a mix-up of rows would show).
        epoch: n.unsigned_abs() + 7,
    }
}

fn query(agent_id: &str, unreceived_only: bool, after: i64, through: Option<i64>, limit: usize) -> MailboxQuery {
    MailboxQuery { agent_id: agent(agent_id), unreceived_only, after, through, limit }
}

fn everything(store: &(impl MailboxStore + ?Sized), agent_id: &str) -> Vec<MailboxEntry> {
    store.mailbox_entries(&query(agent_id, false, 0, None, 1_000)).expect("read")
}

/// The receipt of a stream of `agent_id` that sent `fire`.
fn receipt(agent_id: &str, fire: &FiredReminder) -> Receipt {
    Receipt { agent_id: agent(agent_id), fire_id: fire.fire_id.clone() }
}

/// Receipts of `fires`, each by a stream of its own agent.
fn receipts(fires: &[&FiredReminder]) -> Vec<Receipt> {
    fires.iter().map(|fire| receipt(fire.agent_id.as_str(), fire)).collect()
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

    assert!(store.mark_received(&receipts(&[mine[1], mine[3]]), at).expect("mark").is_empty());
    assert_eq!(seqs_of(page(true, 0, None, 10)), [seqs[0], seqs[2], seqs[4]]);
    assert_eq!(seqs_of(page(true, seqs[0], None, 1)), [seqs[2]]);
    assert_eq!(seqs_of(page(true, 0, Some(seqs[3]), 10)), [seqs[0], seqs[2]]);
    assert_eq!(seqs_of(page(false, 0, None, 10)), seqs, "every entry, received or not");

    assert_eq!(store.mailbox_position(&agent("agent-7"), &mine[2].fire_id).expect("position"), Some(seqs[2]));
    assert_eq!(store.mailbox_position(&agent("agent-8"), &mine[2].fire_id).expect("position"), None, "not its fire");
    assert_eq!(store.mailbox_position(&agent("agent-7"), "1:2026-01-01T00:00:00Z").expect("position"), None);
    assert!(everything(store, "agent-9").is_empty());
}

/// Marking received sets `received_at` once (a later mark keeps the first). A receipt records nothing: one for a fire
/// not recorded yet, or for another agent's fire (a stream of agent-8 naming agent-7's fire id), marks nothing and is
/// answered as unknown, by its index; the completion's later record of such a fire is unreceived, and a receipt
/// then marks it. Expects an empty store.
pub fn a_receipt_marks_only_an_entry_a_completion_wrote_in_its_own_agents_mailbox<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let recorded = fire_of("agent-7", 1, at);
    record(store, std::slice::from_ref(&recorded));
    let first_mark = at + Duration::microseconds(1_500);
    assert!(store.mark_received(&receipts(&[&recorded]), first_mark).expect("mark").is_empty());
    assert!(store.mark_received(&receipts(&[&recorded]), at + Duration::seconds(1)).expect("mark again").is_empty());
    assert_eq!(everything(store, "agent-7")[0].received_at, Some(first_mark));

    let live = fire_of("agent-7", 2, at);
    let other = fire_of("agent-7", 3, at);
    record(store, std::slice::from_ref(&other));
    let marks = [receipt("agent-7", &live), receipt("agent-8", &other), receipt("agent-7", &live)];
    assert_eq!(store.mark_received(&marks, first_mark).expect("mark before the completion"), [0, 1, 2]);
    assert_eq!(fire_ids(&everything(store, "agent-7")), [recorded.fire_id.as_str(), other.fire_id.as_str()]);
    assert!(everything(store, "agent-8").is_empty(), "nothing recorded under the stream's agent either");
    assert_eq!(everything(store, "agent-7")[1].received_at, None, "another agent's receipt marks nothing");

    record(store, std::slice::from_ref(&live));
    let unreceived = store.mailbox_entries(&query("agent-7", true, 0, None, 10)).expect("read");
    assert_eq!(fire_ids(&unreceived), [other.fire_id.as_str(), live.fire_id.as_str()]);
    let mixed = [receipt("agent-7", &live), receipt("agent-7", &fire_of("agent-7", 4, at)), receipt("agent-7", &other)];
    assert_eq!(store.mark_received(&mixed, first_mark).expect("mark after the completion"), [1]);
    assert!(store.mailbox_entries(&query("agent-7", true, 0, None, 10)).expect("read").is_empty());
    assert!(store.mark_received(&[], at).expect("marking nothing").is_empty());
}

/// Across agents: the head is the newest entry's `seq` (0 when empty), and a read after a cursor returns every
/// agent's entries past it by ascending `seq`, with those named in `also` below it (numbers of nothing are
/// ignored), at most `limit`. Expects an empty store.
pub fn every_agents_newest_entries_are_read_after_a_cursor<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    assert_eq!(store.mailbox_head().expect("head"), 0);
    assert!(store.mailbox_since(0, &[], 10).expect("read").is_empty());
    let agents = ["agent-7", "agent-8", "agent-9"].into_iter().cycle();
    let fires: Vec<FiredReminder> = (0..6).zip(agents).map(|(n, agent_id)| fire_of(agent_id, n, at)).collect();
    for fire in &fires {
        record(store, std::slice::from_ref(fire));
    }
    let all = store.mailbox_since(0, &[], 100).expect("read");
    assert_eq!(all.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), fires.iter().collect::<Vec<_>>());
    assert!(all.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let seqs: Vec<i64> = all.iter().map(|entry| entry.seq).collect();
    assert_eq!(store.mailbox_head().expect("head"), seqs[5]);

    let seqs_of = |entries: Vec<MailboxEntry>| entries.iter().map(|entry| entry.seq).collect::<Vec<_>>();
    assert_eq!(seqs_of(store.mailbox_since(seqs[2], &[], 100).expect("read")), seqs[3..]);
    assert_eq!(seqs_of(store.mailbox_since(seqs[2], &[], 2).expect("read")), seqs[3..5]);
    assert!(store.mailbox_since(seqs[5], &[], 100).expect("read").is_empty(), "nothing new");
    let gaps = [seqs[0], seqs[1], seqs[5] + 1_000];
    assert_eq!(seqs_of(store.mailbox_since(seqs[4], &gaps, 100).expect("read")), [seqs[0], seqs[1], seqs[5]]);
    assert_eq!(seqs_of(store.mailbox_since(seqs[4], &gaps, 2).expect("read")), [seqs[0], seqs[1]]);
    assert_eq!(seqs_of(store.mailbox_since(seqs[1], &[seqs[3]], 100).expect("read")), seqs[2..], "each once");
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
    assert!(store.mark_received(&receipts(&[&received]), at).expect("mark").is_empty());
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

/// The instant `n` seconds after `at` of a job `job_id` of `agent_id`, skipped for `outcome` at `skipped_at`.
fn skip_of(agent_id: &str, job_id: i64, scheduled_for: OffsetDateTime, outcome: RunOutcome) -> SkippedRun {
    SkippedRun {
        fire_id: fire_id(job_id, scheduled_for),
        job_id,
        agent_id: agent(agent_id),
        scheduled_for,
        skipped_at: scheduled_for + Duration::seconds(30),
        outcome,
    }
}

/// A job's runs are its recorded fires (with their `received_at`) and its skipped instants, newest first by
/// `scheduled_for`, at most `limit`, and only its own; they outlive the job's row. A skipped instant is recorded
/// once (a repeat counts nothing new), under the leader's token only (an older one records nothing), and never
/// reaches the mailbox: no entry, no position, nothing after a cursor. Expects an empty store that has seen no
/// token above 1.
pub fn runs_list_fires_and_skips_newest_first_outlive_their_job_and_stay_out_of_the_mailbox<S>(
    store: &S,
    at: OffsetDateTime,
) where
    S: CronJobStore + MailboxStore + FencingEpoch + ?Sized,
{
    let job = job(store, "agent-7", at);
    let instant = |seconds: i64| at + Duration::seconds(seconds);
    let fire = |seconds: i64| FiredReminder {
        fire_id: fire_id(job.id, instant(seconds)),
        scheduled_for: instant(seconds),
        fired_at: instant(seconds) + Duration::microseconds(1_500),
        ..fired(&job, at)
    };
    let skip = |seconds: i64, outcome| skip_of("agent-7", job.id, instant(seconds), outcome);
    let (first, third) = (fire(0), fire(2));
    record(store, &[first.clone(), third.clone()]);
    let skipped = [skip(1, RunOutcome::SkippedMisfire), skip(3, RunOutcome::SkippedLate)];
    assert_eq!(store.record_skipped_runs(FencingToken(1), &skipped).expect("record skips"), 2);
    assert_eq!(store.record_skipped_runs(FencingToken(1), &skipped[..1]).expect("again"), 0, "recorded once");
    // Another job's runs are not this one's.
    record(store, &[fire_of("agent-7", 9, at)]);
    let elsewhere = skip_of("agent-8", job.id + 500, instant(4), RunOutcome::SkippedMisfire);
    assert_eq!(store.record_skipped_runs(FencingToken(1), &[elsewhere]).expect("record"), 1);
    assert!(store.mark_received(&receipts(&[&first]), instant(10)).expect("mark").is_empty());

    let runs = store.cron_job_runs(job.id, 10).expect("runs");
    let seen: Vec<(i64, RunOutcome)> =
        runs.iter().map(|run| ((run.scheduled_for - at).whole_seconds(), run.outcome)).collect();
    assert_eq!(
        seen,
        [(3, RunOutcome::SkippedLate), (2, RunOutcome::Fired), (1, RunOutcome::SkippedMisfire), (0, RunOutcome::Fired)]
    );
    assert_eq!(runs[1], CronJobRun::fired(&MailboxEntry { seq: 0, reminder: third, received_at: None }));
    assert_eq!(runs[3].received_at, Some(instant(10)), "a fire a stream handed out says when");
    assert_eq!(runs[3].fired_at, first.fired_at);
    assert_eq!(runs[0], CronJobRun::skipped(&skipped[1]));
    assert_eq!(runs[0].lateness_ms(), 30_000);
    assert_eq!(store.cron_job_runs(job.id, 2).expect("runs"), runs[..2], "the newest `limit`");

    assert!(store.delete_cron_job(job.id).expect("delete"));
    assert_eq!(store.cron_job_runs(job.id, 10).expect("runs"), runs, "a deleted job's runs stay");
    assert_eq!(store.cron_job_runs(job.id + 1_000_000, 10).expect("runs"), [], "no job, no runs");

    let mine = everything(store, "agent-7");
    assert_eq!(mine.len(), 3, "the fires only (two of this job, one of another): skipped runs never reach it");
    assert_eq!(store.mailbox_position(&agent("agent-7"), &skipped[0].fire_id).expect("position"), None);
    assert_eq!(store.mailbox_since(0, &[], 100).expect("since").len(), 3, "the same three");

    // A write under a newer token raises the epoch; a deposed leader's is refused whole.
    assert_eq!(store.record_skipped_runs(FencingToken(5), &[skip(6, RunOutcome::SkippedMisfire)]).expect("leader"), 1);
    let deposed = skip(5, RunOutcome::SkippedMisfire);
    let refused = store.record_skipped_runs(FencingToken(4), std::slice::from_ref(&deposed));
    assert_eq!(refused, Err(StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) }));
    assert!(store.cron_job_runs(job.id, 10).expect("runs").iter().all(|run| run.fire_id != deposed.fire_id));
    assert_eq!(store.newest_token().expect("epoch"), FencingToken(5));
}

/// Pruning the mailbox prunes skipped runs by the same cutoff, oldest recorded first, and counts them with the
/// entries it deleted. Expects an empty store.
pub fn pruning_the_mailbox_prunes_skipped_runs_by_the_same_cutoff<S>(store: &S, at: OffsetDateTime)
where
    S: CronJobStore + MailboxStore + ?Sized,
{
    let old = SkippedRun { skipped_at: at - Duration::hours(2), ..skip_of("agent-7", 1, at, RunOutcome::SkippedLate) };
    let new = skip_of("agent-7", 1, at + Duration::seconds(1), RunOutcome::SkippedMisfire);
    assert_eq!(store.record_skipped_runs(FencingToken(1), &[old, new.clone()]).expect("record"), 2);
    record(store, &[FiredReminder { fired_at: at - Duration::hours(3), ..fire_of("agent-7", 1, at) }]);
    assert_eq!(store.prune_mailbox(at - Duration::hours(1), 10).expect("prune"), 2, "one entry and one skip");
    assert_eq!(store.cron_job_runs(1, 10).expect("runs"), [CronJobRun::skipped(&new)]);
    assert_eq!(store.prune_mailbox(at - Duration::hours(1), 10).expect("prune"), 0);
}
