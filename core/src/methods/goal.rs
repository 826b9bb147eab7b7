//! `goal.*`: standing completion contracts for chat sessions (reference `goal.set`,
//! `goal.status`, `goal.clear`, `goal.suggest`).
//!
//! A goal is a shell command (`check`) that exits 0 once a chat session's work is done,
//! with a pass budget (`max_iterations`, default 8, clamped to 1–50). `agents.chat` to an
//! attached agent forwards the session's standing goal when the turn names none, and the
//! goal's status follows the turn's `goal_evaluated`, `done` and `error` events. Goals are
//! kept in `$CAR_HOME/chat-goals.json` (rewritten atomically).
//!
//! Stricter than CAR: a goal belongs to the principal that set it; an agent session sees
//! and clears only its own, and `goal.suggest` takes no `working_dir` from an agent (it
//! would probe paths outside the agent's confinement).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{null_default, Name};
use super::{op, Declaration};
use crate::methods::{Access, Resource};

/// Passes a goal allows when none is given.
pub const DEFAULT_MAX_ITERATIONS: u32 = 8;
/// Passes a goal allows at most.
pub const MAX_ITERATIONS: u32 = 50;

/// `max_iterations` as stored: default 8, clamped to 1–50.
pub fn clamp_iterations(n: Option<u32>) -> u32 {
    n.unwrap_or(DEFAULT_MAX_ITERATIONS).clamp(1, MAX_ITERATIONS)
}

/// `{check, max_iterations?}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Contract {
    pub check: String,
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// `goal.set` params: `goal`, or `check` / `max_iterations` at the top level.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetParams {
    pub session_id: Name,
    #[serde(default)]
    pub goal: Option<Contract>,
    #[serde(default)]
    pub check: Option<String>,
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// CAR's `ChatGoalState`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ChatGoalState {
    pub session_id: String,
    pub check: String,
    pub max_iterations: u32,
    /// `active`, `running`, `met`, `failed` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_iteration: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_met: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_grounded: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_message: Option<String>,
    /// RFC 3339.
    pub updated_at: String,
    /// The agent that set it (none: the user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetReply {
    pub set: bool,
    pub goal: ChatGoalState,
}

/// `{session_id?}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SessionParams {
    #[serde(default)]
    pub session_id: Option<Name>,
}

/// `goal.status` result: one session's goal, or every visible goal.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum StatusReply {
    One {
        session_id: String,
        goal: Option<Box<ChatGoalState>>,
    },
    All {
        goals: Vec<ChatGoalState>,
    },
}

/// `goal.clear` result: whether one goal went, or how many.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ClearReply {
    One { cleared: bool, session_id: String },
    All { cleared: u64 },
}

/// `goal.suggest` params (`prompt` and `objective` are aliases; `working_dir` and `cwd`
/// too).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SuggestParams {
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub objective: Option<String>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub session_id: Option<Name>,
    #[serde(default, deserialize_with = "null_default")]
    pub set: bool,
}

/// `goal.suggest` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SuggestReply {
    pub suggested: bool,
    pub goal: Option<Contract>,
    /// `high`, `medium` or `none`.
    pub confidence: String,
    pub rationale: String,
    pub signals: Vec<String>,
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_goal: Option<ChatGoalState>,
}

crate::method!(
    /// `goal.set {session_id, goal | check, max_iterations?}` → `{set, goal}`.
    Set = op("goal.set", "store a standing completion check for a chat session");
    access: Access::owned(Resource::Goals);
    SetParams => SetReply
);
crate::method!(
    /// `goal.status {session_id?}` → one goal or all.
    Status = op("goal.status", "a chat session's standing goal and its last verdict, or every goal");
    access: Access::owned(Resource::Goals).observer();
    SessionParams => StatusReply
);
crate::method!(
    /// `goal.clear {session_id?}` → `{cleared}`.
    Clear = op("goal.clear", "remove one standing goal, or all");
    access: Access::owned(Resource::Goals);
    SessionParams => ClearReply
);
crate::method!(
    /// `goal.suggest {prompt | objective, working_dir?, session_id?, set?}` → a candidate.
    Suggest = op("goal.suggest", "propose a deterministic completion check for an objective");
    access: Access::owned(Resource::Goals);
    SuggestParams => SuggestReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Set>(),
    Declaration::of::<Status>(),
    Declaration::of::<Clear>(),
    Declaration::of::<Suggest>(),
];
