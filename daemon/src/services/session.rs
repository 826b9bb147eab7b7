//! `session.auth`: authenticating a connection (reference `session.auth`, DECISIONS 7–8).
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
//! `agent_id` binds the connection to a lifecycle agent, whose per-agent token is minted
//! when the agent is registered. This daemon keeps no agent registry yet, so with auth on
//! every `agent_id` is refused (`auth failed: unknown agent …`) rather than bound on the
//! strength of the daemon token.

use car_proto::errors::RpcError;
use car_proto::methods::CallerRole;
use car_proto::namespace;
use serde_json::{json, Map, Value};

use super::object;
use crate::auth::tokens_match;
use crate::session::{Identity, Session};
use crate::state::ServerState;

const FIELDS: &[&str] = &[
    "token",
    "host_token",
    "agent_id",
    "memory_namespace",
    "consumer_id",
];
/// The encoded namespace plus `.json` must fit a 255-byte file name.
const MAX_ENCODED_NAMESPACE: usize = 250;

fn string_field(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, RpcError> {
    match obj.get(field) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(RpcError::invalid_params(format!(
            "{field} must not be empty"
        ))),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{field} must be a string"
        ))),
    }
}

/// The validated request.
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
}

fn parse(params: Value) -> Result<AuthRequest, RpcError> {
    let obj = object(params)?;
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(RpcError::invalid_params(format!("unknown field {unknown}")));
    }
    if obj.contains_key("consumer_id") {
        return Err(RpcError::invalid_params(
            "consumer_id: inference-consumer credentials are not served by this daemon",
        ));
    }
    let token = string_field(&obj, "token")?;
    let host_token = string_field(&obj, "host_token")?;
    let agent_id = string_field(&obj, "agent_id")?;
    let memory_namespace = string_field(&obj, "memory_namespace")?;
    if let Some(ns) = &memory_namespace {
        if namespace::encode(ns).len() > MAX_ENCODED_NAMESPACE {
            return Err(RpcError::invalid_params(format!(
                "memory_namespace is too long ({} bytes encoded, at most {MAX_ENCODED_NAMESPACE})",
                namespace::encode(ns).len()
            )));
        }
    }
    let credential = match (token, host_token) {
        (Some(_), Some(_)) => {
            return Err(RpcError::invalid_params(
                "host_token cannot be combined with token",
            ))
        }
        (None, Some(_)) if agent_id.is_some() => {
            return Err(RpcError::invalid_params(
                "host_token cannot be combined with agent_id",
            ))
        }
        (None, Some(host)) => Credential::Host(host),
        (Some(token), None) => Credential::Token { token, agent_id },
        (None, None) => {
            return Err(RpcError::invalid_params(
                "token is required (or host_token)",
            ))
        }
    };
    Ok(AuthRequest {
        credential,
        memory_namespace,
    })
}

fn mismatch() -> RpcError {
    RpcError::internal("auth failed: token mismatch")
}

pub fn auth(session: &Session, state: &ServerState, params: Value) -> Result<Value, RpcError> {
    let request = parse(params)?;
    let current = session.identity();
    let (role, agent_id) = match (&state.credentials, request.credential) {
        (
            None,
            Credential::Token {
                agent_id: Some(agent),
                ..
            },
        ) => (CallerRole::Agent, Some(agent)),
        (None, _) => (current.role, None),
        (Some(creds), Credential::Host(presented)) => {
            if !tokens_match(&creds.host_token, &presented) {
                tracing::warn!(session = session.id, "session.auth: host token mismatch");
                return Err(mismatch());
            }
            (CallerRole::Host, None)
        }
        (
            Some(_),
            Credential::Token {
                agent_id: Some(agent),
                ..
            },
        ) => {
            tracing::warn!(session = session.id, agent = %agent, "session.auth: unknown agent");
            return Err(RpcError::internal(format!(
                "auth failed: unknown agent {agent:?}"
            )));
        }
        (
            Some(creds),
            Credential::Token {
                token,
                agent_id: None,
            },
        ) => {
            if !tokens_match(&creds.token, &token) {
                tracing::warn!(session = session.id, "session.auth: token mismatch");
                return Err(mismatch());
            }
            (CallerRole::Operator, None)
        }
    };
    session.set_identity(Identity {
        authenticated: true,
        role,
        agent_id: agent_id.clone(),
        memory_namespace: request.memory_namespace.clone(),
    });
    tracing::debug!(session = session.id, role = role.as_str(), "authenticated");
    let mut reply = json!({"ok": true, "auth_enabled": state.auth_enabled()});
    if state.auth_enabled() && role == CallerRole::Host {
        reply["role"] = json!("host");
    }
    if let Some(agent) = agent_id {
        reply["agent_id"] = json!(agent);
    }
    if let Some(ns) = request.memory_namespace {
        reply["memory_namespace"] = json!(ns);
    }
    Ok(reply)
}

/// `session.init {tools?, policies?}` → `{tools, policies}` (the counts after install).
/// Validates everything before installing anything.
pub fn init(call: crate::dispatch::Call, params: Value) -> crate::dispatch::HandlerFuture {
    Box::pin(async move {
        let p = super::params::Params::new(params)?.only(&["tools", "policies"])?;
        let tools = match p.value("tools") {
            Some(Value::Array(items)) => {
                super::tools::parse_descriptors(&Value::Array(items.clone()), "tools")?
            }
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "tools must be an array of tool descriptors",
                ))
            }
            None => Vec::new(),
        };
        let policies = match p.value("policies") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| super::policy::parse_policy(v, &format!("policies[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "policies must be an array of policies",
                ))
            }
            None => Vec::new(),
        };
        let tool_count = super::tools::install(&call, tools)?;
        let policy_count = super::policy::install(&call, policies)?;
        Ok(json!({"tools": tool_count, "policies": policy_count}))
    })
}

/// `session.clear_halt` (host role) → `{cleared}`: lifts this connection's halt latch.
pub fn clear_halt(call: crate::dispatch::Call, params: Value) -> crate::dispatch::HandlerFuture {
    Box::pin(async move {
        super::params::Params::new(params)?.only(&[])?;
        let was = call.session.runtime(|rt| rt.halted.take());
        if was.is_some() {
            call.state.store.record(crate::store::NewEvent {
                kind: "session.halt_cleared",
                session_id: Some(call.session.label()),
                ..Default::default()
            });
        }
        Ok(json!({"cleared": was.is_some()}))
    })
}
