//! Test fixtures: a private temp directory per test whose path carries a unique marker,
//! `/bin/sh` scripts written there, and `/proc` scans that find every process a test
//! started — by the marker in its command line (the scripts) or in its environment (every
//! descendant inherits `CAR_SUP_TEST_MARKER`). Dropping the fixture SIGKILLs leftovers so a
//! failing test cannot leak processes into the next; passing tests assert none are left.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use car_supervisor::{AgentRuntime, LaunchSpec, Restart, Status, Supervisor, SupervisorConfig};
use tokio::sync::broadcast;

/// Generous bound for anything a test waits on.
pub const LONG: Duration = Duration::from_secs(10);
pub const MARKER_VAR: &str = "CAR_SUP_TEST_MARKER";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub marker: String,
}

impl Env {
    pub fn new() -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let marker = format!(
            "carsupt{}n{}c{}",
            std::process::id(),
            nanos,
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = tempfile::Builder::new()
            .prefix(&format!("{marker}-"))
            .tempdir()
            .unwrap();
        Env { dir, marker }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.path().join("logs")
    }

    pub fn run_dir(&self) -> PathBuf {
        self.path().join("run/agents")
    }

    /// Test defaults: grace 300 ms, everything else as shipped.
    pub fn config(&self) -> SupervisorConfig {
        let mut config = SupervisorConfig::new(self.logs_dir(), self.run_dir());
        config.grace = Duration::from_millis(300);
        config
    }

    pub fn supervisor(&self) -> Supervisor {
        Supervisor::new(self.config())
    }

    /// Writes `<dir>/<name>.sh` and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path().join(format!("{name}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        path
    }

    /// `/bin/sh <script>` with the marker and `D` (the test dir) in its environment,
    /// never restarted, 50 ms backoff.
    pub fn spec(&self, id: &str, body: &str) -> LaunchSpec {
        let script = self.script(id, body);
        let mut spec = LaunchSpec::new(id, "/bin/sh");
        spec.args = vec![script.display().to_string()];
        spec.env.insert(MARKER_VAR.into(), self.marker.clone());
        spec.env
            .insert("D".into(), self.path().display().to_string());
        spec.backoff = Duration::from_millis(50);
        spec
    }

    pub fn spec_with(&self, id: &str, body: &str, restart: Restart, max: u32) -> LaunchSpec {
        let mut spec = self.spec(id, body);
        spec.restart = restart;
        spec.max_restarts = max;
        spec
    }

    /// Live (non-zombie) processes carrying this test's marker.
    pub fn procs(&self) -> Vec<u32> {
        let needle = format!("{MARKER_VAR}={}", self.marker);
        live_pids()
            .into_iter()
            .filter(|pid| {
                read_nul(*pid, "environ").contains(&needle)
                    || read_nul(*pid, "cmdline")
                        .iter()
                        .any(|a| a.contains(&self.marker))
            })
            .collect()
    }

    /// Live processes whose command line names script `name` and that lead their process
    /// group (the supervised script itself; a subshell the script forks for a moment has the
    /// same command line but is not a group leader).
    pub fn script_procs(&self, name: &str) -> Vec<u32> {
        let script = self.path().join(format!("{name}.sh")).display().to_string();
        live_pids()
            .into_iter()
            .filter(|pid| read_nul(*pid, "cmdline").contains(&script) && leads_group(*pid))
            .collect()
    }

    /// Waits (up to [`LONG`]) until no process of this test is left.
    pub async fn assert_no_procs(&self) {
        let deadline = Instant::now() + LONG;
        loop {
            let left = self.procs();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "processes left behind: {left:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path().join(rel)).unwrap_or_default()
    }

    pub fn log(&self, id: &str, file: &str) -> String {
        self.read(&format!("logs/agents/{id}/{file}"))
    }

    /// Waits (up to [`LONG`]) until `check` holds.
    pub async fn until(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + LONG;
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for pid in self.procs() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

fn live_pids() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me && state(*pid).is_some_and(|s| s != 'Z' && s != 'X'))
        .collect()
}

/// `/proc/<pid>/stat` state letter.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// `/proc/<pid>/stat` field `n` (1-based), for n ≥ 3.
pub fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n - 3).map(str::to_string)
}

pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

fn read_nul(pid: u32, file: &str) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/{file}"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for the agent to reach one of `targets` (generous timeout).
pub async fn wait_for(sup: &Supervisor, id: &str, targets: &[Status]) -> AgentRuntime {
    sup.wait(id, targets, LONG).await.unwrap()
}

/// Reads events for `id` until one satisfies `pred` (generous timeout); returns them all.
pub async fn events_until(
    rx: &mut broadcast::Receiver<(String, AgentRuntime)>,
    id: &str,
    mut pred: impl FnMut(&AgentRuntime) -> bool,
) -> Vec<AgentRuntime> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let (who, rt) = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out; events so far: {seen:#?}"))
            .unwrap();
        if who != id {
            continue;
        }
        let done = pred(&rt);
        seen.push(rt);
        if done {
            return seen;
        }
    }
}

/// Whether `pid` is its process group's leader (`/proc/<pid>/stat` field 5).
fn leads_group(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(str::to_owned))
        .and_then(|rest| {
            rest.split_whitespace()
                .nth(2)
                .and_then(|g| g.parse::<u32>().ok())
        })
        == Some(pid)
}
