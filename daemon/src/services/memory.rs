//! `memory.*`: the durable fact graph (`car-memory`), scoped per connection
//! (docs/protocol-choices.md, "Memory scope"; `skill.*` / `skills.*` are `services::skills`).
//!
//! A connection authenticated with `memory_namespace` uses that namespace's graph; one bound
//! to an agent uses the agent's graph; every other connection uses the daemon-wide shared
//! graph. The engine validates and persists (group commit: a mutation returns once it is on
//! disk); this module reads params with precise `-32602` errors and maps engine errors:
//! the caller's mistakes are `-32602`, I/O failures `-32603`.

use car_memory::{FactInput, FactKind, Scope};
use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::memory::{
    self as mm, AddFactParams, BuildContextParams, DeleteParams, DeleteReply, FactHit, PathParams,
    QueryParams,
};

use crate::handler::{Call, Routes};

/// The graph this connection reads and writes.
fn scope_of(call: &Call) -> Scope {
    call.session.identity().memory_scope()
}

pub fn register(routes: &mut Routes) {
    routes
        .add::<mm::AddFact, _, _>(add_fact)
        .add::<mm::Query, _, _>(query)
        .add::<mm::FactCount, _, _>(fact_count)
        .add::<mm::Delete, _, _>(delete)
        .add::<mm::Consolidate, _, _>(consolidate)
        .add::<mm::BuildContext, _, _>(build_context)
        .add::<mm::Persist, _, _>(persist)
        .add::<mm::Load, _, _>(load);
}

fn invalid(e: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(e)
}

/// `memory.add_fact` → the new fact count.
async fn add_fact(call: Call, p: AddFactParams) -> Result<u64, RpcError> {
    let kind = match p.kind {
        Some(k) => Some(k.parse::<FactKind>().map_err(invalid)?),
        None => None,
    };
    let input = FactInput {
        subject: p.subject,
        body: p.body,
        kind,
        confidence: p.confidence,
        fact_id: p.fact_id,
        tags: p.tags.unwrap_or_default(),
        source: p.source,
    };
    let fact = input.validate().map_err(invalid)?;
    let count = call
        .state
        .data
        .memory
        .add_fact(&scope_of(&call), fact)
        .await
        .map_err(RpcError::from)?;
    Ok(count as u64)
}

/// `memory.query` → facts ranked by relevance.
async fn query(call: Call, p: QueryParams) -> Result<Vec<FactHit>, RpcError> {
    let k = car_memory::fact::validate_k(p.k).map_err(invalid)?;
    let hits = call
        .state
        .data
        .memory
        .query(&scope_of(&call), &p.query, k)
        .await
        .map_err(RpcError::from)?;
    Ok(hits
        .into_iter()
        .map(|h| FactHit {
            fact_id: Some(h.fact_id),
            subject: h.subject,
            body: h.body,
            kind: h.kind.as_str().to_string(),
            confidence: h.confidence,
            tags: h.tags,
            source: Some(h.source.unwrap_or_default()),
        })
        .collect())
}

/// `memory.fact_count` → number.
async fn fact_count(call: Call, _: NoParams) -> Result<u64, RpcError> {
    let n = call
        .state
        .data
        .memory
        .fact_count(&scope_of(&call))
        .await
        .map_err(RpcError::from)?;
    Ok(n as u64)
}

/// `memory.delete {id}` → `{id, deleted, kind, fact_count}`; an unknown id is not an error.
async fn delete(call: Call, p: DeleteParams) -> Result<DeleteReply, RpcError> {
    let report = call
        .state
        .data
        .memory
        .delete(&scope_of(&call), &p.id)
        .await
        .map_err(RpcError::from)?;
    Ok(DeleteReply {
        id: report.id,
        deleted: report.deleted,
        kind: report.kind.map(|k| k.as_str().to_string()),
        fact_count: report.fact_count as u64,
    })
}

/// `memory.consolidate` → the consolidation report, with CAR's `candidates_promoted` /
/// `candidates_rejected` lists (this engine merges duplicates and promotes no candidates,
/// so both are empty).
async fn consolidate(call: Call, _: NoParams) -> Result<mm::ConsolidateReply, RpcError> {
    let report = call
        .state
        .data
        .memory
        .consolidate(&scope_of(&call))
        .await
        .map_err(RpcError::from)?;
    Ok(mm::ConsolidateReply {
        report,
        candidates_promoted: Vec::new(),
        candidates_rejected: Vec::new(),
    })
}

/// `memory.build_context` → the assembled context text (CAR's result is the string).
async fn build_context(call: Call, p: BuildContextParams) -> Result<String, RpcError> {
    let window = car_memory::validate_window(p.model_context_window).map_err(invalid)?;
    let block = call
        .state
        .data
        .memory
        .build_context(&scope_of(&call), &p.query.unwrap_or_default(), window)
        .await
        .map_err(RpcError::from)?;
    Ok(block.text)
}

/// `memory.persist {path}` → facts written.
async fn persist(call: Call, p: PathParams) -> Result<u64, RpcError> {
    let n = call
        .state
        .data
        .memory
        .persist(&scope_of(&call), &p.path)
        .await
        .map_err(RpcError::from)?;
    Ok(n as u64)
}

/// `memory.load {path}` → facts loaded.
async fn load(call: Call, p: PathParams) -> Result<u64, RpcError> {
    let n = call
        .state
        .data
        .memory
        .load(&scope_of(&call), &p.path)
        .await
        .map_err(RpcError::from)?;
    Ok(n as u64)
}
