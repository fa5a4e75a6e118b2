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
