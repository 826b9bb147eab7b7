//! A declarative agent's goal check: `sh -c <check>` in the run's scratch workspace, as a
//! confined one-shot command (`car_supervisor::oneshot`).
//!
//! - Environment: the daemon's `PATH` and `HOME` only (as a stdio connector gets), nothing else of
//!   the daemon's (no tokens, no API keys).
//! - Confinement (Landlock, where the kernel has it): the state root and the credential directory
//!   are hidden, as from a supervised agent, except the scratch workspace itself.
//! - Bounds: [`CHECK_TIMEOUT`] (the whole process group is killed after it) and [`OUTPUT_CAP`]
//!   bytes kept of each output stream; the reason fed back to the agent is the last
//!   [`REASON_CHARS`] characters of what it printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use car_supervisor::oneshot::{self, OneShot};
use car_supervisor::Confinement;

use crate::state::ServerState;

/// How long one check may run.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(120);
/// Bytes of each output stream kept.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// Characters of output the verdict's reason carries.
pub const REASON_CHARS: usize = 2000;

/// One check's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub met: bool,
    pub exit_code: Option<i32>,
    pub reason: String,
}

fn tail(text: &str, chars: usize) -> String {
    let count = text.chars().count();
    text.chars().skip(count.saturating_sub(chars)).collect()
}

/// Runs `check` in `scratch` (see the module docs).
pub async fn run(state: &ServerState, check: &str, scratch: &Path) -> Verdict {
    let env: BTreeMap<String, String> = ["PATH", "HOME"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let job = OneShot {
        script: check.to_string(),
        cwd: scratch.to_path_buf(),
        env,
        confine: Some(Confinement {
            hidden: state.agents.lifecycle.hidden_paths(),
            exposed: vec![scratch.to_path_buf()],
        }),
        timeout: CHECK_TIMEOUT,
        output_cap: OUTPUT_CAP,
    };
    match oneshot::run(&job).await {
        Ok(done) if done.timed_out => Verdict {
            met: false,
            exit_code: None,
            reason: format!(
                "the check did not finish within {}s",
                CHECK_TIMEOUT.as_secs()
            ),
        },
        Ok(done) => {
            let met = done.exit_code == Some(0);
            let printed = format!("{}{}", done.stdout, done.stderr);
            let printed = tail(printed.trim(), REASON_CHARS);
            let reason = match (met, done.exit_code) {
                (true, _) => "the check passed (exit 0)".to_string(),
                (false, Some(code)) if printed.is_empty() => format!("the check exited {code}"),
                (false, Some(code)) => format!("the check exited {code}: {printed}"),
                (false, None) => "the check was killed by a signal".to_string(),
            };
            Verdict {
                met,
                exit_code: done.exit_code,
                reason,
            }
        }
        Err(e) => Verdict {
            met: false,
            exit_code: None,
            reason: format!("the check could not run: {e}"),
        },
    }
}
