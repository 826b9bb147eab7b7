//! `--start-server`: start `car-server` for the configured URL when nothing listens there.
//!
//! Rules:
//! - only a daemon on this machine is started: the URL's host must be loopback (`127.0.0.1`,
//!   `localhost`, `::1`); the daemon gets `--bind` and `--port` from it, plus `--ready-file` and
//!   any `--server-arg`s;
//! - the binary: `--server-bin` (or `CAR_SERVER_BIN`), else `car-server` beside the `car-host`
//!   executable, else the first `car-server` on `PATH`;
//! - it runs detached from car-host (its own process group, stdin closed, stdout and stderr
//!   appended to `<state root>/car-server.log`), so it outlives car-host and a Ctrl-C in the
//!   terminal does not stop it;
//! - car-host waits for the daemon's ready file (written once its listeners are bound) up to
//!   `--start-timeout`; an early exit reports the exit status and what the daemon logged.
//!
//! The started daemon's pid, URL and log path are reported on stderr (and by `list --json`
//! in its `started_server` field).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use car_daemon_client::discovery;
use car_daemon_client::ClientConfig;
use serde::Serialize;
use serde_json::Value;

use crate::reach::configured_url;

/// What to start and how long to wait.
#[derive(Debug, Clone)]
pub struct StartOptions {
    pub server_bin: Option<PathBuf>,
    pub server_args: Vec<String>,
    pub timeout: Duration,
}

/// A daemon car-host started.
#[derive(Debug, Clone, Serialize)]
pub struct Started {
    pub pid: u32,
    pub ws_url: String,
    pub bin: PathBuf,
    pub log: Option<PathBuf>,
}

/// Starts the daemon and waits until it is ready (see the module docs).
pub async fn start(config: &ClientConfig, options: &StartOptions) -> Result<Started, String> {
    let url = configured_url(config).map_err(|e| e.to_string())?;
    let parsed = discovery::parse_ws_url(&url).map_err(|e| e.to_string())?;
    let host = match parsed.host.as_str() {
        "127.0.0.1" | "localhost" => "127.0.0.1",
        "::1" => "::1",
        other => {
            return Err(format!(
                "--start-server only starts a daemon on this machine; {url} names {other}"
            ))
        }
    };
    let bin = find_server_bin(options.server_bin.as_deref())?;
    let scratch = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let ready = scratch.path().join("ready.json");
    let log_path = car_proto::paths::resolve(&config.env.paths)
        .ok()
        .map(|p| p.state_root.join("car-server.log"));
    let log = log_path.as_deref().and_then(open_log);
    let log_start = log
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let mut cmd = Command::new(&bin);
    cmd.args(["--bind", host, "--port", &parsed.port.to_string()])
        .arg("--ready-file")
        .arg(&ready)
        .args(&options.server_args)
        .stdin(Stdio::null());
    match &log {
        Some(file) => {
            let out = file.try_clone().map_err(|e| format!("log file: {e}"))?;
            cmd.stdout(out)
                .stderr(file.try_clone().map_err(|e| e.to_string())?);
        }
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    tracing::info!(bin = %bin.display(), %url, "starting car-server");
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let deadline = Instant::now() + options.timeout;
    loop {
        if let Some(info) = read_ready(&ready) {
            let pid = info["pid"]
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or_else(|| child.id());
            let ws_url = info["ws_url"].as_str().unwrap_or(&url).to_string();
            return Ok(Started {
                pid,
                ws_url,
                bin,
                log: log.is_some().then_some(log_path).flatten(),
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            let logged = log_path
                .as_deref()
                .map(|p| tail(p, log_start))
                .unwrap_or_default();
            return Err(format!(
                "car-server ({}) exited before it was ready ({status}){}",
                bin.display(),
                if logged.is_empty() {
                    String::new()
                } else {
                    format!(":\n{logged}")
                }
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "car-server ({}) was not ready within {}; it was stopped",
                bin.display(),
                humantime::format_duration(options.timeout)
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn read_ready(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<Value>(&text)
        .ok()
        .filter(Value::is_object)
}

fn open_log(path: &Path) -> Option<std::fs::File> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot open the daemon log; its output is discarded");
            None
        }
    }
}

/// What the daemon appended to its log since `from` (at most the last 4 KiB).
fn tail(path: &Path, from: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = from.max(len.saturating_sub(4096));
    let mut text = String::new();
    if file.seek(SeekFrom::Start(start)).is_ok() {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).trim_end().to_string();
    }
    text
}

fn exe_name() -> &'static str {
    if cfg!(windows) {
        "car-server.exe"
    } else {
        "car-server"
    }
}

/// `explicit`, else beside this executable, else on `PATH`.
fn find_server_bin(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(bin) = explicit {
        return Ok(bin.to_path_buf());
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(exe_name())))
        .filter(|p| p.is_file());
    if let Some(bin) = beside {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(exe_name()))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "cannot find car-server beside car-host or on PATH; pass --server-bin".to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_daemon_client::EnvSnapshot;

    #[tokio::test]
    async fn a_remote_daemon_is_never_started() {
        let config =
            ClientConfig::with_env(EnvSnapshot::with_car_home("/h")).url("ws://192.0.2.1:9100");
        let options = StartOptions {
            server_bin: Some("/nonexistent/car-server".into()),
            server_args: vec![],
            timeout: Duration::from_secs(1),
        };
        let err = start(&config, &options).await.unwrap_err();
        assert!(
            err.contains("only starts a daemon on this machine"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_missing_binary_is_named() {
        let home = tempfile::tempdir().unwrap();
        let config =
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path())).url("ws://127.0.0.1:1");
        let options = StartOptions {
            server_bin: Some("/nonexistent/car-server".into()),
            server_args: vec![],
            timeout: Duration::from_secs(1),
        };
        let err = start(&config, &options).await.unwrap_err();
        assert!(err.contains("cannot run /nonexistent/car-server"), "{err}");
    }

    #[cfg(unix)]
    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-car-server");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn options(bin: PathBuf, args: &[&str]) -> StartOptions {
        StartOptions {
            server_bin: Some(bin),
            server_args: args.iter().map(|a| a.to_string()).collect(),
            timeout: Duration::from_secs(20),
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn an_early_exit_reports_what_the_daemon_logged() {
        let home = tempfile::tempdir().unwrap();
        let bin = script(home.path(), "echo \"boom: $*\" >&2; exit 3");
        let config =
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path())).url("ws://localhost:1");
        let err = start(&config, &options(bin, &["--approval-timeout", "5s"]))
            .await
            .unwrap_err();
        assert!(err.contains("exited before it was ready"), "{err}");
        assert!(err.contains("exit status: 3"), "{err}");
        assert!(
            err.contains("boom: --bind 127.0.0.1 --port 1 --ready-file ")
                && err.ends_with("--approval-timeout 5s"),
            "{err}"
        );
        let log = std::fs::read_to_string(home.path().join("car-server.log")).unwrap();
        assert!(log.contains("boom:"), "{log}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_ready_file_reports_pid_and_url() {
        let home = tempfile::tempdir().unwrap();
        let bin = script(
            home.path(),
            r#"while [ $# -gt 0 ]; do
  if [ "$1" = --ready-file ]; then printf '{"pid": 4242, "ws_url": "ws://127.0.0.1:7"}' > "$2"; fi
  shift
done"#,
        );
        let config =
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path())).url("ws://127.0.0.1:7");
        let started = start(&config, &options(bin.clone(), &[])).await.unwrap();
        assert_eq!(started.pid, 4242);
        assert_eq!(started.ws_url, "ws://127.0.0.1:7");
        assert_eq!(started.bin, bin);
        assert_eq!(started.log, Some(home.path().join("car-server.log")));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_daemon_that_never_gets_ready_is_stopped() {
        let home = tempfile::tempdir().unwrap();
        let bin = script(home.path(), "exec sleep 30");
        let config =
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path())).url("ws://127.0.0.1:7");
        let mut opts = options(bin, &[]);
        opts.timeout = Duration::from_millis(300);
        let err = start(&config, &opts).await.unwrap_err();
        assert!(
            err.contains("was not ready within 300ms; it was stopped"),
            "{err}"
        );
    }
}
