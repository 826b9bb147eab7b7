//! How long the client waits for each call (docs/protocol-choices.md, "Reverse calls and
//! heartbeats", reference "handler deadline").
//!
//! This module owns the one rule that turns a method and its params into a [`Wait`]:
//!
//! - inference (`infer`, `infer_stream`): an idle window (default 60 s) reset by every
//!   `infer.progress {id}` and stream event for that call, never an absolute deadline;
//! - `proposal.submit`: the daemon's derived deadline + grace, where the derived deadline is the
//!   sum over actions of `timeout_ms` (default 300 s) × attempts (`max_retries + 1` for
//!   `failure_behavior: "retry"`, else 1) + 15 s, never below the handler deadline;
//! - everything else: the daemon's handler deadline (default 30 min) + 30 s grace, so the daemon's
//!   `-32004` always arrives before the client gives up (innermost reaps first).
//!
//! The idle window can be set from the environment: `CAR_INFER_IDLE_MS` (a positive
//! integer of milliseconds) replaces the 60 s default for every client built from the
//! environment, which is how the bindings (which all use `ClientConfig::from_env`) get it.
//! Pair it with the daemon's `CAR_INFER_PROGRESS_MS`: the window must be longer than the
//! daemon's heartbeat interval or long generations time out. A value that is not a positive
//! integer is ignored with a warning naming the variable, and the default applies.
//!
//! The deadline class comes from the method contract in `car-proto`, and the figures and
//! the proposal rule from `car_proto::deadline`, the same ones the daemon applies; a
//! method the contract does not declare falls back to its name for the two classes
//! docs/protocol-choices.md, "Reverse calls and heartbeats" names.

use std::time::Duration;

use car_proto::deadline;
use car_proto::methods::{self, DeadlineClass};
use serde_json::Value;

/// The daemon's default per-action tool budget when an action declares none.
pub const DEFAULT_ACTION_BUDGET: Duration = deadline::DEFAULT_ACTION_BUDGET;
/// The daemon's transport grace on top of a proposal's summed action budgets.
pub const PROPOSAL_DAEMON_GRACE: Duration = deadline::PROPOSAL_GRACE;

/// The knobs, with the reference's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutPolicy {
    /// Idle window for inference calls.
    pub infer_idle: Duration,
    /// The daemon's handler deadline (`CAR_HANDLER_TIMEOUT` on the daemon side).
    pub handler_deadline: Duration,
    /// What the client adds to the daemon's deadline before giving up.
    pub grace: Duration,
    /// Bound on each of `session.auth` and `server.handshake` while connecting.
    pub handshake: Duration,
    /// Bound on opening the socket and the WebSocket upgrade.
    pub connect: Duration,
}

impl Default for TimeoutPolicy {
    fn default() -> Self {
        Self {
            infer_idle: Duration::from_secs(60),
            handler_deadline: deadline::HANDLER_DEADLINE,
            grace: deadline::CLIENT_GRACE,
            handshake: Duration::from_secs(10),
            connect: Duration::from_secs(10),
        }
    }
}

impl TimeoutPolicy {
    /// The defaults, with `CAR_INFER_IDLE_MS` from `env` applied when it is valid.
    pub fn with_env(env: &crate::discovery::EnvSnapshot) -> Self {
        let mut policy = Self::default();
        if let Some(raw) = env.infer_idle_ms.as_deref() {
            match parse_positive_ms(raw) {
                Some(window) => policy.infer_idle = window,
                None => tracing::warn!(
                    value = raw,
                    default_ms = policy.infer_idle.as_millis() as u64,
                    "CAR_INFER_IDLE_MS is not a positive integer of milliseconds; using the default"
                ),
            }
        }
        policy
    }
}

/// `raw` as a positive number of milliseconds (surrounding whitespace allowed).
fn parse_positive_ms(raw: &str) -> Option<Duration> {
    match raw.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Some(Duration::from_millis(ms)),
        _ => None,
    }
}

/// How one call waits for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Give up this long after sending.
    Absolute(Duration),
    /// Give up after this long without an answer or a progress event for the call.
    Idle(Duration),
    /// Wait until the answer or the connection's end.
    Unbounded,
}

/// The deadline class of `method`.
pub fn class_of(method: &str) -> DeadlineClass {
    match methods::lookup(method) {
        Some(spec) => spec.spec.deadline,
        None => match method {
            "infer" | "infer_stream" => DeadlineClass::Inference,
            "proposal.submit" => DeadlineClass::Proposal,
            _ => DeadlineClass::Standard,
        },
    }
}

/// The wait for `method` called with `params` under `policy`.
pub fn wait_for(method: &str, params: &Value, policy: &TimeoutPolicy) -> Wait {
    match class_of(method) {
        DeadlineClass::Inference => Wait::Idle(policy.infer_idle),
        DeadlineClass::Proposal => {
            Wait::Absolute(proposal_deadline(params, policy.handler_deadline) + policy.grace)
        }
        // Immediate methods are answered inline by the daemon's reader; they still get the
        // standard bound so a wedged daemon cannot park a caller forever.
        DeadlineClass::Immediate | DeadlineClass::Standard => {
            Wait::Absolute(policy.handler_deadline + policy.grace)
        }
    }
}

/// The daemon's derived `proposal.submit` deadline: only ever raises `default`.
///
/// The proposal is read from `params.proposal` (an object, or a JSON string as the
/// bindings' `proposal_json` carries it) or from `params` itself; params with no parseable
/// proposal keep `default`. The rule is the daemon's own ([`car_proto::deadline`]).
pub fn proposal_deadline(params: &Value, default: Duration) -> Duration {
    deadline::proposal_deadline(params, DEFAULT_ACTION_BUDGET, default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIN: u64 = 60;

    #[test]
    fn standard_calls_get_the_handler_deadline_plus_grace() {
        let p = TimeoutPolicy::default();
        let want = Wait::Absolute(Duration::from_secs(30 * MIN + 30));
        assert_eq!(wait_for("server.schema", &json!({}), &p), want);
        assert_eq!(wait_for("not.in.table", &json!({}), &p), want);
        assert_eq!(wait_for("session.auth", &json!({}), &p), want);
        let short = TimeoutPolicy {
            handler_deadline: Duration::from_secs(5),
            grace: Duration::from_secs(1),
            ..p
        };
        assert_eq!(
            wait_for("debug.sleep", &json!({}), &short),
            Wait::Absolute(Duration::from_secs(6))
        );
    }

    #[test]
    fn inference_gets_an_idle_window() {
        let p = TimeoutPolicy {
            infer_idle: Duration::from_millis(250),
            ..TimeoutPolicy::default()
        };
        assert_eq!(
            wait_for("infer", &json!({}), &p),
            Wait::Idle(Duration::from_millis(250))
        );
        assert_eq!(
            wait_for("infer_stream", &json!({}), &p),
            Wait::Idle(Duration::from_millis(250))
        );
    }

    #[test]
    fn the_idle_window_comes_from_car_infer_idle_ms() {
        let mut env = crate::discovery::EnvSnapshot::with_car_home("/nonexistent");
        assert_eq!(TimeoutPolicy::with_env(&env), TimeoutPolicy::default());
        env.infer_idle_ms = Some(" 1500 ".into());
        let policy = TimeoutPolicy::with_env(&env);
        assert_eq!(policy.infer_idle, Duration::from_millis(1500));
        assert_eq!(
            TimeoutPolicy {
                infer_idle: TimeoutPolicy::default().infer_idle,
                ..policy
            },
            TimeoutPolicy::default(),
            "only the idle window changes"
        );
        for bad in ["0", "-5", "1.5", "ten", "", "99999999999999999999999"] {
            env.infer_idle_ms = Some(bad.into());
            assert_eq!(
                TimeoutPolicy::with_env(&env).infer_idle,
                Duration::from_secs(60),
                "{bad:?} falls back to the default"
            );
        }
    }

    #[test]
    fn short_proposals_keep_the_default() {
        let d = Duration::from_secs(30 * MIN);
        assert_eq!(proposal_deadline(&json!({}), d), d);
        assert_eq!(proposal_deadline(&json!({"proposal": "not json"}), d), d);
        let one = json!({"proposal": {"actions": [{"timeout_ms": 1000}]}});
        assert_eq!(proposal_deadline(&one, d), d);
        assert_eq!(
            wait_for("proposal.submit", &one, &TimeoutPolicy::default()),
            Wait::Absolute(d + Duration::from_secs(30))
        );
    }

    #[test]
    fn long_proposals_raise_the_deadline() {
        let d = Duration::from_secs(30 * MIN);
        // A retried ten-minute action: 600 s × 4 attempts + 15 s.
        let retried = json!({"proposal": {"actions": [
            {"timeout_ms": 600_000, "max_retries": 3, "failure_behavior": "retry"}
        ]}});
        assert_eq!(proposal_deadline(&retried, d), Duration::from_secs(2415));
        // max_retries is ignored unless the action retries.
        let aborting = json!({"actions": [
            {"timeout_ms": 600_000, "max_retries": 3, "failure_behavior": "abort"}
        ]});
        assert_eq!(
            proposal_deadline(&aborting, Duration::ZERO),
            Duration::from_secs(615)
        );
        // Actions without a budget count the default 300 s; the proposal may be a string.
        let chain = json!({"proposal": json!({"actions": vec![json!({}); 7]}).to_string()});
        assert_eq!(proposal_deadline(&chain, d), Duration::from_secs(2115));
        assert_eq!(
            wait_for("proposal.submit", &chain, &TimeoutPolicy::default()),
            Wait::Absolute(Duration::from_secs(2145))
        );
    }
}
