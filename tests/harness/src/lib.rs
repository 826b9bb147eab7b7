//! Test support shared by the workspace's Rust test suites: start a real `car-server`
//! process on an ephemeral port with a temporary `CAR_HOME`, wait until it is ready, and
//! stop it by signal or kill. Also a scripted HTTP server standing in for remote model
//! providers ([`http_script`]) and the benchmarks' shared settings ([`bench`]).
//!
//! Owns: starting and stopping real `car-server` processes for tests and benchmarks, and the
//! scripted provider server. Must not touch: a real `CAR_HOME` (every daemon gets a temporary
//! one).
//!
//! The daemon announces readiness through `--ready-file`: a JSON object
//! `{pid, port, ws_url, socket, primary}` written atomically once both listeners are bound.
//! The child's stderr goes to a file in the temporary home so a chatty daemon can never
//! block on a full pipe; [`Daemon::stderr`] reads it back for assertions and failure output.
//!
//! The child inherits none of the caller's `CAR_*`, `XDG_RUNTIME_DIR` or token variables,
//! so a developer's own daemon settings cannot leak into a test.

pub mod bench;
pub mod http_script;
pub mod http_wire;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Variables removed from the child's environment before the test's own are applied.
const SCRUBBED_ENV: &[&str] = &[
    "CAR_HOME",
    "CAR_AUTH_TOKEN",
    "CAR_AUTH_TOKEN_FILE",
    "CAR_NO_AUTH",
    "CAR_SERVER_SOCKET",
    "CAR_DAEMON_URL",
    "CAR_HANDLER_TIMEOUT",
    "CAR_MEMORY_NAMESPACE",
    "XDG_RUNTIME_DIR",
];

/// The `car-server` binary: `$CAR_SERVER_BIN`, else the one beside this test binary in
/// the shared target directory, built with cargo first when it is missing.
pub fn car_server_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("CAR_SERVER_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test> → target/<profile>/car-server
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = profile_dir.join("car-server");
    if !bin.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "car-server", "--bin", "car-server"]);
        // Build the profile this test binary was built with, so the path above exists.
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build for car-server");
        assert!(status.success(), "building car-server failed");
    }
    bin
}

/// How to start a daemon.
#[derive(Debug)]
pub struct DaemonBuilder {
    bin: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    home: Option<PathBuf>,
    cwd: Option<PathBuf>,
}

impl DaemonBuilder {
    /// Adds command-line arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets one environment variable for the child.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// Starts the daemon in `dir` (its working directory: where it looks for
    /// `.car/policies/` and `.car/connectors.toml`).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Uses an existing directory as `CAR_HOME` instead of a fresh temporary one.
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Starts the daemon and waits until its ready file appears.
    pub fn start(self) -> Daemon {
        match self.spawn() {
            Ok(d) => d,
            Err((status, stderr)) => panic!("car-server exited early ({status}):\n{stderr}"),
        }
    }

    /// Starts the daemon; `Err((status, stderr))` when it exits before becoming ready.
    pub fn spawn(self) -> Result<Daemon, (ExitStatus, String)> {
        let scratch = tempfile::tempdir().expect("temporary directory");
        let home = self
            .home
            .clone()
            .unwrap_or_else(|| scratch.path().join("car-home"));
        let ready = scratch.path().join("ready.json");
        let stderr_path = scratch.path().join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut cmd = Command::new(&self.bin);
        for key in SCRUBBED_ENV {
            cmd.env_remove(key);
        }
        cmd.env("CAR_HOME", &home)
            .env("CAR_LOG", "info,car_server=debug")
            .args(["--port", "0", "--ready-file"])
            .arg(&ready)
            // The sibling endpoints on free ports / off, so parallel daemons never race for
            // port + 1 or the fixed MCP port; a test that wants them passes its own flags
            // (later flags win).
            .args(["--dashboard-port", "0", "--mcp-bind", "disabled"])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().expect("spawn car-server");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                if let Ok(info) = serde_json::from_str::<Value>(&text) {
                    return Ok(Daemon::new(child, scratch, home, info, stderr_path));
                }
            }
            if let Some(status) = child.try_wait().expect("poll child") {
                let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                return Err((status, text));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                panic!("car-server did not become ready within 60 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A running `car-server` child process. Killed on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    _scratch: tempfile::TempDir,
    pub home: PathBuf,
    pub port: u16,
    pub ws_url: String,
    pub socket: PathBuf,
    pub primary: bool,
    /// `http://127.0.0.1:<port>/` of the dashboard, when it is served.
    pub dashboard_url: Option<String>,
    /// `http://<addr>/mcp`, when the MCP endpoint is served.
    pub mcp_url: Option<String>,
    stderr_path: PathBuf,
}

impl Daemon {
    /// A builder for the workspace's `car-server` binary.
    pub fn builder() -> DaemonBuilder {
        Self::builder_for(car_server_bin())
    }

    /// A builder for a given binary.
    pub fn builder_for(bin: impl Into<PathBuf>) -> DaemonBuilder {
        DaemonBuilder {
            bin: bin.into(),
            args: Vec::new(),
            env: Vec::new(),
            home: None,
            cwd: None,
        }
    }

    /// A daemon with default settings (auth on).
    pub fn start() -> Daemon {
        Self::builder().start()
    }

    fn new(
        child: Child,
        scratch: tempfile::TempDir,
        home: PathBuf,
        info: Value,
        stderr_path: PathBuf,
    ) -> Self {
        Daemon {
            child: Some(child),
            _scratch: scratch,
            home,
            port: info["port"].as_u64().expect("ready.port") as u16,
            ws_url: info["ws_url"].as_str().expect("ready.ws_url").to_string(),
            socket: PathBuf::from(info["socket"].as_str().expect("ready.socket")),
            primary: info["primary"].as_bool().unwrap_or(true),
            dashboard_url: info["dashboard_url"].as_str().map(str::to_string),
            mcp_url: info["mcp_url"].as_str().map(str::to_string),
            stderr_path,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("daemon running")
    }

    /// `$CAR_HOME/ai.parslee.car/auth-token`.
    pub fn token_path(&self) -> PathBuf {
        self.home.join("ai.parslee.car").join("auth-token")
    }

    /// `$CAR_HOME/ai.parslee.car/host-token`.
    pub fn host_token_path(&self) -> PathBuf {
        self.home.join("ai.parslee.car").join("host-token")
    }

    /// The daemon token as written to its file.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.token_path()).expect("read auth-token")
    }

    /// The host token as written to its file.
    pub fn host_token(&self) -> String {
        std::fs::read_to_string(self.host_token_path()).expect("read host-token")
    }

    /// `$CAR_HOME/ai.parslee.car/dashboard-login`: the dashboard's one-time login URL.
    pub fn dashboard_login_path(&self) -> PathBuf {
        self.home.join("ai.parslee.car").join("dashboard-login")
    }

    /// The dashboard's current login URL, as the daemon wrote it.
    pub fn dashboard_login_url(&self) -> String {
        std::fs::read_to_string(self.dashboard_login_path())
            .expect("read dashboard-login")
            .trim()
            .to_string()
    }

    /// The dashboard's read-only token, obtained as its page does: the current login
    /// secret (the login URL's fragment) exchanged once at `GET /auth-token`. `None` when
    /// the token is `null` (auth off).
    pub fn observer_token(&self) -> Option<String> {
        let base = self.dashboard_url.as_deref().expect("a dashboard");
        let authority = base.trim_start_matches("http://").trim_end_matches('/');
        let origin = format!("http://{authority}");
        let login = std::fs::read_to_string(self.dashboard_login_path()).unwrap_or_default();
        let secret = login.trim().split_once("#login=").map_or("", |(_, s)| s);
        let mut headers = vec![
            ("Origin", origin.as_str()),
            ("Sec-Fetch-Site", "same-origin"),
        ];
        if !secret.is_empty() {
            headers.push(("X-Car-Login", secret));
        }
        let reply = http_wire::request(authority, "GET", "/auth-token", &headers, b"");
        assert_eq!(reply.status, 200, "GET /auth-token: {}", reply.text());
        reply.json()["token"].as_str().map(str::to_string)
    }

    /// Everything the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (up to 30 s) for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM)
    }

    /// Sends `signal` without waiting (SIGSTOP/SIGCONT to simulate a stalled daemon).
    pub fn send_signal(&self, signal: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, signal);
        }
    }

    /// Sends `signal` and waits (up to 30 s) for the process to exit.
    pub fn signal(&mut self, signal: libc::c_int) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, signal);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("poll child") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "car-server ignored signal {signal} for 30 s:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}
