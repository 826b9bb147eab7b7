//! `memory.*`, `skill.*` and `skills.*`: the durable fact and skill graphs
//! (`car-memory`), scoped per connection (DECISIONS 20).
//!
//! A connection authenticated with `memory_namespace` uses that namespace's graph; one bound
//! to an agent uses the agent's graph; every other connection uses the daemon-wide shared
//! graph. The engine validates and persists (group commit: a mutation returns once it is on
//! disk); this module reads params with precise `-32602` errors and maps engine errors:
//! the caller's mistakes are `-32602`, I/O failures `-32603`.

use car_memory::{FactInput, FactKind, MemoryError, Outcome, Scope, SkillInput, SkillQuery};
use car_proto::errors::RpcError;
use car_proto::jsonrpc::json_type;
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};

/// The graph this connection reads and writes.
pub fn scope_of(call: &Call) -> Scope {
    let identity = call.session.identity();
    match (identity.memory_namespace, identity.agent_id) {
        (Some(ns), _) => Scope::Namespace(ns),
        (None, Some(agent)) => Scope::Agent(agent),
        (None, None) => Scope::Shared,
    }
}

fn engine_error(e: MemoryError) -> RpcError {
    if e.is_invalid_params() {
        RpcError::invalid_params(e)
    } else {
        tracing::error!(error = %e, "memory engine failure");
        RpcError::internal(format!("memory: {e}"))
    }
}

fn to_json<T: serde::Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v)
        .map_err(|e| RpcError::internal(format!("encoding a memory result: {e}")))
}

/// An optional integer (any sign, so the engine can name out-of-range values itself).
fn opt_i64(p: &Params, field: &str) -> Result<Option<i64>, RpcError> {
    match p.value(field) {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            RpcError::invalid_params(format!("{field} must be an integer, got {v}"))
        }),
    }
}

fn required_text(p: &Params, field: &str) -> Result<String, RpcError> {
    p.opt_text(field)?
        .ok_or_else(|| RpcError::invalid_params(format!("{field} is required")))
}

/// `memory.add_fact {subject, body, kind?, confidence?, fact_id?, tags?, source?}` → new count.
pub fn add_fact(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&[
            "subject",
            "body",
            "kind",
            "confidence",
            "fact_id",
            "tags",
            "source",
        ])?;
        let kind = match p.opt_text("kind")? {
            Some(k) => Some(k.parse::<FactKind>().map_err(RpcError::invalid_params)?),
            None => None,
        };
        let confidence = match p.value("confidence") {
            None => None,
            Some(Value::Number(n)) => n.as_f64(),
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "confidence must be a number, got {}",
                    json_type(other)
                )))
            }
        };
        let input = FactInput {
            subject: required_text(&p, "subject")?,
            body: required_text(&p, "body")?,
            kind,
            confidence,
            fact_id: p.opt_str("fact_id")?,
            tags: p.opt_str_list("tags")?.unwrap_or_default(),
            source: p.opt_text("source")?,
        };
        let fact = input.validate().map_err(RpcError::invalid_params)?;
        let count = call
            .state
            .memory
            .add_fact(&scope_of(&call), fact)
            .await
            .map_err(engine_error)?;
        Ok(json!(count))
    })
}

/// `memory.query {query, k?}` → ranked hits.
pub fn query(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["query", "k"])?;
        let query = required_text(&p, "query")?;
        let k =
            car_memory::fact::validate_k(opt_i64(&p, "k")?).map_err(RpcError::invalid_params)?;
        to_json(
            call.state
                .memory
                .query(&scope_of(&call), &query, k)
                .await
                .map_err(engine_error)?,
        )
    })
}

/// `memory.fact_count` → the number of facts in this connection's graph.
pub fn fact_count(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        Ok(json!(call
            .state
            .memory
            .fact_count(&scope_of(&call))
            .await
            .map_err(engine_error)?))
    })
}

/// `memory.delete {fact_id}` → `{deleted, count}`.
pub fn delete(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let id = Params::new(params)?.only(&["fact_id"])?.str("fact_id")?;
        let count = call
            .state
            .memory
            .delete(&scope_of(&call), &id)
            .await
            .map_err(engine_error)?;
        Ok(json!({"deleted": id, "count": count}))
    })
}

/// `memory.consolidate` → what was merged.
pub fn consolidate(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        to_json(
            call.state
                .memory
                .consolidate(&scope_of(&call))
                .await
                .map_err(engine_error)?,
        )
    })
}

/// `memory.build_context {query, model_context_window?}` → `{context, budget_tokens, …}`.
pub fn build_context(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["query", "model_context_window"])?;
        let query = p.opt_text("query")?.unwrap_or_default();
        let window = car_memory::validate_window(opt_i64(&p, "model_context_window")?)
            .map_err(RpcError::invalid_params)?;
        let block = call
            .state
            .memory
            .build_context(&scope_of(&call), &query, window)
            .await
            .map_err(engine_error)?;
        let mut v = to_json(block)?;
        if let Some(obj) = v.as_object_mut() {
            if let Some(text) = obj.remove("text") {
                obj.insert("context".into(), text);
            }
        }
        Ok(v)
    })
}

/// `memory.persist {path}` → facts written (the path is confined to `CAR_HOME/memory`).
pub fn persist(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let path = Params::new(params)?.only(&["path"])?.str("path")?;
        Ok(json!(call
            .state
            .memory
            .persist(&scope_of(&call), &path)
            .await
            .map_err(engine_error)?))
    })
}

/// `memory.load {path}` → facts loaded; replaces this connection's graph.
pub fn load(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let path = Params::new(params)?.only(&["path"])?.str("path")?;
        Ok(json!(call
            .state
            .memory
            .load(&scope_of(&call), &path)
            .await
            .map_err(engine_error)?))
    })
}

/// `skill.ingest {name, code, platform, persona, url_pattern, task_keywords, description, supersedes?}` → skill count.
pub fn skill_ingest(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&[
            "name",
            "code",
            "platform",
            "persona",
            "url_pattern",
            "task_keywords",
            "description",
            "supersedes",
        ])?;
        let input = SkillInput {
            name: required_text(&p, "name")?,
            code: required_text(&p, "code")?,
            platform: p.opt_text("platform")?.unwrap_or_default(),
            persona: p.opt_text("persona")?.unwrap_or_default(),
            url_pattern: p.opt_text("url_pattern")?.unwrap_or_default(),
            task_keywords: p.opt_str_list("task_keywords")?.unwrap_or_default(),
            description: p.opt_text("description")?.unwrap_or_default(),
            supersedes: p.opt_str("supersedes")?,
        };
        let input = input.validate().map_err(RpcError::invalid_params)?;
        Ok(json!(call
            .state
            .memory
            .ingest_skill(&scope_of(&call), input)
            .await
            .map_err(engine_error)?))
    })
}

/// `skill.find {persona?, url?, task?, max_results?}` → matches, best first (`[]` when none).
pub fn skill_find(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["persona", "url", "task", "max_results"])?;
        let query = SkillQuery {
            persona: p.opt_text("persona")?,
            url: p.opt_text("url")?,
            task: p.opt_text("task")?,
            max_results: opt_i64(&p, "max_results")?,
        };
        to_json(
            call.state
                .memory
                .find_skills(&scope_of(&call), &query)
                .await
                .map_err(engine_error)?,
        )
    })
}

/// `skill.report {name, outcome: success|fail}` → `{success_count, fail_count, degraded}`.
pub fn skill_report(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["name", "outcome"])?;
        let name = p.str("name")?;
        let outcome: Outcome = p
            .str("outcome")?
            .parse()
            .map_err(RpcError::invalid_params)?;
        to_json(
            call.state
                .memory
                .report_outcome(&scope_of(&call), &name, outcome)
                .await
                .map_err(engine_error)?,
        )
    })
}

/// `skills.list {domain?}` → skills, optionally those whose URL pattern is on `domain`.
pub fn skills_list(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let domain = Params::new(params)?.only(&["domain"])?.opt_str("domain")?;
        to_json(
            call.state
                .memory
                .list_skills(&scope_of(&call), domain.as_deref())
                .await
                .map_err(engine_error)?,
        )
    })
}
