//! EXPERIMENT (s29-p, not to be kept): heartbeat groups written by tokio-postgres awaited on the runtime, instead
//! of Diesel and libpq on the blocking pool. Switched on by `GATEWAY_EXP_ASYNC_PG=1` with a postgres:// URL and
//! no --redis-url. No TLS, no reconnect: a prototype to measure the hand-over, nothing more.

use std::collections::HashMap;
use std::sync::Arc;

use gateway_core::{HeartbeatRecord, StoreError};
use time::{PrimitiveDateTime, UtcOffset};
use tokio::sync::OnceCell;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, Statement};

const SQL: &str = "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at) \
     SELECT agent_id, cluster_id, at FROM unnest($1, $2, $3) WITH ORDINALITY AS sent (agent_id, cluster_id, at, n) \
     ORDER BY n \
     ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at";

pub(crate) fn install() {
    if std::env::var_os("GATEWAY_EXP_ASYNC_PG").is_none() {
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg.starts_with("--redis-url")) {
        return;
    }
    let Some(url) = args.windows(2).find(|pair| pair[0] == "--database-url").map(|pair| pair[1].clone()) else {
        return;
    };
    if !url.starts_with("postgres") {
        return;
    }
    tracing::warn!("EXPERIMENT: heartbeat groups through tokio-postgres on the runtime");
    let connection: Arc<OnceCell<(Client, Statement)>> = Arc::new(OnceCell::new());
    let _ = gateway_core::runtime::group_commit::EXPERIMENT_ASYNC_HEARTBEATS.set(Box::new(move |records| {
        let connection = Arc::clone(&connection);
        let url = url.clone();
        Box::pin(async move {
            let (client, statement) = connection
                .get_or_try_init(|| async {
                    let (client, driver) = tokio_postgres::connect(&url, NoTls).await?;
                    tokio::spawn(driver);
                    let statement =
                        client.prepare_typed(SQL, &[Type::TEXT_ARRAY, Type::TEXT_ARRAY, Type::TIMESTAMP_ARRAY]).await?;
                    Ok::<_, tokio_postgres::Error>((client, statement))
                })
                .await
                .map_err(|error| StoreError::Unavailable(error.to_string()))?;
            let mut latest: HashMap<&str, &HeartbeatRecord> = HashMap::with_capacity(records.len());
            for record in &records {
                latest.insert(record.agent_id.as_str(), record);
            }
            let mut rows: Vec<&HeartbeatRecord> = latest.into_values().collect();
            rows.sort_unstable_by(|a, b| a.agent_id.as_str().cmp(b.agent_id.as_str()));
            let ids: Vec<&str> = rows.iter().map(|r| r.agent_id.as_str()).collect();
            let clusters: Vec<&str> = rows.iter().map(|r| r.cluster_id.as_str()).collect();
            let ats: Vec<PrimitiveDateTime> = rows
                .iter()
                .map(|r| {
                    let utc = r.last_seen_at.to_offset(UtcOffset::UTC);
                    let truncated = utc.replace_microsecond(utc.microsecond()).unwrap_or(utc);
                    PrimitiveDateTime::new(truncated.date(), truncated.time())
                })
                .collect();
            client
                .execute(statement, &[&ids, &clusters, &ats])
                .await
                .map_err(|error| StoreError::Unavailable(error.to_string()))?;
            Ok(vec![(); records.len()])
        })
    }));
}
