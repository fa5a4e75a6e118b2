//! Rules every [`LivenessMap`] must keep: bounded (known agents always update), listed in keyset pages by agent
//! id, silent agents evicted exactly once, evictions fenced.
//!
//! Every rule expects a fresh, empty map that tracks at most [`CAPACITY`] agents, and that what `record` wrote is
//! seen by the next call of the same map (a shared adapter that writes in the background flushes before it reads).

use time::{Duration, OffsetDateTime};

use crate::{AgentId, ClusterId, FencingToken, LiveEntry, LivePage, LivenessMap, LivenessRefusal, StoreError};

/// How many agents the map under test may track.
pub const CAPACITY: usize = 3;

/// The silence after which an agent is evicted, in these rules.
const THRESHOLD: Duration = Duration::seconds(90);

fn agent(id: &str) -> AgentId {
    AgentId::new(id).expect("a valid agent id")
}

fn cluster(id: &str) -> ClusterId {
    ClusterId::new(id).expect("a valid cluster id")
}

fn entry(id: &str, cluster_id: &str, last_seen: OffsetDateTime) -> LiveEntry {
    LiveEntry { agent_id: agent(id), cluster_id: cluster(cluster_id), last_seen }
}

fn record(map: &dyn LivenessMap, id: &str, cluster_id: &str, receipt: OffsetDateTime) -> Result<(), LivenessRefusal> {
    map.record(&agent(id), &cluster(cluster_id), receipt)
}

fn everyone(map: &dyn LivenessMap) -> Vec<LiveEntry> {
    map.live_agents(None, CAPACITY + 1, WALK).expect("list").entries
}

/// Rows a page may read in these rules, unless a rule says otherwise: more than a map of [`CAPACITY`] agents
/// keeps in any of them.
const WALK: usize = 100;

fn page(map: &dyn LivenessMap, after: Option<&str>, limit: usize, walk: usize) -> LivePage {
    map.live_agents(after.map(agent).as_ref(), limit, walk).expect("list")
}

fn sorted(mut entries: Vec<LiveEntry>) -> Vec<LiveEntry> {
    entries.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
    entries
}

/// Up to [`CAPACITY`] agents are tracked; a further one is refused ([`LivenessRefusal::CapacityReached`] with the
/// cap) and not tracked, while a known agent always updates, its receipt time and its cluster.
pub fn the_map_is_bounded_but_known_agents_update(map: &dyn LivenessMap, at: OffsetDateTime) {
    for id in ["a", "b", "c"] {
        record(map, id, "west", at).expect("room for it");
    }
    assert_eq!(record(map, "d", "west", at), Err(LivenessRefusal::CapacityReached { cap: CAPACITY }));
    assert!(!map.is_live(&agent("d")));
    assert_eq!(map.tracked_count(), CAPACITY);

    let later = at + Duration::milliseconds(60_250);
    record(map, "a", "east", later).expect("a known agent updates at the cap");
    assert!(map.is_live(&agent("a")));
    assert_eq!(everyone(map), [entry("a", "east", later), entry("b", "west", at), entry("c", "west", at)]);
    assert_eq!(map.tracked_count(), CAPACITY);
}

/// Live agents list in ascending agent id, in keyset pages: at most `limit`, only ids after `after`, whatever the
/// order they were recorded in; each entry carries its cluster and receipt time. A full page's `next_after` is its
/// last entry; a page that read every row after `after` has none.
pub fn live_agents_are_listed_in_pages_by_agent_id(map: &dyn LivenessMap, at: OffsetDateTime) {
    assert_eq!(page(map, None, 10, WALK), LivePage::default());
    record(map, "carol", "west", at + Duration::seconds(3)).expect("record");
    record(map, "alice", "east", at + Duration::seconds(1)).expect("record");
    record(map, "bob", "west", at + Duration::seconds(2)).expect("record");
    let first = page(map, None, 2, WALK);
    assert_eq!(
        first.entries,
        [entry("alice", "east", at + Duration::seconds(1)), entry("bob", "west", at + Duration::seconds(2))]
    );
    assert_eq!(first.next_after, Some(agent("bob")));
    let second = page(map, Some("bob"), 2, WALK);
    assert_eq!(second, LivePage { entries: vec![entry("carol", "west", at + Duration::seconds(3))], next_after: None });
    assert_eq!(page(map, Some("carol"), 2, WALK), LivePage::default());
    assert_eq!(page(map, Some("b"), 1, WALK).entries[0].agent_id, agent("bob"), "after is exclusive");
    let walked_one = page(map, None, 3, 1);
    assert_eq!(
        (walked_one.entries.len(), walked_one.next_after),
        (1, Some(agent("alice"))),
        "a page reads `walk` rows"
    );
}

/// Evicted agents are never listed, however many there were: following `next_after` from the start until it is
/// absent lists every live agent once, in id order, in pages of at most `limit` (and of at most `walk`), whether
/// the map keeps the evicted agents' rows (then pages among them are short, or empty) or not.
pub fn following_the_cursor_lists_every_live_agent_among_evicted_ones(map: &dyn LivenessMap, at: OffsetDateTime) {
    let id = |n: usize| format!("agent-{n:02}");
    let live = [2, 9, 13];
    let evicted: Vec<usize> = (0..15).filter(|n| !live.contains(n)).collect();
    // At most CAPACITY at a time: in rounds, each evicted before the next is recorded.
    for round in evicted.chunks(CAPACITY) {
        for &n in round {
            record(map, &id(n), "west", at).expect("record");
        }
        assert_eq!(
            map.evict_silent(at + Duration::seconds(91), THRESHOLD, FencingToken(1)).expect("evict").len(),
            round.len()
        );
    }
    let later = at + Duration::seconds(100);
    for n in live {
        record(map, &id(n), "east", later).expect("record");
    }
    for (limit, walk) in [(2, 3), (1, 1), (2, 100)] {
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..100 {
            let LivePage { entries, next_after } = page(map, after.as_deref(), limit, walk);
            assert!(entries.len() <= limit.min(walk), "limit {limit}, walk {walk}: {entries:?}");
            if let Some(next) = &next_after {
                assert!(after.as_deref().is_none_or(|after| next.as_str() > after), "the cursor moves on");
                assert!(entries.iter().all(|entry| entry.agent_id <= *next), "nothing past the cursor");
            }
            listed.extend(entries);
            match next_after {
                Some(next) => after = Some(next.into_inner()),
                None => break,
            }
        }
        let expected: Vec<LiveEntry> = live.iter().map(|&n| entry(&id(n), "east", later)).collect();
        assert_eq!(listed, expected, "limit {limit}, walk {walk}");
    }
}

/// An eviction removes exactly the agents silent for longer than the threshold (one silent for exactly the
/// threshold stays) and returns each once, as it was last seen: asking again returns nothing. An evicted agent is
/// no longer live, and its place under the cap is free again.
pub fn silent_agents_are_evicted_exactly_once(map: &dyn LivenessMap, at: OffsetDateTime) {
    record(map, "a", "west", at).expect("record");
    record(map, "b", "west", at + Duration::seconds(1)).expect("record");
    record(map, "c", "east", at + Duration::seconds(60)).expect("record");
    let now = at + Duration::seconds(91);
    let token = FencingToken(1);
    assert_eq!(map.evict_silent(now, THRESHOLD, token).expect("evict"), [entry("a", "west", at)]);
    assert!(map.evict_silent(now, THRESHOLD, token).expect("evict").is_empty(), "evicted once");
    assert!(!map.is_live(&agent("a")));
    assert!(map.is_live(&agent("b")), "silent for exactly the threshold");
    assert_eq!(map.tracked_count(), 2);
    record(map, "d", "west", now).expect("the evicted agent's place is free");

    let much_later = now + Duration::minutes(10);
    let evicted = sorted(map.evict_silent(much_later, THRESHOLD, token).expect("evict"));
    let expected = [entry("b", "west", at + Duration::seconds(1)), entry("c", "east", at + Duration::seconds(60))];
    assert_eq!(evicted, [&expected[..], &[entry("d", "west", now)]].concat());
    assert!(everyone(map).is_empty());
    assert_eq!(map.tracked_count(), 0);
}

/// Eviction is a leader-only write: under an older token than the newest the map has seen it is refused with
/// [`StoreError::Fenced`] and removes nothing; a newer token raises the newest, so the token before it is refused
/// from then on. Expects a map that has seen no token above 1.
pub fn evictions_are_fenced_older_tokens_refused_whole_newer_ones_raise_the_epoch(
    map: &dyn LivenessMap,
    at: OffsetDateTime,
) {
    assert!(map.evict_silent(at, THRESHOLD, FencingToken(5)).expect("evict").is_empty());
    record(map, "a", "west", at).expect("record");
    let now = at + Duration::seconds(91);
    let stale = map.evict_silent(now, THRESHOLD, FencingToken(4));
    assert_eq!(stale, Err(StoreError::Fenced { token: FencingToken(4), newest: FencingToken(5) }));
    assert!(map.is_live(&agent("a")), "a refused eviction removed nothing");
    assert_eq!(everyone(map), [entry("a", "west", at)]);

    assert_eq!(map.evict_silent(now, THRESHOLD, FencingToken(6)).expect("evict"), [entry("a", "west", at)]);
    let deposed = map.evict_silent(now, THRESHOLD, FencingToken(5));
    assert_eq!(deposed, Err(StoreError::Fenced { token: FencingToken(5), newest: FencingToken(6) }));
}

/// For a shared adapter (not part of the macro: one process has no second instance): two instances' maps over one
/// storage are one map. What one records, once flushed, the other lists; a receipt flushed late does not move an
/// agent's time back; an agent is evicted once, by whichever asks first; and a token raised through one instance
/// fences the other. Expects two handles on the same fresh storage, each with room for a few agents.
pub fn instances_share_one_map(a: &dyn LivenessMap, b: &dyn LivenessMap, at: OffsetDateTime) {
    record(a, "alice", "west", at).expect("record");
    a.flush().expect("flush");
    record(b, "bob", "east", at + Duration::seconds(5)).expect("record");
    b.flush().expect("flush");
    let both = [entry("alice", "west", at), entry("bob", "east", at + Duration::seconds(5))];
    assert_eq!(everyone(a), both);
    assert_eq!(everyone(b), both);

    record(b, "alice", "west", at + Duration::seconds(60)).expect("record");
    b.flush().expect("flush");
    record(a, "alice", "north", at + Duration::seconds(30)).expect("record");
    a.flush().expect("flush");
    assert_eq!(everyone(b)[0], entry("alice", "west", at + Duration::seconds(60)), "the latest receipt wins");

    let now = at + Duration::seconds(96);
    assert_eq!(a.evict_silent(now, THRESHOLD, FencingToken(1)).expect("evict"), [both[1].clone()]);
    assert!(b.evict_silent(now, THRESHOLD, FencingToken(1)).expect("evict").is_empty(), "evicted once");
    assert_eq!(everyone(b), [entry("alice", "west", at + Duration::seconds(60))]);

    assert!(b.evict_silent(now, THRESHOLD, FencingToken(2)).expect("evict").is_empty());
    let deposed = a.evict_silent(now, THRESHOLD, FencingToken(1));
    assert_eq!(deposed, Err(StoreError::Fenced { token: FencingToken(1), newest: FencingToken(2) }));
}
