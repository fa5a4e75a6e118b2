//! [`RedisLeadership`]: the `Leadership` port over a Redis lease, with fencing tokens (docs/architecture.md,
//! "Leadership and fencing").
//!
//! - The lease is the key [`LEADER_KEY`] holding the instance id, taken with `SET gateway:leader <id> NX PX 30000`
//!   ([`LEASE_TTL`]) and renewed every [`RENEW_INTERVAL`] by a compare-and-pexpire script.
//! - Every term gets a fencing token: one above the larger of the counter [`EPOCH_KEY`] and the store's newest token
//!   ([`gateway_core::FencingEpoch`]), so a Redis that lost its data cannot hand out a token the store has seen, and
//!   above the instance's own last term (which neither may remember, if no write of it reached the store before
//!   Redis lost its data), so an instance's token never goes down; it is written back to the counter with a
//!   compare-and-set. Redis is not trusted with it: a counter that is not a
//!   number, more than [`MAX_EPOCH_JUMP`] above the store's newest token, or that would take the token past
//!   `i64::MAX`, is refused with an error log, and no term is opened with it (docs/operations.md, "Leader epoch
//!   recovery").
//! - The leader steps down by itself when no renewal has succeeded for [`STEP_DOWN_AFTER`] or after
//!   [`MAX_FAILED_RENEWALS`] failed renewals in a row, well before the TTL could let another instance in; on
//!   stepping down it deletes the key if it still holds it (compare-and-delete).
//! - [`Leadership::current`] is a read of local state, cheap enough for every loop cycle; the Redis work is done
//!   by the adapter's own loop, its [`BackgroundLoop::run`].

mod lease;
#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::runtime::sync::lock;
use gateway_core::{BackgroundLoop, FencingEpoch, FencingToken, Leadership, StoreError, run_blocking};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::Error;
use crate::error::check_instance_id;
use lease::{LeaseBackend, Opened, RedisLease};

/// The lease key; its value is the leader's instance id.
pub const LEADER_KEY: &str = "gateway:leader";
/// The fencing epoch counter: `INCR` gives every term its token.
pub const EPOCH_KEY: &str = "gateway:leader:epoch";
/// A hash of the current term (`instance`, `epoch`, `since_ms`), so every instance can tell who leads since when.
pub const TERM_KEY: &str = "gateway:leader:term";

/// The most a new term's token may be above the store's newest token: terms are counted one at a time, so a counter
/// further ahead was set by someone else (a mistake, or an attacker who can write to Redis), and taking it would
/// drive the store's epoch towards `i64::MAX`, after which no token could ever be newer.
pub const MAX_EPOCH_JUMP: u64 = 1 << 32;
/// A refused epoch is logged again at most this often (a follower tries to lead every acquire interval).
pub const EPOCH_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The lease's time to live in Redis.
pub const LEASE_TTL: Duration = Duration::from_secs(30);
/// How often the leader renews its lease.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// The leader stops leading when no renewal has succeeded for this long, 10 s before its lease could expire.
pub const STEP_DOWN_AFTER: Duration = Duration::from_secs(20);
/// ... or after this many failed renewals in a row.
pub const MAX_FAILED_RENEWALS: u32 = 3;
/// The pause before renewing again after a failed renewal: short, so that [`MAX_FAILED_RENEWALS`] failures
/// take about 14 s (10 + 2 + 2), not 30 s, which the [`STEP_DOWN_AFTER`] rule would cut at 20 s anyway.
pub const RENEW_RETRY: Duration = Duration::from_secs(2);
/// How often a follower tries to take the lease: after a leader crashes, the lease is taken at most this long
/// after its TTL ran out; after a leader stops (SIGTERM, which releases the lease at once), at most this long
/// after, so that a planned handover takes under 2 s (DESIGN.md §14). One `SET NX` per instance a second is
/// nothing for Redis.
pub const ACQUIRE_INTERVAL: Duration = Duration::from_secs(1);
/// Taken off the local validity of a lease: [`Leadership::current`] answers only until `STEP_DOWN_AFTER -
/// CLOCK_DRIFT_MARGIN` after the last successful renewal was sent. It covers a runtime that runs the loop late
/// and clocks that tick at slightly different rates here and on Redis's host (NTP slews at most 0.05 %,
/// 15 ms over 30 s), with a wide margin; the 10 s between the step-down and the TTL cover the rest.
pub const CLOCK_DRIFT_MARGIN: Duration = Duration::from_secs(1);
/// The time limit of one Redis command (a renewal gets less if its lease ends sooner).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The lease's timings. The defaults are the constants above; tests against a real Redis shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub renew_retry: Duration,
    pub step_down_after: Duration,
    pub max_failed_renewals: u32,
    pub acquire_interval: Duration,
    pub clock_drift_margin: Duration,
    pub command_timeout: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            ttl: LEASE_TTL,
            renew_interval: RENEW_INTERVAL,
            renew_retry: RENEW_RETRY,
            step_down_after: STEP_DOWN_AFTER,
            max_failed_renewals: MAX_FAILED_RENEWALS,
            acquire_interval: ACQUIRE_INTERVAL,
            clock_drift_margin: CLOCK_DRIFT_MARGIN,
            command_timeout: COMMAND_TIMEOUT,
        }
    }
}

impl LeaseTimings {
    /// The default timings scaled to a lease of `ttl` instead of [`LEASE_TTL`], every one in the same proportion
    /// (renewal at a third, step-down at two thirds, ...): `--leader-lease-ttl-ms`. A shorter lease means a faster
    /// failover for more Redis traffic; the failover tests run on a few seconds.
    pub fn with_ttl(ttl: Duration) -> Self {
        let scale = |default: Duration| {
            let scaled = default.as_secs_f64() * ttl.as_secs_f64() / LEASE_TTL.as_secs_f64();
            Duration::from_secs_f64(scaled).max(Duration::from_millis(1))
        };
        let defaults = Self::default();
        Self {
            ttl,
            renew_interval: scale(defaults.renew_interval),
            renew_retry: scale(defaults.renew_retry),
            step_down_after: scale(defaults.step_down_after),
            max_failed_renewals: defaults.max_failed_renewals,
            acquire_interval: scale(defaults.acquire_interval),
            clock_drift_margin: scale(defaults.clock_drift_margin),
            // A short lease still gives a slow Redis the default time to answer, as long as the lease allows.
            command_timeout: defaults.command_timeout.min(scale(defaults.command_timeout * 2)),
        }
    }

    /// Every duration positive, and `renew_interval < step_down_after - clock_drift_margin`, `step_down_after <
    /// ttl`: a leader renews before it would step down, and steps down before its lease can expire.
    pub fn validate(&self) -> Result<(), Error> {
        let durations = [
            self.ttl,
            self.renew_interval,
            self.renew_retry,
            self.step_down_after,
            self.acquire_interval,
            self.command_timeout,
        ];
        if durations.iter().any(Duration::is_zero) || self.max_failed_renewals == 0 {
            return Err(Error::Config("lease timings must be positive".into()));
        }
        if self.ttl < Duration::from_millis(1) {
            return Err(Error::Config("the lease TTL must be at least 1 ms (Redis counts milliseconds)".into()));
        }
        if self.clock_drift_margin >= self.step_down_after
            || self.renew_interval >= self.step_down_after - self.clock_drift_margin
        {
            return Err(Error::Config(
                "the renew interval must be shorter than the step-down time less the margin".into(),
            ));
        }
        if self.step_down_after >= self.ttl {
            return Err(Error::Config("the step-down time must be shorter than the lease TTL".into()));
        }
        Ok(())
    }
}

/// What the adapter works through.
#[derive(Debug)]
pub struct LeadershipPorts {
    /// The Redis holding the lease (`--redis-url`).
    pub redis: redis::Client,
    /// The store's fencing epoch: a new term's token is always above its newest token.
    pub epoch: Arc<dyn FencingEpoch>,
}

/// The adapter's settings.
#[derive(Debug, Clone)]
pub struct LeadershipConfig {
    /// This process's name in the cluster (`--instance-id`): the lease's value. 1 to 256 bytes, no whitespace.
    pub instance_id: String,
    pub timings: LeaseTimings,
}

/// What this instance does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Leader,
    Follower,
}

/// One leadership term: its fencing token and when it started (by Redis's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Term {
    pub token: FencingToken,
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
}

/// The instance holding the lease, as `/gateway/cluster` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderStatus {
    pub instance_id: String,
    /// The term's fencing token; `None` when the holder's term record is missing (a term being opened right now).
    pub epoch: Option<FencingToken>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
}

/// Whether Redis answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisReachability {
    Ok,
    Unreachable,
}

/// What `/gateway/cluster` shows (docs/api.md): this instance, its role, the leader and Redis's reachability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    pub instance_id: String,
    pub role: Role,
    /// Who holds the lease by Redis's account; `None` when nobody does, or Redis could not be asked and this
    /// instance does not lead.
    pub leader: Option<LeaderStatus>,
    pub redis: RedisReachability,
}

/// The `Leadership` port over a Redis lease. Cheap to clone (an `Arc` inside); clones share the lease.
///
/// Build it with [`RedisLeadership::new`], hand clones to the components as their `Arc<dyn Leadership>`, and run its
/// loop, [`run`](gateway_core::BackgroundLoop::run) (under `gateway_core::supervise_loop`) for as long as the process
/// serves: until it runs, this instance is a follower. Cancelling its `shutdown` gives the lease back, so another
/// instance takes over at once instead of after the TTL.
#[derive(Debug, Clone)]
pub struct RedisLeadership {
    core: Arc<Core<RedisLease>>,
}

impl RedisLeadership {
    /// Refuses timings in the wrong order ([`LeaseTimings::validate`]) and an empty or malformed instance id.
    /// Connects lazily: Redis need not be up yet.
    pub fn new(ports: LeadershipPorts, config: LeadershipConfig) -> Result<Self, Error> {
        let core = Core::new(RedisLease::new(ports.redis), ports.epoch, config)?;
        Ok(Self { core: Arc::new(core) })
    }

    pub fn instance_id(&self) -> &str {
        &self.core.instance_id
    }

    /// This instance's role right now (a local read).
    pub fn role(&self) -> Role {
        if self.core.current().is_some() { Role::Leader } else { Role::Follower }
    }

    /// The term this instance leads in, while its lease is valid (a local read).
    pub fn term(&self) -> Option<Term> {
        self.core.term()
    }

    /// Whether the last Redis command of the lease loop got an answer (`None` before the first one).
    pub fn redis_reachable(&self) -> Option<bool> {
        lock(&self.core.state).reachable
    }

    /// How many terms this instance has led since it started (a counter for metrics).
    pub fn terms_started(&self) -> u64 {
        lock(&self.core.state).terms_started
    }

    /// How many times this instance refused to lead under the epoch Redis holds (a counter for metrics).
    pub fn epoch_refusals(&self) -> u64 {
        lock(&self.core.state).epoch_refusals
    }

    /// Asks Redis who leads (`GET gateway:leader` and the term record), within the command timeout.
    pub async fn cluster_status(&self) -> ClusterStatus {
        self.core.cluster_status().await
    }
}

impl Leadership for RedisLeadership {
    fn current(&self) -> Option<FencingToken> {
        self.core.current()
    }

    fn fenced(&self, token: FencingToken) {
        self.core.fenced(token);
    }
}

impl BackgroundLoop for RedisLeadership {
    fn name(&self) -> &'static str {
        "leader_lease"
    }

    /// Takes the lease when it is free (every [`LeaseTimings::acquire_interval`]), renews it while held, steps
    /// down when renewals fail, and gives it back when `shutdown` is cancelled.
    async fn run(&self, shutdown: CancellationToken) {
        self.core.run(shutdown).await;
    }
}

/// A held lease, as this instance counts on it.
#[derive(Debug, Clone, Copy)]
struct Lease {
    term: Term,
    /// `current()` answers until then: the last successful renewal's send time plus the step-down time, less
    /// the drift margin.
    valid_until: Instant,
    next_renewal: Instant,
}

#[derive(Debug, Default)]
struct State {
    lease: Option<Lease>,
    failed_renewals: u32,
    /// A lease given up that Redis may still hold under this instance's name: released on the next cycle.
    release_pending: bool,
    reachable: Option<bool>,
    terms_started: u64,
    /// The token of the last term this instance led: its next term's is above it, even when neither Redis (which
    /// may have lost its data since) nor the store (if no write of that term reached it) remembers it.
    last_token: FencingToken,
    epoch_refusals: u64,
    /// The last epoch refusal logged, and when.
    refusal_logged: Option<(EpochRefusal, Instant)>,
}

/// Why the epoch counter in Redis was not taken for a new term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EpochRefusal {
    /// The counter holds something other than a whole number.
    NotANumber,
    /// The counter is more than [`MAX_EPOCH_JUMP`] above the store's newest token.
    TooFarAhead { counter: u64, newest: u64 },
    /// The next token would be past `i64::MAX` (the store's column, and Redis's integers).
    Overflow { from: u64 },
}

impl std::fmt::Display for EpochRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotANumber => write!(f, "the epoch counter {EPOCH_KEY} in redis is not a whole number"),
            Self::TooFarAhead { counter, newest } => write!(
                f,
                "the epoch counter {EPOCH_KEY} in redis is {counter}, more than {MAX_EPOCH_JUMP} above the store's \
                 newest token {newest}"
            ),
            Self::Overflow { from } => write!(f, "the next token after {from} would overflow a 64-bit integer"),
        }
    }
}

/// The token of a new term: one above the larger of the counter (`raw`, as Redis holds it) and the store's newest
/// token `newest`, in exact integers; refused when Redis's counter is not one we could have written.
pub(crate) fn next_token(raw: Option<&str>, newest: FencingToken) -> Result<FencingToken, EpochRefusal> {
    let counter = match raw {
        None => 0,
        Some(raw) if !raw.is_empty() && raw.bytes().all(|byte| byte.is_ascii_digit()) => {
            // Digits only: a value past u64 is surely too far ahead.
            raw.parse::<u64>().unwrap_or(u64::MAX)
        }
        Some(_) => return Err(EpochRefusal::NotANumber),
    };
    if counter > newest.0 && counter - newest.0 > MAX_EPOCH_JUMP {
        return Err(EpochRefusal::TooFarAhead { counter, newest: newest.0 });
    }
    let from = counter.max(newest.0);
    let limit = u64::try_from(i64::MAX).unwrap_or(u64::MAX);
    match from.checked_add(1) {
        Some(next) if next <= limit => Ok(FencingToken(next)),
        _ => Err(EpochRefusal::Overflow { from }),
    }
}

/// `token`, or the token after `last` when `token` is not above it: a new term is newer than every term before it.
fn above(token: FencingToken, last: FencingToken) -> Result<FencingToken, EpochRefusal> {
    if token > last { Ok(token) } else { next_token(None, last) }
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, Copy)]
enum StepDown {
    NoRenewal,
    FailedRenewals,
    Lost,
    Fenced,
    Shutdown,
}

impl StepDown {
    fn reason(self) -> &'static str {
        match self {
            Self::NoRenewal => "no renewal succeeded within the step-down time",
            Self::FailedRenewals => "renewals failed too many times in a row",
            Self::Lost => "the lease is no longer this instance's",
            Self::Fenced => "the store refused a write under this term's token: a newer leader wrote",
            Self::Shutdown => "shutting down",
        }
    }

    /// Whether Redis may still hold the lease under this instance's name.
    fn may_still_hold(self) -> bool {
        !matches!(self, Self::Lost)
    }
}

/// The lease state machine over any [`LeaseBackend`].
#[derive(Debug)]
struct Core<B> {
    backend: B,
    epoch: Arc<dyn FencingEpoch>,
    instance_id: String,
    timings: LeaseTimings,
    state: Mutex<State>,
    /// Wakes the loop when `fenced` steps it down, so it releases the lease at once.
    wake: Notify,
}

impl<B: LeaseBackend> Core<B> {
    fn new(backend: B, epoch: Arc<dyn FencingEpoch>, config: LeadershipConfig) -> Result<Self, Error> {
        config.timings.validate()?;
        check_instance_id(&config.instance_id)?;
        Ok(Self {
            backend,
            epoch,
            instance_id: config.instance_id,
            timings: config.timings,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        })
    }

    fn valid_lease(&self) -> Option<Lease> {
        lock(&self.state).lease.filter(|lease| Instant::now() < lease.valid_until)
    }

    fn current(&self) -> Option<FencingToken> {
        self.valid_lease().map(|lease| lease.term.token)
    }

    fn term(&self) -> Option<Term> {
        self.valid_lease().map(|lease| lease.term)
    }

    fn fenced(&self, token: FencingToken) {
        let mut state = lock(&self.state);
        // An older token's term is over already; a newer one cannot have been fenced by this report.
        if state.lease.is_some_and(|lease| lease.term.token == token) {
            self.step_down(&mut state, StepDown::Fenced);
            drop(state);
            self.wake.notify_one();
        }
    }

    fn step_down(&self, state: &mut State, why: StepDown) {
        let Some(lease) = state.lease.take() else { return };
        state.failed_renewals = 0;
        state.release_pending |= why.may_still_hold();
        let token = lease.term.token.0;
        if let StepDown::Shutdown = why {
            info!(instance_id = %self.instance_id, token, "leadership given back");
        } else {
            warn!(instance_id = %self.instance_id, token, reason = why.reason(), "stepping down from leadership");
        }
    }

    fn note_reachable(&self, reachable: bool, error: Option<&Error>) {
        let mut state = lock(&self.state);
        let before = state.reachable.replace(reachable);
        drop(state);
        match (before, reachable) {
            (Some(false), true) => info!(instance_id = %self.instance_id, "redis reachable again"),
            (None | Some(true), false) => {
                let error = error.map(ToString::to_string).unwrap_or_default();
                warn!(instance_id = %self.instance_id, %error, "redis unreachable: no leadership until it answers");
            }
            _ => {}
        }
    }

    fn note_error(&self, what: &'static str, error: &Error) {
        if error.is_unreachable() {
            self.note_reachable(false, Some(error));
        } else {
            self.note_reachable(true, None);
            warn!(instance_id = %self.instance_id, %error, "{what} failed");
        }
    }

    async fn run(&self, shutdown: CancellationToken) {
        loop {
            self.release_if_pending().await;
            let lease = lock(&self.state).lease;
            let next_cycle = match lease {
                None => {
                    self.try_acquire().await;
                    // A lease taken but not led under (the store's epoch unreadable) goes back at once.
                    self.release_if_pending().await;
                    match lock(&self.state).lease {
                        Some(lease) => lease.next_renewal.min(lease.valid_until),
                        None => Instant::now() + self.timings.acquire_interval,
                    }
                }
                Some(lease) => {
                    if Instant::now() >= lease.valid_until {
                        self.step_down(&mut lock(&self.state), StepDown::NoRenewal);
                        continue;
                    }
                    if Instant::now() >= lease.next_renewal {
                        self.renew(lease).await;
                    }
                    match lock(&self.state).lease {
                        Some(lease) => lease.next_renewal.min(lease.valid_until),
                        // Stepped down: release at once (a lease lost to a failing Redis may be ours still). Taking
                        // it again right after is safe: a new term gets a new token.
                        None => continue,
                    }
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(next_cycle) => {}
            }
        }
        self.step_down(&mut lock(&self.state), StepDown::Shutdown);
        self.release_if_pending().await;
    }

    async fn try_acquire(&self) {
        // Twice at most: the second time after releasing a lease of this instance's that it no longer counted on.
        for _ in 0..2 {
            let sent = Instant::now();
            let take = match self.backend.take(&self.instance_id, self.timings.ttl, self.timings.command_timeout).await
            {
                Ok(take) => take,
                Err(error) => return self.note_error("taking the lease", &error),
            };
            self.note_reachable(true, None);
            if take.taken {
                return self.open_term(sent).await;
            }
            if take.holder.as_deref() != Some(self.instance_id.as_str()) {
                return;
            }
            // The key names this instance, which does not lead: a `SET` whose reply was lost, or a release that
            // never reached Redis. Nothing was done under it; give it up and take it afresh, with a new token.
            debug!(instance_id = %self.instance_id, "found a lease of this instance's it did not count on; releasing it");
            lock(&self.state).release_pending = true;
            if !self.release_if_pending().await {
                return;
            }
        }
    }

    /// The lease is ours since `sent`: get the term's token, above the store's newest.
    async fn open_term(&self, sent: Instant) {
        let epoch = Arc::clone(&self.epoch);
        let newest =
            run_blocking(move || epoch.newest_token()).await.map_err(StoreError::from).and_then(|newest| newest);
        let floor = match newest {
            Ok(floor) => floor,
            Err(error) => {
                warn!(instance_id = %self.instance_id, %error, "cannot read the store's fencing epoch; not leading");
                lock(&self.state).release_pending = true;
                return;
            }
        };
        let limit = self.timings.command_timeout;
        let raw = match self.backend.read_epoch(&self.instance_id, limit).await {
            Ok(Some(raw)) => raw,
            Ok(None) => return,
            Err(error) => {
                self.note_error("reading the epoch counter", &error);
                lock(&self.state).release_pending = true;
                return;
            }
        };
        let last = lock(&self.state).last_token;
        let token = match next_token(raw.as_deref(), floor).and_then(|token| above(token, last)) {
            Ok(token) => token,
            Err(refusal) => return self.refuse_epoch(refusal),
        };
        let term = match self.backend.open_term(&self.instance_id, raw.as_deref(), token, limit).await {
            Ok(Opened::Term(term)) => term,
            Ok(Opened::NotHolder) => return,
            Ok(Opened::CounterMoved) => {
                warn!(instance_id = %self.instance_id, "the epoch counter changed while a term was being opened; not leading");
                lock(&self.state).release_pending = true;
                return;
            }
            Err(error) => {
                self.note_error("opening a term", &error);
                lock(&self.state).release_pending = true;
                return;
            }
        };
        let valid_until = sent + self.timings.step_down_after - self.timings.clock_drift_margin;
        let mut state = lock(&self.state);
        if Instant::now() >= valid_until {
            // Taking the lease took longer than it may be counted on: not worth a term.
            state.release_pending = true;
            return;
        }
        state.lease = Some(Lease { term, valid_until, next_renewal: sent + self.timings.renew_interval });
        state.failed_renewals = 0;
        state.terms_started += 1;
        state.last_token = state.last_token.max(term.token);
        drop(state);
        info!(instance_id = %self.instance_id, token = term.token.0, store_newest = floor.0, "leadership taken");
    }

    /// No term under an epoch Redis should not hold: the lease goes back, the instance keeps serving as a follower,
    /// and an error says what to do (at most every [`EPOCH_REFUSAL_LOG_INTERVAL`] for the same refusal).
    fn refuse_epoch(&self, refusal: EpochRefusal) {
        let mut state = lock(&self.state);
        state.release_pending = true;
        state.epoch_refusals += 1;
        let now = Instant::now();
        let logged_lately = state
            .refusal_logged
            .as_ref()
            .is_some_and(|(logged, at)| *logged == refusal && now.duration_since(*at) < EPOCH_REFUSAL_LOG_INTERVAL);
        if logged_lately {
            return;
        }
        state.refusal_logged = Some((refusal.clone(), now));
        drop(state);
        error!(
            instance_id = %self.instance_id,
            reason = %refusal,
            "not leading: the leader epoch is refused (docs/operations.md, \"Leader epoch recovery\"); this instance \
             keeps serving, and timed work waits until an instance can lead"
        );
    }

    async fn renew(&self, lease: Lease) {
        let sent = Instant::now();
        let limit = self.timings.command_timeout.min(lease.valid_until.saturating_duration_since(sent));
        let outcome = self.backend.renew(&self.instance_id, self.timings.ttl, limit).await;
        if let Err(error) = &outcome {
            self.note_error("renewing the lease", error);
        } else {
            self.note_reachable(true, None);
        }
        let mut state = lock(&self.state);
        // Fenced while the renewal was in flight: that term is over whatever Redis said.
        let Some(held) = state.lease.as_mut().filter(|held| held.term.token == lease.term.token) else { return };
        match outcome {
            Ok(true) => {
                held.valid_until = sent + self.timings.step_down_after - self.timings.clock_drift_margin;
                held.next_renewal = sent + self.timings.renew_interval;
                state.failed_renewals = 0;
            }
            Ok(false) => self.step_down(&mut state, StepDown::Lost),
            Err(_) => {
                held.next_renewal = Instant::now() + self.timings.renew_retry;
                state.failed_renewals += 1;
                if state.failed_renewals >= self.timings.max_failed_renewals {
                    self.step_down(&mut state, StepDown::FailedRenewals);
                }
            }
        }
    }

    /// Releases a lease given up, if one is pending; `true` when nothing is pending any more.
    async fn release_if_pending(&self) -> bool {
        if !lock(&self.state).release_pending {
            return true;
        }
        match self.backend.release(&self.instance_id, self.timings.command_timeout).await {
            Ok(released) => {
                self.note_reachable(true, None);
                debug!(instance_id = %self.instance_id, released, "lease released");
                lock(&self.state).release_pending = false;
                true
            }
            Err(error) => {
                // Kept pending: retried next cycle. Meanwhile the TTL ends it anyway.
                self.note_error("releasing the lease", &error);
                false
            }
        }
    }

    async fn cluster_status(&self) -> ClusterStatus {
        let own = self.term();
        let role = if own.is_some() { Role::Leader } else { Role::Follower };
        let own_status = |term: Term| LeaderStatus {
            instance_id: self.instance_id.clone(),
            epoch: Some(term.token),
            since: Some(term.since),
        };
        let (leader, redis) = match self.backend.leader(self.timings.command_timeout).await {
            Ok(holder) => {
                let leader = match (holder, own) {
                    (Some(holder), Some(term)) if holder.instance_id == self.instance_id => Some(own_status(term)),
                    (holder, _) => holder,
                };
                (leader, RedisReachability::Ok)
            }
            Err(_) => (own.map(own_status), RedisReachability::Unreachable),
        };
        ClusterStatus { instance_id: self.instance_id.clone(), role, leader, redis }
    }
}
