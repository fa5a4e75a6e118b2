//! [`RedisDispatchRate`]: the outbound rate (FR-10.12) kept cluster-wide, with the same exact sliding-log rule as
//! gateway-core's `SlidingWindowRate`: in any one-second window at most `limit` requests start, across every
//! instance sharing the Redis.
//!
//! The log is a sorted set ([`RATE_KEY`]) of starts scored by Redis's own clock (`TIME`, microseconds), so
//! instances whose clocks disagree still share one timeline. One Lua script trims the entries a window old,
//! counts, and adds the start if under the limit, or returns how long until the oldest blocking start leaves the
//! window: one round trip per start, atomic.
//!
//! Every start also goes through an in-process `SlidingWindowRate` of the same limit, first: it holds exactly
//! this instance's own starts, so it costs nothing when Redis is up (this instance alone cannot exceed what the
//! cluster may), and when Redis stops answering it takes over with the right history instead of an empty one.
//! While Redis is unreachable the rate is per instance: `limit` per second on each (logged once per outage and
//! counted, [`RedisDispatchRate::fallback_starts`]); one probe per [`RATE_PROBE_INTERVAL`] finds Redis again.
//!
//! [`RedisEndpointRate`] (from [`RedisDispatchRate::endpoint_rate`]) keeps each webhook endpoint's own rate
//! (`rate_limit_per_second`) the same way, one sorted set per endpoint ([`ENDPOINT_RATE_KEY_PREFIX`] + the config
//! id), over the same connection and outage state: when Redis stops answering, the global cap and every
//! endpoint's rate fall back to this instance together, and come back together.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use gateway_core::runtime::sync::lock;
use gateway_core::{DispatchRate, EndpointRate, RateTicket, SlidingWindowRate};
use redis::Script;
use tracing::{info, warn};

use crate::Error;
use crate::error::check_instance_id;

/// The sorted set of recent starts, shared by every instance.
pub const RATE_KEY: &str = "gateway:dispatch-rate";
/// An endpoint's sorted set of recent starts is this followed by its config's id.
pub const ENDPOINT_RATE_KEY_PREFIX: &str = "gateway:dispatch-rate:endpoint:";
/// Most endpoints whose logs one instance keeps before it drops those with no start left in the window.
const KEPT_IDLE_ENDPOINTS: usize = 1024;
/// The window of the rule: at most `limit` starts in any window this long.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);
/// A start waits at most this long for Redis before it is decided in-process. Redis answers a loopback or LAN
/// round trip in well under a millisecond; the caller's thread is blocked meanwhile (the port is synchronous).
pub const RATE_COMMAND_TIMEOUT: Duration = Duration::from_millis(100);
/// While Redis is unreachable, one start per interval tries it again; the others are decided in-process at once.
pub const RATE_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Trim, count, add if under the limit. KEYS[1] the log; ARGV: limit, window (µs), the start's member.
/// Returns {1, Redis time of the start in µs} or {0, µs until a start may happen}.
const TRY_START: &str = r"
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
-- A start exactly one window ago is outside the window that ends now: windows are half-open.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], t, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
  return {1, t}
end
local blocking = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return {0, tonumber(blocking[2]) + window - t}
";

/// The adapter's settings.
#[derive(Debug, Clone)]
pub struct RateConfig {
    /// This instance's name (`--instance-id`): it makes the log's members unique across instances.
    pub instance_id: String,
    /// Starts per window (`--webhook-max-per-second`); zero is taken as one, as `SlidingWindowRate` does.
    pub limit: usize,
    pub window: Duration,
    pub command_timeout: Duration,
    pub probe_interval: Duration,
}

impl RateConfig {
    /// `limit` starts per second, with the default timeouts.
    pub fn per_second(instance_id: impl Into<String>, limit: usize) -> Self {
        Self {
            instance_id: instance_id.into(),
            limit,
            window: RATE_WINDOW,
            command_timeout: RATE_COMMAND_TIMEOUT,
            probe_interval: RATE_PROBE_INTERVAL,
        }
    }
}

/// The cluster-wide `DispatchRate`. `try_start` makes one Redis round trip on the calling thread (bounded by
/// [`RateConfig::command_timeout`]); `cancel` one more. Both are called a few times per second at the default
/// rate.
#[derive(Debug)]
pub struct RedisDispatchRate {
    link: Arc<Link>,
    log: SharedLog,
}

/// What every log of one instance shares: the connection, whether Redis answers, the counters.
#[derive(Debug)]
struct Link {
    client: redis::Client,
    connection: Mutex<Option<SyncConnection>>,
    script: Script,
    config: RateConfig,
    window_micros: u64,
    /// Numbers every start of every log of this instance: members stay unique in every set, also after an
    /// endpoint's log was dropped and made again.
    sequence: AtomicU64,
    outage: Mutex<Outage>,
    fallback_starts: AtomicU64,
    outages: AtomicU64,
}

/// One sorted set of starts, and this instance's own starts of it.
#[derive(Debug)]
struct SharedLog {
    key: String,
    local: SlidingWindowRate,
    tickets: Mutex<Tickets>,
}

/// redis-rs's synchronous connection, which has no `Debug`.
struct SyncConnection(redis::Connection);

impl std::fmt::Debug for SyncConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncConnection")
    }
}

#[derive(Debug, Default)]
struct Tickets {
    /// The starts of the last window, oldest first: what `cancel` can still take back.
    issued: VecDeque<Issued>,
}

#[derive(Debug)]
struct Issued {
    ticket: RateTicket,
    at: Instant,
    local: RateTicket,
    /// The start's member in the shared log and its Redis time (µs since the epoch); `None` when decided
    /// in-process.
    shared: Option<(String, u64)>,
}

#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    next_probe: Option<Instant>,
}

enum Shared {
    Started { member: String, at_micros: u64 },
    Refused(Duration),
    Unavailable,
}

impl RedisDispatchRate {
    /// Connects lazily: Redis need not be up yet (starts are decided in-process until it is).
    pub fn new(redis: redis::Client, config: RateConfig) -> Result<Self, Error> {
        check_instance_id(&config.instance_id)?;
        if config.window.is_zero() || config.command_timeout.is_zero() || config.probe_interval.is_zero() {
            return Err(Error::Config("the rate's window, timeout and probe interval must be positive".into()));
        }
        let log = SharedLog::new(RATE_KEY.to_owned(), config.limit, config.window);
        let link = Link {
            client: redis,
            connection: Mutex::new(None),
            script: Script::new(TRY_START),
            window_micros: u64::try_from(config.window.as_micros()).unwrap_or(u64::MAX),
            config,
            sequence: AtomicU64::new(0),
            outage: Mutex::new(Outage::default()),
            fallback_starts: AtomicU64::new(0),
            outages: AtomicU64::new(0),
        };
        Ok(Self { link: Arc::new(link), log })
    }

    /// The per-endpoint rates of this instance, over this rate's connection and outage state (and its window).
    pub fn endpoint_rate(&self) -> RedisEndpointRate {
        RedisEndpointRate { link: Arc::clone(&self.link), endpoints: Mutex::new(HashMap::new()) }
    }

    pub fn limit(&self) -> usize {
        self.log.local.limit()
    }

    /// Starts decided in-process because Redis did not answer (a counter for metrics), the endpoints' included.
    pub fn fallback_starts(&self) -> u64 {
        self.link.fallback_starts.load(Ordering::Relaxed)
    }

    /// Times Redis became unreachable (a counter for metrics).
    pub fn outages(&self) -> u64 {
        self.link.outages.load(Ordering::Relaxed)
    }

    /// Whether starts are decided in-process right now because Redis did not answer.
    pub fn is_falling_back(&self) -> bool {
        self.link.is_falling_back()
    }

    /// When the shared log recorded `ticket`'s start, by Redis's clock; `None` for a start decided in-process or
    /// one that has left the window. For diagnostics, and for tests that check the rule on Redis's timeline.
    pub fn shared_start_time(&self, ticket: RateTicket) -> Option<SystemTime> {
        self.log.shared_start_time(ticket)
    }
}

impl Link {
    fn is_falling_back(&self) -> bool {
        lock(&self.outage).since.is_some()
    }

    fn shared_start(&self, key: &str, limit: usize, now: Instant, sequence: u64) -> Shared {
        {
            let mut outage = lock(&self.outage);
            if let Some(next_probe) = outage.next_probe {
                if now < next_probe {
                    return Shared::Unavailable;
                }
                // This start probes; the others stay in-process until it has an answer.
                outage.next_probe = Some(now + self.config.probe_interval);
            }
        }
        let member = format!("{}:{sequence}", self.config.instance_id);
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        let outcome = self.with_connection(|connection| {
            self.script.key(key).arg(limit).arg(self.window_micros).arg(&member).invoke::<(i64, i64)>(connection)
        });
        match outcome {
            Ok((1, at_micros)) => {
                self.recovered(now);
                Shared::Started { member, at_micros: u64::try_from(at_micros).unwrap_or(0) }
            }
            Ok((_, wait_micros)) => {
                self.recovered(now);
                Shared::Refused(Duration::from_micros(u64::try_from(wait_micros).unwrap_or(0).max(1)))
            }
            Err(error) => {
                self.went_down(now, &error);
                Shared::Unavailable
            }
        }
    }

    /// Runs `command` on the connection, made first if there is none; a failure drops the connection.
    fn with_connection<T>(
        &self,
        command: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let mut held = lock(&self.connection);
        let mut connection = match held.take() {
            Some(connection) => connection,
            None => {
                let connection = self.client.get_connection_with_timeout(self.config.command_timeout)?;
                connection.set_read_timeout(Some(self.config.command_timeout))?;
                connection.set_write_timeout(Some(self.config.command_timeout))?;
                SyncConnection(connection)
            }
        };
        let outcome = command(&mut connection.0)?;
        // Kept only after a success: after a timeout its reply may still come and be read as the next command's.
        *held = Some(connection);
        Ok(outcome)
    }

    fn went_down(&self, now: Instant, error: &Error) {
        let mut outage = lock(&self.outage);
        outage.next_probe = Some(now + self.config.probe_interval);
        if outage.since.is_none() {
            outage.since = Some(now);
            self.outages.fetch_add(1, Ordering::Relaxed);
            warn!(%error, limit = self.config.limit, "redis unreachable: the outbound rate (and every endpoint's) is kept per instance until it answers");
        }
    }

    fn recovered(&self, now: Instant) {
        let mut outage = lock(&self.outage);
        if let Some(since) = outage.since.take() {
            let outage_ms = u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX);
            info!(outage_ms, "redis answers again: the outbound rate is cluster-wide again");
        }
        outage.next_probe = None;
    }
}

impl SharedLog {
    fn new(key: String, limit: usize, window: Duration) -> Self {
        Self { key, local: SlidingWindowRate::new(limit, window), tickets: Mutex::new(Tickets::default()) }
    }

    /// A start within `limit`: this instance's own log first (if it is full, the shared one is too), then the
    /// shared one, or this instance's alone while Redis does not answer.
    fn try_start(&self, link: &Link, limit: usize, now: Instant) -> Result<RateTicket, Duration> {
        let limit = limit.max(1);
        let local = self.local.try_start_within(limit, now)?;
        let sequence = link.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        let shared = match link.shared_start(&self.key, limit, now, sequence) {
            Shared::Started { member, at_micros } => Some((member, at_micros)),
            Shared::Refused(wait) => {
                self.local.cancel(local);
                return Err(wait);
            }
            Shared::Unavailable => {
                link.fallback_starts.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let ticket = RateTicket(sequence);
        let mut tickets = lock(&self.tickets);
        while tickets.issued.front().is_some_and(|issued| issued.at + link.config.window <= now) {
            tickets.issued.pop_front();
        }
        tickets.issued.push_back(Issued { ticket, at: now, local, shared });
        Ok(ticket)
    }

    fn cancel(&self, link: &Link, ticket: RateTicket) {
        let issued = {
            let mut tickets = lock(&self.tickets);
            let Some(position) = tickets.issued.iter().position(|issued| issued.ticket == ticket) else { return };
            tickets.issued.remove(position)
        };
        let Some(issued) = issued else { return };
        self.local.cancel(issued.local);
        let Some((member, _)) = issued.shared else { return };
        if link.is_falling_back() {
            // It leaves the shared window within a second anyway.
            return;
        }
        let removed =
            link.with_connection(|connection| redis::cmd("ZREM").arg(&self.key).arg(&member).query::<i64>(connection));
        if let Err(error) = removed {
            link.went_down(Instant::now(), &error);
        }
    }

    fn shared_start_time(&self, ticket: RateTicket) -> Option<SystemTime> {
        let tickets = lock(&self.tickets);
        let (_, at_micros) = tickets.issued.iter().find(|issued| issued.ticket == ticket)?.shared.as_ref()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(*at_micros))
    }
}

impl DispatchRate for RedisDispatchRate {
    fn try_start(&self, now: Instant) -> Result<RateTicket, Duration> {
        self.log.try_start(&self.link, self.log.local.limit(), now)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn cancel(&self, ticket: RateTicket) {
        self.log.cancel(&self.link, ticket);
    }
}

/// The cluster-wide [`EndpointRate`]: each endpoint's starts in a sorted set of its own, by the rule and over the
/// connection of the [`RedisDispatchRate`] it came from. One round trip per start, as the global cap's.
#[derive(Debug)]
pub struct RedisEndpointRate {
    link: Arc<Link>,
    endpoints: Mutex<HashMap<i64, Arc<SharedLog>>>,
}

impl RedisEndpointRate {
    fn log(&self, endpoint: i64, limit: usize, now: Instant) -> Arc<SharedLog> {
        let mut endpoints = lock(&self.endpoints);
        if endpoints.len() >= KEPT_IDLE_ENDPOINTS {
            endpoints.retain(|_, log| !log.local.is_idle(now));
        }
        let log = endpoints.entry(endpoint).or_insert_with(|| {
            Arc::new(SharedLog::new(format!("{ENDPOINT_RATE_KEY_PREFIX}{endpoint}"), limit, self.link.config.window))
        });
        Arc::clone(log)
    }

    /// When the shared log of `endpoint` recorded `ticket`'s start, by Redis's clock (as
    /// [`RedisDispatchRate::shared_start_time`]).
    pub fn shared_start_time(&self, endpoint: i64, ticket: RateTicket) -> Option<SystemTime> {
        let log = lock(&self.endpoints).get(&endpoint).cloned()?;
        log.shared_start_time(ticket)
    }
}

impl EndpointRate for RedisEndpointRate {
    fn try_start(&self, endpoint: i64, limit: usize, now: Instant) -> Result<RateTicket, Duration> {
        // Out of the map's lock: the round trip would hold every other endpoint's start behind it.
        self.log(endpoint, limit, now).try_start(&self.link, limit, now)
    }

    fn cancel(&self, endpoint: i64, ticket: RateTicket) {
        let log = lock(&self.endpoints).get(&endpoint).cloned();
        if let Some(log) = log {
            log.cancel(&self.link, ticket);
        }
    }

    fn is_shared(&self) -> bool {
        true
    }
}
