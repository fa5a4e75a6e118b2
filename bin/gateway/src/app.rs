//! Wiring: concrete adapters handed to the components, their loops spawned under a supervisor, and stopped again
//! on shutdown.

use std::sync::Arc;

use gateway_auth::{Auth, AuthPorts, OperatorToken};
use gateway_core::{
    CapabilityMap, Clock, DecisionLogIntake, DispatchRate, EndpointRate, EventPublisher, HeartbeatStore,
    InMemoryCapabilityMap, InMemoryLiveness, InProcessEndpointRate, IntakePorts, Leadership, LivenessMap, RateLimiter,
    SlidingWindowRate, SoleLeadership, SystemClock, supervise_loop,
};
use gateway_cron::{
    CronPorts, CronScheduler, Mailbox, MailboxFeed, MailboxFeedConfig, MailboxFeedPorts, MailboxPorts, ReminderTools,
    ToolPorts,
};
use gateway_heartbeat::{HeartbeatManager, HeartbeatPorts};
use gateway_pubsub::Bus;
use gateway_pubsub::bridge::{BridgeConfig, BridgePorts, RedisBridge};
use gateway_redis::{
    LeadershipConfig, LeadershipPorts, LimiterConfig, RateConfig, RedisDispatchRate, RedisLeadership, RedisMembers,
    RedisRateLimiter,
};
use gateway_store::{DieselStore, OpenError, PeriodicThread, SharedLiveness};
use gateway_webhooks::{DeliveryRetention, RetentionPorts, RouterPorts, UreqTransport, WebhookRouter};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::StartError;
use crate::cluster::{Cluster, JobAnnouncements, RevocationAnnouncements};
use crate::config::Config;
use crate::http::events::MAX_OPERATOR_EVENT_STREAMS;
use crate::state::AppState;
use crate::stats::Metrics;

/// At shutdown, webhook attempts in flight get their timeout plus this to finish and record their outcome.
pub(crate) const WEBHOOK_DRAIN_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The running application: shared state plus its background loops.
#[derive(Debug)]
pub(crate) struct App {
    state: Arc<AppState>,
    loops: JoinSet<()>,
    /// The loops' own stop signal, cancelled only after HTTP has drained: a request still in flight when
    /// shutdown begins must find the components running.
    stop_loops: CancellationToken,
    /// The store's own threads (SQLite's WAL checkpoints, the shared liveness map's writes); stopped (by drop)
    /// after the loops, before the store closes.
    store_threads: Vec<PeriodicThread>,
}

impl App {
    /// Builds the components on `store` and spawns their loops. `shutdown` ends the HTTP side (event streams
    /// included); the loops run until [`App::stop`].
    pub(crate) fn start(
        config: &Config,
        store: DieselStore,
        operator_token: OperatorToken,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        if config.webhook_allow_private_targets {
            tracing::warn!(
                "--webhook-allow-private-targets is set: the SSRF guard is off, and outbound webhooks may reach \
                 loopback, private and link-local addresses (cloud metadata included)"
            );
        }
        announce_agent_auth(config);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let bus = Bus::default();
        let stop_loops = CancellationToken::new();
        let mut loops = JoinSet::new();
        let coordination = Coordination::new(config, &store, &bus, &clock)?;
        let mut threads = Vec::new();
        let bridge_status = coordination.redis.as_ref().map(|redis| redis.bridge.status());
        let bridge = coordination.redis.as_ref().map(|redis| redis.bridge.clone());
        let auth = Auth::new(
            AuthPorts {
                credentials: Arc::new(store.clone()),
                admin_tokens: Arc::new(store.clone()),
                publisher: Arc::clone(&coordination.publisher),
                limiter: coordination.limiter.clone(),
                clock: Arc::clone(&clock),
            },
            config.auth(operator_token),
        );
        loops.spawn(supervise_loop(auth.clone(), stop_loops.clone()));
        // Revocations announced by any instance (this one's included) reach the credential cache through the bus.
        let announcements = RevocationAnnouncements {
            bus: bus.clone(),
            auth: auth.clone(),
            bridge: coordination.redis.as_ref().map(|redis| redis.bridge.status()),
        };
        loops.spawn(supervise_loop(announcements, stop_loops.clone()));
        if let Some(redis) = coordination.redis {
            // Leadership ends with the HTTP side, not after its drain: a leader told to stop gives the lease back
            // at once (compare-and-delete), so a follower takes over within its acquire interval while requests
            // still in flight here finish (up to the 30 s grace). The leader-only loops see no term from then on
            // and stop their timed work; the new term takes over their claims at once.
            loops.spawn(supervise_loop(redis.leadership, shutdown.clone()));
            // Leaves the registry with the lease: an instance that is stopping is no longer a member.
            loops.spawn(supervise_loop(redis.members, shutdown.clone()));
            loops.spawn(supervise_loop(redis.bridge, stop_loops.clone()));
            threads.push(redis.flusher);
        }
        let Coordination {
            leadership,
            publisher,
            rate,
            liveness,
            heartbeats,
            capabilities,
            cluster,
            endpoint_rate,
            ..
        } = coordination;
        let heartbeat = HeartbeatManager::new(
            HeartbeatPorts {
                liveness,
                store: heartbeats,
                capabilities,
                publisher: Arc::clone(&publisher),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.heartbeat(),
        );
        let cron = CronScheduler::new(
            CronPorts {
                store: Arc::new(store.clone()),
                storage: Arc::new(store.clone()),
                publisher: Arc::clone(&publisher),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.cron(),
        );
        let mailbox = Mailbox::new(
            MailboxPorts {
                store: Arc::new(store.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.mailbox(),
        );
        let tools = ReminderTools::new(
            ToolPorts {
                scheduler: cron.clone(),
                calls: Arc::new(store.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.tools(),
        );
        let intake = DecisionLogIntake::new(IntakePorts {
            reminders: Arc::new(cron.clone()),
            capabilities: Arc::new(heartbeat.clone()),
            publisher: Arc::clone(&publisher),
            clock: Arc::clone(&clock),
        });
        let webhooks = WebhookRouter::with_endpoint_rate(
            RouterPorts {
                store: Arc::new(store.clone()),
                transport: Arc::new(UreqTransport::new(config.webhook_transport())),
                publisher: Arc::clone(&publisher),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
                rate,
            },
            config.webhook_router(),
            endpoint_rate,
        );

        let retention = DeliveryRetention::new(
            RetentionPorts {
                store: Arc::new(store.clone()),
                clock: Arc::clone(&clock),
                leadership: Arc::clone(&leadership),
            },
            config.retention(),
        );

        if config.redis_url.is_some() {
            let announcements = JobAnnouncements { bus: bus.clone(), cron: cron.clone() };
            loops.spawn(supervise_loop(announcements, stop_loops.clone()));
        }
        // With several instances every fire reaches the streams of every instance through the store, whatever Redis
        // lost (docs/architecture.md, "Durable events across instances"); the bridge is the fast path.
        let feed = bridge.as_ref().map(|bridge| {
            let ports =
                MailboxFeedPorts { store: Arc::new(store.clone()), publisher: Arc::new(bridge.local_delivery()) };
            MailboxFeed::new(ports, MailboxFeedConfig::default())
        });
        if let Some(feed) = &feed {
            loops.spawn(supervise_loop(feed.clone(), stop_loops.clone()));
        }
        loops.spawn(supervise_loop(heartbeat.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(webhooks.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(cron.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(retention.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(mailbox.clone(), stop_loops.clone()));
        loops.spawn(supervise_loop(tools.clone(), stop_loops.clone()));
        let history = crate::history::HistoryRecorder::new(
            Arc::new(store.clone()),
            Arc::clone(&clock),
            crate::history::HistorySources {
                heartbeat: heartbeat.clone(),
                webhooks: webhooks.clone(),
                cron: cron.clone(),
            },
            std::time::Duration::from_millis(config.history_flush_interval_ms),
        );
        loops.spawn(supervise_loop(history, stop_loops.clone()));

        threads.push(store.start_wal_checkpointer(gateway_store::CHECKPOINT_INTERVAL).map_err(StartError::Thread)?);
        let state = AppState {
            auth,
            store,
            bus,
            bridge_status,
            bridge,
            feed,
            heartbeat,
            webhooks,
            cron,
            mailbox,
            intake,
            tools,
            mcp: gateway_mcp::McpServer::new("agent-gateway", env!("CARGO_PKG_VERSION")),
            mcp_tools: crate::http::mcp_tool_descriptors(),
            retention,
            cluster,
            clock,
            shutdown,
            operator_event_streams: Arc::new(Semaphore::new(MAX_OPERATOR_EVENT_STREAMS)),
            shared_fires: Arc::default(),
            stream_limits: config.stream_limits.replaying_payloads_up_to(config.reminder_payload_max_bytes),
            edge: gateway_edge::Edge::new(config.edge()),
            metrics: Metrics::new(crate::http::ROUTE_NAMES),
        };
        Ok(Self { state: Arc::new(state), loops, stop_loops, store_threads: threads })
    }

    pub(crate) fn state(&self) -> Arc<AppState> {
        Arc::clone(&self.state)
    }

    /// Stops the loops and waits for each to finish.
    pub(crate) async fn stop(mut self) {
        self.stop_loops.cancel();
        while let Some(outcome) = self.loops.join_next().await {
            if let Err(error) = outcome {
                tracing::error!(%error, "a background loop's supervisor ended abnormally");
            }
        }
        // Webhook attempts in flight finish (each is bounded by its timeout) and record their outcome before the
        // store goes away; one still running past that is due again when its claim ends.
        let webhooks = &self.state.webhooks;
        let drain = webhooks.router_config().attempt_timeout + WEBHOOK_DRAIN_MARGIN;
        if tokio::time::timeout(drain, webhooks.wait_idle()).await.is_err() {
            tracing::warn!("webhook attempts still running at shutdown; they will be retried after restart");
        }
        self.store_threads.clear();
    }
}

/// How this instance shares its work with others: alone, or through Redis (leadership, events, the outbound rate)
/// and the shared database (liveness).
struct Coordination {
    leadership: Arc<dyn Leadership>,
    /// What the components publish through: the bus, or the bridge that also hands events to other instances.
    publisher: Arc<dyn EventPublisher>,
    rate: Arc<dyn DispatchRate>,
    /// The per-agent limit of messages and tool calls shared through Redis; `None` without Redis (gateway-auth
    /// then counts in this process) or when the limit is off.
    limiter: Option<Arc<dyn RateLimiter>>,
    liveness: Arc<dyn LivenessMap>,
    /// Where heartbeat rows go: the store, or with a shared liveness map that map, which writes them in the
    /// transaction of their receipts.
    heartbeats: Arc<dyn HeartbeatStore>,
    capabilities: Arc<dyn CapabilityMap>,
    cluster: Cluster,
    /// The loops coordination needs, with Redis.
    redis: Option<RedisLoops>,
    /// Each webhook endpoint's own rate: shared through Redis as `rate` is (and falling back with it), else in
    /// this process.
    endpoint_rate: Arc<dyn EndpointRate>,
}

struct RedisLoops {
    leadership: RedisLeadership,
    /// Records this instance in the cluster's member registry; leaves it at shutdown.
    members: RedisMembers,
    bridge: RedisBridge,
    /// Writes the shared liveness map's kept entries; stopped (by drop) after the loops, before the store closes.
    flusher: PeriodicThread,
}

impl Coordination {
    fn new(config: &Config, store: &DieselStore, bus: &Bus, clock: &Arc<dyn Clock>) -> Result<Self, StartError> {
        let heartbeat = config.heartbeat();
        let instance_id = config.instance_id();
        let Some(redis_url) = &config.redis_url else {
            // Newer than the store's epoch: a database a cluster ran on has one above 1, under which token 1's
            // leader-only writes would all be refused as fenced.
            let leadership = SoleLeadership::newer_than(store)
                .map_err(|error| StartError::Store(OpenError::Connect(format!("read the fencing epoch: {error}"))))?;
            let epoch = leadership.current().map_or(1, |token| token.0);
            return Ok(Self {
                leadership: Arc::new(leadership),
                publisher: Arc::new(bus.clone()),
                rate: Arc::new(SlidingWindowRate::per_second(config.webhook_max_per_second())),
                limiter: None,
                liveness: Arc::new(InMemoryLiveness::new(heartbeat.max_tracked_agents)),
                heartbeats: Arc::new(store.clone()),
                capabilities: Arc::new(InMemoryCapabilityMap::new(heartbeat.max_tracked_agents)),
                cluster: Cluster::Single { instance_id, since: clock.now(), epoch },
                redis: None,
                endpoint_rate: Arc::new(InProcessEndpointRate::per_second()),
            });
        };
        // Connects lazily: Redis need not be up for the gateway to start and serve.
        let client = match config.redis_tls() {
            None => redis::Client::open(redis_url.expose()),
            Some(certificates) => redis::Client::build_with_tls(redis_url.expose(), certificates),
        }
        .map_err(|error| StartError::Redis(error.to_string()))?;
        let keys = config
            .cluster_keys()
            .unwrap_or_else(|| Err("--cluster-secret is required with --redis-url".to_owned()))
            .map_err(StartError::Redis)?;
        let leadership = RedisLeadership::new(
            LeadershipPorts { redis: client.clone(), epoch: Arc::new(store.clone()) },
            LeadershipConfig { instance_id: instance_id.to_string(), timings: config.lease_timings() },
        )
        .map_err(|error| StartError::Redis(error.to_string()))?;
        let bridge = RedisBridge::new(
            BridgePorts { bus: bus.clone(), redis: client.clone(), clock: Arc::clone(clock) },
            BridgeConfig::new(instance_id.as_str(), keys),
        )
        .map_err(|error| StartError::Redis(error.to_string()))?;
        let limiter = match config.agent_rate_limit() {
            None => None,
            Some(limit) => {
                let runtime = tokio::runtime::Handle::current();
                let limiter = RedisRateLimiter::new(client.clone(), runtime, LimiterConfig::per_minute(limit))
                    .map_err(|error| StartError::Redis(error.to_string()))?;
                Some(Arc::new(limiter) as Arc<dyn RateLimiter>)
            }
        };
        let members = RedisMembers::new(
            client.clone(),
            &leadership,
            crate::cluster::VERSION,
            clock.now(),
            config.lease_timings(),
        );
        let rate = RedisDispatchRate::new(
            client,
            RateConfig::per_second(instance_id.as_str(), config.webhook_max_per_second()),
        )
        .map_err(|error| StartError::Redis(error.to_string()))?;
        let endpoint_rate = Arc::new(rate.endpoint_rate());
        let shared = SharedLiveness::new(store.clone(), heartbeat.max_tracked_agents);
        let flusher = shared.start_flusher().map_err(StartError::Thread)?;
        Ok(Self {
            leadership: Arc::new(leadership.clone()),
            publisher: Arc::new(bridge.clone()),
            rate: Arc::new(rate),
            limiter,
            liveness: Arc::new(shared.clone()),
            heartbeats: Arc::new(shared.clone()),
            capabilities: Arc::new(shared),
            cluster: Cluster::Redis { leadership: leadership.clone(), members: members.clone(), since: clock.now() },
            redis: Some(RedisLoops { leadership, members, bridge, flusher }),
            endpoint_rate,
        })
    }
}

/// Says at start who may act as an agent; `--agent-auth off` where other machines can connect is a warning.
fn announce_agent_auth(config: &Config) {
    if config.agent_auth_off_exposed() {
        tracing::warn!(
            listen = %config.listen,
            "--agent-auth off on a listener other machines can reach: anyone who can connect can send heartbeats, \
             messages and tool calls as any agent and read any agent's reminders"
        );
    } else if config.agent_auth_required() {
        tracing::info!(mode = ?config.agent_auth, "agent auth required: agents present their own tokens");
    } else {
        tracing::info!(mode = ?config.agent_auth, listen = %config.listen, "agent auth off");
    }
}
