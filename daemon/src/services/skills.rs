//! `skill.*` and `skills.*`: the durable skill graph (`car-memory`), scoped per connection
//! like `memory.*` (docs/protocol-choices.md, "Memory scope"). The engine validates; a
//! caller's mistake is `-32602` naming the field, an I/O failure `-32603`.

use car_memory::{Outcome, SkillInput, SkillQuery};
use car_proto::errors::RpcError;
use car_proto::methods::skills::{self as ms, FindParams, IngestParams, ListParams, ReportParams};

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<ms::Ingest, _, _>(skill_ingest)
        .add::<ms::Find, _, _>(skill_find)
        .add::<ms::Report, _, _>(skill_report)
        .add::<ms::List, _, _>(skills_list);
}

fn scope_of(call: &Call) -> car_memory::Scope {
    call.session.identity().memory_scope()
}

/// `skill.ingest` → the skill's node id.
async fn skill_ingest(call: Call, p: IngestParams) -> Result<u64, RpcError> {
    let input = SkillInput {
        name: p.name,
        code: p.code,
        platform: p.platform.unwrap_or_default(),
        persona: p.persona.unwrap_or_default(),
        url_pattern: p.url_pattern.unwrap_or_default(),
        task_keywords: p.task_keywords.unwrap_or_default(),
        description: p.description.unwrap_or_default(),
        supersedes: p.supersedes,
    };
    let input = input.validate().map_err(RpcError::invalid_params)?;
    let id = call
        .state
        .data
        .memory
        .ingest_skill(&scope_of(&call), input)
        .await
        .map_err(RpcError::from)?;
    Ok(id as u64)
}

/// `skill.find` → scored matches, best first.
async fn skill_find(call: Call, p: FindParams) -> Result<Vec<ms::SkillMatch>, RpcError> {
    let query = SkillQuery {
        persona: p.persona,
        url: p.url,
        task: p.task,
        max_results: p.max_results,
    };
    call.state
        .data
        .memory
        .find_skills(&scope_of(&call), &query)
        .await
        .map_err(RpcError::from)
}

/// `skill.report {skill_name, outcome}` → the skill's updated stats.
async fn skill_report(call: Call, p: ReportParams) -> Result<ms::SkillStats, RpcError> {
    let outcome: Outcome = p.outcome.parse().map_err(RpcError::invalid_params)?;
    call.state
        .data
        .memory
        .report_outcome(&scope_of(&call), &p.skill_name, outcome)
        .await
        .map_err(RpcError::from)
}

/// `skills.list {domain?}` → skills.
async fn skills_list(call: Call, p: ListParams) -> Result<Vec<ms::Skill>, RpcError> {
    call.state
        .data
        .memory
        .list_skills(&scope_of(&call), p.domain.as_deref())
        .await
        .map_err(RpcError::from)
}
