//! One agent's supervision task: spawning or adopting a child, watching it, stopping its
//! process group, and applying the restart policy between runs.
//!
//! A run is a [`Live`] child: either our own (`tokio::process::Child`, whose exit status
//! we reap) or an adopted orphan of a previous daemon (not our child: we poll
//! `procinfo::is_same_process` every 200 ms and never learn its exit status).
//!
//! Stopping signals the child's process group (its pid; children are spawned with
//! `process_group(0)`) and waits until the leader is reaped *and* no live process is left
//! in the group. The same group cleanup (SIGTERM, grace, SIGKILL) runs when a leader exits
//! on its own, so leftovers of one run never overlap the next.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::policy::{decide, Decision, ExitInfo, Policy};
use crate::record::{self, PidRecord};
use crate::slot::{Shared, Slot, StopMode};
use crate::types::{AgentRuntime, LaunchSpec, Status};
use crate::{logs, procinfo, sys};

/// How often an adopted child is checked for liveness.
const ADOPTED_POLL: Duration = Duration::from_millis(200);
/// How often a process group is checked for remaining members while stopping.
const GROUP_POLL: Duration = Duration::from_millis(25);
/// How long to wait for a SIGKILLed group to disappear before giving up (logged).
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Rotation check period per running agent.
const ROTATE_EVERY: Duration = Duration::from_secs(1);

/// A running child (ours or adopted).
#[derive(Debug)]
pub(crate) struct Live {
    pub pid: u32,
    pgid: i32,
    /// When the run began (for `stable_after`); back-dated for an adopted child.
    started: Instant,
    started_at: String,
    adopted: bool,
    kind: Kind,
    exit: Option<ExitInfo>,
}

#[derive(Debug)]
enum Kind {
    Child(Child),
    Adopted { starttime: Option<u64> },
}

impl Live {
    /// Waits for the group leader to exit (cached once known). Cancel safe.
    async fn wait_leader(&mut self) -> ExitInfo {
        if let Some(exit) = self.exit {
            return exit;
        }
        let exit = match &mut self.kind {
            Kind::Child(child) => match child.wait().await {
                Ok(status) => ExitInfo::from_status(status),
                Err(e) => {
                    tracing::warn!(pid = self.pid, error = %e, "cannot wait for child");
                    ExitInfo::UNKNOWN
                }
            },
            Kind::Adopted { starttime } => loop {
                if !procinfo::is_same_process(self.pid, self.pgid, *starttime) {
                    break ExitInfo::UNKNOWN;
                }
                tokio::time::sleep(ADOPTED_POLL).await;
            },
        };
        self.exit = Some(exit);
        exit
    }

    /// Waits for the leader and then for every other member of its group. Cancel safe.
    async fn wait_gone(&mut self) -> ExitInfo {
        let exit = self.wait_leader().await;
        while procinfo::group_alive(self.pgid) {
            tokio::time::sleep(GROUP_POLL).await;
        }
        exit
    }

    fn signal_group(&self, sig: i32) {
        // An empty group is not signalled: its id may already name someone else's group.
        if !procinfo::group_alive(self.pgid) {
            return;
        }
        if let Err(e) = sys::signal_group(self.pgid, sig) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                tracing::warn!(pgid = self.pgid, sig, error = %e, "cannot signal process group");
            }
        }
    }

    /// Marks `rt` as running this child.
    pub fn mark_running(&self, rt: &mut AgentRuntime) {
        rt.status = Status::Running;
        rt.pid = Some(self.pid);
        rt.started_at = Some(self.started_at.clone());
        rt.adopted = self.adopted;
        rt.reason = None;
    }
}

/// Marks `rt` as not running, with the last run's exit.
pub(crate) fn mark_ended(
    rt: &mut AgentRuntime,
    status: Status,
    exit: ExitInfo,
    reason: Option<String>,
) {
    rt.status = status;
    rt.pid = None;
    rt.started_at = None;
    rt.last_exit_code = exit.code;
    rt.last_signal = exit.signal;
    rt.reason = reason;
}

/// Spawns `spec` as a new child and records its pid; `Err` is the `reason` to report.
pub(crate) fn spawn(shared: &Shared, spec: &LaunchSpec) -> Result<Live, String> {
    let cfg = &shared.config;
    let command = spec.command.display();
    if let Some(cwd) = &spec.cwd {
        if !cwd.is_dir() {
            return Err(format!(
                "spawn failed: working directory {} is not a directory",
                cwd.display()
            ));
        }
    }
    let (out, err) = logs::open_streams(&cfg.logs_dir, &spec.id).map_err(|e| {
        let dir = logs::agent_dir(&cfg.logs_dir, &spec.id);
        format!(
            "spawn failed: cannot open log files in {}: {e}",
            dir.display()
        )
    })?;
    let mut cmd = Command::new(&spec.command);
    // The child's whole environment is `spec.env` (plus a default `PATH`): nothing of the
    // daemon's own environment (API keys, tokens) leaks into it.
    cmd.args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    if !spec.env.contains_key("PATH") {
        cmd.env("PATH", crate::DEFAULT_PATH);
    }
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut confined = false;
    if let (Some(confinement), true) = (&spec.confine, shared.confines) {
        if let Some(ruleset) = crate::confine::prepare(confinement)
            .map_err(|e| format!("spawn failed: {command}: {e}"))?
        {
            confined = true;
            // SAFETY: the hook only makes two system calls (no allocation, no locks), as
            // required between fork and exec.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(move || crate::confine::restrict_self(&ruleset));
            }
        }
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("spawn failed: {command}: {e}"))?;
    let pid = child
        .id()
        .ok_or_else(|| format!("spawn failed: {command}: the child has no pid"))?;
    let pgid = i32::try_from(pid).map_err(|_| format!("spawn failed: pid {pid} out of range"))?;
    let now = car_proto::clock::now();
    let started_at = car_proto::clock::rfc3339(&now);
    let record = PidRecord {
        pid,
        pgid,
        starttime: procinfo::starttime(pid),
        command: command.to_string(),
        started_at: started_at.clone(),
        started_unix_ms: u64::try_from(now.timestamp_millis()).unwrap_or(0),
    };
    if let Err(e) = record::write(&cfg.run_dir, &spec.id, &record) {
        tracing::warn!(
            agent = %spec.id, pid, error = %e,
            "cannot write pid record; a later daemon will not adopt this child"
        );
    }
    tracing::info!(agent = %spec.id, pid, command = %command, confined, "spawned agent");
    Ok(Live {
        pid,
        pgid,
        started: Instant::now(),
        started_at,
        adopted: false,
        kind: Kind::Child(child),
        exit: None,
    })
}

/// Adopts the live child a pid record names, if it is still the recorded process; a
/// stale record is removed. `expected` is only compared for a warning.
pub(crate) fn adopt(shared: &Shared, id: &str, expected: Option<&Path>) -> Option<Live> {
    let run_dir = &shared.config.run_dir;
    let rec = record::read(run_dir, id)?;
    if !procinfo::is_same_process(rec.pid, rec.pgid, rec.starttime) {
        tracing::info!(
            agent = id,
            pid = rec.pid,
            "removing stale pid record (process gone or pid reused)"
        );
        record::remove(run_dir, id);
        return None;
    }
    if let Some(expected) = expected {
        if Path::new(&rec.command) != expected {
            tracing::warn!(
                agent = id, pid = rec.pid, recorded = %rec.command, spec = %expected.display(),
                "adopting a child whose command differs from the spec; restart it to apply the spec"
            );
        }
    }
    let began = UNIX_EPOCH + Duration::from_millis(rec.started_unix_ms);
    let age = SystemTime::now().duration_since(began).unwrap_or_default();
    tracing::info!(agent = id, pid = rec.pid, started_at = %rec.started_at, "adopted running agent");
    Some(Live {
        pid: rec.pid,
        pgid: rec.pgid,
        started: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
        started_at: rec.started_at,
        adopted: true,
        kind: Kind::Adopted {
            starttime: rec.starttime,
        },
        exit: None,
    })
}

/// Resolves once a stop is requested (with its mode); a dropped sender means detach.
async fn stop_requested(rx: &mut watch::Receiver<Option<StopMode>>) -> StopMode {
    match rx.wait_for(Option::is_some).await {
        Ok(mode) => mode.unwrap_or(StopMode::Detach),
        Err(_) => StopMode::Detach,
    }
}

/// Resolves once a `kill` stop is requested; never if the sender is gone.
async fn kill_requested(rx: &mut watch::Receiver<Option<StopMode>>) {
    if rx.wait_for(|m| *m == Some(StopMode::Kill)).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Stops `live`'s process group: SIGKILL at once for `Kill`; otherwise SIGTERM, then
/// SIGKILL after `grace` (or as soon as `escalate` asks for `Kill`). Returns when the
/// group is gone (or, logged, [`KILL_WAIT`] after the SIGKILL).
pub(crate) async fn terminate(
    live: &mut Live,
    mode: StopMode,
    grace: Duration,
    escalate: &mut watch::Receiver<Option<StopMode>>,
) -> ExitInfo {
    if mode == StopMode::Kill {
        live.signal_group(libc::SIGKILL);
    } else {
        live.signal_group(libc::SIGTERM);
        let gone = tokio::select! {
            exit = live.wait_gone() => Some(exit),
            () = tokio::time::sleep(grace) => None,
            () = kill_requested(escalate) => None,
        };
        if let Some(exit) = gone {
            return exit;
        }
        tracing::debug!(pid = live.pid, "process group still alive; sending SIGKILL");
        live.signal_group(libc::SIGKILL);
    }
    match tokio::time::timeout(KILL_WAIT, live.wait_gone()).await {
        Ok(exit) => exit,
        Err(_) => {
            tracing::warn!(pid = live.pid, "process group still present after SIGKILL");
            live.exit.unwrap_or(ExitInfo::UNKNOWN)
        }
    }
}

/// Aborts the per-agent rotation ticker when the run task ends.
struct Ticker(tokio::task::JoinHandle<()>);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn rotation_ticker(shared: Arc<Shared>, id: String) -> Ticker {
    Ticker(tokio::spawn(async move {
        let mut every = tokio::time::interval(ROTATE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let (shared, id) = (shared.clone(), id.clone());
            let _ = tokio::task::spawn_blocking(move || shared.rotate(&id)).await;
        }
    }))
}

enum Outcome {
    Exited(ExitInfo),
    Stop(StopMode),
}

/// The supervision loop of one `start`: runs until stopped, errored or stopped by policy.
pub(crate) struct Runner {
    pub shared: Arc<Shared>,
    pub slot: Arc<Slot>,
    pub spec: LaunchSpec,
    pub stop_rx: watch::Receiver<Option<StopMode>>,
}

impl Runner {
    pub async fn run(mut self, mut live: Live) {
        let id = self.spec.id.clone();
        let cfg = &self.shared.config;
        let _ticker = rotation_ticker(self.shared.clone(), id.clone());
        let policy = Policy {
            restart: self.spec.restart,
            max_restarts: self.spec.max_restarts,
            backoff: self.spec.backoff,
            max_backoff: cfg.max_backoff,
            stable_after: cfg.stable_after,
        };
        let mut consecutive = 0u32;
        loop {
            let outcome = tokio::select! {
                exit = live.wait_leader() => Outcome::Exited(exit),
                mode = stop_requested(&mut self.stop_rx) => Outcome::Stop(mode),
            };
            let exit = match outcome {
                Outcome::Stop(StopMode::Detach) => {
                    tracing::info!(agent = %id, pid = live.pid, "detached; child left running");
                    return;
                }
                Outcome::Stop(mode) => {
                    let exit = terminate(&mut live, mode, cfg.grace, &mut self.stop_rx).await;
                    record::remove_if_pid(&cfg.run_dir, &id, live.pid);
                    tracing::info!(agent = %id, pid = live.pid, exit = %exit.describe(), "agent stopped");
                    self.publish(|rt| mark_ended(rt, Status::Stopped, exit, None));
                    return;
                }
                Outcome::Exited(exit) => exit,
            };
            tracing::info!(agent = %id, pid = live.pid, exit = %exit.describe(), "agent exited");
            if procinfo::group_alive(live.pgid) {
                tracing::debug!(agent = %id, pgid = live.pgid, "leader exited; stopping the rest of its group");
                terminate(&mut live, StopMode::Term, cfg.grace, &mut self.stop_rx).await;
            }
            record::remove_if_pid(&cfg.run_dir, &id, live.pid);
            let requested = *self.stop_rx.borrow();
            match requested {
                Some(StopMode::Detach) => return,
                Some(_) => {
                    self.publish(|rt| mark_ended(rt, Status::Stopped, exit, None));
                    return;
                }
                None => {}
            }
            let ran_for = live.started.elapsed();
            let (delay, attempt) = match decide(&policy, exit, ran_for, &mut consecutive) {
                Decision::Stop => {
                    self.publish(|rt| mark_ended(rt, Status::Stopped, exit, None));
                    return;
                }
                Decision::Error(reason) => {
                    tracing::warn!(agent = %id, reason = %reason, "agent errored");
                    self.publish(|rt| mark_ended(rt, Status::Errored, exit, Some(reason)));
                    return;
                }
                Decision::Restart { delay, attempt } => (delay, attempt),
            };
            let reason = format!(
                "{}; restart {attempt} of {} in {}",
                exit.describe(),
                policy.max_restarts,
                humantime::format_duration(delay)
            );
            tracing::info!(agent = %id, reason = %reason, "agent in backoff");
            self.publish(|rt| {
                mark_ended(rt, Status::Backoff, exit, Some(reason));
                rt.restart_count = rt.restart_count.saturating_add(1);
            });
            let stopped = tokio::select! {
                () = tokio::time::sleep(delay) => None,
                mode = stop_requested(&mut self.stop_rx) => Some(mode),
            };
            match stopped {
                Some(StopMode::Detach) => return,
                Some(_) => {
                    self.publish(|rt| mark_ended(rt, Status::Stopped, exit, None));
                    return;
                }
                None => {}
            }
            self.publish(|rt| rt.status = Status::Starting);
            live = match spawn(&self.shared, &self.spec) {
                Ok(live) => live,
                Err(reason) => {
                    tracing::warn!(agent = %id, reason = %reason, "agent errored");
                    self.publish(|rt| mark_ended(rt, Status::Errored, exit, Some(reason)));
                    return;
                }
            };
            self.publish(|rt| live.mark_running(rt));
        }
    }

    fn publish(&self, change: impl FnOnce(&mut AgentRuntime)) {
        self.slot.publish(&self.shared, change);
    }
}
