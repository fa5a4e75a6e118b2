//! The reminder mailbox (docs/scheduler.md, "The mailbox"): what streams replay, what they have received, and how
//! long fires are kept.
//!
//! The firing loop records every fire it publishes in the transaction that completes it; this component reads
//! those records back for the streams of `agent:<id>:scheduled` and for `GET /gateway/agents/{id}/reminders`,
//! writes the receipts the streams report (in batches, off the streams' path), and prunes what is older than the
//! retention (on the leader only).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gateway_core::{
    AgentId, BackgroundLoop, Clock, ComponentHealth, FiredReminder, LeaderLoop, Leadership, MailboxEntry, MailboxQuery,
    MailboxStore, PruningPass, Receipt, StoreError, run_blocking,
};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::CronError;

/// How long fires stay replayable (default of `--mailbox-retention-h`: 72 hours).
pub const MAILBOX_RETENTION: Duration = Duration::from_secs(72 * 3_600);
/// How often the leader prunes (the first pass at start).
pub const MAILBOX_PRUNE_INTERVAL: Duration = Duration::from_secs(300);
/// Entries deleted per transaction while pruning.
pub const MAILBOX_PRUNE_BATCH: usize = 1_000;
/// Pause between two batches of one pass, so that other writers never queue behind a long delete.
pub const MAILBOX_PRUNE_PAUSE: Duration = Duration::from_millis(50);
/// Entries read per query of a replay.
pub const MAILBOX_PAGE: usize = 1_000;
/// Mailbox reads in flight at once in one process; the others wait their turn. A read holds its entries' payloads
/// (up to a page of them, parsed) until its stream has queued them: a thousand streams catching up at the same
/// moment would otherwise hold a thousand pages, and ask the store for as many connections.
pub const MAILBOX_CONCURRENT_READS: usize = 8;
/// Receipts waiting to be written; past it a receipt is dropped (with a warning), which costs at most a second
/// delivery of that fire, never a lost one.
pub const RECEIPT_QUEUE: usize = 65_536;
/// Most receipts written in one transaction.
pub const RECEIPT_BATCH: usize = 1_024;
/// First pause after a failed receipt write, doubled per failure up to [`RECEIPT_RETRY_MAX`].
pub const RECEIPT_RETRY_INITIAL: Duration = Duration::from_millis(100);
pub const RECEIPT_RETRY_MAX: Duration = Duration::from_secs(10);
/// At most one warning about dropped receipts this often (the count of the rest comes with the next).
const DROP_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// A receipt that named no entry (a stream handed the live event to its client before the completion recording the
/// fire committed) is tried again this often...
pub const RECEIPT_RECHECK: Duration = Duration::from_secs(1);
/// ... for this long, then given up (its fire, if it ever is recorded, stays unreceived: delivered again, never
/// lost). A completion is written within milliseconds of its fire's publication; a receipt of a fire never recorded
/// (an event that no completion vouches for) must not be held for ever.
pub const RECEIPT_PATIENCE: Duration = Duration::from_secs(30);
/// Receipts held for a recheck at most; past it the oldest are given up.
pub const RECEIPTS_HELD: usize = 4_096;
/// First pause before looking again for a published fire's record ([`Mailbox::recorded`]), doubled per look up to
/// [`RECORD_LOOK_MAX`]: the firing loop's next write usually lands within milliseconds.
pub const RECORD_LOOK_INITIAL: Duration = Duration::from_millis(5);
pub const RECORD_LOOK_MAX: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct MailboxPorts {
    pub store: Arc<dyn MailboxStore>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxConfig {
    pub retention: Duration,
    pub prune_interval: Duration,
    pub prune_batch: usize,
    pub prune_pause: Duration,
    pub page: usize,
    pub receipt_queue: usize,
    pub receipt_batch: usize,
    pub concurrent_reads: usize,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        Self {
            retention: MAILBOX_RETENTION,
            prune_interval: MAILBOX_PRUNE_INTERVAL,
            prune_batch: MAILBOX_PRUNE_BATCH,
            prune_pause: MAILBOX_PRUNE_PAUSE,
            page: MAILBOX_PAGE,
            receipt_queue: RECEIPT_QUEUE,
            receipt_batch: RECEIPT_BATCH,
            concurrent_reads: MAILBOX_CONCURRENT_READS,
        }
    }
}

/// The mailbox component. Cheap to clone; clones share everything. Run its loop
/// ([`run`](gateway_core::BackgroundLoop::run)) once per process: it writes the receipts and, while this instance
/// leads, prunes.
#[derive(Debug, Clone)]
pub struct Mailbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ports: MailboxPorts,
    config: MailboxConfig,
    /// The receipt writer, on every instance.
    receipts_health: ComponentHealth,
    /// The pruning loop, which works on the leader.
    retention_health: ComponentHealth,
    receipts: mpsc::Sender<Receipt>,
    /// Taken by the running receipt writer (and back when a supervisor restarts it).
    pending: Mutex<mpsc::Receiver<Receipt>>,
    /// Receipts queued since the start, and receipts written (or given up on) since the start.
    queued: AtomicU64,
    settled: tokio::sync::watch::Sender<u64>,
    dropped: AtomicU64,
    last_drop_warning: std::sync::Mutex<Option<Instant>>,
    /// Turns to read ([`MAILBOX_CONCURRENT_READS`]).
    reads: tokio::sync::Semaphore,
}

/// Receipts that named no entry yet, in arrival order, each with when it is given up; tried again together every
/// [`RECEIPT_RECHECK`].
#[derive(Debug, Default)]
struct HeldReceipts {
    receipts: std::collections::VecDeque<(Receipt, Instant)>,
    recheck_at: Option<Instant>,
}

impl HeldReceipts {
    /// Every held receipt, when a recheck is due by `now` (none otherwise).
    fn due(&mut self, now: Instant) -> Vec<(Receipt, Instant)> {
        if self.recheck_at.is_none_or(|at| at > now) {
            return Vec::new();
        }
        self.recheck_at = None;
        self.receipts.drain(..).collect()
    }

    fn hold(&mut self, receipt: Receipt, give_up_at: Instant, now: Instant) {
        self.receipts.push_back((receipt, give_up_at));
        self.recheck_at.get_or_insert(now + RECEIPT_RECHECK);
    }

    /// Receipts taken by [`Self::due`] for a write that failed: held again, first, and due at once.
    fn put_back(&mut self, receipts: Vec<(Receipt, Instant)>) {
        if receipts.is_empty() {
            return;
        }
        for receipt in receipts.into_iter().rev() {
            self.receipts.push_front(receipt);
        }
        self.recheck_at = Some(Instant::now());
    }

    /// Gives the oldest up past [`RECEIPTS_HELD`]; returns how many.
    fn bound(&mut self) -> usize {
        let excess = self.receipts.len().saturating_sub(RECEIPTS_HELD);
        self.receipts.drain(..excess);
        excess
    }
}

/// Where a replay of one agent's mailbox stands: the entries nobody received, up to `through` (all when `None`),
/// then, when `after` is `Some`, every entry after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    agent_id: AgentId,
    phase: Phase,
    cursor: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Entries nobody received, up to `through` (inclusive); then on to `Every` after it, or done.
    Unreceived {
        through: Option<i64>,
    },
    /// Every entry after the cursor.
    Every,
    Done,
}

impl Replay {
    /// The entries of `agent_id` that no stream has received, in firing order.
    pub fn unreceived(agent_id: AgentId) -> Self {
        Self { agent_id, phase: Phase::Unreceived { through: None }, cursor: 0 }
    }

    /// The unreceived entries up to the one at `seq`, then every entry after it.
    fn after(agent_id: AgentId, seq: i64) -> Self {
        Self { agent_id, phase: Phase::Unreceived { through: Some(seq) }, cursor: 0 }
    }

    /// Every retained entry.
    fn everything(agent_id: AgentId) -> Self {
        Self { agent_id, phase: Phase::Every, cursor: 0 }
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
}

impl Mailbox {
    pub fn new(ports: MailboxPorts, mut config: MailboxConfig) -> Self {
        config.prune_batch = config.prune_batch.max(1);
        config.page = config.page.max(1);
        config.receipt_batch = config.receipt_batch.max(1);
        config.concurrent_reads = config.concurrent_reads.max(1);
        config.prune_interval = config.prune_interval.max(Duration::from_millis(1));
        let (receipts, pending) = mpsc::channel(config.receipt_queue.max(1));
        Self {
            inner: Arc::new(Inner {
                ports,
                config,
                receipts_health: ComponentHealth::new("mailbox_receipts"),
                retention_health: ComponentHealth::new("mailbox_retention"),
                receipts,
                pending: Mutex::new(pending),
                queued: AtomicU64::new(0),
                settled: tokio::sync::watch::Sender::new(0),
                dropped: AtomicU64::new(0),
                last_drop_warning: std::sync::Mutex::new(None),
                reads: tokio::sync::Semaphore::new(config.concurrent_reads),
            }),
        }
    }

    /// The readiness of its two loops: the receipt writer and the pruning.
    pub fn health(&self) -> [ComponentHealth; 2] {
        [self.inner.receipts_health.clone(), self.inner.retention_health.clone()]
    }

    pub fn config(&self) -> MailboxConfig {
        self.inner.config
    }

    /// Where a stream of `agent_id`'s reminders starts: the fires no stream has received and, after a
    /// `Last-Event-ID`, every retained fire after that one (an id that names no retained fire of this agent:
    /// everything retained).
    pub async fn replay(&self, agent_id: AgentId, last_event_id: Option<&str>) -> Result<Replay, CronError> {
        let Some(fire_id) = last_event_id else { return Ok(Replay::unreceived(agent_id)) };
        let position = self.position(&agent_id, fire_id).await?;
        Ok(match position {
            Some(seq) => Replay::after(agent_id, seq),
            None => Replay::everything(agent_id),
        })
    }

    /// The next entries of `replay`, in firing order, at most `limit` (and at most the configured page); empty once
    /// it is done.
    pub async fn next_page(&self, replay: &mut Replay, limit: usize) -> Result<Vec<MailboxEntry>, CronError> {
        let limit = limit.clamp(1, self.inner.config.page.max(1));
        loop {
            let (unreceived_only, through) = match replay.phase {
                Phase::Unreceived { through } => (true, through),
                Phase::Every => (false, None),
                Phase::Done => return Ok(Vec::new()),
            };
            let query = MailboxQuery {
                agent_id: replay.agent_id.clone(),
                unreceived_only,
                after: replay.cursor,
                through,
                limit,
            };
            let entries = self.read(query).await?;
            if let Some(last) = entries.last() {
                replay.cursor = last.seq;
            }
            if entries.len() < limit {
                replay.phase = match replay.phase {
                    Phase::Unreceived { through: Some(seq) } => {
                        replay.cursor = seq;
                        Phase::Every
                    }
                    _ => Phase::Done,
                };
            }
            if !entries.is_empty() {
                return Ok(entries);
            }
        }
    }

    /// At most `limit` of `agent_id`'s retained fires after `after` (a `fire_id`; from the first when `None`, and
    /// also when it names no retained fire of this agent), in firing order. Marks nothing received.
    pub async fn reminders_after(
        &self,
        agent_id: AgentId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MailboxEntry>, CronError> {
        let after = match after {
            Some(fire_id) => self.position(&agent_id, fire_id).await?.unwrap_or(0),
            None => 0,
        };
        self.read(MailboxQuery { agent_id, unreceived_only: false, after, through: None, limit }).await
    }

    /// Waits until `agent_id`'s fire `fire_id` is recorded in its mailbox; `false` when it was not within
    /// [`RECEIPT_PATIENCE`]. A fire is published at its instant and recorded by the firing loop's next write, on
    /// whichever instance fired it, so whoever is told of the publish and then reads the mailbox can find the fire
    /// missing for a moment (MCP's resource update, DESIGN §16). A fire never recorded fires, and is published,
    /// again once its claim lease ends.
    pub async fn recorded(&self, agent_id: &AgentId, fire_id: &str) -> Result<bool, CronError> {
        let give_up_at = Instant::now() + RECEIPT_PATIENCE;
        let mut looks: u32 = 0;
        loop {
            if self.position(agent_id, fire_id).await?.is_some() {
                return Ok(true);
            }
            looks = looks.saturating_add(1);
            let pause = gateway_core::capped_backoff(RECORD_LOOK_INITIAL, RECORD_LOOK_MAX, looks);
            if Instant::now() + pause > give_up_at {
                return Ok(false);
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// A stream of `receipt.agent_id` handed the fire to its client: its entry in that agent's mailbox is written as
    /// received in the next batch (once its completion has recorded it; see [`RECEIPT_PATIENCE`]). Never waits; when
    /// the queue is full (the store is down, or far behind) the receipt is dropped with a warning, which means at
    /// most a second delivery of that fire later.
    pub fn received(&self, receipt: Receipt) {
        let inner = &self.inner;
        match inner.receipts.try_send(receipt) {
            Ok(()) => {
                inner.queued.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => {
                let dropped = inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let mut last = gateway_core::runtime::sync::lock(&inner.last_drop_warning);
                let now = Instant::now();
                if last.is_none_or(|at| now.duration_since(at) >= DROP_WARNING_INTERVAL) {
                    *last = Some(now);
                    inner.dropped.store(0, Ordering::Relaxed);
                    warn!(dropped, "mailbox receipts dropped (queue full); those fires may be delivered again");
                }
            }
        }
    }

    /// Waits until every receipt queued before this call has been written (or given up on).
    pub async fn receipts_settled(&self) {
        let target = self.inner.queued.load(Ordering::SeqCst);
        let mut settled = self.inner.settled.subscribe();
        let _ = settled.wait_for(|written| *written >= target).await;
    }

    async fn position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, CronError> {
        // A fire_id is `<job_id>:<RFC 3339>`: anything much longer names nothing, and need not reach the store.
        if fire_id.len() > 128 {
            return Ok(None);
        }
        let (store, agent_id, fire_id) = (Arc::clone(&self.inner.ports.store), agent_id.clone(), fire_id.to_owned());
        Ok(run_blocking(move || store.mailbox_position(&agent_id, &fire_id)).await.map_err(StoreError::from)??)
    }

    async fn read(&self, query: MailboxQuery) -> Result<Vec<MailboxEntry>, CronError> {
        // Never closed, so the turn always comes; it is held until the entries are the caller's.
        let _turn = self.inner.reads.acquire().await.ok();
        let store = Arc::clone(&self.inner.ports.store);
        Ok(run_blocking(move || store.mailbox_entries(&query)).await.map_err(StoreError::from)??)
    }

    async fn write_receipts(&self, shutdown: &CancellationToken) {
        let inner = &self.inner;
        let _running = inner.receipts_health.start();
        let mut pending = inner.pending.lock().await;
        let mut batch: Vec<Receipt> = Vec::with_capacity(inner.config.receipt_batch);
        let mut held = HeldReceipts::default();
        let mut failures: u32 = 0;
        loop {
            if batch.is_empty() {
                let recheck_at = held.recheck_at;
                let received = tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    received = pending.recv_many(&mut batch, inner.config.receipt_batch) => received,
                    () = tokio::time::sleep_until(recheck_at.unwrap_or_else(Instant::now)), if recheck_at.is_some() => 1,
                };
                if received == 0 {
                    return;
                }
            }
            let fresh = batch.len();
            let retried = held.due(Instant::now());
            batch.extend(retried.iter().map(|(receipt, _)| receipt.clone()));
            match self.mark(&batch).await {
                Ok(unknown) => {
                    if failures > 0 {
                        info!(failures, "mailbox receipts are written again");
                        inner.receipts_health.recovered();
                    }
                    failures = 0;
                    let now = Instant::now();
                    let mut kept = 0;
                    for index in unknown {
                        let give_up_at = match index.checked_sub(fresh) {
                            None => now + RECEIPT_PATIENCE,
                            Some(retried_index) => retried[retried_index].1,
                        };
                        if give_up_at > now {
                            kept += 1;
                            held.hold(batch[index].clone(), give_up_at, now);
                        } else {
                            debug!(agent_id = %batch[index].agent_id, "a receipt of a fire never recorded is given up");
                        }
                    }
                    let dropped = held.bound();
                    self.settle(batch.len() - kept + dropped);
                    batch.clear();
                }
                Err(error) => {
                    batch.truncate(fresh);
                    held.put_back(retried);
                    failures = failures.saturating_add(1);
                    let delay = gateway_core::capped_backoff(RECEIPT_RETRY_INITIAL, RECEIPT_RETRY_MAX, failures);
                    warn!(%error, receipts = batch.len(), failures, retry_in_ms = delay.as_millis(),
                        "cannot write mailbox receipts; retrying");
                    inner.receipts_health.degraded(format!("cannot write mailbox receipts: {error}"));
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        // On the way out: what is queued, and what is held, gets one attempt.
        while let Ok(receipt) = pending.try_recv() {
            batch.push(receipt);
        }
        batch.extend(held.due(Instant::now() + RECEIPT_PATIENCE * 2).into_iter().map(|(receipt, _)| receipt));
        if batch.is_empty() {
            return;
        }
        let count = batch.len();
        if let Err(error) = self.mark(&batch).await {
            warn!(%error, receipts = count, "mailbox receipts not written at shutdown; those fires may be delivered again");
        }
        self.settle(count);
    }

    /// Marks the batch; returns the indexes of the receipts that named no entry.
    async fn mark(&self, batch: &[Receipt]) -> Result<Vec<usize>, StoreError> {
        let store = Arc::clone(&self.inner.ports.store);
        let at = self.inner.ports.clock.now();
        let batch = batch.to_vec();
        run_blocking(move || store.mark_received(&batch, at)).await?
    }

    fn settle(&self, count: usize) {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        self.inner.settled.send_modify(|settled| *settled = settled.saturating_add(count));
    }

    /// One pruning pass: batches from the start of the mailbox until one deletes nothing. Returns how many entries
    /// went.
    pub async fn prune_once(&self, shutdown: &CancellationToken) -> Result<usize, CronError> {
        let config = &self.inner.config;
        let pass = PruningPass {
            now: self.inner.ports.clock.now(),
            retention: config.retention,
            batch: config.prune_batch,
            pause: config.prune_pause,
            // A batch looks at the first entries in firing order, which may hold fewer old ones than it could take.
            short_batch_ends: false,
        };
        let store = Arc::clone(&self.inner.ports.store);
        Ok(pass.run(shutdown, move |cutoff, limit| store.prune_mailbox(cutoff, limit)).await?)
    }

    async fn prune(&self, shutdown: &CancellationToken) {
        let config = &self.inner.config;
        let passes = LeaderLoop {
            pass: "pruning the reminder mailbox",
            interval: config.prune_interval,
            first_backoff: config.prune_pause,
            max_backoff: gateway_core::runtime::periodic::MAX_PRUNE_BACKOFF,
            health: &self.inner.retention_health,
            leadership: self.inner.ports.leadership.as_ref(),
        };
        passes
            .run(shutdown, |_| async {
                let pruned = self.prune_once(shutdown).await?;
                if pruned > 0 {
                    let retention_h = config.retention.as_secs() / 3_600;
                    info!(pruned, retention_h, "old reminder mailbox entries pruned");
                }
                Ok::<_, CronError>(())
            })
            .await;
    }
}

/// What agent streams replay (gateway-pubsub's event stream reads the mailbox through this port).
impl gateway_core::ReplaySource for Mailbox {
    type Cursor = Replay;
    type Error = CronError;

    async fn replay(&self, agent_id: AgentId, last_event_id: Option<&str>) -> Result<Replay, CronError> {
        Mailbox::replay(self, agent_id, last_event_id).await
    }

    fn unreceived(&self, agent_id: AgentId) -> Replay {
        Replay::unreceived(agent_id)
    }

    async fn next_page(&self, replay: &mut Replay, limit: usize) -> Result<Vec<FiredReminder>, CronError> {
        let page = Mailbox::next_page(self, replay, limit).await?;
        Ok(page.into_iter().map(|entry| entry.reminder).collect())
    }

    fn received(&self, receipt: Receipt) {
        Mailbox::received(self, receipt);
    }
}

impl gateway_core::MaybeFenced for CronError {
    fn is_fenced(&self) -> bool {
        matches!(self, Self::Store(store) if store.is_fenced())
    }
}

impl BackgroundLoop for Mailbox {
    fn name(&self) -> &'static str {
        "mailbox"
    }

    /// Writes receipts until `shutdown` (then the ones still queued), and prunes on the leader.
    async fn run(&self, shutdown: CancellationToken) {
        tokio::join!(self.write_receipts(&shutdown), self.prune(&shutdown));
    }
}
