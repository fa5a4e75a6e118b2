//! A cron job's runs (migration `cron_misfire_and_runs`): its fires are its `agent_mailbox` rows, found by the index
//! `agent_mailbox_job_seq`; its skipped instants are `cron_job_skips` rows, written only when the scheduler skips
//! one, and pruned with the mailbox.

use diesel::prelude::*;
use gateway_core::{CronJobRun, RunOutcome, SkippedRun, StoreError};
use time::PrimitiveDateTime;

use crate::connection::{AnyConnection, DieselStore};
use crate::schema::{agent_mailbox, cron_job_skips};
use crate::timestamp::{from_db, to_db};

#[derive(Insertable)]
#[diesel(table_name = cron_job_skips)]
struct NewSkipRow<'a> {
    fire_id: &'a str,
    job_id: i64,
    agent_id: &'a str,
    scheduled_for: PrimitiveDateTime,
    skipped_at: PrimitiveDateTime,
    outcome: &'static str,
}

/// Records `skipped` unless recorded already (by `fire_id`), inside the caller's transaction; returns how many were
/// new. Row by row: skips are rare (a misfire, a late reminder), and at most a hundred per job and catch-up.
pub(crate) fn record_skips(connection: &mut AnyConnection<'_>, skipped: &[SkippedRun]) -> QueryResult<usize> {
    let mut recorded = 0;
    for run in skipped {
        let row = NewSkipRow {
            fire_id: &run.fire_id,
            job_id: run.job_id,
            agent_id: run.agent_id.as_str(),
            scheduled_for: to_db(run.scheduled_for),
            skipped_at: to_db(run.skipped_at),
            outcome: run.outcome.as_str(),
        };
        let insert =
            diesel::insert_into(cron_job_skips::table).values(&row).on_conflict(cron_job_skips::fire_id).do_nothing();
        recorded += on_backend!(connection, c => insert.execute(c))?;
    }
    Ok(recorded)
}

type FireRow = (String, PrimitiveDateTime, PrimitiveDateTime, Option<PrimitiveDateTime>);
type SkipRow = (String, PrimitiveDateTime, PrimitiveDateTime, String);

/// Job `job_id`'s newest `limit` fires (a range of `agent_mailbox_job_seq`, read backwards) and newest `limit` skips,
/// merged newest first.
pub(crate) fn job_runs(store: &DieselStore, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, StoreError> {
    let limit_db = i64::try_from(limit).unwrap_or(i64::MAX);
    let (fires, skips): (Vec<FireRow>, Vec<SkipRow>) =
        store.with_connection("read a cron job's runs", |connection| {
            let fires = agent_mailbox::table
                .filter(agent_mailbox::job_id.eq(job_id))
                .order(agent_mailbox::seq.desc())
                .limit(limit_db)
                .select((
                    agent_mailbox::fire_id,
                    agent_mailbox::scheduled_for,
                    agent_mailbox::fired_at,
                    agent_mailbox::received_at,
                ));
            let skips = cron_job_skips::table
                .filter(cron_job_skips::job_id.eq(job_id))
                .order(cron_job_skips::seq.desc())
                .limit(limit_db)
                .select((
                    cron_job_skips::fire_id,
                    cron_job_skips::scheduled_for,
                    cron_job_skips::skipped_at,
                    cron_job_skips::outcome,
                ));
            let fires = on_backend!(connection, c => fires.load(c))?;
            let skips = on_backend!(connection, c => skips.load(c))?;
            Ok((fires, skips))
        })?;
    let fired = fires.into_iter().map(|(fire_id, scheduled_for, fired_at, received_at)| CronJobRun {
        fire_id,
        scheduled_for: from_db(scheduled_for),
        fired_at: from_db(fired_at),
        outcome: RunOutcome::Fired,
        received_at: received_at.map(from_db),
    });
    let skipped = skips
        .into_iter()
        .map(|(fire_id, scheduled_for, skipped_at, outcome)| {
            let outcome = RunOutcome::parse(&outcome).ok_or_else(|| {
                StoreError::Internal(format!("skipped run {fire_id}: stored outcome unknown: {outcome}"))
            })?;
            Ok(CronJobRun {
                fire_id,
                scheduled_for: from_db(scheduled_for),
                fired_at: from_db(skipped_at),
                outcome,
                received_at: None,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(gateway_core::ports::runs::newest_first(fired.chain(skipped), limit))
}

/// As the mailbox is pruned, inside its pass: of the first `limit` skips in the order recorded, those skipped before
/// `cutoff`.
pub(crate) fn prune_skips(
    connection: &mut AnyConnection<'_>,
    cutoff: PrimitiveDateTime,
    limit: i64,
) -> QueryResult<usize> {
    let first = cron_job_skips::table
        .order(cron_job_skips::seq.asc())
        .limit(limit)
        .select((cron_job_skips::seq, cron_job_skips::skipped_at));
    let first: Vec<(i64, PrimitiveDateTime)> = on_backend!(connection, c => first.load(c))?;
    let old: Vec<i64> = first.iter().filter(|(_, skipped_at)| *skipped_at < cutoff).map(|(seq, _)| *seq).collect();
    if old.is_empty() {
        return Ok(0);
    }
    let prune = diesel::delete(
        cron_job_skips::table.filter(cron_job_skips::seq.eq_any(&old)).filter(cron_job_skips::skipped_at.lt(cutoff)),
    );
    on_backend!(connection, c => prune.execute(c))
}
