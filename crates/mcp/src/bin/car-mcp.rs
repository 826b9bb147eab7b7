//! `car-mcp`: CAR's MCP tools over stdio, for hosts that launch a server per client
//! (`{"mcpServers": {"car": {"command": "car-mcp"}}}`).
//!
//! Newline-delimited JSON-RPC on stdin/stdout; stdout carries protocol lines only, so every
//! log line goes to stderr (filter: `CAR_LOG`, default `warn`). The running daemon is
//! reached through `car_daemon_client` configured from the environment (`CAR_DAEMON_URL`,
//! `CAR_AUTH_TOKEN`, `CAR_HOME` token discovery, `CAR_MEMORY_NAMESPACE`), connecting on the
//! first tool call, so `initialize` and `tools/list` work before the daemon is up. The binary
//! takes no arguments and exits when stdin closes.

use std::process::ExitCode;

use car_daemon_client::Client;
use tokio::io::BufReader;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let client = Client::from_env();
        let result = car_mcp::serve_stdio(
            client.clone(),
            BufReader::new(tokio::io::stdin()),
            tokio::io::stdout(),
        )
        .await;
        client.close();
        result
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "stdio transport failed");
            ExitCode::FAILURE
        }
    }
}
