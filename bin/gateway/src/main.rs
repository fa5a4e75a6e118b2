//! `gateway`: parse configuration, set up logging, open the store, bind, serve until SIGTERM or Ctrl-C; or, with
//! `admin-token rotate`, replace the stored operator token and exit.

use std::io::Write;
use std::process::ExitCode;

use gateway::config::{AdminTokenCommand, Command, Config};
use gateway::{Gateway, StartError, telemetry};
use gateway_core::run_blocking;
use gateway_store::DieselStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Every request allocates (headers, JSON values, events) on whichever runtime thread runs it and often frees on
/// another; glibc's allocator spent about 12 % of the gateway's CPU doing that under the HTTP load generator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config = Config::from_args_or_exit();
    telemetry::init(config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&StartError::Task(error.to_string())),
    };
    let outcome = match config.command {
        Some(Command::AdminToken(AdminTokenCommand::Rotate)) => runtime.block_on(rotate(&config)),
        None => runtime.block_on(run(config)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

async fn run(config: Config) -> Result<(), StartError> {
    let shutdown = CancellationToken::new();
    let (gateway, generated) = match &config.admin_token {
        Some(token) => (Gateway::start(&config, token, shutdown.clone()).await?, None),
        None => Gateway::start_with_stored_token(&config, shutdown.clone()).await?,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(StartError::Bind)?;
    let address = listener.local_addr().map_err(StartError::Bind)?;
    cancel_on_signal(shutdown);

    // The banner goes to stdout, apart from the logs: scripts and tests read the address from it.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "gateway listening on http://{address}");
    match (&config.admin_token, generated) {
        (Some(_), _) => {}
        (None, Some(token)) => {
            let _ = writeln!(stdout, "admin token (generated, shown once): {}", token.expose());
        }
        (None, None) => {
            let _ = writeln!(
                stdout,
                "admin token: the one stored in the database is in use (`gateway admin-token rotate` replaces it)"
            );
        }
    }
    let _ = stdout.flush();
    drop(stdout);
    tracing::info!(%address, "gateway started");

    gateway.serve(listener).await;
    Ok(())
}

/// `gateway admin-token rotate`: a new token in place of the stored one, printed once on stdout. It may run while
/// gateways serve the database (on SQLite too: it opens the file beside the one that holds it).
async fn rotate(config: &Config) -> Result<(), StartError> {
    let url = config.database_url.clone();
    let token = run_blocking(move || {
        let store = DieselStore::open_for_command(&url)?;
        Ok::<_, StartError>(gateway_auth::rotate_admin_token(&store, time::OffsetDateTime::now_utc())?)
    })
    .await
    .map_err(|error| StartError::Task(error.to_string()))??;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "admin token (rotated, shown once): {}", token.expose());
    let _ = stdout.flush();
    drop(stdout);
    let refresh = gateway_auth::ADMIN_TOKEN_REFRESH_INTERVAL.as_secs();
    #[allow(clippy::print_stderr, reason = "what the operator must know about the new token, whatever the log filter")]
    {
        eprintln!(
            "gateways on this database that use the stored token refuse the previous one within {refresh} s; \
             gateways started with --admin-token or GATEWAY_ADMIN_TOKEN keep using that value"
        );
        if config.admin_token.is_some() {
            eprintln!(
                "note: --admin-token / GATEWAY_ADMIN_TOKEN is set here: a gateway started with this environment \
                 uses that value, not the rotated token"
            );
        }
    }
    Ok(())
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C. The handlers are installed before this returns, so a signal sent as
/// soon as the banner is out (as supervisors and tests do) already means a graceful stop, not the default kill.
fn cancel_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::spawn(async move {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                    request_shutdown(&shutdown);
                });
                return;
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "cannot install signal handlers; falling back to Ctrl-C only");
            }
        }
    }
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        request_shutdown(&shutdown);
    });
}

fn request_shutdown(shutdown: &CancellationToken) {
    // Cancelled first: nothing, not even the log line, stands between a signal and the drain.
    shutdown.cancel();
    tracing::info!("shutdown requested; draining in-flight requests");
}

fn fail(error: &StartError) -> ExitCode {
    let code = error.exit_code();
    // Exit code 2 is an operator's mistake (a database another gateway serves), reported like a bad flag: the
    // one line below and nothing else.
    if code != 2 {
        tracing::error!(%error, "gateway failed to start");
    }
    #[allow(clippy::print_stderr, reason = "the one-line reason must reach the terminal even with logs filtered")]
    {
        eprintln!("error: {error}");
    }
    ExitCode::from(code)
}
