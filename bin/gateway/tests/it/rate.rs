//! FR-10.12 against the real binary: however deliveries are started, no more than `--webhook-max-per-second`
//! outbound requests start in any one second, oldest first.

use std::time::Duration;

use serde_json::json;

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
