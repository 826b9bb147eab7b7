//! The restart decision, as pure functions of the exit, the run's length and the
//! consecutive-restart counter (unit-tested without processes).
//!
//! * `never`: exit 0 → stopped; a non-zero exit or a signal → errored; an unknown exit (an adopted
//!   child: we are not its parent, so its status is lost) → stopped.
//! * `on_failure`: exit 0 → stopped; anything else, including an unknown exit, restarts.
//! * `always`: every exit restarts.
//!
//! Before a restart, a run that lasted at least `stable_after` resets the consecutive
//! counter; then the counter is incremented, and a counter above `max_restarts` means a
//! crash loop (→ errored). Restart k of a streak waits `min(backoff·2^(k-1), max_backoff)`.

use std::process::ExitStatus;
use std::time::Duration;

use crate::types::Restart;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// Neither code nor signal is known (adopted child).
    pub const UNKNOWN: ExitInfo = ExitInfo {
        code: None,
        signal: None,
    };

    pub fn from_status(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        ExitInfo {
            code: status.code(),
            signal: status.signal(),
        }
    }

    pub fn success(self) -> bool {
        self.code == Some(0)
    }

    fn unknown(self) -> bool {
        self.code.is_none() && self.signal.is_none()
    }

    /// "exited with status 3", "killed by signal 9 (SIGKILL)", "exited (status unknown …)".
    pub fn describe(self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => match signal_name(sig) {
                Some(name) => format!("killed by signal {sig} ({name})"),
                None => format!("killed by signal {sig}"),
            },
            (None, None) => "exited (status unknown: the process was adopted)".to_string(),
        }
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
    ];
    NAMES.iter().find(|(n, _)| *n == sig).map(|(_, name)| *name)
}

/// The restart knobs of one agent (its spec plus the supervisor's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub restart: Restart,
    pub max_restarts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub stable_after: Duration,
}

/// What to do after a run ended on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Stop,
    Error(String),
    /// Restart number `attempt` of the current streak, after `delay`.
    Restart {
        delay: Duration,
        attempt: u32,
    },
}

/// `min(backoff · 2^(k-1), max_backoff)` for restart `k` (1-based), without overflow.
pub(crate) fn backoff_delay(backoff: Duration, max_backoff: Duration, k: u32) -> Duration {
    let factor = 1u32.checked_shl(k.saturating_sub(1)).unwrap_or(u32::MAX);
    backoff.saturating_mul(factor).min(max_backoff)
}

/// Decides after `exit` of a run that lasted `ran_for`; updates `consecutive`.
pub(crate) fn decide(
    policy: &Policy,
    exit: ExitInfo,
    ran_for: Duration,
    consecutive: &mut u32,
) -> Decision {
    let restart = match policy.restart {
        Restart::Never => false,
        Restart::OnFailure => !exit.success(),
        Restart::Always => true,
    };
    if !restart {
        return if exit.success() || exit.unknown() {
            Decision::Stop
        } else {
            Decision::Error(exit.describe())
        };
    }
    if ran_for >= policy.stable_after {
        *consecutive = 0;
    }
    *consecutive = consecutive.saturating_add(1);
    if *consecutive > policy.max_restarts {
        let exits = *consecutive;
        return Decision::Error(format!(
            "crash loop: restart limit {} reached after {exits} consecutive exit{} without a run of {}; last {}",
            policy.max_restarts,
            if exits == 1 { "" } else { "s" },
            humantime::format_duration(policy.stable_after),
            exit.describe(),
        ));
    }
    Decision::Restart {
        delay: backoff_delay(policy.backoff, policy.max_backoff, *consecutive),
        attempt: *consecutive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy(restart: Restart, max_restarts: u32) -> Policy {
        Policy {
            restart,
            max_restarts,
            backoff: 100 * MS,
            max_backoff: 350 * MS,
            stable_after: 1000 * MS,
        }
    }

    const OK: ExitInfo = ExitInfo {
        code: Some(0),
        signal: None,
    };
    const FAIL: ExitInfo = ExitInfo {
        code: Some(3),
        signal: None,
    };
    const KILLED: ExitInfo = ExitInfo {
        code: None,
        signal: Some(9),
    };

    #[test]
    fn never_and_on_failure_outcomes() {
        let mut c = 0;
        let never = policy(Restart::Never, 5);
        assert_eq!(decide(&never, OK, MS, &mut c), Decision::Stop);
        assert_eq!(
            decide(&never, FAIL, MS, &mut c),
            Decision::Error("exited with status 3".into())
        );
        assert_eq!(
            decide(&never, KILLED, MS, &mut c),
            Decision::Error("killed by signal 9 (SIGKILL)".into())
        );
        assert_eq!(
            decide(&never, ExitInfo::UNKNOWN, MS, &mut c),
            Decision::Stop
        );
        let on_failure = policy(Restart::OnFailure, 5);
        assert_eq!(decide(&on_failure, OK, MS, &mut c), Decision::Stop);
        assert_eq!(c, 0);
        assert!(matches!(
            decide(&on_failure, ExitInfo::UNKNOWN, MS, &mut c),
            Decision::Restart { attempt: 1, .. }
        ));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_then_the_limit_errors() {
        let p = policy(Restart::Always, 4);
        let mut c = 0;
        let delays: Vec<Decision> = (0..4).map(|_| decide(&p, OK, MS, &mut c)).collect();
        let expect = |ms, attempt| Decision::Restart {
            delay: ms * MS,
            attempt,
        };
        assert_eq!(
            delays,
            [
                expect(100, 1),
                expect(200, 2),
                expect(350, 3),
                expect(350, 4)
            ]
        );
        let Decision::Error(reason) = decide(&p, FAIL, MS, &mut c) else {
            panic!("fifth restart must hit the limit");
        };
        assert_eq!(
            reason,
            "crash loop: restart limit 4 reached after 5 consecutive exits without a run of 1s; last exited with status 3"
        );
    }

    #[test]
    fn a_stable_run_resets_the_streak() {
        let p = policy(Restart::OnFailure, 1);
        let mut c = 0;
        assert!(matches!(
            decide(&p, FAIL, MS, &mut c),
            Decision::Restart { attempt: 1, .. }
        ));
        assert!(matches!(
            decide(&p, FAIL, 1000 * MS, &mut c),
            Decision::Restart { attempt: 1, .. }
        ));
        assert!(matches!(decide(&p, FAIL, MS, &mut c), Decision::Error(_)));
        let mut c = 0;
        assert!(matches!(
            decide(&policy(Restart::OnFailure, 0), KILLED, MS, &mut c),
            Decision::Error(r) if r.contains("restart limit 0") && r.contains("1 consecutive exit ")
        ));
    }

    #[test]
    fn huge_attempts_do_not_overflow() {
        assert_eq!(
            backoff_delay(Duration::from_secs(1), Duration::from_secs(60), 200),
            Duration::from_secs(60)
        );
        assert_eq!(backoff_delay(100 * MS, Duration::MAX, 1), 100 * MS);
    }
}
