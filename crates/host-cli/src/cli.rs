//! The command line: subcommands and the options every subcommand shares.
//!
//! Usage errors are clap's (exit 2); everything here is declaration, no behaviour.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// A terminal host for car-server: see agents, watch the host event stream, answer approvals.
#[derive(Debug, Parser)]
#[command(name = "car-host", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every subcommand (accepted before or after it).
#[derive(Debug, Args)]
pub struct Global {
    /// Print one JSON object per line instead of human-readable lines.
    #[arg(long, global = true)]
    pub json: bool,

    /// The daemon's WebSocket URL [default: $CAR_DAEMON_URL, else ws://127.0.0.1:9100].
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,

    /// Start car-server when nothing is listening at the URL, and wait until it is ready.
    #[arg(long, global = true)]
    pub start_server: bool,

    /// The car-server binary --start-server runs [default: beside car-host, else on PATH].
    #[arg(long, global = true, env = "CAR_SERVER_BIN", value_name = "PATH")]
    pub server_bin: Option<PathBuf>,

    /// An extra argument for the car-server --start-server runs (repeatable).
    #[arg(
        long = "server-arg",
        global = true,
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub server_args: Vec<String>,

    /// How long --start-server waits for the daemon to be ready.
    #[arg(long, global = true, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub start_timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List host agents, registry agents and pending approvals.
    List {
        /// Include resolved approvals too.
        #[arg(long)]
        all: bool,
    },
    /// Print pending approvals, then every host event as it happens (until interrupted).
    Watch,
    /// Approve a pending approval: the parked call runs.
    Approve(Resolve),
    /// Deny a pending approval: the parked call fails with -32003.
    Deny(Resolve),
}

#[derive(Debug, Args)]
pub struct Resolve {
    /// The approval's id (as `list` and `watch` print it), e.g. approval-3.
    pub approval_id: String,
    /// A note stored with the resolution.
    #[arg(long)]
    pub notes: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_follow_the_subcommand() {
        let cli = Cli::try_parse_from([
            "car-host",
            "list",
            "--json",
            "--start-server",
            "--server-arg",
            "--approval-timeout",
            "--server-arg",
            "5s",
        ])
        .unwrap();
        assert!(cli.global.json && cli.global.start_server);
        assert_eq!(cli.global.server_args, ["--approval-timeout", "5s"]);
        assert!(matches!(cli.command, Command::List { all: false }));
    }

    #[test]
    fn approve_needs_an_id() {
        assert!(Cli::try_parse_from(["car-host", "approve"]).is_err());
        let cli = Cli::try_parse_from(["car-host", "deny", "approval-3", "--notes", "no"]).unwrap();
        match cli.command {
            Command::Deny(r) => {
                assert_eq!(r.approval_id, "approval-3");
                assert_eq!(r.notes.as_deref(), Some("no"));
            }
            other => panic!("{other:?}"),
        }
    }
}
