//! FR-10.12 against the real binary: however deliveries are started, no more than `--webhook-max-per-second`
//! outbound requests start in any one second, oldest first.

use std::time::Duration;

use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::Gateway;

/// Arrival at the receiver trails the start by the loopback round trip, which varies by a few milliseconds
/// under load; starts one second apart may arrive a little less than a second apart.
const ARRIVAL_JITTER: Duration = Duration::from_millis(150);

/// Enqueues `count` deliveries one after another and returns their ids and the receiver's requests, by arrival.
fn burst(gateway: &Gateway, receiver: &Receiver, count: usize) -> (Vec<i64>, Vec<crate::receiver::Received>) {
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "ci", "event_type": "build", "agent_intent": "report",
                "target_session": "s-1", "target_url": receiver.url("/hook"), "secret": "rate-test-secret"}),
    );
    assert_eq!(status, 201, "{config}");
    let ids: Vec<i64> = (0..count)
        .map(|index| {
            let (status, delivery) = gateway.operator_post(
                "/gateway/deliveries",
                &json!({"webhook_id": config["id"], "session_id": "s-1", "payload": {"n": index}}),
            );
            assert_eq!(status, 201, "{delivery}");
            delivery["id"].as_i64().unwrap()
        })
        .collect();
    let mut received = receiver.wait_for(count);
    received.sort_by_key(|request| request.at);
    (ids, received)
}

/// Every `limit + 1` consecutive arrivals span at least a second; the groups of `limit` arrive oldest first.
fn assert_rate(ids: &[i64], received: &[crate::receiver::Received], limit: usize) {
    let first = received[0].at;
    let offsets: Vec<String> =
        received.iter().map(|request| format!("{:.3}", (request.at - first).as_secs_f64())).collect();
    eprintln!("{} deliveries at {limit}/s arrived at (s): {}", received.len(), offsets.join(" "));
    for window in received.windows(limit + 1) {
        let span = window[limit].at - window[0].at;
        assert!(span + ARRIVAL_JITTER >= Duration::from_secs(1), "{} requests within {span:?}", limit + 1);
    }
    for (group, expected) in received.chunks(limit).zip(ids.chunks(limit)) {
        let mut arrived: Vec<i64> = group.iter().map(|request| request.delivery_id()).collect();
        arrived.sort_unstable();
        assert_eq!(arrived, expected, "oldest first");
    }
}

#[test]
fn a_burst_of_twelve_goes_out_five_then_five_then_two() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&["--webhook-allow-private-targets"]);
    let (ids, received) = burst(&gateway, &receiver, 12);
    assert_rate(&ids, &received, 5);
    let span = received[11].at - received[0].at;
    assert!(span + ARRIVAL_JITTER >= Duration::from_secs(2), "the last two waited for the third second: {span:?}");
    assert_eq!(receiver.count(), 12, "each delivery exactly once");
}

#[test]
fn the_flag_sets_the_rate() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&["--webhook-allow-private-targets", "--webhook-max-per-second", "3"]);
    let (ids, received) = burst(&gateway, &receiver, 7);
    assert_rate(&ids, &received, 3);
}

/// Creates a config for `receiver`'s `path` with an optional `rate_limit_per_second`; its id.
fn config_at(gateway: &Gateway, receiver: &Receiver, source: &str, path: &str, rate: Option<u32>) -> i64 {
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": "build", "agent_intent": "report",
                "target_session": "s-1", "target_url": receiver.url(path), "secret": "rate-test-secret",
                "rate_limit_per_second": rate}),
    );
    assert_eq!(status, 201, "{config}");
    assert_eq!(config["rate_limit_per_second"], json!(rate));
    config["id"].as_i64().unwrap()
}

/// Per-endpoint rate (issue 20, DESIGN 18): with the global rate far above it, a config limited to 2 per second
/// is sent at most 2 in any second, judged from what the receiver saw, while an unlimited config's deliveries
/// enqueued at the same time go at once.
#[test]
fn an_endpoints_own_rate_holds_end_to_end_and_does_not_slow_the_others() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&[
        "--webhook-allow-private-targets",
        "--webhook-max-per-second",
        "1000",
        "--webhook-max-per-cycle",
        "20",
    ]);
    let slow = config_at(&gateway, &receiver, "slow", "/slow", Some(2));
    let fast = config_at(&gateway, &receiver, "fast", "/fast", None);
    const EACH: usize = 8;
    for index in 0..EACH {
        for webhook_id in [slow, fast] {
            let (status, delivery) = gateway.operator_post(
                "/gateway/deliveries",
                &json!({"webhook_id": webhook_id, "session_id": "s-1", "payload": {"n": index}}),
            );
            assert_eq!(status, 201, "{delivery}");
        }
    }
    let mut received = receiver.wait_for(2 * EACH);
    received.sort_by_key(|request| request.at);
    let (slow_arrivals, fast_arrivals): (Vec<_>, Vec<_>) =
        received.into_iter().partition(|request| request.path.starts_with("/slow"));
    assert_eq!((slow_arrivals.len(), fast_arrivals.len()), (EACH, EACH));
    let first = slow_arrivals[0].at.min(fast_arrivals[0].at);
    let offsets = |arrivals: &[crate::receiver::Received]| {
        arrivals.iter().map(|request| format!("{:.3}", (request.at - first).as_secs_f64())).collect::<Vec<_>>()
    };
    eprintln!("limited to 2/s arrived at (s): {}", offsets(&slow_arrivals).join(" "));
    eprintln!("unlimited arrived at (s): {}", offsets(&fast_arrivals).join(" "));
    for window in slow_arrivals.windows(3) {
        let span = window[2].at - window[0].at;
        assert!(span + ARRIVAL_JITTER >= Duration::from_secs(1), "3 requests to the 2/s endpoint within {span:?}");
    }
    let slow_span = slow_arrivals[EACH - 1].at - slow_arrivals[0].at;
    assert!(slow_span + ARRIVAL_JITTER >= Duration::from_secs(3), "8 at 2/s take 3 s at least: {slow_span:?}");
    let fast_span = fast_arrivals[EACH - 1].at - first;
    assert!(fast_span < Duration::from_secs(2), "the unlimited endpoint was held back: {fast_span:?}");
    assert_eq!(receiver.count(), 2 * EACH, "each delivery exactly once");
}

#[test]
fn a_configs_rate_is_set_shown_removed_and_refused_when_out_of_range() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&["--webhook-allow-private-targets"]);
    let id = config_at(&gateway, &receiver, "ci", "/hook", None);
    let path = format!("/gateway/webhook-configs/{id}");
    let (status, patched) = gateway.operator_patch(&path, &json!({"rate_limit_per_second": 7}));
    assert_eq!((status, &patched["rate_limit_per_second"]), (200, &json!(7)), "{patched}");
    assert_eq!(gateway.operator_get(&path).1["rate_limit_per_second"], json!(7));
    for refused in [json!(0), json!(-3), json!(1.5), json!("2"), json!(100_001), json!(u64::MAX)] {
        let (status, body) = gateway.operator_patch(&path, &json!({"rate_limit_per_second": refused}));
        assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{refused}: {body}");
        assert!(body.to_string().contains("rate_limit_per_second"), "{refused}: {body}");
        let create = json!({"source_identifier": "other", "event_type": "build", "agent_intent": "report",
                            "target_session": "s-1", "target_url": receiver.url("/x"), "secret": "rate-test-secret",
                            "rate_limit_per_second": refused});
        let (status, body) = gateway.operator_post("/gateway/webhook-configs", &create);
        assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "create {refused}: {body}");
    }
    assert_eq!(gateway.operator_get(&path).1["rate_limit_per_second"], json!(7), "a refused change changes nothing");
    let (status, removed) = gateway.operator_patch(&path, &json!({"rate_limit_per_second": null}));
    assert_eq!((status, &removed["rate_limit_per_second"]), (200, &Value::Null), "{removed}");
    let (_, list) = gateway.operator_get("/gateway/webhook-configs");
    assert_eq!(list["webhook_configs"][0]["rate_limit_per_second"], Value::Null);
}

/// Cluster-wide (issue 20: "inside the global cap and cluster-wide with Redis"): two instances on one database
/// and one Redis, each enqueueing half of a burst to a config limited to 2 per second, send it at most 2 per second
/// together (each on its own would send 2 per second: 4 together), judged from the receiver's arrivals.
#[test]
fn an_endpoints_rate_holds_across_two_instances_sharing_redis() {
    let _turn = crate::cluster::one_at_a_time();
    let test = "it::rate::an_endpoints_rate_holds_across_two_instances_sharing_redis";
    let Some(cluster) = crate::support::cluster::Cluster::start(test, 2, &["--webhook-max-per-second", "1000"]) else {
        return;
    };
    let receiver = Receiver::start(Behaviour::Status(200));
    let webhook = cluster.create_webhook(0, "cluster-rate", &receiver.url("/limited"), "rate-test-secret");
    let (status, body) = cluster
        .gateway(1)
        .operator_patch(&format!("/gateway/webhook-configs/{webhook}"), &json!({"rate_limit_per_second": 2}));
    assert_eq!(status, 200, "{body}");
    // Instance 0 remembers the config as it created it, without a rate, for up to a second
    // (`ENDPOINT_RATE_REFRESH_INTERVAL`, docs/webhooks.md): a change made through another instance applies after that.
    std::thread::sleep(Duration::from_millis(1100));
    const EACH: usize = 5;
    for n in 0..EACH {
        for index in [0, 1] {
            let (status, body) = cluster.enqueue(index, webhook, &json!({"n": n, "through": index}));
            assert_eq!(status, 201, "{body}");
        }
    }
    let mut received = receiver.wait_for(2 * EACH);
    received.sort_by_key(|request| request.at);
    let first = received[0].at;
    let offsets: Vec<String> =
        received.iter().map(|request| format!("{:.3}", (request.at - first).as_secs_f64())).collect();
    eprintln!("2/s across two instances arrived at (s): {}", offsets.join(" "));
    for window in received.windows(3) {
        let span = window[2].at - window[0].at;
        assert!(span + ARRIVAL_JITTER >= Duration::from_secs(1), "3 requests within {span:?}: {offsets:?}");
    }
    let span = received[2 * EACH - 1].at - first;
    assert!(span + ARRIVAL_JITTER >= Duration::from_secs(4), "10 at 2/s take 4 s at least: {span:?}");
}
