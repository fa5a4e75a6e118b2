//! The lease state machine on tokio's paused time, against an in-memory lease that keeps its TTL on the same
//! (paused) clock: the 10 s / 20 s / 30 s behaviours exactly and instantly. The same machine against a real Redis
//! is tested in tests/it/leadership.rs.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};

use gateway_core::EpochGate;

use super::lease::{LeaseBackend, Opened, Take};
use super::*;

/// How the fake lease answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    /// Connection refused: fails at once.
    Down,
    /// Never answers: fails at the caller's limit.
    Hanging,
}

#[derive(Debug)]
struct FakeRedis {
    state: Mutex<FakeState>,
}

#[derive(Debug)]
struct FakeState {
    mode: Mode,
    holder: Option<(String, Instant)>,
    /// The epoch counter as Redis holds it: text.
    epoch: Option<String>,
    term: Option<(String, u64)>,
    calls: Vec<(&'static str, Instant)>,
}

impl FakeRedis {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(FakeState { mode: Mode::Up, holder: None, epoch: None, term: None, calls: Vec::new() }),
        })
    }

    fn set_mode(&self, mode: Mode) {
        lock(&self.state).mode = mode;
    }

    fn holder(&self) -> Option<String> {
        let state = lock(&self.state);
        state.holder.as_ref().filter(|(_, expires)| Instant::now() < *expires).map(|(holder, _)| holder.clone())
    }

    fn set_holder(&self, holder: &str, ttl: Duration) {
        lock(&self.state).holder = Some((holder.to_owned(), Instant::now() + ttl));
    }

    /// Forgets everything, as a Redis restarted without persistence.
    fn flush(&self) {
        let mut state = lock(&self.state);
        state.holder = None;
        state.epoch = None;
        state.term = None;
    }

    /// Writes the epoch counter, as `SET gateway:leader:epoch …` would (or `DEL`, with `None`).
    fn set_epoch(&self, epoch: Option<&str>) {
        lock(&self.state).epoch = epoch.map(str::to_owned);
    }

    fn calls(&self, name: &str) -> Vec<Instant> {
        lock(&self.state).calls.iter().filter(|(call, _)| *call == name).map(|(_, at)| *at).collect()
    }

    /// Records the call, and fails it as the mode says.
    async fn answer(&self, call: &'static str, limit: Duration) -> Result<(), Error> {
        let mode = {
            let mut state = lock(&self.state);
            state.calls.push((call, Instant::now()));
            state.mode
        };
        match mode {
            Mode::Up => Ok(()),
            Mode::Down => {
                Err(Error::Redis(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))))
            }
            Mode::Hanging => {
                tokio::time::sleep(limit).await;
                Err(Error::Timeout(limit))
            }
        }
    }

    fn live_holder(state: &mut FakeState) -> Option<&str> {
        if state.holder.as_ref().is_some_and(|(_, expires)| Instant::now() >= *expires) {
            state.holder = None;
        }
        state.holder.as_ref().map(|(holder, _)| holder.as_str())
    }
}

impl LeaseBackend for Arc<FakeRedis> {
    async fn take(&self, instance: &str, ttl: Duration, limit: Duration) -> Result<Take, Error> {
        self.answer("take", limit).await?;
        let mut state = lock(&self.state);
        let taken = FakeRedis::live_holder(&mut state).is_none();
        if taken {
            state.holder = Some((instance.to_owned(), Instant::now() + ttl));
        }
        Ok(Take { taken, holder: FakeRedis::live_holder(&mut state).map(str::to_owned) })
    }

    async fn renew(&self, instance: &str, ttl: Duration, limit: Duration) -> Result<bool, Error> {
        self.answer("renew", limit).await?;
        let mut state = lock(&self.state);
        if FakeRedis::live_holder(&mut state) != Some(instance) {
            return Ok(false);
        }
        state.holder = Some((instance.to_owned(), Instant::now() + ttl));
        Ok(true)
    }

    async fn release(&self, instance: &str, limit: Duration) -> Result<bool, Error> {
        self.answer("release", limit).await?;
        let mut state = lock(&self.state);
        if FakeRedis::live_holder(&mut state) != Some(instance) {
            return Ok(false);
        }
        state.holder = None;
        Ok(true)
    }

    async fn read_epoch(&self, instance: &str, limit: Duration) -> Result<Option<Option<String>>, Error> {
        self.answer("read_epoch", limit).await?;
        let mut state = lock(&self.state);
        if FakeRedis::live_holder(&mut state) != Some(instance) {
            return Ok(None);
        }
        Ok(Some(state.epoch.clone()))
    }

    async fn open_term(
        &self,
        instance: &str,
        expected: Option<&str>,
        token: FencingToken,
        limit: Duration,
    ) -> Result<Opened, Error> {
        self.answer("open_term", limit).await?;
        let mut state = lock(&self.state);
        if FakeRedis::live_holder(&mut state) != Some(instance) {
            return Ok(Opened::NotHolder);
        }
        if state.epoch.as_deref() != expected {
            return Ok(Opened::CounterMoved);
        }
        state.epoch = Some(token.0.to_string());
        state.term = Some((instance.to_owned(), token.0));
        Ok(Opened::Term(Term { token, since: OffsetDateTime::UNIX_EPOCH }))
    }

    async fn leader(&self, limit: Duration) -> Result<Option<LeaderStatus>, Error> {
        self.answer("leader", limit).await?;
        let mut state = lock(&self.state);
        let Some(holder) = FakeRedis::live_holder(&mut state).map(str::to_owned) else { return Ok(None) };
        let epoch =
            state.term.as_ref().filter(|(instance, _)| *instance == holder).map(|(_, epoch)| FencingToken(*epoch));
        Ok(Some(LeaderStatus { instance_id: holder, epoch, since: None }))
    }
}

/// A store whose fencing epoch can be made unreadable.
#[derive(Debug, Default)]
struct Store {
    gate: EpochGate,
    failing: AtomicBool,
}

impl FencingEpoch for Store {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("database down".into()));
        }
        self.gate.newest_token()
    }
}

fn s(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

struct Instance {
    core: Arc<Core<Arc<FakeRedis>>>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Instance {
    fn start(name: &str, redis: &Arc<FakeRedis>, store: &Arc<Store>) -> Self {
        let config = LeadershipConfig { instance_id: name.into(), timings: LeaseTimings::default() };
        let epoch: Arc<dyn FencingEpoch> = store.clone();
        let core = Arc::new(Core::new(Arc::clone(redis), epoch, config).unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let (core, shutdown) = (Arc::clone(&core), shutdown.clone());
            async move { core.run(shutdown).await }
        });
        Self { core, shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

/// Lets the loops do what is due now. Paused time moves on only when every task waits for a timer, and not while
/// a blocking task (the store's epoch read) runs, so this 1 ms covers a whole acquisition.
async fn settle() {
    tokio::time::sleep(ms(1)).await;
}

/// Lets `by` pass, every timer due on the way firing at its instant.
async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
}

#[tokio::test(start_paused = true)]
async fn takes_a_free_lease_at_once_and_renews_it_every_ten_seconds() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let started = Instant::now();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), Some(FencingToken(1)));
    assert_eq!(redis.holder().as_deref(), Some("a"));
    advance(s(35)).await;
    let renewals: Vec<_> = redis.calls("renew").iter().map(|at| *at - started).collect();
    assert_eq!(renewals, [s(10), s(20), s(30)]);
    assert_eq!(a.core.current(), Some(FencingToken(1)), "the same term all along");
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_three_leads_and_a_crashed_leader_is_replaced_after_its_ttl() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let instances: Vec<_> = ["a", "b", "c"].iter().map(|name| Instance::start(name, &redis, &store)).collect();
    settle().await;
    advance(s(5)).await;
    let leaders: Vec<_> = instances.iter().filter(|i| i.core.current().is_some()).collect();
    assert_eq!(leaders.len(), 1);
    let leader_name = leaders[0].core.instance_id.clone();
    // The leader's process dies: no renewal, no release.
    let mut instances = instances;
    let position = instances.iter().position(|i| i.core.instance_id == leader_name).unwrap();
    let crashed = instances.remove(position);
    crashed.task.abort();
    let crashed_at = Instant::now();
    let last_renewal = redis.calls("renew").last().copied().unwrap_or(crashed_at - s(5));
    let mut took_over = None;
    while took_over.is_none() {
        advance(ms(100)).await;
        took_over = instances.iter().find(|i| i.core.current().is_some()).map(|_| Instant::now());
        assert!(Instant::now() - crashed_at < s(40), "nobody took over");
    }
    let gap = took_over.unwrap() - last_renewal;
    // Only after the TTL, and at most one acquire interval later.
    assert!(gap >= LEASE_TTL && gap <= LEASE_TTL + ACQUIRE_INTERVAL + ms(100), "{gap:?}");
    assert_eq!(instances.iter().filter(|i| i.core.current().is_some()).count(), 1);
    let new_token = instances.iter().find_map(|i| i.core.current()).unwrap();
    assert_eq!(new_token, FencingToken(2));
    for instance in instances {
        instance.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_steps_down_after_three_failures_at_10_12_and_14_seconds() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let started = Instant::now();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert!(a.core.current().is_some());
    redis.set_mode(Mode::Down);
    advance(s(13)).await;
    assert!(a.core.current().is_some(), "two failures are not yet three");
    advance(s(1) + ms(100)).await;
    assert_eq!(a.core.current(), None);
    let renewals: Vec<_> = redis.calls("renew").iter().map(|at| *at - started).collect();
    assert_eq!(renewals, [s(10), s(12), s(14)]);
    // Stepped down 16 s before the lease could have expired in Redis.
    assert_eq!(redis.holder().as_deref(), Some("a"));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_hanging_redis_ends_leadership_20_seconds_after_the_last_renewal_less_the_margin() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let started = Instant::now();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    advance(s(10) + ms(50)).await;
    // Renewed at 10 s; from now on every command hangs until its time limit.
    redis.set_mode(Mode::Hanging);
    let last_renewal = started + s(10);
    let mut ended = None;
    while ended.is_none() {
        advance(ms(100)).await;
        if a.core.current().is_none() {
            ended = Some(Instant::now());
        }
    }
    let held = ended.unwrap() - last_renewal;
    let expected = STEP_DOWN_AFTER - CLOCK_DRIFT_MARGIN;
    assert!(held >= expected && held <= expected + ms(100), "{held:?}");
    assert!(held < LEASE_TTL);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn current_answers_none_once_the_local_lease_ends_even_if_the_loop_is_stuck() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let started = Instant::now();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert!(a.core.current().is_some());
    // The loop is gone (a stuck runtime would look the same): only the local deadline is left.
    a.task.abort();
    let valid_until = started + STEP_DOWN_AFTER - CLOCK_DRIFT_MARGIN;
    tokio::time::sleep_until(valid_until - ms(1)).await;
    assert!(a.core.current().is_some());
    tokio::time::sleep_until(valid_until).await;
    assert_eq!(a.core.current(), None);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_steps_down_at_the_next_renewal_without_deleting_the_new_holders_key() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert!(a.core.current().is_some());
    // Someone else holds the key now (an operator's DEL and another instance's SET, say).
    redis.set_holder("b", s(30));
    advance(s(10) + ms(100)).await;
    assert_eq!(a.core.current(), None);
    assert_eq!(redis.holder().as_deref(), Some("b"));
    assert!(redis.calls("release").is_empty(), "not ours: nothing to release");
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn fenced_stops_answering_the_token_at_once_and_releases_the_lease() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    let token = a.core.current().unwrap();
    // A report about an older term changes nothing.
    a.core.fenced(FencingToken(token.0 - 1));
    assert_eq!(a.core.current(), Some(token));
    a.core.fenced(token);
    assert_eq!(a.core.current(), None, "at once, before the loop even runs");
    settle().await;
    assert_eq!(redis.calls("release").len(), 1);
    // The loop takes the lease again at once, under a new, higher token.
    let again = a.core.current().unwrap();
    assert!(again > token);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_redis_that_lost_its_counter_still_hands_out_a_token_above_the_stores_newest() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    store.gate.admit(FencingToken(41)).unwrap();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), Some(FencingToken(42)));
    store.gate.admit(FencingToken(42)).unwrap();
    a.stop().await;
    // Redis restarts empty: its counter would start at 1 again.
    redis.flush();
    let b = Instance::start("b", &redis, &store);
    settle().await;
    assert_eq!(b.core.current(), Some(FencingToken(43)));
    b.stop().await;
}

/// A leader's token never goes down, even when neither Redis nor the store remembers its last term: Redis lost its
/// data before any write of that term reached the store (the counter was ahead of the store's newest token, after a
/// term that never wrote). The next term is above the last one all the same.
#[tokio::test(start_paused = true)]
async fn a_new_term_is_above_the_last_one_even_when_redis_and_the_store_have_forgotten_it() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    store.gate.admit(FencingToken(3)).unwrap();
    // A term under 4 that never wrote (another instance's, deposed), so the counter is ahead of the store.
    redis.set_epoch(Some("4"));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), Some(FencingToken(5)));
    // Redis restarts empty before any write under 5 reached the store: the next renewal finds the lease gone, and
    // the instance takes it again at once.
    redis.flush();
    advance(s(10) + ms(100)).await;
    assert_eq!(a.core.current(), Some(FencingToken(6)), "above the last term, not the store's newest + 1");
    assert_eq!(redis.calls("take").len(), 2);
    a.stop().await;
}

#[test]
fn the_next_token_is_one_above_the_counter_or_the_stores_newest_and_absurd_counters_are_refused() {
    let newest = FencingToken(41);
    assert_eq!(next_token(None, newest), Ok(FencingToken(42)), "no counter: raised past the store's");
    assert_eq!(next_token(Some("7"), newest), Ok(FencingToken(42)), "a counter below the store's is raised past it");
    assert_eq!(next_token(Some("50"), newest), Ok(FencingToken(51)));
    let furthest = (41 + MAX_EPOCH_JUMP).to_string();
    assert_eq!(next_token(Some(&furthest), newest), Ok(FencingToken(42 + MAX_EPOCH_JUMP)));
    let beyond = (42 + MAX_EPOCH_JUMP).to_string();
    assert_eq!(
        next_token(Some(&beyond), newest),
        Err(EpochRefusal::TooFarAhead { counter: 42 + MAX_EPOCH_JUMP, newest: 41 })
    );
    assert!(matches!(next_token(Some("9223372036854775806"), newest), Err(EpochRefusal::TooFarAhead { .. })));
    assert!(matches!(next_token(Some("99999999999999999999999"), newest), Err(EpochRefusal::TooFarAhead { .. })));
    for garbage in ["", "-5", "1e9", " 7", "seven", "7.0"] {
        assert_eq!(next_token(Some(garbage), newest), Err(EpochRefusal::NotANumber), "{garbage:?}");
    }
    let max = u64::try_from(i64::MAX).unwrap();
    assert_eq!(next_token(None, FencingToken(max)), Err(EpochRefusal::Overflow { from: max }));
    assert_eq!(next_token(Some(&max.to_string()), FencingToken(max - 1)), Err(EpochRefusal::Overflow { from: max }));
    assert_eq!(next_token(None, FencingToken(max - 1)), Ok(FencingToken(max)));
}

/// `SET gateway:leader:epoch 9223372036854775806` in Redis: no instance leads with it (each gives the lease back and
/// says why, once), the store's epoch is untouched; after the documented fix (`DEL gateway:leader:epoch`) the next
/// term is one above the store's newest.
#[tokio::test(start_paused = true)]
async fn an_epoch_far_above_the_stores_is_refused_until_the_operator_deletes_it() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    store.gate.admit(FencingToken(5)).unwrap();
    redis.set_epoch(Some("9223372036854775806"));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), None);
    assert_eq!(redis.holder(), None, "the lease taken is given back");
    advance(ACQUIRE_INTERVAL * 3).await;
    assert_eq!(a.core.current(), None);
    assert_eq!(lock(&a.core.state).epoch_refusals, 4, "every attempt refused");
    assert_eq!(redis.calls("open_term").len(), 0, "nothing written under it");
    assert_eq!(store.newest_token().unwrap(), FencingToken(5));
    redis.set_epoch(None);
    advance(ACQUIRE_INTERVAL).await;
    assert_eq!(a.core.current(), Some(FencingToken(6)));
    a.stop().await;
}

/// A store driven to `i64::MAX` (by the bug this refusal closes): no token can be above it, so no term opens; the
/// instance keeps trying without a panic or a write.
#[tokio::test(start_paused = true)]
async fn a_store_epoch_at_the_top_of_the_range_opens_no_term() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    store.gate.admit(FencingToken(u64::try_from(i64::MAX).unwrap())).unwrap();
    let a = Instance::start("a", &redis, &store);
    settle().await;
    advance(ACQUIRE_INTERVAL).await;
    assert_eq!(a.core.current(), None);
    assert_eq!(lock(&a.core.state).epoch_refusals, 2);
    assert_eq!(redis.calls("open_term").len(), 0);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn no_leadership_while_the_store_cannot_tell_its_epoch() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    store.failing.store(true, Ordering::SeqCst);
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), None);
    assert_eq!(redis.holder(), None, "the lease taken is given back");
    assert_eq!(redis.calls("release").len(), 1);
    store.failing.store(false, Ordering::SeqCst);
    advance(ACQUIRE_INTERVAL).await;
    assert_eq!(a.core.current(), Some(FencingToken(1)));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_of_its_own_it_did_not_count_on_is_released_and_taken_afresh() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    // A SET NX whose reply was lost before a restart: the key names "a", which holds no term.
    redis.set_holder("a", s(30));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    assert_eq!(a.core.current(), Some(FencingToken(1)));
    assert_eq!(redis.calls("take").len(), 2);
    assert_eq!(redis.calls("release").len(), 1);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_the_lease_back_so_a_follower_takes_over_within_an_acquire_interval() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    let b = Instance::start("b", &redis, &store);
    settle().await;
    assert!(a.core.current().is_some() && b.core.current().is_none());
    let stopped = Instant::now();
    a.stop().await;
    assert_eq!(redis.holder(), None);
    while b.core.current().is_none() {
        advance(ms(100)).await;
    }
    assert!(Instant::now() - stopped <= ACQUIRE_INTERVAL + ms(100));
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_keeps_trying_every_acquire_interval_and_leads_once_redis_answers() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    redis.set_mode(Mode::Down);
    let started = Instant::now();
    let a = Instance::start("a", &redis, &store);
    advance(s(2) + ms(500)).await;
    let attempts: Vec<_> = redis.calls("take").iter().map(|at| *at - started).collect();
    assert_eq!(attempts, [s(0), ACQUIRE_INTERVAL, ACQUIRE_INTERVAL * 2]);
    redis.set_mode(Mode::Up);
    advance(ACQUIRE_INTERVAL).await;
    assert!(a.core.current().is_some());
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cluster_status_names_the_leader_and_reports_an_unreachable_redis() {
    let (redis, store) = (FakeRedis::new(), Arc::new(Store::default()));
    let a = Instance::start("a", &redis, &store);
    settle().await;
    let b = Instance::start("b", &redis, &store);
    settle().await;
    let seen_from_b = b.core.cluster_status().await;
    assert_eq!(seen_from_b.instance_id, "b");
    assert_eq!(seen_from_b.role, Role::Follower);
    assert_eq!(seen_from_b.redis, RedisReachability::Ok);
    let leader = seen_from_b.leader.unwrap();
    assert_eq!((leader.instance_id.as_str(), leader.epoch), ("a", Some(FencingToken(1))));
    let seen_from_a = a.core.cluster_status().await;
    assert_eq!(seen_from_a.role, Role::Leader);
    assert_eq!(seen_from_a.leader.unwrap().since, Some(OffsetDateTime::UNIX_EPOCH), "its own term, exactly");
    redis.set_mode(Mode::Down);
    let unreachable = a.core.cluster_status().await;
    assert_eq!(unreachable.redis, RedisReachability::Unreachable);
    assert_eq!(unreachable.leader.unwrap().instance_id, "a", "still leading, by its own account");
    assert_eq!(b.core.cluster_status().await.leader, None);
    a.stop().await;
    b.stop().await;
}

#[test]
fn timings_out_of_order_and_bad_instance_ids_are_refused() {
    let store: Arc<dyn FencingEpoch> = Arc::new(EpochGate::default());
    let make = |instance_id: &str, timings: LeaseTimings| {
        Core::new(FakeRedis::new(), Arc::clone(&store), LeadershipConfig { instance_id: instance_id.into(), timings })
    };
    assert!(make("a", LeaseTimings::default()).is_ok());
    let defaults = LeaseTimings::default();
    for bad in [
        LeaseTimings { step_down_after: s(30), ..defaults },
        LeaseTimings { renew_interval: s(19), ..defaults },
        LeaseTimings { clock_drift_margin: s(20), ..defaults },
        LeaseTimings { renew_retry: Duration::ZERO, ..defaults },
        LeaseTimings { max_failed_renewals: 0, ..defaults },
    ] {
        assert!(matches!(make("a", bad), Err(Error::Config(_))), "{bad:?}");
    }
    for bad in ["", "has space", "new\nline", &"x".repeat(257)] {
        assert!(matches!(make(bad, defaults), Err(Error::Config(_))), "{bad:?}");
    }
}

#[test]
fn scaled_timings_keep_the_proportions_and_stay_valid() {
    assert_eq!(LeaseTimings::with_ttl(LEASE_TTL), LeaseTimings::default());
    let short = LeaseTimings::with_ttl(Duration::from_secs(3));
    assert_eq!(short.renew_interval, Duration::from_secs(1));
    assert_eq!(short.step_down_after, Duration::from_secs(2));
    assert_eq!(short.acquire_interval, Duration::from_millis(100));
    assert_eq!(short.command_timeout, Duration::from_millis(400));
    for ttl_ms in [300, 1_000, 3_000, 30_000, 600_000] {
        LeaseTimings::with_ttl(Duration::from_millis(ttl_ms)).validate().unwrap();
    }
}
