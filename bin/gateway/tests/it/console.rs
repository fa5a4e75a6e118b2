//! The operator console (`GET /`) in a real browser: headless Chromium driven through chromedriver, against the
//! real binary. Without chromium or chromedriver the browser test prints one line and passes; under CI (`gateway_testkit::running_in_ci`) it
//! fails instead. Binaries: `GATEWAY_TEST_CHROMEDRIVER` and `GATEWAY_TEST_CHROMIUM`, else `PATH`.
//!
//! Every view is photographed into the test's temporary directory and each picture is checked to show something;
//! with `GATEWAY_TEST_CONSOLE_SCREENSHOTS=<dir>` they are also copied there (the pictures in docs/images come from
//! such a run).

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, PATIENCE, TOKEN, eventually};

const CHROMEDRIVER_ENV: &str = "GATEWAY_TEST_CHROMEDRIVER";
const CHROMIUM_ENV: &str = "GATEWAY_TEST_CHROMIUM";
const SCREENSHOTS_ENV: &str = "GATEWAY_TEST_CONSOLE_SCREENSHOTS";

/// A page that rendered shows text, borders, badges: far more colours than this. A blank or failed page has one
/// or two.
const MIN_DISTINCT_COLOURS: usize = 24;

#[test]
fn the_page_and_its_assets_are_served_without_a_token_under_a_strict_policy() {
    let gateway = Gateway::start(&[]);
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let get = |path: &str| agent.get(gateway.url(path)).call().unwrap();

    let page = get("/");
    assert_eq!(page.status(), 200);
    let header = |response: &http::Response<ureq::Body>, name: &str| {
        response.headers().get(name).map(|value| value.to_str().unwrap().to_owned()).unwrap_or_default()
    };
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let policy = header(&page, "content-security-policy");
    for directive in ["default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
        assert!(policy.contains(directive), "{directive} missing from {policy}");
    }
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header(&page, "cache-control"), "no-cache");
    let etag = header(&page, "etag");
    assert!(etag.starts_with('"') && etag.len() > 2, "{etag}");
    let unchanged = agent.get(gateway.url("/")).header("if-none-match", &etag).call().unwrap();
    assert_eq!(unchanged.status(), 304);

    for (asset, content_type) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("sse.js", "text/javascript; charset=utf-8"),
        ("app.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let response = get(&format!("/console/{asset}"));
        assert_eq!(response.status(), 200, "{asset}");
        assert_eq!(header(&response, "content-type"), content_type, "{asset}");
        assert_eq!(header(&response, "cache-control"), "no-cache", "{asset}");
    }
    for unknown in ["/console/index.html", "/console/nothing.js", "/console/", "/console/app.js/x", "/console"] {
        assert_eq!(get(unknown).status(), 404, "{unknown}");
    }
    let posted = agent.post(gateway.url("/")).send("").unwrap();
    assert_eq!(posted.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser_signs_in_and_shows_every_view() {
    let Some(tools) = BrowserTools::find("the_console_in_a_browser_signs_in_and_shows_every_view") else {
        return;
    };
    // A delivery that goes dead within seconds: a receiver that answers 500, a one-second retry schedule.
    let receiver = Receiver::start(Behaviour::Status(500));
    let gateway = Gateway::start(&[
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "200",
    ]);
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "github", "event_type": "pull_request.opened", "agent_intent": "code_review",
                "target_session": "reviewer-cluster", "target_url": receiver.url("/hook"), "secret": "s3cret"}),
    );
    assert_eq!(status, 201, "{config}");
    // Attacker-controlled text: it must show as text, never become markup.
    // Posted as text with its own spacing and a `1.50`: the inspector must show these bytes, which re-serialized
    // JSON would not be.
    let payload_text = r#"{"title": "<img src=x onerror=\"document.title='pwned'\">",  "pr": 1234, "amount": 1.50}"#;
    let (status, delivery) = gateway.operator_post_text(
        "/gateway/deliveries",
        &format!(r#"{{"webhook_id": {}, "session_id": "<b>sess-42</b>", "payload": {payload_text}}}"#, config["id"]),
    );
    assert_eq!(status, 201, "{delivery}");
    let delivery_id = delivery["id"].as_i64().unwrap();
    // A second one, which someone else will have retried by the time the console's button is pressed.
    let (status, other) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": config["id"], "session_id": "sess-43", "payload": {"n": 2}}),
    );
    assert_eq!(status, 201, "{other}");
    let other_id = other["id"].as_i64().unwrap();

    let shots = gateway.dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::start(&tools, 1280, 800).await;
    let b = &browser;

    // Sign-in: a wrong token is refused in the form, the right one opens the overview.
    b.goto(&gateway.url("/")).await;
    b.type_into("[data-testid=token-input]", "not-the-token").await;
    b.click("[data-testid=signin-submit]").await;
    b.wait_text("[data-testid=signin-message]", |text| text.contains("refused this token")).await;
    b.screenshot(&shots, "signin").await;
    b.type_into("[data-testid=token-input]", TOKEN).await;
    b.click("[data-testid=signin-submit]").await;
    b.wait_text("[data-testid=card-role-value]", |text| text == "single").await;
    assert_eq!(b.script("return sessionStorage.length").await, json!(1), "the token is kept in the tab");

    // Agents: one appears after its heartbeat.
    let (status, _) = gateway.post_json(
        "/gateway/heartbeat",
        &json!({"type": "heartbeat", "agent_id": "researcher-alpha-9", "cluster_id": "mesh-04"}),
    );
    assert_eq!(status, 200);
    b.goto(&gateway.url("/#/agents")).await;
    b.wait_text("[data-testid=agent-row][data-agent-id=researcher-alpha-9]", |text| text.contains("mesh-04")).await;
    b.screenshot(&shots, "agents").await;

    // Overview: the agent is counted, and the cluster's one member (this instance, `single`) is listed.
    b.goto(&gateway.url("/#/overview")).await;
    b.wait_text("[data-testid=card-agents-value]", |text| text == "1").await;
    let (_, cluster) = gateway.operator_get("/gateway/cluster");
    let member = format!("[data-testid=member-row][data-instance-id='{}']", cluster["instance_id"].as_str().unwrap());
    b.wait_text(&member, |text| text.contains("single") && text.contains(env!("CARGO_PKG_VERSION"))).await;
    assert_eq!(b.script("return document.querySelectorAll('[data-testid=member-row]').length").await, json!(1));

    // Agent credentials: a token issued is shown once in a dialog, copied through the clipboard API, and gone from
    // the page (and never in storage) once the dialog closes; the list shows it with its expiry; revoked after a
    // confirmation, the gateway has it revoked.
    b.goto(&gateway.url("/#/credentials?agent_id=researcher-alpha-9")).await;
    b.wait_text("[data-testid=empty]", |text| text.contains("No credentials for researcher-alpha-9")).await;
    // Headless Chromium refuses the clipboard without a user's permission: the test stands in for it and keeps
    // what the page wrote.
    b.script(
        "Object.defineProperty(navigator, 'clipboard', { configurable: true, value: { writeText: (text) => \
         { window.copiedText = text; return Promise.resolve(); } } }); return null",
    )
    .await;
    b.select("[data-testid=credentials-lifetime]", "2592000").await;
    b.click("[data-testid=credentials-issue]").await;
    b.wait_until(
        "the token dialog",
        "return document.querySelector('dialog[data-testid=token-dialog]')?.open === true",
    )
    .await;
    let token = b.script("return document.querySelector('[data-testid=token-value]').value").await;
    let token = token.as_str().unwrap().to_owned();
    assert!(token.starts_with("agt_"), "{token}");
    b.click("[data-testid=token-copy]").await;
    b.wait_text("[data-testid=token-copy]", |text| text == "Copied").await;
    assert_eq!(b.script("return window.copiedText").await, json!(token), "the copy button copies the token");
    b.screenshot(&shots, "credential-issued").await;
    b.click("[data-testid=token-close]").await;
    b.wait_until("the dialog gone", "return document.querySelector('dialog') === null").await;
    let still_there = b
        .script(&format!(
            "const t = {token:?}; return document.documentElement.outerHTML.includes(t) || \
             JSON.stringify(sessionStorage).includes(t) || JSON.stringify(localStorage).includes(t) || \
             location.href.includes(t)"
        ))
        .await;
    assert_eq!(still_there, json!(false), "the token is gone from the page once its dialog is closed");
    let (_, listed) = gateway.operator_get("/gateway/agents/researcher-alpha-9/credentials");
    let credential = &listed["credentials"][0];
    let credential_row =
        format!("[data-testid=credential-row][data-credential-id='{}']", credential["credential_id"].as_str().unwrap());
    b.wait_text(&credential_row, |text| text.contains("active")).await;
    assert!(credential["expires_at"].is_string(), "issued with the 30 days chosen: {credential}");
    b.screenshot(&shots, "credentials").await;
    b.click(&format!("{credential_row} [data-testid=revoke]")).await;
    b.click(&format!("{credential_row} [data-testid=confirm-revoke]")).await;
    b.wait_text(&credential_row, |text| text.contains("revoked")).await;
    let (_, listed) = gateway.operator_get("/gateway/agents/researcher-alpha-9/credentials");
    assert!(listed["credentials"][0]["revoked_at"].is_string(), "{listed}");

    // Cron: a created job shows the next instants the gateway computed (in its time zone and in UTC), is paused and
    // resumed, then deleted after a confirmation.
    b.goto(&gateway.url("/#/cron")).await;
    b.wait_text("[data-testid=empty]", |text| text.contains("No cron jobs")).await;
    b.type_into("[data-testid=cron-agent]", "researcher-alpha-9").await;
    b.type_into("[data-testid=cron-schedule]", "*/5 * * * *").await;
    b.type_into("[data-testid=cron-timezone]", "America/New_York").await;
    b.type_into("[data-testid=cron-payload]", r#"{"task": "check_quota"}"#).await;
    b.click("[data-testid=cron-submit]").await;
    let preview = b.wait_text("[data-testid=cron-preview]", |text| !text.is_empty()).await;
    let (_, jobs) = gateway.operator_get("/gateway/cron/jobs");
    let job = &jobs["jobs"][0];
    assert_eq!(job["payload"], json!({"task": "check_quota"}));
    let instants = job["preview"].as_array().unwrap();
    assert_eq!(instants.len(), 5);
    for instant in instants {
        assert!(preview.contains(instant.as_str().unwrap()), "{instant} not in the preview {preview:?}");
    }
    assert_eq!(job["timezone"], "America/New_York");
    for local in job["preview_local"].as_array().unwrap() {
        assert!(preview.contains(local.as_str().unwrap()), "{local} not in the preview {preview:?}");
    }
    let row = format!("[data-testid=job-row][data-job-id='{}']", job["id"]);
    b.wait_text(&row, |text| text.contains("*/5 * * * *") && text.contains("America/New_York")).await;
    b.wait_text(&format!("{row} [data-testid=status]"), |text| text == "active").await;
    b.screenshot(&shots, "cron").await;
    // Pause, then resume: the row follows the job the gateway answers with.
    let job_path = format!("/gateway/cron/jobs/{}", job["id"]);
    b.click(&format!("{row} [data-testid=pause]")).await;
    b.wait_text(&format!("{row} [data-testid=status]"), |text| text == "paused").await;
    assert_eq!(gateway.operator_get(&job_path).1["paused"], true);
    b.click(&format!("{row} [data-testid=resume]")).await;
    b.wait_text(&format!("{row} [data-testid=status]"), |text| text == "active").await;
    assert_eq!(gateway.operator_get(&job_path).1["paused"], false);
    b.click(&format!("{row} [data-testid=delete]")).await;
    b.click(&format!("{row} [data-testid=confirm-delete]")).await;
    b.wait_text("[data-testid=jobs-notice]", |text| text.contains("Deleted job")).await;
    let (_, jobs) = gateway.operator_get("/gateway/cron/jobs");
    assert_eq!(jobs["jobs"], json!([]));

    // A job's runs: one every second fires within a second or two; its "Runs" shows the fires newest first.
    let (status, every_second) = gateway.operator_post(
        "/gateway/cron/jobs",
        &json!({"agent_id": "researcher-alpha-9", "schedule": "* * * * * *", "misfire_policy": "skip"}),
    );
    assert_eq!(status, 201, "{every_second}");
    let runs_path = format!("/gateway/cron/jobs/{}/runs", every_second["id"]);
    eventually("the job to fire", || !gateway.operator_get(&runs_path).1["runs"].as_array().unwrap().is_empty());
    // Away and back: the view loads the jobs again, the new one with them.
    b.goto(&gateway.url("/#/overview")).await;
    b.wait_text("[data-testid=card-agents-value]", |text| text == "1").await;
    b.goto(&gateway.url("/#/cron")).await;
    let row = format!("[data-testid=job-row][data-job-id='{}']", every_second["id"]);
    b.wait_text(&format!("{row} [data-testid=misfire-policy]"), |text| text == "skip").await;
    b.click(&format!("{row} [data-testid=runs]")).await;
    let shown = b.wait_text("[data-testid=runs-panel] [data-testid=run-row]", |text| text.contains("fired")).await;
    let newest = &gateway.operator_get(&runs_path).1["runs"][0];
    assert!(shown.contains(&format!("{}:", every_second["id"])), "a run shows its fire id: {shown:?} ({newest})");
    b.screenshot(&shots, "cron-runs").await;
    let (status, _) = gateway.operator_delete(&format!("/gateway/cron/jobs/{}", every_second["id"]));
    assert_eq!(status, 200);

    // Dead letters: the deliveries show once dead; "Retry now" with the receiver fixed delivers one; the other,
    // retried meanwhile through the API, gets the 409 explained.
    let dead = |id: i64| gateway.operator_get(&format!("/gateway/deliveries/{id}")).1["status"] == "dead";
    eventually("both deliveries to go dead", || dead(delivery_id) && dead(other_id));
    b.goto(&gateway.url("/#/dead")).await;
    let row = format!("[data-testid=dead-row][data-delivery-id='{delivery_id}']");
    let shown = b.wait_text(&row, |text| text.contains("http_500")).await;
    assert!(shown.contains("<b>sess-42</b>"), "the session id shows as the text it is: {shown:?}");
    // The webhook by its name and target host, its id beside it.
    let webhook = b.wait_text(&format!("{row} [data-testid=webhook-name]"), |text| !text.is_empty()).await;
    let host = receiver.url("/").split('/').nth(2).unwrap().to_owned();
    assert!(webhook.contains("github · pull_request.opened") && webhook.contains(&host), "{webhook:?}");
    assert!(webhook.contains(&format!("#{}", config["id"])), "{webhook:?}");
    b.screenshot(&shots, "dead-letters").await;
    receiver.set(Behaviour::Status(200));
    let (status, _) = gateway.operator_post(&format!("/gateway/deliveries/{other_id}/retry"), &json!({}));
    assert_eq!(status, 200);
    eventually("the other delivery to be delivered", || {
        gateway.operator_get(&format!("/gateway/deliveries/{other_id}")).1["status"] == "delivered"
    });
    let other_row = format!("[data-testid=dead-row][data-delivery-id='{other_id}']");
    b.click(&format!("{other_row} [data-testid=retry]")).await;
    b.wait_text(&format!("{other_row} [data-testid=retry-result]"), |text| {
        text.contains("Not retried (409)") && text.contains("retried it already")
    })
    .await;
    b.click(&format!("{row} [data-testid=retry]")).await;
    b.wait_text(&format!("{row} [data-testid=retry-result]"), |text| text.contains("Delivered on attempt 1")).await;
    b.wait_text(&format!("{row} [data-testid=status]"), |text| text == "delivered").await;
    let now = gateway.operator_get(&format!("/gateway/deliveries/{delivery_id}")).1;
    assert_eq!(now["status"], "delivered");
    // The whole row follows the delivery the API answers with, not just its status: one attempt, no error.
    assert_eq!(now["attempt_count"], 1, "{now}");
    assert_eq!(now["error_detail"], Value::Null, "{now}");
    b.wait_text(&format!("{row} [data-testid=attempts]"), |text| text == "1").await;
    b.wait_text(&format!("{row} [data-testid=last-error]"), str::is_empty).await;
    // The other row, refused with 409, shows where the delivery now stands too.
    b.wait_text(&format!("{other_row} [data-testid=status]"), |text| text == "delivered").await;
    b.wait_text(&format!("{other_row} [data-testid=last-error]"), str::is_empty).await;
    b.screenshot(&shots, "dead-letters-after-retry").await;

    // The inspector: filtered by session and status through its form (the filters land in the address), a session
    // with no deliveries, then the delivery with its seven attempts and its payload, as text.
    // (From a list without it, so that the row can only come from the filtered list.)
    b.goto(&gateway.url("/#/deliveries?status=dead")).await;
    b.wait_text("[data-testid=empty]", |text| text.contains("No deliveries match")).await;
    b.type_into("[data-testid=filter-session]", "<b>sess-42</b>").await;
    b.select("[data-testid=filter-status]", "delivered").await;
    b.click("[data-testid=filter-apply]").await;
    let listed = format!("[data-testid=delivery-row][data-delivery-id='{delivery_id}']");
    let listed_text = b.wait_text(&listed, |text| text.contains("delivered")).await;
    assert!(listed_text.contains("github · pull_request.opened"), "the webhook by name: {listed_text:?}");
    let address = b.script("return location.hash").await;
    assert_eq!(address, json!("#/deliveries?session_id=%3Cb%3Esess-42%3C%2Fb%3E&status=delivered"));
    b.screenshot(&shots, "deliveries").await;
    b.type_into("[data-testid=filter-session]", "no-such-session").await;
    b.click("[data-testid=filter-apply]").await;
    b.wait_text("[data-testid=empty]", |text| text.contains("No deliveries match")).await;
    // A time range: the browser's local time, sent as an RFC 3339 instant.
    b.type_into("[data-testid=filter-session]", "").await;
    b.select("[data-testid=filter-status]", "").await;
    b.script("document.querySelector('[data-testid=filter-from]').value = '2000-01-01T00:00:00'; return null").await;
    b.click("[data-testid=filter-apply]").await;
    b.wait_text(&listed, |text| text.contains("delivered")).await;
    let sent = b.script("return new URLSearchParams(location.hash.split('?')[1]).get('from')").await;
    let expected = b.script("return new Date('2000-01-01T00:00:00').toISOString()").await;
    assert_eq!(sent, expected);
    b.script("document.querySelector('[data-testid=filter-to]').value = '2000-01-02T00:00:00'; return null").await;
    b.click("[data-testid=filter-apply]").await;
    b.wait_text("[data-testid=empty]", |text| text.contains("No deliveries match")).await;
    b.goto(&gateway.url(&format!("/#/deliveries/{delivery_id}"))).await;
    b.wait_until("seven attempts", "return document.querySelectorAll('[data-testid=attempt-row]').length === 7").await;
    // Six before "Retry now", one after: the numbering starts over, and the table says so between them.
    b.wait_text("tr.separator", |text| text.contains("start over")).await;
    b.wait_text("[data-testid=payload]", |text| !text.is_empty()).await;
    let shown_payload = b.script("return document.querySelector('[data-testid=payload]').textContent").await;
    assert_eq!(shown_payload, json!(payload_text), "the payload is shown byte for byte as it was sent");
    b.wait_text("#payload-title", |text| text == "Payload, exactly as sent").await;
    assert_eq!(b.script("return document.querySelectorAll('main img').length").await, json!(0));
    assert_ne!(b.script("return document.title").await, json!("pwned"));
    b.screenshot(&shots, "delivery").await;
    b.script("document.querySelector('[data-testid=payload]').scrollIntoView({block: 'center'}); return null").await;
    b.screenshot(&shots, "delivery-payload").await;

    // Live tail: a DecisionLog posted after the stream is live appears.
    b.goto(&gateway.url("/#/tail")).await;
    b.select("[data-testid=tail-topic]", "gateway:messages").await;
    b.click("[data-testid=tail-start]").await;
    b.wait_until(
        "the tail to be live",
        "return document.querySelector('[data-testid=tail-status]').dataset.state === 'live'",
    )
    .await;
    let (status, _) = gateway.post_json(
        "/gateway/messages",
        &json!({"meta": {"trace_id": "console-trace-1", "timestamp": "2026-11-26T12:00:00Z"},
                "identity": {"agent_id": "researcher-alpha-9", "agent_type": "researcher", "capability_version": "2.3.0"},
                "cognition": {"intent": "summarize the quarter"}, "action": {"status": "success"}}),
    );
    assert_eq!(status, 202);
    b.wait_text("[data-testid=tail-event][data-event-type=decision_log]", |text| text.contains("console-trace-1"))
        .await;
    b.screenshot(&shots, "live-tail").await;

    // The overview, now with something in every part.
    b.goto(&gateway.url("/#/overview")).await;
    b.wait_text("[data-testid=deliveries-delivered] td.num", |text| text == "2").await;
    b.wait_text("[data-testid=card-dead-value]", |text| text == "0").await;
    b.wait_text("[data-testid=card-agents-value]", |text| text == "1").await;
    b.screenshot(&shots, "overview").await;
    // One time format everywhere, 24-hour with the zone, whatever the browser's locale (en-US here, whose own
    // time format is 12-hour).
    let updated = b.wait_text(".updated", |text| text.starts_with("Updated")).await;
    assert!(is_clock_with_zone(updated.trim_start_matches("Updated ").get(..18).unwrap_or_default()), "{updated}");
    let page = b.script("return document.body.innerText").await;
    let page = page.as_str().unwrap_or_default();
    assert!(!(page.contains(" AM") || page.contains(" PM")), "a 12-hour time on the page: {page}");

    // A narrow screen: the page does not scroll sideways (wide tables scroll inside their own box).
    b.client.set_window_size(420, 800).await.unwrap();
    b.goto(&gateway.url("/#/deliveries")).await;
    b.wait_text("[data-testid=delivery-row]", |text| !text.is_empty()).await;
    b.wait_until("no sideways scrolling", "return document.documentElement.scrollWidth <= window.innerWidth").await;
    b.screenshot(&shots, "narrow").await;
    b.client.set_window_size(1280, 800).await.unwrap();

    // A token the gateway stops accepting (here: a tampered one) returns to sign-in with the reason.
    b.script(r"sessionStorage.setItem('agent-gateway.admin-token', 'rotated-away'); return null").await;
    b.goto(&gateway.url("/#/agents")).await;
    b.wait_text("[data-testid=signin-message]", |text| text.contains("Signed out")).await;
    assert_eq!(b.script("return sessionStorage.length").await, json!(0), "the refused token is forgotten");

    let errors = b.console_errors().await;
    // The refusals this test provoked (the wrong token, the tampered one, the retry of a delivered delivery) are
    // logged by the browser as failed loads, which also shows that the log is read; nothing else may be there.
    assert!(errors.iter().any(|message| message.contains("status of 401")), "{errors:#?}");
    assert!(errors.iter().any(|message| message.contains("status of 409")), "{errors:#?}");
    let provoked = |message: &&String| message.contains("status of 401") || message.contains("status of 409");
    let unexpected: Vec<_> = errors.iter().filter(|message| !provoked(message)).collect();
    assert!(unexpected.is_empty(), "the browser console has errors: {unexpected:#?}");
    browser.stop().await;
    if let Some(target) = std::env::var_os(SCREENSHOTS_ENV) {
        copy_screenshots(&shots, Path::new(&target));
    }
}

/// The overview's charts of the last 24 hours and the list of every agent's credentials, in a browser: after
/// heartbeats, deliveries (one delivered, one gone dead) and a cron fire, each chart has a non-zero bar (or point),
/// its hour labels on the 24-hour clock and a summary in words; the credentials view, with no agent chosen, lists
/// both agents' credentials, the used one with its last use and the other "never", and revokes from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_charts_the_last_day_and_every_agents_credentials_list_with_their_last_use() {
    let Some(tools) = BrowserTools::find("the_overview_charts_the_last_day_and_every_agents_credentials_list") else {
        return;
    };
    let failing = Receiver::start(Behaviour::Status(500));
    let answering = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&[
        "--agent-auth",
        "required",
        "--last-use-interval-s",
        "1",
        "--history-flush-interval-ms",
        "200",
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1",
        "--webhook-poll-interval-ms",
        "200",
    ]);
    let issue = |agent: &str| {
        let (status, issued) = gateway.operator_post(&format!("/gateway/agents/{agent}/credentials"), &json!({}));
        assert_eq!(status, 201, "{issued}");
        (issued["credential_id"].as_str().unwrap().to_owned(), issued["token"].as_str().unwrap().to_owned())
    };
    let (used_id, used_token) = issue("charted-agent");
    let (unused_id, _) = issue("quiet-agent");
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let as_agent = |path: &str, body: &Value| {
        let mut response = agent
            .post(gateway.url(path))
            .header("authorization", format!("Bearer {used_token}"))
            .content_type("application/json")
            .send(body.to_string())
            .unwrap();
        (response.status().as_u16(), response.body_mut().read_to_string().unwrap())
    };
    for _ in 0..3 {
        let heartbeat = json!({"type": "heartbeat", "agent_id": "charted-agent", "cluster_id": "mesh-04"});
        assert_eq!(as_agent("/gateway/heartbeat", &heartbeat).0, 200);
    }
    let reminder = json!({
        "meta": {"trace_id": "trace-chart", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "charted-agent", "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 100, "payload": {}}}
    });
    let (status, text) = as_agent("/gateway/messages", &reminder);
    assert_eq!(status, 202, "{text}");
    let mut config_ids = Vec::new();
    for (source, receiver) in [("failing", &failing), ("answering", &answering)] {
        let (status, config) = gateway.operator_post(
            "/gateway/webhook-configs",
            &json!({"source_identifier": source, "event_type": "pull_request.opened", "agent_intent": "code_review",
                    "target_session": "reviewer-cluster", "target_url": receiver.url("/hook"), "secret": "s3cret"}),
        );
        assert_eq!(status, 201, "{config}");
        config_ids.push(config["id"].as_i64().unwrap());
        let (status, delivery) = gateway.operator_post(
            "/gateway/deliveries",
            &json!({"webhook_id": config["id"], "session_id": "s", "payload": {"n": 1}}),
        );
        assert_eq!(status, 201, "{delivery}");
    }

    let shots = gateway.dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::start(&tools, 1280, 1000).await;
    let b = &browser;
    b.goto(&gateway.url("/")).await;
    b.type_into("[data-testid=token-input]", TOKEN).await;
    b.click("[data-testid=signin-submit]").await;
    b.wait_text("[data-testid=card-role-value]", |text| text == "single").await;

    // The overview refreshes every 5 s; each chart shows the hour's activity once it has been flushed.
    for (series, mark) in [
        ("deliveries", "rect.bar.nonzero"),
        ("failed_attempts", "rect.bar.nonzero"),
        ("dead_letters", "rect.bar.nonzero"),
        ("heartbeats", "rect.bar.nonzero"),
        ("cron_fires", "rect.bar.nonzero"),
        ("live_agents", "circle.dot.nonzero"),
        ("cron_lateness_max_ms", "circle.dot"),
    ] {
        b.wait_until(
            &format!("a non-zero {series} in its chart"),
            &format!("return document.querySelectorAll('[data-testid=chart-{series}] {mark}').length >= 1"),
        )
        .await;
    }
    let bars = b.script("return document.querySelectorAll('[data-testid=chart-heartbeats] rect.bar').length").await;
    assert_eq!(bars, json!(24), "one bar per hour");
    let summary = b
        .wait_text("[data-testid=chart-heartbeats] [data-testid=chart-summary]", |text| text.contains("total 3"))
        .await;
    assert!(summary.contains("peak 3 in the hour from"), "{summary}");
    let described = b
        .script(
            "const svg = document.querySelector('[data-testid=chart-deliveries] svg'); \
             return svg.getAttribute('role') + '|' + svg.getAttribute('aria-labelledby').split(' ') \
             .map((id) => document.getElementById(id).textContent).join('|')",
        )
        .await;
    let described = described.as_str().unwrap().to_owned();
    assert!(described.starts_with("img|Deliveries") && described.contains("total 1"), "{described}");
    let labels = b
        .script(
            "return [...document.querySelectorAll('[data-testid=chart-deliveries] text.tick')].map((t) => t.textContent)",
        )
        .await;
    let hours: Vec<&str> =
        labels.as_array().unwrap().iter().filter_map(Value::as_str).filter(|t| t.contains(':')).collect();
    assert!(hours.len() >= 3, "hour labels: {labels}");
    assert!(
        hours
            .iter()
            .all(|label| label.len() == 5 && label.ends_with(":00") && label[..2].parse::<u8>().is_ok_and(|h| h < 24)),
        "24-hour labels: {labels}"
    );
    b.script("document.querySelector('[data-testid=hourly-charts]').scrollIntoView(); return null").await;
    b.screenshot(&shots, "overview-charts").await;

    // The endpoints view: one webhook config's last 24 hours, its delivery series only, its dead letter among them.
    b.goto(&gateway.url("/#/endpoints")).await;
    let row = format!("[data-testid=endpoint-row][data-webhook-id='{}']", config_ids[0]);
    b.wait_text(&format!("{row} [data-testid=charts]"), |text| text == "Last 24 h").await;
    b.click(&format!("{row} [data-testid=charts]")).await;
    b.wait_until(
        "the failing endpoint's dead letter in its own chart",
        "return document.querySelectorAll('[data-testid=endpoint-charts] [data-testid=chart-dead_letters] rect.bar.nonzero').length === 1",
    )
    .await;
    b.screenshot(&shots, "endpoint-charts").await;
    let shown = b
        .script(
            "return [...document.querySelectorAll('[data-testid=endpoint-charts] figure')].map((f) => f.dataset.testid).join(',') + '|' + \
             document.querySelectorAll('[data-testid=endpoint-charts] [data-testid=chart-deliveries] rect.bar.nonzero').length",
        )
        .await;
    assert_eq!(shown, json!("chart-deliveries,chart-failed_attempts,chart-dead_letters|0"), "only its delivery series");

    // Every agent's credentials: the used one shows its last use once recorded (the view reloads on each visit).
    let used_row = format!("[data-testid=credential-row][data-credential-id='{used_id}']");
    let unused_row = format!("[data-testid=credential-row][data-credential-id='{unused_id}']");
    let deadline = Instant::now() + PATIENCE;
    for visit in 0.. {
        // A new address each time, so that the view is rendered (and the list read) again.
        b.goto(&gateway.url(&format!("/#/credentials?visit={visit}"))).await;
        let cell = b.wait_text(&format!("{used_row} [data-testid=credential-last-used]"), |_| true).await;
        if !cell.contains("never") {
            break;
        }
        assert!(Instant::now() < deadline, "the used credential's last use never showed in the list of all");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let last_used = b.wait_text(&format!("{used_row} [data-testid=credential-last-used]"), |_| true).await;
    assert!(last_used.contains(':') && last_used.contains("UTC"), "a 24-hour instant with its zone: {last_used}");
    let quiet = b.wait_text(&format!("{unused_row} [data-testid=credential-last-used]"), |_| true).await;
    assert_eq!(quiet, "never");
    let agent_cell = b.wait_text(&format!("{unused_row} [data-testid=credential-agent]"), |_| true).await;
    assert_eq!(agent_cell, "quiet-agent");
    b.screenshot(&shots, "credentials-all").await;
    b.click(&format!("{unused_row} [data-testid=revoke]")).await;
    b.click(&format!("{unused_row} [data-testid=confirm-revoke]")).await;
    b.wait_text(&unused_row, |text| text.contains("revoked")).await;
    let (_, listed) = gateway.operator_get("/gateway/agents/quiet-agent/credentials");
    assert!(listed["credentials"][0]["revoked_at"].is_string(), "{listed}");

    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "the browser console has errors: {errors:#?}");
    browser.stop().await;
    if let Some(target) = std::env::var_os(SCREENSHOTS_ENV) {
        copy_screenshots(&shots, Path::new(&target));
    }
}

/// Signs in on `gateway`'s page with the admin token and waits for the overview.
async fn sign_in(b: &Browser, gateway: &Gateway) {
    b.goto(&gateway.url("/")).await;
    b.type_into("[data-testid=token-input]", TOKEN).await;
    b.click("[data-testid=signin-submit]").await;
    b.wait_text("[data-testid=card-role-value]", |text| text == "single").await;
}

/// Headless Chromium refuses the clipboard without a user's permission: the page's writes land in
/// `window.copiedText` instead.
async fn stub_clipboard(b: &Browser) {
    b.script(
        "Object.defineProperty(navigator, 'clipboard', { configurable: true, value: { writeText: (text) => \
         { window.copiedText = text; return Promise.resolve(); } } }); return null",
    )
    .await;
}

fn hmac_signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(ring::hmac::sign(&key, body).as_ref()))
}

/// The endpoints view (issue 20 item 5): the configs by name, a test event the receiver gets, a recover that brings
/// dead deliveries back with its progress followed to the end, a secret rotation shown once with its grace (and the
/// shown secret is the one that signs from then on); and in the deliveries view, a resend with the new id shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_view_tests_recovers_and_rotates_and_the_deliveries_view_resends() {
    let Some(tools) =
        BrowserTools::find("the_endpoints_view_tests_recovers_and_rotates_and_the_deliveries_view_resends")
    else {
        return;
    };
    let failing = Receiver::start(Behaviour::Status(500));
    let shop = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&[
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1",
        "--webhook-poll-interval-ms",
        "200",
    ]);
    let create = |source: &str, event_type: &str, url: String, secret: &str| {
        let (status, config) = gateway.operator_post(
            "/gateway/webhook-configs",
            &json!({"source_identifier": source, "event_type": event_type, "agent_intent": "code_review",
                    "target_session": "reviewer-cluster", "target_url": url, "secret": secret}),
        );
        assert_eq!(status, 201, "{config}");
        config["id"].as_i64().unwrap()
    };
    let github = create("github", "pull_request.opened", failing.url("/hook"), "gh-secret");
    let orders = create("shop", "order.paid", shop.url("/orders"), "shop-secret");
    let delivery = |id: i64| gateway.operator_get(&format!("/gateway/deliveries/{id}")).1;
    let dead: Vec<i64> = (1..=3)
        .map(|pr| {
            let (status, body) = gateway.operator_post(
                "/gateway/deliveries",
                &json!({"webhook_id": github, "session_id": "reviewer-cluster", "payload": {"pr": pr}}),
            );
            assert_eq!(status, 201, "{body}");
            body["id"].as_i64().unwrap()
        })
        .collect();
    eventually("three dead deliveries", || dead.iter().all(|id| delivery(*id)["status"] == "dead"));

    let shots = gateway.dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::start(&tools, 1280, 800).await;
    let b = &browser;
    sign_in(b, &gateway).await;

    // The list: each endpoint by its name, target host and id, as the deliveries view names them.
    b.click("[data-testid=nav-endpoints]").await;
    let github_row = format!("[data-testid=endpoint-row][data-webhook-id='{github}']");
    let orders_row = format!("[data-testid=endpoint-row][data-webhook-id='{orders}']");
    let host = failing.url("/").split('/').nth(2).unwrap().to_owned();
    let named = b.wait_text(&format!("{github_row} [data-testid=webhook-name]"), |text| !text.is_empty()).await;
    assert!(named.contains("github · pull_request.opened") && named.contains(&host), "{named:?}");
    assert!(named.contains(&format!("#{github}")), "{named:?}");
    b.wait_text(&format!("{orders_row} [data-testid=webhook-name]"), |text| text.contains("shop · order.paid")).await;
    b.screenshot(&shots, "endpoints").await;

    // Send test: the receiver gets a signed gateway.test event, and the row says it was delivered.
    b.click(&format!("{orders_row} [data-testid=test]")).await;
    b.wait_text(&format!("{orders_row} [data-testid=endpoint-result]"), |text| text.contains("delivered")).await;
    let request = &shop.wait_for(1)[0];
    let envelope: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(
        (envelope["event_type"].as_str(), envelope["webhook_id"].as_i64()),
        (Some("gateway.test"), Some(orders))
    );
    assert_eq!(request.header("x-observatory-signature"), Some(hmac_signature("shop-secret", &request.body).as_str()));
    let shown_id = b.wait_text(&format!("{orders_row} [data-testid=test-delivery]"), |text| !text.is_empty()).await;
    assert_eq!(shown_id, format!("#{}", request.delivery_id()));

    // Recover the last day with the receiver fixed: "recovered: 3", then the progress until all are delivered.
    failing.set(Behaviour::Status(204));
    b.click(&format!("{github_row} [data-testid=recover]")).await;
    b.click("[data-testid=recover-submit]").await;
    b.wait_text("[data-testid=recovered]", |text| text == "recovered: 3").await;
    b.wait_until(
        "the recover's progress to be done",
        "return document.querySelector('[data-testid=recover-progress]')?.dataset.state === 'done'",
    )
    .await;
    let progress = b.wait_text("[data-testid=recover-progress]", |text| text.starts_with("Done")).await;
    assert!(progress.contains("0 still pending or failing") && progress.contains("3 delivered"), "{progress:?}");
    assert!(dead.iter().all(|id| delivery(*id)["status"] == "delivered"));
    b.screenshot(&shots, "endpoints-recover").await;

    // Rotate: the new secret is shown once with a copy button and the old one's grace; it signs from then on.
    stub_clipboard(b).await;
    b.click(&format!("{github_row} [data-testid=rotate]")).await;
    b.click(&format!("{github_row} [data-testid=confirm-rotate]")).await;
    b.wait_until(
        "the secret dialog",
        "return document.querySelector('dialog[data-testid=secret-dialog]')?.open === true",
    )
    .await;
    let secret = b.script("return document.querySelector('[data-testid=secret-value]').value").await;
    let secret = secret.as_str().unwrap().to_owned();
    assert!(secret.len() >= 40, "{secret}");
    b.click("[data-testid=secret-copy]").await;
    b.wait_text("[data-testid=secret-copy]", |text| text == "Copied").await;
    assert_eq!(b.script("return window.copiedText").await, json!(secret));
    let grace = b.wait_text("[data-testid=secret-grace]", |text| text.contains("24 h")).await;
    assert!(grace.contains("previous secret"), "{grace:?}");
    b.screenshot(&shots, "endpoints-rotate").await;
    b.click("[data-testid=secret-close]").await;
    b.wait_until("the dialog gone", "return document.querySelector('dialog') === null").await;
    let still_there = b
        .script(&format!(
            "const t = {secret:?}; return document.documentElement.outerHTML.includes(t) || \
             JSON.stringify(sessionStorage).includes(t) || location.href.includes(t)"
        ))
        .await;
    assert_eq!(still_there, json!(false), "the secret is gone from the page once its dialog is closed");
    b.wait_text(&format!("{github_row} [data-testid=endpoint-secret]"), |text| text.contains("Rotated")).await;
    let (status, probe) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": github, "session_id": "reviewer-cluster", "payload": {"after": "rotation"}}),
    );
    assert_eq!(status, 201, "{probe}");
    let probe_id = probe["id"].as_i64().unwrap();
    eventually("the probe to arrive", || failing.received().iter().any(|request| request.delivery_id() == probe_id));
    let signed = failing.received().into_iter().find(|request| request.delivery_id() == probe_id).unwrap();
    assert_eq!(signed.header("x-observatory-signature"), Some(hmac_signature(&secret, &signed.body).as_str()));

    // Resend from the deliveries view (a delivery's page): a delivered one goes out again as a new one, whose id is
    // shown.
    b.goto(&gateway.url(&format!("/#/deliveries/{}", dead[0]))).await;
    b.wait_text("[data-testid=delivery-detail] [data-testid=status]", |text| text == "delivered").await;
    b.click("[data-testid=resend]").await;
    let resent = b.wait_text("[data-testid=resent-id]", |text| text.starts_with('#')).await;
    let resent_id: i64 = resent.trim_start_matches('#').parse().unwrap();
    assert!(resent_id > probe_id, "{resent}");
    assert_eq!(delivery(resent_id)["payload"], json!({"pr": 1}));
    eventually("the resent delivery to be delivered", || delivery(resent_id)["status"] == "delivered");
    b.screenshot(&shots, "deliveries-resend").await;

    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "the browser console has errors: {errors:#?}");
    browser.stop().await;
    if let Some(target) = std::env::var_os(SCREENSHOTS_ENV) {
        copy_screenshots(&shots, Path::new(&target));
    }
}

/// Enable and disable from the endpoints view (`PATCH {"enabled"}`, helper A's API on branch s23-a).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_view_disables_and_enables_an_endpoint() {
    let Some(tools) = BrowserTools::find("the_endpoints_view_disables_and_enables_an_endpoint") else {
        return;
    };
    let gateway = Gateway::start(&[]);
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "github", "event_type": "push", "agent_intent": "code_review",
                "target_session": "reviewer-cluster", "target_url": "https://hooks.example.com/in", "secret": "s"}),
    );
    assert_eq!(status, 201, "{config}");
    let id = config["id"].as_i64().unwrap();
    let browser = Browser::start(&tools, 1280, 800).await;
    let b = &browser;
    sign_in(b, &gateway).await;
    b.goto(&gateway.url("/#/endpoints")).await;
    let row = format!("[data-testid=endpoint-row][data-webhook-id='{id}']");
    b.wait_text(&format!("{row} [data-testid=endpoint-health]"), |text| text.contains("enabled")).await;
    b.wait_text(&format!("{row} [data-testid=toggle]"), |text| text == "Disable").await;
    b.click(&format!("{row} [data-testid=toggle]")).await;
    b.wait_text(&format!("{row} [data-testid=endpoint-health]"), |text| {
        text.contains("disabled") && text.contains("manual")
    })
    .await;
    assert_eq!(gateway.operator_get(&format!("/gateway/webhook-configs/{id}")).1["enabled"], false);
    b.wait_text(&format!("{row} [data-testid=toggle]"), |text| text == "Enable").await;
    // A test event to a disabled endpoint is held, and the view says so rather than wait for an attempt.
    b.click(&format!("{row} [data-testid=test]")).await;
    b.wait_text(&format!("{row} [data-testid=endpoint-result]"), |text| text.contains("held")).await;
    b.click(&format!("{row} [data-testid=toggle]")).await;
    b.wait_text(&format!("{row} [data-testid=toggle]"), |text| text == "Disable").await;
    assert_eq!(gateway.operator_get(&format!("/gateway/webhook-configs/{id}")).1["enabled"], true);
    assert!(b.console_errors().await.is_empty());
    browser.stop().await;
}

/// `14:05:09 UTC+01:00`: the console's one time-of-day format.
fn is_clock_with_zone(text: &str) -> bool {
    let shape = "00:00:00 UTC+00:00";
    text.len() == shape.len()
        && text.bytes().zip(shape.bytes()).all(|(byte, expected)| match expected {
            b'0' => byte.is_ascii_digit(),
            b'+' => byte == b'+' || byte == b'-',
            _ => byte == expected,
        })
}

/// The live tail's SSE parser (console/sse.js), in the browser that runs it: every line ending the format allows
/// (LF, CRLF, CR), comments, multi-line data, a field without a space, an event without data, and the same events
/// however the text is cut into chunks (a CRLF split between two chunks is one line end, not two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_tails_event_parser_reads_every_line_ending_however_the_stream_is_cut() {
    let Some(tools) =
        BrowserTools::find("the_live_tails_event_parser_reads_every_line_ending_however_the_stream_is_cut")
    else {
        return;
    };
    let gateway = Gateway::start(&[]);
    let browser = Browser::start(&tools, 800, 600).await;
    browser.goto(&gateway.url("/")).await;
    let text = ": connected\n\nid: 1\nevent: a\ndata: {\"x\":1}\n\r\nevent: b\r\ndata: l1\rdata: l2\r\r\
                event: empty\n\ndata:no-space\n\n: keep-alive   \n\n";
    let parse = r"
        const [text] = arguments;
        return import('/console/sse.js').then(({ SseParser }) => {
          const run = (chunks) => {
            const events = [];
            const comments = [];
            const parser = new SseParser({ onEvent: (e) => events.push(e), onComment: (c) => comments.push(c) });
            for (const chunk of chunks) parser.push(chunk);
            return { events, comments };
          };
          const cuts = [[text], Array.from(text)];
          for (let at = 1; at < text.length; at += 1) cuts.push([text.slice(0, at), text.slice(at)]);
          return cuts.map(run);
        });";
    let runs = browser.client.execute(parse, vec![json!(text)]).await.unwrap();
    let expected = json!({
        "events": [
            {"type": "a", "data": "{\"x\":1}", "id": "1"},
            {"type": "b", "data": "l1\nl2", "id": "1"},
            {"type": "message", "data": "no-space", "id": "1"},
        ],
        "comments": ["connected", "keep-alive"],
    });
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), text.len() + 1);
    for (cut, run) in runs.iter().enumerate() {
        assert_eq!(run, &expected, "cut {cut}");
    }
    assert!(browser.console_errors().await.is_empty());
    browser.stop().await;
}

/// chromedriver and chromium, or `None` (after one line, or a panic in CI) when either is missing.
struct BrowserTools {
    chromedriver: PathBuf,
    chromium: PathBuf,
}

impl BrowserTools {
    fn find(test: &str) -> Option<Self> {
        let chromedriver = find_binary(CHROMEDRIVER_ENV, &["chromedriver"]);
        let chromium = find_binary(CHROMIUM_ENV, &["chromium", "chromium-browser", "google-chrome"]);
        match (chromedriver, chromium) {
            (Some(chromedriver), Some(chromium)) => Some(Self { chromedriver, chromium }),
            _ => {
                let line = format!(
                    "skipping {test}: chromium and chromedriver not found (apt-get install chromium chromium-driver, \
                     or set {CHROMIUM_ENV} and {CHROMEDRIVER_ENV})"
                );
                assert!(!gateway_testkit::running_in_ci(), "{line}; CI is set, so this fails instead");
                eprintln!("{line}");
                None
            }
        }
    }
}

fn find_binary(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A chromedriver of our own on a free loopback port, with one browser session. Dropping it (a failed test)
/// ends the session, which ends the browser, and then the driver.
struct Browser {
    client: Client,
    driver: Child,
    driver_url: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(tools: &BrowserTools, width: u32, height: u32) -> Self {
        let mut driver = Command::new(&tools.chromedriver)
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // chromedriver picks the port and says which: "ChromeDriver was started successfully on port 37893."
        let (port_tx, port) = mpsc::channel();
        let stdout = driver.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_suffix('.').and_then(|line| line.rsplit_once("on port ")) {
                    let _ = port_tx.send(port.1.parse::<u16>().unwrap_or(0));
                }
            }
        });
        let port = port.recv_timeout(PATIENCE).expect("chromedriver did not say its port");
        let driver_url = format!("http://127.0.0.1:{port}/");
        let profile = tempfile::tempdir().unwrap();
        // Headless, as root in CI (no sandbox), without /dev/shm limits, and without the background requests to
        // the outside (updates, sync, metrics) that a closed network refuses.
        let capabilities = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": tools.chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-extensions", "--disable-default-apps", "--lang=en-US",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector).capabilities(capabilities).connect(&driver_url).await.unwrap();
        let session = client.session_id().await.unwrap().unwrap();
        client.set_window_size(width, height).await.unwrap();
        Self { client, driver, driver_url, session, _profile: profile }
    }

    async fn stop(self) {
        // Drop does the rest; a session ended twice is refused harmlessly.
        self.client.clone().close().await.unwrap();
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    async fn script(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Waits until `script` returns `true`.
    async fn wait_until(&self, what: &str, script: &str) {
        patiently(what, || async { (self.script(script).await == json!(true)).then_some(()) }).await;
    }

    /// Waits for an element matching `css` whose text satisfies `accept`, and returns the text. Read in one
    /// script, so that a view redrawing itself between two WebDriver calls cannot leave a stale element behind.
    async fn wait_text(&self, css: &str, accept: impl Fn(&str) -> bool) -> String {
        let read = "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : null;";
        patiently(&format!("{css} to show the expected text"), || async {
            match self.client.execute(read, vec![json!(css)]).await.unwrap() {
                Value::String(text) if accept(&text) => Some(text),
                _ => None,
            }
        })
        .await
    }

    async fn click(&self, css: &str) {
        let element = self.client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await.unwrap();
        element.click().await.unwrap();
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await.unwrap();
        element.clear().await.unwrap();
        element.send_keys(text).await.unwrap();
    }

    async fn select(&self, css: &str, value: &str) {
        let element = self.client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await.unwrap();
        element.select_by_value(value).await.unwrap();
    }

    /// A PNG of the viewport, saved as `<name>.png` in `dir`, checked to show more than a blank page.
    async fn screenshot(&self, dir: &Path, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let colours = distinct_colours(&png);
        assert!(colours >= MIN_DISTINCT_COLOURS, "the {name} screenshot looks blank: {colours} colours");
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// The error messages of the browser's console log since the session began (script errors, failed loads,
    /// Content-Security-Policy refusals, `console.error`).
    async fn console_errors(&self) -> Vec<String> {
        let entries = self.client.issue_cmd(BrowserLog).await.unwrap();
        entries
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session ends the browser; killing only the driver would leave the browser running.
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .new_agent();
        let _ = agent.delete(format!("{}session/{}", self.driver_url, self.session)).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log (what the `goog:loggingPrefs` capability
/// asked it to keep).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

/// Polls `probe` until it gives a value; panics after [`PATIENCE`].
async fn patiently<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many distinct colours a PNG holds (counting stops at a few hundred: enough to tell a page from a blank).
fn distinct_colours(png_bytes: &[u8]) -> usize {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let channels = frame.color_type.samples();
    let mut seen = std::collections::HashSet::new();
    for pixel in pixels[..frame.buffer_size()].chunks_exact(channels) {
        seen.insert(pixel.to_vec());
        if seen.len() >= 512 {
            break;
        }
    }
    seen.len()
}

fn copy_screenshots(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(format!("console-{}", path.file_name().unwrap().to_string_lossy()))).unwrap();
    }
}
