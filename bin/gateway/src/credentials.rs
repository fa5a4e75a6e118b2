//! The cache of verified agent credentials (docs/architecture.md, "Agent credentials"): with agent auth on, every
//! heartbeat, message and tool call presents a token, and checking one must not cost a database read.
//!
//! - A hit is a map lookup by the token's credential id and one hash comparison: the SHA-256 of the presented token
//!   against the stored one, in constant time (`TokenHash::matches`, never `==`).
//! - A miss reads the row (on the blocking pool, at most [`MAX_CONCURRENT_LOOKUPS`] at once, so a flood of made-up
//!   credential ids cannot take the pool from everything else) and caches the answer: the credential, or the fact
//!   that the id authenticates nothing (unknown or revoked), the latter in a bounded set ([`MAX_REFUSED`]).
//! - An entry is trusted for [`REVALIDATE_AFTER`] after the read that produced it *began*; after that a request
//!   reads the row again. A background pass re-reads, in batches, the entries in use before they get there, so a
//!   busy agent never waits for it.
//! - A revocation drops the entry at once on the instance that made it, and every instance drops it when the
//!   `credential_revoked` event on `internal:credential-revocations` reaches it (the event bridge, with Redis);
//!   event streams opened with the credential are closed. Should the event be lost (Redis pub/sub keeps nothing),
//!   the entry's age still ends its use: a revoked credential authenticates nothing anywhere later than
//!   [`REVALIDATE_AFTER`] after its revocation committed.
//! - Every invalidation bumps a generation under the write lock; a read that began before it does not fill the
//!   cache, so a lookup racing a revocation cannot put the revoked credential back.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use gateway_core::sync::lock;
use gateway_core::{
    AgentCredentialStore, AgentId, BackgroundLoop, CredentialId, CredentialKey, CredentialRecord, PresentedToken,
    StoreError, TokenHash, run_blocking,
};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a verified credential is trusted without reading its row again: the longest a revoked credential can
/// still authenticate somewhere when the revocation event does not arrive.
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(5);
/// How often the background pass runs.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Entries in use are re-read in the background once this old, ahead of [`REVALIDATE_AFTER`].
pub const REFRESH_AGE: Duration = Duration::from_secs(3);
/// An entry unused this long is dropped rather than re-read.
pub const IDLE_AFTER: Duration = Duration::from_secs(60);
/// Verified credentials held at most (an arbitrary one makes room for a new one).
pub const MAX_VERIFIED: usize = 100_000;
/// Credential ids known to authenticate nothing, held at most (oldest forgotten first), and for how long.
pub const MAX_REFUSED: usize = 10_000;
pub const REFUSED_TTL: Duration = Duration::from_secs(60);
/// How finely an entry's last use is kept, in ms.
const USE_GRANULARITY_MS: u64 = 1_000;
/// Rows read at once on behalf of requests that missed the cache.
pub const MAX_CONCURRENT_LOOKUPS: usize = 16;

/// A verified credential, as requests see it.
#[derive(Debug)]
pub struct Verified {
    pub credential_id: CredentialId,
    pub agent_id: AgentId,
    /// The stored token hash.
    hash: TokenHash,
    /// When the read that produced or last confirmed this entry began, in ms since the cache's start.
    checked_ms: AtomicU64,
    /// When a request last used it, in ms since the cache's start.
    used_ms: AtomicU64,
}

/// What [`CredentialCache::verify`] found.
#[derive(Debug, Clone)]
pub enum Verdict {
    Verified(Arc<Verified>),
    /// Unknown credential id, revoked credential, or a wrong secret.
    Refused,
}

/// Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct CredentialCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn AgentCredentialStore>,
    /// What `checked_ms` and `used_ms` count from.
    started: Instant,
    cached: RwLock<Cached>,
    lookups: Semaphore,
    /// Event streams opened with each credential, closed when it is revoked.
    streams: Mutex<HashMap<CredentialId, Vec<(u64, CancellationToken)>>>,
    next_stream: AtomicU64,
    max_verified: usize,
}

/// Keyed by the credential id's bytes: found without following a pointer to the id's text.
#[derive(Debug, Default)]
struct Cached {
    verified: HashMap<CredentialKey, Arc<Verified>>,
    refused: HashMap<CredentialKey, Instant>,
    /// `refused` in the order it was filled, to forget the oldest first.
    refused_order: VecDeque<(CredentialKey, Instant)>,
    generation: u64,
}

enum Lookup {
    Found(Verdict),
    Miss,
}

impl CredentialCache {
    pub fn new(store: Arc<dyn AgentCredentialStore>) -> Self {
        Self::with_capacity(store, MAX_VERIFIED)
    }

    fn with_capacity(store: Arc<dyn AgentCredentialStore>, max_verified: usize) -> Self {
        let inner = Inner {
            store,
            started: Instant::now(),
            cached: RwLock::new(Cached::default()),
            lookups: Semaphore::new(MAX_CONCURRENT_LOOKUPS),
            streams: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(0),
            max_verified,
        };
        Self { inner: Arc::new(inner) }
    }

    /// Who `token` authenticates. A store error (the row could not be read) is no verdict: the caller answers 503,
    /// never a guess.
    pub async fn verify(&self, token: PresentedToken<'_>) -> Result<Verdict, StoreError> {
        let hash = token.hash();
        let now = self.inner.millis(Instant::now());
        let key = token.credential_key();
        if let Lookup::Found(verdict) = self.inner.lookup(&key, &hash, now) {
            return Ok(verdict);
        }
        // Boxed: the hit above is every request's path, and its future need not be as large as this one.
        Box::pin(self.load(token.credential_id(), key, hash)).await
    }

    async fn load(&self, credential_id: &str, key: CredentialKey, hash: TokenHash) -> Result<Verdict, StoreError> {
        let inner = &self.inner;
        let Some(id) = CredentialId::parse(credential_id) else { return Ok(Verdict::Refused) };
        let _permit = inner.lookups.acquire().await.map_err(|_| StoreError::Unavailable("shutting down".into()))?;
        let began = Instant::now();
        // Another request may have filled the entry while this one waited for a permit.
        if let Lookup::Found(verdict) = inner.lookup(&key, &hash, inner.millis(began)) {
            return Ok(verdict);
        }
        let generation = inner.read().generation;
        let store = Arc::clone(&inner.store);
        let read_id = id.clone();
        let row = run_blocking(move || store.credential(&read_id)).await??;
        let mut cached = inner.write();
        let fill = cached.generation == generation;
        match row.filter(|row| !row.is_revoked()) {
            Some(row) => {
                let verified = Arc::new(inner.entry(row, inner.millis(began)));
                let accepted = inner.matches(&verified, &hash);
                if fill {
                    cached.insert_verified(Arc::clone(&verified), inner.max_verified);
                }
                Ok(if accepted { Verdict::Verified(verified) } else { Verdict::Refused })
            }
            None => {
                cached.verified.remove(&key);
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
            cached.verified.remove(&key);
            cached.insert_refused(key, Instant::now());
        }
        if let Some(streams) = lock(&self.inner.streams).remove(credential_id) {
            for (_, stream) in streams {
                stream.cancel();
            }
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
        let id = verified.credential_id.clone();
        lock(&self.inner.streams).entry(id.clone()).or_default().push((serial, stop.clone()));
        (stop, StreamGuard { cache: self.clone(), credential_id: id, serial })
    }

    /// Re-reads the entries in use that are [`REFRESH_AGE`] old, in batches, and drops those that have been idle
    /// for [`IDLE_AFTER`] or are gone or revoked in the store.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let began = Instant::now();
        let now = inner.millis(began);
        let (idle_after, refresh_age, fresh_use) = (millis(IDLE_AFTER), millis(REFRESH_AGE), millis(REVALIDATE_AFTER));
        // Looked through under the read lock: requests go on meanwhile. Only dropping entries needs the write lock.
        let (due, idle, generation) = {
            let cached = inner.read();
            let mut due: Vec<CredentialId> = Vec::new();
            let mut idle = false;
            for entry in cached.verified.values() {
                let unused = now.saturating_sub(entry.used_ms.load(Ordering::Relaxed));
                if unused >= idle_after {
                    idle = true;
                } else if unused < fresh_use
                    && now.saturating_sub(entry.checked_ms.load(Ordering::Relaxed)) >= refresh_age
                {
                    due.push(entry.credential_id.clone());
                }
            }
            (due, idle || cached.refused_expired(began, REFUSED_TTL), cached.generation)
        };
        if idle {
            let mut cached = inner.write();
            cached.verified.retain(|_, entry| now.saturating_sub(entry.used_ms.load(Ordering::Relaxed)) < idle_after);
            cached.prune_refused(began, REFUSED_TTL);
        }
        if due.is_empty() {
            return Ok(());
        }
        let store = Arc::clone(&inner.store);
        let read = due.clone();
        let unrevoked = run_blocking(move || store.unrevoked_credentials(&read)).await??;
        let unrevoked: HashSet<&CredentialId> = unrevoked.iter().collect();
        let mut gone = Vec::new();
        {
            // The read lock is enough to move `checked_ms` (an atomic), and it keeps revocations out while the
            // generation it checks holds.
            let cached = inner.read();
            if cached.generation != generation {
                // A revocation came in meanwhile, and these rows may predate it: the next pass reads them again.
                return Ok(());
            }
            for id in &due {
                let key = id.key();
                let Some(entry) = cached.verified.get(&key) else { continue };
                // A stored credential changes only by being revoked: unrevoked, the entry's hash is still the row's.
                if unrevoked.contains(id) {
                    entry.checked_ms.store(now, Ordering::Relaxed);
                } else {
                    gone.push(key);
                }
            }
        }
        if !gone.is_empty() {
            let mut cached = inner.write();
            cached.generation += 1;
            for key in &gone {
                cached.verified.remove(key);
            }
        }
        Ok(())
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
        if let Some(entry) = cached.verified.get(key) {
            if now_ms.saturating_sub(entry.checked_ms.load(Ordering::Relaxed)) >= millis(REVALIDATE_AFTER) {
                return Lookup::Miss;
            }
            if !self.matches(entry, hash) {
                return Lookup::Found(Verdict::Refused);
            }
            // Written only when it moved by a second (all `used_ms` is asked is "within the last seconds"): a write
            // per request would dirty the entry's cache line on every heartbeat.
            if now_ms.saturating_sub(entry.used_ms.load(Ordering::Relaxed)) >= USE_GRANULARITY_MS {
                entry.used_ms.store(now_ms, Ordering::Relaxed);
            }
            return Lookup::Found(Verdict::Verified(Arc::clone(entry)));
        }
        match cached.refused.get(key) {
            Some(at) if at.elapsed() < REFUSED_TTL => Lookup::Found(Verdict::Refused),
            _ => Lookup::Miss,
        }
    }

    fn entry(&self, row: CredentialRecord, checked_ms: u64) -> Verified {
        Verified {
            hash: row.token_hash,
            credential_id: row.credential_id,
            agent_id: row.agent_id,
            checked_ms: AtomicU64::new(checked_ms),
            used_ms: AtomicU64::new(checked_ms),
        }
    }

    /// Whether `hash` is the entry's stored hash, in constant time.
    fn matches(&self, entry: &Verified, hash: &TokenHash) -> bool {
        entry.hash.matches(hash)
    }
}

impl Cached {
    fn insert_verified(&mut self, entry: Arc<Verified>, max: usize) {
        let key = entry.credential_id.key();
        if self.verified.len() >= max
            && !self.verified.contains_key(&key)
            && let Some(evicted) = self.verified.keys().next().copied()
        {
            self.verified.remove(&evicted);
        }
        self.refused.remove(&key);
        self.verified.insert(key, entry);
    }

    fn insert_refused(&mut self, key: CredentialKey, at: Instant) {
        while self.refused_order.len() >= MAX_REFUSED {
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

/// Held by an event stream opened with an agent's credential: dropping it (the stream ended) forgets the stream.
#[derive(Debug)]
pub struct StreamGuard {
    cache: CredentialCache,
    credential_id: CredentialId,
    serial: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut streams = lock(&self.cache.inner.streams);
        if let Some(open) = streams.get_mut(&self.credential_id) {
            open.retain(|(serial, _)| *serial != self.serial);
            if open.is_empty() {
                streams.remove(&self.credential_id);
            }
        }
    }
}

/// The cache's background work, a supervised loop of every instance: the refresh pass every
/// [`REFRESH_INTERVAL`], and the revocation events of every instance (this one's included). With the event bridge,
/// a reconnect after a gap, or a subscriber that fell behind, forgets every verified credential: revocations may
/// have been missed.
#[derive(Debug, Clone)]
pub struct CredentialUpkeep {
    pub cache: CredentialCache,
    pub bus: gateway_pubsub::Bus,
    /// The bridge's subscription state, with Redis.
    pub bridge: Option<watch::Receiver<gateway_pubsub::bridge::BridgeStatus>>,
}

impl BackgroundLoop for CredentialUpkeep {
    fn name(&self) -> &'static str {
        "credential_upkeep"
    }

    async fn run(&self, shutdown: CancellationToken) {
        use gateway_pubsub::Received;
        let mut revocations = self.bus.subscribe(&gateway_core::Topic::CredentialRevocations);
        let mut bridge = self.bridge.clone();
        let mut reconnects = bridge.as_mut().map_or(0, |status| status.borrow_and_update().reconnects);
        let mut refresh = tokio::time::interval(REFRESH_INTERVAL);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                received = revocations.recv() => match received {
                    Received::Event(event) => match revoked_credential(event.json()) {
                        Some(id) => self.cache.invalidate(&id),
                        None => tracing::debug!(event_id = %event.id(), "unreadable credential revocation skipped"),
                    },
                    Received::Lagged(missed) => {
                        tracing::warn!(missed, "credential revocations missed; every cached credential is read again");
                        self.cache.invalidate_all();
                    }
                    Received::Closed => return,
                },
                changed = changed(&mut bridge) => {
                    if !changed {
                        bridge = None;
                        continue;
                    }
                    let now = bridge.as_mut().map_or(reconnects, |status| status.borrow_and_update().reconnects);
                    if now != reconnects {
                        reconnects = now;
                        self.cache.invalidate_all();
                    }
                }
                _ = refresh.tick() => match self.cache.refresh().await {
                    Ok(()) => failing = false,
                    Err(error) => {
                        // Entries then age out and requests read their rows themselves: fail closed, not open.
                        if !failing {
                            tracing::warn!(%error, "cannot re-read cached agent credentials");
                        }
                        failing = true;
                    }
                },
            }
        }
    }
}

/// Waits for the bridge's status to change; `false` when it never will (no bridge, or the bridge is gone).
async fn changed(bridge: &mut Option<watch::Receiver<gateway_pubsub::bridge::BridgeStatus>>) -> bool {
    match bridge {
        Some(status) => status.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The credential id of a `credential_revoked` event.
fn revoked_credential(json: &str) -> Option<CredentialId> {
    let event: serde_json::Value = serde_json::from_str(json).ok()?;
    CredentialId::parse(event.get("credential_id")?.as_str()?)
}

#[cfg(test)]
mod tests {
    use gateway_core::{Event, EventPayload, InMemoryAgentCredentialStore, IssuedToken};
    use time::OffsetDateTime;

    use super::*;

    struct Fixture {
        store: Arc<InMemoryAgentCredentialStore>,
        cache: CredentialCache,
    }

    fn fixture() -> Fixture {
        fixture_holding(MAX_VERIFIED)
    }

    fn fixture_holding(max_verified: usize) -> Fixture {
        let store = Arc::new(InMemoryAgentCredentialStore::default());
        let cache = CredentialCache::with_capacity(store.clone(), max_verified);
        Fixture { store, cache }
    }

    impl Fixture {
        fn issue(&self, agent: &str) -> IssuedToken {
            let issued = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            self.store
                .insert_credential(&issued.record(AgentId::new(agent).unwrap(), OffsetDateTime::now_utc()))
                .unwrap();
            issued
        }

        async fn verify(&self, token: &str) -> Option<String> {
            match self.cache.verify(PresentedToken::parse(token).unwrap()).await.unwrap() {
                Verdict::Verified(verified) => Some(verified.agent_id.to_string()),
                Verdict::Refused => None,
            }
        }

        /// Reads of the store fail from now on: what still verifies was answered from the cache.
        fn store_down(&self) {
            self.store.failure.set_failing(true);
        }

        fn revoke(&self, issued: &IssuedToken, agent: &str) {
            let agent = AgentId::new(agent).unwrap();
            self.store.revoke_credential(&agent, &issued.credential_id, OffsetDateTime::now_utc()).unwrap();
        }
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
        let Verdict::Verified(verified) =
            fixture.cache.verify(PresentedToken::parse(issued.expose()).unwrap()).await.unwrap()
        else {
            panic!("verified")
        };
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
            let entry = Arc::new(fixture.cache.inner.entry(row, 0));
            cached.insert_verified(entry, MAX_VERIFIED);
        }
        drop(cached);
        assert!(fixture.cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_refresh_keeps_busy_entries_fresh_drops_revoked_and_idle_ones() {
        let fixture = fixture();
        let busy = fixture.issue("busy");
        let revoked = fixture.issue("revoked");
        let idle = fixture.issue("idle");
        for issued in [&busy, &revoked, &idle] {
            assert!(fixture.verify(issued.expose()).await.is_some());
        }
        fixture.revoke(&revoked, "revoked");
        for _ in 0..70 {
            tokio::time::advance(REFRESH_INTERVAL).await;
            assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("busy"));
            fixture.cache.refresh().await.unwrap();
        }
        // The busy one was re-read in the background all along: it still verifies with the store down.
        fixture.store_down();
        assert_eq!(fixture.verify(busy.expose()).await.as_deref(), Some("busy"));
        let held: Vec<String> = fixture.cache.inner.read().verified.values().map(|e| e.agent_id.to_string()).collect();
        assert_eq!(held, ["busy"], "the revoked one is gone, and the idle one after a minute unused");
    }

    #[tokio::test(start_paused = true)]
    async fn both_maps_are_bounded() {
        let fixture = fixture_holding(3);
        let issued: Vec<IssuedToken> = (0..5).map(|n| fixture.issue(&format!("agent-{n}"))).collect();
        for token in &issued {
            assert!(fixture.verify(token.expose()).await.is_some());
        }
        assert_eq!(fixture.cache.len(), 3);
        for _ in 0..MAX_REFUSED + 10 {
            let unknown = IssuedToken::issue(OffsetDateTime::now_utc()).unwrap();
            assert_eq!(fixture.verify(unknown.expose()).await, None);
        }
        let cached = fixture.cache.inner.read();
        assert_eq!((cached.refused.len(), cached.refused_order.len()), (MAX_REFUSED, MAX_REFUSED));
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

    #[tokio::test(start_paused = true)]
    async fn the_upkeep_loop_applies_revocation_events() {
        let fixture = fixture();
        let issued = fixture.issue("agent-a");
        assert!(fixture.verify(issued.expose()).await.is_some());
        let bus = gateway_pubsub::Bus::default();
        let upkeep = CredentialUpkeep { cache: fixture.cache.clone(), bus: bus.clone(), bridge: None };
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { upkeep.run(shutdown).await }
        });
        while !bus.has_subscribers(&gateway_core::Topic::CredentialRevocations) {
            tokio::task::yield_now().await;
        }
        let event = Event::new(
            EventPayload::CredentialRevoked { credential_id: issued.credential_id.to_string() },
            OffsetDateTime::now_utc(),
        );
        gateway_core::EventPublisher::publish(&bus, &gateway_core::Topic::CredentialRevocations, &event).unwrap();
        while !fixture.cache.is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(fixture.verify(issued.expose()).await, None);
        shutdown.cancel();
        running.await.unwrap();
    }
}
