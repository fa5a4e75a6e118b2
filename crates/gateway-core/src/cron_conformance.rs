//! Rules every [`CronJobStore`] must keep, written once and run against each implementation: the in-memory
//! fake in this crate's tests, the database adapters in theirs (through the `conformance` feature).

use serde_json::Map;
use time::{Duration, OffsetDateTime};

use crate::{AgentId, ClaimLease, CronJobStore, FencingToken, NewCronJob};

/// A claim takes rows due by `due_by` (the claimer's margin) without moving their instant, and judges a live
/// lease by `now` alone: a rival whose margin reaches past the end of a lease still waits for that end.
pub fn claim_ahead_takes_rows_due_by_its_margin_but_judges_leases_by_now(store: &dyn CronJobStore, at: OffsetDateTime) {
    let job = NewCronJob {
        agent_id: AgentId::new("agent-7").expect("a valid agent id"),
        schedule: None,
        next_fire_at: at,
        payload: Map::new(),
        is_one_time: true,
        idempotency_key: None,
    };
    let job = store.insert_cron_job(&job).expect("insert");
    let claim = |owner: &str, now: OffsetDateTime, margin_ms: i64| {
        let lease = ClaimLease {
            owner: owner.to_owned(),
            token: FencingToken(1),
            now,
            due_by: now + Duration::milliseconds(margin_ms),
            expires_at: now + Duration::seconds(10),
        };
        store.claim_fires(&[job.id], &lease).expect("claim")
    };
    let early = at - Duration::milliseconds(50);
    assert!(claim("a", early, 49).is_empty(), "not due by the margin");
    let claimed = claim("a", early, 50);
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].next_fire_at, at, "the claim does not move the instant");
    let lease_end = early + Duration::seconds(10);
    assert!(claim("b", lease_end - Duration::milliseconds(1), 1_000).is_empty(), "the lease is live until it ends");
    assert_eq!(claim("b", lease_end, 50).len(), 1);
}
