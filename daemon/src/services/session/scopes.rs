//! Scoped sessions: `session.policy.open` / `close` (policy-scoping ids within one
//! connection), `session.bind_context`, and inference-consumer grants
//! (`session.consumer.issue` / `revoke`, `session.auth {consumer_id, token}`; rules in
//! [`crate::state::consumer_grants`]).
//!
//! `session.policy.open` returns a fresh id (`pol-…`) that `policy.register {session_id}`
//! and `proposal.submit {session_id}` take; `close` drops every policy scoped to it and
//! says whether the id was open. Ids are per connection (a reconnected socket has none).
//!
//! `session.bind_context`: this daemon serves no organizations (Parslee accounts are out
//! of scope), so every resolution is personal and leaves the connection unbound —
//! `{work_context: null, from_default: false}` — after the reference's checks:
//! `working_dir` absolute and an existing directory, not both `organization_id` and
//! `personal`, refused on agent and consumer connections and on one authenticated with a
//! `memory_namespace`. Naming an `organization_id` is refused with the fix (`personal:
//! true`), never silently treated as personal.

use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::session::{
    self as m, AuthReply, BindContextParams, BindContextReply, ConsumerGrant, ConsumerIssueParams,
    ConsumerRevokeParams, ConsumerRevokeReply, PolicyCloseParams, PolicyCloseReply,
    PolicyOpenReply,
};
use car_proto::methods::CallerRole;
use serde_json::json;

use crate::handler::{Call, Routes};
use crate::state::consumer_grants::Grant;
use crate::state::session::{Identity, Session};
use crate::state::ServerState;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::PolicyOpen, _, _>(policy_open)
        .add::<m::PolicyClose, _, _>(policy_close)
        .add::<m::BindContext, _, _>(bind_context)
        .add::<m::ConsumerIssue, _, _>(consumer_issue)
        .add::<m::ConsumerRevoke, _, _>(consumer_revoke);
}

async fn policy_open(call: Call, _: NoParams) -> Result<PolicyOpenReply, RpcError> {
    let id = format!("pol-{}", &crate::state::auth::mint_token()[..16]);
    call.session.open_policy_scope(&id)?;
    Ok(PolicyOpenReply { session_id: id })
}

async fn policy_close(call: Call, p: PolicyCloseParams) -> Result<PolicyCloseReply, RpcError> {
    let closed = call.session.close_policy_scope(&p.session_id);
    if closed {
        call.session.runtime(|rt| {
            rt.policies
                .retain(|policy| policy.session_id.as_deref() != Some(p.session_id.as_str()))
        });
    }
    Ok(PolicyCloseReply { closed })
}

async fn bind_context(call: Call, p: BindContextParams) -> Result<BindContextReply, RpcError> {
    let dir = std::path::Path::new(&p.working_dir);
    if !dir.is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "working_dir: must be an absolute path, got {:?}",
            p.working_dir
        )));
    }
    if !dir.is_dir() {
        return Err(RpcError::invalid_params(
            "working_dir: is not an existing directory",
        ));
    }
    if p.organization_id.is_some() && p.personal == Some(true) {
        return Err(RpcError::invalid_params(
            "personal: cannot be combined with organization_id",
        ));
    }
    let identity = call.session.identity();
    let refuse = |why: &str| {
        Err(
            RpcError::internal(format!("session.bind_context refused: {why}"))
                .with_data(json!({"reason": "not_bindable"})),
        )
    };
    if identity.grant.is_some() || identity.role == CallerRole::Agent {
        return refuse(
            "an agent or inference-consumer connection takes its context from its authentication",
        );
    }
    if identity.memory_namespace.is_some() {
        return refuse("this connection authenticated with a memory_namespace");
    }
    if let Some(org) = p.organization_id {
        return Err(RpcError::invalid_params(format!(
            "organization_id: {:?} cannot be bound: this daemon serves no organizations (pass personal: true)",
            org.as_str()
        )));
    }
    Ok(BindContextReply {
        work_context: None,
        from_default: false,
    })
}

fn receipt(grant: &Grant, token: Option<String>) -> ConsumerGrant {
    ConsumerGrant {
        consumer_id: grant.consumer_id.clone(),
        token: token.map(Into::into),
        role: "inference_consumer".into(),
        parent_agent_id: grant.parent_agent_id.clone(),
        resource_key: format!("agent:{}", grant.parent_agent_id),
        work_context: None,
        methods: grant.methods.clone(),
        issued_at_ms: grant.issued_at_ms,
        expires_at_ms: grant.expires_at_ms,
    }
}

async fn consumer_issue(call: Call, p: ConsumerIssueParams) -> Result<ConsumerGrant, RpcError> {
    let identity = call.session.identity();
    let agent = match (&identity.agent_id, &identity.grant) {
        (Some(agent), None) => agent.clone(),
        _ => {
            return Err(RpcError::internal(
                "permission denied: only a socket bound to an agent (session.auth {token, agent_id}) issues consumer grants",
            )
            .with_data(json!({"reason": "agent_required"})))
        }
    };
    let methods = p.methods.into_iter().map(|n| n.into_string()).collect();
    let (grant, token) = call.state.access.consumer_grants.issue(
        &agent,
        call.session.id,
        identity.method_allowlist.as_deref(),
        methods,
        p.ttl_secs,
    )?;
    tracing::info!(agent = %agent, consumer = %grant.consumer_id, "consumer grant issued");
    Ok(receipt(&grant, Some(token)))
}

async fn consumer_revoke(
    call: Call,
    p: ConsumerRevokeParams,
) -> Result<ConsumerRevokeReply, RpcError> {
    let revoked = call
        .state
        .access
        .consumer_grants
        .revoke(&p.consumer_id, call.session.id);
    Ok(ConsumerRevokeReply {
        consumer_id: p.consumer_id.into_string(),
        revoked,
    })
}

/// `session.auth {consumer_id, token}`: binds the socket to the grant (its methods only),
/// and closes it when the grant ends.
pub fn consumer_auth(
    session: &Arc<Session>,
    state: &ServerState,
    consumer_id: &str,
    token: &str,
) -> Result<AuthReply, RpcError> {
    let Some(grant) = state.access.consumer_grants.verify(consumer_id, token) else {
        tracing::warn!(
            session = session.id,
            "session.auth: consumer grant mismatch"
        );
        return Err(super::mismatch());
    };
    session.set_identity(Identity {
        authenticated: true,
        role: CallerRole::Agent,
        agent_id: Some(grant.parent_agent_id.clone()),
        memory_namespace: None,
        method_allowlist: Some(grant.methods.clone().into()),
        observer: false,
        grant: Some(grant.clone()),
    });
    let watched = session.clone();
    let ended = grant.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = ended.until_ended() => watched.evict("inference-consumer grant ended"),
            _ = watched.closed.cancelled() => {}
        }
    });
    Ok(AuthReply {
        ok: true,
        auth_enabled: true,
        role: Some("inference_consumer".into()),
        agent_id: None,
        method_allowlist: None,
        memory_namespace: None,
        consumer: Some(receipt(&grant, None)),
    })
}
