//! `declagents.*` and `discovery.*` (the contract: `car_proto::methods::declagents`; the
//! data: `car_declagents`; running an agent and ranking:
//! `crate::handler::declarative`).
//!
//! - `register` / `remove` / `set_enabled` / `revert` are host methods (a spec runs with whoever
//!   invokes it, so who may plant one is the host's call); each change is written before it is
//!   answered.
//! - `route`: the eligible agents are the enabled ones, minus `from` and `visited`; a path that
//!   already holds [`MAX_HOPS`] agents is refused. The top 3 are answered; with `invoke` the top
//!   one runs on `need` and, with `from`, the `from → chosen` edge learns its outcome.
//! - `run_scenarios`: each scenario is one invocation; it passes when the run ends without error
//!   and its answer contains `expect` (case-insensitive). Scenario runs do not teach routing.
//! - `discovery.resolve` ranks the enabled declarative agents (`agentdns://local/agent/<id>`) and
//!   the enabled connector tools (`agentdns://<slug>/tool/<tool>`, named by their canonical
//!   `mcp_<slug>_<tool>`). `discovery.report` takes an identifier verbatim from it (the scheme and
//!   three `[A-Za-z0-9._-]` segments are checked, nothing is normalized); declarative agents'
//!   identifiers are refused there (their runs are recorded by invoke and route), and agent
//!   sessions may not report (declared `not_for_agents`: an agent could otherwise rank itself).

use car_proto::errors::RpcError;
use car_proto::methods::declagents as m;
use car_proto::methods::fields::NoParams;
use serde_json::json;

use crate::handler::declarative::{self, decompose, rank};
use crate::handler::{Call, Routes};
use crate::state::declagents::DeclAgents;

/// Agents a routing path may hold before the next hop is refused.
pub const MAX_HOPS: usize = 4;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Register, _, _>(register_spec)
        .add::<m::List, _, _>(|call, _: NoParams| async move { Ok(list(&call)) })
        .add::<m::Get, _, _>(|call, p: m::IdParams| async move { get(&call, &p.id) })
        .add::<m::Remove, _, _>(|call, p: m::IdParams| async move {
            let id = p.id.into_string();
            let removed = store(&call, move |d| d.registry.remove(&id)).await?;
            Ok(m::RemovedReply { removed })
        })
        .add::<m::SetEnabled, _, _>(|call, p: m::SetEnabledParams| async move {
            let id = p.id.to_string();
            store(&call, move |d| d.registry.set_enabled(&id, p.enabled))
                .await?
                .ok_or_else(|| not_found(p.id.as_str()))?;
            Ok(m::OkReply { ok: true })
        })
        .add::<m::Revert, _, _>(|call, p: m::IdParams| async move {
            let id = p.id.to_string();
            let spec = store(&call, move |d| d.registry.revert(&id))
                .await?
                .ok_or_else(|| not_found(p.id.as_str()))?;
            Ok(m::RevertReply {
                reverted: true,
                spec,
            })
        })
        .add::<m::Invoke, _, _>(|call, p: m::InvokeParams| async move {
            let entry = declarative::runnable(&call, &p.id)?;
            declarative::invoke(&call, &entry, &p.input, &|_, _| {}, true).await
        })
        .add::<m::Route, _, _>(route)
        .add::<m::RouteSplit, _, _>(route_split)
        .add::<m::RouteCompose, _, _>(route_compose)
        .add::<m::RoutingStats, _, _>(|call, _: NoParams| async move {
            Ok(call.state.data.declagents.routing.stats())
        })
        .add::<m::RunScenarios, _, _>(run_scenarios)
        .add::<m::Resolve, _, _>(resolve)
        .add::<m::Report, _, _>(report);
}

fn need_given(need: &str) -> Result<(), RpcError> {
    if need.trim().is_empty() {
        return Err(RpcError::invalid_params("need: must not be empty"));
    }
    Ok(())
}

fn not_found(id: &str) -> RpcError {
    RpcError::invalid_params(format!("id: no declarative agent {id:?}"))
        .with_data(json!({"reason": "not_found"}))
}

/// Runs registry or routing-store work (file writes) off the async workers; an error
/// naming a field (`spec.…`, `id: …`) is the caller's, any other the daemon's.
async fn store<T: Send + 'static>(
    call: &Call,
    f: impl FnOnce(&DeclAgents) -> Result<T, String> + Send + 'static,
) -> Result<T, RpcError> {
    declarative::blocking_store(call, &["spec.", "id:"], f).await
}

async fn register_spec(call: Call, p: m::RegisterParams) -> Result<m::RegisterReply, RpcError> {
    let id = p.spec.id.to_string();
    let replaced = store(&call, move |d| d.registry.register(p.spec)).await?;
    Ok(m::RegisterReply {
        registry_path: call
            .state
            .data
            .declagents
            .registry
            .path_of(&id)
            .display()
            .to_string(),
        id,
        replaced,
    })
}

fn list(call: &Call) -> m::ListReply {
    let agents = call
        .state
        .data
        .declagents
        .registry
        .entries()
        .iter()
        .map(car_declagents::registry::Entry::row)
        .collect();
    m::ListReply { agents }
}

fn get(call: &Call, id: &str) -> Result<m::GetReply, RpcError> {
    let registry = &call.state.data.declagents.registry;
    let entry = registry.get(id).ok_or_else(|| not_found(id))?;
    Ok(m::GetReply {
        registry_path: registry.path_of(id).display().to_string(),
        spec: entry.spec,
        enabled: entry.enabled,
    })
}

async fn route(call: Call, p: m::RouteParams) -> Result<m::RouteReply, RpcError> {
    need_given(&p.need)?;
    if p.visited.len() >= MAX_HOPS {
        return Err(RpcError::invalid_params(format!(
            "visited: the routing path already holds {} agents; a chain runs at most {MAX_HOPS}",
            p.visited.len()
        ))
        .with_data(json!({"reason": "hop_limit"})));
    }
    let from = p.from.as_ref().map(|f| f.to_string());
    let subjects: Vec<rank::Subject> = call
        .state
        .data
        .declagents
        .registry
        .entries()
        .into_iter()
        .filter(|e| {
            let id = e.spec.id.as_str();
            e.enabled && !p.visited.iter().any(|v| v == id) && from.as_deref() != Some(id)
        })
        .map(|e| rank::Subject::agent(&e.spec))
        .collect();
    if subjects.is_empty() {
        return Err(RpcError::internal(
            "no eligible declarative agent: none is registered and enabled outside the routing path",
        )
        .with_data(json!({"reason": "no_agents"})));
    }
    let ranked = rank::rank(&call, &p.need, subjects, from.as_deref()).await;
    let chosen = ranked[0].subject.id.clone();
    let mut next_visited = p.visited.clone();
    next_visited.push(chosen.clone());
    let result = if p.invoke {
        let entry = declarative::runnable(&call, &chosen)?;
        let reply = declarative::invoke(&call, &entry, &p.need, &|_, _| {}, true).await?;
        if let Some(from) = &from {
            let (from, to, ok) = (from.clone(), chosen.clone(), reply.error.is_none());
            store(&call, move |d| d.routing.record_edge(&from, &to, ok)).await?;
        }
        Some(reply)
    } else {
        None
    };
    Ok(m::RouteReply {
        chosen,
        candidates: ranked.iter().take(3).map(rank::Ranked::candidate).collect(),
        next_visited,
        invoked: p.invoke,
        result,
    })
}

async fn run_scenarios(call: Call, p: m::IdParams) -> Result<m::ScenariosReply, RpcError> {
    let entry = declarative::runnable(&call, &p.id)?;
    let mut results = Vec::new();
    for (i, scenario) in entry.spec.scenarios.iter().enumerate() {
        let name = scenario
            .name
            .clone()
            .unwrap_or_else(|| format!("scenario {}", i + 1));
        let (passed, output, error) =
            match declarative::invoke(&call, &entry, &scenario.input, &|_, _| {}, false).await {
                Ok(reply) => {
                    let expected = scenario
                        .expect
                        .as_ref()
                        .is_none_or(|x| reply.output.to_lowercase().contains(&x.to_lowercase()));
                    let error = reply.error.clone().or_else(|| {
                        (!expected).then(|| {
                            format!(
                                "the answer does not contain {:?}",
                                scenario.expect.as_deref().unwrap_or("")
                            )
                        })
                    });
                    (error.is_none(), reply.output, error)
                }
                Err(e) => (false, String::new(), Some(e.message)),
            };
        results.push(m::ScenarioResult {
            name,
            passed,
            output,
            error,
        });
    }
    let passed = results.iter().filter(|r| r.passed).count() as u32;
    Ok(m::ScenariosReply {
        id: p.id.to_string(),
        passed,
        failed: results.len() as u32 - passed,
        results,
    })
}

async fn resolve(call: Call, p: m::ResolveParams) -> Result<m::ResolveReply, RpcError> {
    need_given(&p.need)?;
    let limit = p.limit.unwrap_or(5).clamp(1, 50) as usize;
    let subjects = discoverable(&call);
    let ranked = rank::rank(&call, &p.need, subjects, None).await;
    let services: Vec<m::Service> = ranked
        .iter()
        .take(limit)
        .map(rank::Ranked::service)
        .collect();
    Ok(m::ResolveReply {
        count: services.len() as u64,
        services,
    })
}

/// What discovery ranks: the enabled declarative agents and the enabled connector tools.
fn discoverable(call: &Call) -> Vec<rank::Subject> {
    let mut subjects = enabled_agents(call);
    for tool in call.state.data.connectors.descriptors() {
        let Some(slug) = tool.connector.clone() else {
            continue;
        };
        let bare = tool
            .name
            .strip_prefix(&format!("mcp_{slug}_"))
            .unwrap_or(&tool.name)
            .to_string();
        let identifier = format!("agentdns://{slug}/tool/{bare}");
        subjects.push(rank::Subject {
            id: tool.name.clone(),
            text: format!(
                "{}. {}",
                bare.replace('_', " "),
                tool.description.clone().unwrap_or_default()
            ),
            name: tool.name,
            keys: vec![identifier.clone()],
            kind: "connector",
            identifier,
        });
    }
    subjects
}

/// Checks an `agentdns://org/category/name` identifier (verbatim; nothing normalized).
fn identifier_problem(identifier: &str) -> Option<String> {
    let Some(rest) = identifier.strip_prefix("agentdns://") else {
        return Some("must start with agentdns://".into());
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let valid = parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 256
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        });
    if !valid {
        return Some("must be agentdns://<org>/<category>/<name>, each of [A-Za-z0-9._-]".into());
    }
    (parts[0] == "local" && parts[1] == "agent").then(|| {
        "declarative agents' outcomes are recorded by declagents.invoke and route; reporting them too would count a run twice".into()
    })
}

async fn report(call: Call, p: m::ReportParams) -> Result<m::ReportReply, RpcError> {
    let identifier = p.identifier.into_string();
    if let Some(problem) = identifier_problem(&identifier) {
        return Err(RpcError::invalid_params(format!("identifier: {problem}")));
    }
    let key = identifier.clone();
    let success = p.outcome == m::Outcome::Success;
    let record = store(&call, move |d| d.routing.record(&key, success, None)).await?;
    Ok(m::ReportReply {
        identifier,
        outcome: p.outcome,
        successes: record.successes,
        failures: record.failures,
    })
}

fn enabled_agents(call: &Call) -> Vec<rank::Subject> {
    call.state
        .data
        .declagents
        .registry
        .entries()
        .into_iter()
        .filter(|e| e.enabled)
        .map(|e| rank::Subject::agent(&e.spec))
        .collect()
}

/// The decomposition knobs `route_split` and `route_compose` share, clamped.
macro_rules! knobs_of {
    ($p:expr) => {
        decompose::Knobs::new(
            $p.max_subtasks,
            $p.decomposition_mode.as_deref(),
            $p.sad_hints,
            $p.sad_iterations,
            $p.sad_convergence_jaccard,
        )
        .map_err(RpcError::invalid_params)
    };
}

/// The names of the services `subjects` rank best for `subtasks` (the SAD hints), at most `n`.
async fn hints(
    call: &Call,
    subjects: &[rank::Subject],
    subtasks: Vec<String>,
    n: usize,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for subtask in subtasks {
        for r in rank::rank(call, &subtask, subjects.to_vec(), None)
            .await
            .into_iter()
            .take(2)
        {
            if !out.contains(&r.subject.name) && out.len() < n {
                out.push(r.subject.name);
            }
        }
    }
    out
}

async fn route_split(call: Call, p: m::RouteSplitParams) -> Result<m::RouteSplitReply, RpcError> {
    need_given(&p.need)?;
    let knobs = knobs_of!(p)?;
    let agents = enabled_agents(&call);
    if agents.is_empty() {
        return Err(RpcError::internal(
            "no eligible declarative agent: none is registered and enabled",
        )
        .with_data(json!({"reason": "no_agents"})));
    }
    let split = decompose::split(&call, &p.need, &knobs, |subtasks, n| {
        hints(&call, &agents, subtasks, n)
    })
    .await;
    let mut routed = Vec::new();
    for subtask in &split.subtasks {
        let best = rank::rank(&call, subtask, agents.clone(), None)
            .await
            .remove(0);
        let result = if p.invoke {
            // A subtask's failure is its own: it lands in its result, and the fan-out goes on.
            let outcome = match declarative::runnable(&call, &best.subject.id) {
                Ok(entry) => declarative::invoke(&call, &entry, subtask, &|_, _| {}, true).await,
                Err(e) => Err(e),
            };
            Some(outcome.unwrap_or_else(|e| m::InvokeReply {
                output: String::new(),
                turns: 0,
                tool_calls: 0,
                error: Some(e.message),
                goal: None,
                model_served: None,
                run_ids: Vec::new(),
            }))
        } else {
            None
        };
        routed.push(m::RoutedSubtask {
            subtask: subtask.clone(),
            chosen: best.subject.id.clone(),
            score: best.score,
            result,
        });
    }
    Ok(m::RouteSplitReply {
        count: routed.len() as u64,
        subtasks: routed,
        invoked: p.invoke,
        decomposition_mode: if knobs.sad { "sad" } else { "vanilla" }.into(),
        rounds: split.rounds,
        initial_subtasks: split.initial,
        final_subtasks: split.subtasks,
        hints: split.hints,
        hint_jaccard: split.hint_jaccard,
    })
}

async fn route_compose(call: Call, p: m::ComposeParams) -> Result<m::ComposeReply, RpcError> {
    need_given(&p.need)?;
    if p.rerank {
        return Err(RpcError::invalid_params(
            "rerank: listwise reranking by a model is not served; leave it false",
        ));
    }
    let knobs = knobs_of!(p)?;
    let per_step = p.candidates_per_step.unwrap_or(3).clamp(1, 10) as usize;
    let subjects = discoverable(&call);
    let split = decompose::split(&call, &p.need, &knobs, |subtasks, n| {
        hints(&call, &subjects, subtasks, n)
    })
    .await;
    let mut steps = Vec::new();
    let mut candidates = std::collections::BTreeMap::new();
    for (i, subtask) in split.subtasks.iter().enumerate() {
        let id = format!("step-{}", i + 1);
        let ranked = rank::rank(&call, subtask, subjects.clone(), None).await;
        let best = ranked.first();
        steps.push(m::PlanStep {
            id: id.clone(),
            subtask: subtask.clone(),
            service: best.map(|b| b.subject.identifier.clone()),
            invoke_kind: best.map(|b| {
                if b.subject.kind == "declarative" {
                    "declagents.invoke"
                } else {
                    "tool_call"
                }
                .to_string()
            }),
            invoke_target: best.map(|b| b.subject.id.clone()),
        });
        candidates.insert(
            id,
            ranked
                .iter()
                .take(per_step)
                .map(rank::Ranked::service)
                .collect(),
        );
    }
    Ok(m::ComposeReply {
        plan: m::Plan {
            steps,
            edges: Vec::new(),
        },
        decomposition: json!({
            "mode": if knobs.sad { "sad" } else { "vanilla" },
            "rounds": split.rounds,
            "initial_subtasks": split.initial,
            "final_subtasks": split.subtasks,
            "hints": split.hints,
            "hint_jaccard": split.hint_jaccard,
        }),
        candidates,
        metadata: json!({
            "need": p.need,
            "candidates_per_step": per_step,
            "providers": ["declarative", "connector"],
            "services": subjects.len(),
        }),
    })
}
