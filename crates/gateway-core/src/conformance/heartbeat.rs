//! Rules every [`HeartbeatStore`] must keep: one row per agent, the last heartbeat wins (between calls and within
//! one), reads answer the agent asked for. Instants carry milliseconds, which every backend keeps exactly.

use time::{Duration, OffsetDateTime};

use crate::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore};

fn record(agent: &str, cluster: &str, last_seen_at: OffsetDateTime) -> HeartbeatRecord {
    HeartbeatRecord {
        agent_id: AgentId::new(agent).expect("a valid agent id"),
        cluster_id: ClusterId::new(cluster).expect("a valid cluster id"),
        last_seen_at,
    }
}

fn read(store: &dyn HeartbeatStore, agent: &str) -> Option<HeartbeatRecord> {
    store.heartbeat(&AgentId::new(agent).expect("a valid agent id")).expect("read")
}

/// A first heartbeat inserts the agent's row and every later one replaces it whole (cluster and instant), whatever
/// the instants' order: the store keeps the last written, not the newest. Other agents' rows are untouched, and an
/// agent never seen reads as `None`. Expects an empty store.
pub fn an_upsert_inserts_then_replaces_the_row_of_its_agent(store: &dyn HeartbeatStore, at: OffsetDateTime) {
    assert_eq!(read(store, "agent-42"), None);
    let other = record("agent-7", "cluster-x", at + Duration::milliseconds(1_250));
    store.upsert_heartbeat(&other).expect("upsert");
    for second in 0..100 {
        let cluster = format!("cluster-{}", second % 3);
        store.upsert_heartbeat(&record("agent-42", &cluster, at + Duration::seconds(second))).expect("upsert");
    }
    let last = record("agent-42", "cluster-0", at + Duration::seconds(99));
    assert_eq!(read(store, "agent-42"), Some(last));
    let earlier = record("agent-42", "cluster-1", at + Duration::milliseconds(500));
    store.upsert_heartbeat(&earlier).expect("upsert");
    assert_eq!(read(store, "agent-42"), Some(earlier), "the last written wins, even with an older instant");
    assert_eq!(read(store, "agent-7"), Some(other), "another agent's row is untouched");
    assert_eq!(read(store, "nobody"), None);
}

/// Within one call, records apply in order: of two records of one agent the later in the call wins, even when its
/// instant is older. This holds for a call larger than a database adapter puts in one statement (1,200 records of
/// 600 agents here), and an empty call writes nothing and succeeds. Expects an empty store.
pub fn the_last_record_of_an_agent_wins_within_one_call(store: &dyn HeartbeatStore, at: OffsetDateTime) {
    let pair =
        [record("agent-1", "c", at + Duration::seconds(120)), record("agent-1", "c", at + Duration::seconds(110))];
    store.upsert_heartbeats(&pair).expect("upsert");
    assert_eq!(read(store, "agent-1").map(|row| row.last_seen_at), Some(at + Duration::seconds(110)));

    let agents = 600;
    let first: Vec<HeartbeatRecord> =
        (0..agents).map(|n| record(&format!("bulk-{n:03}"), "first", at + Duration::milliseconds(n * 7 + 3))).collect();
    // Each agent's second record comes later in the call; every other one carries an older instant than its first.
    let second: Vec<HeartbeatRecord> = (0..agents)
        .map(|n| {
            let offset = if n % 2 == 0 { Duration::seconds(-5) } else { Duration::seconds(5) };
            record(&format!("bulk-{n:03}"), "second", at + Duration::milliseconds(n * 7 + 3) + offset)
        })
        .collect();
    let call: Vec<HeartbeatRecord> = first.iter().chain(&second).cloned().collect();
    store.upsert_heartbeats(&call).expect("upsert");
    for expected in &second {
        assert_eq!(read(store, expected.agent_id.as_str()).as_ref(), Some(expected));
    }
    store.upsert_heartbeats(&[]).expect("an empty call");
    assert_eq!(read(store, "bulk-000").as_ref(), Some(&second[0]));
}
