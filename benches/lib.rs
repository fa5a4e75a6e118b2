//! The agent gateway's benchmarks. Each is a `[[bench]]` target beside this file (cron.rs, webhooks.rs, http.rs,
//! cluster_ingest.rs, streams.rs, mailbox.rs, liveness.rs, liveness_redis.rs, liveness_database.rs), run with
//! `cargo bench -p gateway-benches [--bench NAME]` or `just bench [NAME]`; what they measure and the numbers are in
//! docs/benchmarks.md. Their shared helpers are in gateway-testkit, and in the modules they include (database.rs,
//! http_load.rs); what those use that can be tested without servers is here. load/ holds the wrk scripts of the
//! older load test.

pub mod spread;
