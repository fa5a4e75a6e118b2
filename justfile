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
