//! The mailbox feed (docs/architecture.md, "Durable events across instances"): every fire reaches the streams of
//! its agent on this instance, whatever Redis lost.
//!
//! The event bridge is at most once: a batch the firing instance could not publish, or a message sent while this
//! instance's subscription was down, is gone. But every fire is recorded in the mailbox by the transaction that
//! completes it, so each instance of a cluster reads what was recorded since it last looked, every
//! [`FEED_INTERVAL`], and hands the fires whose agent has a stream here to its local subscribers, through a publisher
//! that skips what the bridge already delivered. One indexed query per instance per interval (a range of the primary
//! key past a cursor), whatever the number of streams; the bridge stays the fast path.
//!
//! Entries are numbered when they are written (`seq`) but may commit out of that order (two transactions on
//! PostgreSQL), and a refire's `ON CONFLICT DO NOTHING` uses up a number: a number skipped under the cursor is
//! looked for again, for [`FEED_GAP_PATIENCE`], so that an entry committing late is not missed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gateway_core::{BackgroundLoop, EventPublisher, MailboxEntry, MailboxStore, StoreError, Topic, run_blocking};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often an instance reads the fires recorded since it last looked: the longest a fire that Redis lost waits
/// for a stream here (plus the time its completion takes to commit).
pub const FEED_INTERVAL: Duration = Duration::from_secs(1);
/// Entries read per query; a full page is followed by the next at once.
pub const FEED_PAGE: usize = 1_000;
/// How long a number skipped under the cursor is looked for: longer than any completion's transaction.
pub const FEED_GAP_PATIENCE: Duration = Duration::from_secs(30);
/// Skipped numbers remembered at most (the oldest forgotten first): a refire of a large batch skips one per fire.
pub const FEED_MAX_GAPS: usize = 1_024;

#[derive(Debug, Clone)]
pub struct MailboxFeedPorts {
    pub store: Arc<dyn MailboxStore>,
    /// This instance's subscribers only (the event bridge's local delivery): the fires go to the streams here, each
    /// once with what the bridge delivered, and never back to Redis.
    pub publisher: Arc<dyn EventPublisher>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxFeedConfig {
    pub interval: Duration,
    pub page: usize,
    pub gap_patience: Duration,
    pub max_gaps: usize,
}

impl Default for MailboxFeedConfig {
    fn default() -> Self {
        Self { interval: FEED_INTERVAL, page: FEED_PAGE, gap_patience: FEED_GAP_PATIENCE, max_gaps: FEED_MAX_GAPS }
    }
}

/// Counters of the feed's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedStats {
    /// Queries of the mailbox since the start.
    pub reads: u64,
    /// Entries read.
    pub entries: u64,
    /// Entries handed to the publisher (their agent had a stream here).
    pub handed: u64,
}

/// The feed loop: run it once per instance of a cluster (a supervised loop). Cheap to clone.
#[derive(Debug, Clone)]
pub struct MailboxFeed {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ports: MailboxFeedPorts,
    config: MailboxFeedConfig,
    reads: AtomicU64,
    entries: AtomicU64,
    handed: AtomicU64,
}

/// Where the feed stands: the highest number read, and the numbers below it not read yet.
#[derive(Debug, Default)]
struct Cursor {
    last: i64,
    /// Each skipped number with when it is given up.
    gaps: BTreeMap<i64, Instant>,
}

impl MailboxFeed {
    pub fn new(ports: MailboxFeedPorts, mut config: MailboxFeedConfig) -> Self {
        config.page = config.page.max(1);
        config.interval = config.interval.max(Duration::from_millis(1));
        let inner =
            Inner { ports, config, reads: AtomicU64::new(0), entries: AtomicU64::new(0), handed: AtomicU64::new(0) };
        Self { inner: Arc::new(inner) }
    }

    pub fn stats(&self) -> FeedStats {
        let inner = &self.inner;
        FeedStats {
            reads: inner.reads.load(Ordering::Relaxed),
            entries: inner.entries.load(Ordering::Relaxed),
            handed: inner.handed.load(Ordering::Relaxed),
        }
    }

    /// Reads what was recorded past the cursor (and in its gaps) and hands it on, page after page.
    async fn catch_up(&self, cursor: &mut Cursor) -> Result<(), StoreError> {
        let config = &self.inner.config;
        loop {
            let now = Instant::now();
            cursor.gaps.retain(|_, give_up_at| *give_up_at > now);
            let gaps: Vec<i64> = cursor.gaps.keys().copied().collect();
            let (store, after, page) = (Arc::clone(&self.inner.ports.store), cursor.last, config.page);
            let entries = run_blocking(move || store.mailbox_since(after, &gaps, page)).await??;
            self.inner.reads.fetch_add(1, Ordering::Relaxed);
            let count = entries.len();
            self.inner.entries.fetch_add(u64::try_from(count).unwrap_or(u64::MAX), Ordering::Relaxed);
            for entry in &entries {
                cursor.advance(entry.seq, now + config.gap_patience, config.max_gaps);
                self.hand_on(entry);
            }
            if count < config.page {
                return Ok(());
            }
        }
    }

    fn hand_on(&self, entry: &MailboxEntry) {
        let topic = Topic::AgentScheduled(entry.reminder.agent_id.clone());
        let publisher = &self.inner.ports.publisher;
        if !publisher.may_deliver(&topic) {
            return;
        }
        self.inner.handed.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = publisher.publish(&topic, &entry.reminder.event()) {
            warn!(fire_id = %entry.reminder.fire_id, %error, "a recorded fire could not be handed to local streams");
        }
    }
}

impl Cursor {
    /// `seq` was read: past the cursor, the numbers between are gaps (given up at `give_up_at`); under it, it fills
    /// its gap.
    fn advance(&mut self, seq: i64, give_up_at: Instant, max_gaps: usize) {
        if seq <= self.last {
            self.gaps.remove(&seq);
            return;
        }
        // Only the last `max_gaps` skipped numbers can be remembered anyway.
        let first_gap =
            self.last.saturating_add(1).max(seq.saturating_sub(i64::try_from(max_gaps).unwrap_or(i64::MAX)));
        for gap in first_gap..seq {
            self.gaps.insert(gap, give_up_at);
        }
        self.last = seq;
        while self.gaps.len() > max_gaps {
            self.gaps.pop_first();
        }
    }
}

impl BackgroundLoop for MailboxFeed {
    fn name(&self) -> &'static str {
        "mailbox_feed"
    }

    /// Starts at the newest entry (streams replay what came before when they connect), then follows the mailbox
    /// every interval until `shutdown`. A failed read is retried at the next interval.
    async fn run(&self, shutdown: CancellationToken) {
        let mut cursor: Option<Cursor> = None;
        let mut ticks = tokio::time::interval(self.inner.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let outcome = match cursor.as_mut() {
                Some(cursor) => self.catch_up(cursor).await,
                None => {
                    let store = Arc::clone(&self.inner.ports.store);
                    match run_blocking(move || store.mailbox_head()).await.map_err(StoreError::from) {
                        Ok(Ok(last)) => {
                            cursor = Some(Cursor { last, gaps: BTreeMap::new() });
                            Ok(())
                        }
                        Ok(Err(error)) | Err(error) => Err(error),
                    }
                }
            };
            match outcome {
                Ok(()) if failing => {
                    failing = false;
                    info!("the mailbox feed reads again");
                }
                Ok(()) => {}
                Err(error) => {
                    if !failing {
                        warn!(%error, "the mailbox feed cannot read the mailbox: fires that Redis lost wait for it");
                    }
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use gateway_core::{AgentId, CronJobStore, Event, FencingToken, FiredReminder, InMemoryCronJobStore, PublishError};
    use time::macros::datetime;

    use super::*;

    /// A publisher that records what it is handed, for the topics it is told have subscribers.
    #[derive(Debug, Default)]
    struct Streams {
        listening: Mutex<Vec<Topic>>,
        handed: Mutex<Vec<(Topic, String)>>,
    }

    impl EventPublisher for Streams {
        fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
            self.handed.lock().unwrap().push((topic.clone(), event.id.clone()));
            Ok(())
        }

        fn may_deliver(&self, topic: &Topic) -> bool {
            self.listening.lock().unwrap().contains(topic)
        }
    }

    fn topic(agent: &str) -> Topic {
        Topic::AgentScheduled(AgentId::new(agent).unwrap())
    }

    fn fire(agent: &str, n: i64) -> FiredReminder {
        let at = datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(n);
        FiredReminder {
            fire_id: crate::fire_id(n, at),
            job_id: n,
            agent_id: AgentId::new(agent).unwrap(),
            payload: serde_json::Map::new(),
            scheduled_for: at,
            fired_at: at,
            epoch: 1,
        }
    }

    fn record(store: &InMemoryCronJobStore, fires: &[FiredReminder]) {
        store.complete_fires("leader", FencingToken(1), &[], fires).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn fires_recorded_after_the_start_reach_the_agents_with_streams_here_within_an_interval() {
        let store = Arc::new(InMemoryCronJobStore::default());
        record(&store, &[fire("agent-7", 1)]);
        let streams = Arc::new(Streams::default());
        streams.listening.lock().unwrap().push(topic("agent-7"));
        let feed = MailboxFeed::new(
            MailboxFeedPorts { store: store.clone(), publisher: streams.clone() },
            MailboxFeedConfig::default(),
        );
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let (feed, shutdown) = (feed.clone(), shutdown.clone());
            async move { feed.run(shutdown).await }
        });
        tokio::time::sleep(FEED_INTERVAL / 2).await;
        let (mine, other) = (fire("agent-7", 2), fire("agent-8", 3));
        record(&store, &[mine.clone(), other]);
        tokio::time::sleep(FEED_INTERVAL).await;
        let handed = streams.handed.lock().unwrap().clone();
        assert_eq!(handed, [(topic("agent-7"), mine.fire_id.clone())], "not the one before the start, nor agent-8's");
        tokio::time::sleep(FEED_INTERVAL * 5).await;
        assert_eq!(streams.handed.lock().unwrap().len(), 1, "each once");
        let stats = feed.stats();
        assert_eq!((stats.entries, stats.handed), (2, 1));
        assert!(stats.reads >= 5, "one read per interval: {stats:?}");
        shutdown.cancel();
        running.await.unwrap();
    }

    #[test]
    fn numbers_skipped_under_the_cursor_are_looked_for_until_they_come_or_are_given_up() {
        let now = Instant::now();
        let mut cursor = Cursor::default();
        cursor.advance(1, now, 4);
        cursor.advance(4, now, 4);
        assert_eq!(cursor.gaps.keys().copied().collect::<Vec<_>>(), [2, 3]);
        cursor.advance(3, now, 4);
        assert_eq!(cursor.gaps.keys().copied().collect::<Vec<_>>(), [2]);
        assert_eq!(cursor.last, 4);
        cursor.advance(100, now, 4);
        assert_eq!(cursor.gaps.keys().copied().collect::<Vec<_>>(), [96, 97, 98, 99], "the most recent, bounded");
        cursor.advance(1_000_000, now, 4);
        assert_eq!(cursor.gaps.keys().copied().collect::<Vec<_>>(), [999_996, 999_997, 999_998, 999_999]);
        assert_eq!(cursor.last, 1_000_000);
    }

    /// A store that numbers entries at write time but shows them at commit time: an entry numbered before another
    /// commits after it.
    #[tokio::test(start_paused = true)]
    async fn an_entry_that_commits_after_a_later_numbered_one_is_still_handed_on() {
        let store = Arc::new(InMemoryCronJobStore::default());
        let streams = Arc::new(Streams::default());
        streams.listening.lock().unwrap().push(topic("agent-7"));
        let hiding = Arc::new(Hiding { inner: store.clone(), hide: Mutex::new(Some(2)) });
        let ports = MailboxFeedPorts { store: hiding.clone(), publisher: streams.clone() };
        let feed = MailboxFeed::new(ports, MailboxFeedConfig::default());
        let mut cursor = Cursor::default();
        record(&store, &[fire("agent-7", 1), fire("agent-7", 2), fire("agent-7", 3)]);
        feed.catch_up(&mut cursor).await.unwrap();
        assert_eq!(cursor.gaps.keys().copied().collect::<Vec<_>>(), [2]);
        *hiding.hide.lock().unwrap() = None;
        feed.catch_up(&mut cursor).await.unwrap();
        let handed: Vec<String> = streams.handed.lock().unwrap().iter().map(|(_, id)| id.clone()).collect();
        assert_eq!(handed, [fire("agent-7", 1).fire_id, fire("agent-7", 3).fire_id, fire("agent-7", 2).fire_id]);
        assert!(cursor.gaps.is_empty());
    }

    /// Shows every entry but the one numbered `hide`, as if its transaction had not committed yet.
    #[derive(Debug)]
    struct Hiding {
        inner: Arc<InMemoryCronJobStore>,
        hide: Mutex<Option<i64>>,
    }

    impl MailboxStore for Hiding {
        fn mailbox_position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, StoreError> {
            self.inner.mailbox_position(agent_id, fire_id)
        }
        fn mailbox_entries(&self, query: &gateway_core::MailboxQuery) -> Result<Vec<MailboxEntry>, StoreError> {
            self.inner.mailbox_entries(query)
        }
        fn mark_received(
            &self,
            receipts: &[gateway_core::Receipt],
            at: time::OffsetDateTime,
        ) -> Result<Vec<usize>, StoreError> {
            self.inner.mark_received(receipts, at)
        }
        fn mailbox_head(&self) -> Result<i64, StoreError> {
            self.inner.mailbox_head()
        }
        fn mailbox_since(&self, after: i64, also: &[i64], limit: usize) -> Result<Vec<MailboxEntry>, StoreError> {
            let hide = *self.hide.lock().unwrap();
            let mut entries = self.inner.mailbox_since(after, also, limit)?;
            entries.retain(|entry| Some(entry.seq) != hide);
            Ok(entries)
        }
        fn prune_mailbox(&self, fired_before: time::OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
            self.inner.prune_mailbox(fired_before, limit)
        }
    }
}
