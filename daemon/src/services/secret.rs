//! `secret.*` and `diagnostics.secret_store_activity` over [`car_secrets::SecretStore`]
//! (`CAR_HOME/secrets/`: directory 0700, files 0600, atomic writes; layout and rules in
//! that crate's docs).
//!
//! Roles are CAR's labels: `secret.get` is an `agent` row and every other `secret.*` an
//! `operator` row, so any authenticated session may call them; the activity counters and
//! `secret.grant` / `revoke` / `grants` are host-only. Secrets are owner-scoped for agents
//! ([`crate::state::secret_grants`]): an agent session reads (`get`, `status`, `list`) only what a
//! host granted it and never writes or deletes (`-32603 permission denied`,
//! `data.reason: "not_granted"`). Values cross the daemon as `Redacted` strings: no log line,
//! `host.event` or error carries one. Errors: a malformed field → `-32602` naming it (`key: …`,
//! `value: …`); a missing secret on `get` → `-32602` with `data.reason: "not_found"`; a reserved
//! daemon-private slot → `-32602` with `reserved_private_secret`; a store problem →
//! `-32603` with the crate's reason (`store_unavailable`, `insecure_file`, `corrupt`,
//! `io`).

use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::secret::{
    self as m, ActivityReply, GetReply, GrantParams, GrantReply, GrantsParams, GrantsReply,
    ListReply, PutParams, SecretKeyParams, SecretNameRow, SecretOkReply, StatusReply,
};
use car_secrets::{SecretError, SecretStore};
use serde_json::json;

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Put, _, _>(put)
        .add::<m::Get, _, _>(get)
        .add::<m::Delete, _, _>(delete)
        .add::<m::Status, _, _>(status)
        .add::<m::Available, _, _>(available)
        .add::<m::List, _, _>(list)
        .add::<m::Activity, _, _>(activity)
        .add::<m::Grant, _, _>(grant)
        .add::<m::Revoke, _, _>(revoke)
        .add::<m::Grants, _, _>(grants);
}

/// The agent this call acts for, if any (agent and consumer-grant sockets).
fn calling_agent(call: &Call) -> Option<String> {
    call.session.with_identity(|i| i.agent_id.clone())
}

fn not_granted(agent: &str, what: &str) -> RpcError {
    RpcError::internal(format!(
        "permission denied: agent '{agent}' {what} (a host grants secrets with secret.grant)"
    ))
    .with_data(json!({"reason": "not_granted"}))
}

/// Refuses an agent a secret it was not granted (before the store is touched, so an
/// agent learns nothing about secrets it may not read).
fn check_granted(call: &Call, service: Option<&str>, key: &str) -> Result<(), RpcError> {
    let Some(agent) = calling_agent(call) else {
        return Ok(());
    };
    let id = car_secrets::SecretId::new(service, key).map_err(RpcError::from)?;
    if call.state.access.secret_grants.allows(&agent, &id) {
        Ok(())
    } else {
        Err(not_granted(
            &agent,
            &format!("has no grant for {}/{}", id.service(), id.key()),
        ))
    }
}

/// Refuses agents any write to the store.
fn refuse_agent_write(call: &Call) -> Result<(), RpcError> {
    match calling_agent(call) {
        Some(agent) => Err(not_granted(&agent, "may not write or delete secrets")),
        None => Ok(()),
    }
}

/// Runs `op` on the store off the async workers.
async fn with_store<T: Send + 'static>(
    call: &Call,
    op: impl FnOnce(&SecretStore) -> Result<T, SecretError> + Send + 'static,
) -> Result<T, RpcError> {
    let state = call.state.clone();
    tokio::task::spawn_blocking(move || match &state.access.secrets {
        Some(store) => op(store).map_err(RpcError::from),
        None => Err(
            RpcError::internal("the secret store is unavailable (see the daemon's log)")
                .with_data(json!({"reason": "store_unavailable"})),
        ),
    })
    .await
    .map_err(|e| RpcError::internal(format!("secret store task failed: {e}")))?
}

async fn put(call: Call, p: PutParams) -> Result<SecretOkReply, RpcError> {
    refuse_agent_write(&call)?;
    let id = with_store(&call, move |s| {
        s.put(p.service.as_deref(), &p.key, &p.value)
    })
    .await?;
    tracing::info!(service = id.service(), key = id.key(), "secret stored");
    Ok(SecretOkReply {
        ok: true,
        service: id.service().to_string(),
        key: id.key().to_string(),
        deleted: None,
    })
}

async fn get(call: Call, p: SecretKeyParams) -> Result<GetReply, RpcError> {
    check_granted(&call, p.service.as_deref(), &p.key)?;
    let value = with_store(&call, move |s| s.get(p.service.as_deref(), &p.key)).await?;
    Ok(GetReply { value })
}

async fn delete(call: Call, p: SecretKeyParams) -> Result<SecretOkReply, RpcError> {
    refuse_agent_write(&call)?;
    let (id, deleted) = with_store(&call, move |s| {
        let id = car_secrets::SecretId::new(p.service.as_deref(), &p.key)?;
        let deleted = s.delete(p.service.as_deref(), &p.key)?;
        Ok((id, deleted))
    })
    .await?;
    Ok(SecretOkReply {
        ok: true,
        service: id.service().to_string(),
        key: id.key().to_string(),
        deleted: Some(deleted),
    })
}

async fn status(call: Call, p: SecretKeyParams) -> Result<StatusReply, RpcError> {
    check_granted(&call, p.service.as_deref(), &p.key)?;
    let st = with_store(&call, move |s| s.status(p.service.as_deref(), &p.key)).await?;
    Ok(StatusReply {
        service: st.service,
        key: st.key,
        exists: st.exists,
        bytes: st.bytes,
        updated_at_ms: st.updated_at_ms,
    })
}

async fn available(call: Call, _: NoParams) -> Result<bool, RpcError> {
    match &call.state.access.secrets {
        Some(store) => {
            let store = Arc::clone(store);
            tokio::task::spawn_blocking(move || store.available())
                .await
                .map_err(|e| RpcError::internal(format!("secret store task failed: {e}")))
        }
        None => {
            call.state.access.secret_activity.record_availability();
            Ok(false)
        }
    }
}

async fn list(call: Call, _: NoParams) -> Result<ListReply, RpcError> {
    let names = with_store(&call, |s| s.list()).await?;
    let agent = calling_agent(&call);
    let granted = agent
        .as_deref()
        .map(|a| call.state.access.secret_grants.list(Some(a)));
    Ok(ListReply {
        secrets: names
            .into_iter()
            .filter(|n| {
                granted.as_ref().is_none_or(|rows| {
                    rows.iter()
                        .any(|g| g.service == n.service && g.key == n.key)
                })
            })
            .map(|n| SecretNameRow {
                service: n.service,
                key: n.key,
                exists: n.exists,
            })
            .collect(),
    })
}

async fn activity(call: Call, _: NoParams) -> Result<ActivityReply, RpcError> {
    let a = call.state.access.secret_activity.snapshot();
    Ok(ActivityReply {
        get_attempts: a.get_attempts,
        status_attempts: a.status_attempts,
        availability_attempts: a.availability_attempts,
        write_attempts: a.write_attempts,
        delete_attempts: a.delete_attempts,
    })
}

/// `secret.grant` / `secret.revoke`: the agent must be registered to be granted; a
/// revoke of an unknown agent is allowed (it clears what a removed agent left).
fn change_grant(call: &Call, p: GrantParams, grant: bool) -> Result<GrantReply, RpcError> {
    if grant && call.state.agents.registry.spec(&p.agent_id).is_none() {
        return Err(RpcError::invalid_params(format!(
            "agent_id: no registered agent '{}'",
            p.agent_id.as_str()
        ))
        .with_data(json!({"reason": "not_found"})));
    }
    let id = car_secrets::SecretId::new(p.service.as_deref(), &p.key).map_err(RpcError::from)?;
    let (row, changed) = call
        .state
        .access
        .secret_grants
        .change(&p.agent_id, &id, grant)?;
    tracing::info!(agent = %row.agent_id, service = %row.service, key = %row.key, grant, changed, "secret grant changed");
    Ok(GrantReply {
        ok: true,
        changed,
        grant: row,
    })
}

async fn grant(call: Call, p: GrantParams) -> Result<GrantReply, RpcError> {
    change_grant(&call, p, true)
}

async fn revoke(call: Call, p: GrantParams) -> Result<GrantReply, RpcError> {
    change_grant(&call, p, false)
}

async fn grants(call: Call, p: GrantsParams) -> Result<GrantsReply, RpcError> {
    Ok(GrantsReply {
        grants: call.state.access.secret_grants.list(p.agent_id.as_deref()),
    })
}
