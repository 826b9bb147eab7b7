//! Dispatch: from a request to a handler, through the gates, under a deadline.
//!
//! The dispatch map is built from the declarations in `car_proto::methods` and the
//! [`Routes`] the services registered (handed in by the caller: dispatch names no
//! service). A declaration without a route, or a route for an undeclared method, stops
//! the daemon at startup (and fails a unit test first).
//!
//! Gates run in this order, in the connection's reader so they see every earlier frame's
//! effect:
//! 1. auth: before a successful `session.auth`, anything else → `-32001`, then close;
//! 2. the method must be declared and active → else `-32601 unknown method: …`;
//! 3. the declaration's access rule (`car_proto::methods::Access`), before any handler runs: a
//!    session holding the dashboard's read-only token may call only methods declared `observer` →
//!    else `-32603 permission denied`, `data.reason = "read_only"`; a consumer-grant socket only
//!    `grantable` methods it was granted; a session bound to an agent whose registration has a
//!    `method_allowlist` only those methods (and `session.auth`, `server.handshake`) → else `-32601
//!    agent_method_not_allowed` (a notification is dropped); params using a value the declaration
//!    reserves for the daemon (`host.notify {kind: "approval.…"}`) → `-32602`, `data.reason =
//!    "reserved"`, whoever calls;
//! 4. handshake: declarations marked `handshake_required` → `-32005` until negotiated;
//! 5. role: `host`-labelled methods need a host session → `-32603 permission denied` with
//!    `data.reason = "host_required"`;
//! 6. capability: declarations naming a capability → `-32008` unless it was negotiated.
//!
//! A method the approval gate holds then parks until a host approves it
//! ([`crate::state::approval_gate`]). Immediate handlers (`session.auth`, `server.handshake`,
//! `agent.chat.event`) run inline, so a client may
//! pipeline its handshake right behind its auth frame without racing the gate. All others
//! are spawned and bounded by their deadline class; an overrun answers `-32004` and a
//! panic answers `-32603`, and the connection stays usable either way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::{self, CallerRole, DeadlineClass, Declaration, MethodSpec};
use futures_util::FutureExt;
use serde_json::{json, Value};

use crate::handler::{Call, Handler, Routes};
use crate::state::session::Session;

/// The outcome of the gates for one call.
#[derive(Debug)]
pub enum Verdict {
    Run(&'static MethodSpec, Handler),
    Refuse(RpcError),
    /// Unauthenticated call: answer `-32001` (when it has an id), then close.
    CloseUnauthenticated,
    /// The socket's inference-consumer grant ended: answer `-32001`, then close.
    GrantEnded,
}

/// Method name → (declaration, handler) for the methods this daemon serves.
#[derive(Debug)]
pub struct Dispatch {
    routes: BTreeMap<&'static str, (&'static Declaration, Handler)>,
}

impl Dispatch {
    /// Builds the map for the contract's declarations; panics unless every active
    /// declaration has exactly one route (debug routes are dropped when `debug` is off).
    pub fn new(routes: Routes, debug: bool) -> Self {
        Self::for_declarations(routes, methods::active(debug).collect())
    }

    /// Builds the map for `declarations` (the contract's, or a test's superset); panics
    /// unless the routes cover exactly them.
    pub fn for_declarations(routes: Routes, declarations: Vec<&'static Declaration>) -> Self {
        let mut routes = routes.into_inner();
        routes.retain(|name, _| declarations.iter().any(|d| d.name() == *name));
        for decl in &declarations {
            let (_, handler) = routes
                .get(decl.name())
                .unwrap_or_else(|| panic!("method {} has no route", decl.name()));
            assert_eq!(
                matches!(handler, Handler::Immediate(_)),
                decl.spec.deadline == DeadlineClass::Immediate,
                "{}: immediate handlers and the immediate deadline class go together",
                decl.name()
            );
        }
        assert_eq!(routes.len(), declarations.len());
        Dispatch { routes }
    }

    /// The number of routed methods.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Whether `method` has a route.
    pub fn serves(&self, method: &str) -> bool {
        self.routes.contains_key(method)
    }

    /// Applies the gates (see the module docs).
    pub fn gate(&self, session: &Session, method: &str, params: &Value) -> Verdict {
        // The identity is read in place: the gates run on every call, and cloning it (its
        // strings and allowlist) was a measurable share of a small call's cost.
        let verdict = session.with_identity(|identity| {
            if !identity.authenticated && method != "session.auth" {
                return Err(Verdict::CloseUnauthenticated);
            }
            if identity.grant.as_ref().is_some_and(|g| !g.is_live()) {
                return Err(Verdict::GrantEnded);
            }
            let Some((decl, handler)) = self.routes.get(method) else {
                return Err(Verdict::Refuse(RpcError::method_not_found(method)));
            };
            let access = &decl.spec.access;
            if identity.observer && !access.observer {
                return Err(Verdict::Refuse(not_allowed(method, true)));
            }
            // A grant's own list is checked first (CAR's refusal); the declaration's
            // `grantable` bit then holds even if a list ever named more.
            if let Some(allowed) = &identity.method_allowlist {
                if !implicit(method) && !allowed.iter().any(|m| m == method) {
                    return Err(Verdict::Refuse(not_allowed(method, identity.observer)));
                }
            }
            if identity.grant.is_some() && !access.grantable && !implicit(method) {
                return Err(Verdict::Refuse(not_granted(method)));
            }
            if !access.agents && identity.role == CallerRole::Agent {
                return Err(Verdict::Refuse(agents_refused(method)));
            }
            if access.is_reserved(params) {
                return Err(Verdict::Refuse(reserved(method, access)));
            }
            Ok((decl, handler, identity.role))
        });
        let (decl, handler, role) = match verdict {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let spec = &decl.spec;
        session.with_negotiated(|negotiated| {
            if spec.handshake_required && negotiated.is_none() {
                return Verdict::Refuse(RpcError::handshake_required(method));
            }
            if !role.may_call(spec.role) {
                return Verdict::Refuse(
                    RpcError::internal(format!(
                        "permission denied: {method} needs a host session, this session is {}",
                        role.as_str()
                    ))
                    .with_data(json!({"reason": "host_required"})),
                );
            }
            if let Some(cap) = spec.capability {
                let has = negotiated.is_some_and(|caps| caps.iter().any(|c| c == cap));
                if !has {
                    return Verdict::Refuse(RpcError::capability_mismatch(format!(
                        "{method} needs {cap}, which this session did not negotiate"
                    )));
                }
            }
            Verdict::Run(spec, handler.clone())
        })
    }
}

/// Methods every authenticated session may call whatever its allowlist.
fn implicit(method: &str) -> bool {
    method == "session.auth" || method == "server.handshake"
}

/// The refusal for a consumer-grant socket calling what no grant may carry.
fn not_granted(method: &str) -> RpcError {
    RpcError::internal(format!(
        "permission denied: {method} cannot be carried by an inference-consumer grant"
    ))
    .with_data(json!({"reason": "not_grantable", "method": method}))
}

/// The refusal for an agent session calling a method declared not for agents.
fn agents_refused(method: &str) -> RpcError {
    RpcError::internal(format!(
        "permission denied: agent sessions may not call {method}"
    ))
    .with_data(json!({"reason": "agent_not_allowed", "method": method}))
}

/// The refusal for params that use a value only the daemon may use.
fn reserved(method: &str, access: &car_proto::methods::Access) -> RpcError {
    let r = access
        .reserved
        .expect("only called for a reserving declaration");
    RpcError::invalid_params(format!(
        "{}: values starting with {} are reserved for the daemon's own {method} events",
        r.field,
        r.prefixes.join(", ")
    ))
    .with_data(json!({"reason": "reserved", "field": r.field}))
}

/// The refusal for a method outside the session's allowlist.
fn not_allowed(method: &str, observer: bool) -> RpcError {
    if observer {
        return RpcError::internal(format!(
            "permission denied: {method} is not a read, and this session holds the dashboard's read-only token"
        ))
        .with_data(json!({"reason": "read_only", "method": method}));
    }
    RpcError::new(
        car_proto::errors::METHOD_NOT_FOUND,
        format!("agent_method_not_allowed: {method} is not in this agent's method_allowlist"),
    )
    .with_data(json!({"reason": "agent_method_not_allowed", "method": method}))
}

/// The server-side deadline for a call: the flat handler deadline, except
/// `proposal.submit`, whose deadline is derived from the submitted action budgets by the
/// rule both ends share (`car_proto::deadline`).
pub fn deadline(spec: &MethodSpec, params: &Value, config: &crate::config::Config) -> Duration {
    match spec.deadline {
        DeadlineClass::Proposal => car_proto::deadline::proposal_deadline(
            params,
            config.tool_timeout,
            config.handler_timeout,
        ),
        _ => config.handler_timeout,
    }
}

impl crate::handler::Invoke for Dispatch {
    fn close(
        &self,
        session: Arc<Session>,
        state: Arc<crate::state::ServerState>,
    ) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async move { crate::services::on_session_closed(&session, &state).await })
    }

    fn invoke(&self, call: Call, method: &str, params: Value) -> crate::handler::HandlerFuture {
        match self.gate(&call.session, method, &params) {
            Verdict::Run(spec, Handler::Async(handler)) => {
                let call = Call {
                    method: spec,
                    ..call
                };
                Box::pin(run(call, handler, params))
            }
            Verdict::Run(_, Handler::Immediate(handler)) => {
                let outcome = handler(&call.session, &call.state, params);
                Box::pin(async move { outcome })
            }
            Verdict::Refuse(error) => Box::pin(async move { Err(error) }),
            Verdict::CloseUnauthenticated | Verdict::GrantEnded => {
                Box::pin(async { Err(RpcError::auth_required()) })
            }
        }
    }
}

/// Runs an async handler under its deadline, turning a panic into `-32603`.
pub async fn run(
    call: Call,
    handler: Arc<crate::handler::AsyncHandler>,
    params: Value,
) -> Result<Value, RpcError> {
    let method = call.method;
    let budget = deadline(method, &params, &call.state.daemon.config);
    let gated = async move {
        // Checked here too so an ungated call (nearly all) formats no action name.
        if call.state.daemon.config.approvals.holds(method.name) {
            let action = format!("ws.method:{}", method.name);
            crate::state::approval_gate::admit(
                &call.state,
                &call.session,
                method.name,
                action,
                &params,
            )
            .await?;
        }
        handler(call, params).await
    };
    let guarded = std::panic::AssertUnwindSafe(gated).catch_unwind();
    match tokio::time::timeout(budget, guarded).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_panic)) => {
            tracing::error!(method = method.name, "handler panicked");
            Err(RpcError::internal(format!(
                "internal error: handler for {} panicked",
                method.name
            )))
        }
        Err(_) => {
            tracing::warn!(
                method = method.name,
                ?budget,
                "handler exceeded its deadline"
            );
            Err(RpcError::handler_deadline(method.name, budget))
        }
    }
}
