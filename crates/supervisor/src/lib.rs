//! The process supervisor behind the daemon's `agents.start`/`stop`/`restart`/`wait`/
//! `tail_log`. The daemon owns the durable agent specs and tokens; it hands this crate a
//! [`LaunchSpec`] (with the agent's credentials already in `env`) and reads back an
//! [`AgentRuntime`]. Unix only.
//!
//! Owns: the supervised child processes, their pid records, restarts and rotated logs. Must not
//! touch: agent specs or tokens (the daemon owns them and hands over a `LaunchSpec`), or
//! JSON-RPC.
//!
//! # Design
//!
//! **One task per run.** `start` spawns (or adopts) the child itself, so a spawn failure
//! is returned to the caller, then hands it to a tokio task that waits for it, applies the
//! restart policy, sleeps the backoff and respawns. Stop requests reach that task through
//! a `watch` channel; the state it publishes goes into a per-agent `watch` channel (read
//! by [`Supervisor::status`] and [`Supervisor::wait`]) and a global `broadcast`
//! ([`Supervisor::subscribe`]). Operations on one agent are serialised by a per-agent
//! async lock.
//!
//! **Spawning.** Each child gets its own process group (`process_group(0)`, so its pgid is
//! its pid), stdin `/dev/null`, and stdout/stderr opened directly on
//! `<logs_dir>/agents/<id>/{stdout,stderr}.log` with `O_APPEND` (mode `0600`, directory
//! `0700`) — no pipes, so a child outlives the daemon and keeps logging. Its environment
//! is exactly `spec.env` (plus [`DEFAULT_PATH`] when it has no `PATH`): the daemon's own
//! environment, with its API keys and tokens, is never inherited; `cwd: None` inherits the daemon's
//! working directory. A spec's `confine` ([`Confinement`]) is applied with Landlock where the
//! kernel has it (module `confine`): the child cannot read or write the hidden paths (the daemon's
//! state root and credential directory) except the ones exposed to it (its own directory).
//! Status goes `starting` → `running`.
//!
//! **Pid records and adoption.** After a spawn, `<run_dir>/<id>.json` = `{pid, pgid,
//! starttime, command, started_at, started_unix_ms}` is written atomically (temp file +
//! rename, `0600`). `start` (and the adopt-only [`Supervisor::adopt`]) first looks for
//! that record: if its pid is alive, not a zombie, still the leader of its group, and (on
//! Linux) has the recorded `/proc/<pid>/stat` start time, the child is adopted
//! (`adopted: true`) rather than duplicated; otherwise the record is stale and removed.
//! An adopted child is not ours to `wait()` on: it is polled every 200 ms and its exit
//! status is unknown (`last_exit_code`/`last_signal` stay `None`).
//!
//! **Exits and restarts.** On an exit the pid record is removed, any processes left in
//! the child's group are stopped (SIGTERM, grace, SIGKILL — so a run's leftovers never
//! overlap the next run), and the policy decides: `never` → `stopped` on exit 0, else
//! `errored` ("exited with status N" / "killed by signal S (SIGNAME)"); `on_failure` →
//! restart unless exit 0; `always` → restart. An unknown (adopted) exit counts as a
//! failure for `on_failure` and as a clean exit for `never`. Before restart k of a streak
//! the agent is `backoff` for `min(backoff·2^(k-1), max_backoff)` and `restart_count`
//! grows; a run of at least `stable_after` first resets the streak; a streak beyond
//! `max_restarts` ends in `errored` ("crash loop: restart limit N reached …"). A spawn
//! failure (also on a restart) is `errored` at once with "spawn failed: …" — no retry.
//! A requested stop never restarts, and a stop during `backoff` cancels the restart.
//!
//! **Stopping.** `stop` SIGTERMs the process group, waits up to `grace`, then SIGKILLs it
//! (`kill: true`: SIGKILL at once; a `kill` stop also cuts short a `term` stop already
//! waiting). It returns once the leader is reaped and no live (non-zombie) process is left
//! in the group. Zombies count as gone: a group member whose parent never reaps it must not
//! hang a stop. The group id is never 0, 1 or the daemon's own group (`sys`).
//!
//! **Logs.** Copytruncate rotation (the child holds the fd): every second per running
//! agent, and before every `tail_log`, a stream file larger than `log_max_bytes` is copied
//! to `.1` (shifting `.1`→`.2`…, dropping beyond `log_keep`) and truncated to 0; `O_APPEND`
//! writers continue at the new end. Lines written between the copy and the truncate are
//! lost (accepted).
//!
//! **Tails** ([`Supervisor::tail_log`]) follow CAR: `n` lines per included stream (0: all
//! scanned lines), `offset` lines skipped back from the end first; each stream is read from
//! a backward window of at most 8 MiB ([`TAIL_SCAN_BYTES`]) whose partial first line
//! is dropped (and `more` forced) when the file is longer; `lines` is the stdout window
//! then the stderr window; `*_total` counts the lines in the scanned window; `more` says
//! older lines exist on an included stream. Only the current files are read, never the
//! rotated copies — so right after a rotation a tail can be short.
//!
//! **Shutdown.** [`Supervisor::shutdown`]`(true)` stops every child; `(false)` stops
//! supervising and leaves children running with their pid records for the next daemon.
//! A `Supervisor` dropped without `shutdown` keeps supervising from its tasks until the
//! tokio runtime ends (children are never killed on drop).
//!
//! # Beyond / different from the brief
//!
//! * [`Supervisor::adopt`] (adopt-only, never spawns), [`Supervisor::list`],
//!   [`Supervisor::recorded_ids`], [`Supervisor::config`] and [`LaunchSpec::new`] are extras. There
//!   is no `AlreadyRunning` error: `start` on a running agent is a no-op.
//! * Errors: `NotFound(id)`, `NoLogs {id, dir}` (tail of an id without a log directory),
//!   `InvalidSpec` (id not a file name, relative command), `Spawn {id, reason}`, `Io {..}`,
//!   `WaitTimeout {id, waited, status, targets}`, `ShutDown(id)`.
//! * `stop`/`forget` of an id this supervisor never started still stop a live recorded orphan;
//!   `NotFound` only when there is neither.
//! * `start` from `backoff` cancels the pending restart and starts immediately (with a fresh
//!   `restart_count`); a `start` on a running agent ignores the new spec (use `restart`). An
//!   adopted child whose recorded command differs from the spec is still adopted (warning logged).
//! * `LaunchSpec`'s `Debug` prints env keys only (the token lives there).
#![cfg(unix)]

pub mod confine;
mod logs;
pub mod oneshot;
mod policy;
mod procinfo;
mod record;
mod runner;
mod slot;
mod supervisor;
mod sys;
mod types;

pub use confine::Confinement;
pub use logs::TAIL_SCAN_BYTES;

/// The `PATH` a child gets when its `LaunchSpec::env` has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
pub use supervisor::Supervisor;
pub use types::{
    AgentRuntime, LaunchSpec, LogStream, Restart, Status, SupervisorConfig, SupervisorError,
    TailLog,
};
