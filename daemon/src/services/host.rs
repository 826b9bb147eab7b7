//! `host.*`: the host surface over [`crate::state::host_state::HostState`] (ownership, events,
//! replay: see that module's docs).
//!
//! `host.subscribe` answers CAR's snapshot and then forwards every `host.event` to the
//! session until it closes or subscribes again (a second subscription replaces the first,
//! so no event is delivered twice). With `{after_seq, epoch}` the missed events are queued
//! as `host.event` notifications before any live one; a refusal (`replayed: false,
//! reason: "epoch" | "gap"`) still subscribes, and the host rebuilds from the snapshot.
//! A subscriber that falls more than 1024 events behind loses the oldest (logged); the
//! `seq` numbers show the gap and a resubscription with `after_seq` recovers it.

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::host::{
    self as m, AgentIdParams, AgentStatus, ApprovalsReply, EventsParams, EventsReply, HostAgent,
    HostApproval, HostDevice, HostEvent, HostIdentity, NotifyParams, OkReply, RegisterAgentParams,
    RegisterDeviceParams, RequestApprovalParams, Resolution, ResolveApprovalParams,
    SetStatusParams, SubscribeParams, SubscribeReply, UpdateDeviceParams,
};
use serde_json::{json, Value};

use crate::handler::{Call, Routes};
use crate::state::host_state::{
    AgentFields, ApprovalRequest, Replay, StatusChange, MAX_APPROVAL_CONTEXT_BYTES,
};

/// `host.events` default and ceiling.
const DEFAULT_EVENTS: u32 = 100;
const MAX_EVENTS: u32 = 1000;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Subscribe, _, _>(subscribe)
        .add::<m::Agents, _, _>(agents)
        .add::<m::Devices, _, _>(devices)
        .add::<m::Events, _, _>(events)
        .add::<m::Approvals, _, _>(approvals)
        .add::<m::RegisterAgent, _, _>(register_agent)
        .add::<m::UnregisterAgent, _, _>(unregister_agent)
        .add::<m::SetStatus, _, _>(set_status)
        .add::<m::RegisterDevice, _, _>(register_device)
        .add::<m::UpdateDevice, _, _>(update_device)
        .add::<m::Notify, _, _>(notify)
        .add::<m::RequestApproval, _, _>(request_approval)
        .add::<m::ResolveApproval, _, _>(resolve_approval);
}

fn object(field: &str, v: Option<Value>) -> Result<Value, RpcError> {
    match v {
        None => Ok(json!({})),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{field}: expected an object"
        ))),
    }
}

fn identity(call: &Call) -> HostIdentity {
    HostIdentity {
        version: car_proto::CAR_VERSION.to_string(),
        pid: std::process::id(),
        manifest_path: Some(
            call.state
                .agents
                .registry
                .manifest_path()
                .display()
                .to_string(),
        ),
        manifest_role: "owner".into(),
    }
}

async fn subscribe(call: Call, p: SubscribeParams) -> Result<SubscribeReply, RpcError> {
    if p.epoch.is_some() && p.after_seq.is_none() {
        return Err(RpcError::invalid_params(
            "after_seq: is required when epoch is given",
        ));
    }
    let after = p.after_seq.map(|seq| (seq, p.epoch.as_deref()));
    let sub = call.state.agents.host.subscribe(after);
    let stop = call.session.replace_host_subscription();
    let (replayed, reason, replayed_count) = match &sub.replay {
        Replay::NotAsked => (None, None, None),
        Replay::Refused(reason) => (Some(false), Some(reason.to_string()), None),
        Replay::Events(events) => {
            for event in events {
                call.session.notify(
                    "host.event",
                    &serde_json::to_value(event).unwrap_or_default(),
                );
            }
            (Some(true), None, Some(events.len() as u64))
        }
    };
    call.session.forward_until(
        sub.live,
        "host.event",
        |_, event: HostEvent| serde_json::to_value(event).ok(),
        stop,
    );
    Ok(SubscribeReply {
        subscribed: true,
        agents: merged_agents(&call, sub.agents),
        devices: sub.devices,
        approvals: sub.approvals,
        events: sub.events,
        identity: identity(&call),
        epoch: call.state.agents.host.epoch.clone(),
        seq: sub.seq,
        replayed,
        reason,
        replayed_count,
    })
}

async fn agents(call: Call, _: NoParams) -> Result<Vec<HostAgent>, RpcError> {
    Ok(merged_agents(&call, call.state.agents.host.agents()))
}

/// The registered host agents merged with the registry agents that advertise
/// `capabilities` (CAR's rule, so a host can offer chat with a supervised agent); an
/// explicit registration of the same id wins. Registry rows are `kind: "supervised"`,
/// `running` while a connection is attached, else `stopped`.
fn merged_agents(call: &Call, mut agents: Vec<HostAgent>) -> Vec<HostAgent> {
    for managed in call.state.agents.managed() {
        let spec = managed.spec;
        let capabilities = spec.capabilities.clone().unwrap_or_default();
        if capabilities.is_empty() || agents.iter().any(|a| a.id == spec.id.as_str()) {
            continue;
        }
        agents.push(HostAgent {
            id: spec.id.to_string(),
            name: spec.name.to_string(),
            kind: "supervised".into(),
            capabilities,
            project: spec.cwd.clone(),
            status: if managed.attached {
                AgentStatus::Running
            } else {
                AgentStatus::Stopped
            },
            current_task: None,
            pid: managed.pid.map(u64::from),
            display: None,
            metadata: json!({}),
            session_id: managed.session_id.unwrap_or_default(),
            updated_at: car_proto::clock::now_rfc3339(),
        });
    }
    agents.sort_by(|a, b| a.id.cmp(&b.id));
    agents
}

async fn devices(call: Call, _: NoParams) -> Result<Vec<HostDevice>, RpcError> {
    Ok(call.state.agents.host.devices())
}

async fn events(call: Call, p: EventsParams) -> Result<EventsReply, RpcError> {
    let limit = p.limit.unwrap_or(DEFAULT_EVENTS);
    if limit == 0 || limit > MAX_EVENTS {
        return Err(RpcError::invalid_params(format!(
            "limit: must be between 1 and {MAX_EVENTS}"
        )));
    }
    Ok(EventsReply {
        events: call.state.agents.host.events(limit as usize),
    })
}

async fn approvals(call: Call, _: NoParams) -> Result<ApprovalsReply, RpcError> {
    Ok(ApprovalsReply {
        approvals: call.state.agents.host.approvals(),
    })
}

async fn register_agent(call: Call, p: RegisterAgentParams) -> Result<HostAgent, RpcError> {
    let fields = AgentFields {
        id: p.id.map(|n| n.into_string()),
        name: p.name.into_string(),
        kind: p.kind.into_string(),
        capabilities: p.capabilities.unwrap_or_default(),
        project: p.project,
        pid: p.pid,
        display: p.display,
        metadata: object("metadata", p.metadata)?,
    };
    call.state
        .agents
        .host
        .register_agent(&call.session.label(), fields)
}

async fn unregister_agent(call: Call, p: AgentIdParams) -> Result<OkReply, RpcError> {
    let ok = call
        .state
        .agents
        .host
        .unregister_agent(&call.session.label(), &p.agent_id)?;
    Ok(OkReply { ok })
}

async fn set_status(call: Call, p: SetStatusParams) -> Result<HostAgent, RpcError> {
    let payload = object("payload", p.payload)?;
    let change = StatusChange {
        status: p.status,
        current_task: p.current_task,
        message: p.message,
        payload: Some(payload),
    };
    call.state
        .agents
        .host
        .set_status(&call.session.label(), &p.agent_id, change)
}

async fn register_device(call: Call, p: RegisterDeviceParams) -> Result<HostDevice, RpcError> {
    let metadata = object("metadata", p.metadata)?;
    let owner = call.session.label();
    let session_id = owner.clone();
    call.state
        .agents
        .host
        .register_device(&owner, p.id.map(|n| n.into_string()), move |_, id| {
            HostDevice {
                id,
                name: p.name.into_string(),
                platform: p.platform.into_string(),
                capabilities: p.capabilities.unwrap_or_default(),
                status: p.status.unwrap_or_else(|| "online".into()),
                session_id,
                updated_at: car_proto::clock::now_rfc3339(),
                metadata,
            }
        })
}

async fn update_device(call: Call, p: UpdateDeviceParams) -> Result<HostDevice, RpcError> {
    let metadata = p
        .metadata
        .map(|m| object("metadata", Some(m)))
        .transpose()?;
    call.state
        .agents
        .host
        .update_device(&call.session.label(), &p.device_id, move |d| {
            if let Some(name) = p.name {
                d.name = name.into_string();
            }
            if let Some(platform) = p.platform {
                d.platform = platform.into_string();
            }
            if let Some(caps) = p.capabilities {
                d.capabilities = caps;
            }
            if let Some(status) = p.status {
                d.status = status;
            }
            if let Some(metadata) = metadata {
                d.metadata = metadata;
            }
        })
}

async fn notify(call: Call, p: NotifyParams) -> Result<HostEvent, RpcError> {
    let payload = object("payload", p.payload)?;
    let kind = p
        .kind
        .map(|k| k.into_string())
        .unwrap_or_else(|| "host.notification".into());
    Ok(call
        .state
        .agents
        .host
        .notify(&kind, p.agent_id.as_deref(), p.message, payload))
}

async fn request_approval(call: Call, p: RequestApprovalParams) -> Result<HostApproval, RpcError> {
    let details = object("context", p.context)?;
    let size = details.to_string().len();
    if size > MAX_APPROVAL_CONTEXT_BYTES {
        return Err(RpcError::invalid_params(format!(
            "context: is {size} bytes of JSON, over the cap of {MAX_APPROVAL_CONTEXT_BYTES}"
        )));
    }
    if let Some(d) = &p.description {
        if d.len() > MAX_APPROVAL_CONTEXT_BYTES {
            return Err(RpcError::invalid_params(format!(
                "description: is {} bytes, over the cap of {MAX_APPROVAL_CONTEXT_BYTES}",
                d.len()
            )));
        }
    }
    if p.required_approvals == Some(0) {
        return Err(RpcError::invalid_params(
            "required_approvals: must be at least 1",
        ));
    }
    call.state
        .agents
        .host
        .request_client_approval(ApprovalRequest {
            agent_id: p.agent_id.map(|a| a.into_string()),
            action: p.title.into_string(),
            description: p.description,
            details,
            required_approvals: p.required_approvals.unwrap_or(1),
            client_id: Some(call.session.label()),
            parked: None,
        })
}

async fn resolve_approval(call: Call, p: ResolveApprovalParams) -> Result<HostApproval, RpcError> {
    let approved = match (p.approved, p.resolution) {
        (Some(a), None) => a,
        (None, Some(r)) => r == Resolution::Approve,
        (Some(a), Some(r)) if a == (r == Resolution::Approve) => a,
        (Some(_), Some(_)) => {
            return Err(RpcError::invalid_params("resolution: contradicts approved"))
        }
        (None, None) => {
            return Err(RpcError::invalid_params(
                "approved: is required (a boolean), or resolution: \"approve\" | \"deny\"",
            ))
        }
    };
    call.state.agents.host.resolve_approval(
        &call.session.principal(),
        &p.approval_id,
        approved,
        p.notes,
    )
}
