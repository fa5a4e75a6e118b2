//! The liveness map and the capability map several instances share, over the receipt columns of
//! `gateway_heartbeats` (each agent's own row; live while `received_minute` is not NULL): an agent heartbeating to
//! any instance is live on all of them, and the leader evicts it once, fenced like every leader-only write, by
//! clearing its receipt (the heartbeat row itself is kept). docs/architecture.md says why the database and not Redis.
//!
//! A heartbeat must not wait for a round trip before it is admitted, so [`SharedLiveness::record`] only checks the
//! cap and keeps the receipt in this process; [`LivenessMap::flush`], which the heartbeat manager calls in the
//! heartbeat's own group commit before it answers, writes every kept receipt in one transaction. Capability entries
//! are kept the same way and written by the same flush, or by the flusher thread within [`FLUSH_INTERVAL`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use gateway_core::runtime::sync::lock;
use gateway_core::{
    AgentId, CapabilityEntry, CapabilityMap, ClusterId, FencingToken, HeartbeatRecord, HeartbeatStore, LiveEntry,
    LivePage, LivenessMap, LivenessRefusal, StoreError,
};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::background::PeriodicThread;
use crate::connection::{AnyConnection, DieselStore};
use crate::fencing::{admit, token_from_db};
use crate::heartbeat::{
    AgentRow, AgentRowsSql, Columns, HEARTBEAT_ROWS, HeartbeatRows, SqliteRows, UnnestAgentRows, latest_rows,
    write_rows_sqlite,
};
use crate::schema::gateway_heartbeats;
use crate::timestamp::{from_db, to_db};

/// How often kept capability entries (and any receipt no heartbeat flushed) are written in the background.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(250);
/// How often the cluster counts its live agents, for the cap: one instance counts (whichever finds the last count
/// this old first), the others read its answer ([`SharedLiveness::refresh_count`]).
pub const COUNT_INTERVAL: Duration = Duration::from_secs(5);
/// How often each instance reads the cluster's count, and counts when that count is [`COUNT_INTERVAL`] old: a read
/// of one row, so that a count reaches every instance within this of being taken.
pub const COUNT_READ_INTERVAL: Duration = Duration::from_secs(1);
/// How long an instance remembers what it admitted and evicted when (one tally per flusher pass): what it adds to a
/// count it reads is what it did after that count was taken. A count older than this gets every admission of this
/// instance added, which only overstates the cluster.
const TALLY_WINDOW: Duration = Duration::from_secs(60);
/// Longest pause between flusher passes while the database is unreachable.
pub const FLUSH_RETRY_MAX: Duration = Duration::from_secs(5);
/// The width of `gateway_heartbeats.received_minute`, the indexed column the eviction pass finds its candidates
/// by (fixed by migration 2026-12-21-000011 on both backends). An update that leaves it unchanged (every heartbeat of
/// an agent but its first in each minute) touches no index on PostgreSQL (a HOT update); the pass still decides on
/// the exact `received_at`, so the width changes how many rows a pass reads, never whom it evicts.
pub const RECEIPT_MINUTE_SECONDS: i64 = 60;
/// The minute `instant` falls in, `floor(seconds since the epoch / 60)`: `gateway_heartbeats.received_minute`,
/// which the eviction pass finds its candidates by (the cutoff's minute is this same function of the cutoff).
/// Exact for any instant, before the epoch too: the whole nanoseconds are divided, rounding down.
pub(crate) fn receipt_minute(instant: OffsetDateTime) -> i64 {
    let minute = instant.unix_timestamp_nanos().div_euclid(i128::from(RECEIPT_MINUTE_SECONDS) * 1_000_000_000);
    // An OffsetDateTime's minutes since the epoch fit an i64 many times over.
    i64::try_from(minute).unwrap_or(i64::MAX)
}

/// Agent ids per `IN (…)` list (SQLite takes 32,766 parameters, PostgreSQL 65,535).
const MAX_IDS_PER_LIST: usize = 500;
/// How often the leader examines the minutes behind the cutoff on PostgreSQL ([`SharedLiveness::examine`], on the
/// flusher thread): the passes after it read those minutes' rows from its answer instead of the table.
pub const EXAMINE_INTERVAL: Duration = Duration::from_secs(5);
/// An instance examines only while it runs passes (the leader): for this long after its last one.
const EXAMINES_AFTER_A_PASS: Duration = Duration::from_secs(120);
/// An examination covers the minutes that ended this long before it began, by PostgreSQL's clock: a receipt that
/// reaches those minutes after it then made its agent live in a transaction that began in a later minute (an insert,
/// or the receipt of an evicted agent), which `gateway_heartbeats_inserted_late` lists (migrations 2026-12-21-000016
/// and 000017) — unless that transaction took longer
/// than this from its start to its commit; the next examination, one [`EXAMINE_INTERVAL`] later, reads that row.
pub const EXAMINATION_MARGIN_SECONDS: i64 = 10;

/// Runs `reads` in a transaction (they write nothing: no transaction id) in which PostgreSQL hands no scan to
/// parallel workers. The count and the examination read up to the whole table every few seconds and nothing waits on
/// their answer; planned freely, each ran as a parallel scan (the leader and two workers), three processes taking the
/// database's CPUs from the heartbeats' commits at once: at a million agents on one CPU, 170-290 ms bursts that held
/// the slowest 1 % of heartbeats (docs/benchmarks.md, s32-m).
fn background_read<T>(c: &mut PgConnection, reads: impl FnOnce(&mut PgConnection) -> QueryResult<T>) -> QueryResult<T> {
    c.transaction(|c| {
        diesel::sql_query("SET LOCAL max_parallel_workers_per_gather = 0").execute(c)?;
        reads(c)
    })
}

/// The database-backed [`LivenessMap`] and [`CapabilityMap`]. Cheap to clone; clones share everything. Run
/// [`SharedLiveness::start_flusher`] for as long as the process serves.
///
/// The cap (`--max-tracked-agents`) is the cluster's: one instance counts the table every [`COUNT_INTERVAL`] for the
/// whole cluster (`gateway_live_count`), and each adds to that count the agents it admitted since, so instances that
/// admit new agents at the same moment may overshoot it by what they admit between two counts.
#[derive(Clone)]
pub struct SharedLiveness {
    inner: Arc<Inner>,
}

struct Inner {
    store: DieselStore,
    capacity: usize,
    local: Mutex<Local>,
    /// Held for a whole flush: a flush returns only once everything kept before it started is written, even when
    /// another thread's flush took it from `local` first.
    flushing: Mutex<()>,
    /// Live agents of the whole cluster, as of the last count, plus those admitted here since.
    tracked: AtomicUsize,
    /// How old the cluster's count may be before an instance takes a new one ([`COUNT_INTERVAL`]).
    count_interval: Duration,
    /// New agents this instance admitted, and agents its passes evicted, since it started: the tallies a count is
    /// brought up to date with.
    admitted: AtomicU64,
    evicted: AtomicU64,
    /// Those two as they stood at each flusher pass of the last [`TALLY_WINDOW`], oldest first.
    tallies: Mutex<VecDeque<Tally>>,
    /// Counts of the table this instance took itself (the others it read).
    counts_taken: AtomicU64,
    /// The last count this instance took: its `counted_ms`, and the tallies just before and just after it, which
    /// bring that count up to date exactly when this instance reads it back.
    own_count: Mutex<Option<(i64, Tally, Tally)>>,
    /// The last examination of the minutes behind the cutoff (PostgreSQL; `None` before the first).
    examined: Mutex<Option<Arc<Examined>>>,
    /// When this instance last ran an eviction pass, and that pass's threshold: it examines while it is the one
    /// that runs them, the minutes their cutoffs are about to reach.
    last_pass: Mutex<Option<(Instant, time::Duration)>>,
}

/// What an examination read: every live row of every minute up to `through` (as that statement saw the table), and
/// the earliest receipt of each of those minutes that had any.
///
/// What makes the answer last: a receipt never moves back (the upserts keep the later one), so a row it saw can
/// since have left for a later minute, taken a later receipt or gone, and still be at or after the earliest
/// receipt of the minute it was in (eviction only takes a row out of every minute); a live row it did not see and
/// that is now in those minutes can only have become live since (inserted, or an evicted agent's receipt), with a
/// receipt from before the minute it became live in (`inserted_minute`, see [`EXAMINATION_MARGIN_SECONDS`]), and
/// those are the rows of `gateway_heartbeats_inserted_late`, which every pass reads.
#[derive(Debug)]
struct Examined {
    through: i64,
    earliest: BTreeMap<i64, PrimitiveDateTime>,
}

impl Examined {
    /// The minute up to which a pass with this cutoff can skip the table: every minute up to it was examined and
    /// held no receipt before the cutoff then. `None`: the pass reads the table from the oldest minute.
    fn covers(&self, cutoff_minute: i64, cutoff: PrimitiveDateTime) -> Option<i64> {
        let upto = self.through.min(cutoff_minute);
        self.earliest.range(..=upto).all(|(_, earliest)| *earliest >= cutoff).then_some(upto)
    }
}

/// What this instance had admitted and evicted at `at`.
#[derive(Clone, Copy, Debug)]
struct Tally {
    at: Instant,
    admitted: u64,
    evicted: u64,
}

/// The cluster's count as `gateway_live_count` holds it.
#[derive(QueryableByName)]
struct SharedCount {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    counted_ms: Option<i64>,
    /// How long ago it was taken, by the database's clock; `None` before the first count.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    age_ms: Option<i64>,
}

/// The database's clock in milliseconds since the epoch, in each backend's SQL: what `gateway_live_count.counted_ms`
/// holds and is compared with, so that no instance's clock enters the count's age.
const NOW_MS_POSTGRES: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
const NOW_MS_SQLITE: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";
/// When the count's statement began, on PostgreSQL (`clock_timestamp()` in its select list would be read after the
/// scan); SQLite's `'now'` is the statement's start already.
const STATEMENT_MS_POSTGRES: &str = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint";
/// How far the instant of a count read back is taken to be uncertain (the clock's milliseconds and a round trip):
/// the tallies within it of the count are read as the side that overstates the cluster.
const COUNT_INSTANT_MARGIN: Duration = Duration::from_millis(2);

#[derive(Default)]
struct Local {
    /// Receipts not written yet, the latest per agent.
    receipts: HashMap<AgentId, (ClusterId, OffsetDateTime)>,
    /// Capability entries not written yet, the latest per agent.
    capabilities: HashMap<AgentId, CapabilityEntry>,
    /// Agents this instance admitted (or saw listed) and has not seen evicted: they update without a cap check.
    known: KnownAgents,
}

/// A set of agent ids kept as 64-bit hashes under a key drawn by this process. The ids themselves cost an instance
/// ~73 bytes an agent (708 MB of RSS at 9.9M agents, over the 400 MB; docs/benchmarks.md, s34-t), the hashes
/// ~15. Two ids with one hash would let the second update without a cap check: about one pair in 2^64 / N, and the
/// key is random per process (as std's maps are against HashDoS), so nobody can choose ids that collide — at worst
/// one agent past a cap the cluster already lets overshoot by what arrives between two counts.
#[derive(Default)]
struct KnownAgents {
    key: std::hash::RandomState,
    hashes: HashSet<u64>,
}

impl KnownAgents {
    fn hash(&self, agent_id: &AgentId) -> u64 {
        std::hash::BuildHasher::hash_one(&self.key, agent_id.as_str())
    }

    fn contains(&self, agent_id: &AgentId) -> bool {
        self.hashes.contains(&self.hash(agent_id))
    }

    fn insert(&mut self, agent_id: &AgentId) {
        let hash = self.hash(agent_id);
        self.hashes.insert(hash);
    }

    fn remove(&mut self, agent_id: &AgentId) {
        let hash = self.hash(agent_id);
        self.hashes.remove(&hash);
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    fn clear(&mut self) {
        self.hashes.clear();
    }
}

impl fmt::Debug for SharedLiveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLiveness")
            .field("capacity", &self.inner.capacity)
            .field("tracked", &self.inner.tracked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[derive(Queryable)]
struct LiveRow {
    agent_id: String,
    cluster_id: String,
    received_at: PrimitiveDateTime,
}

impl LiveRow {
    fn into_entry(self) -> Result<LiveEntry, StoreError> {
        Ok(LiveEntry {
            agent_id: AgentId::new(self.agent_id)
                .map_err(|error| StoreError::Internal(format!("stored agent_id invalid: {error}")))?,
            cluster_id: ClusterId::new(self.cluster_id)
                .map_err(|error| StoreError::Internal(format!("stored cluster_id invalid: {error}")))?,
            last_seen: from_db(self.received_at),
        })
    }
}

/// A row a page of the listing read: live while it has a receipt.
#[derive(Queryable)]
struct WalkedRow {
    agent_id: String,
    received_cluster_id: Option<String>,
    received_at: Option<PrimitiveDateTime>,
}

fn agent_id_from_db(agent_id: String) -> Result<AgentId, StoreError> {
    AgentId::new(agent_id).map_err(|error| StoreError::Internal(format!("stored agent_id invalid: {error}")))
}

#[derive(Queryable)]
struct CapabilityRow {
    agent_id: String,
    agent_type: Option<String>,
    capability_version: Option<String>,
    updated_at: Option<PrimitiveDateTime>,
}

impl SharedLiveness {
    /// A map over `store`'s `gateway_heartbeats` receipts that admits new agents while the cluster tracks fewer than
    /// `capacity`. Until the first count (the flusher's first pass), only this instance's admissions count.
    pub fn new(store: DieselStore, capacity: usize) -> Self {
        Self::with_count_interval(store, capacity, COUNT_INTERVAL)
    }

    /// [`SharedLiveness::new`] with a count that instances retake once it is `count_interval` old.
    pub fn with_count_interval(store: DieselStore, capacity: usize, count_interval: Duration) -> Self {
        let inner = Inner {
            store,
            capacity,
            local: Mutex::new(Local::default()),
            flushing: Mutex::new(()),
            tracked: AtomicUsize::new(0),
            count_interval,
            admitted: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            tallies: Mutex::new(VecDeque::new()),
            counts_taken: AtomicU64::new(0),
            own_count: Mutex::new(None),
            examined: Mutex::new(None),
            last_pass: Mutex::new(None),
        };
        Self { inner: Arc::new(inner) }
    }

    /// Writes kept capability entries (and receipts) every [`FLUSH_INTERVAL`] and reads (or takes) the cluster's
    /// count of live agents every [`COUNT_READ_INTERVAL`], on a thread of its own, until the handle is dropped.
    pub fn start_flusher(&self) -> std::io::Result<PeriodicThread> {
        let map = self.clone();
        let counts_every = (COUNT_READ_INTERVAL.as_millis() / FLUSH_INTERVAL.as_millis()).max(1);
        let examines_every = (EXAMINE_INTERVAL.as_millis() / FLUSH_INTERVAL.as_millis()).max(1);
        let mut pass: u128 = 0;
        PeriodicThread::spawn("liveness-flush", "sharing liveness", FLUSH_INTERVAL, FLUSH_RETRY_MAX, move || {
            map.flush()?;
            map.keep_tally();
            if pass.is_multiple_of(counts_every) {
                map.refresh_count()?;
            }
            // Half a second off this instance's reads of the count (when it takes the count, it takes it then):
            // each is a read of the table on the database's CPU, which the heartbeats share, and one after the other
            // they held it twice as long at a time. The cluster's count is taken every 5-6 s by whichever instance
            // finds it due, so it drifts against this 5 s beat and meets it now and then.
            if (pass + examines_every / 2).is_multiple_of(examines_every) && map.runs_passes() {
                // A failed examination leaves the last one, which stays true (see `Examined`): passes only read
                // more of the table until the next one works.
                if let Err(error) = map.examine() {
                    tracing::debug!(%error, "minutes behind the cutoff not examined");
                }
            }
            pass += 1;
            Ok(())
        })
    }

    /// Whether this instance ran an eviction pass lately (it is the leader, or was until moments ago).
    fn runs_passes(&self) -> bool {
        lock(&self.inner.last_pass).is_some_and(|(at, _)| at.elapsed() < EXAMINES_AFTER_A_PASS)
    }

    /// Reads, on PostgreSQL, the earliest receipt of each minute that ended [`EXAMINATION_MARGIN_SECONDS`] or more
    /// ago, for the eviction passes that follow. The flusher runs it every [`EXAMINE_INTERVAL`] on the instance
    /// that runs passes. Why: after a heartbeat moves an agent into a new minute, the index entry of the minute it
    /// left points at a dead row until vacuum, and a minute's entries all die in the half minute after it ends —
    /// just when a threshold of 90 s brings it into the pass's range — so a pass reading the table from the oldest
    /// minute visits a million dead rows each minute at a million agents (150-275 ms). Read here, off the pass, the
    /// table's side of a pass is the few rows inserted with an old receipt. SQLite updates its index in place:
    /// nothing to do there.
    pub fn examine(&self) -> Result<(), StoreError> {
        if self.inner.store.is_sqlite() {
            return Ok(());
        }
        #[derive(QueryableByName)]
        struct Bound {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            through: i64,
        }
        #[derive(QueryableByName)]
        struct Earliest {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            minute: i64,
            #[diesel(sql_type = diesel::sql_types::Timestamp)]
            earliest: PrimitiveDateTime,
        }
        let began = Instant::now();
        // No further than the minute after the next passes' cutoffs: the minutes after it hold the fleet's live
        // rows, each a visit to the heap, and no pass needs them yet.
        let needed = lock(&self.inner.last_pass).map_or(i64::MAX, |(_, threshold)| {
            let cutoff = OffsetDateTime::now_utc().checked_sub(threshold).unwrap_or(OffsetDateTime::UNIX_EPOCH);
            receipt_minute(cutoff).saturating_add(1)
        });
        let examined = self.inner.store.with_connection("examine the minutes behind the cutoff", |connection| {
            let AnyConnection::Postgres(c) = connection else { return Ok(None) };
            let c: &mut PgConnection = c;
            // One read-only transaction (no transaction id, nothing to flush at its commit), two statements: the
            // bound by the transaction's start, the rows by the second statement's snapshot, taken later, so a row
            // that statement does not see was committed after the transaction began.
            background_read(c, |c| {
                // The range holds the dead entries of the minutes agents left and the few rows still in them: an
                // index scan reads those. Planned freely it was a sequential scan of the table (p50 122 ms at a
                // million rows, every 5 s, on the database's CPU that heartbeats share).
                diesel::sql_query("SET LOCAL enable_seqscan = off").execute(c)?;
                diesel::sql_query("SET LOCAL enable_bitmapscan = off").execute(c)?;
                let bound: Bound = diesel::sql_query(
                    "SELECT least((floor((extract(epoch FROM now()) - $1) / 60) - 1)::bigint, $2) AS through",
                )
                .bind::<diesel::sql_types::BigInt, _>(EXAMINATION_MARGIN_SECONDS)
                .bind::<diesel::sql_types::BigInt, _>(needed)
                .get_result(c)?;
                let earliest: Vec<Earliest> = diesel::sql_query(
                    "SELECT received_minute AS minute, min(received_at) AS earliest FROM gateway_heartbeats \
                     WHERE received_minute <= $1 GROUP BY received_minute ORDER BY received_minute",
                )
                .bind::<diesel::sql_types::BigInt, _>(bound.through)
                .load(c)?;
                Ok(Some(Examined {
                    through: bound.through,
                    earliest: earliest.into_iter().map(|row| (row.minute, row.earliest)).collect(),
                }))
            })
        })?;
        if let Some(examined) = examined {
            tracing::debug!(
                examine_ms = began.elapsed().as_secs_f64() * 1e3,
                through = examined.through,
                minutes_with_rows = examined.earliest.len(),
                "minutes behind the cutoff examined"
            );
            *lock(&self.inner.examined) = Some(Arc::new(examined));
        }
        Ok(())
    }

    /// Counts the cluster's live agents now (the cap's reference), whether or not the cluster's count is due, and
    /// shares the answer with the other instances.
    pub fn count(&self) -> Result<usize, StoreError> {
        let counted = self.take_count(true)?;
        Ok(counted.unwrap_or_else(|| self.tracked_count()))
    }

    /// The flusher's step every [`COUNT_READ_INTERVAL`]: reads the cluster's count, and takes a new one if it is
    /// [`COUNT_INTERVAL`] old (or was never taken) and no other instance is taking one; then this instance tracks
    /// that count plus what it admitted, less what it evicted, since the count was taken. So the table is read once
    /// per interval for the whole cluster, by whichever instance finds it due first, leader or not: while no
    /// instance leads (Redis down), the count goes on. A read that fails leaves the figure as it was (the last count
    /// plus the admissions since), and the flusher retries.
    pub fn refresh_count(&self) -> Result<usize, StoreError> {
        let shared = self.read_count()?;
        let due = shared.age_ms.is_none_or(|age| age >= self.interval_ms());
        if due && let Some(live) = self.take_count(false)? {
            return Ok(live);
        }
        if let (Some(counted_ms), Some(age)) = (shared.counted_ms, shared.age_ms) {
            self.adopt(shared.live, counted_ms, Duration::from_millis(u64::try_from(age).unwrap_or(0)));
        }
        Ok(self.tracked_count())
    }

    /// How many counts of the table this instance took itself.
    pub fn counts_taken(&self) -> u64 {
        self.inner.counts_taken.load(Ordering::Relaxed)
    }

    fn interval_ms(&self) -> i64 {
        i64::try_from(self.inner.count_interval.as_millis()).unwrap_or(i64::MAX)
    }

    /// The row of `gateway_live_count`, one primary-key read.
    fn read_count(&self) -> Result<SharedCount, StoreError> {
        self.inner.store.with_connection("read the count of live agents", |connection| {
            let sql = |now: &str| {
                format!("SELECT live, counted_ms, {now} - counted_ms AS age_ms FROM gateway_live_count WHERE id = 1")
            };
            match connection {
                AnyConnection::Postgres(c) => diesel::sql_query(sql(NOW_MS_POSTGRES)).get_result(&mut **c),
                AnyConnection::Sqlite(c) => diesel::sql_query(sql(NOW_MS_SQLITE)).get_result(&mut **c),
            }
        })
    }

    /// Counts the table and writes the answer into `gateway_live_count`, in one transaction that holds the count's
    /// row: unless `forced`, only if the count is due and no other instance holds the row (it is counting; on
    /// SQLite the transaction's write lock makes it wait, and then the count is no longer due). `None`: not taken.
    fn take_count(&self, forced: bool) -> Result<Option<usize>, StoreError> {
        let before = self.tally_now();
        let began = Instant::now();
        let interval_ms = self.interval_ms();
        #[derive(QueryableByName)]
        struct Counted {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            live: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            at_ms: i64,
        }
        #[derive(QueryableByName)]
        struct Held {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
        }
        let counted: Option<(i64, i64)> = self.inner.store.immediate("count live agents", |connection| {
            let (now, statement, lock) = match connection {
                AnyConnection::Postgres(c) => {
                    // The count reads up to the whole table and nothing waits on it: no parallel workers (see
                    // `background_read`). Its row is a figure any instance can take again: its commit need not wait
                    // for the WAL flush.
                    diesel::sql_query("SET LOCAL max_parallel_workers_per_gather = 0").execute(&mut **c)?;
                    diesel::sql_query("SET LOCAL synchronous_commit = off").execute(&mut **c)?;
                    let lock = if forced { " FOR UPDATE" } else { " FOR UPDATE SKIP LOCKED" };
                    (NOW_MS_POSTGRES, STATEMENT_MS_POSTGRES, lock)
                }
                AnyConnection::Sqlite(_) => (NOW_MS_SQLITE, NOW_MS_SQLITE, ""),
            };
            let hold = diesel::sql_query(format!(
                "SELECT id FROM gateway_live_count WHERE id = 1 \
                 AND ($1 OR counted_ms IS NULL OR counted_ms <= {now} - $2){lock}"
            ))
            .bind::<diesel::sql_types::Bool, _>(forced)
            .bind::<diesel::sql_types::BigInt, _>(interval_ms);
            let count = diesel::sql_query(format!(
                "SELECT count(*) AS live, {statement} AS at_ms FROM gateway_heartbeats WHERE received_minute IS NOT NULL"
            ));
            let held: Option<Held> = on_backend!(connection, c => hold.clone().get_result(c).optional())?;
            if held.is_none_or(|row| row.id != 1) {
                return Ok(None);
            }
            let counted: Counted = on_backend!(connection, c => count.clone().get_result(c))?;
            let write = diesel::sql_query("UPDATE gateway_live_count SET live = $1, counted_ms = $2 WHERE id = 1")
                .bind::<diesel::sql_types::BigInt, _>(counted.live)
                .bind::<diesel::sql_types::BigInt, _>(counted.at_ms);
            on_backend!(connection, c => write.clone().execute(c))?;
            Ok(Some((counted.live, counted.at_ms)))
        })?;
        let Some((rows, counted_ms)) = counted else { return Ok(None) };
        *lock(&self.inner.own_count) = Some((counted_ms, before, self.tally_now()));
        let rows = usize::try_from(rows).unwrap_or(usize::MAX);
        self.inner.counts_taken.fetch_add(1, Ordering::Relaxed);
        // A scan of the table once per interval for the cluster: timed, to tell its share of the database's CPU.
        tracing::debug!(count_ms = began.elapsed().as_secs_f64() * 1e3, rows, "live agents counted");
        // What this instance admitted while it counted may be missing from the count; what it evicted meanwhile
        // may be in it already: the one is added, the other left for the next count.
        let admitted = self.inner.admitted.load(Ordering::Relaxed).saturating_sub(before.admitted);
        self.set_tracked(rows, admitted, 0);
        Ok(Some(rows))
    }

    /// Tracks the cluster's count taken `age` ago, brought up to date with this instance's own admissions and
    /// evictions since. Both are read so as to overstate rather than understate the cluster (the cap refuses a
    /// little early rather than late): the admissions since the last tally before the count, the evictions since
    /// the first tally after it. A count this instance took itself is brought up to date by the tallies it kept
    /// around it.
    fn adopt(&self, live: i64, counted_ms: i64, age: Duration) {
        let now = self.tally_now();
        let own = *lock(&self.inner.own_count);
        let (admitted_from, evicted_from) = match own {
            Some((own_ms, before, after)) if own_ms == counted_ms => (before.admitted, after.evicted),
            _ => {
                let taken = now.at.checked_sub(age);
                let tallies = lock(&self.inner.tallies);
                // No tally from before the count (it is older than the window, or than this process): every
                // admission of this instance is added.
                let admitted_from = taken
                    .and_then(|taken| taken.checked_sub(COUNT_INSTANT_MARGIN))
                    .and_then(|before| tallies.iter().rev().find(|tally| tally.at <= before))
                    .map_or(0, |tally| tally.admitted);
                // No tally from after it (it is newer than the last pass): none of the evictions.
                let evicted_from = taken
                    .map(|taken| taken + COUNT_INSTANT_MARGIN)
                    .and_then(|after| tallies.iter().find(|tally| tally.at >= after))
                    .map_or(now.evicted, |tally| tally.evicted);
                (admitted_from, evicted_from)
            }
        };
        let live = usize::try_from(live).unwrap_or(0);
        self.set_tracked(live, now.admitted.saturating_sub(admitted_from), now.evicted.saturating_sub(evicted_from));
    }

    fn set_tracked(&self, live: usize, admitted: u64, evicted: u64) {
        let tracked = live
            .saturating_add(usize::try_from(admitted).unwrap_or(usize::MAX))
            .saturating_sub(usize::try_from(evicted).unwrap_or(usize::MAX));
        self.inner.tracked.store(tracked, Ordering::Relaxed);
        let mut local = lock(&self.inner.local);
        // Agents evicted by another instance stay in `known` here; keep the set within the cap's size.
        if local.known.len() > self.inner.capacity {
            local.known.clear();
        }
    }

    fn tally_now(&self) -> Tally {
        Tally {
            at: Instant::now(),
            admitted: self.inner.admitted.load(Ordering::Relaxed),
            evicted: self.inner.evicted.load(Ordering::Relaxed),
        }
    }

    /// Notes what this instance has admitted and evicted so far (the flusher, each pass).
    fn keep_tally(&self) {
        let now = self.tally_now();
        let mut tallies = lock(&self.inner.tallies);
        while tallies.front().is_some_and(|oldest| now.at.duration_since(oldest.at) > TALLY_WINDOW) {
            tallies.pop_front();
        }
        tallies.push_back(now);
    }

    /// Writes `heartbeats` and every kept receipt and capability entry in one transaction.
    fn flush_with(&self, heartbeats: &[HeartbeatRecord]) -> Result<(), StoreError> {
        let _turn = lock(&self.inner.flushing);
        let (receipts, capabilities) = {
            let mut local = lock(&self.inner.local);
            (std::mem::take(&mut local.receipts), std::mem::take(&mut local.capabilities))
        };
        if heartbeats.is_empty() && receipts.is_empty() && capabilities.is_empty() {
            return Ok(());
        }
        // In agent id order, as every writer of these rows locks them on PostgreSQL: rival transactions queue
        // instead of deadlocking.
        let mut rows: Vec<AgentRow<'_>> = receipts
            .iter()
            .map(|(agent_id, (cluster_id, receipt))| (agent_id.as_str(), cluster_id.as_str(), *receipt))
            .collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut entries: Vec<(&AgentId, &CapabilityEntry)> = capabilities.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let work = |connection: &mut AnyConnection<'_>| {
            match connection {
                AnyConnection::Postgres(c) => write_rows_postgres(c, heartbeats, &rows)?,
                AnyConnection::Sqlite(c) => {
                    // Receipts first: for an agent with both, the heartbeat's own columns are the heartbeat's.
                    write_rows_sqlite(c, &RECEIPT_ROWS, &rows)?;
                    write_rows_sqlite(c, &HEARTBEAT_ROWS, &latest_rows(heartbeats))?;
                }
            }
            for (agent_id, entry) in &entries {
                update_capabilities(connection, agent_id, entry)?;
            }
            Ok(())
        };
        // On PostgreSQL the rows and their receipts are one statement, atomic and durable on its own: a transaction
        // (two more round trips) only when capability entries go with it.
        let written = if entries.is_empty() && !self.inner.store.is_sqlite() {
            self.inner.store.with_connection("share liveness", work)
        } else {
            self.inner.store.immediate("share liveness", work)
        };
        if let Err(error) = written {
            // Kept for the next flush, under whatever arrived meanwhile if that is newer.
            let mut local = lock(&self.inner.local);
            for (agent_id, (cluster_id, receipt)) in receipts {
                match local.receipts.get(&agent_id) {
                    Some((_, newer)) if *newer >= receipt => {}
                    _ => {
                        local.receipts.insert(agent_id, (cluster_id, receipt));
                    }
                }
            }
            for (agent_id, entry) in capabilities {
                local.capabilities.entry(agent_id).or_insert(entry);
            }
            return Err(error);
        }
        Ok(())
    }

    /// Up to `want` rows after `cursor`, in agent id order, live or not: the primary key's walk.
    fn read_rows(&self, cursor: &str, want: usize) -> Result<Vec<WalkedRow>, StoreError> {
        use gateway_heartbeats::dsl;
        let rows = dsl::gateway_heartbeats
            .filter(dsl::agent_id.gt(cursor))
            .order(dsl::agent_id.asc())
            .limit(i64::try_from(want).unwrap_or(i64::MAX))
            .select((dsl::agent_id, dsl::received_cluster_id, dsl::received_at));
        self.inner.store.with_connection("list live agents", |connection| on_backend!(connection, c => rows.load(c)))
    }

    fn load_capabilities(&self, agent_ids: &[AgentId]) -> Result<HashMap<String, CapabilityEntry>, StoreError> {
        use gateway_heartbeats::dsl;
        let mut found = HashMap::with_capacity(agent_ids.len());
        for chunk in agent_ids.chunks(MAX_IDS_PER_LIST) {
            let ids: Vec<&str> = chunk.iter().map(AgentId::as_str).collect();
            let rows: Vec<CapabilityRow> = self.inner.store.with_connection("read capabilities", |connection| {
                on_backend!(connection, c => dsl::gateway_heartbeats
                    .filter(dsl::agent_id.eq_any(&ids))
                    .filter(dsl::received_minute.is_not_null())
                    .select((dsl::agent_id, dsl::agent_type, dsl::capability_version, dsl::capabilities_updated_at))
                    .load(c))
            })?;
            for row in rows {
                if let (Some(agent_type), Some(capability_version), Some(updated_at)) =
                    (row.agent_type, row.capability_version, row.updated_at)
                {
                    let entry = CapabilityEntry { agent_type, capability_version, updated_at: from_db(updated_at) };
                    found.insert(row.agent_id, entry);
                }
            }
        }
        Ok(found)
    }
}

impl LivenessMap for SharedLiveness {
    fn record(
        &self,
        agent_id: &AgentId,
        cluster_id: &ClusterId,
        receipt: OffsetDateTime,
    ) -> Result<(), LivenessRefusal> {
        let mut local = lock(&self.inner.local);
        if !local.known.contains(agent_id) {
            let capacity = self.inner.capacity;
            if self.inner.tracked.load(Ordering::Relaxed) >= capacity {
                return Err(LivenessRefusal::CapacityReached { cap: capacity });
            }
            local.known.insert(agent_id);
            self.inner.tracked.fetch_add(1, Ordering::Relaxed);
            self.inner.admitted.fetch_add(1, Ordering::Relaxed);
        }
        keep_latest(&mut local.receipts, agent_id, cluster_id, receipt);
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.flush_with(&[])
    }
    fn is_live(&self, agent_id: &AgentId) -> bool {
        lock(&self.inner.local).known.contains(agent_id)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn record_if_tracked(
        &self,
        agent_id: &AgentId,
        cluster_id: &ClusterId,
        receipt: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        use gateway_heartbeats::dsl;
        let row = dsl::gateway_heartbeats
            .find(agent_id.as_str())
            .filter(dsl::received_minute.is_not_null())
            .select(dsl::agent_id);
        let tracked: Option<String> = self.inner.store.with_connection(
            "look up a live agent",
            |connection| on_backend!(connection, c => row.first(c).optional()),
        )?;
        if tracked.is_none() {
            return Ok(false);
        }
        let mut local = lock(&self.inner.local);
        local.known.insert(agent_id);
        keep_latest(&mut local.receipts, agent_id, cluster_id, receipt);
        Ok(true)
    }

    fn live_agents(&self, after: Option<&AgentId>, limit: usize, walk: usize) -> Result<LivePage, StoreError> {
        self.flush()?;
        read_page(after, limit, walk, |cursor, want| self.read_rows(cursor, want))
    }

    fn evict_silent(
        &self,
        now: OffsetDateTime,
        threshold: time::Duration,
        token: FencingToken,
    ) -> Result<Vec<LiveEntry>, StoreError> {
        use gateway_heartbeats::dsl;
        *lock(&self.inner.last_pass) = Some((Instant::now(), threshold));
        // This instance's own receipts first: an agent must not be evicted for a heartbeat still in memory here.
        let began = Instant::now();
        self.flush()?;
        let flushed = began.elapsed();
        let cutoff = now.checked_sub(threshold).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        // Every receipt before the cutoff is in the cutoff's minute or an earlier one; the index on the minute finds
        // those, and the exact receipt decides.
        let cutoff_minute = receipt_minute(cutoff);
        let cutoff = to_db(cutoff);
        let is_silent = dsl::received_minute.le(cutoff_minute).and(dsl::received_at.lt(cutoff));
        // Most passes find nobody silent. Asked first in one read-only statement, outside any transaction: on
        // PostgreSQL the fenced transaction's `FOR UPDATE` of the epoch row gives it a transaction id, so even a
        // pass that changes nothing waited for a WAL flush at its commit (95-138 ms of a 1M-agent pass during a
        // checkpoint) and for the epoch row lock other leader loops hold. The answer only decides whether to
        // write: the fenced transaction below checks the epoch and selects the silent again under its locks, so a
        // deposed leader still evicts nothing, and a pass that skips it has written nothing a fence could refuse.
        let probing = Instant::now();
        // Ordered by the indexed minute, so the plan walks that index from the oldest and stops at the first silent
        // row: an `EXISTS` was planned as a sequential scan of the whole table after a bulk fill (the planner
        // expecting an early match), 100-210 ms at a million rows.
        let first_silent =
            || dsl::gateway_heartbeats.filter(is_silent).order(dsl::received_minute.asc()).select(dsl::agent_id);
        // The minutes the last examination answers for (PostgreSQL): only the rows inserted since with an old
        // receipt (their own small index) and the minutes after those are read.
        let examined = lock(&self.inner.examined).clone();
        let covered = examined.as_deref().and_then(|examined| examined.covers(cutoff_minute, cutoff));
        let (newest, anyone_silent) = self.inner.store.with_connection("look for silent agents", |connection| {
            use crate::schema::gateway_leader_epoch::dsl as epoch;
            let newest = epoch::gateway_leader_epoch.find(1).select(epoch::epoch);
            let Some(covered) = covered else {
                let silent = first_silent();
                return on_backend!(connection, c => Ok((newest.first::<i64>(c)?, silent.first::<String>(c).optional()?.is_some())));
            };
            // Ordered by the minute like the walk, so the plan reads an index in that order (the partial one, the
            // smallest): unordered, it was planned as a sequential scan of the table before its first analyze
            // (105-173 ms at a million rows).
            let inserted_late = dsl::gateway_heartbeats
                .filter(dsl::inserted_minute.nullable().gt(dsl::received_minute))
                .filter(is_silent)
                .order(dsl::received_minute.asc())
                .select(dsl::agent_id);
            let after_covered = first_silent().filter(dsl::received_minute.gt(covered));
            on_backend!(connection, c => {
                let newest = newest.first::<i64>(c)?;
                let silent = inserted_late.first::<String>(c).optional()?.is_some()
                    || (covered < cutoff_minute && after_covered.first::<String>(c).optional()?.is_some());
                Ok((newest, silent))
            })
        })?;
        let newest = token_from_db(newest);
        if newest > token {
            // What the fenced transaction would answer, without taking its locks.
            return Err(StoreError::Fenced { token, newest });
        }
        if newest == token && !anyone_silent {
            tracing::debug!(
                flush_ms = flushed.as_secs_f64() * 1e3,
                probe_ms = probing.elapsed().as_secs_f64() * 1e3,
                examined_through = covered,
                evicted = 0,
                "evict silent agents"
            );
            return Ok(Vec::new());
        }
        let evicted: Vec<LiveRow> = self.inner.store.immediate_fenced("evict silent agents", |connection| {
            admit(connection, token)?;
            let silent = dsl::gateway_heartbeats.filter(is_silent).select((
                dsl::agent_id,
                dsl::received_cluster_id.assume_not_null(),
                dsl::received_at.assume_not_null(),
            ));
            let mut rows: Vec<LiveRow> = match connection {
                // The transaction holds the write lock: the order is free (sorted below).
                AnyConnection::Sqlite(c) => silent.load(&mut **c)?,
                // Locked in agent id order, like the flushes that may be writing the same rows; a row refreshed
                // while this waited for it no longer matches and stays.
                AnyConnection::Postgres(c) => silent.order(dsl::agent_id.asc()).for_update().load(&mut **c)?,
            };
            rows.sort_unstable_by(|a, b| a.agent_id.cmp(&b.agent_id));
            // The receipt is cleared, not the row: heartbeat rows are kept (DESIGN §8).
            for chunk in rows.chunks(MAX_IDS_PER_LIST) {
                let ids: Vec<&str> = chunk.iter().map(|row| row.agent_id.as_str()).collect();
                let evicted = dsl::gateway_heartbeats.filter(dsl::agent_id.eq_any(&ids));
                let cleared = diesel::update(evicted).set((
                    dsl::received_at.eq(None::<PrimitiveDateTime>),
                    dsl::received_minute.eq(None::<i64>),
                    dsl::received_cluster_id.eq(None::<String>),
                    dsl::agent_type.eq(None::<String>),
                    dsl::capability_version.eq(None::<String>),
                    dsl::capabilities_updated_at.eq(None::<PrimitiveDateTime>),
                ));
                on_backend!(connection, c => cleared.execute(c))?;
            }
            Ok(rows)
        })?;
        // Which half of a slow pass was slow: waiting for a heartbeat group's commit (the flush takes its turn),
        // or the fenced transaction itself.
        tracing::debug!(
            flush_ms = flushed.as_secs_f64() * 1e3,
            transaction_ms = (began.elapsed() - flushed).as_secs_f64() * 1e3,
            evicted = evicted.len(),
            "evict silent agents"
        );
        if !evicted.is_empty() && !self.inner.store.is_sqlite() {
            // The evicted rows' index entries stay in the minute index until vacuum, and the first walk over them
            // visits the heap for each to learn it is dead (132 ms after evicting 100,000 of a million), then marks
            // them so that later walks skip them. That first walk is taken here, in the pass that made them (already
            // seconds long for such a crowd), rather than in the next pass, which finds nobody silent. Its answer
            // decides nothing: the next pass asks again.
            let rewalking = Instant::now();
            let rewalked = self.inner.store.with_connection("look for silent agents", |connection| {
                let silent = first_silent();
                on_backend!(connection, c => silent.first::<String>(c).optional())
            });
            tracing::debug!(
                rewalk_ms = rewalking.elapsed().as_secs_f64() * 1e3,
                ok = rewalked.is_ok(),
                "evicted rows' index entries walked"
            );
        }
        let evicted: Vec<LiveEntry> = evicted.into_iter().map(LiveRow::into_entry).collect::<Result<_, _>>()?;
        let mut local = lock(&self.inner.local);
        for entry in &evicted {
            local.known.remove(&entry.agent_id);
            local.capabilities.remove(&entry.agent_id);
        }
        // The cluster recounts within COUNT_INTERVAL; a count here would cost every pass a scan of the table.
        self.inner.evicted.fetch_add(u64::try_from(evicted.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let _ = self
            .inner
            .tracked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tracked| Some(tracked.saturating_sub(evicted.len())));
        Ok(evicted)
    }

    fn tracked_count(&self) -> usize {
        self.inner.tracked.load(Ordering::Relaxed)
    }
}

/// The heartbeat rows through the shared map: a group of heartbeats is written in one transaction with the receipts
/// kept for them, so a heartbeat costs a cluster one commit, as it costs a single instance.
impl HeartbeatStore for SharedLiveness {
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError> {
        self.flush_with(records)
    }

    /// Every receipt recorded before the call is written once it returns: those it took itself, and those a rival
    /// flush (the flusher thread, a listing) took first, since that flush held `flushing` until it was written and
    /// this one waited for it.
    fn writes_receipts(&self) -> bool {
        true
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        self.inner.store.heartbeat(agent_id)
    }
}

impl CapabilityMap for SharedLiveness {
    fn register(&self, agent_id: &AgentId, entry: CapabilityEntry) {
        lock(&self.inner.local).capabilities.insert(agent_id.clone(), entry);
    }

    fn remove_agent(&self, agent_id: &AgentId) {
        // The row, and the entry with it, went with the eviction; only a kept entry is left to drop.
        lock(&self.inner.local).capabilities.remove(agent_id);
    }

    fn get(&self, agent_id: &AgentId) -> Option<CapabilityEntry> {
        match self.get_many(std::slice::from_ref(agent_id)) {
            Ok(mut entries) => entries.pop().flatten(),
            Err(error) => {
                tracing::warn!(%error, "capability entry not read");
                None
            }
        }
    }

    fn get_many(&self, agent_ids: &[AgentId]) -> Result<Vec<Option<CapabilityEntry>>, StoreError> {
        self.flush()?;
        let mut found = self.load_capabilities(agent_ids)?;
        Ok(agent_ids.iter().map(|agent_id| found.remove(agent_id.as_str())).collect())
    }
}

/// A page of the listing from `read` (up to `want` rows after an id, in id order): the live agents among at most
/// `walk` rows after `after`, at most `limit`. No index holds the live rows alone (migration 2026-12-21-000018 says
/// why), so the walk is the primary key's, evicted agents' rows among the live ones, in reads of growing size until
/// the page is full or `walk` rows were read. Each read starts after the last row the one before it returned, so an
/// agent live throughout is never skipped, whatever was written between them.
fn read_page(
    after: Option<&AgentId>,
    limit: usize,
    walk: usize,
    mut read: impl FnMut(&str, usize) -> Result<Vec<WalkedRow>, StoreError>,
) -> Result<LivePage, StoreError> {
    let mut page = LivePage::default();
    let mut cursor = after.map_or_else(String::new, |after| after.as_str().to_owned());
    let mut walked = 0;
    while page.entries.len() < limit {
        // As many rows as the page still lacks, or as many as were read already (those were mostly evicted
        // agents': a few reads reach `walk`), within what is left of `walk`.
        let want = (limit - page.entries.len()).max(walked).min(walk - walked);
        if want == 0 {
            // `walk` rows read without filling the page: the next page goes on after the last of them.
            page.next_after = (walked > 0).then(|| agent_id_from_db(cursor)).transpose()?;
            return Ok(page);
        }
        let rows = read(&cursor, want)?;
        let exhausted = rows.len() < want;
        walked += rows.len();
        for row in rows {
            if let (Some(cluster_id), Some(received_at)) = (row.received_cluster_id, row.received_at) {
                page.entries.push(LiveRow { agent_id: row.agent_id.clone(), cluster_id, received_at }.into_entry()?);
            }
            cursor = row.agent_id;
            if page.entries.len() == limit {
                break;
            }
        }
        if exhausted && page.entries.len() < limit {
            // Every row after `after` read: the end.
            return Ok(page);
        }
    }
    page.next_after = page.entries.last().map(|entry| entry.agent_id.clone());
    Ok(page)
}

/// Keeps `receipt` unless a later one of the agent is kept already.
fn keep_latest(
    receipts: &mut HashMap<AgentId, (ClusterId, OffsetDateTime)>,
    agent_id: &AgentId,
    cluster_id: &ClusterId,
    receipt: OffsetDateTime,
) {
    match receipts.get_mut(agent_id) {
        Some(kept) if kept.1 <= receipt => *kept = (cluster_id.clone(), receipt),
        Some(_) => {}
        None => {
            receipts.insert(agent_id.clone(), (cluster_id.clone(), receipt));
        }
    }
}

/// The receipt's rule, on both backends: a receipt older than the stored one (another instance's, flushed first)
/// leaves it; an evicted agent's (NULL) takes any, and a heartbeat without a receipt (NULL sent) changes nothing.
macro_rules! receipt_is_newer {
    () => {
        "(gateway_heartbeats.received_at IS NULL OR excluded.received_at >= gateway_heartbeats.received_at)"
    };
}

/// The receipt's rule in an upsert's `SET` list, the same on both backends: `received_cluster_id` and `received_at`
/// move only to a newer receipt, together.
macro_rules! newer_receipt_kept {
    () => {
        concat!(
            "received_cluster_id = CASE WHEN ",
            receipt_is_newer!(),
            " THEN excluded.received_cluster_id ELSE gateway_heartbeats.received_cluster_id END, \
             received_at = CASE WHEN ",
            receipt_is_newer!(),
            " THEN excluded.received_at ELSE gateway_heartbeats.received_at END"
        )
    };
}

/// Receipts on SQLite, in the caller's transaction, before the group's heartbeat rows (which then overwrite the
/// heartbeat's own columns of the agents they carry). A receipt stands for its heartbeat in the contract's columns
/// until that heartbeat's group writes them, as on PostgreSQL ([`RowsWithReceipts`]): a receipt is written by the
/// first flush after it was kept, which can come before its heartbeat's group commit, and the row must exist then.
const RECEIPT_ROWS: SqliteRows = SqliteRows {
    insert: "INSERT INTO gateway_heartbeats \
             (agent_id, cluster_id, last_seen_at, received_at, received_cluster_id, received_minute)",
    on_conflict: concat!(
        "ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, \
         last_seen_at = excluded.last_seen_at, \
         received_minute = CASE WHEN ",
        receipt_is_newer!(),
        " THEN excluded.received_minute ELSE gateway_heartbeats.received_minute END, ",
        newer_receipt_kept!()
    ),
    with_receipts: true,
};

/// A group's heartbeat rows and receipts on PostgreSQL, in one statement when there are receipts; the heartbeat rows
/// alone are the three-column statement a single instance sends.
fn write_rows_postgres(
    connection: &mut PgConnection,
    heartbeats: &[HeartbeatRecord],
    receipts: &[AgentRow<'_>],
) -> QueryResult<()> {
    let beats = latest_rows(heartbeats);
    if receipts.is_empty() {
        if !beats.is_empty() {
            UnnestAgentRows::<HeartbeatRows>::new(vec![Columns::of(&beats)]).execute(connection)?;
        }
        return Ok(());
    }
    let rows = beats_or_receipts(&beats, receipts);
    UnnestAgentRows::<RowsWithReceipts>::new(vec![Columns::of(&rows), Columns::with_minutes(receipts)])
        .execute(connection)?;
    Ok(())
}

/// One row per agent of either list (both sorted by agent id), in agent id order: the heartbeat's where the group
/// has one, else the receipt, which stands for its heartbeat until that heartbeat's group writes it.
fn beats_or_receipts<'a>(beats: &[AgentRow<'a>], receipts: &[AgentRow<'a>]) -> Vec<AgentRow<'a>> {
    let mut rows = Vec::with_capacity(beats.len().max(receipts.len()));
    let (mut b, mut r) = (beats.iter().peekable(), receipts.iter().peekable());
    loop {
        let next = match (b.peek(), r.peek()) {
            (Some(beat), Some(receipt)) if beat.0 == receipt.0 => {
                r.next();
                b.next()
            }
            (Some(beat), Some(receipt)) if beat.0 > receipt.0 => r.next(),
            (Some(_), _) => b.next(),
            (None, Some(_)) => r.next(),
            (None, None) => break,
        };
        rows.extend(next.copied());
    }
    rows
}

/// The heartbeat rows and their receipts in one statement, one row per agent (migration 2026-12-21-000017): the
/// first set is every agent's heartbeat columns ([`beats_or_receipts`]), the second the receipts with their minutes
/// ([`receipt_minute`], written by the gateway since migration 2026-12-21-000014: as a generated column PostgreSQL
/// evaluated its expression in numeric arithmetic for every row). The heartbeat's columns follow the heartbeats'
/// rule (the last written wins); the receipt (its instant, minute and cluster) never moves back, and its minute
/// moves only with it. `inserted_minute`, "became live in", is PostgreSQL's minute of the statement, written when a
/// receipt inserts the row or makes an evicted agent live again (computed once per statement: per row, its numeric
/// arithmetic is what made the generated minute column cost 3 %); that is what puts a re-live with an old receipt in
/// `gateway_heartbeats_inserted_late`. Rows are locked in agent id order, as by every writer of them. A heartbeat
/// without a receipt in the group leaves the receipt as it is (NULL for an evicted agent: a heartbeat alone does not
/// make it live).
struct RowsWithReceipts;

impl AgentRowsSql for RowsWithReceipts {
    const SQL: &'static str = concat!(
        "INSERT INTO gateway_heartbeats \
         (agent_id, cluster_id, last_seen_at, received_at, received_cluster_id, received_minute, inserted_minute) \
         SELECT beat.agent_id, beat.cluster_id, beat.at, receipt.at, receipt.cluster_id, receipt.minute, now_minute.m \
         FROM (SELECT floor(extract(epoch FROM now()) / 60)::bigint AS m) AS now_minute, \
         unnest($, $, $) WITH ORDINALITY AS beat (agent_id, cluster_id, at, n) \
         LEFT JOIN unnest($, $, $, $) AS receipt (agent_id, cluster_id, at, minute) ON receipt.agent_id = beat.agent_id \
         ORDER BY beat.n \
         ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at, \
         inserted_minute = CASE WHEN gateway_heartbeats.received_at IS NULL AND excluded.received_at IS NOT NULL \
             THEN excluded.inserted_minute ELSE gateway_heartbeats.inserted_minute END, \
         received_minute = CASE WHEN ",
        receipt_is_newer!(),
        " THEN excluded.received_minute ELSE gateway_heartbeats.received_minute END, ",
        newer_receipt_kept!()
    );
    const WITH_MINUTES: &'static [bool] = &[false, true];
}

/// Sets a live agent's entry; an agent that is not live (never was, or evicted) gets none.
fn update_capabilities(
    connection: &mut AnyConnection<'_>,
    agent_id: &AgentId,
    entry: &CapabilityEntry,
) -> QueryResult<usize> {
    use gateway_heartbeats::dsl;
    let live = dsl::gateway_heartbeats.find(agent_id.as_str()).filter(dsl::received_minute.is_not_null());
    let update = diesel::update(live).set((
        dsl::agent_type.eq(entry.agent_type.as_str()),
        dsl::capability_version.eq(entry.capability_version.as_str()),
        dsl::capabilities_updated_at.eq(to_db(entry.updated_at)),
    ));
    on_backend!(connection, c => update.execute(c))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    on_every_backend!(
        capability_entries_are_kept_for_live_agents_only_and_go_with_the_eviction,
        a_cluster_at_its_cap_refuses_new_agents_on_every_instance,
        the_rows_transaction_writes_every_receipt_recorded_before_it,
        the_pass_decides_on_the_exact_receipt_within_the_cutoffs_minute,
        each_receipts_minute_is_its_own_and_moves_only_with_it,
        every_write_of_a_receipt_writes_its_minute,
        a_receipt_inserted_late_into_examined_minutes_is_evicted_by_the_next_pass,
        a_pass_after_an_examination_evicts_every_receipt_its_cutoff_passed,
        a_receipt_that_moved_between_examined_minutes_is_found_by_the_next_examination,
        an_agent_made_live_again_with_an_old_receipt_is_evicted_by_the_next_pass,
        an_evicted_agents_heartbeat_row_keeps_its_contract_columns,
        a_page_reads_at_most_walk_rows_however_many_agents_are_not_live,
        the_cluster_counts_once_per_interval_and_every_instance_reads_that_count,
    );

    /// The table is counted once per interval for the whole cluster: the first instance to find the count due takes
    /// it, the others read it (one row) and add what they admitted since; none counts again until it is due.
    /// Three instances here read the count three times each within an interval of an hour: one count in all.
    fn the_cluster_counts_once_per_interval_and_every_instance_reads_that_count(store: &DieselStore) {
        let hour = Duration::from_secs(3600);
        let instances: Vec<SharedLiveness> =
            (0..3).map(|_| SharedLiveness::with_count_interval(store.clone(), 100, hour)).collect();
        let west = ClusterId::new("west").unwrap();
        for id in ["a1", "a2", "a3"] {
            instances[0].record(&agent(id), &west, START).unwrap();
        }
        instances[0].flush().unwrap();
        for _ in 0..3 {
            for instance in &instances {
                instance.keep_tally();
                assert_eq!(instance.refresh_count().unwrap(), 3);
            }
        }
        let taken: Vec<u64> = instances.iter().map(SharedLiveness::counts_taken).collect();
        assert_eq!(taken, [1, 0, 0], "one count for the cluster, by the first instance that found it due");
        // An agent admitted after the count is added to it by the instance that admitted it, read after read; the
        // others learn of it at the next count.
        instances[1].record(&agent("b1"), &west, START).unwrap();
        instances[1].flush().unwrap();
        for instance in &instances {
            instance.keep_tally();
        }
        let tracked: Vec<usize> = instances.iter().map(|instance| instance.refresh_count().unwrap()).collect();
        assert_eq!(tracked, [3, 4, 3]);
        // An instance that finds the count due (here: due at once) takes it, and the others read its answer.
        // Tallies are placed against a count read back to within a few milliseconds (the database's clock): this
        // count comes well after them.
        let apart = || std::thread::sleep(Duration::from_millis(20));
        apart();
        let eager = SharedLiveness::with_count_interval(store.clone(), 100, Duration::ZERO);
        assert_eq!(eager.refresh_count().unwrap(), 4);
        assert_eq!(eager.counts_taken(), 1);
        let tracked: Vec<usize> = instances.iter().map(|instance| instance.refresh_count().unwrap()).collect();
        assert_eq!(tracked, [4, 4, 4]);
        let taken: Vec<u64> = instances.iter().map(SharedLiveness::counts_taken).collect();
        assert_eq!(taken, [1, 0, 0]);
        // An eviction is subtracted at once by the instance that evicted, and not twice once a count after it
        // is read.
        instances[0].record(&agent("c1"), &west, START + time::Duration::seconds(100)).unwrap();
        instances[0].flush().unwrap();
        instances[0].keep_tally();
        let evicted = instances[2]
            .evict_silent(START + time::Duration::seconds(100), time::Duration::seconds(90), FencingToken(1))
            .unwrap();
        assert_eq!(evicted.len(), 4);
        assert_eq!(instances[2].tracked_count(), 0, "it knew of 4, all evicted");
        instances[2].keep_tally();
        apart();
        assert_eq!(eager.refresh_count().unwrap(), 1);
        let tracked: Vec<usize> = instances.iter().map(|instance| instance.refresh_count().unwrap()).collect();
        assert_eq!(tracked, [1, 1, 1]);
    }

    /// Migration 2026-12-21-000018: no index holds the live rows alone, so a page walks the primary key, the rows of
    /// agents not live among the others. Whatever the page's sizes, its reads ask for `walk` rows at most in all
    /// (their `LIMIT`s summed), the table's rows between `after` and `next_after` are only those, and following
    /// `next_after` lists every live agent once, in id order.
    fn a_page_reads_at_most_walk_rows_however_many_agents_are_not_live(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 100);
        let west = ClusterId::new("west").unwrap();
        let id = |n: usize| format!("agent-{n:04}");
        // Heartbeat rows without a receipt, as a single instance writes them; and a few evicted agents.
        let rows: Vec<HeartbeatRecord> = (0..3000)
            .map(|n| HeartbeatRecord { agent_id: agent(&id(n)), cluster_id: west.clone(), last_seen_at: START })
            .collect();
        store.upsert_heartbeats(&rows).unwrap();
        for n in [3, 1500, 2997] {
            map.record(&agent(&id(n)), &west, START - time::Duration::seconds(200)).unwrap();
        }
        assert_eq!(evicted_ids(&map, START).len(), 3);
        let live = [0, 1, 2, 4, 500, 501, 1337, 2000, 2998, 2999];
        for n in live {
            map.record(&agent(&id(n)), &west, START).unwrap();
        }
        map.flush().unwrap();
        let live: Vec<String> = live.into_iter().map(id).collect();
        for (limit, walk) in [(5, 200), (100, 1000), (1, 7), (3, 3000), (3000, 3000)] {
            let (mut listed, mut after, mut pages, mut short) = (Vec::new(), None::<AgentId>, 0, 0);
            loop {
                let mut asked = 0;
                let page = read_page(after.as_ref(), limit, walk, |cursor, want| {
                    asked += want;
                    map.read_rows(cursor, want)
                })
                .unwrap();
                assert_eq!(map.live_agents(after.as_ref(), limit, walk).unwrap(), page, "the map's own page");
                assert!(asked <= walk, "limit {limit}, walk {walk}: {asked} rows asked for after {after:?}");
                assert!(page.entries.len() <= limit);
                let end = page
                    .next_after
                    .as_ref()
                    .map_or(usize::MAX, |next| next.as_str().strip_prefix("agent-").unwrap().parse::<usize>().unwrap());
                let start = after
                    .as_ref()
                    .map_or(0, |after| after.as_str().strip_prefix("agent-").unwrap().parse::<usize>().unwrap() + 1);
                assert!(end.min(2999) + 1 - start <= walk, "limit {limit}, walk {walk}: after {after:?}, {page:?}");
                pages += 1;
                assert!(pages <= 3000, "limit {limit}, walk {walk}: the cursor does not move on from {after:?}");
                short += usize::from(page.entries.len() < limit && page.next_after.is_some());
                listed.extend(page.entries.into_iter().map(|entry| entry.agent_id.as_str().to_owned()));
                match page.next_after {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(listed, live, "limit {limit}, walk {walk}");
            assert!(pages >= 3000 / walk, "limit {limit}, walk {walk}: {pages} pages");
            if walk < 3000 && limit > 1 {
                assert!(short > 0, "limit {limit}, walk {walk}: some pages among agents not live are short");
            }
        }
    }

    /// An evicted agent's row stays in `gateway_heartbeats`; a receipt makes it live again. With an old receipt
    /// (kept while the database was unreachable, say) into minutes the leader examined after the eviction, the next
    /// pass evicts it all the same: becoming live again counts as an insert does (`inserted_minute`).
    fn an_agent_made_live_again_with_an_old_receipt_is_evicted_by_the_next_pass(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        map.record(&agent("returner"), &west, START).unwrap();
        map.flush().unwrap();
        as_if_inserted_on_time(store);
        assert_eq!(evicted_ids(&map, START + seconds(91)), ["returner"]);
        map.examine().unwrap();
        assert!(evicted_ids(&map, START + seconds(92)).is_empty());
        map.record(&agent("returner"), &west, START + seconds(5)).unwrap();
        map.flush().unwrap();
        assert_eq!(map.live_agents(None, 10, 100).unwrap().entries.len(), 1, "live again");
        assert_eq!(evicted_ids(&map, START + seconds(100)), ["returner"]);
        assert!(map.live_agents(None, 10, 100).unwrap().entries.is_empty());
    }

    /// Eviction clears the receipt, never the heartbeat: the row's contract columns read back as written, and the
    /// agent is neither listed, nor counted, nor given capability entries.
    fn an_evicted_agents_heartbeat_row_keeps_its_contract_columns(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        map.record(&agent("alice"), &west, START).unwrap();
        // The agent's own timestamp, not the receipt's instant.
        let row = HeartbeatRecord {
            agent_id: agent("alice"),
            cluster_id: west,
            last_seen_at: START - time::Duration::seconds(7),
        };
        map.upsert_heartbeats(std::slice::from_ref(&row)).unwrap();
        assert_eq!(evicted_ids(&map, START + time::Duration::seconds(91)), ["alice"]);
        assert_eq!(map.heartbeat(&agent("alice")).unwrap(), Some(row));
        assert!(map.live_agents(None, 10, 100).unwrap().entries.is_empty());
        assert_eq!(map.count().unwrap(), 0);
        map.register(&agent("alice"), capabilities("1.0"));
        assert_eq!(map.get(&agent("alice")), None);
    }

    /// Makes every row look inserted in its receipt's minute, as a row is when its receipt arrives on time: the
    /// tests' clock is months behind the database's, which would make every row one inserted late.
    fn as_if_inserted_on_time(store: &DieselStore) {
        store
            .with_connection("test: rows inserted on time", |connection| {
                on_backend!(connection, c => diesel::sql_query(
                    "UPDATE gateway_heartbeats SET inserted_minute = received_minute WHERE received_minute IS NOT NULL"
                ).execute(c))
            })
            .unwrap();
    }

    fn evicted_ids(map: &SharedLiveness, now: OffsetDateTime) -> Vec<String> {
        let evicted = map.evict_silent(now, time::Duration::seconds(90), FencingToken(1)).unwrap();
        let mut ids: Vec<String> = evicted.into_iter().map(|entry| entry.agent_id.as_str().to_owned()).collect();
        ids.sort();
        ids
    }

    /// An instance that kept receipts while the database was unreachable inserts them late, into minutes the
    /// leader's examination already answered for (on PostgreSQL the passes here read no minute of the table: the
    /// tests' clock is months behind the database's, so every minute they use was examined): the next pass evicts
    /// the agent all the same.
    fn a_receipt_inserted_late_into_examined_minutes_is_evicted_by_the_next_pass(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        map.record(&agent("steady"), &west, START).unwrap();
        map.flush().unwrap();
        as_if_inserted_on_time(store);
        map.examine().unwrap();
        assert!(evicted_ids(&map, START + seconds(60)).is_empty());
        map.record(&agent("late"), &west, START - seconds(600)).unwrap();
        map.flush().unwrap();
        assert_eq!(evicted_ids(&map, START + seconds(70)), ["late"]);
    }

    /// An examination saw receipts that the cutoff passes later: each pass evicts exactly those behind its cutoff.
    fn a_pass_after_an_examination_evicts_every_receipt_its_cutoff_passed(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        map.record(&agent("first"), &west, START).unwrap();
        map.record(&agent("second"), &west, START + seconds(30)).unwrap();
        map.flush().unwrap();
        as_if_inserted_on_time(store);
        map.examine().unwrap();
        assert!(evicted_ids(&map, START + seconds(85)).is_empty());
        assert_eq!(evicted_ids(&map, START + seconds(91)), ["first"]);
        assert!(evicted_ids(&map, START + seconds(110)).is_empty());
        assert_eq!(evicted_ids(&map, START + seconds(121)), ["second"]);
    }

    /// A receipt that reaches its row late moves it from one examined minute to another (a receipt never moves
    /// back, but it can be older than the cutoffs to come): the next examination reads it where it is now.
    fn a_receipt_that_moved_between_examined_minutes_is_found_by_the_next_examination(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        map.record(&agent("mover"), &west, START - seconds(300)).unwrap();
        map.record(&agent("steady"), &west, START + seconds(200)).unwrap();
        map.flush().unwrap();
        as_if_inserted_on_time(store);
        map.examine().unwrap();
        map.record(&agent("mover"), &west, START - seconds(50)).unwrap();
        map.flush().unwrap();
        map.examine().unwrap();
        assert!(evicted_ids(&map, START + seconds(35)).is_empty());
        assert_eq!(evicted_ids(&map, START + seconds(45)), ["mover"]);
    }

    /// The first page's live agent ids, in listing order.
    fn live_ids(map: &SharedLiveness) -> Vec<String> {
        let page = map.live_agents(None, 10, 100).unwrap();
        page.entries.into_iter().map(|entry| entry.agent_id.as_str().to_owned()).collect()
    }

    fn agent(id: &str) -> AgentId {
        AgentId::new(id).unwrap()
    }

    fn capabilities(version: &str) -> CapabilityEntry {
        CapabilityEntry { agent_type: "planner".into(), capability_version: version.into(), updated_at: START }
    }

    fn capability_entries_are_kept_for_live_agents_only_and_go_with_the_eviction(store: &DieselStore) {
        let (a, b) = (SharedLiveness::new(store.clone(), 10), SharedLiveness::new(store.clone(), 10));
        a.record(&agent("alice"), &ClusterId::new("west").unwrap(), START).unwrap();
        a.flush().unwrap();
        // A DecisionLog reaches another instance than the heartbeats: the entry is still the live agent's.
        b.register(&agent("alice"), capabilities("1.0"));
        b.register(&agent("alice"), capabilities("1.1"));
        b.register(&agent("nobody"), capabilities("9.9"));
        let ids = [agent("nobody"), agent("alice")];
        assert_eq!(a.get_many(&ids).unwrap(), [None, None], "kept on b until it flushes");
        assert_eq!(b.get_many(&ids).unwrap(), [None, Some(capabilities("1.1"))]);
        assert_eq!(a.get(&agent("alice")), Some(capabilities("1.1")));

        let evicted = a.evict_silent(START + time::Duration::seconds(91), time::Duration::seconds(90), FencingToken(1));
        assert_eq!(evicted.unwrap().len(), 1);
        assert_eq!(b.get(&agent("alice")), None, "the entry went with the agent");
        a.record(&agent("alice"), &ClusterId::new("west").unwrap(), START + time::Duration::seconds(100)).unwrap();
        a.flush().unwrap();
        assert_eq!(b.get(&agent("alice")), None, "a returning agent starts without one");
    }

    /// The pass finds candidates by the receipt's minute (the indexed column) and evicts by the exact receipt:
    /// in the cutoff's own minute, a receipt a second before the cutoff is silent and one a second after is not.
    fn the_pass_decides_on_the_exact_receipt_within_the_cutoffs_minute(store: &DieselStore) {
        let map = SharedLiveness::new(store.clone(), 10);
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        let cutoff = datetime!(2026-02-22 12:00:30 UTC);
        for (id, receipt) in [("earlier-minute", cutoff - seconds(31)), ("before", cutoff - seconds(1))] {
            map.record(&agent(id), &west, receipt).unwrap();
        }
        for (id, receipt) in [("at", cutoff), ("after", cutoff + seconds(1)), ("next-minute", cutoff + seconds(30))] {
            map.record(&agent(id), &west, receipt).unwrap();
        }
        map.flush().unwrap();
        let threshold = seconds(90);
        let mut evicted: Vec<String> = map
            .evict_silent(cutoff + threshold, threshold, FencingToken(1))
            .unwrap()
            .into_iter()
            .map(|entry| entry.agent_id.as_str().to_owned())
            .collect();
        evicted.sort();
        assert_eq!(evicted, ["before", "earlier-minute"]);
        assert_eq!(live_ids(&map), ["after", "at", "next-minute"]);
    }

    /// Every statement that writes or clears `received_at` writes or clears `received_minute` with it (on SQLite a
    /// plain column since migration 2026-12-21-000021, as on PostgreSQL): after each kind of write below, every
    /// row's minute is its receipt's, NULL with it. A stale minute would make the pass skip a silent agent, or count
    /// and list an evicted one as live.
    fn every_write_of_a_receipt_writes_its_minute(store: &DieselStore) {
        use gateway_heartbeats::dsl;
        let (a, b) = (SharedLiveness::new(store.clone(), 10), SharedLiveness::new(store.clone(), 10));
        let west = ClusterId::new("west").unwrap();
        let seconds = time::Duration::seconds;
        let beat = |id: &str, at: OffsetDateTime| HeartbeatRecord {
            agent_id: agent(id),
            cluster_id: west.clone(),
            last_seen_at: at,
        };
        let check = |step: &str| {
            let rows: Vec<(String, Option<PrimitiveDateTime>, Option<i64>)> = store
                .with_connection("read every receipt", |connection| {
                    on_backend!(connection, c => dsl::gateway_heartbeats
                        .select((dsl::agent_id, dsl::received_at, dsl::received_minute))
                        .order(dsl::agent_id)
                        .load(c))
                })
                .unwrap();
            assert!(!rows.is_empty(), "{step}");
            for (agent_id, received_at, minute) in rows {
                let expected = received_at.map(|at| receipt_minute(at.assume_utc()));
                assert_eq!(minute, expected, "{step}: {agent_id} received at {received_at:?}");
            }
        };
        // A heartbeat row without a receipt (a single instance's), then receipts alone (a flush), into rows that
        // exist and rows that do not.
        store.upsert_heartbeats(&[beat("plain", START), beat("carol", START)]).unwrap();
        for id in ["alice", "bob", "carol"] {
            a.record(&agent(id), &west, START).unwrap();
        }
        a.flush().unwrap();
        check("receipts alone");
        // Receipts in the next minutes, with and without their heartbeat rows in the same group.
        a.record(&agent("alice"), &west, START + seconds(61)).unwrap();
        a.record(&agent("bob"), &west, START + seconds(125)).unwrap();
        a.upsert_heartbeats(&[beat("bob", START + seconds(125)), beat("dave", START + seconds(125))]).unwrap();
        check("receipts with heartbeat rows");
        // An older receipt from another instance moves neither the receipt nor its minute.
        b.record(&agent("alice"), &west, START + seconds(1)).unwrap();
        b.flush().unwrap();
        check("an older receipt");
        // Eviction clears them; a heartbeat alone leaves an evicted agent's receipt NULL; a receipt makes it live.
        let evicted = evicted_ids(&a, START + seconds(160));
        assert_eq!(evicted, ["alice", "carol"]);
        check("eviction");
        a.upsert_heartbeats(&[beat("carol", START + seconds(200))]).unwrap();
        check("a heartbeat of an evicted agent");
        a.record(&agent("carol"), &west, START + seconds(130)).unwrap();
        a.register(&agent("carol"), capabilities("2.0"));
        a.flush().unwrap();
        check("live again, with capabilities");
        assert_eq!(live_ids(&a), ["bob", "carol"]);
    }

    /// `received_minute` is the minute of the stored `received_at` (the gateway writes it on both backends):
    /// either side of a minute's boundary by a microsecond, with the rows and
    /// alone; and a receipt older than the stored one, flushed late by another instance, moves neither.
    fn each_receipts_minute_is_its_own_and_moves_only_with_it(store: &DieselStore) {
        use gateway_heartbeats::dsl;
        let (a, b) = (SharedLiveness::new(store.clone(), 10), SharedLiveness::new(store.clone(), 10));
        let west = ClusterId::new("west").unwrap();
        let boundary = datetime!(2026-02-22 12:01:00 UTC);
        let micro = time::Duration::microseconds(1);
        let stored = |id: &str| -> (PrimitiveDateTime, i64) {
            store
                .with_connection("read a receipt", |connection| {
                    on_backend!(connection, c => dsl::gateway_heartbeats
                        .find(id)
                        .select((dsl::received_at.assume_not_null(), dsl::received_minute.assume_not_null()))
                        .first(c))
                })
                .unwrap()
        };
        for (n, receipt) in [boundary - micro, boundary, boundary + micro].into_iter().enumerate() {
            let id = format!("agent-{n}");
            a.record(&agent(&id), &west, receipt).unwrap();
            if n == 0 {
                a.flush().unwrap();
            } else {
                let row = HeartbeatRecord { agent_id: agent(&id), cluster_id: west.clone(), last_seen_at: receipt };
                a.upsert_heartbeats(&[row]).unwrap();
            }
            let expected = receipt.unix_timestamp().div_euclid(RECEIPT_MINUTE_SECONDS);
            assert_eq!(stored(&id), (to_db(receipt), expected), "{receipt}");
            assert_eq!(receipt_minute(receipt), expected);
        }
        // agent-2 heartbeats on into the next minute through a; b flushes an older receipt of it afterwards.
        let later = boundary + time::Duration::seconds(61);
        a.record(&agent("agent-2"), &west, later).unwrap();
        a.flush().unwrap();
        b.record(&agent("agent-2"), &west, boundary).unwrap();
        b.flush().unwrap();
        assert_eq!(stored("agent-2"), (to_db(later), later.unix_timestamp().div_euclid(RECEIPT_MINUTE_SECONDS)));
        assert_eq!(receipt_minute(datetime!(1969-12-31 23:59:59.5 UTC)), -1, "rounded down");
    }

    /// What lets the heartbeat manager answer after the rows without a flush of its own.
    fn the_rows_transaction_writes_every_receipt_recorded_before_it(store: &DieselStore) {
        let (a, b) = (SharedLiveness::new(store.clone(), 10), SharedLiveness::new(store.clone(), 10));
        assert!(a.writes_receipts());
        let west = ClusterId::new("west").unwrap();
        a.record(&agent("alice"), &west, START).unwrap();
        // Bob's heartbeat is queued for the next group; his receipt goes with this one all the same.
        a.record(&agent("bob"), &west, START).unwrap();
        let row = HeartbeatRecord { agent_id: agent("alice"), cluster_id: west, last_seen_at: START };
        a.upsert_heartbeats(std::slice::from_ref(&row)).unwrap();
        assert_eq!(live_ids(&b), ["alice", "bob"]);
        assert_eq!(b.heartbeat(&agent("alice")).unwrap(), Some(row));
    }

    /// The count and the examination read the table every few seconds in the background, each in one process
    /// however the planner rates a parallel scan ([`background_read`]). Against a database that plans every scan
    /// in parallel (no cost to start workers), the count must show one sequential scan of the table, where a
    /// parallel one counts one per participant in PostgreSQL's statistics (the leader and each worker). The
    /// examination's index scan counts once however many processes share it: what this test sees of it is that it
    /// still reads under those settings.
    #[test]
    fn postgres_counts_and_examines_without_parallel_workers() {
        #[derive(QueryableByName, Debug, PartialEq)]
        struct Scans {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            seq_scan: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            idx_scan: i64,
        }
        let Some(database) = gateway_testkit::postgres::database(module_path!()) else { return };
        let mut admin = PgConnection::establish(database.url()).unwrap();
        diesel::sql_query(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET parallel_setup_cost = 0; \
             ALTER DATABASE %1$I SET parallel_tuple_cost = 0; \
             ALTER DATABASE %1$I SET min_parallel_table_scan_size = 0; \
             ALTER DATABASE %1$I SET min_parallel_index_scan_size = 0; \
             ALTER DATABASE %1$I SET max_parallel_workers_per_gather = 2; \
             ALTER DATABASE %1$I SET enable_indexonlyscan = off; \
             ALTER DATABASE %1$I SET enable_bitmapscan = off', current_database()); END $$",
        )
        .execute(&mut admin)
        .unwrap();
        // Statistics reach the shared counters when a backend ends at the latest: each step closes its store and
        // waits for its connections to be gone before reading them.
        let closed = |admin: &mut PgConnection| {
            #[derive(QueryableByName)]
            struct Others {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                others: i64,
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let found: Others = diesel::sql_query(
                    "SELECT count(*) AS others FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .get_result(admin)
                .unwrap();
                if found.others == 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "the store's connections did not close");
                std::thread::sleep(Duration::from_millis(20));
            }
            diesel::sql_query("SELECT pg_stat_clear_snapshot()").execute(admin).unwrap();
            diesel::sql_query(
                "SELECT seq_scan, coalesce(idx_scan, 0) AS idx_scan FROM pg_stat_user_tables \
                 WHERE relname = 'gateway_heartbeats'",
            )
            .get_result::<Scans>(admin)
            .unwrap()
        };
        {
            let store = DieselStore::open(&crate::testing::postgres_url(database.url())).unwrap();
            let map = SharedLiveness::new(store, 100);
            for n in 0..50 {
                map.record(&agent(&format!("agent-{n:02}")), &ClusterId::new("west").unwrap(), START).unwrap();
            }
            map.flush().unwrap();
        }
        let before = closed(&mut admin);
        {
            let store = DieselStore::open(&crate::testing::postgres_url(database.url())).unwrap();
            let map = SharedLiveness::new(store, 100);
            assert_eq!(map.count().unwrap(), 50);
            map.examine().unwrap();
            assert!(lock(&map.inner.examined).is_some(), "the examination read the table");
        }
        let after = closed(&mut admin);
        assert_eq!(
            Scans { seq_scan: after.seq_scan - before.seq_scan, idx_scan: after.idx_scan - before.idx_scan },
            Scans { seq_scan: 1, idx_scan: 1 },
            "the count is one sequential scan and the examination one index scan, each by one process"
        );
    }

    /// An instance that finds the count due while another instance is taking it (holds its row) neither waits for
    /// it nor counts too: it goes on with the count it read.
    #[test]
    fn postgres_an_instance_neither_waits_for_nor_repeats_a_count_under_way() {
        let Some(database) = gateway_testkit::postgres::database(module_path!()) else { return };
        let mut rival = PgConnection::establish(database.url()).unwrap();
        // Were it to wait, its statement fails after this instead of the test hanging.
        diesel::sql_query(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = ''3s''', current_database()); END $$",
        )
        .execute(&mut rival)
        .unwrap();
        let store = DieselStore::open(&crate::testing::postgres_url(database.url())).unwrap();
        let map = SharedLiveness::with_count_interval(store, 10, Duration::ZERO);
        map.record(&agent("alice"), &ClusterId::new("west").unwrap(), START).unwrap();
        map.flush().unwrap();
        diesel::sql_query("BEGIN").execute(&mut rival).unwrap();
        diesel::sql_query("SELECT id FROM gateway_live_count WHERE id = 1 FOR UPDATE").execute(&mut rival).unwrap();
        assert_eq!(map.refresh_count().unwrap(), 1, "its own admission");
        assert_eq!(map.counts_taken(), 0);
        diesel::sql_query("COMMIT").execute(&mut rival).unwrap();
        assert_eq!(map.refresh_count().unwrap(), 1);
        assert_eq!(map.counts_taken(), 1);
    }

    /// Migrations 2026-12-21-000012 and 000017: without them the eviction pass's probe walks a million dead index entries until
    /// PostgreSQL's default thresholds (20 % of the rows) start a vacuum.
    #[test]
    fn postgres_vacuums_the_heartbeat_rows_after_one_percent_of_them_changed() {
        #[derive(QueryableByName)]
        struct Options {
            #[diesel(sql_type = diesel::sql_types::Text)]
            options: String,
        }
        let Some(fixture) = crate::testing::postgres(module_path!()) else { return };
        let options: Options = fixture
            .store
            .with_connection("read reloptions", |connection| {
                let AnyConnection::Postgres(c) = connection else { panic!("a PostgreSQL store") };
                diesel::sql_query(
                    "SELECT coalesce(array_to_string(reloptions, ','), '') AS options FROM pg_class \
                     WHERE relname = 'gateway_heartbeats'",
                )
                .get_result(&mut **c)
            })
            .unwrap();
        let mut options: Vec<&str> = options.options.split(',').collect();
        options.sort_unstable();
        assert_eq!(
            options,
            ["autovacuum_vacuum_insert_scale_factor=0.01", "autovacuum_vacuum_scale_factor=0.01", "fillfactor=70"]
        );
    }

    fn a_cluster_at_its_cap_refuses_new_agents_on_every_instance(store: &DieselStore) {
        let (a, b) = (SharedLiveness::new(store.clone(), 2), SharedLiveness::new(store.clone(), 2));
        let west = ClusterId::new("west").unwrap();
        a.record(&agent("a1"), &west, START).unwrap();
        a.record(&agent("a2"), &west, START).unwrap();
        a.flush().unwrap();
        assert_eq!(b.count().unwrap(), 2);
        assert_eq!(b.record(&agent("b1"), &west, START), Err(LivenessRefusal::CapacityReached { cap: 2 }));
        assert!(!b.record_if_tracked(&agent("b1"), &west, START).unwrap(), "a new agent stays refused");
        // An agent live through heartbeats to the other instance is refused by `record` here (this instance cannot
        // tell it from a new one without a round trip), and then recorded after the look-up, cap or not.
        let later = START + time::Duration::seconds(30);
        assert_eq!(b.record(&agent("a1"), &west, later), Err(LivenessRefusal::CapacityReached { cap: 2 }));
        assert!(b.record_if_tracked(&agent("a1"), &west, later).unwrap());
        assert!(b.is_live(&agent("a1")));
        b.record(&agent("a1"), &west, later).unwrap();
        assert_eq!(b.tracked_count(), 2);
        b.flush().unwrap();
        assert_eq!(b.live_agents(None, 10, 100).unwrap().entries[0].last_seen, later);
        let evicted =
            a.evict_silent(START + time::Duration::seconds(91), time::Duration::seconds(90), FencingToken(1)).unwrap();
        assert_eq!(evicted.iter().map(|entry| entry.agent_id.as_str()).collect::<Vec<_>>(), ["a2"]);
        assert_eq!(a.tracked_count(), 1, "the evicting instance counts its evictions at once");
        assert_eq!(b.count().unwrap(), 1, "the others at their next count");
        b.record(&agent("b1"), &west, START + time::Duration::seconds(92)).unwrap();
    }
}
