//! `car-server`: the car-runtime daemon.
//!
//! Owns: every piece of shared state a daemon process holds (under `state`), the listeners,
//! dispatch and the services. Must not touch: another daemon's state root (the primary-daemon
//! rule in `transport::instance`), or any file a caller names outside `car_proto::safe_file`'s
//! rules.
//!
//! One daemon per user per host owns the shared state; every program reaches it through
//! JSON-RPC 2.0 over WebSocket, on TCP (`127.0.0.1:9100`) and on a Unix socket.
//!
//! The code is in layers, each importing only the layers below it (checked by
//! `tests/layering.rs`, which reads every module's imports):
//!
//! 1. this module: the process ([`run`], [`open_state`]);
//! 2. [`transport`]: listeners, the upgrade-time Origin/Host checks, the primary-daemon rule, one
//!    connection's reader/writer/liveness, and the sibling endpoints (dashboard, MCP);
//! 3. [`dispatch`]: declarations → gates (the access rule) → handler, under deadlines; it also runs
//!    one service's call of another's method ([`handler::Invoke`]);
//! 4. [`services`]: one module per contract namespace, same name; no service imports another;
//! 5. [`handler`]: the typed routes services register (`Call`, `Routes`), and the daemon's agent
//!    runner ([`handler::agent_runner`]: the one agent loop over in-process calls);
//! 6. [`state`]: what all connections share, owned by small typed stores (sessions and their
//!    identity, auth files, the event and run store, run records, memory, models, agents and their
//!    processes, approvals and the permission gate, supervision, schedules, secrets' grants, the
//!    proposal model), grouped into the six parts of `ServerState` a service reads by name
//!    (`daemon`, `agents`, `access`, `data`, `runs`, `inference`);
//! 7. [`config`]: flags and environment → `Config`.
//!
//! [`run`] is the whole process: resolve paths, bind, claim primacy, publish credentials,
//! serve until SIGINT/SIGTERM, then remove the token files and the socket.

pub mod config;
pub mod dispatch;
pub mod handler;
pub mod services;
pub mod state;
pub mod transport;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use car_proto::paths::{self, PathEnv, Paths};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, SuppliedToken};
use crate::state::auth::Credentials;
use crate::state::ServerState;
use crate::state::{auth, inference, store};
use crate::transport::instance::Instance;
use crate::transport::{instance, sidecars};

pub use config::Fatal;

/// Resolves paths and config from the process environment (exit 2 on bad input).
pub fn prepare(args: config::Args) -> Result<(Config, Paths), Fatal> {
    if args.require_auth {
        tracing::warn!("--require-auth is deprecated and does nothing: auth is on by default");
    }
    let config = Config::from_args(args).map_err(Fatal::usage)?;
    let paths =
        paths::resolve(&PathEnv::from_process()).map_err(|e| Fatal::usage(e.to_string()))?;
    Ok((config, paths))
}

/// Runs the daemon until SIGINT/SIGTERM.
pub async fn run(config: Config, paths: Paths) -> Result<(), Fatal> {
    raise_open_file_limit();
    let shutdown = CancellationToken::new();
    let addr = SocketAddr::new(config.bind, config.port);
    let tcp = transport::bind_tcp(addr)
        .await
        .map_err(|e| Fatal::runtime(format!("cannot listen on {addr}: {e}")))?;
    let local = tcp
        .local_addr()
        .map_err(|e| Fatal::runtime(e.to_string()))?;
    if !config.bind.is_loopback() {
        tracing::warn!(%local, "listening on a non-loopback address: any host that can reach it may connect");
    }
    let instance = instance::claim(&paths, local.port())
        .map_err(|e| Fatal::runtime(format!("cannot claim {}: {e}", paths.lock_file.display())))?;
    let unix = transport::bind_unix(&instance.socket)
        .map_err(|e| Fatal::runtime(format!("cannot bind {}: {e}", instance.socket.display())))?;
    let credentials = publish_credentials(&config, &paths, &instance)?;
    let mut config = config;
    config.primary = instance.primary;
    let (state, dispatch) = open_state(
        config.clone(),
        &paths.state_root,
        paths.memory_dir.clone(),
        credentials.clone(),
        shutdown.clone(),
    )
    .await?;
    state
        .agents
        .lifecycle
        .hide_credentials(paths.token_dir.clone());
    state.data.connectors.hide(paths.token_dir.clone());

    let tcp_task = tokio::spawn(transport::accept_tcp(tcp, state.clone(), dispatch.clone()));
    let unix_task = tokio::spawn(transport::accept_unix(
        unix,
        instance.socket.clone(),
        state.clone(),
        dispatch,
    ));
    let ws_url = format!("ws://{local}");
    let login_file = instance.primary.then(|| paths.dashboard_login.clone());
    let sidecars = sidecars::start(&state, local.port(), login_file).await?;
    state.boot(ws_url.clone()).await;
    tracing::info!(
        %ws_url,
        socket = %instance.socket.display(),
        primary = instance.primary,
        dashboard = sidecars.dashboard_url.as_deref().unwrap_or("off"),
        mcp = sidecars.mcp_url.as_deref().unwrap_or("off"),
        auth = config.auth_enabled,
        state_root = %paths.state_root.display(),
        version = car_proto::CAR_VERSION,
        "car-server listening"
    );
    if let Some(ready) = &config.ready_file {
        let info = json!({
            "pid": std::process::id(),
            "port": local.port(),
            "ws_url": ws_url,
            "socket": instance.socket,
            "primary": instance.primary,
            "dashboard_url": sidecars.dashboard_url,
            "mcp_url": sidecars.mcp_url,
        });
        write_ready_file(ready, &info.to_string()).map_err(|e| {
            Fatal::runtime(format!(
                "cannot write --ready-file {}: {e}",
                ready.display()
            ))
        })?;
    }

    wait_for_signal().await;
    tracing::info!("shutting down");
    shutdown.cancel();
    let _ = tcp_task.await;
    let _ = unix_task.await;
    state.halt().await;
    state.data.store.close();
    if let Err(e) = state.data.memory.flush_all().await {
        tracing::error!(error = %e, "flushing memory at shutdown failed");
    }
    if let Some(creds) = &credentials {
        if instance.primary {
            auth::remove_if_ours(&paths.auth_token, creds.token.expose());
            auth::remove_if_ours(&paths.host_token, creds.host_token.expose());
            // A spent or current login URL opens nothing once this daemon is gone.
            if let Err(e) = std::fs::remove_file(&paths.dashboard_login) {
                tracing::debug!(error = %e, "no dashboard login file to remove");
            }
        }
    }
    if let Err(e) = std::fs::remove_file(&instance.socket) {
        tracing::debug!(error = %e, "socket already gone");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Opens what every connection shares under `state_root`: the event store (marking runs a
/// dead daemon left running incomplete), the memory store, the model registry and
/// engines; and the dispatch map built from the services' routes, which the connections
/// hold (the state does not: it is the layer below dispatch).
pub async fn open_state(
    config: Config,
    state_root: &std::path::Path,
    memory_dir: std::path::PathBuf,
    credentials: Option<Credentials>,
    shutdown: CancellationToken,
) -> Result<(Arc<ServerState>, Arc<dispatch::Dispatch>), Fatal> {
    let db = state_root.join("car.db");
    let store = store::Store::open(&db, config.event_retention).map_err(Fatal::runtime)?;
    match store
        .run(services::runs::lifecycle::mark_orphans_incomplete_job)
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            runs = n,
            "marked runs left running by a previous daemon incomplete"
        ),
        Err(e) => tracing::warn!(error = %e, "could not check for orphaned runs"),
    }
    let memory = car_memory::MemoryStore::open(memory_dir.clone())
        .await
        .map_err(|e| Fatal::runtime(format!("cannot open {}: {e}", memory_dir.display())))?;
    let secret_activity = Arc::new(car_secrets::Activity::new());
    let secrets = match car_secrets::SecretStore::open_with_activity(
        state_root,
        secret_activity.clone(),
    ) {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => {
            tracing::error!(error = %e, "the secret store is unavailable; secret.* methods will fail");
            None
        }
    };
    let mut engine_config = car_inference::EngineConfig::new(state_root);
    if let Some(store) = &secrets {
        let store = store.clone();
        engine_config.secret_lookup = Some(Arc::new(move |name: &str| match store.resolve(name) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(secret = %name, error = %e, "a model's api_key_secret could not be read");
                None
            }
        }));
    }
    engine_config.llama.n_threads = config.llama_threads;
    engine_config.llama.n_seq = config.max_generations as u32;
    engine_config.llama.prefix_cache_bytes = config.prefix_cache_bytes;
    let engine = car_inference::InferenceEngine::open(engine_config)
        .map_err(|e| Fatal::runtime(format!("cannot open the model registry: {e}")))?;
    let inference = Arc::new(inference::InferenceService::new(
        engine,
        config.max_generations,
        config.infer_progress,
        state_root,
    ));
    inference::refresh_memory_embedder(&inference.engine, &memory);
    let dispatch = dispatch::Dispatch::new(services::routes(), config.debug_methods);
    let workspace_root = config
        .workspace_root
        .clone()
        .unwrap_or_else(|| state_root.join("workspace"));
    if config.workspace_root.is_none() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&workspace_root)
            .map_err(|e| {
                Fatal::runtime(format!("cannot create {}: {e}", workspace_root.display()))
            })?;
    }
    let workspace = car_builtin_tools::Workspace::new(&workspace_root).map_err(|e| {
        Fatal::usage(format!(
            "--workspace-root {}: {e}",
            workspace_root.display()
        ))
    })?;
    tracing::info!(root = %workspace.root().display(), "built-in agent tools act under this root");
    let scheduling = state::scheduling::Scheduling::open(
        state_root,
        config.systemd_user_dir.clone(),
        !config.no_systemctl,
        config.primary,
    )
    .map_err(Fatal::runtime)?;
    let state = Arc::new(ServerState {
        agents: state::Agents::open(state_root, config.agent_stop_grace),
        access: state::Access::open(state_root, secrets, secret_activity),
        data: state::Data::new(state_root, store, memory, workspace),
        runs: state::Runs::new(scheduling),
        inference,
        daemon: state::Daemon::new(config, credentials, state_root, shutdown),
    });

    Ok((state, Arc::new(dispatch)))
}

/// Mints or adopts the daemon's credentials; the primary publishes them as files.
fn publish_credentials(
    config: &Config,
    paths: &Paths,
    instance: &Instance,
) -> Result<Option<Credentials>, Fatal> {
    if !config.auth_enabled {
        tracing::warn!("auth is OFF (--no-auth): any local process can call any method");
        return Ok(None);
    }
    let host_token = auth::mint_token();
    if instance.primary {
        if config.supplied_token.is_some() {
            tracing::warn!("a supplied token is ignored by the primary daemon, which mints and publishes its own");
        }
        if let Some(SuppliedToken::File(path)) = &config.supplied_token {
            let _ = std::fs::remove_file(path);
        }
        let token = auth::mint_token();
        auth::write_private_file(&paths.auth_token, &token)
            .map_err(|e| Fatal::runtime(e.to_string()))?;
        auth::write_private_file(&paths.host_token, &host_token).map_err(|e| {
            auth::remove_if_ours(&paths.auth_token, &token);
            Fatal::runtime(e.to_string())
        })?;
        tracing::info!(path = %paths.auth_token.display(), "auth token written");
        return Ok(Some(Credentials {
            token: token.into(),
            host_token: host_token.into(),
            dashboard_token: auth::mint_token().into(),
        }));
    }
    let token = match &config.supplied_token {
        Some(SuppliedToken::Value(token)) => token.expose().clone(),
        Some(SuppliedToken::File(path)) => auth::take_token_file(path).map_err(Fatal::usage)?,
        None => {
            tracing::warn!("non-primary daemon without --auth-token/CAR_AUTH_TOKEN/--auth-token-file: its minted token is in memory only, so no client can authenticate");
            auth::mint_token()
        }
    };
    tracing::info!(shared = %paths.shared_socket.display(), "another daemon is primary for this state root: no token file written, binding a per-port socket");
    Ok(Some(Credentials {
        token: token.into(),
        host_token: host_token.into(),
        dashboard_token: auth::mint_token().into(),
    }))
}

/// Raises the soft limit on open files to the hard limit (at most 1 Mi): every connection
/// holds a socket, and the common soft default of 1,024 would refuse connections long
/// before memory runs short (an idle connection costs ~15 KiB, docs/benchmarks.md).
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    #[allow(unsafe_code)]
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if got != 0 {
        return;
    }
    let wanted = limit.rlim_max.min(1 << 20);
    if wanted <= limit.rlim_cur {
        return;
    }
    let before = limit.rlim_cur;
    limit.rlim_cur = wanted;
    #[allow(unsafe_code)]
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    if set == 0 {
        tracing::debug!(before, after = wanted, "raised the open-file limit");
    } else {
        tracing::warn!(before, "could not raise the open-file limit");
    }
}

fn write_ready_file(path: &Path, contents: &str) -> std::io::Result<()> {
    car_proto::safe_file::write_atomic(path, contents.as_bytes(), 0o644)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Libraries whose trace output carries whole frames or requests (tokens, secret values,
/// `Authorization` headers): held at `debug` whatever `CAR_LOG` says.
const WIRE_LOGGERS: &[&str] = &["tungstenite", "tokio_tungstenite", "ureq", "ureq_proto"];

/// Modules whose `debug` output carries OAuth secrets (rmcp's OAuth client logs the
/// authorization code): held at `info` whatever `CAR_LOG` says.
const SECRET_LOGGERS: &[&str] = &["rmcp::transport::auth"];

/// Whether `target` is one of `loggers` or a module under one.
fn is_under(loggers: &[&str], target: &str) -> bool {
    loggers.iter().any(|t| {
        target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

fn is_wire_logger(target: &str) -> bool {
    is_under(WIRE_LOGGERS, target)
}

/// Installs the stderr logger; `CAR_LOG` holds the filter (default `info`), except that
/// [`WIRE_LOGGERS`] never log at `trace` and [`SECRET_LOGGERS`] never below `info`.
///
/// The two filters are one (`and`), so the subscriber's maximum level is `CAR_LOG`'s: a
/// disabled level costs one comparison at the call site, also for libraries logging
/// through the `log` crate (the `log` bridge takes its maximum level from it). Without a
/// hint on the cap, the subscriber's hint is `TRACE`, `log`'s global maximum follows it, and
/// every `log::trace!` in tungstenite (several per frame) is built into a record and
/// filtered per call — a measured share of the daemon's per-call CPU. The cap's own hint is
/// `TRACE` because that is what it may enable (everything but wire-logger traces): a hint
/// narrower than what a filter enables trips tracing-subscriber's debug assertion.
pub fn init_logging() {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let wire_cap = tracing_subscriber::filter::filter_fn(|meta| {
        let (level, target) = (*meta.level(), meta.target());
        let wire_trace = level == tracing::Level::TRACE && is_wire_logger(target);
        let secret_debug = level > tracing::Level::INFO && is_under(SECRET_LOGGERS, target);
        !wire_trace && !secret_debug
    })
    .with_max_level_hint(tracing_subscriber::filter::LevelFilter::TRACE);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter.and(wire_cap)),
        )
        .init();
}

/// The binary's entry point.
pub fn main_with(args: config::Args) -> ExitCode {
    init_logging();
    let result = prepare(args).and_then(|(config, paths)| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Fatal::runtime(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(run(config, paths))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fatal) => {
            tracing::error!("{}", fatal.message);
            eprintln!("car-server: {}", fatal.message);
            ExitCode::from(fatal.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_under, is_wire_logger, SECRET_LOGGERS};

    #[test]
    fn rmcps_oauth_client_is_a_secret_logger() {
        assert!(is_under(SECRET_LOGGERS, "rmcp::transport::auth"));
        assert!(!is_under(
            SECRET_LOGGERS,
            "rmcp::transport::streamable_http_client"
        ));
    }

    #[test]
    fn wire_loggers_are_matched_by_crate_and_module_only() {
        for wire in [
            "tungstenite",
            "tungstenite::protocol",
            "tokio_tungstenite",
            "ureq_proto::x",
        ] {
            assert!(is_wire_logger(wire), "{wire}");
        }
        for other in ["tungstenitex", "car_server", "ureqx::y", "my::tungstenite"] {
            assert!(!is_wire_logger(other), "{other}");
        }
    }
}
