//! What signing costs an outbound attempt: both signatures (`X-Observatory-Signature` and Standard Webhooks'),
//! `N` times over a body of `SIZE` bytes. Counted in instructions, which do not depend on what else the machine
//! runs: the difference between `N` and `0` runs, divided by `N` (docs/benchmarks.md, "Webhook signing").
//!
//! `cargo build --release -p gateway-webhooks --example sign_cost`, then
//! `valgrind --tool=callgrind target/release/examples/sign_cost <N> <SIZE>`.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // A measurement tool: bad arguments abort, the result is printed.

use gateway_core::WebhookSecret;
use gateway_webhooks::{signature, standard};

fn main() {
    let mut args = std::env::args().skip(1).map(|arg| arg.parse::<usize>().unwrap());
    let (runs, size) = (args.next().unwrap(), args.next().unwrap());
    let secret = WebhookSecret::new("It's a Secret to Everybody");
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(size.saturating_sub(10)));
    let mut signed_bytes = 0;
    for delivery_id in 0..runs {
        let observatory = signature::sign(&secret, body.as_bytes());
        let standard = standard::sign(&secret, &delivery_id.to_string(), 1_700_000_000, body.as_bytes());
        signed_bytes += observatory.len() + standard.len();
    }
    // Printed so that the signing cannot be optimized away.
    println!("{signed_bytes}");
}
