//! `debug.*`: methods that exist only on a daemon started with `--debug-methods`, so test
//! suites can drive deadlines, slow handlers, reverse calls and notifications through a
//! real daemon. Never advertised otherwise, and never given binding members.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::Json;
use super::{op, Declaration};

/// `debug.sleep` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SleepParams {
    pub ms: u64,
}

/// `debug.sleep` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SleepReply {
    pub slept_ms: u64,
}

/// `debug.call_client` / `debug.notify_client` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ClientCallParams {
    pub method: String,
    #[serde(default)]
    pub params: Json,
    /// For `debug.call_client`: how long to wait for the answer (default 30 s).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

crate::method!(
    /// `debug.echo` → the params unchanged.
    Echo = op("debug.echo", "return the params unchanged").debug();
    access: Access::daemon();
    Json => Json
);
crate::method!(
    /// `debug.sleep` → `{slept_ms}`.
    Sleep = op("debug.sleep", "wait for params.ms milliseconds, then return {slept_ms}").debug();
    access: Access::daemon();
    SleepParams => SleepReply
);
crate::method!(
    /// `debug.call_client` → the client's answer.
    CallClient = op("debug.call_client", "send a reverse call to this connection's client and return its answer").debug();
    access: Access::daemon();
    ClientCallParams => Json
);
crate::method!(
    /// `debug.notify_client` → `{sent: true}`.
    NotifyClient = op("debug.notify_client", "send a notification to this connection's client").debug();
    access: Access::daemon();
    ClientCallParams => Json
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Echo>(),
    Declaration::of::<Sleep>(),
    Declaration::of::<CallClient>(),
    Declaration::of::<NotifyClient>(),
];
