//! GET /gateway/events (SSE) and the eviction it reports.

use std::time::Duration;

use serde_json::json;

use crate::support::{EventStream, Gateway, PATIENCE};

#[test]
fn an_evicted_agent_is_announced_over_sse() {
    // One-second threshold, checks every 100 ms: the real loop, on a short fuse.
    let gateway = Gateway::start(&["--heartbeat-check-interval-ms", "100", "--heartbeat-eviction-threshold-s", "1"]);
    let agents = gateway.subscribe("gateway:agents");
    let ping = json!({"type": "heartbeat", "agent_id": "agent-99", "cluster_id": "cluster-west", "timestamp": "2026-02-22T12:00:00Z"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping).0, 200);

    let event = agents.expect("agent_evicted");
    assert_eq!(event.data["agent_id"], "agent-99");
    assert_eq!(event.data["cluster_id"], "cluster-west");
    assert!(event.data["last_seen"].is_string());
    gateway.wait_for_log("agent evicted");
    assert_eq!(gateway.operator_get("/gateway/agents").1["agents"], json!([]));
    assert_eq!(crate::support::count_rows(&gateway.database_path(), "gateway_heartbeats"), 1, "rows are kept");
}

#[test]
fn gateway_topics_need_the_operator_token_agent_topics_do_not() {
    let gateway = Gateway::start(&[]);
    let url = gateway.url("/gateway/events?topic=gateway:agents");
    assert_eq!(EventStream::open(&url, None).status, 401);
    assert_eq!(EventStream::open(&url, Some("wrong-token-wrong-token")).status, 401);
    let agent_topic = gateway.url("/gateway/events?topic=agent%3Aagent-7%3Ascheduled");
    assert_eq!(EventStream::open(&agent_topic, None).status, 200);
}

#[test]
fn unknown_topics_are_400() {
    let gateway = Gateway::start(&[]);
    for query in ["", "?topic=", "?topic=gateway:secrets", "?topic=agent::scheduled"] {
        let (status, body) = gateway.operator_get(&format!("/gateway/events{query}"));
        assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_topic")), "{query}");
    }
}

#[test]
fn subscribers_of_other_topics_see_nothing() {
    let gateway = Gateway::start(&[]);
    let violations = gateway.subscribe("gateway:violations");
    let messages = gateway.subscribe("gateway:messages");
    assert_eq!(gateway.post_json("/gateway/messages", &json!({})).0, 202);
    messages.expect("decision_log");
    // Then a refused log, whose event does belong on the violations stream: it comes first there, so the
    // accepted log published nothing on that stream before it.
    let (status, _) = gateway.post_json("/gateway/messages", &json!({"meta": {"trace_id": 7}}));
    assert_eq!(status, 422);
    let first = violations.next_within(PATIENCE).expect("no event on gateway:violations");
    assert_eq!(first.event, "schema_violation", "{first:?}");
}

#[test]
fn operator_streams_have_their_own_budget() {
    // docs/operations.md: 64 `gateway:*` streams, counted apart from the 1,024 agent streams.
    const OPERATOR_STREAMS: usize = 64;
    let gateway = Gateway::start(&[]);
    let url = gateway.url("/gateway/events?topic=gateway:agents");
    let open: Vec<EventStream> =
        (0..OPERATOR_STREAMS).map(|_| EventStream::open(&url, Some(crate::support::TOKEN))).collect();
    assert!(open.iter().all(|stream| stream.status == 200));
    assert_eq!(EventStream::open(&url, Some(crate::support::TOKEN)).status, 503, "the operator budget is spent");
    let agent_topic = gateway.url("/gateway/events?topic=agent%3Aagent-7%3Ascheduled");
    assert_eq!(EventStream::open(&agent_topic, None).status, 200, "agent streams are counted apart");
    assert_eq!(gateway.get("/readyz").0, 200);
}

/// Opens an agent stream over a raw TCP connection from `source` (a loopback address) and returns the status
/// line's code and the connection, which nothing reads from unless the test does.
fn open_raw_stream(address: &str, source: std::net::Ipv4Addr, agent: &str) -> (u16, std::net::TcpStream) {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&std::net::SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&address.parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    let mut connection: std::net::TcpStream = socket.into();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(connection, "GET /gateway/events?topic=agent%3A{agent}%3Ascheduled HTTP/1.1\r\nhost: {address}\r\n\r\n")
        .unwrap();
    // The status line, byte by byte: nothing past the head is read.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        connection.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head).split(' ').nth(1).unwrap().parse().unwrap();
    (status, connection)
}

#[test]
fn agent_streams_are_capped_per_client_address_and_a_closed_one_gives_its_place_back() {
    use gateway_auth::DEFAULT_STREAMS_PER_ADDRESS;
    use std::net::Ipv4Addr;
    let gateway = Gateway::start(&[]);
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut open: Vec<_> = (0..DEFAULT_STREAMS_PER_ADDRESS)
        .map(|n| open_raw_stream(&address, Ipv4Addr::LOCALHOST, &format!("agent-{n}")))
        .collect();
    assert!(open.iter().all(|(status, _)| *status == 200));
    let (refused, _) = open_raw_stream(&address, Ipv4Addr::LOCALHOST, "one-more");
    assert_eq!(refused, 503, "this address holds its share");
    let (elsewhere, _kept) = open_raw_stream(&address, Ipv4Addr::new(127, 0, 0, 2), "one-more");
    assert_eq!(elsewhere, 200, "another address has its own share");
    let operator = EventStream::open(&gateway.url("/gateway/events?topic=gateway:agents"), Some(crate::support::TOKEN));
    assert_eq!(operator.status, 200, "operator streams are not counted per address");
    let (_, closed) = open.pop().unwrap();
    closed.shutdown(std::net::Shutdown::Both).unwrap();
    drop(closed);
    crate::support::eventually("the closed stream's place is given back", || {
        let (status, connection) = open_raw_stream(&address, Ipv4Addr::LOCALHOST, "one-more");
        if status == 200 {
            open.push((status, connection));
        }
        status == 200
    });
}

#[test]
fn a_stream_delivers_every_event_in_order() {
    let gateway = Gateway::start(&[]);
    let stream = EventStream::open(&gateway.url("/gateway/events?topic=gateway:messages"), Some(crate::support::TOKEN));
    let big = "x".repeat(200_000);
    for n in 0..20 {
        // Every third one large: pieces of one event must not interleave with the next.
        let intent = if n % 3 == 0 { big.as_str() } else { "short" };
        let log = json!({
            "meta": {"trace_id": format!("t-{n}"), "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "agent-order", "agent_type": "t", "capability_version": "1"},
            "cognition": {"intent": intent, "confidence_score": 0.5},
            "action": {"status": "success"},
        });
        assert_eq!(gateway.post_json("/gateway/messages", &log).0, 202);
    }
    for n in 0..20 {
        let event = stream.expect("decision_log");
        assert_eq!(event.data["meta"]["trace_id"], format!("t-{n}"));
    }
}

/// The stall watchdog with test-sized limits, on an in-process gateway (those limits are not flags): a client that
/// connects and never reads is disconnected on a topic with no events at all, and its place is given back (one
/// stream per address here, by `--agent-streams-per-address`).
#[test]
fn a_client_that_never_reads_is_disconnected_and_its_place_given_back() {
    use clap::Parser;
    use gateway_pubsub::stream::StreamLimits;
    use std::io::Read;
    use std::net::Ipv4Addr;

    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
    let mut config = gateway::config::Config::try_parse_from([
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &database,
        "--admin-token",
        crate::support::TOKEN,
        "--agent-streams-per-address",
        "1",
    ])
    .unwrap();
    config.stream_limits = StreamLimits {
        keep_alive: Duration::from_millis(20),
        stall_timeout: Duration::from_millis(500),
        ..StreamLimits::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let address = runtime.block_on(async {
        let token = config.admin_token.clone().unwrap();
        let gateway = gateway::Gateway::start(&config, &token, shutdown.clone()).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(gateway.serve(listener));
        address
    });

    let (status, mut stuck) = open_raw_stream(&address, Ipv4Addr::LOCALHOST, "stuck");
    assert_eq!(status, 200);
    let (refused, _) = open_raw_stream(&address, Ipv4Addr::LOCALHOST, "second");
    assert_eq!(refused, 503, "one stream per address in this test");
    // Keep-alives of 4 KiB every 20 ms fill the buffers of a client that never reads in a few seconds.
    crate::support::eventually("the stuck client's place is given back", || {
        open_raw_stream(&address, Ipv4Addr::LOCALHOST, "second").0 == 200
    });
    // The stuck connection was closed, not only its stream: reading it now gets what was buffered, then the end.
    let mut rest = Vec::new();
    let ended = stuck.read_to_end(&mut rest);
    assert!(ended.is_ok() || ended.is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset));
    assert!(rest.len() > 64 * 1024, "only {} bytes were sent before the stream was closed", rest.len());
    shutdown.cancel();
}
