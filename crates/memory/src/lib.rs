//! `car-memory`: the durable memory engine behind the daemon's `memory.*`, `skill.*` and
//! `skills.*` methods.
//!
//! - [`fact`]: the fact record, its kinds and the validated input for adding one;
//! - [`graph`]: one scope's facts and skills in memory, and the fact operations (`fact_table`: the
//!   facts by id with the term → fact inverted index);
//! - [`text`] and [`ranking`]: normalisation, stemming and the BM25 (+ embedding) score;
//! - [`embed`]: the [`Embedder`] seam and the fact-vector cache;
//! - [`consolidate`]: merging duplicate facts;
//! - [`context`]: the layered, budgeted `build_context` block;
//! - [`skills`] and [`skill_find`]: procedural memory (ingest, outcomes, listing; matching);
//! - [`proactive`], [`intervene`] and [`evaluate`]: proactive memory (status slots, knowledge and
//!   procedural entries; the intervention selector; its offline evaluation);
//! - [`snapshot`]: the versioned file format and atomic writes; `snapshot_size`: its exact length
//!   kept incrementally;
//! - [`journal`]: the append-only log of changes between snapshots (`changes`: what a flush must
//!   append);
//! - file opening, capped reads and atomic writes: `car_proto::safe_file` (shared by every crate);
//! - [`confine`]: the path rule for `memory.persist` / `memory.load`;
//! - [`store`]: per-scope graphs, lazy loading and group-committed durability (snapshot + journal).
//!
//! It must not touch sockets or JSON-RPC: the daemon parses parameters into these types,
//! maps [`MemoryError::is_invalid_params`] to `-32602` / `-32603`, and serialises results.

mod changes;
pub mod confine;
pub mod consolidate;
pub mod context;
pub mod embed;
pub mod error;
pub mod evaluate;
pub mod fact;
mod fact_table;
mod flush;
pub mod graph;
pub mod intervene;
pub mod journal;
pub mod proactive;
pub mod ranking;
pub mod skill_find;
pub mod skills;
pub mod snapshot;
mod snapshot_size;
pub mod store;
pub mod text;

pub use consolidate::{ConsolidationReport, MergeReason, MergedGroup, NEAR_DUPLICATE_JACCARD};
pub use context::{validate_window, ContextBlock, LayerCounts, DEFAULT_CONTEXT_WINDOW};
pub use embed::{Embedder, Embeddings, SemanticQuery};
pub use error::{ConfineError, MemoryError, ValidationError};
pub use evaluate::{EvalCase, Evaluation, ModeScore};
pub use fact::{
    validate_k, validate_query, Fact, FactHit, FactInput, FactKind, NewFact, DEFAULT_K, MAX_K,
};
pub use graph::{DeleteReport, Graph};
pub use intervene::{
    Bank, Candidate, Decision, Intervention, Request, RequestInput, SilentReason, Trigger,
};
pub use proactive::{DeletedKind, ProactiveMeta, SaveInput, SaveReport, Status, ValidSave};
pub use skill_find::{SkillMatch, SkillQuery};
pub use skills::{is_degraded, Outcome, OutcomeReport, Skill, SkillInput, SkillStats};
pub use store::{FlushStats, MemoryStore, Scope};
