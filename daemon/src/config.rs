//! Command-line flags and environment variables, resolved once at startup into [`Config`].
//!
//! Owns parsing and validation only: nothing here opens a socket or writes a file.
//! Durations accept `humantime` text (`500ms`, `30s`, `30m`) or a bare integer meaning
//! seconds, so `CAR_HANDLER_TIMEOUT=1800` and `CAR_HANDLER_TIMEOUT=30m` agree.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Parses a duration: a bare integer is seconds, anything else is humantime text.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let d =
        humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!(
            "invalid duration {text:?}: must be greater than zero"
        ));
    }
    Ok(d)
}

/// `car-server`: the car-runtime daemon. JSON-RPC 2.0 over WebSocket on TCP and a Unix socket.
#[derive(Debug, Clone, Parser)]
#[command(name = "car-server", version, about, args_override_self = true)]
pub struct Args {
    /// TCP port for the WebSocket listener (0 picks a free port).
    #[arg(long, default_value_t = 9100)]
    pub port: u16,

    /// Address to bind; anything but loopback exposes the daemon to the network.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// Turn the token handshake off: any local process may call any method.
    #[arg(long, env = "CAR_NO_AUTH", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_auth: bool,

    /// Deprecated no-op: auth is on by default.
    #[arg(long, hide = true)]
    pub require_auth: bool,

    /// Token for a non-primary daemon (a primary daemon always mints its own).
    #[arg(long, env = "CAR_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<car_proto::redact::Redacted<String>>,

    /// File holding the token for a non-primary daemon; read, trimmed, then deleted.
    #[arg(long, env = "CAR_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Largest inbound message in bytes; larger ones close the connection with 1009.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Most bytes of replies queued for one peer before it is closed as a slow consumer.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_outbound_bytes: usize,

    /// Server-side handler deadline (`-32004` when a handler overruns it).
    #[arg(long, env = "CAR_HANDLER_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    pub handler_timeout: Duration,

    /// How long the daemon waits for a tool callback whose action declares no `timeout_ms`.
    #[arg(long, env = "CAR_TOOL_TIMEOUT", default_value = "300s", value_parser = parse_duration)]
    pub tool_timeout: Duration,

    /// Concurrent generations admitted (the admission queue's width); for a local GGUF
    /// model, also the sequences per loaded model decoded together in one shared llama.cpp
    /// context (continuous batching). Further calls wait in the queue.
    #[arg(long, env = "CAR_MAX_GENERATIONS", default_value_t = 4)]
    pub max_generations: usize,

    /// Milliseconds between `infer.progress` heartbeats of an in-flight inference call.
    #[arg(long, env = "CAR_INFER_PROGRESS_MS", default_value_t = 10_000)]
    pub infer_progress_ms: u64,

    /// How long a run whose producer (negotiated `runs.resume.v1`) disconnected waits for
    /// `runs.resume` before it is marked incomplete.
    #[arg(long, env = "CAR_RUN_RESUME_LEASE", default_value = "10s", value_parser = parse_duration)]
    pub run_resume_lease: Duration,

    /// CPU threads of each llama.cpp context (default: all cores; concurrent generations on
    /// one model share one context, so they do not multiply threads).
    #[arg(long, env = "CAR_LLAMA_THREADS")]
    pub llama_threads: Option<u32>,

    /// MiB of saved KV sequences kept per loaded GGUF model, so a conversation's next turn
    /// reuses the prefix it shares with the previous one (0 turns prefix reuse off).
    #[arg(long, env = "CAR_PREFIX_CACHE_MB", default_value_t = 512)]
    pub prefix_cache_mb: u64,

    /// Interval between WebSocket Pings.
    #[arg(long, env = "CAR_PING_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub ping_interval: Duration,

    /// Close a peer after this long without any inbound frame.
    #[arg(long, env = "CAR_IDLE_TIMEOUT", default_value = "90s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Connections that may be open without having authenticated (more are closed at
    /// once; see `crate::state::pre_auth`).
    #[arg(long, env = "CAR_MAX_UNAUTHENTICATED", default_value_t = DEFAULT_MAX_UNAUTHENTICATED)]
    pub max_unauthenticated: usize,

    /// How long a connection may stay open without a successful `session.auth`.
    #[arg(long, env = "CAR_AUTH_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub auth_deadline: Duration,

    /// Events kept in the durable event log (the newest; older ones are deleted).
    #[arg(long, env = "CAR_MAX_EVENTS", default_value_t = 1_000_000)]
    pub max_events: u64,

    /// Events older than this are deleted from the event log.
    #[arg(long, env = "CAR_EVENT_MAX_AGE", default_value = "30d", value_parser = parse_duration)]
    pub event_max_age: Duration,

    /// The directory the built-in agent tools (`agents.register_basics`) may read and
    /// write; nothing outside it is reachable. Default: `$CAR_HOME/workspace`.
    #[arg(long, env = "CAR_WORKSPACE_ROOT")]
    pub workspace_root: Option<PathBuf>,

    /// Turn the approval gate off: gated methods and mutating built-in tools run without
    /// a host's approval. Only for trusted single-user machines.
    #[arg(long, env = "CAR_NO_APPROVALS", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_approvals: bool,

    /// The methods (and built-in tool names) that wait for a host's approval, comma
    /// separated; replaces the default set.
    #[arg(long, env = "CAR_APPROVAL_METHODS", value_delimiter = ',')]
    pub approval_methods: Option<Vec<String>>,

    /// How long a gated call waits for `host.resolve_approval` before it is denied.
    #[arg(long, env = "CAR_APPROVAL_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub approval_timeout: Duration,

    /// How long a proposal a supervisor must decide (`supervision.subscribe`) waits for
    /// `supervision.decide` before it is rejected.
    #[arg(long, env = "CAR_SUPERVISION_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub supervision_timeout: Duration,

    /// How long a stopping supervised agent has between SIGTERM and SIGKILL.
    #[arg(long, env = "CAR_AGENT_STOP_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub agent_stop_grace: Duration,

    /// Where durable scheduled tasks' systemd user units go (default
    /// `$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`).
    #[arg(long, env = "CAR_SYSTEMD_USER_DIR")]
    pub systemd_user_dir: Option<PathBuf>,

    /// Write durable tasks' systemd units without running `systemctl --user` to enable them
    /// (tests, and machines without a user systemd).
    #[arg(long, env = "CAR_NO_SYSTEMCTL", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_systemctl: bool,

    /// Serve the `debug.*` methods (tests and diagnostics only).
    #[arg(long, env = "CAR_DEBUG_METHODS", value_parser = clap::builder::FalseyValueParser::new())]
    pub debug_methods: bool,

    /// Write `{pid, port, ws_url, socket, primary, dashboard_url, mcp_url}` here once
    /// listening.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,

    /// Port of the loopback dashboard (default: the WebSocket port + 1; 0 picks a free
    /// port). The dashboard always binds loopback.
    #[arg(long, env = "CAR_DASHBOARD_PORT")]
    pub dashboard_port: Option<u16>,

    /// Do not serve the dashboard (browser pages then cannot open the WebSocket at all).
    #[arg(long, env = "CAR_NO_DASHBOARD", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_dashboard: bool,

    /// A browser origin (besides the dashboard's own) allowed to open the WebSocket, e.g.
    /// `http://localhost:5173` for a UI of your own; repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,

    /// Address of the MCP endpoint (`http://ADDR/mcp`), or `disabled`.
    #[arg(long, env = "CAR_MCP_BIND", default_value = DEFAULT_MCP_BIND)]
    pub mcp_bind: String,

    /// Offer the MCP tools that run or schedule work (`workflow_run`, `workflow_resume`,
    /// `scheduler_schedule`, `scheduler_unschedule`).
    #[arg(long, env = "CAR_MCP_ENABLE_MUTATIONS", value_parser = clap::builder::FalseyValueParser::new())]
    pub mcp_enable_mutations: bool,
}

/// The MCP endpoint's default address (CAR's: a fixed port, not the WebSocket port + 2).
/// Largest `--max-generations`: the most sequences one shared llama.cpp context holds.
pub const MAX_GENERATIONS: usize = car_inference::llama::MAX_SEQUENCES as usize;

pub const DEFAULT_MCP_BIND: &str = "127.0.0.1:9102";

/// Validated settings the rest of the daemon reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub port: u16,
    pub bind: IpAddr,
    pub auth_enabled: bool,
    pub supplied_token: Option<SuppliedToken>,
    pub max_message_bytes: usize,
    pub max_outbound_bytes: usize,
    pub handler_timeout: Duration,
    pub tool_timeout: Duration,
    pub max_generations: usize,
    pub infer_progress: Duration,
    pub run_resume_lease: Duration,
    pub llama_threads: u32,
    pub prefix_cache_bytes: u64,
    pub ping_interval: Duration,
    pub idle_timeout: Duration,
    pub max_unauthenticated: usize,
    pub auth_deadline: Duration,
    pub event_retention: EventRetention,
    pub debug_methods: bool,
    pub ready_file: Option<PathBuf>,
    /// `None`: no dashboard. `Some(None)`: the WebSocket port + 1. `Some(Some(p))`: `p`.
    pub dashboard: Option<Option<u16>>,
    /// Browser origins allowed on the WebSocket besides the dashboard's (normalised).
    pub allow_origins: Vec<String>,
    /// The MCP endpoint's address (`None`: disabled) and whether it was given explicitly
    /// (an explicit address that cannot be bound stops the daemon; the default only warns).
    pub mcp_bind: Option<std::net::SocketAddr>,
    pub mcp_bind_explicit: bool,
    pub mcp_enable_mutations: bool,
    pub approvals: ApprovalGate,
    pub workspace_root: Option<PathBuf>,
    /// `supervision.*`: how long a parked intent waits for a decision.
    pub supervision_timeout: Duration,
    pub agent_stop_grace: Duration,
    pub systemd_user_dir: Option<PathBuf>,
    pub no_systemctl: bool,
    /// Whether this daemon is its state root's primary (set once the instance lock is
    /// claimed; `true` until then). Only the primary supervises agents and fires the stored
    /// daemon timers.
    pub primary: bool,
}

/// The approval gate's settings (docs/protocol-choices.md, "Approvals").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalGate {
    pub enabled: bool,
    /// Method names and built-in tool names that wait for approval.
    pub methods: std::collections::BTreeSet<String>,
    pub timeout: Duration,
}

/// What the gate holds by default: the methods declared `gated` (what runs code outside a
/// request or installs something on the caller's behalf) and the built-in tools that change
/// files ([`GATEABLE_TOOLS`]).
pub fn default_gated() -> std::collections::BTreeSet<String> {
    car_proto::methods::gated_methods()
        .map(|d| d.name().to_string())
        .chain(GATEABLE_TOOLS.iter().map(|t| t.to_string()))
        .collect()
}

/// Built-in tool names the gate may hold besides methods.
pub const GATEABLE_TOOLS: &[&str] = &["write_file", "edit_file"];

impl ApprovalGate {
    /// Whether `name` (a method or a built-in tool) waits for approval.
    pub fn holds(&self, name: &str) -> bool {
        self.enabled && self.methods.contains(name)
    }
}

/// Where a supplied token came from (the file form is deleted once read).
#[derive(Debug, Clone)]
pub enum SuppliedToken {
    Value(car_proto::redact::Redacted<String>),
    File(PathBuf),
}

impl Config {
    /// Validates parsed flags. Errors name the flag.
    pub fn from_args(args: Args) -> Result<Self, String> {
        if args.max_message_bytes < 1024 {
            return Err("--max-message-bytes must be at least 1024".into());
        }
        if args.max_unauthenticated == 0 {
            return Err("--max-unauthenticated must be at least 1".into());
        }
        if args.max_events == 0 {
            return Err("--max-events must be at least 1".into());
        }
        if args.auth_deadline.is_zero() {
            return Err("--auth-deadline must be longer than 0s".into());
        }
        if args.max_outbound_bytes < 1024 {
            return Err("--max-outbound-bytes must be at least 1024".into());
        }
        if args.idle_timeout <= args.ping_interval {
            return Err(format!(
                "--idle-timeout ({:?}) must be longer than --ping-interval ({:?})",
                args.idle_timeout, args.ping_interval
            ));
        }
        if args.max_generations == 0 || args.max_generations > MAX_GENERATIONS {
            return Err(format!(
                "--max-generations must be from 1 to {MAX_GENERATIONS}"
            ));
        }
        if args.infer_progress_ms < 10 {
            return Err("--infer-progress-ms must be at least 10".into());
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(2);
        // Concurrent generations on one model are sequences of one shared context, decoded
        // together by one llama.cpp thread pool: that pool gets every core.
        let llama_threads = match args.llama_threads {
            Some(0) => return Err("--llama-threads must be at least 1".into()),
            Some(n) => n,
            None => cores.max(1),
        };
        let supplied_token = match (args.auth_token, args.auth_token_file) {
            (Some(t), _) if !t.expose().trim().is_empty() => {
                Some(SuppliedToken::Value(t.expose().trim().to_string().into()))
            }
            (_, Some(path)) => Some(SuppliedToken::File(path)),
            _ => None,
        };
        let methods = match args.approval_methods {
            None => default_gated(),
            Some(list) => {
                let mut set = std::collections::BTreeSet::new();
                for name in list.iter().map(|m| m.trim()).filter(|m| !m.is_empty()) {
                    if car_proto::methods::lookup(name).is_none() && !GATEABLE_TOOLS.contains(&name)
                    {
                        return Err(format!(
                            "--approval-methods: {name:?} is neither a method nor a built-in tool"
                        ));
                    }
                    set.insert(name.to_string());
                }
                set
            }
        };
        let approvals = ApprovalGate {
            enabled: !args.no_approvals,
            methods,
            timeout: args.approval_timeout,
        };
        let mcp_bind = if args.mcp_bind.trim().eq_ignore_ascii_case("disabled") {
            None
        } else {
            Some(
                args.mcp_bind
                    .trim()
                    .parse::<std::net::SocketAddr>()
                    .map_err(|e| {
                        format!(
                            "--mcp-bind: expected HOST:PORT or `disabled`, got {:?}: {e}",
                            args.mcp_bind
                        )
                    })?,
            )
        };
        let mut allow_origins = Vec::new();
        for origin in &args.allow_origins {
            let normalised = origin.trim().trim_end_matches('/').to_ascii_lowercase();
            if !(normalised.starts_with("http://") || normalised.starts_with("https://")) {
                return Err(format!(
                    "--allow-origin: expected an http(s) origin such as http://localhost:5173, got {origin:?}"
                ));
            }
            allow_origins.push(normalised);
        }
        Ok(Config {
            approvals,
            supervision_timeout: args.supervision_timeout,
            agent_stop_grace: args.agent_stop_grace,
            systemd_user_dir: args.systemd_user_dir,
            no_systemctl: args.no_systemctl,
            primary: true,
            workspace_root: args.workspace_root,
            port: args.port,
            bind: args.bind,
            auth_enabled: !args.no_auth,
            supplied_token,
            max_message_bytes: args.max_message_bytes,
            max_outbound_bytes: args.max_outbound_bytes,
            handler_timeout: args.handler_timeout,
            tool_timeout: args.tool_timeout,
            max_generations: args.max_generations,
            infer_progress: Duration::from_millis(args.infer_progress_ms),
            run_resume_lease: args.run_resume_lease,
            llama_threads,
            prefix_cache_bytes: args.prefix_cache_mb.saturating_mul(1024 * 1024),
            ping_interval: args.ping_interval,
            idle_timeout: args.idle_timeout,
            max_unauthenticated: args.max_unauthenticated,
            auth_deadline: args.auth_deadline,
            event_retention: EventRetention {
                max_events: args.max_events,
                max_age: args.event_max_age,
            },
            debug_methods: args.debug_methods,
            ready_file: args.ready_file,
            dashboard: (!args.no_dashboard).then_some(args.dashboard_port),
            allow_origins,
            mcp_bind,
            mcp_bind_explicit: args.mcp_bind != DEFAULT_MCP_BIND,
            mcp_enable_mutations: args.mcp_enable_mutations,
        })
    }
}

/// Connections that may be unauthenticated at once, by default (`state::pre_auth`).
pub const DEFAULT_MAX_UNAUTHENTICATED: usize = 128;

/// How much of the event log is kept: at most `max_events` (the newest), none older than
/// `max_age`. Enforced after every committed batch, so the log never exceeds it by more
/// than one batch (`state::store::EVENT_BATCH`).
#[derive(Debug, Clone, Copy)]
pub struct EventRetention {
    pub max_events: u64,
    pub max_age: std::time::Duration,
}

impl Default for EventRetention {
    fn default() -> Self {
        EventRetention {
            max_events: 1_000_000,
            max_age: std::time::Duration::from_secs(30 * 24 * 60 * 60),
        }
    }
}

/// A startup failure: the message and the process exit code.
#[derive(Debug)]
pub struct Fatal {
    pub code: u8,
    pub message: String,
}

impl Fatal {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Fatal {
            code: 2,
            message: message.into(),
        }
    }

    pub(crate) fn runtime(message: impl Into<String>) -> Self {
        Fatal {
            code: 1,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1800"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
        assert!(parse_duration("0ms").is_err());
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let args = Args::try_parse_from(["car-server", "--auth-token", "tok-SECRET-123"]).unwrap();
        assert!(!format!("{args:?}").contains("SECRET"), "{args:?}");
        let config = Config::from_args(args).unwrap();
        assert!(!format!("{config:?}").contains("SECRET"), "{config:?}");
        match &config.supplied_token {
            Some(SuppliedToken::Value(t)) => assert_eq!(t.expose(), "tok-SECRET-123"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_approval_gate_is_configured_by_flags() {
        let config = Config::from_args(Args::try_parse_from(["car-server"]).unwrap()).unwrap();
        assert!(
            config.approvals.holds("scheduler.os_install") && config.approvals.holds("write_file")
        );
        assert_eq!(config.approvals.timeout, Duration::from_secs(60));
        let config = Config::from_args(
            Args::try_parse_from(["car-server", "--approval-methods", "state.set,edit_file"])
                .unwrap(),
        )
        .unwrap();
        assert!(
            config.approvals.holds("state.set") && !config.approvals.holds("scheduler.os_install")
        );
        let off =
            Config::from_args(Args::try_parse_from(["car-server", "--no-approvals"]).unwrap())
                .unwrap();
        assert!(!off.approvals.holds("scheduler.os_install"));
        let err = Config::from_args(
            Args::try_parse_from(["car-server", "--approval-methods", "nope.nothing"]).unwrap(),
        )
        .unwrap_err();
        assert!(err.contains("nope.nothing"), "{err}");
    }

    #[test]
    fn later_flags_win_and_limits_are_checked() {
        let args = Args::try_parse_from(["car-server", "--port", "0", "--port", "9200"]).unwrap();
        assert_eq!(args.port, 9200);
        let args = Args::try_parse_from([
            "car-server",
            "--ping-interval",
            "10s",
            "--idle-timeout",
            "5s",
        ])
        .unwrap();
        assert!(Config::from_args(args)
            .unwrap_err()
            .contains("--idle-timeout"));
    }

    #[test]
    fn generations_default_to_four_batched_sequences_on_all_cores() {
        // CAR_MAX_GENERATIONS / CAR_LLAMA_THREADS in the test's environment would change
        // the defaults; the flags win over them.
        let config = Config::from_args(
            Args::try_parse_from(["car-server", "--max-generations", "4"]).unwrap(),
        )
        .unwrap();
        assert_eq!(config.max_generations, 4);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
        if std::env::var_os("CAR_LLAMA_THREADS").is_none() {
            assert_eq!(config.llama_threads, cores);
        }
        for bad in ["0", &(MAX_GENERATIONS + 1).to_string()] {
            let err = Config::from_args(
                Args::try_parse_from(["car-server", "--max-generations", bad]).unwrap(),
            )
            .unwrap_err();
            assert!(
                err.contains("--max-generations must be from 1 to 64"),
                "{err}"
            );
        }
        if std::env::var_os("CAR_MAX_GENERATIONS").is_none() {
            let args = Args::try_parse_from(["car-server"]).unwrap();
            assert_eq!(args.max_generations, 4);
        }
    }
}
