//! [`HostState`]: the registry behind `host.*` (agents, devices, approvals) and the
//! `host.event` stream with its replay ring.
//!
//! # Ownership (the reference's per-session ACL)
//! An agent or device row is owned by the session that registered it (`sess-<n>`); only
//! that session may update or remove it, and re-registering an id another session owns is
//! refused (`not_owner`). Reads are open to every authenticated session. When the owning
//! connection ends, its agents and devices are removed (`agent.unregistered` /
//! `device.unregistered` with `payload.reason: "session_closed"`), so a reconnecting
//! program can register the same id again. An approval raised by `host.request_approval`
//! is resolved only by the session that raised it. A system approval (the dispatcher's
//! gate, a supervisor's escalation: `client_id: null`) is resolved only by a **host
//! session** (the host token), and never by a connection holding the parked call's
//! credential — not its own socket, and not a second socket with the same token. CAR lets
//! any authenticated session resolve one, so any caller could approve its own gated call
//! from a second socket; here only the host approves, and the gate never parks a host's
//! own calls (`crate::state::approval_gate`), which no one could then approve. Approvals are kept
//! after resolution (bounded: the oldest resolved ones
//! go first past [`MAX_APPROVALS`]). Beyond CAR (issue 24): a `host.request_approval`
//! `context` is at most [`MAX_APPROVAL_CONTEXT_BYTES`] of JSON, a session holds at most
//! [`MAX_PENDING_PER_SESSION`] pending approvals, and when it closes they expire (removed,
//! `approval.expired` published) instead of outliving it.
//!
//! # Events, `seq` and replay
//! Every change publishes one `HostEvent` under the state lock, numbered `seq` from 1
//! without gaps within this daemon run (`epoch`, random per run), appended to a ring
//! bounded by count and bytes, and sent on a broadcast channel. A subscription takes its
//! snapshot, its replay and its live receiver under that same lock, so a subscriber sees
//! every event exactly once: those at or before the snapshot's `seq` are in the snapshot or
//! the replay, later ones arrive live. `host.subscribe {after_seq, epoch}` replays the
//! events numbered after `after_seq` when the epoch is this run's and the ring still holds
//! `after_seq + 1`; otherwise it answers `replayed: false` with `reason: "epoch"` or
//! `"gap"` and the host rebuilds from the snapshot.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use car_proto::errors::RpcError;
use car_proto::methods::host::{AgentStatus, HostAgent, HostApproval, HostDevice, HostEvent};
use serde_json::{json, Value};
use tokio::sync::{broadcast, oneshot};

/// Events the ring keeps at most.
pub const RING_EVENTS: usize = 4096;
/// Bytes (serialized) the ring keeps at most.
pub const RING_BYTES: usize = 4 << 20;
/// Approvals kept at most (resolved ones are dropped first).
pub const MAX_APPROVALS: usize = 1000;
/// Pending `host.request_approval` approvals one session may hold.
pub const MAX_PENDING_PER_SESSION: usize = 64;
/// Largest `host.request_approval` `context` (bytes of JSON).
pub const MAX_APPROVAL_CONTEXT_BYTES: usize = 64 * 1024;
/// Agent and device rows at most, each.
pub const MAX_ROWS: usize = 10_000;
/// Events a snapshot carries.
pub const SNAPSHOT_EVENTS: usize = 100;

/// The replay a subscription asked for.
#[derive(Debug)]
pub enum Replay {
    /// No `after_seq` given.
    NotAsked,
    Events(Vec<HostEvent>),
    Refused(&'static str),
}

/// What a subscription starts from.
#[derive(Debug)]
pub struct Subscription {
    pub agents: Vec<HostAgent>,
    pub devices: Vec<HostDevice>,
    pub approvals: Vec<HostApproval>,
    pub events: Vec<HostEvent>,
    pub seq: u64,
    pub replay: Replay,
    pub live: broadcast::Receiver<HostEvent>,
}

#[derive(Debug, Default)]
struct Inner {
    agents: BTreeMap<String, HostAgent>,
    devices: BTreeMap<String, HostDevice>,
    approvals: BTreeMap<String, HostApproval>,
    /// Parked gate calls waiting for their approval's resolution.
    waiters: HashMap<String, oneshot::Sender<bool>>,
    /// Who a system approval parks (no connection with its credential may resolve it).
    parked_callers: HashMap<String, Principal>,
    ring: VecDeque<(HostEvent, usize)>,
    ring_bytes: usize,
    next_seq: u64,
    next_id: u64,
}

#[derive(Debug)]
pub struct HostState {
    pub epoch: String,
    inner: Mutex<Inner>,
    live: broadcast::Sender<HostEvent>,
}

impl Default for HostState {
    fn default() -> Self {
        Self::new()
    }
}

fn not_owner(what: &str, id: &str) -> RpcError {
    RpcError::internal(format!("{what} '{id}' is owned by another session"))
        .with_data(json!({"reason": "not_owner"}))
}

fn not_found(field: &str, what: &str, id: &str) -> RpcError {
    RpcError::invalid_params(format!("{field}: no {what} '{id}'"))
        .with_data(json!({"reason": "not_found"}))
}

/// Fields a caller passes to create or change an agent row.
#[derive(Debug, Clone)]
pub struct AgentFields {
    pub id: Option<String>,
    pub name: String,
    pub kind: String,
    pub capabilities: Vec<String>,
    pub project: Option<String>,
    pub pid: Option<u64>,
    pub display: Option<Value>,
    pub metadata: Value,
}

/// A `host.set_status` change.
#[derive(Debug, Clone)]
pub struct StatusChange {
    pub status: AgentStatus,
    pub current_task: Option<String>,
    pub message: Option<String>,
    pub payload: Option<Value>,
}

/// A new approval request.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub agent_id: Option<String>,
    pub action: String,
    pub description: Option<String>,
    pub details: Value,
    pub required_approvals: u32,
    /// `None`: a system approval.
    pub client_id: Option<String>,
    /// For a system approval: who is parked on it.
    pub parked: Option<Principal>,
}

/// A party to an approval: its session label, the credential it authenticated with
/// (`host`, `operator`, `agent:<id>`, `grant:<consumer>`, `observer`: every socket holding
/// the same token shares it), and whether it holds the host token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub session: String,
    pub credential: String,
    pub is_host: bool,
}

impl HostState {
    pub fn new() -> Self {
        let (live, _) = broadcast::channel(1024);
        HostState {
            epoch: format!("epoch-{}", crate::state::auth::mint_token()),
            inner: Mutex::new(Inner::default()),
            live,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("host state lock")
    }

    fn fresh_id(inner: &mut Inner, prefix: &str) -> String {
        inner.next_id += 1;
        format!(
            "{prefix}-{}-{}",
            inner.next_id,
            &crate::state::auth::mint_token()[..8]
        )
    }

    /// Publishes one event (under the lock: numbering, ring and fan-out stay in order).
    fn publish(
        &self,
        inner: &mut Inner,
        kind: &str,
        agent_id: Option<&str>,
        message: Option<String>,
        payload: Value,
    ) -> HostEvent {
        inner.next_seq += 1;
        let seq = inner.next_seq;
        let event = HostEvent {
            id: format!("event-{seq}"),
            sequence: seq,
            seq,
            epoch: self.epoch.clone(),
            timestamp: car_proto::clock::now_rfc3339(),
            kind: kind.to_string(),
            agent_id: agent_id.map(str::to_string),
            message,
            payload,
        };
        let bytes = serde_json::to_vec(&event).map(|v| v.len()).unwrap_or(0);
        inner.ring.push_back((event.clone(), bytes));
        inner.ring_bytes += bytes;
        while inner.ring.len() > RING_EVENTS || inner.ring_bytes > RING_BYTES {
            match inner.ring.pop_front() {
                Some((_, b)) => inner.ring_bytes -= b,
                None => break,
            }
        }
        let _ = self.live.send(event.clone());
        event
    }

    /// Snapshot, replay and live receiver, taken together (see the module docs).
    pub fn subscribe(&self, after: Option<(u64, Option<&str>)>) -> Subscription {
        let inner = self.lock();
        let live = self.live.subscribe();
        let replay = match after {
            None => Replay::NotAsked,
            Some((_, epoch)) if epoch != Some(self.epoch.as_str()) => Replay::Refused("epoch"),
            Some((after_seq, _)) if after_seq > inner.next_seq => Replay::Refused("gap"),
            Some((after_seq, _)) => {
                let oldest = inner.ring.front().map(|(e, _)| e.seq);
                let held = match oldest {
                    Some(oldest) => after_seq + 1 >= oldest,
                    None => after_seq == inner.next_seq,
                };
                if held {
                    Replay::Events(
                        inner
                            .ring
                            .iter()
                            .filter(|(e, _)| e.seq > after_seq)
                            .map(|(e, _)| e.clone())
                            .collect(),
                    )
                } else {
                    Replay::Refused("gap")
                }
            }
        };
        Subscription {
            agents: inner.agents.values().cloned().collect(),
            devices: inner.devices.values().cloned().collect(),
            approvals: inner.approvals.values().cloned().collect(),
            events: Self::recent(&inner, SNAPSHOT_EVENTS),
            seq: inner.next_seq,
            replay,
            live,
        }
    }

    fn recent(inner: &Inner, limit: usize) -> Vec<HostEvent> {
        let skip = inner.ring.len().saturating_sub(limit);
        inner
            .ring
            .iter()
            .skip(skip)
            .map(|(e, _)| e.clone())
            .collect()
    }

    pub fn events(&self, limit: usize) -> Vec<HostEvent> {
        Self::recent(&self.lock(), limit)
    }

    pub fn agents(&self) -> Vec<HostAgent> {
        self.lock().agents.values().cloned().collect()
    }

    pub fn agent(&self, id: &str) -> Option<HostAgent> {
        self.lock().agents.get(id).cloned()
    }

    pub fn devices(&self) -> Vec<HostDevice> {
        self.lock().devices.values().cloned().collect()
    }

    pub fn approvals(&self) -> Vec<HostApproval> {
        self.lock().approvals.values().cloned().collect()
    }

    pub fn register_agent(&self, owner: &str, fields: AgentFields) -> Result<HostAgent, RpcError> {
        let mut inner = self.lock();
        let id = match fields.id {
            Some(id) => id,
            None => Self::fresh_id(&mut inner, "agent"),
        };
        if let Some(existing) = inner.agents.get(&id) {
            if existing.session_id != owner {
                return Err(not_owner("agent", &id));
            }
        } else if inner.agents.len() >= MAX_ROWS {
            return Err(RpcError::internal(format!(
                "host state is full: at most {MAX_ROWS} agents"
            )));
        }
        let agent = HostAgent {
            id: id.clone(),
            name: fields.name,
            kind: fields.kind,
            capabilities: fields.capabilities,
            project: fields.project,
            status: AgentStatus::Idle,
            current_task: None,
            pid: fields.pid,
            display: fields.display,
            metadata: fields.metadata,
            session_id: owner.to_string(),
            updated_at: car_proto::clock::now_rfc3339(),
        };
        inner.agents.insert(id.clone(), agent.clone());
        let payload = serde_json::to_value(&agent).unwrap_or(Value::Null);
        self.publish(
            &mut inner,
            "agent.registered",
            Some(&id),
            Some(format!("{} registered", agent.name)),
            payload,
        );
        Ok(agent)
    }

    fn owned_agent<'a>(
        inner: &'a mut Inner,
        owner: &str,
        id: &str,
    ) -> Result<&'a mut HostAgent, RpcError> {
        match inner.agents.get_mut(id) {
            None => Err(not_found("agent_id", "agent", id)),
            Some(a) if a.session_id != owner => Err(not_owner("agent", id)),
            Some(a) => Ok(a),
        }
    }

    pub fn unregister_agent(&self, owner: &str, id: &str) -> Result<bool, RpcError> {
        let mut inner = self.lock();
        Self::owned_agent(&mut inner, owner, id)?;
        let agent = inner.agents.remove(id).expect("checked above");
        self.publish(
            &mut inner,
            "agent.unregistered",
            Some(id),
            Some(format!("{} unregistered", agent.name)),
            json!({}),
        );
        Ok(true)
    }

    pub fn set_status(
        &self,
        owner: &str,
        id: &str,
        change: StatusChange,
    ) -> Result<HostAgent, RpcError> {
        let StatusChange {
            status,
            current_task,
            message,
            payload,
        } = change;
        let mut inner = self.lock();
        let agent = Self::owned_agent(&mut inner, owner, id)?;
        agent.status = status;
        agent.current_task = current_task;
        agent.updated_at = car_proto::clock::now_rfc3339();
        let agent = agent.clone();
        let mut payload = payload.unwrap_or_else(|| json!({}));
        if let Value::Object(map) = &mut payload {
            map.entry("status").or_insert(json!(status.as_str()));
        }
        let message = message.or_else(|| Some(format!("{} is {}", agent.name, status.as_str())));
        self.publish(
            &mut inner,
            "agent.status_changed",
            Some(id),
            message,
            payload,
        );
        Ok(agent)
    }

    pub fn register_device(
        &self,
        owner: &str,
        id: Option<String>,
        update: impl FnOnce(Option<&HostDevice>, String) -> HostDevice,
    ) -> Result<HostDevice, RpcError> {
        let mut inner = self.lock();
        let id = id.unwrap_or_else(|| Self::fresh_id(&mut inner, "device"));
        let existing = inner.devices.get(&id);
        if let Some(d) = existing {
            if d.session_id != owner {
                return Err(not_owner("device", &id));
            }
        } else if inner.devices.len() >= MAX_ROWS {
            return Err(RpcError::internal(format!(
                "host state is full: at most {MAX_ROWS} devices"
            )));
        }
        let kind = if existing.is_some() {
            "device.updated"
        } else {
            "device.registered"
        };
        let device = update(existing, id.clone());
        inner.devices.insert(id, device.clone());
        let payload = serde_json::to_value(&device).unwrap_or(Value::Null);
        self.publish(&mut inner, kind, None, Some(device.name.clone()), payload);
        Ok(device)
    }

    pub fn update_device(
        &self,
        owner: &str,
        id: &str,
        update: impl FnOnce(&mut HostDevice),
    ) -> Result<HostDevice, RpcError> {
        let mut inner = self.lock();
        let device = match inner.devices.get_mut(id) {
            None => return Err(not_found("device_id", "device", id)),
            Some(d) if d.session_id != owner => return Err(not_owner("device", id)),
            Some(d) => d,
        };
        update(device);
        device.updated_at = car_proto::clock::now_rfc3339();
        let device = device.clone();
        let payload = serde_json::to_value(&device).unwrap_or(Value::Null);
        self.publish(
            &mut inner,
            "device.updated",
            None,
            Some(device.name.clone()),
            payload,
        );
        Ok(device)
    }

    pub fn notify(
        &self,
        kind: &str,
        agent_id: Option<&str>,
        message: Option<String>,
        payload: Value,
    ) -> HostEvent {
        let mut inner = self.lock();
        self.publish(&mut inner, kind, agent_id, message, payload)
    }

    /// The session `owner` ended: its agents and devices go, and its pending approvals
    /// expire.
    pub fn on_session_closed(&self, owner: &str) {
        let mut inner = self.lock();
        self.expire_client_approvals(&mut inner, owner);
        let agents: Vec<String> = inner
            .agents
            .values()
            .filter(|a| a.session_id == owner)
            .map(|a| a.id.clone())
            .collect();
        for id in agents {
            let agent = inner.agents.remove(&id).expect("listed above");
            self.publish(
                &mut inner,
                "agent.unregistered",
                Some(&id),
                Some(format!("{} disconnected", agent.name)),
                json!({"reason": "session_closed"}),
            );
        }
        let devices: Vec<String> = inner
            .devices
            .values()
            .filter(|d| d.session_id == owner)
            .map(|d| d.id.clone())
            .collect();
        for id in devices {
            let device = inner.devices.remove(&id).expect("listed above");
            self.publish(
                &mut inner,
                "device.unregistered",
                None,
                Some(device.name.clone()),
                json!({"reason": "session_closed", "device_id": id}),
            );
        }
    }
}

mod approvals;
#[cfg(test)]
mod tests;
