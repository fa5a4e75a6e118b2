//! The mailbox component against gateway-core's in-memory store, on a ManualClock and tokio's paused time:
//! replays (unreceived, after a Last-Event-ID, everything), the GET reader, receipts written in batches, and
//! retention.
#![allow(clippy::unwrap_used)] // Test helpers may panic: that is how a test fails.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration as StdDuration;

use gateway_core::{
    AgentId, BackgroundLoop, CronJobStore, FencingToken, FiredReminder, InMemoryCronJobStore, Leadership, MailboxEntry,
    MailboxQuery, MailboxStore, ManualClock, Receipt, SingleProcessLeadership, SwitchableLeadership,
};
use gateway_cron::{Mailbox, MailboxConfig, MailboxPorts, Replay};
use serde_json::Map;
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use tokio_util::sync::CancellationToken;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

/// The `n`-th fire of `agent_id` (job `n`), published `n` milliseconds after START.
fn fire(agent_id: &str, n: i64) -> FiredReminder {
    let scheduled_for = START + Duration::milliseconds(n);
    FiredReminder {
        fire_id: gateway_cron::fire_id(n, scheduled_for),
        job_id: n,
        agent_id: agent(agent_id),
        payload: Map::new(),
        scheduled_for,
        fired_at: scheduled_for,
        epoch: 1,
    }
}

/// The receipt of a stream of the fire's own agent.
fn receipt(fire: &FiredReminder) -> Receipt {
    Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() }
}

/// Records fires as the scheduler's completions do.
fn record(store: &InMemoryCronJobStore, fires: &[FiredReminder]) {
    store.complete_fires("scheduler", FencingToken(1), &[], fires).unwrap();
}

struct Fixture {
    store: Arc<InMemoryCronJobStore>,
    clock: ManualClock,
    mailbox: Mailbox,
}

fn fixture_with(config: MailboxConfig, leadership: Arc<dyn Leadership>) -> Fixture {
    let store = Arc::new(InMemoryCronJobStore::default());
    let clock = ManualClock::new(START);
    let ports = MailboxPorts { store: store.clone(), clock: Arc::new(clock.clone()), leadership };
    Fixture { store, clock, mailbox: Mailbox::new(ports, config) }
}

/// Pages of two, so that every replay crosses pages.
fn fixture() -> Fixture {
    fixture_with(MailboxConfig { page: 2, ..MailboxConfig::default() }, Arc::new(SingleProcessLeadership))
}

/// Every page of `replay`, as the job ids of its entries.
async fn drain(mailbox: &Mailbox, mut replay: Replay) -> Vec<i64> {
    let mut jobs = Vec::new();
    loop {
        let page = mailbox.next_page(&mut replay, usize::MAX).await.unwrap();
        if page.is_empty() {
            assert!(replay.is_done());
            return jobs;
        }
        assert!(page.len() <= 2, "pages of the configured size");
        jobs.extend(page.iter().map(|entry| entry.reminder.job_id));
    }
}

fn unreceived(store: &InMemoryCronJobStore, agent_id: &str) -> Vec<MailboxEntry> {
    let query = MailboxQuery { agent_id: agent(agent_id), unreceived_only: true, after: 0, through: None, limit: 100 };
    store.mailbox_entries(&query).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_replay_sends_the_unreceived_fires_then_after_a_last_event_id_everything_after_it() {
    let Fixture { store, mailbox, .. } = fixture();
    let fires: Vec<FiredReminder> = (1..=7).map(|n| fire(if n == 4 { "agent-8" } else { "agent-7" }, n)).collect();
    record(&store, &fires);
    store.mark_received(&[receipt(&fires[1]), receipt(&fires[2]), receipt(&fires[5])], START).unwrap();
    let agent_7 = || agent("agent-7");

    assert_eq!(drain(&mailbox, mailbox.replay(agent_7(), None).await.unwrap()).await, [1, 5, 7], "unreceived");
    let after_two = mailbox.replay(agent_7(), Some(&fires[1].fire_id)).await.unwrap();
    assert_eq!(drain(&mailbox, after_two).await, [1, 3, 5, 6, 7], "unreceived up to it, then everything after it");
    let after_six = mailbox.replay(agent_7(), Some(&fires[5].fire_id)).await.unwrap();
    assert_eq!(drain(&mailbox, after_six).await, [1, 5, 7]);
    let after_last = mailbox.replay(agent_7(), Some(&fires[6].fire_id)).await.unwrap();
    assert_eq!(drain(&mailbox, after_last).await, [1, 5, 7]);
    let long = "x".repeat(10_000);
    for unknown in ["1:2020-01-01T00:00:00Z", fires[3].fire_id.as_str(), "", long.as_str()] {
        let everything = mailbox.replay(agent_7(), Some(unknown)).await.unwrap();
        assert_eq!(drain(&mailbox, everything).await, [1, 2, 3, 5, 6, 7], "an id not of this agent: {unknown:.20}");
    }
    assert!(drain(&mailbox, mailbox.replay(agent("agent-9"), None).await.unwrap()).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_reader_pages_after_a_fire_id_and_marks_nothing() {
    let Fixture { store, mailbox, .. } = fixture();
    let fires: Vec<FiredReminder> = (1..=5).map(|n| fire("agent-7", n)).collect();
    record(&store, &fires);
    store.mark_received(&[receipt(&fires[0])], START).unwrap();
    let jobs = |after: Option<&str>, limit| {
        let (mailbox, after) = (mailbox.clone(), after.map(str::to_owned));
        async move {
            let entries = mailbox.reminders_after(agent("agent-7"), after.as_deref(), limit).await.unwrap();
            entries.into_iter().map(|entry| entry.reminder.job_id).collect::<Vec<_>>()
        }
    };
    assert_eq!(jobs(None, 2).await, [1, 2], "received ones too");
    assert_eq!(jobs(Some(&fires[1].fire_id), 2).await, [3, 4]);
    assert_eq!(jobs(Some(&fires[3].fire_id), 2).await, [5]);
    assert!(jobs(Some(&fires[4].fire_id), 2).await.is_empty());
    assert_eq!(jobs(Some("7:2020-01-01T00:00:00Z"), 10).await, [1, 2, 3, 4, 5], "unknown: from the first");
    assert_eq!(unreceived(&store, "agent-7").len(), 4, "reading marked nothing");
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_published_fire_ends_once_it_is_recorded_or_after_the_patience() {
    let Fixture { store, mailbox, .. } = fixture();
    let published = fire("agent-7", 1);
    let waiting = tokio::spawn({
        let (mailbox, fire_id) = (mailbox.clone(), published.fire_id.clone());
        async move { mailbox.recorded(&agent("agent-7"), &fire_id).await.unwrap() }
    });
    tokio::time::sleep(StdDuration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "not recorded yet");
    record(&store, &[fire("agent-7", 3), fire("agent-8", 4)]);
    tokio::time::sleep(StdDuration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "other fires recorded");
    record(&store, std::slice::from_ref(&published));
    let started = tokio::time::Instant::now();
    assert!(waiting.await.unwrap(), "recorded");
    assert!(started.elapsed() <= gateway_cron::RECORD_LOOK_MAX, "seen by the next look");

    let started = tokio::time::Instant::now();
    assert!(!mailbox.recorded(&agent("agent-7"), &fire("agent-7", 2).fire_id).await.unwrap(), "never recorded");
    let waited = started.elapsed();
    assert!(waited <= gateway_cron::RECEIPT_PATIENCE, "{waited:?}");
    assert!(waited >= gateway_cron::RECEIPT_PATIENCE - gateway_cron::RECORD_LOOK_MAX, "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn receipts_are_written_in_batches_and_one_before_its_completion_marks_it_once_recorded() {
    let Fixture { store, mailbox, clock } = fixture();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (mailbox, shutdown) = (mailbox.clone(), shutdown.clone());
        async move { mailbox.run(shutdown).await }
    });
    let fires: Vec<FiredReminder> = (1..=3).map(|n| fire("agent-7", n)).collect();
    record(&store, &fires[..2]);
    clock.advance(Duration::seconds(5));
    let started = tokio::time::Instant::now();
    for reminder in &fires {
        mailbox.received(receipt(reminder));
    }
    tokio::time::sleep(StdDuration::from_millis(10)).await;
    let everything = |store: &InMemoryCronJobStore| {
        let query =
            MailboxQuery { agent_id: agent("agent-7"), unreceived_only: false, after: 0, through: None, limit: 10 };
        store.mailbox_entries(&query).unwrap()
    };
    let entries = everything(&store);
    assert_eq!(entries.len(), 2, "the live fire not recorded yet is not recorded by its receipt");
    assert!(entries.iter().all(|entry| entry.received_at == Some(START + Duration::seconds(5))));
    // Its completion commits a moment later: the held receipt marks it at the next recheck.
    record(&store, &fires[2..]);
    assert_eq!(unreceived(&store, "agent-7").len(), 1);
    clock.advance(Duration::seconds(1));
    mailbox.receipts_settled().await;
    assert!(unreceived(&store, "agent-7").is_empty());
    assert!(started.elapsed() <= gateway_cron::RECEIPT_RECHECK * 2, "marked at the next recheck, not given up");
    shutdown.cancel();
    running.await.unwrap();
}

/// What arrives over Redis is not the store's word: a receipt for another agent's fire (a forged event on this
/// agent's topic naming it), or for a fire never recorded, marks and records nothing, and is given up after the
/// patience.
#[tokio::test(start_paused = true)]
async fn a_receipt_of_another_agents_fire_or_of_no_fire_writes_nothing_and_is_given_up() {
    let Fixture { store, mailbox, .. } = fixture();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (mailbox, shutdown) = (mailbox.clone(), shutdown.clone());
        async move { mailbox.run(shutdown).await }
    });
    let theirs = fire("agent-8", 1);
    record(&store, std::slice::from_ref(&theirs));
    let started = tokio::time::Instant::now();
    mailbox.received(Receipt { agent_id: agent("agent-7"), fire_id: theirs.fire_id.clone() });
    mailbox.received(receipt(&fire("agent-7", 2)));
    mailbox.receipts_settled().await;
    assert!(started.elapsed() >= gateway_cron::RECEIPT_PATIENCE, "held for the patience, then given up");
    assert_eq!(unreceived(&store, "agent-8").len(), 1, "another agent's fire stays unreceived");
    assert_eq!(store.mailbox_head().unwrap(), 1, "nothing recorded");
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn receipts_that_cannot_be_written_are_retried_and_the_store_outage_is_reported() {
    let Fixture { store, mailbox, .. } = fixture();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (mailbox, shutdown) = (mailbox.clone(), shutdown.clone());
        async move { mailbox.run(shutdown).await }
    });
    let [receipts, _] = mailbox.health();
    receipts.running().await;
    record(&store, &[fire("agent-7", 1)]);
    store.failure.set_failing(true);
    mailbox.received(receipt(&fire("agent-7", 1)));
    while receipts.report().healthy {
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert!(receipts.report().problem.unwrap().starts_with("cannot write mailbox receipts"));
    store.failure.set_failing(false);
    mailbox.receipts_settled().await;
    assert!(unreceived(&store, "agent-7").is_empty(), "written once the store is back");
    assert!(receipts.report().healthy);
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn receipts_past_a_full_queue_are_dropped_and_the_ones_queued_are_written_at_shutdown() {
    let config = MailboxConfig { receipt_queue: 2, ..MailboxConfig::default() };
    let Fixture { store, mailbox, .. } = fixture_with(config, Arc::new(SingleProcessLeadership));
    let fires: Vec<FiredReminder> = (1..=3).map(|n| fire("agent-7", n)).collect();
    record(&store, &fires);
    for reminder in &fires {
        mailbox.received(receipt(reminder));
    }
    // Stopped before it started: it writes what is queued on its way out.
    let shutdown = CancellationToken::new();
    shutdown.cancel();
    mailbox.run(shutdown).await;
    let left: Vec<i64> = unreceived(&store, "agent-7").iter().map(|entry| entry.reminder.job_id).collect();
    assert_eq!(left, [3], "the dropped receipt's fire stays unreceived: delivered again, never lost");
}

#[tokio::test(start_paused = true)]
async fn the_leader_prunes_fires_older_than_the_retention_in_batches() {
    let leadership = Arc::new(SwitchableLeadership::default());
    let config = MailboxConfig {
        retention: StdDuration::from_secs(3_600),
        prune_batch: 2,
        prune_interval: StdDuration::from_secs(60),
        ..MailboxConfig::default()
    };
    let Fixture { store, mailbox, clock } = fixture_with(config, leadership.clone());
    let old: Vec<FiredReminder> = (1..=5).map(|n| fire("agent-7", n)).collect();
    record(&store, &old);
    clock.advance(Duration::minutes(61));
    record(&store, &[FiredReminder { fired_at: START + Duration::minutes(61), ..fire("agent-7", 6) }]);
    let remaining = || {
        let query =
            MailboxQuery { agent_id: agent("agent-7"), unreceived_only: false, after: 0, through: None, limit: 10 };
        store.mailbox_entries(&query).unwrap().iter().map(|entry| entry.reminder.job_id).collect::<Vec<_>>()
    };

    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (mailbox, shutdown) = (mailbox.clone(), shutdown.clone());
        async move { mailbox.run(shutdown).await }
    });
    tokio::time::sleep(StdDuration::from_secs(120)).await;
    assert_eq!(remaining().len(), 6, "a follower prunes nothing");
    leadership.set_leading(true);
    while remaining().len() > 1 {
        tokio::time::sleep(StdDuration::from_secs(1)).await;
    }
    assert_eq!(remaining(), [6], "only what was fired within the retention is left");
    let [_, retention] = mailbox.health();
    assert!(retention.report().healthy);
    shutdown.cancel();
    running.await.unwrap();
}

/// A mailbox store that counts the reads in flight, each of which takes a little while.
#[derive(Debug, Default)]
struct SlowReads {
    inner: InMemoryCronJobStore,
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl MailboxStore for SlowReads {
    fn mailbox_position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, gateway_core::StoreError> {
        self.inner.mailbox_position(agent_id, fire_id)
    }

    fn mailbox_entries(&self, query: &MailboxQuery) -> Result<Vec<MailboxEntry>, gateway_core::StoreError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // A real pause on the blocking thread, so that reads that were let through overlap.
        std::thread::sleep(StdDuration::from_millis(20));
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.inner.mailbox_entries(query)
    }

    fn mark_received(&self, receipts: &[Receipt], at: OffsetDateTime) -> Result<Vec<usize>, gateway_core::StoreError> {
        self.inner.mark_received(receipts, at)
    }

    fn mailbox_head(&self) -> Result<i64, gateway_core::StoreError> {
        self.inner.mailbox_head()
    }

    fn mailbox_since(
        &self,
        after: i64,
        also: &[i64],
        limit: usize,
    ) -> Result<Vec<MailboxEntry>, gateway_core::StoreError> {
        self.inner.mailbox_since(after, also, limit)
    }

    fn prune_mailbox(&self, fired_before: OffsetDateTime, limit: usize) -> Result<usize, gateway_core::StoreError> {
        self.inner.prune_mailbox(fired_before, limit)
    }
}

#[tokio::test]
async fn no_more_reads_are_in_flight_than_configured() {
    let store = Arc::new(SlowReads::default());
    record(&store.inner, &(1..=3).map(|n| fire("agent-7", n)).collect::<Vec<_>>());
    let ports = MailboxPorts {
        store: store.clone(),
        clock: Arc::new(ManualClock::new(START)),
        leadership: Arc::new(SingleProcessLeadership),
    };
    let mailbox = Mailbox::new(ports, MailboxConfig { concurrent_reads: 2, ..MailboxConfig::default() });
    let readers: Vec<_> = (0..12)
        .map(|_| {
            let mailbox = mailbox.clone();
            tokio::spawn(async move { mailbox.reminders_after(agent("agent-7"), None, 10).await.unwrap().len() })
        })
        .collect();
    for reader in readers {
        assert_eq!(reader.await.unwrap(), 3, "every reader gets its turn");
    }
    let most = store.most.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "{most} reads at once");
}
