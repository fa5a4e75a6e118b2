//! [`RedisMembers`]: the instances of a cluster that were heard from lately, for `GET /gateway/cluster`'s
//! `members` (docs/operations.md, "Cluster members").
//!
//! Every instance records itself every lease renewal interval (10 s by default) in the sorted set [`MEMBERS_KEY`],
//! scored by Redis's clock (so instances whose clocks disagree still agree on who is recent), with its version and
//! start in the hash [`MEMBER_INFO_KEY`]. A member is listed while its last record is within the window (the lease
//! TTL, 30 s by default): a killed instance drops out of every instance's list at most one window after its last
//! record, and one stopped cleanly removes itself at once. Entries older than the window are deleted by whichever
//! instance records next, so the keys stay as small as the cluster.
//!
//! Three commands per instance per interval in all: a rate Redis does not notice. The record is a loop of its own
//! rather than part of the lease loop, so a slow member write can never delay a renewal.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::BackgroundLoop;
use redis::Script;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::link::AsyncLink;
use crate::{Error, LeaseTimings, RedisLeadership};

/// The sorted set of instance ids, each scored with the Redis time (ms) it last recorded itself.
pub const MEMBERS_KEY: &str = "gateway:members";
/// The hash of instance id → `<started_ms> <version>`.
pub const MEMBER_INFO_KEY: &str = "gateway:members:info";

/// Records `ARGV[1]` as heard from now (Redis's clock) with its info `ARGV[2]`, and forgets every member older than
/// `ARGV[3]` ms.
const RECORD: &str = r"
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local oldest = now_ms - tonumber(ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
redis.call('ZADD', KEYS[1], now_ms, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return now_ms
";

/// The most members a read lists (the most recently heard), and the longest instance id or info it takes: Redis is
/// not trusted (docs/architecture.md), and whoever can write the set must not make every `GET /gateway/cluster`
/// load it whole. A real cluster is a few dozen instances with ids and infos of a few dozen bytes.
pub const MAX_LISTED_MEMBERS: usize = 256;
pub const MAX_MEMBER_FIELD_BYTES: usize = 256;

/// The members heard from within `ARGV[1]` ms, at most `ARGV[2]` of them, newest first, skipping an id longer than
/// `ARGV[3]` bytes and cutting an info there: `{id, last_ms, info, id, last_ms, info, …}`.
const READ: &str = r"
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', now_ms - tonumber(ARGV[1]), 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
local longest = tonumber(ARGV[3])
local out = {}
for i = 1, #ids, 2 do
  if #ids[i] <= longest then
    table.insert(out, ids[i])
    table.insert(out, ids[i + 1])
    table.insert(out, string.sub(redis.call('HGET', KEYS[2], ids[i]) or '', 1, longest))
  end
end
return out
";

/// Removes `ARGV[1]`: an instance that stops cleanly is not listed for a window after.
const LEAVE: &str = r"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
";

/// One instance as the registry last heard of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub instance_id: String,
    /// The gateway's version it runs.
    pub version: String,
    /// When it started (its own clock).
    pub started_at: Option<OffsetDateTime>,
    /// When it last recorded itself (Redis's clock).
    pub last_heard_at: OffsetDateTime,
}

/// The member registry of one instance. Cheap to clone; run its loop (under `gateway_core::supervise_loop`) for as
/// long as the process serves, and cancel its `shutdown` to leave the registry.
#[derive(Debug, Clone)]
pub struct RedisMembers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    link: AsyncLink,
    record: Script,
    read: Script,
    leave: Script,
    instance_id: String,
    info: String,
    window: Duration,
    interval: Duration,
    command_timeout: Duration,
}

impl RedisMembers {
    /// `leadership` names this instance; `version` is what it runs, `started_at` when it started. The window and the
    /// interval are the lease's TTL and renewal interval (`--leader-lease-ttl-ms` scales both).
    pub fn new(
        redis: redis::Client,
        leadership: &RedisLeadership,
        version: &str,
        started_at: OffsetDateTime,
        timings: LeaseTimings,
    ) -> Self {
        let started_ms = started_at.unix_timestamp_nanos() / 1_000_000;
        // The version is the first word only: the info is split at its first space.
        let version = version.split_whitespace().next().unwrap_or("unknown");
        Self {
            inner: Arc::new(Inner {
                link: AsyncLink::new(redis),
                record: Script::new(RECORD),
                read: Script::new(READ),
                leave: Script::new(LEAVE),
                instance_id: leadership.instance_id().to_owned(),
                info: format!("{started_ms} {version}"),
                window: timings.ttl,
                interval: timings.renew_interval,
                command_timeout: timings.command_timeout,
            }),
        }
    }

    /// How long a member stays listed after its last record.
    pub fn window(&self) -> Duration {
        self.inner.window
    }

    /// The members heard from within the window, in instance id order: at most [`MAX_LISTED_MEMBERS`], the most
    /// recently heard.
    pub async fn members(&self) -> Result<Vec<Member>, Error> {
        let inner = &self.inner;
        let flat: Vec<String> = inner
            .link
            .run(inner.command_timeout, |mut connection| async move {
                inner
                    .read
                    .key(MEMBERS_KEY)
                    .key(MEMBER_INFO_KEY)
                    .arg(millis(inner.window))
                    .arg(MAX_LISTED_MEMBERS)
                    .arg(MAX_MEMBER_FIELD_BYTES)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        let mut members = Vec::with_capacity(flat.len() / 3);
        for entry in flat.chunks(3) {
            let [instance_id, last_ms, info] = entry else {
                return Err(Error::Reply(format!("a member entry of {} fields", entry.len())));
            };
            let last_ms: f64 = last_ms.parse().map_err(|_| Error::Reply(format!("a member heard at {last_ms:?}")))?;
            let (started_ms, version) = info.split_once(' ').unwrap_or(("", "unknown"));
            #[allow(clippy::cast_possible_truncation)] // Redis scores are whole milliseconds.
            let last_heard_at = from_unix_millis(last_ms as i64)?;
            members.push(Member {
                instance_id: instance_id.clone(),
                version: version.to_owned(),
                started_at: started_ms.parse::<i64>().ok().and_then(|ms| from_unix_millis(ms).ok()),
                last_heard_at,
            });
        }
        members.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(members)
    }

    async fn record(&self) -> Result<(), Error> {
        let inner = &self.inner;
        let _: i64 = inner
            .link
            .run(inner.command_timeout, |mut connection| async move {
                inner
                    .record
                    .key(MEMBERS_KEY)
                    .key(MEMBER_INFO_KEY)
                    .arg(&inner.instance_id)
                    .arg(&inner.info)
                    .arg(millis(inner.window))
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }

    async fn leave(&self) -> Result<(), Error> {
        let inner = &self.inner;
        let _: i64 = inner
            .link
            .run(inner.command_timeout, |mut connection| async move {
                inner
                    .leave
                    .key(MEMBERS_KEY)
                    .key(MEMBER_INFO_KEY)
                    .arg(&inner.instance_id)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }
}

impl BackgroundLoop for RedisMembers {
    fn name(&self) -> &'static str {
        "cluster_members"
    }

    /// Records this instance every renewal interval until `shutdown`, then leaves. A failed record is only logged:
    /// the lease loop already reports an unreachable Redis, and the next record comes an interval later.
    async fn run(&self, shutdown: CancellationToken) {
        loop {
            if let Err(error) = self.record().await {
                debug!(%error, "cluster member record failed");
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.inner.interval) => {}
            }
        }
        if let Err(error) = self.leave().await {
            debug!(%error, "leaving the cluster members failed; this instance drops out after the window");
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn from_unix_millis(millis: i64) -> Result<OffsetDateTime, Error> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .map_err(|_| Error::Reply(format!("a member heard at an impossible time: {millis} ms")))
}
