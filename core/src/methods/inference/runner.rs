//! Delegated inference (reference `inference`, "Inference runner"): a model registered with
//! `source: {type: "delegated"}` is served by the session that called
//! `inference.register_runner`. For each `infer` / `infer_stream` of such a model the daemon
//! sends that session the notification `inference.runner.invoke {call_id, request}` (the
//! caller's `GenerateRequest`, its `client_ref` echoed) and waits for the runner's
//! `inference.runner.event` stream and its `complete` or `fail`. The runner owns the provider's
//! wire format; the daemon keeps the policy, metering and event path.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ToolCall;
use crate::methods::fields::{null_default, Json, NoParams};
use crate::methods::Access;
use crate::methods::{op, Declaration};

/// The notification that hands a call to the runner.
pub const INVOKE_METHOD: &str = "inference.runner.invoke";

/// One event of a runner's stream: CAR's exhaustive list (any other shape is refused).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunnerEvent {
    Text {
        data: String,
    },
    ToolStart {
        name: String,
        index: u32,
        #[serde(default)]
        id: Option<String>,
    },
    ToolDelta {
        index: u32,
        data: String,
    },
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        #[serde(default)]
        cache_read_input_tokens: Option<u64>,
        #[serde(default)]
        cache_creation_input_tokens: Option<u64>,
    },
    ProviderOutputItem {
        item: Json,
    },
    Error {
        message: String,
    },
    Done {
        text: String,
        #[serde(default, deserialize_with = "null_default")]
        tool_calls: Vec<ToolCall>,
    },
}

/// `inference.runner.event` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EventParams {
    pub call_id: String,
    pub event: RunnerEvent,
}

/// A runner's final answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RunnerResult {
    #[serde(default, deserialize_with = "null_default")]
    pub text: String,
    #[serde(default, deserialize_with = "null_default")]
    pub tool_calls: Vec<ToolCall>,
}

/// `inference.runner.complete` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CompleteParams {
    pub call_id: String,
    pub result: RunnerResult,
}

/// `inference.runner.fail` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct FailParams {
    pub call_id: String,
    pub error: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisteredReply {
    pub registered: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EmittedReply {
    pub emitted: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CompletedReply {
    pub completed: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct FailedReply {
    pub failed: bool,
}

crate::method!(
    /// `inference.register_runner` → `{registered: true}`.
    RegisterRunner = op("inference.register_runner", "make this session the runner of delegated models");
    access: Access::daemon().not_for_agents();
    NoParams => RegisteredReply
);
crate::method!(
    /// `inference.runner.event` → `{emitted: true}`.
    RunnerEventMethod = op("inference.runner.event", "stream one event of a delegated call this runner serves");
    access: Access::daemon();
    EventParams => EmittedReply
);
crate::method!(
    /// `inference.runner.complete` → `{completed: true}`.
    RunnerComplete = op("inference.runner.complete", "finish a delegated call this runner serves");
    access: Access::daemon();
    CompleteParams => CompletedReply
);
crate::method!(
    /// `inference.runner.fail` → `{failed: true}`.
    RunnerFail = op("inference.runner.fail", "fail a delegated call this runner serves");
    access: Access::daemon();
    FailParams => FailedReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<RegisterRunner>(),
    Declaration::of::<RunnerEventMethod>(),
    Declaration::of::<RunnerComplete>(),
    Declaration::of::<RunnerFail>(),
];
