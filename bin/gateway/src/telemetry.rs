//! Logging, set up once. Logs go to stderr (the start-up banner owns stdout); `RUST_LOG` filters, `info` by
//! default.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A line that cannot be written is dropped. By default the subscriber reports the failure with `eprintln!`,
    // which panics when stderr is what failed: a log pipe whose reader is gone (a dead log shipper, `| head`, a
    // restarted journald) then panicked every task that logged, the main thread first, so the gateway died.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .log_internal_errors(false);
    // A second init (tests that start the server twice in one process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
}
