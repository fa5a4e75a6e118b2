//! Fencing in the database: `gateway_leader_epoch` holds the newest leadership token a leader-only write has
//! carried. Each such write checks its token against it, and raises it, inside its own transaction, so the check
//! and the write are one step: a deposed leader's write is refused whole.

use diesel::prelude::*;
use gateway_core::{FencingEpoch, FencingToken, StoreError};

use crate::connection::{AnyConnection, DieselStore};
use crate::error::FencedError;
use crate::schema::gateway_leader_epoch;

/// Tokens are `u64`; the column is a signed 64-bit integer. Terms never get near 2^63, and saturating keeps the
/// order if one ever did.
pub(crate) fn token_to_db(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(i64::MAX)
}

pub(crate) fn token_from_db(stored: i64) -> FencingToken {
    FencingToken(u64::try_from(stored).unwrap_or(0))
}

/// Admits a leader-only write under `token`, inside the caller's transaction (`DieselStore::immediate_fenced`):
/// refused when `token` is older than the newest seen, which it raises otherwise. Call it first in the
/// transaction: on PostgreSQL it locks the epoch row until the transaction ends (on SQLite the IMMEDIATE
/// transaction holds the database's write lock already), so a rival's leader-only write waits and then sees the
/// epoch this one left; and every such transaction takes this lock before any row lock, so they cannot deadlock
/// on each other.
pub(crate) fn admit(connection: &mut AnyConnection<'_>, token: FencingToken) -> Result<(), FencedError> {
    use gateway_leader_epoch::dsl;
    let epoch = dsl::gateway_leader_epoch.find(1).select(dsl::epoch);
    let newest: i64 = match connection {
        AnyConnection::Sqlite(connection) => epoch.first(&mut **connection)?,
        AnyConnection::Postgres(connection) => epoch.for_update().first(&mut **connection)?,
    };
    let wanted = token_to_db(token);
    if wanted < newest {
        return Err(FencedError::Fenced { token, newest: token_from_db(newest) });
    }
    if wanted > newest {
        let raise = diesel::update(dsl::gateway_leader_epoch.find(1)).set(dsl::epoch.eq(wanted));
        on_backend!(connection, c => raise.execute(c))?;
    }
    Ok(())
}

impl FencingEpoch for DieselStore {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        use gateway_leader_epoch::dsl;
        let newest = self.with_connection("read the fencing epoch", |connection| {
            on_backend!(connection, c => dsl::gateway_leader_epoch.find(1).select(dsl::epoch).first::<i64>(c))
        })?;
        Ok(token_from_db(newest))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    use diesel::sql_types::BigInt;

    use super::*;
    use crate::testing;

    /// How long the barrier waits for the rival to either admit or be seen waiting: an upper bound on waiting.
    const BARRIER_PATIENCE: Duration = Duration::from_secs(20);

    /// Sessions of this database waiting for a lock, from a connection of their own.
    fn waiting_for_a_lock(store: &DieselStore) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        store
            .with_connection("lock waits", |connection| {
                let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                diesel::sql_query(
                    "SELECT COUNT(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .get_result::<Count>(&mut **c)
            })
            .unwrap()
            .n
    }

    /// Runs `rival` while a transaction of term `holder` holds the epoch row (its `admit`): that transaction stays
    /// open until `rival` has returned or is seen waiting for a lock. `rival` is given `step`, which numbers events
    /// in the order they happen. Returns the step at which the holding transaction ended, and `rival`'s answer.
    fn while_the_epoch_row_is_held<T: Send>(
        store: &DieselStore,
        holder: (&str, FencingToken),
        rival: impl FnOnce(&(dyn Fn() -> u64 + Sync)) -> T + Send,
    ) -> (u64, T) {
        let order = AtomicU64::new(0);
        let step = || order.fetch_add(1, Ordering::SeqCst) + 1;
        let holder_ended = AtomicU64::new(0);
        let rival_done = AtomicBool::new(false);
        let (holds, holding) = mpsc::channel();
        thread::scope(|scope| {
            let held = scope.spawn(|| {
                store.immediate_fenced(holder.0, |connection| {
                    admit(connection, holder.1)?;
                    holds.send(()).unwrap();
                    let deadline = Instant::now() + BARRIER_PATIENCE;
                    while !rival_done.load(Ordering::SeqCst) && waiting_for_a_lock(store) == 0 {
                        assert!(
                            Instant::now() < deadline,
                            "the rival neither ended nor waited within {BARRIER_PATIENCE:?}"
                        );
                        thread::sleep(Duration::from_millis(5));
                    }
                    holder_ended.store(step(), Ordering::SeqCst);
                    Ok(())
                })
            });
            holding.recv().unwrap();
            let (step, rival_done) = (&step, &rival_done);
            let rival = scope.spawn(move || {
                let answer = rival(step);
                rival_done.store(true, Ordering::SeqCst);
                answer
            });
            held.join().unwrap().unwrap();
            (holder_ended.load(Ordering::SeqCst), rival.join().unwrap())
        })
    }

    /// Two leaders race on PostgreSQL. The epoch is at 5 already, so leader A, admitting term 5, writes nothing to
    /// the epoch row: only the row lock of its read (`FOR UPDATE`) orders it against B. A admits and holds its
    /// transaction open; B, of term 6, admits meanwhile. B must wait until A's transaction has ended, so A's
    /// leader-only writes are all committed before term 6 begins in the store: without the lock, B admits at once
    /// and A's term-5 writes would commit after the store had taken term 6, which fencing exists to prevent.
    #[test]
    fn a_newer_term_waits_for_an_open_transaction_of_the_older_one() {
        let Some(fixture) =
            testing::postgres("fencing::tests::a_newer_term_waits_for_an_open_transaction_of_the_older_one")
        else {
            return;
        };
        let store = &fixture.store;
        store.immediate_fenced("term 5 begins", |connection| admit(connection, FencingToken(5))).unwrap();

        // A holds its transaction open until B has admitted (the race lost) or is seen waiting for A's lock.
        let (a_ended, b_admitted) = while_the_epoch_row_is_held(store, ("leader A, term 5", FencingToken(5)), |step| {
            let mut admitted = 0;
            let answer = store.immediate_fenced("leader B, term 6", |connection| {
                admit(connection, FencingToken(6))?;
                admitted = step();
                Ok(())
            });
            answer.map(|()| admitted)
        });
        let b_admitted = b_admitted.unwrap();
        assert!(
            a_ended < b_admitted,
            "term 6 was admitted (step {b_admitted}) while term 5's transaction was still open (it ended at step \
             {a_ended}): a stale leader's writes could commit after the newer term's"
        );
        assert_eq!(store.newest_token().unwrap(), FencingToken(6));
        let stale = store.immediate_fenced("leader A again", |connection| admit(connection, FencingToken(5)));
        assert_eq!(stale, Err(StoreError::Fenced { token: FencingToken(5), newest: FencingToken(6) }));
    }

    /// The eviction pass with nobody silent is read-only (issue 18): while a rival leader loop of the same term
    /// holds the epoch row (a cron claim, a webhook poll), a pass that finds nobody silent answers at once instead
    /// of queueing behind it for a lock and a commit it does not need. And it fences as before: under an older
    /// token it is refused, silent agent or not, and a silent agent is evicted only by the newest term.
    #[test]
    fn a_pass_with_nobody_silent_takes_no_lock_and_a_deposed_pass_evicts_nothing() {
        use gateway_core::{ClusterId, LivenessMap};
        use time::macros::datetime;

        use crate::SharedLiveness;

        let Some(fixture) = testing::postgres(
            "fencing::tests::a_pass_with_nobody_silent_takes_no_lock_and_a_deposed_pass_evicts_nothing",
        ) else {
            return;
        };
        let store = &fixture.store;
        let at = datetime!(2026-02-22 12:00:00 UTC);
        let threshold = time::Duration::seconds(90);
        let map = SharedLiveness::new(store.clone(), 10);
        let alice = gateway_core::AgentId::new("alice").unwrap();
        map.record(&alice, &ClusterId::new("west").unwrap(), at).unwrap();
        map.flush().unwrap();
        assert!(map.evict_silent(at, threshold, FencingToken(5)).unwrap().is_empty(), "term 5 begins");

        let (rival_ended, (evicted, pass_ended)) =
            while_the_epoch_row_is_held(store, ("another leader loop, term 5", FencingToken(5)), |step| {
                let evicted = map.evict_silent(at + time::Duration::seconds(30), threshold, FencingToken(5));
                (evicted, step())
            });
        assert!(evicted.unwrap().is_empty(), "nobody is silent");
        assert!(
            pass_ended < rival_ended,
            "the pass with nobody silent ended at step {pass_ended}, after the rival's transaction (step \
             {rival_ended}): it waited for the epoch row's lock"
        );

        let silent_now = at + time::Duration::seconds(91);
        store.immediate_fenced("term 6 begins", |connection| admit(connection, FencingToken(6))).unwrap();
        assert_eq!(
            map.evict_silent(at, threshold, FencingToken(5)),
            Err(StoreError::Fenced { token: FencingToken(5), newest: FencingToken(6) }),
            "deposed, with nobody silent"
        );
        assert_eq!(
            map.evict_silent(silent_now, threshold, FencingToken(5)),
            Err(StoreError::Fenced { token: FencingToken(5), newest: FencingToken(6) }),
            "deposed, with alice silent"
        );
        assert_eq!(map.live_agents(None, 10, 100).unwrap().entries.len(), 1, "the deposed leader evicted nothing");
        assert_eq!(map.evict_silent(silent_now, threshold, FencingToken(6)).unwrap().len(), 1, "term 6 evicts her");
    }
}
