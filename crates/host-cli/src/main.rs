//! `car-host`: a terminal host client for `car-server` (CAR's `car-host`), so a user on a
//! headless machine can see agents and answer approvals.
//!
//! ```text
//! car-host [--json] [--url URL] [--start-server [--server-bin PATH] [--server-arg ARG]…] list [--all]
//! car-host … watch
//! car-host … approve <approval-id> [--notes TEXT]
//! car-host … deny <approval-id> [--notes TEXT]
//! ```
//!
//! Every command reaches the daemon through the shared client, `car_daemon_client::Client`,
//! on its host-token connection (the `host-token` file beside the daemon token; discovery
//! honours `--url`, `CAR_DAEMON_URL`, `CAR_HOME`, `CAR_SERVER_SOCKET`). Exit codes:
//! 0 success, 2 usage (clap), 1 any other failure (stderr says why). Logs go to stderr,
//! filtered by `CAR_LOG` (default `warn`); data goes to stdout only (`output`).
//!
//! Modules: `cli` (arguments), `session` (the client, connecting, `--start-server`,
//! failure reporting), `reach` (opening the host connection; "nothing listens" versus
//! other failures), `server` (starting the daemon), `commands` (`list`, `approve`,
//! `deny`), `watch`, `output` (formats).

mod cli;
mod commands;
mod output;
mod reach;
mod server;
mod session;
mod watch;

use std::process::ExitCode;

use car_daemon_client::ClientConfig;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::output::Out;
use crate::server::StartOptions;
use crate::session::{Ctx, Failure};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("car-host: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json = cli.global.json;
    let outcome = runtime.block_on(run(cli));
    // Do not wait for tasks still parked on a socket.
    runtime.shutdown_background();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("car-host: error: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let g = cli.global;
    let mut config = ClientConfig::from_env();
    config.client_version = format!("car-host/{}", env!("CARGO_PKG_VERSION"));
    if let Some(url) = g.url {
        config = config.url(url);
    }
    let start = g.start_server.then_some(StartOptions {
        server_bin: g.server_bin,
        server_args: g.server_args,
        timeout: g.start_timeout,
    });
    let ctx = Ctx::new(config, Out { json: g.json }, start);
    let outcome = match cli.command {
        Command::List { all } => commands::list(&ctx, all).await,
        Command::Watch => watch::watch(&ctx).await,
        Command::Approve(r) => {
            commands::resolve(&ctx, &r.approval_id, true, r.notes.as_deref()).await
        }
        Command::Deny(r) => {
            commands::resolve(&ctx, &r.approval_id, false, r.notes.as_deref()).await
        }
    };
    ctx.client.close();
    outcome
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
