//! Configuration: every flag of docs/operations.md, each with its environment variable (flags win).
//!
//! Defaults are the owning crates' constants, not literals repeated here. A bad value stops the process at start
//! with one line naming the flag and exit code 2 (see [`Config::from_args_or_exit`]).

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Parser, ValueEnum};
/// The operator token (`--admin-token`), gateway-auth's: Debug never shows it.
pub use gateway_auth::AdminToken;
// Parsed here, but what it names is the instance's place in its cluster.
pub use crate::cluster::InstanceId;
use gateway_store::DatabaseUrl;

#[cfg(test)]
mod tests;
mod values;

use self::values::*;
pub use self::values::{ClusterSecret, ClusterSecretFile, PemFile, RedisUrl};

/// Shortest accepted `--admin-token`: a guessable operator token is an open door.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

// Upper bounds, checked at start: a huge value is a typo, and some (the webhook timeout feeds the claim lease's
// arithmetic) would overflow later, in a loop, instead of failing now. Named `<FLAG>_CEILING` (`_FLOOR` for a lower
// bound), apart from the defaults, which are the component crates' `DEFAULT_…` constants: `--webhook-max-per-second`
// defaults to `gateway_webhooks::DEFAULT_MAX_PER_SECOND` (5) and accepts up to `WEBHOOK_MAX_PER_SECOND_CEILING`.
/// Longest check or poll period: one day.
pub const INTERVAL_MS_CEILING: u64 = 86_400_000;
/// Longest eviction threshold: thirty days.
pub const EVICTION_THRESHOLD_S_CEILING: u64 = 30 * 86_400;
/// Longest outbound attempt: five minutes (receivers answer in seconds; a slower one is better retried).
pub const WEBHOOK_TIMEOUT_MS_CEILING: u64 = 300_000;
/// Largest `--max-tracked-agents`: ten million agents. A single instance's own map then takes about 2 GiB of memory
/// (~202 bytes an agent); in cluster mode the rows are in PostgreSQL and an instance keeps ~13 bytes an agent it
/// has been sent (docs/capacity.md). A ten-million-agent fleet sits at this ceiling: run it a little under.
pub const MAX_TRACKED_AGENTS_CEILING: usize = 10_000_000;
/// Largest poll batch and in-flight cap.
pub const WEBHOOK_MAX_PER_CYCLE_CEILING: usize = 10_000;
/// Longest retention: a hundred years (a bound only so the arithmetic cannot overflow).
pub const RETENTION_DAYS_CEILING: u64 = 36_500;
/// Highest outbound rate; the in-process limiter remembers one instant per start of the last second.
pub const WEBHOOK_MAX_PER_SECOND_CEILING: usize = 100_000;
/// Longest `--mailbox-retention-h`: a year. The mailbox keeps every fire of every agent for that long; more is
/// almost surely days typed as hours.
pub const MAILBOX_RETENTION_H_CEILING: u64 = 8_760;
/// Shortest `--leader-lease-ttl-ms`: below it, one slow Redis answer would cost the lease.
pub const LEADER_LEASE_TTL_MS_FLOOR: u64 = 300;
/// Longest `--leader-lease-ttl-ms`: ten minutes without timed work after a leader dies is already a lot.
pub const LEADER_LEASE_TTL_MS_CEILING: u64 = 600_000;
/// Largest `--max-inflight-body-bytes`: 64 GiB, more than any machine this runs on should give to bodies.
pub const MAX_INFLIGHT_BODY_BYTES_CEILING: u64 = 64 << 30;
/// Highest `--agent-rate-limit-per-minute`: a thousand a second per agent is no limit any more.
pub const AGENT_RATE_LIMIT_PER_MINUTE_CEILING: u64 = 60_000;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "gateway",
    version,
    about = "Agent gateway: heartbeats, DecisionLogs, reminders and webhooks for AI agents"
)]
pub struct Config {
    /// HTTP address to listen on (port 0 picks a free port; the chosen address is printed at start).
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:4000", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// sqlite://PATH (created and migrated at start) or postgres://USER:PASSWORD@HOST:PORT/DATABASE (migrated at
    /// start; without TLS, see docs/operations.md).
    #[arg(long, env = "GATEWAY_DATABASE_URL", default_value = "sqlite://gateway.db", value_name = "URL",
          value_parser = SecretValue(parse_database_url), hide_env_values = true, global = true)]
    pub database_url: DatabaseUrl,

    /// Bearer token of the operator API and UI. When absent, the token stored in the database is used: generated,
    /// stored (hashed) and printed once at the first start, replaced by `gateway admin-token rotate`.
    #[arg(long, env = "GATEWAY_ADMIN_TOKEN", value_name = "TOKEN", value_parser = SecretValue(parse_admin_token),
          hide_env_values = true)]
    pub admin_token: Option<AdminToken>,

    /// Eviction check period, in milliseconds.
    #[arg(long, env = "GATEWAY_HEARTBEAT_CHECK_INTERVAL_MS", value_name = "MS",
          default_value_t = millis(gateway_heartbeat::CHECK_INTERVAL), value_parser = at_most(INTERVAL_MS_CEILING))]
    pub heartbeat_check_interval_ms: u64,

    /// Silence, in seconds, after which an agent is evicted.
    #[arg(long, env = "GATEWAY_HEARTBEAT_EVICTION_THRESHOLD_S", value_name = "S",
          default_value_t = gateway_heartbeat::EVICTION_THRESHOLD.as_secs(),
          value_parser = at_most(EVICTION_THRESHOLD_S_CEILING))]
    pub heartbeat_eviction_threshold_s: u64,

    /// Hard cap of the in-memory liveness map.
    #[arg(long, env = "GATEWAY_MAX_TRACKED_AGENTS", value_name = "N",
          default_value_t = gateway_heartbeat::DEFAULT_MAX_TRACKED_AGENTS, value_parser = at_most_usize(MAX_TRACKED_AGENTS_CEILING))]
    pub max_tracked_agents: usize,

    /// Webhook retry poll period, in milliseconds [default: the webhook crate's POLL_INTERVAL, 5000].
    #[arg(long, env = "GATEWAY_WEBHOOK_POLL_INTERVAL_MS", value_name = "MS", value_parser = at_most(INTERVAL_MS_CEILING))]
    pub webhook_poll_interval_ms: Option<u64>,

    /// Thundering-herd cap: outbound webhook requests per poll cycle and in flight [default: DEFAULT_MAX_PER_CYCLE, 5].
    #[arg(long, env = "GATEWAY_WEBHOOK_MAX_PER_CYCLE", value_name = "N", value_parser = at_most_usize(WEBHOOK_MAX_PER_CYCLE_CEILING))]
    pub webhook_max_per_cycle: Option<usize>,

    /// Outbound webhook requests started in any one second, whatever started them: poll, immediate attempt,
    /// Retry now, inbound webhook (FR-10.12) [default: DEFAULT_MAX_PER_SECOND, 5].
    #[arg(long, env = "GATEWAY_WEBHOOK_MAX_PER_SECOND", value_name = "N", value_parser = at_most_usize(WEBHOOK_MAX_PER_SECOND_CEILING))]
    pub webhook_max_per_second: Option<usize>,

    /// Failed attempts in a row after which a webhook config is disabled (`failing`) and its deliveries held until
    /// it is enabled again; 0 never disables [default: DEFAULT_DISABLE_AFTER_FAILURES, 100].
    #[arg(long, env = "GATEWAY_WEBHOOK_DISABLE_AFTER_FAILURES", value_name = "N")]
    pub webhook_disable_after_failures: Option<u32>,

    /// Delays in seconds after failed attempts 1..5, comma-separated [default: RETRY_SCHEDULE,
    /// 30,120,600,3600,21600].
    #[arg(long, env = "GATEWAY_WEBHOOK_RETRY_SCHEDULE_S", value_name = "S,S,…", value_parser = parse_retry_schedule)]
    pub webhook_retry_schedule_s: Option<gateway_webhooks::RetrySchedule>,

    /// Time limit of one outbound webhook attempt, in milliseconds [default: 10000].
    #[arg(long, env = "GATEWAY_WEBHOOK_TIMEOUT_MS", value_name = "MS", value_parser = at_most(WEBHOOK_TIMEOUT_MS_CEILING))]
    pub webhook_timeout_ms: Option<u64>,

    /// Allow outbound webhook targets on loopback/private ranges (turns the SSRF guard off).
    #[arg(long, env = "GATEWAY_WEBHOOK_ALLOW_PRIVATE_TARGETS", value_name = "BOOL", num_args = 0..=1,
          default_value_t = false, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub webhook_allow_private_targets: bool,

    /// Delivered and dead webhook deliveries (with their attempts and idempotency keys), and agents' answered tool
    /// calls, older than this many days are pruned [default: 30].
    #[arg(long, env = "GATEWAY_RETENTION_DAYS", value_name = "DAYS",
          default_value_t = gateway_webhooks::RETENTION.as_secs() / 86_400, value_parser = at_most(RETENTION_DAYS_CEILING))]
    pub retention_days: u64,

    /// Fired reminders stay replayable to their agent's streams (and `GET /gateway/agents/{id}/reminders`) for
    /// this many hours, then are pruned [default: 72].
    #[arg(long, env = "GATEWAY_MAILBOX_RETENTION_H", value_name = "HOURS",
          default_value_t = gateway_cron::MAILBOX_RETENTION.as_secs() / 3_600,
          value_parser = at_most(MAILBOX_RETENTION_H_CEILING))]
    pub mailbox_retention_h: u64,
    /// Largest payload, serialized as JSON, of a reminder an agent asks for (a DecisionLog's schedule_reminder call
    /// or the schedule_reminder tool), in bytes.
    #[arg(long, env = "GATEWAY_REMINDER_PAYLOAD_MAX_BYTES", value_name = "BYTES",
          default_value_t = gateway_cron::DEFAULT_REMINDER_PAYLOAD_MAX_BYTES,
          value_parser = at_most_usize(gateway_cron::MAX_REMINDER_PAYLOAD_BYTES))]
    pub reminder_payload_max_bytes: usize,

    /// Most pending one-time reminders per agent; further ones it asks for are refused.
    #[arg(long, env = "GATEWAY_MAX_PENDING_REMINDERS_PER_AGENT", value_name = "N",
          default_value_t = gateway_cron::DEFAULT_MAX_PENDING_REMINDERS_PER_AGENT,
          value_parser = at_most_usize(gateway_cron::MAX_PENDING_REMINDERS_PER_AGENT))]
    pub max_pending_reminders_per_agent: usize,

    /// Most open agent event streams (`agent:<id>:scheduled`) from one client address. Agents behind one reverse
    /// proxy or NAT all come from its address: raise this there (the total stays 1,024).
    #[arg(long, env = "GATEWAY_AGENT_STREAMS_PER_ADDRESS", value_name = "N",
          default_value_t = gateway_auth::DEFAULT_STREAMS_PER_ADDRESS,
          value_parser = at_most_usize(gateway_auth::MAX_AGENT_STREAMS))]
    pub agent_streams_per_address: usize,

    // The edge (DESIGN.md 14, "Bodies before trust"; gateway-edge).
    /// Request-body bytes being read at once, process-wide: a declared Content-Length counts whole before the
    /// first byte, a chunked body as it arrives; a request that would pass it gets 503 `overloaded`. At least
    /// 1 MiB (one largest body).
    #[arg(long, env = "GATEWAY_MAX_INFLIGHT_BODY_BYTES", value_name = "BYTES",
          default_value_t = gateway_edge::DEFAULT_MAX_INFLIGHT_BODY_BYTES,
          value_parser = between_usize(crate::http::request::MAX_BODY_BYTES, usize::try_from(MAX_INFLIGHT_BODY_BYTES_CEILING).unwrap_or(usize::MAX)))]
    pub max_inflight_body_bytes: usize,

    /// Open connections from one client address (an IPv6 client: its /64); further ones get a 503 and are closed.
    /// Behind a reverse proxy every client has the proxy's address: raise it there (the total stays 10,000).
    #[arg(long, env = "GATEWAY_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N",
          default_value_t = gateway_edge::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
          value_parser = at_most_usize(gateway_edge::MAX_CONNECTIONS))]
    pub max_connections_per_address: usize,

    /// Log format.
    #[arg(long, env = "GATEWAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// redis://HOST:PORT/DB: coordination of several gateways on one PostgreSQL database (leader election, shared
    /// liveness, events and outbound rate). Refused with sqlite://.
    #[arg(long, env = "GATEWAY_REDIS_URL", value_name = "URL", value_parser = SecretValue(parse_redis_url),
          hide_env_values = true)]
    pub redis_url: Option<RedisUrl>,

    /// The secret every instance of a cluster shares (at least 32 bytes): each message between them over Redis is
    /// signed with it, and one that is not is dropped. Required with --redis-url. A value given here or in the
    /// environment can be read by the machine's administrators (/proc): prefer --cluster-secret-file.
    #[arg(long, env = "GATEWAY_CLUSTER_SECRET", value_name = "SECRET", value_parser = SecretValue(parse_cluster_secret),
          hide_env_values = true, conflicts_with = "cluster_secret_file")]
    pub cluster_secret: Option<ClusterSecret>,

    /// A file holding the cluster secret on its first line and, while a new secret is rolled out, the previous one
    /// (still accepted, never used to sign) on its second.
    #[arg(long, env = "GATEWAY_CLUSTER_SECRET_FILE", value_name = "PATH",
          value_parser = SecretValue(parse_cluster_secret_file))]
    pub cluster_secret_file: Option<ClusterSecretFile>,

    /// The previous cluster secret, still accepted from other instances (never used to sign) while a new one is
    /// rolled out (docs/operations.md, "The cluster secret").
    #[arg(long, env = "GATEWAY_CLUSTER_SECRET_PREVIOUS", value_name = "SECRET",
          value_parser = SecretValue(parse_cluster_secret), hide_env_values = true)]
    pub cluster_secret_previous: Option<ClusterSecret>,

    /// With a rediss:// --redis-url: a PEM file of the certificate authorities that sign Redis's certificate, in
    /// place of the system's trust store.
    #[arg(long, env = "GATEWAY_REDIS_CA_FILE", value_name = "PATH", value_parser = SecretValue(parse_pem_certificates))]
    pub redis_ca_file: Option<PemFile>,

    /// With a rediss:// --redis-url: a PEM client certificate (chain), for a Redis that requires one
    /// (`tls-auth-clients yes`, Redis's default); with --redis-client-key-file.
    #[arg(long, env = "GATEWAY_REDIS_CLIENT_CERT_FILE", value_name = "PATH",
          value_parser = SecretValue(parse_pem_certificates))]
    pub redis_client_cert_file: Option<PemFile>,

    /// The PEM private key of --redis-client-cert-file.
    #[arg(long, env = "GATEWAY_REDIS_CLIENT_KEY_FILE", value_name = "PATH",
          value_parser = SecretValue(parse_pem_private_key))]
    pub redis_client_key_file: Option<PemFile>,

    /// This process's name in the cluster [default: random at start].
    #[arg(long, env = "GATEWAY_INSTANCE_ID", value_name = "ID", value_parser = InstanceId::parse)]
    pub instance_id: Option<InstanceId>,

    /// Leader lease time-to-live with --redis-url, in milliseconds; renewal, step-down and retry times scale with
    /// it (10 s, 20 s and 2 s at the default). Shorter means faster failover for more Redis traffic.
    #[arg(long, env = "GATEWAY_LEADER_LEASE_TTL_MS", value_name = "MS",
          default_value_t = millis(gateway_redis::leadership::LEASE_TTL), value_parser = between(LEADER_LEASE_TTL_MS_FLOOR, LEADER_LEASE_TTL_MS_CEILING))]
    pub leader_lease_ttl_ms: u64,

    /// Whether agents must present their own token (heartbeats, messages, tool calls, their reminder stream):
    /// `auto` requires it unless --listen is a loopback address.
    #[arg(long, env = "GATEWAY_AGENT_AUTH", value_enum, default_value_t = AgentAuthMode::Auto)]
    pub agent_auth: AgentAuthMode,

    /// Messages and tool calls per agent per one-minute window; 0 turns the limit off.
    #[arg(long, env = "GATEWAY_AGENT_RATE_LIMIT_PER_MINUTE", value_name = "N",
          default_value_t = gateway_core::ports::rate_limit::AGENT_RATE_LIMIT_PER_MINUTE,
          value_parser = up_to_u32(AGENT_RATE_LIMIT_PER_MINUTE_CEILING))]
    pub agent_rate_limit_per_minute: u32,

    // Per-agent bounds (DESIGN §14: storage, streams).
    /// Most open agent event streams (`agent:<id>:scheduled`) of one agent on this instance, whatever addresses
    /// they come from; further ones get 429 `too_many_streams`.
    #[arg(long, env = "GATEWAY_AGENT_STREAMS_PER_AGENT", value_name = "N",
          default_value_t = gateway_auth::DEFAULT_STREAMS_PER_AGENT,
          value_parser = at_most_usize(gateway_auth::MAX_AGENT_STREAMS))]
    pub agent_streams_per_agent: usize,

    /// Most bytes one agent's stored rows may take: its recorded tool answers, its pending reminders and its
    /// mailbox (fired reminders kept --mailbox-retention-h), each row its JSON plus 128 bytes. A reminder or a
    /// tool answer past it is refused (429 `quota_exceeded`; a DecisionLog is accepted without its reminder).
    #[arg(long, env = "GATEWAY_AGENT_STORAGE_QUOTA_BYTES", value_name = "BYTES",
          default_value_t = gateway_cron::DEFAULT_AGENT_STORAGE_QUOTA_BYTES,
          value_parser = at_most(gateway_cron::MAX_AGENT_STORAGE_QUOTA_BYTES))]
    pub agent_storage_quota_bytes: u64,

    /// How often each instance writes the last use of the agent credentials it saw used (1 to 30 s): a listed
    /// `last_used_at` (to the minute) is at most this far behind. One statement per pass, never a write per request.
    #[arg(long, env = "GATEWAY_LAST_USE_INTERVAL_S", value_name = "S", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=30))]
    pub last_use_interval_s: u64,

    /// How often each instance adds what it counted to the hourly history (`GET /gateway/history`, the console's
    /// charts), in ms: one database transaction per flush, whatever the traffic.
    #[arg(long, env = "GATEWAY_HISTORY_FLUSH_INTERVAL_MS", value_name = "MS", default_value_t = crate::history::HISTORY_FLUSH_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub history_flush_interval_ms: u64,

    /// Event stream limits: not a flag (the constants in `gateway_pubsub::stream`), settable by embedders and by tests that
    /// cannot wait for the real ones.
    #[arg(skip)]
    pub stream_limits: gateway_pubsub::stream::StreamLimits,

    /// Without a command, the gateway serves.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What the binary does instead of serving.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Command {
    /// The operator token stored in the database (used by gateways started without --admin-token).
    #[command(subcommand)]
    AdminToken(AdminTokenCommand),
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum AdminTokenCommand {
    /// Generates a new admin token, stores its hash in place of the old one and prints it once. Running gateways
    /// that use the stored token refuse the old one within a second; works while they run.
    Rotate,
}

/// `--agent-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentAuthMode {
    /// Required unless the gateway listens on loopback only (like Redis's protected mode).
    Auto,
    Required,
    /// Open whatever the listener; on a non-loopback one a warning says so at start.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Config {
    /// Parses the command line and environment. Help and version print and exit 0; any bad value prints one line
    /// naming the flag and exits 2.
    pub fn from_args_or_exit() -> Self {
        match Self::try_parse().and_then(|config| config.checked()) {
            Ok(config) => config,
            Err(error) => match error.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    let _ = error.print();
                    std::process::exit(0);
                }
                _ => {
                    let rendered = error.render().to_string();
                    let line =
                        rendered.lines().find(|line| !line.trim().is_empty()).unwrap_or("error: invalid arguments");
                    #[allow(
                        clippy::print_stderr,
                        reason = "configuration errors go to the terminal before logging exists"
                    )]
                    {
                        eprintln!("{line}");
                    }
                    std::process::exit(2);
                }
            },
        }
    }

    /// What no single flag can check: combinations.
    fn checked(self) -> Result<Self, clap::Error> {
        if self.redis_url.is_some() && matches!(self.database_url, DatabaseUrl::Sqlite(_)) {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                "--redis-url: several gateways need a shared database, and sqlite:// is one process's file: use \
                 --database-url postgres://…\n",
            ));
        }
        let refuse = |line: &str| Err(clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{line}\n")));
        if self.redis_url.is_some() && self.cluster_secret.is_none() && self.cluster_secret_file.is_none() {
            return refuse(
                "--cluster-secret: required with --redis-url (at least 32 bytes shared by every instance, or \
                 --cluster-secret-file): Redis is not trusted to speak for an instance",
            );
        }
        match (&self.redis_client_cert_file, &self.redis_client_key_file) {
            (Some(_), None) => return refuse("--redis-client-key-file: required with --redis-client-cert-file"),
            (None, Some(_)) => return refuse("--redis-client-cert-file: required with --redis-client-key-file"),
            _ => {}
        }
        let tls = self.redis_url.as_ref().is_some_and(|url| url.expose().starts_with("rediss://"));
        for (given, flag) in [
            (self.redis_ca_file.is_some(), "--redis-ca-file"),
            (self.redis_client_cert_file.is_some(), "--redis-client-cert-file"),
        ] {
            if given && !tls {
                return refuse(&format!("{flag}: only with a rediss:// --redis-url (TLS)"));
            }
        }
        Ok(self)
    }

    /// The keys of the cluster's bridge messages (`--cluster-secret` or its file, and the previous secret); `None`
    /// without one.
    pub fn cluster_keys(&self) -> Option<Result<gateway_pubsub::bridge::ClusterKeys, String>> {
        let (secret, previous) = match (&self.cluster_secret, &self.cluster_secret_file) {
            (Some(secret), _) => (secret, self.cluster_secret_previous.as_ref()),
            (None, Some(file)) => (&file.secret, self.cluster_secret_previous.as_ref().or(file.previous.as_ref())),
            (None, None) => return None,
        };
        let keys = gateway_pubsub::bridge::ClusterKeys::new(secret.expose(), previous.map(ClusterSecret::expose));
        Some(keys.map_err(|error| error.to_string()))
    }

    /// The certificates of a rediss:// connection given by flags, `None` when none is (the system's trust store).
    pub fn redis_tls(&self) -> Option<redis::TlsCertificates> {
        let client_tls = match (&self.redis_client_cert_file, &self.redis_client_key_file) {
            (Some(cert), Some(key)) => {
                Some(redis::ClientTlsConfig { client_cert: cert.0.clone(), client_key: key.0.clone() })
            }
            _ => None,
        };
        let root_cert = self.redis_ca_file.as_ref().map(|ca| ca.0.clone());
        (client_tls.is_some() || root_cert.is_some()).then_some(redis::TlsCertificates { client_tls, root_cert })
    }

    /// `--instance-id`, or a random one (`gw-<hex>`) chosen once per process.
    pub fn instance_id(&self) -> InstanceId {
        self.instance_id.clone().unwrap_or_else(InstanceId::random)
    }

    /// Whether agents must authenticate: `--agent-auth required`, or `auto` on a listener other clients can reach.
    pub fn agent_auth_required(&self) -> bool {
        match self.agent_auth {
            AgentAuthMode::Required => true,
            AgentAuthMode::Off => false,
            AgentAuthMode::Auto => !self.listens_on_loopback(),
        }
    }

    /// `--agent-auth off` on a listener other machines can reach: anyone there can act as any agent.
    pub fn agent_auth_off_exposed(&self) -> bool {
        self.agent_auth == AgentAuthMode::Off && !self.listens_on_loopback()
    }

    /// Only this machine can connect (`127.0.0.0/8`, `::1`, also as an IPv4-mapped address); `0.0.0.0` and `::`
    /// listen on every interface.
    fn listens_on_loopback(&self) -> bool {
        self.listen.ip().to_canonical().is_loopback()
    }

    /// The edge's settings: the Host and Origin checks are on where agents need no token because only this
    /// machine can connect (`--agent-auth auto` on loopback), since a browser on this machine can connect too.
    /// `--agent-auth off` turns them off with the rest: it is the operator's word that something in front (a
    /// proxy that authenticates, forwarding its public name as Host) decides who gets in.
    pub fn edge(&self) -> gateway_edge::EdgeConfig {
        gateway_edge::EdgeConfig {
            loopback_rules: self.agent_auth == AgentAuthMode::Auto && self.listens_on_loopback(),
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            max_connections_per_address: self.max_connections_per_address,
        }
    }

    /// gateway-auth's settings: agent tokens as `--agent-auth` resolves against `--listen`, the operator token this
    /// start found, the per-agent limits.
    pub fn auth(&self, operator_token: gateway_auth::OperatorToken) -> gateway_auth::AuthConfig {
        gateway_auth::AuthConfig {
            agent_tokens_required: self.agent_auth_required(),
            operator_token,
            rate_limit_per_minute: self.agent_rate_limit_per_minute,
            streams_per_address: self.agent_streams_per_address,
            streams_per_agent: self.agent_streams_per_agent,
            max_agent_streams: gateway_auth::MAX_AGENT_STREAMS,
            credential_use_record_interval: Duration::from_secs(self.last_use_interval_s),
        }
    }

    /// `--agent-rate-limit-per-minute`, `None` when it is 0 (no limit).
    pub fn agent_rate_limit(&self) -> Option<u32> {
        (self.agent_rate_limit_per_minute > 0).then_some(self.agent_rate_limit_per_minute)
    }

    pub fn lease_timings(&self) -> gateway_redis::LeaseTimings {
        gateway_redis::LeaseTimings::with_ttl(Duration::from_millis(self.leader_lease_ttl_ms))
    }

    pub fn heartbeat(&self) -> gateway_heartbeat::HeartbeatConfig {
        gateway_heartbeat::HeartbeatConfig {
            eviction_threshold: Duration::from_secs(self.heartbeat_eviction_threshold_s),
            check_interval: Duration::from_millis(self.heartbeat_check_interval_ms),
            max_tracked_agents: self.max_tracked_agents,
        }
    }

    /// The webhook router's settings: each flag, or the webhook crate's constant when it is absent.
    pub fn webhook_router(&self) -> gateway_webhooks::RouterConfig {
        let defaults = gateway_webhooks::RouterConfig::default();
        gateway_webhooks::RouterConfig {
            poll_interval: self.webhook_poll_interval_ms.map_or(defaults.poll_interval, Duration::from_millis),
            max_per_cycle: self.webhook_max_per_cycle.unwrap_or(defaults.max_per_cycle),
            retry_schedule: self.webhook_retry_schedule_s.clone().unwrap_or(defaults.retry_schedule),
            attempt_timeout: self.webhook_attempt_timeout(),
            disable_after_failures: self.webhook_disable_after_failures.unwrap_or(defaults.disable_after_failures),
        }
    }

    /// `--webhook-max-per-second`, or the webhook crate's constant.
    pub fn webhook_max_per_second(&self) -> usize {
        self.webhook_max_per_second.unwrap_or(gateway_webhooks::DEFAULT_MAX_PER_SECOND)
    }

    /// How long finished deliveries are kept (`--retention-days`).
    pub fn retention(&self) -> gateway_webhooks::RetentionConfig {
        gateway_webhooks::RetentionConfig {
            retention: Duration::from_secs(self.retention_days.saturating_mul(86_400)),
            ..gateway_webhooks::RetentionConfig::default()
        }
    }

    /// The reminder mailbox's settings (`--mailbox-retention-h`).
    pub fn mailbox(&self) -> gateway_cron::MailboxConfig {
        gateway_cron::MailboxConfig {
            retention: Duration::from_secs(self.mailbox_retention_h.saturating_mul(3_600)),
            ..gateway_cron::MailboxConfig::default()
        }
    }

    /// The scheduler's settings: the crate's defaults, with the agent limits from their flags.
    pub fn cron(&self) -> gateway_cron::CronConfig {
        gateway_cron::CronConfig {
            reminder_payload_max_bytes: self.reminder_payload_max_bytes,
            max_pending_reminders_per_agent: self.max_pending_reminders_per_agent,
            agent_storage_quota_bytes: self.agent_storage_quota_bytes,
            ..gateway_cron::CronConfig::default()
        }
    }

    /// How long agents' answered tool calls are kept (`--retention-days`, as deliveries).
    pub fn tools(&self) -> gateway_cron::ToolConfig {
        gateway_cron::ToolConfig { retention: self.retention().retention, ..gateway_cron::ToolConfig::default() }
    }

    /// The outbound transport's settings (`--webhook-timeout-ms`, `--webhook-allow-private-targets`).
    pub fn webhook_transport(&self) -> gateway_webhooks::TransportSettings {
        gateway_webhooks::TransportSettings {
            timeout: self.webhook_attempt_timeout(),
            allow_private_targets: self.webhook_allow_private_targets,
            max_in_flight: self.webhook_router().max_per_cycle,
        }
    }

    fn webhook_attempt_timeout(&self) -> Duration {
        self.webhook_timeout_ms.map_or(gateway_webhooks::ATTEMPT_TIMEOUT, Duration::from_millis)
    }
}
