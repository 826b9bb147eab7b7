//! `replan.set_config`: the per-connection replan loop of `proposal.submit` (reference
//! `replan.set_config`; CAR's `set_replan_config`).
//!
//! With `max_replans > 0`, a proposal whose run stops on a failed action (with
//! `replan_on_rejected`, a rejected one too) is rolled back (its state writes undone, newest
//! first) and the submitting connection is asked for a new proposal through the reverse call
//! [`REPLAN_CALLBACK`] (`proposal.replan`), given the offending action's tool, error and
//! parameters. The answer `{proposal}` is analysed and run like a submitted one, after
//! `delay_ms`; `null` (or no proposal) gives up. The loop ends when a run does not stop,
//! when the replans are spent (event `replan.exhausted`), or when the connection cannot
//! replan (it answers the callback with an error; event `replan.unavailable`). The result is
//! the last run's, with `replans` counting the replanned runs. `0` (the default) turns the
//! loop off: a failure aborts as before.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::null_default;
use super::member::{member, opt, req, unit, ArgKind::*};
use super::{op, Declaration};
use crate::methods::Access;

/// The reverse call that asks the submitting connection for a new proposal.
pub const REPLAN_CALLBACK: &str = "proposal.replan";
/// Replans a connection may allow at most (a larger `max_replans` is refused).
pub const MAX_REPLANS: u32 = 32;
/// The longest `delay_ms` accepted.
pub const MAX_DELAY_MS: u64 = 60_000;

/// `replan.set_config` params (CAR's flat shape).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ReplanConfig {
    /// Replans after the first run; `0` disables the loop.
    pub max_replans: u32,
    /// Wait before each replanned run.
    #[serde(default, deserialize_with = "null_default")]
    pub delay_ms: u64,
    /// Analyse the replacement proposal before running it; one with structural errors
    /// counts as a spent replan (default `true`).
    #[serde(default)]
    pub verify_before_execute: Option<bool>,
    /// Rejections (policy, permission, validation) replan too, not only failures.
    #[serde(default, deserialize_with = "null_default")]
    pub replan_on_rejected: bool,
}

impl ReplanConfig {
    pub fn verify_first(&self) -> bool {
        self.verify_before_execute.unwrap_or(true)
    }
}

crate::method!(
    /// `replan.set_config {max_replans, delay_ms?, verify_before_execute?, replan_on_rejected?}` → `null`.
    SetConfig = op("replan.set_config", "configure this connection's replan loop for proposal.submit");
    access: Access::session();
    ReplanConfig => ();
    member("set_replan_config", &[req("max_replans", Int), opt("delay_ms", Int), opt("replan_on_rejected", Bool)], unit())
);

pub const DECLARATIONS: &[Declaration] = &[Declaration::of::<SetConfig>()];

/// The bounds a `ReplanConfig` must keep, as the `-32602` message naming the field.
pub fn check(config: &ReplanConfig) -> Result<(), String> {
    if config.max_replans > MAX_REPLANS {
        return Err(format!(
            "max_replans: at most {MAX_REPLANS}, got {}",
            config.max_replans
        ));
    }
    if config.delay_ms > MAX_DELAY_MS {
        return Err(format!(
            "delay_ms: at most {MAX_DELAY_MS}, got {}",
            config.delay_ms
        ));
    }
    Ok(())
}
