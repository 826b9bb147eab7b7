//! Proactive memory (`memory.update_status`, `memory.save_knowledge`,
//! `memory.save_procedural`, `memory.intervene`, `memory.evaluate`): CAR's execution-state
//! memory for long-horizon runs, in the same scoped graphs as `memory.*`.
//!
//! Shapes are the reference's (method reference, "memory.update_status" … "memory.evaluate").
//! Where it names a field without a shape (`selected`, `bank`, `candidates`), the choice is
//! documented on the field here and in docs/protocol-choices.md ("Proactive memory").

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::member::{json, member, whole};
use super::{agent, op, Declaration};

/// `memory.update_status` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UpdateStatusParams {
    pub body: String,
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// `memory.update_status` result: the private status slot (`id` is
/// `proactive-status:<tenant or "global">`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StatusReply {
    pub id: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// `memory.save_knowledge` / `memory.save_procedural` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SaveParams {
    /// A repeated id is not overwritten: the entry is saved as `<id>-2`, `<id>-3`, …
    #[serde(default)]
    pub id: Option<String>,
    pub subject: String,
    pub body: String,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Free text (`high`, `verified`, …), kept on the entry.
    #[serde(default)]
    pub confidence: Option<String>,
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub is_constraint: Option<bool>,
}

/// `memory.save_knowledge` / `memory.save_procedural` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SaveReply {
    pub id: String,
    /// `knowledge` or `procedural`.
    pub kind: String,
    pub fact_count: u64,
}

/// The runtime pressure signals of a `memory.intervene` request.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct Trigger {
    #[serde(default)]
    pub repeated_failures: Option<u32>,
    #[serde(default)]
    pub tool_error: Option<bool>,
    #[serde(default)]
    pub explicit_uncertainty: Option<bool>,
    #[serde(default)]
    pub high_risk_action: Option<bool>,
    #[serde(default)]
    pub context_shift: Option<bool>,
}

/// `memory.intervene` params (CAR's `ProactiveMemoryRequest`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct InterveneParams {
    #[serde(default)]
    pub query: Option<String>,
    /// Recent actions or observations, newest last.
    #[serde(default)]
    pub recent: Option<Vec<String>>,
    #[serde(default)]
    pub trigger: Option<Trigger>,
    /// Inject the best candidate even when the selector would stay silent (ablations).
    #[serde(default)]
    pub force: Option<bool>,
    /// Candidates considered, 1–32 (default 8).
    #[serde(default)]
    pub max_candidates: Option<i64>,
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// The entry a `memory.intervene` decision selected.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Selected {
    pub id: String,
    pub subject: String,
    pub body: String,
    /// `knowledge`, `procedural`, `pattern` or `constraint`.
    pub kind: String,
    /// The selector's score for it.
    pub score: f64,
}

/// What the memory bank held when the selector ran.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct Bank {
    pub facts: u64,
    pub knowledge: u64,
    pub procedural: u64,
}

/// `memory.intervene` result: `decision` is `inject` (with `reminder` and `selected`) or
/// `silent` (with `reason`); `candidates` is how many entries were scored.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InterveneReply {
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<Selected>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub candidates: u64,
    pub bank: Bank,
}

/// One labelled `memory.evaluate` case.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvalCase {
    pub id: String,
    pub request: InterveneParams,
    /// The facts a good reminder for this case would be; empty: silence is right.
    #[serde(default)]
    pub relevant_fact_ids: Option<Vec<String>>,
}

/// `memory.evaluate` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateParams {
    pub cases: Vec<EvalCase>,
}

/// One mode's scores in `memory.evaluate`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ModeScore {
    pub interventions: u64,
    pub true_positives: u64,
    pub false_positives: u64,
    pub false_negatives: u64,
    pub precision: f64,
    pub recall: f64,
    pub interruption_rate: f64,
    pub avg_candidates_exposed: f64,
}

/// `memory.evaluate` result (`cases`: how many were run).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateReply {
    pub cases: u64,
    pub selective: ModeScore,
    pub always_inject: ModeScore,
    pub passive_retrieval: ModeScore,
    pub no_memory: ModeScore,
}

crate::method!(
    /// `memory.update_status` → the status slot.
    UpdateStatus = agent("memory.update_status", "set the proactive memory agent's private progress/risk status (not a graph fact)");
    access: Access::owned(Resource::Memory);
    UpdateStatusParams => StatusReply;
    member("memory_update_status", &[whole("params_json")], json())
);
crate::method!(
    /// `memory.save_knowledge` → `{id, kind: "knowledge", fact_count}`.
    SaveKnowledge = agent("memory.save_knowledge", "save durable execution-state knowledge (requirements, verified facts, policies)");
    access: Access::owned(Resource::Memory);
    SaveParams => SaveReply;
    member("memory_save_knowledge", &[whole("params_json")], json())
);
crate::method!(
    /// `memory.save_procedural` → `{id, kind: "procedural", fact_count}`.
    SaveProcedural = agent("memory.save_procedural", "save durable procedural evidence (failed attempts, fixes, gotchas)");
    access: Access::owned(Resource::Memory);
    SaveParams => SaveReply;
    member("memory_save_procedural", &[whole("params_json")], json())
);
crate::method!(
    /// `memory.intervene` → an inject or silent decision.
    Intervene = op("memory.intervene", "select at most one proactive reminder for the next action, or decide to stay silent");
    access: Access::owned(Resource::Memory);
    InterveneParams => InterveneReply;
    member("memory_intervene", &[whole("params_json")], json())
);
crate::method!(
    /// `memory.evaluate` → the selector against its baselines on labelled cases.
    Evaluate = op("memory.evaluate", "score the proactive selector against always-inject, passive-retrieval and no-memory baselines");
    access: Access::owned(Resource::Memory);
    EvaluateParams => EvaluateReply;
    member("memory_evaluate", &[whole("params_json")], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<UpdateStatus>(),
    Declaration::of::<SaveKnowledge>(),
    Declaration::of::<SaveProcedural>(),
    Declaration::of::<Intervene>(),
    Declaration::of::<Evaluate>(),
];
