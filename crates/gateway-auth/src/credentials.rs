//! The cache of verified agent credentials (docs/architecture.md, "Agent credentials"): with agent auth on, every
//! heartbeat, message and tool call presents a token, and checking one must not cost a database read.
//!
//! - A hit is a table lookup by the token's credential id and one hash comparison: the SHA-256 of the presented
//!   token against the stored one, in constant time (`TokenHash::matches`, never `==`). Everything a hit reads is
//!   in the entry's own two cache lines ([`Entry`]): with thousands of agents each entry is touched too rarely to
//!   stay in a CPU cache, and every pointer followed would be one more wait for memory.
//! - A miss reads the row (on the blocking pool, at most [`MAX_CONCURRENT_CREDENTIAL_READS`] at once, so a flood of made-up
//!   credential ids cannot take the pool from everything else) and caches the answer: the credential, or the fact
//!   that the id authenticates nothing (unknown or revoked), the latter in a bounded set ([`MAX_REFUSED_CREDENTIALS`]).
//! - Every [`REVOCATION_POLL_INTERVAL`] the cache asks the store which credentials were revoked lately (one indexed query,
//!   whatever the number of agents), drops those and closes their event streams; an entry is trusted for
//!   [`REVALIDATE_AFTER`] after the later of the read that produced it and the last poll that succeeded. So a
//!   revocation on another instance ends the credential's use here within a poll, even when its event is lost
//!   (Redis pub/sub keeps nothing), and while the store cannot be polled entries age out and are read again: a
//!   revoked credential authenticates nothing anywhere later than [`REVALIDATE_AFTER`] after its revocation
//!   committed.
//! - A revocation drops the entry at once on the instance that made it, and every instance re-reads the credential
//!   when the `credential_revoked` event on `internal:credential-revocations` reaches it (the event bridge, with
//!   Redis, hands it to [`crate::Auth::revocation_announced`]): the event is not taken on its word
//!   ([`CredentialCache::recheck`]); a credential the store says is revoked is refused, and event streams opened
//!   with it are closed.
//! - Every invalidation bumps a generation under the write lock; a read that began before it does not fill the
//!   cache, so a lookup racing a revocation cannot put the revoked credential back.
//! - A credential issued with an expiry ([`Entry::expires_ms`]) is answered [`Verdict::Expired`] from its expiry on,
//!   from the cache like any hit (an expired token in use costs no read), and the event streams opened with it are
//!   closed at that instant by a timer of their own ([`CredentialCache::stream_stop`]).
//! - A credential's last use is written without a write per request: a hit moves its entry's `used_s` (at most once
//!   a second), and every [`CREDENTIAL_USE_RECORD_INTERVAL`] (or the interval the cache was made with) a revocation
//!   poll collects the entries used since the previous recording and writes them through one
//!   [`AgentCredentialStore::record_credential_uses`] call, each use at the start of its minute. The store keeps the
//!   later instant, so instances may report in any order. Uses of an entry dropped before a recording (a
//!   revocation, [`CredentialCache::invalidate_all`], making room) are not written.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use gateway_core::runtime::stats::Counter;
use gateway_core::runtime::sync::lock;
use gateway_core::{
    AgentCredentialStore, AgentId, Clock, CompactAgentId, CredentialId, CredentialKey, PresentedToken, StoreError,
    TokenHash, run_blocking,
};
use hashbrown::HashTable;
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a verified credential is trusted after the later of the read that produced it and the last
/// revocation poll that succeeded: the longest a revoked credential can still authenticate somewhere when neither
/// its event nor a poll gets through.
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(5);
/// How often the store is asked for the credentials revoked lately.
pub const REVOCATION_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How far before the previous poll each poll looks: a revocation whose transaction took this long to commit, or
/// whose instant came from an instance whose clock is behind this one's by up to this much, is still found. The
/// instances' clocks must agree to within it (as Standard Webhooks timestamps, checked to 5 minutes, already ask).
pub const REVOCATION_LOOKBACK: Duration = Duration::from_secs(300);
/// An entry unused this long is dropped.
pub const CREDENTIAL_IDLE_AFTER: Duration = Duration::from_secs(60);
/// How often idle entries and old refusals are looked for.
pub const CREDENTIAL_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// Verified credentials held at most (an arbitrary one makes room for a new one).
pub const MAX_VERIFIED_CREDENTIALS: usize = 100_000;
/// Credential ids known to authenticate nothing, held at most (oldest forgotten first), and for how long.
pub const MAX_REFUSED_CREDENTIALS: usize = 10_000;
pub const REFUSED_CREDENTIAL_TTL: Duration = Duration::from_secs(60);
/// Rows read at once on behalf of requests that missed the cache.
pub const MAX_CONCURRENT_CREDENTIAL_READS: usize = 16;
/// How often a cache writes the last uses of the credentials it saw used (`--last-use-interval-s`): a listed
/// `last_used_at` is at most this (plus a poll) behind the last request. At most [`CREDENTIAL_IDLE_AFTER`] / 2, so
/// that an entry is recorded before the sweep drops it as idle.
pub const CREDENTIAL_USE_RECORD_INTERVAL: Duration = Duration::from_secs(30);
/// The longest record interval a cache may be given.
pub const MAX_CREDENTIAL_USE_RECORD_INTERVAL: Duration = Duration::from_secs(30);

/// A verified credential, as a request holds it: a copy of its cache entry's credential and agent, so that using
/// it touches nothing shared.
#[derive(Debug, Clone)]
pub struct Verified {
    key: CredentialKey,
    agent: CompactAgentId,
    /// When the credential expires, in ms since the cache's start; `u64::MAX`: never.
    expires_ms: u64,
}

impl Verified {
    pub fn credential_id(&self) -> CredentialId {
        CredentialId::from_key(&self.key)
    }

    /// Whether `agent_id` is the credential's agent.
    pub fn is_agent(&self, agent_id: &AgentId) -> bool {
        self.agent.is(agent_id)
    }

    /// The credential's agent.
    pub fn agent_id(&self) -> AgentId {
        self.agent.to_agent_id()
    }
}

/// What [`CredentialCache::verify`] found.
#[derive(Debug, Clone)]
pub enum Verdict {
    Verified(Verified),
    /// Unknown credential id, revoked credential, or a wrong secret.
    Refused,
    /// The right secret of a credential that has expired (not revoked): the agent needs a new token.
    Expired,
}

/// One verified credential in the cache: what a hit reads, in one allocation-free block of two cache lines (its
/// key, the times, the stored hash and the first bytes of the agent id in the first line, the rest of an id of up
/// to 62 bytes in the second), held in the table itself. Both lines' addresses are known once the entry is found, so
/// their loads can overlap, unlike a pointer chain (bucket, then an `Arc`, then the id's text), whose every link is
/// one more wait for memory.
#[repr(C, align(128))]
struct Entry {
    key: CredentialKey,
    /// When a request last used it, in seconds since the cache's start (moved at most once a second).
    used_s: AtomicU32,
    /// When the read that produced it began, in ms since the cache's start.
    read_ms: u64,
    hash: TokenHash,
    agent: CompactAgentId,
    /// When the credential expires, in ms since the cache's start (`u64::MAX`: never). In the second line, which
    /// had these 8 bytes free: only a hit whose hash matched reads it.
    expires_ms: u64,
}

/// Where a key goes in the table. Only credentials read from the store are inserted, and their ids end in 6
/// random bytes chosen by the gateway, so no client chooses where an entry goes: one multiplication spreads those
/// bytes over the hash (the table's index takes its low bits, its tags the high ones), with no keyed hash to
/// compute on every request.
fn slot_hash(key: &CredentialKey) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..6].copy_from_slice(&key[6..]);
    bytes[6..].copy_from_slice(&key[4..6]);
    u64::from_le_bytes(bytes).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct CredentialCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn AgentCredentialStore>,
    /// The wall clock revocations are stamped by, which polls look back from.
    clock: Arc<dyn Clock>,
    /// What `read_ms`, `used_s` and `confirmed_ms` count from.
    started: Instant,
    cached: RwLock<Cached>,
    /// When the last poll that succeeded began, in ms since `started`: every entry is trusted from then on as
    /// well as from its own read.
    confirmed_ms: AtomicU64,
    /// The wall-clock instant the last poll that succeeded began at: the next one looks back from there.
    polled_at: Mutex<Option<OffsetDateTime>>,
    /// When idle entries were last looked for.
    swept: Mutex<Instant>,
    lookups: Semaphore,
    /// Rows read on behalf of requests the cache could not answer (`/metrics`).
    reads: Counter,
    /// Event streams opened with each credential, closed when it is revoked.
    streams: Mutex<HashMap<CredentialId, Vec<(u64, CancellationToken)>>>,
    next_stream: AtomicU64,
    max_verified: usize,
    /// How often uses are written to the store.
    use_record_interval: Duration,
    /// When uses were last written, and the second (since `started`) from which entries count as used since.
    uses_recorded: Mutex<(Instant, u32)>,
}

#[derive(Default)]
struct Cached {
    verified: HashTable<Entry>,
    /// Keyed by ids clients choose, so with the standard library's keyed hash.
    refused: HashMap<CredentialKey, Instant>,
    /// `refused` in the order it was filled, to forget the oldest first.
    refused_order: VecDeque<(CredentialKey, Instant)>,
    generation: u64,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("verified", &self.verified.len())
            .field("refused", &self.refused.len())
            .field("generation", &self.generation)
            .finish()
    }
}

enum Lookup {
    Found(Verdict),
    Miss,
}

impl CredentialCache {
    /// A cache that writes the last uses it saw every `use_record_interval` (at most
    /// [`MAX_CREDENTIAL_USE_RECORD_INTERVAL`]; longer is taken as that).
    pub fn new(store: Arc<dyn AgentCredentialStore>, clock: Arc<dyn Clock>, use_record_interval: Duration) -> Self {
        Self::with_capacity(store, clock, MAX_VERIFIED_CREDENTIALS, use_record_interval)
    }

    fn with_capacity(
        store: Arc<dyn AgentCredentialStore>,
        clock: Arc<dyn Clock>,
        max_verified: usize,
        use_record_interval: Duration,
    ) -> Self {
        let started = Instant::now();
        let inner = Inner {
            store,
            clock,
            started,
            cached: RwLock::new(Cached::default()),
            confirmed_ms: AtomicU64::new(0),
            polled_at: Mutex::new(None),
            swept: Mutex::new(started),
            lookups: Semaphore::new(MAX_CONCURRENT_CREDENTIAL_READS),
            reads: Counter::new(),
            streams: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(0),
            max_verified,
            use_record_interval: use_record_interval.min(MAX_CREDENTIAL_USE_RECORD_INTERVAL),
            uses_recorded: Mutex::new((started, 0)),
        };
        Self { inner: Arc::new(inner) }
    }

    /// Who `token` authenticates. A store error (the row could not be read) is no verdict: the caller answers 503,
    /// never a guess.
    pub async fn verify(&self, token: PresentedToken<'_>) -> Result<Verdict, StoreError> {
        let key = token.credential_key();
        let hash = token.hash();
        let now = self.inner.millis(Instant::now());
        if let Lookup::Found(verdict) = self.inner.lookup(&key, &hash, now) {
            return Ok(verdict);
        }
        // Boxed: the hit above is every request's path, and its future need not be as large as this one.
        Box::pin(self.load(key, hash)).await
    }

    async fn load(&self, key: CredentialKey, hash: TokenHash) -> Result<Verdict, StoreError> {
        let inner = &self.inner;
        let _permit = inner.lookups.acquire().await.map_err(|_| StoreError::Unavailable("shutting down".into()))?;
        let began = Instant::now();
        // Another request may have filled the entry while this one waited for a permit.
        if let Lookup::Found(verdict) = inner.lookup(&key, &hash, inner.millis(began)) {
            return Ok(verdict);
        }
        let generation = inner.read().generation;
        let store = Arc::clone(&inner.store);
        inner.reads.increment();
        let id = CredentialId::from_key(&key);
        let row = run_blocking(move || store.credential(&id)).await??;
        // The wall clock and the monotonic one read together: the expiry is placed on the monotonic line from the
        // same instant, not from `began` (a slow read would otherwise make the token expire that much early).
        let wall = inner.clock.now();
        let wall_ms = inner.millis(Instant::now());
        let mut cached = inner.write();
        let fill = cached.generation == generation;
        match row.filter(|row| !row.is_revoked()) {
            Some(row) => {
                let read_ms = inner.millis(began);
                let expires_ms = expiry_ms(wall_ms, row.expires_at, wall);
                let verified = Verified { key, agent: CompactAgentId::from(&row.agent_id), expires_ms };
                let verdict = match row.token_hash.matches(&hash) {
                    false => Verdict::Refused,
                    true if wall_ms >= expires_ms => Verdict::Expired,
                    true => Verdict::Verified(verified.clone()),
                };
                if fill {
                    let used_s = AtomicU32::new(seconds(read_ms));
                    let agent = verified.agent;
                    let entry = Entry { key, used_s, read_ms, hash: row.token_hash, agent, expires_ms };
                    cached.insert_verified(entry, inner.max_verified);
                }
                Ok(verdict)
            }
            None => {
                cached.remove_verified(&key);
                if fill {
                    cached.insert_refused(key, Instant::now());
                }
                Ok(Verdict::Refused)
            }
        }
    }

    /// Stops `credential_id` from authenticating anything on this instance, at once, and closes the event streams
    /// opened with it. Called for a local revocation and for every revocation event.
    pub fn invalidate(&self, credential_id: &CredentialId) {
        {
            let mut cached = self.inner.write();
            cached.generation += 1;
            let key = credential_id.key();
            cached.remove_verified(&key);
            cached.insert_refused(key, Instant::now());
        }
        self.close_streams(credential_id);
    }

    /// A revocation event (another instance's, through Redis, or this one's own) names `credential_id`: it is not
    /// taken on its word. The credential is dropped from the cache and its row read again; only a row the store says
    /// is revoked (or gone) makes it refused here and closes its streams. A forged event costs one database read,
    /// never a valid agent's access; when the row cannot be read, the credential's next use reads it.
    pub async fn recheck(&self, credential_id: &CredentialId) {
        {
            let mut cached = self.inner.write();
            // A lookup that began before this must not put back what it read.
            cached.generation += 1;
            cached.remove_verified(&credential_id.key());
        }
        let (store, id) = (Arc::clone(&self.inner.store), credential_id.clone());
        match run_blocking(move || store.credential(&id)).await {
            Ok(Ok(Some(row))) if !row.is_revoked() => {
                tracing::debug!(%credential_id, "a revocation event for a credential the store holds valid; kept");
            }
            Ok(Ok(_)) => self.invalidate(credential_id),
            Ok(Err(error)) => tracing::warn!(%error, "cannot re-read a credential named by a revocation event"),
            Err(error) => tracing::warn!(%error, "cannot re-read a credential named by a revocation event"),
        }
    }

    /// Forgets every verified credential (when revocation events may have been missed): each is read again at its
    /// next use.
    pub fn invalidate_all(&self) {
        let mut cached = self.inner.write();
        cached.generation += 1;
        cached.verified.clear();
    }

    /// A stop signal for an event stream opened with `verified`: cancelled with `shutdown`, or when the credential
    /// is revoked. The stream holds the returned guard for as long as it runs.
    pub fn stream_stop(&self, verified: &Verified, shutdown: &CancellationToken) -> (CancellationToken, StreamGuard) {
        let stop = shutdown.child_token();
        let serial = self.inner.next_stream.fetch_add(1, Ordering::Relaxed);
        let id = verified.credential_id();
        lock(&self.inner.streams).entry(id.clone()).or_default().push((serial, stop.clone()));
        let expiry = self.expiry_timer(verified, &stop);
        (stop, StreamGuard { cache: self.clone(), credential_id: id, serial, expiry })
    }

    /// For a credential that expires: a task that stops the stream at the expiry instant, aborted when the stream
    /// ends first (its guard is dropped), so no timer outlives its stream.
    fn expiry_timer(&self, verified: &Verified, stop: &CancellationToken) -> Option<tokio::task::AbortHandle> {
        if verified.expires_ms == u64::MAX {
            return None;
        }
        let at = self.inner.started + Duration::from_millis(verified.expires_ms);
        let stop = stop.clone();
        let timer = tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep_until(at) => stop.cancel(),
                () = stop.cancelled() => {}
            }
        });
        Some(timer.abort_handle())
    }

    fn close_streams(&self, credential_id: &CredentialId) {
        if let Some(streams) = lock(&self.inner.streams).remove(credential_id) {
            for (_, stream) in streams {
                stream.cancel();
            }
        }
    }

    /// Asks the store which credentials were revoked since [`REVOCATION_LOOKBACK`] before the previous poll that
    /// succeeded, drops them and closes their streams; then every entry counts as confirmed by this poll. Every
    /// [`CREDENTIAL_SWEEP_INTERVAL`] also drops the entries unused for [`CREDENTIAL_IDLE_AFTER`] and refusals older than
    /// [`REFUSED_CREDENTIAL_TTL`]. An error changes nothing: entries then age out, and requests read their rows themselves.
    pub async fn poll(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let began = Instant::now();
        let wall = inner.clock.now();
        let since = lock(&inner.polled_at).unwrap_or(wall) - REVOCATION_LOOKBACK;
        let store = Arc::clone(&inner.store);
        let revoked = run_blocking(move || store.revoked_since(since)).await??;
        {
            let mut cached = inner.write();
            if !revoked.is_empty() {
                // A read that began before this poll may have found one of these rows unrevoked: it must not fill.
                cached.generation += 1;
                for id in &revoked {
                    cached.remove_verified(&id.key());
                }
            }
            inner.confirmed_ms.fetch_max(inner.millis(began), Ordering::Relaxed);
        }
        *lock(&inner.polled_at) = Some(wall);
        for id in &revoked {
            self.close_streams(id);
        }
        // Before the sweep: an entry about to be dropped as idle has its last use written first.
        self.record_uses(began, wall).await;
        let sweep = {
            let mut swept = lock(&inner.swept);
            let due = began.saturating_duration_since(*swept) >= CREDENTIAL_SWEEP_INTERVAL;
            if due {
                *swept = began;
            }
            due
        };
        if sweep {
            self.sweep(began);
        }
        Ok(())
    }

    /// When the record interval has passed since the last recording: writes the last use of every entry used since,
    /// each as the start of the minute it fell in (`wall` is the wall clock at `now`), in one store call. A failed
    /// write is retried whole at the next poll; it does not make the poll fail (revocations still count).
    async fn record_uses(&self, now: Instant, wall: OffsetDateTime) {
        let inner = &self.inner;
        let since_s = {
            let recorded = lock(&inner.uses_recorded);
            if now.saturating_duration_since(recorded.0) < inner.use_record_interval {
                return;
            }
            recorded.1
        };
        let now_ms = inner.millis(now);
        let uses: Vec<(CredentialId, OffsetDateTime)> = {
            let cached = inner.read();
            cached
                .verified
                .iter()
                .filter_map(|entry| {
                    let used_s = entry.used_s.load(Ordering::Relaxed);
                    (used_s >= since_s).then(|| {
                        let ago_ms = now_ms.saturating_sub(u64::from(used_s) * 1_000);
                        let used_at = wall - Duration::from_millis(ago_ms);
                        (CredentialId::from_key(&entry.key), start_of_minute(used_at))
                    })
                })
                .collect()
        };
        // Uses in the second of `now` are recorded again next time: the store keeps the later instant, so twice is
        // harmless, and none is missed.
        let next_since_s = seconds(now_ms);
        if !uses.is_empty() {
            let store = Arc::clone(&inner.store);
            let written = run_blocking(move || store.record_credential_uses(&uses)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return tracing::warn!(%error, "cannot record the last use of credentials"),
                Err(error) => return tracing::warn!(%error, "cannot record the last use of credentials"),
            }
        }
        *lock(&inner.uses_recorded) = (now, next_since_s);
    }

    /// Drops the entries unused for [`CREDENTIAL_IDLE_AFTER`] and the refusals older than [`REFUSED_CREDENTIAL_TTL`]. Looked for under
    /// the read lock (requests go on meanwhile); only dropping takes the write lock.
    fn sweep(&self, now: Instant) {
        let inner = &self.inner;
        let now_s = seconds(inner.millis(now));
        let idle_after = u32::try_from(CREDENTIAL_IDLE_AFTER.as_secs()).unwrap_or(u32::MAX);
        let idle = |entry: &Entry| now_s.saturating_sub(entry.used_s.load(Ordering::Relaxed)) >= idle_after;
        let due = {
            let cached = inner.read();
            cached.verified.iter().any(idle) || cached.refused_expired(now, REFUSED_CREDENTIAL_TTL)
        };
        if due {
            let mut cached = inner.write();
            cached.verified.retain(|entry| !idle(entry));
            cached.prune_refused(now, REFUSED_CREDENTIAL_TTL);
        }
    }

    /// Credential rows read so far because a request found no answer in the cache.
    pub fn store_reads(&self) -> u64 {
        self.inner.reads.get()
    }

    /// Verified credentials held right now.
    pub fn len(&self) -> usize {
        self.inner.read().verified.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Event streams registered right now.
    #[cfg(test)]
    fn open_streams(&self) -> usize {
        lock(&self.inner.streams).values().map(Vec::len).sum()
    }
}

impl Inner {
    fn millis(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.started))
    }

    fn read(&self) -> RwLockReadGuard<'_, Cached> {
        self.cached.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Cached> {
        self.cached.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, key: &CredentialKey, hash: &TokenHash, now_ms: u64) -> Lookup {
        let cached = self.read();
        if let Some(entry) = cached.verified.find(slot_hash(key), |entry| entry.key == *key) {
            let trusted_from = entry.read_ms.max(self.confirmed_ms.load(Ordering::Relaxed));
            if now_ms.saturating_sub(trusted_from) >= millis(REVALIDATE_AFTER) {
                return Lookup::Miss;
            }
            if !entry.hash.matches(hash) {
                return Lookup::Found(Verdict::Refused);
            }
            if now_ms >= entry.expires_ms {
                return Lookup::Found(Verdict::Expired);
            }
            // Written only when it moved (all `used_s` is asked is "within the last minute"): a write per request
            // would dirty the entry's cache line on every heartbeat.
            let now_s = seconds(now_ms);
            if entry.used_s.load(Ordering::Relaxed) != now_s {
                entry.used_s.store(now_s, Ordering::Relaxed);
            }
            let expires_ms = entry.expires_ms;
            return Lookup::Found(Verdict::Verified(Verified { key: *key, agent: entry.agent.clone(), expires_ms }));
        }
        match cached.refused.get(key) {
            Some(at) if at.elapsed() < REFUSED_CREDENTIAL_TTL => Lookup::Found(Verdict::Refused),
            _ => Lookup::Miss,
        }
    }
}

impl Cached {
    fn insert_verified(&mut self, entry: Entry, max: usize) {
        let (key, hash) = (entry.key, slot_hash(&entry.key));
        self.refused.remove(&key);
        if let Ok(mut held) = self.verified.find_entry(hash, |held| held.key == key) {
            *held.get_mut() = entry;
            return;
        }
        if self.verified.len() >= max
            && let Some(evicted) = self.verified.iter().next().map(|held| held.key)
        {
            self.remove_verified(&evicted);
        }
        self.verified.insert_unique(hash, entry, |held| slot_hash(&held.key));
    }

    fn remove_verified(&mut self, key: &CredentialKey) {
        if let Ok(held) = self.verified.find_entry(slot_hash(key), |held| held.key == *key) {
            held.remove();
        }
    }

    fn insert_refused(&mut self, key: CredentialKey, at: Instant) {
        while self.refused_order.len() >= MAX_REFUSED_CREDENTIALS {
            self.forget_oldest_refused();
        }
        self.refused.insert(key, at);
        self.refused_order.push_back((key, at));
    }

    /// Whether the oldest refusal is `ttl` old (there is something to prune).
    fn refused_expired(&self, now: Instant, ttl: Duration) -> bool {
        self.refused_order.front().is_some_and(|(_, at)| now.saturating_duration_since(*at) >= ttl)
    }

    fn prune_refused(&mut self, now: Instant, ttl: Duration) {
        while self.refused_expired(now, ttl) {
            self.forget_oldest_refused();
        }
    }

    fn forget_oldest_refused(&mut self) {
        if let Some((id, at)) = self.refused_order.pop_front()
            && self.refused.get(&id) == Some(&at)
        {
            self.refused.remove(&id);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `expires_at` as ms since the cache's start, given that the wall clock said `wall` at `at_ms`: `u64::MAX` for a
/// credential that never expires, `at_ms` (already due) for one expired by then.
fn expiry_ms(at_ms: u64, expires_at: Option<OffsetDateTime>, wall: OffsetDateTime) -> u64 {
    let Some(expires_at) = expires_at else { return u64::MAX };
    let left = expires_at - wall;
    if left <= time::Duration::ZERO {
        return at_ms;
    }
    // Rounded up: refused at most the monotonic clock's rounding (under 1 ms) before the instant, never more.
    let left_us = u128::try_from(left.whole_microseconds()).unwrap_or(0);
    let left_ms = u64::try_from(left_us.div_ceil(1_000)).unwrap_or(u64::MAX);
    at_ms.saturating_add(left_ms).min(u64::MAX - 1)
}

/// `at` without its seconds: the precision a last use is kept to.
fn start_of_minute(at: OffsetDateTime) -> OffsetDateTime {
    let whole = at.unix_timestamp() - at.unix_timestamp().rem_euclid(60);
    OffsetDateTime::from_unix_timestamp(whole).unwrap_or(at)
}

/// Whole seconds of `ms` (136 years fit).
fn seconds(ms: u64) -> u32 {
    u32::try_from(ms / 1_000).unwrap_or(u32::MAX)
}

/// Held by an event stream opened with an agent's credential: dropping it (the stream ended) forgets the stream.
#[derive(Debug)]
pub struct StreamGuard {
    cache: CredentialCache,
    credential_id: CredentialId,
    serial: u64,
    /// The timer that stops the stream when the credential expires, if it does.
    expiry: Option<tokio::task::AbortHandle>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(timer) = &self.expiry {
            timer.abort();
        }
        let mut streams = lock(&self.cache.inner.streams);
        if let Some(open) = streams.get_mut(&self.credential_id) {
            open.retain(|(serial, _)| *serial != self.serial);
            if open.is_empty() {
                streams.remove(&self.credential_id);
            }
        }
    }
}

/// The credential id of a `credential_revoked` event.
pub(crate) fn revoked_credential(json: &str) -> Option<CredentialId> {
    let event: serde_json::Value = serde_json::from_str(json).ok()?;
    CredentialId::parse(event.get("credential_id")?.as_str()?)
}

#[cfg(test)]
mod tests {
    use gateway_core::{Event, EventPayload, InMemoryAgentCredentialStore, IssuedToken, ManualClock};
    use time::OffsetDateTime;

    use super::*;

    struct Fixture {
        store: Arc<InMemoryAgentCredentialStore>,
        /// The wall clock revocations are stamped by; tokio's paused clock drives the cache's ages.
        clock: ManualClock,
        cache: CredentialCache,
    }

    fn fixture() -> Fixture {
        fixture_holding(MAX_VERIFIED_CREDENTIALS)
    }

    fn fixture_holding(max_verified: usize) -> Fixture {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let clock = ManualClock::at_fixed_start();
        let cache = CredentialCache::with_capacity(
            store.clone(),
            Arc::new(clock.clone()),
            max_verified,
            CREDENTIAL_USE_RECORD_INTERVAL,
        );
        Fixture { store, clock, cache }
    }

    impl Fixture {
        fn issue(&self, agent: &str) -> IssuedToken {
            self.issue_expiring(agent, None)
        }

        fn issue_expiring(&self, agent: &str, expires_at: Option<OffsetDateTime>) -> IssuedToken {
            let issued = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            let record = issued.record(AgentId::new(agent).unwrap(), OffsetDateTime::now_utc());
            self.store.insert_credential(&gateway_core::CredentialRecord { expires_at, ..record }).unwrap();
            issued
        }

        async fn verdict(&self, token: &str) -> Verdict {
            self.cache.verify(PresentedToken::parse(token).unwrap()).await.unwrap()
        }

        async fn verify(&self, token: &str) -> Option<String> {
            match self.cache.verify(PresentedToken::parse(token).unwrap()).await.unwrap() {
                Verdict::Verified(verified) => Some(verified.agent_id().to_string()),
                Verdict::Refused | Verdict::Expired => None,
            }
        }

        /// The verdict on `token`, which must be verified.
        async fn verified(&self, token: &str) -> Verified {
            match self.cache.verify(PresentedToken::parse(token).unwrap()).await.unwrap() {
                Verdict::Verified(verified) => verified,
                verdict => panic!("not verified: {verdict:?}"),
            }
        }

        /// Reads of the store fail from now on: what still verifies was answered from the cache.
        fn store_down(&self) {
            self.store.failure.set_failing(true);
        }

        fn revoke(&self, issued: &IssuedToken, agent: &str) {
            self.revoke_at(issued, agent, self.clock.now());
        }

        /// Revoked by an instance whose clock said `at`.
        fn revoke_at(&self, issued: &IssuedToken, agent: &str, at: OffsetDateTime) {
            let agent = AgentId::new(agent).unwrap();
            self.store.revoke_credential(&agent, &issued.credential_id, at).unwrap();
        }

        /// Moves both clocks.
        async fn advance(&self, by: Duration) {
            self.clock.advance(time::Duration::try_from(by).unwrap());
            tokio::time::advance(by).await;
        }

        fn held(&self) -> Vec<String> {
            let mut held: Vec<String> =
                self.cache.inner.read().verified.iter().map(|entry| entry.agent.as_str().to_owned()).collect();
            held.sort();
            held
        }
    }

    fn last_used_at(fixture: &Fixture, issued: &IssuedToken) -> Option<OffsetDateTime> {
        fixture.store.credential(&issued.credential_id).unwrap().unwrap().last_used_at
    }

    /// A poll writes nothing until the record interval has passed; then every credential used since the last
    /// recording gets the minute of its last use (not of the poll), and a later use moves it forwards; one that
    /// was never verified stays unused.
    #[tokio::test(start_paused = true)]
    async fn polls_record_each_credentials_last_use_to_the_minute_once_per_interval() {
        let fixture = fixture();
        let start = fixture.clock.now();
        let (busy, quiet, never) = (fixture.issue("agent-a"), fixture.issue("agent-b"), fixture.issue("agent-c"));
        fixture.advance(Duration::from_secs(65)).await;
        fixture.cache.poll().await.unwrap();
        assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("agent-a"));
        assert_eq!(fixture.verify(quiet.expose()).await.as_deref(), Some("agent-b"));
        fixture.cache.poll().await.unwrap();
        assert_eq!(last_used_at(&fixture, &busy), None, "nothing is written before the interval");

        fixture.advance(CREDENTIAL_USE_RECORD_INTERVAL).await;
        fixture.cache.poll().await.unwrap();
        let first_minute = Some(start + time::Duration::seconds(60));
        assert_eq!(
            last_used_at(&fixture, &busy),
            first_minute,
            "the minute of the use (12:01:05), not of the poll (12:01:35)"
        );
        assert_eq!(last_used_at(&fixture, &quiet), first_minute);
        assert_eq!(last_used_at(&fixture, &never), None);

        fixture.advance(Duration::from_secs(30)).await;
        assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("agent-a"));
        fixture.cache.poll().await.unwrap();
        fixture.advance(CREDENTIAL_USE_RECORD_INTERVAL).await;
        fixture.cache.poll().await.unwrap();
        let second_minute = Some(start + time::Duration::seconds(120));
        assert_eq!(last_used_at(&fixture, &busy), second_minute, "used again at 12:02:05");
        assert_eq!(last_used_at(&fixture, &quiet), first_minute);
    }

    #[tokio::test(start_paused = true)]
    async fn a_verified_credential_is_answered_from_memory_until_it_is_due_again() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"));
        fixture.store_down();
        tokio::time::advance(REVALIDATE_AFTER - Duration::from_millis(1)).await;
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"), "a hit reads nothing");
        tokio::time::advance(Duration::from_millis(1)).await;
        let due = fixture.cache.verify(PresentedToken::parse(issued.expose()).unwrap()).await;
        assert!(matches!(due, Err(StoreError::Unavailable(_))), "due again, it is read again: {due:?}");
        assert_eq!(fixture.cache.store_reads(), 2, "the first request's read and this one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wrong_secret_is_refused_and_so_are_unknown_and_revoked_credentials() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        let token = issued.expose();
        let forged = format!("{}{}", &token[..token.len() - 1], if token.ends_with('0') { '1' } else { '0' });
        assert_eq!(fixture.verify(&forged).await, None, "on a miss");
        assert_eq!(fixture.verify(token).await.as_deref(), Some("agent-a"));
        assert_eq!(fixture.verify(&forged).await, None, "on a hit");

        let unknown = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
        assert_eq!(fixture.verify(unknown.expose()).await, None);
        let revoked = fixture.issue("agent-b");
        fixture.revoke(&revoked, "agent-b");
        assert_eq!(fixture.verify(revoked.expose()).await, None);
        // Both refusals are remembered: asking again reads nothing.
        fixture.store_down();
        assert_eq!(fixture.verify(unknown.expose()).await, None);
        assert_eq!(fixture.verify(revoked.expose()).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revocation_in_the_store_alone_ends_use_within_the_revalidation_age() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"));
        // Revoked by another instance whose event never arrives.
        fixture.revoke(&issued, "agent-a");
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"), "still trusted for now");
        tokio::time::advance(REVALIDATE_AFTER).await;
        assert_eq!(fixture.verify(issued.expose()).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn invalidating_refuses_at_once_and_closes_the_credentials_streams() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        let verified = fixture.verified(issued.expose()).await;
        let shutdown = CancellationToken::new();
        let (stop, guard) = fixture.cache.stream_stop(&verified, &shutdown);
        let (other_stop, other_guard) = fixture.cache.stream_stop(&verified, &shutdown);
        drop(other_guard);
        assert_eq!(fixture.cache.open_streams(), 1, "an ended stream is forgotten");
        fixture.cache.invalidate(&issued.credential_id);
        assert!(stop.is_cancelled() && !other_stop.is_cancelled());
        assert!(!shutdown.is_cancelled());
        assert_eq!(fixture.verify(issued.expose()).await, None, "refused before the store is even revoked");
        drop(guard);
        assert_eq!(fixture.cache.open_streams(), 0);
    }

    /// A lookup that read the row before a revocation must not put the credential back after it.
    #[tokio::test(start_paused = true)]
    async fn a_lookup_racing_a_revocation_does_not_fill_the_cache() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        let generation = fixture.cache.inner.read().generation;
        fixture.cache.invalidate(&issued.credential_id);
        assert_ne!(fixture.cache.inner.read().generation, generation);
        // Replays what `load` does after its read when the generation moved: no fill.
        let row = fixture.store.credential(&issued.credential_id).unwrap().unwrap();
        let mut cached = fixture.cache.inner.write();
        if cached.generation == generation {
            let agent = CompactAgentId::from(&row.agent_id);
            let key = row.credential_id.key();
            let entry =
                Entry { key, used_s: AtomicU32::new(0), read_ms: 0, hash: row.token_hash, agent, expires_ms: u64::MAX };
            cached.insert_verified(entry, MAX_VERIFIED_CREDENTIALS);
        }
        drop(cached);
        assert!(fixture.cache.is_empty());
    }

    /// Revoked on another instance whose event never arrives: the next poll drops the credential and closes the
    /// streams opened with it, here long before its entry would have aged out.
    #[tokio::test(start_paused = true)]
    async fn a_poll_drops_credentials_revoked_elsewhere_and_closes_their_streams() {
        let fixture = fixture();
        let (revoked, kept) = (fixture.issue("agent-a"), fixture.issue("agent-b"));
        let verified = fixture.verified(revoked.expose()).await;
        assert!(fixture.verify(kept.expose()).await.is_some());
        let shutdown = CancellationToken::new();
        let (stop, _guard) = fixture.cache.stream_stop(&verified, &shutdown);
        fixture.cache.poll().await.unwrap();
        assert_eq!(fixture.held(), ["agent-a", "agent-b"], "nothing revoked yet");

        fixture.advance(Duration::from_millis(100)).await;
        fixture.revoke(&revoked, "agent-a");
        assert_eq!(fixture.verify(revoked.expose()).await.as_deref(), Some("agent-a"), "until the next poll");
        fixture.advance(REVOCATION_POLL_INTERVAL).await;
        fixture.cache.poll().await.unwrap();
        assert!(stop.is_cancelled(), "its stream is closed");
        assert_eq!(fixture.held(), ["agent-b"]);
        assert_eq!(fixture.verify(revoked.expose()).await, None);
        assert_eq!(fixture.verify(kept.expose()).await.as_deref(), Some("agent-b"));
    }

    /// Each poll looks back [`REVOCATION_LOOKBACK`] before the previous one: a revocation stamped by a clock that
    /// is behind this one's (or committed late) within that is found; one stamped before it is not.
    #[tokio::test(start_paused = true)]
    async fn a_poll_looks_back_from_the_previous_poll() {
        let fixture = fixture();
        let (late, too_late) = (fixture.issue("late"), fixture.issue("too-late"));
        for issued in [&late, &too_late] {
            assert!(fixture.verify(issued.expose()).await.is_some());
        }
        fixture.cache.poll().await.unwrap();
        let previous = fixture.clock.now();
        fixture.advance(REVOCATION_POLL_INTERVAL).await;
        let lookback = time::Duration::try_from(REVOCATION_LOOKBACK).unwrap();
        fixture.revoke_at(&late, "late", previous - lookback);
        fixture.revoke_at(&too_late, "too-late", previous - lookback - time::Duration::milliseconds(1));
        fixture.cache.poll().await.unwrap();
        assert_eq!(fixture.held(), ["too-late"]);
    }

    /// Polls keep every entry trusted without reading it again; while the store cannot be polled, entries age out
    /// [`REVALIDATE_AFTER`] after the last poll that succeeded, and are then read again (here: a 503). Entries
    /// unused for [`CREDENTIAL_IDLE_AFTER`] are dropped.
    #[tokio::test(start_paused = true)]
    async fn polls_keep_entries_trusted_and_idle_ones_are_dropped() {
        let fixture = fixture();
        let (busy, idle) = (fixture.issue("busy"), fixture.issue("idle"));
        for issued in [&busy, &idle] {
            assert!(fixture.verify(issued.expose()).await.is_some());
        }
        for _ in 0..70 {
            fixture.advance(REVOCATION_POLL_INTERVAL).await;
            assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("busy"));
            fixture.cache.poll().await.unwrap();
        }
        assert_eq!(fixture.held(), ["busy"], "the idle one is gone after a minute unused");
        let read_ms: Vec<u64> = fixture.cache.inner.read().verified.iter().map(|entry| entry.read_ms).collect();
        assert_eq!(read_ms, [0], "never read again after the first request");

        fixture.store_down();
        assert!(fixture.cache.poll().await.is_err());
        fixture.advance(REVALIDATE_AFTER - Duration::from_millis(1)).await;
        assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("busy"), "confirmed by the last poll");
        fixture.advance(Duration::from_millis(1)).await;
        let due = fixture.cache.verify(PresentedToken::parse(busy.expose()).unwrap()).await;
        assert!(matches!(due, Err(StoreError::Unavailable(_))), "aged out, it is read again: {due:?}");
    }

    /// A credential issued with an expiry verifies until then and is `Expired` from its instant on, from the cache
    /// (no read per request); the streams opened with it are stopped at that instant, and a stream that ended before
    /// takes its timer with it.
    #[tokio::test(start_paused = true)]
    async fn an_expiring_credential_expires_at_its_instant_and_so_do_its_streams() {
        let fixture = fixture();
        let expires_at = fixture.clock.now() + time::Duration::seconds(3);
        let issued = fixture.issue_expiring("agent-a", Some(expires_at));
        let verified = fixture.verified(issued.expose()).await;
        let shutdown = CancellationToken::new();
        let (stop, _guard) = fixture.cache.stream_stop(&verified, &shutdown);
        let (ended_early, early_guard) = fixture.cache.stream_stop(&verified, &shutdown);
        drop(early_guard);
        fixture.advance(Duration::from_millis(2_999)).await;
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"));
        assert!(!stop.is_cancelled());
        fixture.advance(Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
        assert!(stop.is_cancelled(), "the stream is stopped at the expiry");
        assert!(!ended_early.is_cancelled(), "an ended stream's timer went with it");
        let reads = fixture.cache.store_reads();
        for _ in 0..3 {
            assert!(matches!(fixture.verdict(issued.expose()).await, Verdict::Expired));
        }
        assert_eq!(fixture.cache.store_reads(), reads, "answered from the cache");
        // Read again once its entry is due: still expired, told as such (not as unknown).
        fixture.advance(REVALIDATE_AFTER).await;
        assert!(matches!(fixture.verdict(issued.expose()).await, Verdict::Expired));
        assert_eq!(fixture.cache.store_reads(), reads + 1);
        let lasting = fixture.issue("agent-b");
        assert!(matches!(fixture.verdict(lasting.expose()).await, Verdict::Verified(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn both_maps_are_bounded() {
        let fixture = fixture_holding(3);
        let issued: Vec<IssuedToken> = (0..5).map(|n| fixture.issue(&format!("agent-{n}"))).collect();
        for token in &issued {
            assert!(fixture.verify(token.expose()).await.is_some());
        }
        assert_eq!(fixture.cache.len(), 3);
        for _ in 0..MAX_REFUSED_CREDENTIALS + 10 {
            let unknown = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            assert_eq!(fixture.verify(unknown.expose()).await, None);
        }
        let cached = fixture.cache.inner.read();
        assert_eq!(
            (cached.refused.len(), cached.refused_order.len()),
            (MAX_REFUSED_CREDENTIALS, MAX_REFUSED_CREDENTIALS)
        );
    }

    #[test]
    fn an_entry_is_two_cache_lines_of_its_own() {
        assert_eq!((size_of::<Entry>(), align_of::<Entry>()), (128, 128));
        // The first line holds what every hit compares before the agent id.
        assert!(std::mem::offset_of!(Entry, agent) <= 64 - 8);
    }

    #[test]
    fn a_revocation_event_names_its_credential() {
        let id = CredentialId::parse("019c85388601a1b2c3d4e5f6").unwrap();
        let at = OffsetDateTime::now_utc();
        let event = Event::new(EventPayload::CredentialRevoked { credential_id: id.to_string() }, at);
        assert_eq!(revoked_credential(&event.to_json()), Some(id));
        assert_eq!(revoked_credential(r#"{"credential_id":"nope"}"#), None);
        assert_eq!(revoked_credential("not json"), None);
    }

    /// A revocation event is not taken on its word: for a credential the store holds valid, the agent keeps its
    /// access and its streams; for one the store says is revoked, it is refused at once and its streams close.
    #[tokio::test(start_paused = true)]
    async fn a_revocation_event_re_reads_the_credential_and_refuses_only_what_the_store_revoked() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        let verified = fixture.verified(issued.expose()).await;
        let shutdown = CancellationToken::new();
        let (stream, _guard) = fixture.cache.stream_stop(&verified, &shutdown);
        fixture.cache.recheck(&issued.credential_id).await;
        assert_eq!(fixture.verify(issued.expose()).await.as_deref(), Some("agent-a"));
        assert!(!stream.is_cancelled(), "a valid credential's stream stays open");
        fixture.revoke(&issued, "agent-a");
        fixture.cache.recheck(&issued.credential_id).await;
        assert!(stream.is_cancelled(), "a revoked credential's stream is closed");
        fixture.store_down();
        assert_eq!(fixture.verify(issued.expose()).await, None, "refused without a read");
    }
}
