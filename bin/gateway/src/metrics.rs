//! `GET /metrics`: the gateway's series in the Prometheus text format (docs/operations.md, "Metrics").
//!
//! Nothing here is a metric object that the hot paths update through a registry: the components count in plain atomics
//! of their own (`gateway_core::runtime::stats`), the router counts requests in a fixed table of histograms indexed by
//! route and status, and a scrape reads all of it through one [`Collector`] that prometheus-client encodes. Gauges that
//! need the database (pending jobs, dead letters, due backlog) are counted at scrape time, at most once per
//! [`STORE_GAUGES_MAX_AGE`], however many scrapes come.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::runtime::stats::HistogramSnapshot;
use gateway_core::{CronJobStore, DeliveryStatus, RunOutcome, StoreError, WebhookStore, run_blocking};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::cluster::{Cluster, Role};
use crate::http::events::MAX_OPERATOR_EVENT_STREAMS;
use crate::state::AppState;
use crate::stats::StoreGauges;

mod exposition;

pub(crate) use exposition::Exposition;

/// The prefix of every series.
pub(crate) const PREFIX: &str = "gateway";
/// The database gauges are counted again only when a scrape finds them older than this.
pub(crate) const STORE_GAUGES_MAX_AGE: Duration = Duration::from_secs(1);
/// A count that takes longer than this is left out of the scrape (the other series are still served).
pub(crate) const STORE_GAUGES_TIMEOUT: Duration = Duration::from_secs(2);

/// How the document shows `GET /metrics` (the route table, http/routes.rs, names it).
pub(crate) fn doc() -> gateway_api::openapi::Operation {
    gateway_api::openapi::Operation::new("metrics", "operator", "The Prometheus scrape")
        .describe("Requests, heartbeats, fires, deliveries, streams and the leader role (docs/operations.md).")
        .raw_answer(
            200,
            serde_json::json!({
                "description": "The OpenMetrics text exposition, or the classic Prometheus text format when the \
                                `Accept` header prefers `text/plain` (`version=0.0.4`).",
                "content": {
                    "application/openmetrics-text": {"schema": {"type": "string"}},
                    "text/plain": {"schema": {"type": "string"}},
                },
            }),
        )
}

/// `GET /metrics` in the format the scrape's `Accept` header prefers.
pub(crate) async fn response(
    state: &Arc<AppState>,
    accept: Option<&http::HeaderValue>,
) -> crate::http::response::Response {
    let format = Exposition::negotiate(accept);
    let openmetrics = scrape(state).await;
    let body = match format {
        Exposition::OpenMetrics => openmetrics,
        Exposition::Classic => exposition::classic_from_openmetrics(&openmetrics),
    };
    let mut response = crate::http::response::text_response(format.content_type(), body);
    // Caches between the scraper and us must keep the two formats apart.
    response.headers_mut().insert(http::header::VARY, http::HeaderValue::from_static("accept"));
    response
}

/// The OpenMetrics body of `GET /metrics`.
async fn scrape(state: &Arc<AppState>) -> String {
    let store = store_gauges(state).await;
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Scrape { state: Arc::clone(state), store }));
    let mut body = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail, and every value the collector encodes is a number or a fixed label.
    if let Err(error) = prometheus_client::encoding::text::encode(&mut body, &registry) {
        tracing::error!(%error, "metrics not encoded");
    }
    body
}

/// The database gauges, counted again if the last count is older than [`STORE_GAUGES_MAX_AGE`]; `None` when the
/// store does not answer in time (the scrape then leaves those series out, and the next scrape asks again).
async fn store_gauges(state: &Arc<AppState>) -> Option<StoreGauges> {
    let mut cached = state.metrics.store_gauges.lock().await;
    if let Some((at, gauges)) = *cached
        && at.elapsed() < STORE_GAUGES_MAX_AGE
    {
        return Some(gauges);
    }
    let store = state.store.clone();
    let now = state.clock.now();
    let count = async move {
        run_blocking(move || {
            Ok::<_, StoreError>(StoreGauges {
                pending_jobs: store.count_cron_jobs()?,
                dead_letters: store.count_deliveries(DeliveryStatus::Dead)?,
                due_backlog: store.count_due_deliveries(now)?,
            })
        })
        .await
        .map_err(StoreError::from)?
    };
    match tokio::time::timeout(STORE_GAUGES_TIMEOUT, count).await {
        Ok(Ok(gauges)) => {
            *cached = Some((Instant::now(), gauges));
            Some(gauges)
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "metrics: the store's gauges are not counted");
            None
        }
        Err(_) => {
            tracing::warn!("metrics: the store did not count its gauges in time");
            None
        }
    }
}

/// One scrape's view: the live counters of the state, and the database gauges read for it.
#[derive(Debug)]
struct Scrape {
    state: Arc<AppState>,
    store: Option<StoreGauges>,
}

type Encoded = Result<(), std::fmt::Error>;

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Encoded {
        let state = &self.state;
        let seconds = Some(&Unit::Seconds);

        let mut requests = encoder.encode_descriptor(
            "http_requests",
            "HTTP requests answered, by route (the router's name for it; `unmatched` for paths that name none) and \
             status",
            None,
            MetricType::Counter,
        )?;
        for (route, status, cell) in state.metrics.http.used() {
            ConstCounter::new(cell.count())
                .encode(requests.encode_family(&[("route", route), ("status", status.as_str())])?)?;
        }
        let mut latency = encoder.encode_descriptor(
            "http_request_duration",
            "Time from a request's head to its response's head, by route and status",
            seconds,
            MetricType::Histogram,
        )?;
        for (route, status, cell) in state.metrics.http.used() {
            histogram(latency.encode_family(&[("route", route), ("status", status.as_str())])?, &cell.snapshot())?;
        }

        let edge = &state.edge;
        gauge(
            &mut encoder,
            "request_body_bytes_in_flight",
            "Request-body bytes reserved by the bodies being read (at most --max-inflight-body-bytes)",
            as_i64(edge.bodies.in_flight()),
        )?;
        counter(
            &mut encoder,
            "request_bodies_refused",
            "Requests refused with 503 overloaded: their body would have passed --max-inflight-body-bytes",
            edge.bodies.refused(),
        )?;
        counter(
            &mut encoder,
            "connections_refused",
            "Connections refused because their client address held --max-connections-per-address",
            edge.connections.refused(),
        )?;

        let heartbeat = state.heartbeat.stats();
        counter(
            &mut encoder,
            "heartbeats_accepted",
            "Heartbeats accepted (their row committed)",
            heartbeat.accepted.get(),
        )?;
        gauge(
            &mut encoder,
            "agents_live",
            "Agents in the liveness map (heartbeating within the eviction threshold)",
            as_i64(state.heartbeat.tracked_count()),
        )?;
        counter(&mut encoder, "agents_evicted", "Agents evicted by this instance's checks", heartbeat.evicted.get())?;
        let passes = encoder.encode_descriptor(
            "agent_eviction_pass_duration",
            "How long each eviction pass of this instance took, its announcements included (only the leader evicts)",
            seconds,
            MetricType::Histogram,
        )?;
        histogram(passes, &heartbeat.eviction_passes.snapshot())?;

        let cron = state.cron.stats();
        counter(
            &mut encoder,
            "cron_fires",
            "Reminders and cron jobs fired (published) by this instance",
            cron.fired.get(),
        )?;
        let lateness = encoder.encode_descriptor(
            "cron_fire_lateness",
            "How late each fire was published: its publication time minus the instant it was scheduled for",
            seconds,
            MetricType::Histogram,
        )?;
        histogram(lateness, &cron.lateness.snapshot())?;
        let mut runs = encoder.encode_descriptor(
            "cron_runs",
            "Instants of cron jobs and reminders settled by this instance, by outcome (fired: published; \
             skipped_misfire: missed and not fired, the job's policy is skip; skipped_late: a reminder later than its \
             max_lateness_ms, not delivered)",
            None,
            MetricType::Counter,
        )?;
        for (outcome, count) in [
            (RunOutcome::Fired, &cron.fired),
            (RunOutcome::SkippedMisfire, &cron.skipped_misfire),
            (RunOutcome::SkippedLate, &cron.skipped_late),
        ] {
            ConstCounter::new(count.get()).encode(runs.encode_family(&[("outcome", outcome.as_str())])?)?;
        }

        let deliveries = state.webhooks.stats();
        let mut outcomes = encoder.encode_descriptor(
            "webhook_deliveries",
            "Webhook attempts recorded by this instance, by the state they left their delivery in (delivered, \
             failed_retrying: another attempt is scheduled, dead: none is)",
            None,
            MetricType::Counter,
        )?;
        for (outcome, count) in [
            ("delivered", &deliveries.delivered),
            ("failed_retrying", &deliveries.failed_retrying),
            ("dead", &deliveries.dead),
        ] {
            ConstCounter::new(count.get()).encode(outcomes.encode_family(&[("outcome", outcome)])?)?;
        }
        counter(
            &mut encoder,
            "webhook_attempts",
            "Outbound webhook attempts made by this instance",
            deliveries.attempts.get(),
        )?;
        counter(
            &mut encoder,
            "webhook_inbound_duplicates",
            "Inbound webhooks answered duplicate (the same request accepted within 24 h): nothing stored",
            deliveries.inbound_duplicates.get(),
        )?;
        counter(
            &mut encoder,
            "webhook_config_id_reads",
            "Reads of the webhook config ids made because an inbound request named an id this instance did not \
             know (at most one a second, however many unknown ids arrive)",
            deliveries.config_id_reads.get(),
        )?;
        let mut enqueued = encoder.encode_descriptor(
            "webhook_enqueued",
            "New webhook deliveries written by this instance, by whether they were written already claimed for an \
             attempt that started at once (claimed: insert and record are their only commits) or not (unclaimed: a \
             claim commit more, or a poll)",
            None,
            MetricType::Counter,
        )?;
        for (path, count) in [("claimed", &deliveries.enqueued_claimed), ("unclaimed", &deliveries.enqueued_unclaimed)]
        {
            ConstCounter::new(count.get()).encode(enqueued.encode_family(&[("path", path)])?)?;
        }

        if let Some(store) = self.store {
            gauge(
                &mut encoder,
                "cron_jobs_pending",
                "Cron jobs and reminders stored, each waiting for its next fire (the whole cluster's)",
                as_i64(store.pending_jobs),
            )?;
            gauge(
                &mut encoder,
                "webhook_dead_letters",
                "Webhook deliveries in the dead state, waiting for an operator's retry (the whole cluster's)",
                as_i64(store.dead_letters),
            )?;
            gauge(
                &mut encoder,
                "webhook_due_backlog",
                "Webhook deliveries whose next attempt is due now or earlier and has not started (the whole \
                 cluster's)",
                as_i64(store.due_backlog),
            )?;
        }

        gauge(
            &mut encoder,
            "mcp_sessions",
            "MCP sessions this instance holds (`/mcp`; their server streams count with the agent streams)",
            as_i64(state.mcp.session_count()),
        )?;

        let mut streams = encoder.encode_descriptor(
            "sse_streams_open",
            "Open event streams, by scope (agent: agent:<id>:scheduled; operator: gateway:*)",
            None,
            MetricType::Gauge,
        )?;
        let open = |total: usize, free: usize| as_i64(total.saturating_sub(free));
        for (scope, count) in [
            ("agent", as_i64(state.auth.open_agent_streams())),
            ("operator", open(MAX_OPERATOR_EVENT_STREAMS, state.operator_event_streams.available_permits())),
        ] {
            ConstGauge::new(count).encode(streams.encode_family(&[("scope", scope)])?)?;
        }
        counter(
            &mut encoder,
            "sse_lagged_events",
            "Events that event streams could not deliver to their client (it read too slowly, or the bus overflowed)",
            state.metrics.lagged_events.get(),
        )?;

        let credentials = state.auth.credentials();
        counter(
            &mut encoder,
            "agent_credential_reads",
            "Agent credentials read from the database because the cache had no answer (a request's first use of a \
             credential, an entry aged out, or a made-up credential id)",
            credentials.store_reads(),
        )?;
        gauge(
            &mut encoder,
            "agent_credentials_cached",
            "Verified agent credentials this instance holds in memory",
            as_i64(credentials.len()),
        )?;

        let role = state.cluster.role();
        gauge(
            &mut encoder,
            "leader",
            "1 while this instance leads (runs the timed work: cron, evictions, the webhook poll), else 0",
            i64::from(matches!(role, Role::Leader | Role::Single)),
        )?;
        gauge(
            &mut encoder,
            "leader_epoch",
            "The fencing token (term) this instance leads under; 0 while it does not lead",
            state.cluster.epoch().map_or(0, |epoch| i64::try_from(epoch).unwrap_or(i64::MAX)),
        )?;
        if let Cluster::Redis { leadership, .. } = &state.cluster {
            counter(
                &mut encoder,
                "leader_epoch_refusals",
                "Times this instance refused to lead under the epoch counter Redis holds (not a number, more than 2^32 \
                 above the store's newest token, or about to overflow): see docs/operations.md, \"Leader epoch \
                 recovery\"",
                leadership.epoch_refusals(),
            )?;
        }
        if let Some(bridge) = &state.bridge {
            let bridge = bridge.counters();
            counter(
                &mut encoder,
                "bridge_rejected",
                "Messages on the event bridge's Redis channels dropped unread: a MAC that does not verify (not sent by \
                 an instance with this cluster secret, or altered), another wire version, too old, or too large",
                bridge.rejected,
            )?;
            counter(
                &mut encoder,
                "bridge_send_failed",
                "Events this instance could not publish on Redis (other instances get the durable ones from the store)",
                bridge.send_failed,
            )?;
            counter(
                &mut encoder,
                "reminders_recovered",
                "Fired reminders this instance's streams got from the mailbox feed because the event bridge had not \
                 delivered them (lost or late on Redis)",
                bridge.recovered,
            )?;
        }
        if let Some(feed) = &state.feed {
            counter(
                &mut encoder,
                "mailbox_feed_reads",
                "Reads of the reminder mailbox by this instance's feed (one a second, more while it catches up)",
                feed.stats().reads,
            )?;
        }
        Ok(())
    }
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> Encoded {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Encoded {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn histogram(mut encoder: MetricEncoder<'_>, snapshot: &HistogramSnapshot) -> Encoded {
    // prometheus-client takes each bucket's own count and writes their running sums; the last bucket, whose bound
    // `f64::MAX` it writes as `+Inf`, holds what is above every bound.
    let mut below = 0;
    let mut buckets: Vec<(f64, u64)> = snapshot
        .buckets
        .iter()
        .map(|&(bound, cumulative)| {
            let own = cumulative.saturating_sub(below);
            below = cumulative;
            (bound, own)
        })
        .collect();
    buckets.push((f64::MAX, snapshot.count.saturating_sub(below)));
    encoder.encode_histogram::<NoLabelSet>(snapshot.sum_seconds, snapshot.count, &buckets, None)
}

fn as_i64(count: impl TryInto<i64>) -> i64 {
    count.try_into().unwrap_or(i64::MAX)
}
