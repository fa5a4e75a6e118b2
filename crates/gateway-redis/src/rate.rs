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

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use gateway_core::runtime::sync::lock;
use gateway_core::{DispatchRate, RateTicket, SlidingWindowRate};
use redis::Script;
use tracing::{info, warn};

use crate::Error;
use crate::error::check_instance_id;

/// The sorted set of recent starts, shared by every instance.
pub const RATE_KEY: &str = "gateway:dispatch-rate";
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
    client: redis::Client,
    connection: Mutex<Option<SyncConnection>>,
    script: Script,
    config: RateConfig,
    window_micros: u64,
    local: SlidingWindowRate,
    tickets: Mutex<Tickets>,
    outage: Mutex<Outage>,
    fallback_starts: AtomicU64,
    outages: AtomicU64,
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
    next: u64,
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
        let local = SlidingWindowRate::new(config.limit, config.window);
        Ok(Self {
            client: redis,
            connection: Mutex::new(None),
            script: Script::new(TRY_START),
            window_micros: u64::try_from(config.window.as_micros()).unwrap_or(u64::MAX),
            config,
            local,
            tickets: Mutex::new(Tickets::default()),
            outage: Mutex::new(Outage::default()),
            fallback_starts: AtomicU64::new(0),
            outages: AtomicU64::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.local.limit()
    }

    /// Starts decided in-process because Redis did not answer (a counter for metrics).
    pub fn fallback_starts(&self) -> u64 {
        self.fallback_starts.load(Ordering::Relaxed)
    }

    /// Times Redis became unreachable (a counter for metrics).
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Whether starts are decided in-process right now because Redis did not answer.
    pub fn is_falling_back(&self) -> bool {
        lock(&self.outage).since.is_some()
    }

    /// When the shared log recorded `ticket`'s start, by Redis's clock; `None` for a start decided in-process or
    /// one that has left the window. For diagnostics, and for tests that check the rule on Redis's timeline.
    pub fn shared_start_time(&self, ticket: RateTicket) -> Option<SystemTime> {
        let tickets = lock(&self.tickets);
        let (_, at_micros) = tickets.issued.iter().find(|issued| issued.ticket == ticket)?.shared.as_ref()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(*at_micros))
    }

    fn shared_start(&self, now: Instant, sequence: u64) -> Shared {
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
        let limit = u64::try_from(self.local.limit()).unwrap_or(u64::MAX);
        let outcome = self.with_connection(|connection| {
            self.script.key(RATE_KEY).arg(limit).arg(self.window_micros).arg(&member).invoke::<(i64, i64)>(connection)
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
            warn!(%error, limit = self.local.limit(), "redis unreachable: the outbound rate is kept per instance until it answers");
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

impl DispatchRate for RedisDispatchRate {
    fn try_start(&self, now: Instant) -> Result<RateTicket, Duration> {
        // This instance's own log first: if it is full, the shared one is too.
        let local = self.local.try_start(now)?;
        let sequence = {
            let mut tickets = lock(&self.tickets);
            tickets.next += 1;
            tickets.next
        };
        let shared = match self.shared_start(now, sequence) {
            Shared::Started { member, at_micros } => Some((member, at_micros)),
            Shared::Refused(wait) => {
                self.local.cancel(local);
                return Err(wait);
            }
            Shared::Unavailable => {
                self.fallback_starts.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let ticket = RateTicket(sequence);
        let mut tickets = lock(&self.tickets);
        while tickets.issued.front().is_some_and(|issued| issued.at + self.config.window <= now) {
            tickets.issued.pop_front();
        }
        tickets.issued.push_back(Issued { ticket, at: now, local, shared });
        Ok(ticket)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn cancel(&self, ticket: RateTicket) {
        let issued = {
            let mut tickets = lock(&self.tickets);
            let Some(position) = tickets.issued.iter().position(|issued| issued.ticket == ticket) else { return };
            tickets.issued.remove(position)
        };
        let Some(issued) = issued else { return };
        self.local.cancel(issued.local);
        let Some((member, _)) = issued.shared else { return };
        if self.is_falling_back() {
            // It leaves the shared window within a second anyway.
            return;
        }
        let removed =
            self.with_connection(|connection| redis::cmd("ZREM").arg(RATE_KEY).arg(&member).query::<i64>(connection));
        if let Err(error) = removed {
            self.went_down(Instant::now(), &error);
        }
    }
}
