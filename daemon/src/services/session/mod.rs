//! `session.auth`: authenticating a connection (reference `session.auth`; docs/protocol-choices.md,
//! "Auth and upgrade checks").
//!
//! Accepted shapes: `{token, agent_id?, memory_namespace?}` and
//! `{host_token, memory_namespace?}`. Anything else — an unknown field, `host_token`
//! mixed with `token`/`agent_id`, the consumer shape `{consumer_id, token}` (not served
//! by this daemon) — is `-32602` naming the field. A wrong credential is
//! `-32603 auth failed: token mismatch` and changes nothing: the session keeps whatever
//! state it had, so an unauthenticated one is closed by its next non-auth call.
//!
//! With auth off every credential is accepted (`auth_enabled: false`); the session keeps
//! the host role it started with, or binds the agent it names.
//!
//! `{token, agent_id}` binds the connection to a registered agent when `token` is that
//! agent's own token (minted by `agents.upsert`; never the daemon token); an unknown agent
//! and a wrong token get the same `auth failed: token mismatch`. The binding attaches the
//! connection to the agent (a newer one replaces an older one, which is closed: see
//! `crate::state::agent_registry`) and echoes the agent's `method_allowlist`, which dispatch then
//! enforces before every handler.

mod scopes;

use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::session::{
    self as m, AuthParams, AuthReply, ClearHaltReply, InitParams, InitReply,
};
use car_proto::methods::CallerRole;
use car_proto::namespace;

use crate::handler::{Call, Routes};
use crate::state::auth::tokens_match;
use crate::state::session::{Identity, Session};
use crate::state::ServerState;

const MAX_ENCODED_NAMESPACE: usize = 250;

fn non_empty(field: &str, v: Option<String>) -> Result<Option<String>, RpcError> {
    match v {
        Some(s) if s.is_empty() => Err(RpcError::invalid_params(format!(
            "{field}: must not be empty"
        ))),
        other => Ok(other),
    }
}

struct AuthRequest {
    credential: Credential,
    memory_namespace: Option<String>,
}

enum Credential {
    Token {
        token: String,
        agent_id: Option<String>,
    },
    Host(String),
    Consumer {
        consumer_id: String,
        token: String,
    },
}

fn parse(p: AuthParams) -> Result<AuthRequest, RpcError> {
    if let Some(consumer_id) = non_empty("consumer_id", p.consumer_id)? {
        for (field, present) in [
            ("host_token", p.host_token.is_some()),
            ("agent_id", p.agent_id.is_some()),
            ("memory_namespace", p.memory_namespace.is_some()),
        ] {
            if present {
                return Err(RpcError::invalid_params(format!(
                    "{field}: cannot be combined with consumer_id"
                )));
            }
        }
        let token = non_empty("token", p.token)?
            .ok_or_else(|| RpcError::invalid_params("token: is required with consumer_id"))?;
        return Ok(AuthRequest {
            credential: Credential::Consumer { consumer_id, token },
            memory_namespace: None,
        });
    }
    let token = non_empty("token", p.token)?;
    let host_token = non_empty("host_token", p.host_token)?;
    let agent_id = non_empty("agent_id", p.agent_id)?;
    let memory_namespace = non_empty("memory_namespace", p.memory_namespace)?;
    if let Some(ns) = &memory_namespace {
        if namespace::encode(ns).len() > MAX_ENCODED_NAMESPACE {
            return Err(RpcError::invalid_params(format!(
                "memory_namespace: is too long ({} bytes encoded, at most {MAX_ENCODED_NAMESPACE})",
                namespace::encode(ns).len()
            )));
        }
    }
    let credential = match (token, host_token) {
        (Some(_), Some(_)) => {
            return Err(RpcError::invalid_params(
                "host_token: cannot be combined with token",
            ))
        }
        (None, Some(_)) if agent_id.is_some() => {
            return Err(RpcError::invalid_params(
                "host_token: cannot be combined with agent_id",
            ))
        }
        (None, Some(host)) => Credential::Host(host),
        (Some(token), None) => Credential::Token { token, agent_id },
        (None, None) => {
            return Err(RpcError::invalid_params(
                "token: is required (or host_token)",
            ))
        }
    };
    Ok(AuthRequest {
        credential,
        memory_namespace,
    })
}

pub fn register(routes: &mut Routes) {
    routes
        .immediate::<m::Auth, _>(auth)
        .add::<m::Init, _, _>(init)
        .add::<m::ClearHalt, _, _>(clear_halt);
    scopes::register(routes);
}

pub(super) fn mismatch() -> RpcError {
    RpcError::internal("auth failed: token mismatch")
}

pub fn auth(
    session: &Arc<Session>,
    state: &ServerState,
    params: AuthParams,
) -> Result<AuthReply, RpcError> {
    let request = parse(params)?;
    let current = session.identity();
    if let Credential::Consumer { consumer_id, token } = &request.credential {
        return scopes::consumer_auth(session, state, consumer_id, token);
    }
    let mut observer = false;
    let (role, agent_id, allowlist) = match (&state.daemon.credentials, request.credential) {
        (_, Credential::Consumer { .. }) => unreachable!("handled above"),
        (
            None,
            Credential::Token {
                agent_id: Some(agent),
                ..
            },
        ) => {
            let allowlist = state
                .agents
                .registry
                .spec(&agent)
                .and_then(|s| s.method_allowlist);
            (CallerRole::Agent, Some(agent), allowlist)
        }
        (None, _) => (current.role, None, None),
        (Some(creds), Credential::Host(presented)) => {
            if !tokens_match(creds.host_token.expose(), &presented) {
                tracing::warn!(session = session.id, "session.auth: host token mismatch");
                return Err(mismatch());
            }
            (CallerRole::Host, None, None)
        }
        (
            Some(_),
            Credential::Token {
                token,
                agent_id: Some(agent),
            },
        ) => match state.agents.registry.verify(&agent, &token) {
            Some(spec) => (CallerRole::Agent, Some(agent), spec.method_allowlist),
            None => {
                // The same answer for an unknown agent and a wrong token: no oracle for
                // which ids are registered.
                tracing::warn!(session = session.id, agent = %agent, "session.auth: agent token mismatch");
                return Err(mismatch());
            }
        },
        (
            Some(creds),
            Credential::Token {
                token,
                agent_id: None,
            },
        ) => {
            if tokens_match(creds.token.expose(), &token) {
                (CallerRole::Operator, None, None)
            } else if tokens_match(creds.dashboard_token.expose(), &token) {
                // The dashboard's read-only token: a host's view, read methods only.
                // Dispatch admits only the declarations marked `observer`.
                observer = true;
                (CallerRole::Host, None, None)
            } else {
                tracing::warn!(session = session.id, "session.auth: token mismatch");
                return Err(mismatch());
            }
        }
    };
    if let Some(previous) = &current.agent_id {
        if agent_id.as_ref() != Some(previous) {
            state.agents.registry.detach(previous, session);
        }
    }
    session.set_identity(Identity {
        authenticated: true,
        role,
        agent_id: agent_id.clone(),
        memory_namespace: request.memory_namespace.clone(),
        method_allowlist: allowlist.clone().map(Into::into),
        observer,
        grant: None,
    });
    if let Some(agent) = &agent_id {
        state
            .agents
            .registry
            .attach(agent, session, state.daemon.auth_enabled());
        state.agents.messages.flush(agent, session);
    }
    tracing::debug!(session = session.id, role = role.as_str(), "authenticated");
    Ok(AuthReply {
        ok: true,
        auth_enabled: state.daemon.auth_enabled(),
        role: if observer {
            Some("observer".to_string())
        } else {
            (state.daemon.auth_enabled() && role == CallerRole::Host).then(|| "host".to_string())
        },
        agent_id,
        // The observer is told which methods it may call (CAR's reply field).
        method_allowlist: if observer {
            Some(observer_reads())
        } else {
            allowlist
        },
        memory_namespace: request.memory_namespace,
        consumer: None,
    })
}

/// The methods the dashboard's observer session may call, from the declarations.
fn observer_reads() -> Vec<String> {
    car_proto::methods::observer_methods()
        .map(|d| d.name().to_string())
        .collect()
}

/// `session.init {tools?, policies?}` → `{session_id, tools_registered,
/// policies_registered}`. Validates everything before installing anything.
async fn init(call: Call, p: InitParams) -> Result<InitReply, RpcError> {
    let tools = crate::state::registration::tool_descriptors(p.tools.unwrap_or_default(), "tools")?;
    let policies = p
        .policies
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, def)| {
            crate::state::registration::policy(
                def,
                &format!("policies[{i}]."),
                &call.state.access.patterns,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (tools_registered, policies_registered) = (tools.len(), policies.len());
    crate::state::registration::install_tools(&call.session, tools)?;
    crate::state::registration::install_policies(&call.session, policies)?;
    Ok(InitReply {
        session_id: call.session.label(),
        tools_registered,
        policies_registered,
    })
}

/// `session.clear_halt` (host) → `{cleared}`: lifts this connection's halt latch.
async fn clear_halt(call: Call, _: NoParams) -> Result<ClearHaltReply, RpcError> {
    let was = call.session.runtime(|rt| rt.halted.take());
    if was.is_some() {
        call.state.data.store.record(crate::state::store::NewEvent {
            kind: "session.halt_cleared",
            session_id: Some(call.session.label()),
            agent_id: call.session.agent_id(),
            ..Default::default()
        });
    }
    Ok(ClearHaltReply {
        cleared: was.is_some(),
    })
}
