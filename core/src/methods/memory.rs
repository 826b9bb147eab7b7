//! `memory.*`: the connection's fact graph (scoped by namespace, agent or shared).

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, NoParams};
use super::member::{int, json, member, opt, req, text, ArgKind::*};
use super::{agent, op, Declaration};

/// `memory.add_fact` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AddFactParams {
    pub subject: String,
    pub body: String,
    /// `pattern` when absent; `constraint` marks a hard rule.
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub confidence: Option<f64>,
    #[serde(default)]
    pub fact_id: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub source: Option<String>,
}

/// `memory.query` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct QueryParams {
    pub query: String,
    /// How many facts (default 5).
    #[serde(default)]
    pub k: Option<i64>,
}

/// One `memory.query` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct FactHit {
    pub fact_id: Option<String>,
    pub subject: String,
    pub body: String,
    pub kind: String,
    /// Relevance to the query in [0, 1].
    pub confidence: f64,
    pub tags: Vec<String>,
    pub source: Option<String>,
}

/// `memory.build_context` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct BuildContextParams {
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub model_context_window: Option<i64>,
}

/// `memory.delete` params (`fact_id` is accepted for `id`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeleteParams {
    #[serde(alias = "fact_id")]
    pub id: String,
}

/// `memory.delete` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeleteReply {
    pub id: String,
    pub deleted: bool,
    /// The deleted fact's kind; `null` when nothing matched.
    pub kind: Option<String>,
    pub fact_count: u64,
}

/// `{path}` for `memory.persist` / `memory.load` (under `CAR_HOME/memory`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PathParams {
    pub path: String,
}

/// Why a group was merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MergeReason {
    /// Every member had the same normalised subject and body.
    Exact,
    /// At least one member was only a near-duplicate.
    Near,
}

/// One merged group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MergedGroup {
    /// The surviving fact id.
    pub kept: String,
    /// The ids merged into it (and so removed), oldest first.
    pub removed: Vec<String>,
    /// Exact or near.
    pub reason: MergeReason,
    /// The lowest Jaccard similarity between the survivor's text and a removed member's.
    pub similarity: f64,
}

/// What `consolidate` did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConsolidationReport {
    /// The groups merged, by surviving id.
    pub merged: Vec<MergedGroup>,
    /// How many facts were removed in total.
    pub removed_count: usize,
    /// Facts left afterwards.
    pub fact_count: usize,
}

/// `memory.consolidate` result: what merged, and CAR's promotion-gate lists (always empty
/// here: this daemon has no promotion gate yet).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ConsolidateReply {
    #[serde(flatten)]
    pub report: ConsolidationReport,
    pub candidates_promoted: Vec<Json>,
    pub candidates_rejected: Vec<Json>,
}

crate::method!(
    /// `memory.add_fact` → the new fact count.
    AddFact = agent("memory.add_fact", "add a fact to this connection's memory graph; returns the new count");
    access: Access::owned(Resource::Memory);
    AddFactParams => u64;
    member("add_fact", &[req("subject", Str), req("body", Str), req("kind", Str), opt("confidence", Float), opt("fact_id", Str), opt("tags", StrList), opt("source", Str)], int())
);
crate::method!(
    /// `memory.query` → ranked facts.
    Query = op("memory.query", "facts ranked by relevance to a query");
    access: Access::owned(Resource::Memory);
    QueryParams => Vec<FactHit>;
    member("query_facts", &[req("query", Str), opt("k", Int)], json())
);
crate::method!(
    /// `memory.fact_count` → number.
    FactCount = op("memory.fact_count", "the number of facts in this connection's memory graph");
    access: Access::owned(Resource::Memory);
    NoParams => u64;
    member("fact_count", &[], int())
);
crate::method!(
    /// `memory.build_context` → the assembled context string.
    BuildContext = op("memory.build_context", "a layered context block (constraints, relevant facts, unknowns) within a token budget");
    access: Access::owned(Resource::Memory);
    BuildContextParams => String;
    member("build_context", &[req("query", Str), opt("model_context_window", Int)], text())
);
crate::method!(
    /// `memory.consolidate` → the consolidation report.
    Consolidate = agent("memory.consolidate", "merge duplicate facts and report what merged");
    access: Access::owned(Resource::Memory);
    NoParams => ConsolidateReply;
    member("consolidate", &[], json())
);
crate::method!(
    /// `memory.delete` → `{id, deleted, kind, fact_count}`.
    Delete = agent("memory.delete", "delete a fact by id");
    access: Access::owned(Resource::Memory);
    DeleteParams => DeleteReply
);
crate::method!(
    /// `memory.persist` → facts written.
    Persist = op("memory.persist", "write the memory graph to a snapshot under CAR_HOME/memory");
    access: Access::owned(Resource::Memory);
    PathParams => u64;
    member("persist_memory", &[req("path", Str)], int())
);
crate::method!(
    /// `memory.load` → facts loaded.
    Load = op("memory.load", "replace the memory graph with a snapshot under CAR_HOME/memory");
    access: Access::owned(Resource::Memory);
    PathParams => u64;
    member("load_memory", &[req("path", Str)], int())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<AddFact>(),
    Declaration::of::<Query>(),
    Declaration::of::<FactCount>(),
    Declaration::of::<BuildContext>(),
    Declaration::of::<Consolidate>(),
    Declaration::of::<Delete>(),
    Declaration::of::<Persist>(),
    Declaration::of::<Load>(),
];
