//! One confined, bounded command run to completion (a declarative agent's goal check).
//!
//! [`run`] starts `sh -c <script>` in `cwd` with exactly `env` (plus [`crate::DEFAULT_PATH`]
//! when it has no `PATH`), stdin closed, in a process group of its own, confined by
//! Landlock when a [`Confinement`] is given and the kernel supports it (as supervised
//! agents are). It keeps at most `output_cap` bytes of each of stdout and stderr (the rest
//! is read and dropped, so the child never blocks on a full pipe), and when `timeout`
//! passes it kills the whole group and reports `timed_out`. Dropping the future kills the
//! group too. Nothing here retries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::confine::Confinement;

/// What to run.
#[derive(Debug, Clone)]
pub struct OneShot {
    pub script: String,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub confine: Option<Confinement>,
    pub timeout: Duration,
    /// Bytes kept of each output stream.
    pub output_cap: usize,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The exit code (`None`: killed by a signal, or timed out).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Whether Landlock confined it.
    pub confined: bool,
}

/// Kills the process group when dropped (a timeout, or the caller gave up).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = crate::sys::signal_group(pgid, libc::SIGKILL);
        }
    }
}

async fn capped(mut from: impl AsyncRead + Unpin, cap: usize) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Runs `job` (see the module docs).
pub async fn run(job: &OneShot) -> Result<Finished, String> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&job.script)
        .current_dir(&job.cwd)
        .env_clear()
        .envs(&job.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if !job.env.contains_key("PATH") {
        cmd.env("PATH", crate::DEFAULT_PATH);
    }
    let confined = match &job.confine {
        Some(confinement) => crate::confine::confine_command(&mut cmd, confinement)?,
        None => false,
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start /bin/sh: {e}"))?;
    let guard = GroupGuard(child.id().and_then(|pid| i32::try_from(pid).ok()));
    let out = capped(child.stdout.take().expect("piped"), job.output_cap);
    let err = capped(child.stderr.take().expect("piped"), job.output_cap);
    let work = async {
        let (stdout, stderr, status) = tokio::join!(out, err, child.wait());
        (stdout, stderr, status)
    };
    match tokio::time::timeout(job.timeout, work).await {
        Ok((stdout, stderr, status)) => {
            let status = status.map_err(|e| format!("waiting for the command failed: {e}"))?;
            // The shell is gone; whatever it left in its group goes with the guard.
            drop(guard);
            Ok(Finished {
                exit_code: status.code(),
                stdout,
                stderr,
                timed_out: false,
                confined,
            })
        }
        Err(_) => {
            drop(guard);
            Ok(Finished {
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                timed_out: true,
                confined,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(script: &str, cwd: &std::path::Path) -> OneShot {
        OneShot {
            script: script.into(),
            cwd: cwd.to_path_buf(),
            env: BTreeMap::new(),
            confine: None,
            timeout: Duration::from_secs(20),
            output_cap: 16,
        }
    }

    #[tokio::test]
    async fn exit_codes_output_caps_and_a_clean_environment() {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("CAR_ONESHOT_SECRET", "leak");
        let ok = run(&job(
            "test -z \"$CAR_ONESHOT_SECRET\" && echo 0123456789abcdefXYZ",
            dir.path(),
        ))
        .await
        .unwrap();
        assert_eq!(
            (ok.exit_code, ok.stdout.as_str()),
            (Some(0), "0123456789abcdef")
        );
        let failed = run(&job("echo nope >&2; exit 3", dir.path()))
            .await
            .unwrap();
        assert_eq!(
            (failed.exit_code, failed.stderr.as_str()),
            (Some(3), "nope\n")
        );
        let big = run(&job("head -c 10000000 /dev/zero", dir.path()))
            .await
            .unwrap();
        assert_eq!((big.exit_code, big.stdout.len()), (Some(0), 16));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = job("sleep 30 & echo $! > bg.pid; wait", dir.path());
        j.timeout = Duration::from_millis(300);
        let done = run(&j).await.unwrap();
        assert!(done.timed_out && done.exit_code.is_none());
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep was in the group: it is gone (or a zombie reaped by init).
        let mut gone = false;
        for _ in 0..100 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "the group's background child survived the timeout");
    }

    #[tokio::test]
    async fn a_confined_command_cannot_read_hidden_paths() {
        let dir = tempfile::tempdir().unwrap();
        let hidden = dir.path().join("hidden");
        let work = dir.path().join("hidden/work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(hidden.join("secret"), "s3cret").unwrap();
        let mut j = job("cat ../secret; echo ok > mine; cat mine", &work);
        j.output_cap = 4096;
        j.confine = Some(Confinement {
            hidden: vec![hidden.clone()],
            exposed: vec![work.clone()],
        });
        let done = run(&j).await.unwrap();
        assert_eq!(done.confined, crate::confine::available());
        if done.confined {
            assert!(!done.stdout.contains("s3cret"), "{done:?}");
            assert_eq!(done.stdout, "ok\n");
        }
    }
}
