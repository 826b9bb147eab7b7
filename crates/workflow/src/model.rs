//! The workflow manifest: CAR's serde shape as CAR's own engine reads it.
//!
//! Unknown fields are ignored everywhere; defaults follow CAR (`max_iterations` 100,
//! `edges` required but possibly empty). A step is internally tagged by `type`. Proposals
//! (CAR `ActionProposal`s) stay opaque JSON for the daemon's proposal engine, checked only
//! for an `actions` array. The model serializes back to the same shape, which is how a
//! paused run's checkpoint carries its workflow.

use car_proto::methods::multi::AgentSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::WorkflowError;

/// A JSON object.
pub type Object = serde_json::Map<String, Value>;

fn default_max_iterations() -> u32 {
    100
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub start: String,
    pub stages: Vec<Stage>,
    pub edges: Vec<Edge>,
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default)]
    pub metadata: Object,
}

impl Workflow {
    /// The stage with this id (the first, should ids repeat).
    pub fn stage(&self, id: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.id == id)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub id: String,
    pub name: String,
    pub step: StageStep,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<StageStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub metadata: Object,
}

/// What a stage does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StageStep {
    Pattern(PatternStep),
    Proposal(ProposalStep),
    SubWorkflow(SubWorkflowStep),
    Approval(ApprovalStep),
    LoopUntil(LoopUntilStep),
    ForEach(ForEachStep),
    Dedup(DedupStep),
    Deliver(DeliverStep),
}

impl StageStep {
    /// The `type` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            StageStep::Pattern(_) => "pattern",
            StageStep::Proposal(_) => "proposal",
            StageStep::SubWorkflow(_) => "sub_workflow",
            StageStep::Approval(_) => "approval",
            StageStep::LoopUntil(_) => "loop_until",
            StageStep::ForEach(_) => "for_each",
            StageStep::Dedup(_) => "dedup",
            StageStep::Deliver(_) => "deliver",
        }
    }
}

/// The multi-agent patterns a `pattern` step can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatternKind {
    SwarmParallel,
    SwarmSequential,
    SwarmDebate,
    Pipeline,
    Supervisor,
    Delegator,
    MapReduce,
    Vote,
    Fleet,
    AdversarialReview,
    Tournament,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatternStep {
    pub pattern: PatternKind,
    pub task: String,
    pub agents: Vec<AgentSpec>,
    #[serde(default)]
    pub config: Object,
}

/// A CAR `ActionProposal` (`{actions: [...], ...}`), kept as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct Proposal(Value);

impl Proposal {
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The `actions` array (always present).
    pub fn actions(&self) -> &[Value] {
        self.0
            .get("actions")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

impl TryFrom<Value> for Proposal {
    type Error = String;
    fn try_from(value: Value) -> Result<Self, String> {
        match value.get("actions") {
            Some(Value::Array(_)) => Ok(Proposal(value)),
            _ if !value.is_object() => Err("a proposal must be an object".into()),
            Some(_) => Err("proposal `actions` must be an array".into()),
            None => Err("missing field `actions` in proposal".into()),
        }
    }
}

impl From<Proposal> for Value {
    fn from(p: Proposal) -> Value {
        p.0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalStep {
    pub proposal: Proposal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubWorkflowStep {
    pub workflow: Box<Workflow>,
}

pub use car_proto::methods::workflow::ApprovalField;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalStep {
    pub prompt: String,
    #[serde(default)]
    pub fields: Vec<ApprovalField>,
    pub output_key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopUntilStep {
    pub body: Box<StageStep>,
    #[serde(default)]
    pub until: Vec<Precondition>,
    pub max_iterations: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForEachStep {
    pub items_from: String,
    pub body: Box<StageStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DedupStep {
    pub items_from: String,
    pub into: String,
    pub store: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_fields: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliverStep {
    pub sinks: Vec<Proposal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub conditions: Vec<Precondition>,
    #[serde(default)]
    pub label: String,
}

/// A condition on one state key. Without `op` it is `eq` when a `value` is given, else
/// `exists`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Precondition {
    pub key: String,
    #[serde(default, alias = "operator", skip_serializing_if = "Option::is_none")]
    pub op: Option<ConditionOp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionOp {
    Eq,
    Ne,
    Exists,
    NotExists,
    Gt,
    Gte,
    Lt,
    Lte,
    Contains,
}

/// Decode a manifest. Errors name the JSON path of the problem.
pub fn parse(value: &Value) -> Result<Workflow, WorkflowError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "workflow".into() } else { path };
        WorkflowError::invalid(path, e.into_inner().to_string())
    })
}
