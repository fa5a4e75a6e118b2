# Everyday commands. `cargo` alone works too; these are shortcuts.

default: test

run:
    cargo run --release -p gateway

test:
    cargo test --workspace

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

fmt:
    cargo fmt --all

ci:
    .ci/run

# The http benchmark drives the release gateway binary, so that is built first.
# Benchmarks (docs/benchmarks.md), all or one by name: `just bench http`, `just bench cron lateness`
bench name="" *args:
    cargo build --release -p gateway
    cargo bench -p gateway-benches {{ if name == "" { "" } else { "--bench " + name } }} {{ if args == "" { "" } else { "-- " + args } }}

# Issue 19: scheduling through MCP (`tools/call` on /mcp) against `POST /gateway/tools/schedule_reminder`, same
# gateway, alternating rounds (benches/load/mcp.sh, wrk). Gateway on CPU 0, wrk on CPU 1.
bench-mcp duration="10s":
    cargo build --release -p gateway
    benches/load/mcp.sh {{duration}}

# Issue 18's table: heartbeats/s on SQLite, PostgreSQL and PostgreSQL + Redis (one instance each) with wrk, their
# ratios to SQLite, and the PostgreSQL ceiling beside each (benches/ingest_table.rs). Servers on CPU 0, wrk on CPU 1.
bench-table:
    cargo build --release -p gateway
    CLUSTER_BENCH_TABLE=1 CLUSTER_BENCH_CONNECTIONS=32 CLUSTER_BENCH_AGENTS=100000 CLUSTER_BENCH_SERVER_CPUS=0 \
      CLUSTER_BENCH_CLIENT_CPUS=1 cargo bench -p gateway-benches --bench cluster-ingest
