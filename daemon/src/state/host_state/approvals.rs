//! Approvals in the host state: creating one (and its waiter), resolving it under the
//! ownership rule in the parent module's docs, and bounding how many are kept.

use car_proto::errors::RpcError;
use car_proto::methods::host::{AgentStatus, ApprovalStatus, HostApproval};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::{
    not_found, not_owner, ApprovalRequest, HostState, Inner, Principal, MAX_APPROVALS,
    MAX_PENDING_PER_SESSION,
};

impl HostState {
    /// Creates an approval and publishes `approval.requested`; the receiver yields the
    /// decision (`true` approved) when it is resolved.
    pub fn request_approval(
        &self,
        request: ApprovalRequest,
    ) -> (HostApproval, oneshot::Receiver<bool>) {
        let mut inner = self.lock();
        self.insert_approval(&mut inner, request)
    }

    /// `host.request_approval`: like [`Self::request_approval`], but refused (`-32603`,
    /// `data.reason: "too_many_approvals"`) while the requesting session already has
    /// [`MAX_PENDING_PER_SESSION`] pending approvals (checked under the same lock).
    pub fn request_client_approval(
        &self,
        request: ApprovalRequest,
    ) -> Result<HostApproval, RpcError> {
        let mut inner = self.lock();
        if let Some(client) = &request.client_id {
            let pending = inner
                .approvals
                .values()
                .filter(|a| {
                    a.status == ApprovalStatus::Pending && a.client_id.as_ref() == Some(client)
                })
                .count();
            if pending >= MAX_PENDING_PER_SESSION {
                return Err(RpcError::internal(format!(
                    "too many approvals: this session already has {pending} pending (at most {MAX_PENDING_PER_SESSION}); resolve some first"
                ))
                .with_data(json!({"reason": "too_many_approvals"})));
            }
        }
        Ok(self.insert_approval(&mut inner, request).0)
    }

    /// The approvals `host.request_approval` raised for session `client` that are still
    /// pending expire with it: removed (their context with them) and announced as
    /// `approval.expired` with `payload.reason: "session_closed"`.
    pub(super) fn expire_client_approvals(&self, inner: &mut Inner, client: &str) {
        let expired: Vec<String> = inner
            .approvals
            .values()
            .filter(|a| {
                a.status == ApprovalStatus::Pending && a.client_id.as_deref() == Some(client)
            })
            .map(|a| a.id.clone())
            .collect();
        for id in expired {
            let approval = inner.approvals.remove(&id).expect("listed above");
            inner.waiters.remove(&id);
            self.publish(
                inner,
                "approval.expired",
                approval.agent_id.as_deref(),
                Some(format!("{} expired: its session closed", approval.action)),
                json!({"id": id, "reason": "session_closed"}),
            );
        }
    }

    fn insert_approval(
        &self,
        inner: &mut Inner,
        request: ApprovalRequest,
    ) -> (HostApproval, oneshot::Receiver<bool>) {
        let id = Self::fresh_id(inner, "approval");
        let approval = HostApproval {
            id: id.clone(),
            agent_id: request.agent_id.clone(),
            action: request.action,
            description: request.description,
            details: request.details,
            options: vec!["approve".into(), "deny".into()],
            status: ApprovalStatus::Pending,
            created_at: car_proto::clock::now_rfc3339(),
            resolved_at: None,
            notes: None,
            required_approvals: request.required_approvals.max(1),
            client_id: request.client_id,
        };
        Self::trim_approvals(inner);
        inner.approvals.insert(id.clone(), approval.clone());
        if let Some(parked) = request.parked {
            inner.parked_callers.insert(id.clone(), parked);
        }
        let (tx, rx) = oneshot::channel();
        inner.waiters.insert(id.clone(), tx);
        if let Some(agent_id) = &request.agent_id {
            if let Some(agent) = inner.agents.get_mut(agent_id) {
                agent.status = AgentStatus::WaitingForApproval;
                agent.updated_at = car_proto::clock::now_rfc3339();
            }
        }
        let payload = serde_json::to_value(&approval).unwrap_or(Value::Null);
        self.publish(
            inner,
            "approval.requested",
            request.agent_id.as_deref(),
            Some(approval.action.clone()),
            payload,
        );
        (approval, rx)
    }

    fn trim_approvals(inner: &mut Inner) {
        while inner.approvals.len() >= MAX_APPROVALS {
            let oldest_resolved = inner
                .approvals
                .values()
                .filter(|a| a.status != ApprovalStatus::Pending)
                .min_by(|a, b| a.created_at.cmp(&b.created_at))
                .map(|a| a.id.clone());
            let victim = oldest_resolved.or_else(|| {
                inner
                    .approvals
                    .values()
                    .min_by(|a, b| a.created_at.cmp(&b.created_at))
                    .map(|a| a.id.clone())
            });
            match victim {
                Some(id) => {
                    inner.approvals.remove(&id);
                    inner.waiters.remove(&id);
                    inner.parked_callers.remove(&id);
                }
                None => break,
            }
        }
    }

    /// Resolves a pending approval (see the module docs for who may).
    pub fn resolve_approval(
        &self,
        caller: &Principal,
        id: &str,
        approved: bool,
        notes: Option<String>,
    ) -> Result<HostApproval, RpcError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let approval = inner
            .approvals
            .get_mut(id)
            .ok_or_else(|| not_found("approval_id", "approval", id))?;
        match &approval.client_id {
            Some(owner) if *owner != caller.session => return Err(not_owner("approval", id)),
            None if inner
                .parked_callers
                .get(id)
                .is_some_and(|parked| parked.credential == caller.credential) =>
            {
                return Err(RpcError::internal(format!(
                    "permission denied: approval '{id}' holds a call made with this connection's own credential; only a host session with another credential may resolve it"
                ))
                .with_data(json!({"reason": "self_approval"})))
            }
            None if !caller.is_host => {
                return Err(RpcError::internal(format!(
                    "permission denied: approval '{id}' was raised by the daemon's approval gate; only a host session (the host token) may resolve it"
                ))
                .with_data(json!({"reason": "host_only"})))
            }
            _ => {}
        }
        if approval.status != ApprovalStatus::Pending {
            return Err(RpcError::invalid_params(format!(
                "approval_id: approval '{id}' is already {}",
                if approval.status == ApprovalStatus::Approved {
                    "approved"
                } else {
                    "denied"
                }
            ))
            .with_data(json!({"reason": "already_resolved"})));
        }
        approval.status = if approved {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Denied
        };
        approval.resolved_at = Some(car_proto::clock::now_rfc3339());
        approval.notes = notes;
        let approval = approval.clone();
        if let Some(tx) = inner.waiters.remove(id) {
            let _ = tx.send(approved);
        }
        inner.parked_callers.remove(id);
        if let Some(agent_id) = &approval.agent_id {
            if let Some(agent) = inner.agents.get_mut(agent_id) {
                if agent.status == AgentStatus::WaitingForApproval {
                    agent.status = AgentStatus::Running;
                    agent.updated_at = car_proto::clock::now_rfc3339();
                }
            }
        }
        let payload = serde_json::to_value(&approval).unwrap_or(Value::Null);
        self.publish(
            inner,
            "approval.resolved",
            approval.agent_id.as_deref(),
            Some(format!(
                "{} {}",
                approval.action,
                if approved { "approved" } else { "denied" }
            )),
            payload,
        );
        Ok(approval)
    }

    /// A parked gate call gave up (timeout or dropped): forget its waiter; the approval
    /// row stays pending for forensics, as CAR's gate leaves it.
    pub fn abandon_waiter(&self, id: &str) {
        self.lock().waiters.remove(id);
    }
}
