//! Every route of the gateway, declared once: its metrics label, its path, and per method who may call it, its
//! handler and the function that documents it. The router (http/router.rs), the metrics' route labels and
//! `/openapi.json` (http/openapi, built by gateway-api) are all derived from this table, so they cannot disagree;
//! adding a route is an entry here, its handler, and its operation (a `…_doc` function in gateway-api, `api::`
//! below, beside the endpoint's bodies). [`declare_routes!`] says what an entry may hold.
//!
//! The order is the order of the metrics' route labels (and so of their series): new routes go at the end.

use std::future::ready;

use gateway_api as api;

use crate::http::error::ApiError;
use crate::http::route_table::declare_routes;
use crate::http::{
    agents, console, credentials, cron, events, health, heartbeat, history, mcp, messages, openapi, reminders, tools,
    webhooks,
};
use crate::metrics;
use gateway_api::Reason;

fn unknown_webhook() -> ApiError {
    ApiError::unknown(Reason::UnknownWebhook, "webhook config")
}

fn unknown_delivery() -> ApiError {
    ApiError::unknown(Reason::UnknownDelivery, "delivery")
}

fn unknown_job() -> ApiError {
    ApiError::unknown(Reason::UnknownCronJob, "cron job")
}

declare_routes! {
    // The request's `Call`, in every handler below.
    call c;

    /// `POST /gateway/heartbeat`: an agent's heartbeat (FR-10.1..10.4).
    Heartbeat "heartbeat" exact "/gateway/heartbeat" {
        POST Agent inline => heartbeat::post(&c.state, c.request, c.client), api::heartbeat::doc;
    }
    /// `POST /gateway/messages`: a DecisionLog.
    Messages "messages" exact "/gateway/messages" {
        POST Agent inline => messages::post(&c.state, c.request, c.client), api::messages::doc;
    }
    /// `GET /gateway/events?topic=`: Server-Sent Events of one topic.
    Events "events" exact "/gateway/events" {
        GET AgentOrOperator stream => {
            let connection = c.connection()?;
            events::get(&c.state, &c.request, connection)
        }, events::doc;
    }
    /// `GET /gateway/agents`: live agents.
    Agents "agents" exact "/gateway/agents" {
        GET Operator => agents::list(&c.state, &c.request), api::agents::list_doc;
    }
    /// `GET /healthz`: liveness.
    Healthz "healthz" exact "/healthz" {
        GET Open => ready(Ok(health::live())), health::live_doc;
    }
    /// `GET /readyz`: readiness.
    Readyz "readyz" exact "/readyz" {
        GET OptionalOperator => async { Ok(health::ready(&c.state, &c.request).await) }, health::ready_doc;
    }
    /// `POST /gateway/webhooks/{webhook_id}`: an inbound webhook; its body is the sender's, of any type.
    WebhookInbound "webhook_inbound" template "/gateway/webhooks/{webhook_id}" opaque_body {
        POST Open => webhooks::inbound(&c.state, c.id("webhook_id", unknown_webhook)?, c.request),
            api::webhooks::inbound_doc;
    }
    /// `/gateway/webhook-configs`: create and list webhook configs.
    WebhookConfigs "webhook_configs" exact "/gateway/webhook-configs" {
        GET Operator => webhooks::list_configs(&c.state, &c.request), api::webhooks::list_configs_doc;
        POST Operator => webhooks::create_config(&c.state, c.request), api::webhooks::create_config_doc;
    }
    /// `/gateway/webhook-configs/{id}`: one webhook config.
    WebhookConfig "webhook_config" template "/gateway/webhook-configs/{id}" {
        GET Operator => webhooks::show_config(&c.state, c.id("id", unknown_webhook)?), api::webhooks::show_config_doc;
        DELETE Operator => webhooks::delete_config(&c.state, c.id("id", unknown_webhook)?),
            api::webhooks::delete_config_doc;
        PATCH Operator => webhooks::update_config(&c.state, c.id("id", unknown_webhook)?, c.request),
            api::webhooks::update_config_doc;
    }
    /// `POST /gateway/webhook-events`: fan-out of one event to every config subscribed to its type.
    WebhookEvents "webhook_events" exact "/gateway/webhook-events" {
        POST Operator => webhooks::publish_event(&c.state, c.request), api::webhooks::publish_event_doc;
    }
    /// `/gateway/deliveries`: enqueue an outbound webhook; the forensic inspector.
    Deliveries "deliveries" exact "/gateway/deliveries" {
        GET Operator => webhooks::list_deliveries(&c.state, &c.request), api::webhooks::list_deliveries_doc;
        POST Operator => webhooks::enqueue(&c.state, c.request), api::webhooks::enqueue_doc;
    }
    /// `GET /gateway/deliveries/{id}`: one delivery with its attempts.
    Delivery "delivery" template "/gateway/deliveries/{id}" {
        GET Operator => webhooks::show_delivery(&c.state, c.id("id", unknown_delivery)?),
            api::webhooks::show_delivery_doc;
    }
    /// `POST /gateway/deliveries/{id}/retry`: "Retry now".
    DeliveryRetry "delivery_retry" template "/gateway/deliveries/{id}/retry" {
        POST Operator => webhooks::retry(&c.state, c.id("id", unknown_delivery)?), api::webhooks::retry_doc;
    }
    /// `/gateway/cron/jobs`: create and list cron jobs.
    CronJobs "cron_jobs" exact "/gateway/cron/jobs" {
        GET Operator => cron::list(&c.state, &c.request), api::cron::list_doc;
        POST Operator => cron::create(&c.state, c.request), api::cron::create_doc;
    }
    /// `/gateway/cron/jobs/{id}`: one cron job.
    CronJob "cron_job" template "/gateway/cron/jobs/{id}" {
        GET Operator => cron::show(&c.state, c.id("id", unknown_job)?), api::cron::show_doc;
        DELETE Operator => cron::delete(&c.state, c.id("id", unknown_job)?), api::cron::delete_doc;
    }
    /// `GET /gateway/cluster`: this instance and its cluster.
    Cluster "cluster" exact "/gateway/cluster" {
        GET Operator => async { Ok(health::cluster(&c.state).await) }, health::cluster_doc;
    }
    /// `GET /gateway/agents/{agent_id}/reminders`: an agent's retained reminders.
    AgentReminders "agent_reminders" template "/gateway/agents/{agent_id}/reminders" {
        GET AgentOrOperator => reminders::list(&c.state, &c.request, c.client), api::reminders::doc;
    }
    /// `POST /gateway/tools/{tool_name}`: an agent's tool call (the handler decides what is a tool).
    Tool "tool" template "/gateway/tools/{tool_name}" {
        POST Agent => async {
            let name = c.param("tool_name").to_owned();
            tools::call(&c.state, &name, c.request, c.client).await
        }, api::tools::doc;
    }
    /// `/gateway/agents/{agent_id}/credentials`: issue and list an agent's tokens.
    AgentCredentials "agent_credentials" template "/gateway/agents/{agent_id}/credentials" {
        GET Operator => credentials::list(&c.state, &c.request), api::credentials::list_doc;
        POST Operator => credentials::issue(&c.state, c.request), api::credentials::issue_doc;
    }
    /// `DELETE /gateway/agents/{agent_id}/credentials/{credential_id}`: revoke a token.
    AgentCredential "agent_credential" template "/gateway/agents/{agent_id}/credentials/{credential_id}" {
        DELETE Operator => credentials::revoke(&c.state, &c.request), api::credentials::revoke_doc;
    }
    /// `GET /metrics`: the Prometheus scrape.
    Metrics "metrics" exact "/metrics" {
        GET Operator => async { Ok(metrics::response(&c.state, c.request.headers().get(http::header::ACCEPT)).await) },
            metrics::doc;
    }
    /// `POST /gateway/cron/jobs/{id}/pause`.
    CronJobPause "cron_job_pause" template "/gateway/cron/jobs/{id}/pause" {
        POST Operator => cron::pause(&c.state, c.id("id", unknown_job)?), api::cron::pause_doc;
    }
    /// `POST /gateway/cron/jobs/{id}/resume`.
    CronJobResume "cron_job_resume" template "/gateway/cron/jobs/{id}/resume" {
        POST Operator => cron::resume(&c.state, c.id("id", unknown_job)?), api::cron::resume_doc;
    }
    /// `GET /`: the operator console's page.
    Console "console" exact "/" {
        GET Open => ready(Ok(console::page(&c.request))), api::console::page_doc;
    }
    /// `GET /console/{asset}`: the console's files (the handler serves only those it embeds).
    ConsoleAsset "console_asset" template "/console/{asset}" {
        GET Open => ready(console::asset(&c.request)), api::console::asset_doc;
    }
    /// `GET /openapi.json`: the document of this API, derived from this table.
    OpenApi "openapi" exact "/openapi.json" {
        GET Open => ready(Ok(openapi::get(Route::operations_documented))), api::openapi::doc;
    }
    /// `GET /gateway/cron/jobs/{id}/runs`: a job's runs, newest first.
    CronJobRuns "cron_job_runs" template "/gateway/cron/jobs/{id}/runs" {
        GET Operator => cron::runs(&c.state, &c.request, c.id("id", unknown_job)?), api::cron::runs_doc;
    }
    /// `/mcp`: the MCP endpoint (Streamable HTTP transport): a JSON-RPC message, the session's stream, its end.
    Mcp "mcp" exact "/mcp" {
        POST Agent => mcp::post(&c.state, c.request, c.client), api::mcp::post_doc;
        GET Agent => mcp::get(&c.state, &c.request, c.client), api::mcp::get_doc;
        DELETE Agent => mcp::delete(&c.state, &c.request, c.client), api::mcp::delete_doc;
    }
    /// `POST /gateway/webhook-configs/{id}/recover`: a window of the config's dead deliveries back to pending.
    WebhookConfigRecover "webhook_config_recover" template "/gateway/webhook-configs/{id}/recover" {
        POST Operator => webhooks::recover(&c.state, c.id("id", unknown_webhook)?, c.request),
            api::webhooks::recover_doc;
    }
    /// `POST /gateway/webhook-configs/{id}/test`: a `gateway.test` delivery to the config's target.
    WebhookConfigTest "webhook_config_test" template "/gateway/webhook-configs/{id}/test" {
        POST Operator => webhooks::send_test(&c.state, c.id("id", unknown_webhook)?), api::webhooks::test_doc;
    }
    /// `POST /gateway/webhook-deliveries/{id}/resend`: a new delivery of the same payload.
    WebhookDeliveryResend "webhook_delivery_resend" template "/gateway/webhook-deliveries/{id}/resend" {
        POST Operator => webhooks::resend(&c.state, c.id("id", unknown_delivery)?), api::webhooks::resend_doc;
    }
    /// `GET /gateway/credentials`: every agent's credentials, with their last use.
    Credentials "credentials" exact "/gateway/credentials" {
        GET Operator => credentials::list_all(&c.state, &c.request), api::credentials::list_all_doc;
    }
    /// `GET /gateway/history`: the last hours of the gateway's own activity, per hour.
    History "history" exact "/gateway/history" {
        GET Operator => history::get(&c.state, &c.request), api::history::doc;
    }
}

impl Route {
    /// Every method of every route as the document shows it, in the table's order.
    pub(super) fn operations_documented() -> Vec<gateway_api::RouteOperation> {
        Route::ALL.iter().flat_map(|route| route.documented()).collect()
    }
}
