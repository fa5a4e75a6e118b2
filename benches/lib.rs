//! The agent gateway's benchmarks. Each is a `[[bench]]` target beside this file (cron.rs, webhooks.rs, http.rs,
//! liveness.rs, liveness_redis.rs), run with `cargo bench -p gateway-benches [--bench NAME]` or `just bench [NAME]`; what they
//! measure and the numbers are in docs/benchmarks.md. Their shared helpers are in gateway-testkit. load/ holds
//! the wrk scripts of the older load test.
