//! Shared by car-host's integration tests: run `car-host` as a child process against a
//! real daemon (started by `car-test-harness`), with an environment holding nothing but
//! the daemon's URL and `CAR_HOME`, and read a watcher's stdout line by line.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

pub const BIN: &str = env!("CARGO_BIN_EXE_car-host");
/// How long any one expected line or command may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// `car-host` with an empty environment except the daemon's URL and `CAR_HOME`.
pub fn car_host(url: &str, home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("CAR_DAEMON_URL", url)
        .env("CAR_HOME", home)
        .env("CAR_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs `car-host args…` to completion.
pub async fn run(url: &str, home: &Path, args: &[&str]) -> Output {
    let out = tokio::time::timeout(WAIT, car_host(url, home).args(args).output())
        .await
        .unwrap_or_else(|_| panic!("car-host {args:?} did not finish within {WAIT:?}"))
        .expect("run car-host");
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts exit 0 and returns stdout.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "car-host failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// The one JSON object a `--json` command printed.
pub fn json_line(out: &Output) -> Value {
    let text = ok(out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line: {text}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A host-token client for the test's own calls (`agents.upsert`).
pub fn host_client(url: &str, home: &Path) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(home)).url(url))
}

/// `car-host watch` running as a child process.
pub struct Watcher {
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: PathBuf,
    _scratch: tempfile::TempDir,
    seen: Vec<String>,
}

impl Watcher {
    pub fn spawn(url: &str, home: &Path, args: &[&str]) -> Watcher {
        let scratch = tempfile::tempdir().unwrap();
        let stderr = scratch.path().join("watch.stderr");
        let file = std::fs::File::create(&stderr).unwrap();
        let mut child = car_host(url, home)
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .expect("spawn car-host watch");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Watcher {
            child,
            lines,
            stderr,
            _scratch: scratch,
            seen: Vec::new(),
        }
    }

    /// What the watcher wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The next stdout line satisfying `want` (skipping others), or a panic naming
    /// everything seen.
    pub async fn line_where(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.lines.next_line()).await;
            match next {
                Ok(Ok(Some(line))) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Ok(Ok(None)) => panic!(
                    "watcher exited before {what}; stdout so far:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                ),
                Ok(Err(e)) => panic!("reading the watcher: {e}"),
                Err(_) => panic!(
                    "no {what} within {WAIT:?}; stdout so far:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                ),
            }
        }
    }

    /// The next JSON line whose `kind` is `kind`.
    pub async fn json_kind(&mut self, kind: &str) -> Value {
        let line = self
            .line_where(kind, |l| {
                serde_json::from_str::<Value>(l).is_ok_and(|v| v["kind"] == kind)
            })
            .await;
        serde_json::from_str(&line).unwrap()
    }

    /// Waits until stderr contains `text`.
    pub async fn stderr_contains(&self, text: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.stderr().contains(text) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "watcher stderr never said {text:?}:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A port nothing listens on (bound and released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
