//! `agents.start` / `stop` / `restart` / `wait` / `tail_log` / `health` / `install`: the
//! registry's agents as supervised processes ([`crate::state::agent_lifecycle`]).
//!
//! Authorization: a connection bound to an agent may start, stop or restart only itself
//! (another agent's id is refused with `data.reason: "not_owner"`); host and operator
//! sessions may act on any agent. `agents.install` is host-only (its declaration) and
//! passes the approval gate like `agents.upsert`.

use std::path::Path;
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::agent_supervisor::{
    self as m, AgentStatus, FileAccess, HealthRow, InstallParams, InstallReply, InstallReport,
    LogStreamParam, StopParams, StopSignal, TailLogParams, TailLogReply, WaitParams,
};
use car_proto::methods::agents::{AgentSpec, IdParams, ManagedAgent};
use car_proto::methods::fields::NoParams;
use serde_json::{json, Value};

use crate::handler::{Call, Routes};
use crate::state::agent_lifecycle::status_of;
use crate::state::agent_registry;

/// Longest `agents.wait` (seconds).
pub const MAX_WAIT_SECS: f64 = 3600.0;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Start, _, _>(start)
        .add::<m::Stop, _, _>(stop)
        .add::<m::Restart, _, _>(restart)
        .add::<m::Wait, _, _>(wait)
        .add::<m::TailLog, _, _>(tail_log)
        .add::<m::Health, _, _>(health)
        .add::<m::Install, _, _>(install);
}

fn may_manage(call: &Call, id: &str) -> Result<(), RpcError> {
    match call.session.identity().agent_id {
        Some(own) if own != id => Err(RpcError::invalid_params(format!(
            "id: agent '{own}' may only manage itself, not '{id}'"
        ))
        .with_data(json!({"reason": "not_owner"}))),
        _ => Ok(()),
    }
}

/// The agent `id` as the caller may see it (`env` values for the host only).
fn managed(call: &Call, id: &str) -> Result<ManagedAgent, RpcError> {
    call.state
        .agents
        .managed_seen_by(&call.session)
        .into_iter()
        .find(|a| a.spec.id.as_str() == id)
        .ok_or_else(|| RpcError::invalid_params(format!("id: no registered agent '{id}'")))
}

async fn start(call: Call, p: IdParams) -> Result<ManagedAgent, RpcError> {
    may_manage(&call, &p.id)?;
    call.state
        .agents
        .lifecycle
        .start(&call.state.agents.registry, &p.id)
        .await?;
    managed(&call, &p.id)
}

async fn stop(call: Call, p: StopParams) -> Result<ManagedAgent, RpcError> {
    may_manage(&call, &p.id)?;
    let kill = p.signal == Some(StopSignal::Kill);
    call.state
        .agents
        .lifecycle
        .stop(&call.state.agents.registry, &p.id, kill)
        .await?;
    managed(&call, &p.id)
}

async fn restart(call: Call, p: IdParams) -> Result<ManagedAgent, RpcError> {
    may_manage(&call, &p.id)?;
    call.state
        .agents
        .lifecycle
        .restart(&call.state.agents.registry, &p.id)
        .await?;
    managed(&call, &p.id)
}

async fn wait(call: Call, p: WaitParams) -> Result<ManagedAgent, RpcError> {
    managed(&call, &p.id)?;
    let timeout = p.timeout_secs.unwrap_or(30.0);
    if !(timeout.is_finite() && timeout > 0.0 && timeout <= MAX_WAIT_SECS) {
        return Err(RpcError::invalid_params(format!(
            "timeout_secs: must be more than 0 and at most {MAX_WAIT_SECS}"
        )));
    }
    let targets: Vec<car_supervisor::Status> = p
        .targets
        .unwrap_or_else(|| vec![AgentStatus::Running])
        .into_iter()
        .map(|t| match t {
            AgentStatus::Stopped => car_supervisor::Status::Stopped,
            AgentStatus::Starting => car_supervisor::Status::Starting,
            AgentStatus::Running => car_supervisor::Status::Running,
            AgentStatus::Backoff => car_supervisor::Status::Backoff,
            AgentStatus::Errored => car_supervisor::Status::Errored,
        })
        .collect();
    if targets.is_empty() {
        return Err(RpcError::invalid_params(
            "targets: must name at least one status",
        ));
    }
    let supervisor = call.state.agents.lifecycle.supervisor();
    // An agent this daemon never started is `stopped`.
    if supervisor.status(&p.id).is_none() && targets.contains(&car_supervisor::Status::Stopped) {
        return managed(&call, &p.id);
    }
    match supervisor
        .wait(&p.id, &targets, Duration::from_secs_f64(timeout))
        .await
    {
        Ok(_) => managed(&call, &p.id),
        Err(car_supervisor::SupervisorError::NotFound(_)) => Err(RpcError::internal(format!(
            "agent '{}' is not running under this daemon (status stopped)",
            p.id
        ))),
        Err(e) => Err(e.into()),
    }
}

/// An agent reads only its own logs (CAR lets it read any agent's).
async fn tail_log(call: Call, p: TailLogParams) -> Result<TailLogReply, RpcError> {
    may_manage(&call, &p.id)?;
    managed(&call, &p.id)?;
    let stream = match p.stream.unwrap_or_default() {
        LogStreamParam::Combined => car_supervisor::LogStream::Combined,
        LogStreamParam::Stdout => car_supervisor::LogStream::Stdout,
        LogStreamParam::Stderr => car_supervisor::LogStream::Stderr,
    };
    let supervisor = call.state.agents.lifecycle.supervisor().clone();
    let id = p.id.to_string();
    let tail = tokio::task::spawn_blocking(move || {
        supervisor.tail_log(
            &id,
            p.n.unwrap_or(100) as usize,
            stream,
            p.offset.unwrap_or(0) as usize,
        )
    })
    .await
    .map_err(|e| RpcError::internal(format!("agents.tail_log failed: {e}")))?;
    match tail {
        Ok(t) => Ok(TailLogReply {
            lines: t.lines,
            stdout: t.stdout,
            stderr: t.stderr,
            stdout_total: t.stdout_total as u64,
            stderr_total: t.stderr_total as u64,
            stdout_path: t.stdout_path,
            stderr_path: t.stderr_path,
            more: t.more,
        }),
        // Never started: nothing captured yet.
        Err(car_supervisor::SupervisorError::NotFound(_)) => Ok(TailLogReply {
            lines: vec![],
            stdout: vec![],
            stderr: vec![],
            stdout_total: 0,
            stderr_total: 0,
            stdout_path: String::new(),
            stderr_path: String::new(),
            more: false,
        }),
        Err(e) => Err(e.into()),
    }
}

async fn health(call: Call, _: NoParams) -> Result<Vec<HealthRow>, RpcError> {
    let supervisor = call.state.agents.lifecycle.supervisor();
    let file_access = if supervisor.confines_file_access() {
        FileAccess::Confined
    } else {
        FileAccess::Unconfined
    };
    Ok(call
        .state
        .agents
        .managed()
        .into_iter()
        .map(|agent| {
            let id = agent.spec.id.to_string();
            let command_problem = agent
                .spec
                .command
                .as_deref()
                .map(|c| agent_registry::command_problem(Path::new(c)))
                .unwrap_or_else(|| Some("no command".into()));
            let rt = supervisor.status(&id);
            let status = rt
                .as_ref()
                .map_or(AgentStatus::Stopped, |r| status_of(r.status));
            let reason = command_problem.or_else(|| {
                (status == AgentStatus::Errored).then(|| {
                    rt.as_ref()
                        .and_then(|r| r.reason.clone())
                        .unwrap_or_else(|| "errored".into())
                })
            });
            HealthRow {
                id,
                command: agent.spec.command.clone(),
                ok: reason.is_none(),
                reason,
                status,
                restart_count: agent.restart_count,
                file_access,
            }
        })
        .collect())
}

fn text(obj: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_string)
}

/// `agents.install`: an `external_process` manifest with a `command` becomes a registry
/// agent (as `agents.upsert` would make it); other manifests are written to
/// `CAR_HOME/agents/<id>/manifest.json` and `agent` is `null`. `runtime.car_min_version`
/// is checked against the daemon's CAR version; `capabilities.required` must be empty
/// (the daemon advertises no optional host capabilities) and `capabilities.optional` is
/// reported in `missingOptional`.
async fn install(call: Call, p: InstallParams) -> Result<InstallReply, RpcError> {
    let id =
        text(&p.agent, "id").ok_or_else(|| RpcError::invalid_params("agent.id: is required"))?;
    agent_registry::validate_id("agent.id", &id)?;
    let name = text(&p.agent, "name").unwrap_or_else(|| id.clone());
    if let Some(min) = p.runtime.as_ref().and_then(|r| text(r, "car_min_version")) {
        if !version_satisfies(car_proto::CAR_VERSION, &min) {
            return Err(RpcError::invalid_params(format!(
                "runtime.car_min_version: this daemon is CAR {} and the agent needs {min}",
                car_proto::CAR_VERSION
            )));
        }
    }
    let mut missing_optional = Vec::new();
    if let Some(caps) = p.capabilities.as_ref().and_then(Value::as_object) {
        for (kind, table) in caps {
            let Some(table) = table.as_object() else {
                continue;
            };
            for (namespace, features) in table {
                let features: Vec<String> = match features {
                    Value::Array(a) => a
                        .iter()
                        .filter_map(|f| f.as_str().map(str::to_string))
                        .collect(),
                    Value::String(s) => vec![s.clone()],
                    _ => vec![],
                };
                for feature in features {
                    if kind == "required" {
                        return Err(RpcError::invalid_params(format!(
                            "capabilities.required.{namespace}: this daemon does not advertise {feature:?}"
                        )));
                    }
                    if kind == "optional" {
                        missing_optional.push(m::MissingFeature {
                            namespace: namespace.clone(),
                            feature,
                        });
                    }
                }
            }
        }
    }
    let kind = text(&p.transport, "kind")
        .ok_or_else(|| RpcError::invalid_params("transport.kind: is required"))?;
    let report = InstallReport { missing_optional };
    if kind == "external_process" {
        if let Some(command) = text(&p.transport, "command") {
            let args = p
                .transport
                .get("args")
                .cloned()
                .map(serde_json::from_value::<Vec<String>>)
                .transpose()
                .map_err(|e| RpcError::invalid_params(format!("transport.args: {e}")))?;
            let spec = AgentSpec {
                id: car_proto::methods::fields::Name(id),
                name: car_proto::methods::fields::Name(name),
                command: Some(command),
                args,
                cwd: text(&p.transport, "cwd"),
                env: None,
                restart: p
                    .lifecycle
                    .as_ref()
                    .and_then(|l| l.get("restart").cloned())
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| RpcError::invalid_params(format!("lifecycle.restart: {e}")))?,
                max_restarts: None,
                backoff_secs: None,
                auto_start: p
                    .lifecycle
                    .as_ref()
                    .and_then(|l| l.get("auto_start"))
                    .and_then(Value::as_bool),
                interpreter: None,
                method_allowlist: None,
                capabilities: None,
            };
            let spec = agent_registry::validate(spec).map_err(|e| {
                RpcError::invalid_params(e.message.replacen("command:", "transport.command:", 1))
            })?;
            let state = call.state.clone();
            let agent = tokio::task::spawn_blocking(move || state.agents.registry.upsert(spec))
                .await
                .map_err(|e| RpcError::internal(format!("agents.install failed: {e}")))??;
            return Ok(InstallReply {
                report,
                agent: Some(call.state.agents.lifecycle.managed(agent)),
            });
        }
    } else if kind != "pure_data" {
        return Err(RpcError::invalid_params(format!(
            "transport.kind: must be \"external_process\" or \"pure_data\", got {kind:?}"
        )));
    }
    let path = call
        .state
        .daemon
        .state_root
        .join("agents")
        .join(&id)
        .join("manifest.json");
    let text = serde_json::to_string_pretty(&p).map_err(RpcError::internal)?;
    crate::state::auth::write_private_file(&path, &text)
        .map_err(|e| RpcError::internal(format!("cannot write {}: {e}", path.display())))?;
    Ok(InstallReply {
        report,
        agent: None,
    })
}

/// `have >= need`, comparing dotted numeric versions (`>=` and spaces in `need` ignored).
fn version_satisfies(have: &str, need: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> {
        v.trim()
            .trim_start_matches(">=")
            .trim()
            .split('.')
            .map(|p| p.trim().parse().unwrap_or(0))
            .collect()
    };
    let need = need.split(',').next().unwrap_or("");
    parse(have) >= parse(need)
}
