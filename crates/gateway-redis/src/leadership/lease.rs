//! The lease's Redis commands, behind a small trait so the state machine in `mod.rs` can be tested with tokio's
//! paused time against an in-memory lease (Redis keeps its own clock, which paused time cannot move).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use gateway_core::FencingToken;
use redis::Script;
use time::OffsetDateTime;

use super::{EPOCH_KEY, LEADER_KEY, LeaderStatus, TERM_KEY, Term};
use crate::Error;
use crate::link::AsyncLink;

/// What `SET NX` found: whether this instance took the lease, and who holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Take {
    pub(crate) taken: bool,
    pub(crate) holder: Option<String>,
}

/// What a term's opening found: the term, or why none was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened {
    Term(Term),
    /// The instance no longer holds the lease.
    NotHolder,
    /// The counter changed since it was read (someone else wrote it): nothing was written.
    CounterMoved,
}

/// The six lease operations. Each must finish within `limit` (or fail with [`Error::Timeout`]).
pub(crate) trait LeaseBackend: Send + Sync + Debug + 'static {
    /// `SET gateway:leader <instance> NX PX <ttl>`, and who holds the key after it.
    fn take(&self, instance: &str, ttl: Duration, limit: Duration) -> impl Future<Output = Result<Take, Error>> + Send;

    /// Extends the lease to `ttl` from now if `instance` still holds it (compare-and-pexpire); `false` if it does
    /// not (expired, or taken by another instance).
    fn renew(&self, instance: &str, ttl: Duration, limit: Duration)
    -> impl Future<Output = Result<bool, Error>> + Send;

    /// Deletes the lease if `instance` still holds it (compare-and-delete); `false` if it did not.
    fn release(&self, instance: &str, limit: Duration) -> impl Future<Output = Result<bool, Error>> + Send;

    /// The epoch counter as Redis holds it (`None` when it has none), if `instance` holds the lease (`Ok(None)`
    /// otherwise). Read as text: whatever is there is judged by the caller, in exact integers.
    fn read_epoch(
        &self,
        instance: &str,
        limit: Duration,
    ) -> impl Future<Output = Result<Option<Option<String>>, Error>> + Send;

    /// Opens a term for `instance`, which must hold the lease, under `token`: sets the epoch counter to it if the
    /// counter is still `expected` (what [`Self::read_epoch`] found), and records the term for the cluster view, in
    /// one atomic step.
    fn open_term(
        &self,
        instance: &str,
        expected: Option<&str>,
        token: FencingToken,
        limit: Duration,
    ) -> impl Future<Output = Result<Opened, Error>> + Send;

    /// Who holds the lease now, with the term it recorded if that term is the holder's.
    fn leader(&self, limit: Duration) -> impl Future<Output = Result<Option<LeaderStatus>, Error>> + Send;
}

/// The lease in Redis.
#[derive(Debug)]
pub(crate) struct RedisLease {
    link: AsyncLink,
    renew: Script,
    release: Script,
    open_term: Script,
}

/// Compare-and-pexpire: only the holder extends its lease.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Compare-and-delete: only the holder gives its lease up; a lease that expired and was taken by another
/// instance stays that instance's.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Compare-and-set of the counter: the token was computed by the instance from the counter it read and the store's
/// newest token (in exact 64-bit integers: Lua's numbers are doubles, exact only below 2^53), so the script only
/// compares and stores text. Checked against the lease in the same step, so a lease lost since `SET NX` opens no
/// term.
const OPEN_TERM: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
local counter = redis.call('GET', KEYS[2])
if counter == false then
  counter = ''
end
if counter ~= ARGV[2] then
  return {2, 0}
end
redis.call('SET', KEYS[2], ARGV[3])
local now = redis.call('TIME')
local since_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[3], 'instance', ARGV[1], 'epoch', ARGV[3], 'since_ms', since_ms)
return {1, since_ms}
";

impl RedisLease {
    pub(crate) fn new(client: redis::Client) -> Self {
        Self {
            link: AsyncLink::new(client),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
            open_term: Script::new(OPEN_TERM),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl LeaseBackend for RedisLease {
    async fn take(&self, instance: &str, ttl: Duration, limit: Duration) -> Result<Take, Error> {
        let (set, holder): (Option<String>, Option<String>) = self
            .link
            .run(limit, |mut connection| async move {
                redis::pipe()
                    .cmd("SET")
                    .arg(LEADER_KEY)
                    .arg(instance)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(ttl))
                    .cmd("GET")
                    .arg(LEADER_KEY)
                    .query_async(&mut connection)
                    .await
            })
            .await?;
        Ok(Take { taken: set.is_some(), holder })
    }

    async fn renew(&self, instance: &str, ttl: Duration, limit: Duration) -> Result<bool, Error> {
        let renewed: i64 = self
            .link
            .run(limit, |mut connection| async move {
                self.renew.key(LEADER_KEY).arg(instance).arg(millis(ttl)).invoke_async(&mut connection).await
            })
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&self, instance: &str, limit: Duration) -> Result<bool, Error> {
        let released: i64 = self
            .link
            .run(limit, |mut connection| async move {
                self.release.key(LEADER_KEY).arg(instance).invoke_async(&mut connection).await
            })
            .await?;
        Ok(released == 1)
    }

    async fn read_epoch(&self, instance: &str, limit: Duration) -> Result<Option<Option<String>>, Error> {
        let (holder, counter): (Option<String>, Option<String>) = self
            .link
            .run(limit, |mut connection| async move {
                redis::pipe().cmd("GET").arg(LEADER_KEY).cmd("GET").arg(EPOCH_KEY).query_async(&mut connection).await
            })
            .await?;
        Ok((holder.as_deref() == Some(instance)).then_some(counter))
    }

    async fn open_term(
        &self,
        instance: &str,
        expected: Option<&str>,
        token: FencingToken,
        limit: Duration,
    ) -> Result<Opened, Error> {
        let (outcome, since_ms): (i64, i64) = self
            .link
            .run(limit, |mut connection| async move {
                self.open_term
                    .key(LEADER_KEY)
                    .key(EPOCH_KEY)
                    .key(TERM_KEY)
                    .arg(instance)
                    .arg(expected.unwrap_or_default())
                    .arg(token.0.to_string())
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(match outcome {
            1 => Opened::Term(Term { token, since: from_unix_millis(since_ms)? }),
            2 => Opened::CounterMoved,
            _ => Opened::NotHolder,
        })
    }

    async fn leader(&self, limit: Duration) -> Result<Option<LeaderStatus>, Error> {
        type TermFields = (Option<String>, Option<u64>, Option<i64>);
        let (holder, (term_instance, epoch, since_ms)): (Option<String>, TermFields) = self
            .link
            .run(limit, |mut connection| async move {
                redis::pipe()
                    .cmd("GET")
                    .arg(LEADER_KEY)
                    .cmd("HMGET")
                    .arg(TERM_KEY)
                    .arg(&["instance", "epoch", "since_ms"])
                    .query_async(&mut connection)
                    .await
            })
            .await?;
        let Some(instance_id) = holder else { return Ok(None) };
        // The term hash is the last holder's: only report it for the current holder.
        if term_instance.as_deref() != Some(instance_id.as_str()) {
            return Ok(Some(LeaderStatus { instance_id, epoch: None, since: None }));
        }
        let since = since_ms.map(from_unix_millis).transpose()?;
        Ok(Some(LeaderStatus { instance_id, epoch: epoch.map(FencingToken), since }))
    }
}

fn from_unix_millis(millis: i64) -> Result<OffsetDateTime, Error> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .map_err(|_| Error::Reply(format!("a term started at an impossible time: {millis} ms")))
}
