//! Releasing, at start, the claims a killed gateway left in a SQLite database.
//!
//! Only for SQLite, and only because of [`crate::lock::DatabaseLock`]: the lock proves that no other live
//! process uses the file, so every claim found at start belongs to a dead one, and waiting for its lease
//! would only delay work nobody is doing. On a shared database (PostgreSQL) other live instances
//! hold claims at any moment, and releasing them would break the one-live-claim guarantees; there the leases
//! (and the leadership token, for cron fires) are the only way back.

use diesel::prelude::*;
use gateway_core::DeliveryStatus;
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::schema::{cron_jobs, webhook_deliveries};
use crate::timestamp::to_db;

/// What [`release_stranded_claims`] changed, for the start-up log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Released {
    /// Cron fires that were claimed: their instants are claimable again at once, with the same fire_id.
    pub(crate) cron_claims: usize,
    /// Delivery attempts that were in flight: those deliveries are due now.
    pub(crate) delivery_attempts_in_flight: usize,
    /// New deliveries whose immediate attempt never started: due from their creation, not 30 s later.
    pub(crate) deliveries_never_attempted: usize,
}

impl Released {
    /// Nothing was left claimed: the previous process stopped cleanly, or there was none.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Releases every claim in the database as of `now`. Run it in one IMMEDIATE transaction, before any loop
/// reads the tables.
pub(crate) fn release_stranded_claims(connection: &mut SqliteConnection, now: OffsetDateTime) -> QueryResult<Released> {
    let now = to_db(now);
    // The fire keeps its `next_fire_at`, hence its fire_id: a fire that was published before the crash is
    // published again under the same id (at least once), and one that was not goes out in the first cycle
    // instead of after the rest of a 10 s lease.
    // This reads the whole table, once per start: about 35 ms for a million rows in the page cache (cron-bench,
    // recovery). A partial index on `claimed_until` would make it a lookup, but every claim and completion would
    // then write that index too, on the scheduler's hot path; a start-up cost is the cheaper place to pay.
    let cron_claims = diesel::update(cron_jobs::table.filter(cron_jobs::claimed_until.is_not_null()))
        .set((
            cron_jobs::claimed_by.eq(None::<String>),
            cron_jobs::claimed_until.eq(None::<PrimitiveDateTime>),
            cron_jobs::claim_token.eq(None::<i64>),
        ))
        .execute(connection)?;

    let (delivery_attempts_in_flight, deliveries_never_attempted) = release_deliveries(connection, now)?;
    Ok(Released { cron_claims, delivery_attempts_in_flight, deliveries_never_attempted })
}

fn release_deliveries(connection: &mut SqliteConnection, now: PrimitiveDateTime) -> QueryResult<(usize, usize)> {
    use webhook_deliveries::dsl;
    // Read through the partial index on the marker (a handful of rows, however large the table), then written
    // by id: a single UPDATE that also filtered on status and `next_retry_at` would let the planner pick the
    // `(status, next_retry_at)` index and walk every retry scheduled in the future instead.
    let claimed: Vec<(i64, String, Option<PrimitiveDateTime>)> = dsl::webhook_deliveries
        .filter(dsl::claimed_until.is_not_null())
        .select((dsl::id, dsl::status, dsl::next_retry_at))
        .load(connection)?;
    let awaiting_attempt = [DeliveryStatus::Pending, DeliveryStatus::Failed].map(DeliveryStatus::as_str);
    // An attempt that was in flight has no outcome and never will: the row is due now rather than at the end
    // of its lease (which `next_retry_at` holds while it is claimed). The time it was due before the claim is
    // not kept; "now" puts it behind rows that were already overdue, all of which go out in the first cycles.
    // A claim whose lease had already run out left a row that is due anyway; only its marker goes.
    let due_now: Vec<i64> = claimed
        .iter()
        .filter(|(_, status, next_retry_at)| {
            awaiting_attempt.contains(&status.as_str()) && next_retry_at.is_some_and(|at| at > now)
        })
        .map(|(id, _, _)| *id)
        .collect();
    if !due_now.is_empty() {
        diesel::update(dsl::webhook_deliveries.filter(dsl::id.eq_any(&due_now)))
            .set(dsl::next_retry_at.eq(Some(now)))
            .execute(connection)?;
    }
    let in_flight = diesel::update(dsl::webhook_deliveries.filter(dsl::claimed_until.is_not_null()))
        .set(dsl::claimed_until.eq(None::<PrimitiveDateTime>))
        .execute(connection)?;

    // A new delivery is stored due 30 s after its creation, as the safety net of the attempt the enqueueing
    // process makes at once. After a restart nobody is going to make that attempt, so waiting out the net
    // only delays it: such a row is due from its creation. Which rows are these: `pending` with no attempt
    // made and due in the future. Only an enqueue leaves a row like that (inbound webhooks enqueue the same
    // way). "Retry now" also leaves `pending` with no attempt, but due at the moment of the reset, which is
    // not in the future; a claimed one was released above and is due now. The rate limits still apply: the
    // dispatcher takes due rows at most `--webhook-max-per-cycle` at a time, oldest first, so a backlog of
    // these goes out in creation order and in cycles, not all at once. A `created_at` in the future (a clock
    // that went back) is left alone: the safety net still covers it.
    let never_attempted = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::status.eq(DeliveryStatus::Pending.as_str()))
            .filter(dsl::attempt_count.eq(0))
            .filter(dsl::next_retry_at.gt(now))
            .filter(dsl::created_at.le(now)),
    )
    .set(dsl::next_retry_at.eq(dsl::created_at.nullable()))
    .execute(connection)?;
    Ok((in_flight, never_attempted))
}

#[cfg(test)]
mod tests {
    use diesel::sql_types::Text;
    use gateway_core::conformance::cron::lease;
    use gateway_core::{
        AgentId, CronJobStore, DeliveryAttempt, DeliveryUpdate, NewCronJob, NewDelivery, NewWebhookConfig,
        WebhookSecret, WebhookStore,
    };
    use serde_json::Map;
    use time::Duration;

    use super::*;
    use crate::{DatabaseUrl, DieselStore};

    fn open(dir: &tempfile::TempDir) -> DieselStore {
        DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap()
    }

    fn one_time(store: &DieselStore, at: OffsetDateTime) -> i64 {
        let job = NewCronJob {
            agent_id: AgentId::new("agent-7").unwrap(),
            schedule: None,
            next_fire_at: at,
            payload: Map::new(),
            is_one_time: true,
            idempotency_key: None,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: gateway_core::MisfirePolicy::FireOnce,
            max_lateness_ms: None,
        };
        store.insert_cron_job(&job).unwrap().id
    }

    fn config(store: &DieselStore) -> i64 {
        store
            .create_config(&NewWebhookConfig {
                source_identifier: "github".into(),
                event_type: "push".into(),
                agent_intent: "review".into(),
                target_session: "s".into(),
                target_url: "https://example.com/hook".into(),
                secret: WebhookSecret::new("secret"),
                created_at: OffsetDateTime::now_utc(),
                inbound_secret: None,
                inbound_require_timestamp: false,
                rate_limit_per_second: None,
            })
            .unwrap()
            .id
    }

    /// A delivery as the router stores it: pending, due 30 s after its creation (the safety net).
    fn enqueued(store: &DieselStore, webhook_id: i64, created_at: OffsetDateTime) -> i64 {
        store
            .insert_delivery(&NewDelivery {
                webhook_id,
                session_id: "s".into(),
                payload: "{}".into(),
                target_url: "https://example.com/hook".into(),
                signature: "sha256=00".into(),
                created_at,
                next_retry_at: created_at + Duration::seconds(30),
                idempotency_key: None,
                claimed: false,
            })
            .unwrap()
            .id
    }

    /// Records a failed first attempt of a claimed row, with its retry due at `retry_at`.
    fn fail_first_attempt(store: &DieselStore, id: i64, lease: OffsetDateTime, retry_at: OffsetDateTime) -> bool {
        let at = retry_at - Duration::seconds(30);
        let attempt = DeliveryAttempt {
            delivery_id: id,
            attempt_number: 1,
            started_at: at,
            duration_ms: 3,
            status_code: Some(503),
            error_class: Some("http_503".into()),
            error_detail: None,
        };
        let update = DeliveryUpdate {
            status: DeliveryStatus::Failed,
            attempt_count: 1,
            last_attempted_at: at,
            next_retry_at: Some(retry_at),
            error_detail: Some("http_503".into()),
            signature: None,
        };
        store.record_attempt(&attempt, lease, &update).unwrap()
    }

    fn claim_marker(store: &DieselStore, id: i64) -> Option<OffsetDateTime> {
        store
            .with_sqlite("read the claim marker", |connection| {
                webhook_deliveries::table
                    .find(id)
                    .select(webhook_deliveries::claimed_until)
                    .first::<Option<PrimitiveDateTime>>(connection)
            })
            .unwrap()
            .unwrap()
            .map(crate::timestamp::from_db)
    }

    fn next_retry_at(store: &DieselStore, id: i64) -> OffsetDateTime {
        store.delivery(id).unwrap().unwrap().next_retry_at.unwrap()
    }

    #[test]
    fn claimed_cron_fires_are_claimable_at_once_after_a_restart_with_their_instant() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let now = crate::timestamp::normalize(OffsetDateTime::now_utc());
        let overdue = one_time(&store, now - Duration::seconds(1));
        // Claimed ahead of its instant, as the scheduler does 50 ms before it.
        let claimed_ahead = one_time(&store, now + Duration::milliseconds(40));
        let unclaimed = one_time(&store, now - Duration::seconds(2));
        let ahead = gateway_core::ClaimLease { due_by: now + Duration::milliseconds(50), ..lease("dead", 1, now) };
        assert_eq!(store.claim_fires(&[overdue, claimed_ahead], &ahead).unwrap().len(), 2);
        let before: Vec<_> = store.pending_fires(now + Duration::minutes(1), 10).unwrap();
        assert_eq!(before.iter().filter(|fire| fire.claimed_until.is_some()).count(), 2);
        drop(store);

        let store = open(&dir);
        let after = store.pending_fires(now + Duration::minutes(1), 10).unwrap();
        assert!(after.iter().all(|fire| fire.claimed_until.is_none()), "{after:?}");
        let instants = |fires: &[gateway_core::PendingFire]| -> Vec<(i64, OffsetDateTime)> {
            fires.iter().map(|fire| (fire.job_id, fire.scheduled_for)).collect()
        };
        assert_eq!(instants(&after), instants(&before), "same instants, hence the same fire_ids");
        // A new scheduler takes the overdue fire at once, under the same leadership token as the dead claimer (one
        // process per file: always term 1), long before the dead claim's 10 s lease would have ended.
        let claimed = store.claim_fires(&[overdue, unclaimed], &lease("alive", 1, now)).unwrap();
        assert_eq!(claimed.len(), 2);
    }

    #[test]
    fn a_delivery_attempt_in_flight_at_a_crash_is_due_at_once_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let webhook_id = config(&store);
        let now = crate::timestamp::normalize(OffsetDateTime::now_utc());
        let lease_end = now + Duration::seconds(15);

        // An immediate attempt of a new delivery, claimed and in flight.
        let immediate = enqueued(&store, webhook_id, now);
        store.claim(&[immediate], now + Duration::seconds(30), lease_end).unwrap();
        // A retry (attempt 2) the poll claimed.
        let retry = enqueued(&store, webhook_id, now - Duration::minutes(1));
        store.claim(&[retry], now, lease_end - Duration::minutes(1)).unwrap();
        assert!(fail_first_attempt(&store, retry, lease_end - Duration::minutes(1), now - Duration::seconds(1)));
        store.claim(&[retry], now, lease_end).unwrap();
        // A failed delivery waiting for its scheduled retry: not a claim, and nothing to release.
        let scheduled = enqueued(&store, webhook_id, now - Duration::minutes(2));
        store.claim(&[scheduled], now, lease_end - Duration::minutes(2)).unwrap();
        assert!(fail_first_attempt(&store, scheduled, lease_end - Duration::minutes(2), now + Duration::seconds(25)));
        // A claim whose lease had already ended: due anyway, only its marker is left.
        let expired = enqueued(&store, webhook_id, now - Duration::minutes(3));
        store.claim(&[expired], now, now - Duration::seconds(1)).unwrap();

        assert_eq!(claim_marker(&store, immediate), Some(lease_end));
        assert_eq!(claim_marker(&store, retry), Some(lease_end));
        assert_eq!(claim_marker(&store, scheduled), None, "recording the outcome clears the marker");
        assert!(store.due_deliveries(now + Duration::seconds(1), 10).unwrap().iter().all(|due| due.id == expired));
        drop(store);

        let store = open(&dir);
        let reopened = OffsetDateTime::now_utc();
        for id in [immediate, retry, expired] {
            assert_eq!(claim_marker(&store, id), None);
            assert!(next_retry_at(&store, id) <= reopened, "{id} is not due at once");
        }
        let due: Vec<i64> = store.due_deliveries(reopened, 10).unwrap().into_iter().map(|due| due.id).collect();
        assert_eq!(due, [expired, immediate, retry], "the expired lease first, then the released ones by id");
        assert_eq!(next_retry_at(&store, scheduled), now + Duration::seconds(25), "a scheduled retry keeps its time");
        assert_eq!(store.delivery(retry).unwrap().unwrap().attempt_count, 1, "the interrupted attempt is not counted");
    }

    #[test]
    fn a_delivery_inserted_claimed_for_its_attempt_is_due_at_once_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let webhook_id = config(&store);
        let now = crate::timestamp::normalize(OffsetDateTime::now_utc());
        let safety_net = now + Duration::seconds(30);
        let row = store
            .insert_delivery(&NewDelivery {
                webhook_id,
                session_id: "s".into(),
                payload: "{}".into(),
                target_url: "https://example.com/hook".into(),
                signature: "sha256=00".into(),
                created_at: now,
                next_retry_at: safety_net,
                idempotency_key: None,
                claimed: true,
            })
            .unwrap();
        assert_eq!(claim_marker(&store, row.id), Some(safety_net), "inserted with its claim");
        assert!(store.claim(&[row.id], safety_net - Duration::seconds(1), safety_net).unwrap().is_empty());
        drop(store);

        let store = open(&dir);
        assert_eq!(claim_marker(&store, row.id), None);
        assert!(next_retry_at(&store, row.id) <= OffsetDateTime::now_utc(), "due at once after the restart");
    }

    #[test]
    fn a_new_delivery_whose_immediate_attempt_never_started_is_due_from_its_creation() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let webhook_id = config(&store);
        let now = crate::timestamp::normalize(OffsetDateTime::now_utc());
        let created_at = now - Duration::milliseconds(15);
        let never_attempted = enqueued(&store, webhook_id, created_at);
        // "Retry now" leaves pending with no attempt too, but due at the reset: already due, left as it is.
        let reset = enqueued(&store, webhook_id, now - Duration::hours(1));
        store.claim(&[reset], now, now - Duration::minutes(59)).unwrap();
        assert!(fail_first_attempt(&store, reset, now - Duration::minutes(59), now + Duration::hours(1)));
        let reset_at = now - Duration::seconds(5);
        assert!(matches!(store.retry_now(reset, reset_at).unwrap(), gateway_core::RetryNowOutcome::Reset(_)));
        // Created "in the future" by a clock that has since gone back: its safety net stays.
        let from_the_future = enqueued(&store, webhook_id, now + Duration::hours(1));
        drop(store);

        let store = open(&dir);
        assert_eq!(next_retry_at(&store, never_attempted), created_at);
        assert_eq!(next_retry_at(&store, reset), reset_at);
        assert_eq!(next_retry_at(&store, from_the_future), now + Duration::hours(1) + Duration::seconds(30));
        let due: Vec<i64> =
            store.due_deliveries(OffsetDateTime::now_utc(), 10).unwrap().into_iter().map(|due| due.id).collect();
        assert_eq!(due, [reset, never_attempted]);
    }

    #[test]
    fn the_claim_marker_lives_from_the_claim_to_the_outcome_or_a_retry_now() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let webhook_id = config(&store);
        let now = crate::timestamp::normalize(OffsetDateTime::now_utc());
        let id = enqueued(&store, webhook_id, now);
        assert_eq!(claim_marker(&store, id), None);
        let lease_end = now + Duration::seconds(15);
        store.claim(&[id], now + Duration::seconds(30), lease_end).unwrap();
        assert_eq!(claim_marker(&store, id), Some(lease_end));
        assert!(!fail_first_attempt(&store, id, lease_end + Duration::seconds(1), now), "another claim's outcome");
        assert_eq!(claim_marker(&store, id), Some(lease_end), "an outcome not applied leaves the claim");
        assert!(fail_first_attempt(&store, id, lease_end, now + Duration::seconds(30)));
        assert_eq!(claim_marker(&store, id), None);

        // The retry is claimed, then reset by "Retry now" while in flight: the reset row is nobody's claim.
        let retry_lease = now + Duration::seconds(45);
        store.claim(&[id], now + Duration::seconds(30), retry_lease).unwrap();
        assert_eq!(claim_marker(&store, id), Some(retry_lease));
        assert!(matches!(store.retry_now(id, now).unwrap(), gateway_core::RetryNowOutcome::Reset(_)));
        assert_eq!(claim_marker(&store, id), None);
    }

    #[test]
    fn start_up_finds_claimed_deliveries_through_the_partial_index() {
        #[derive(diesel::QueryableByName)]
        struct Plan {
            #[diesel(sql_type = Text)]
            detail: String,
        }
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let plan: Vec<Plan> = store
            .with_sqlite("plan", |connection| {
                diesel::sql_query(
                    "EXPLAIN QUERY PLAN SELECT id, status, next_retry_at FROM webhook_deliveries \
                     WHERE claimed_until IS NOT NULL",
                )
                .load(connection)
            })
            .unwrap()
            .unwrap();
        let details: Vec<&str> = plan.iter().map(|step| step.detail.as_str()).collect();
        assert!(details.iter().any(|detail| detail.contains("webhook_deliveries_claimed_until")), "{details:?}");
    }
}
