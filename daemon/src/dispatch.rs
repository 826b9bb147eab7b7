//! Dispatch: from a request to a handler, through the gates, under a deadline.
//!
//! The dispatch map is built from the method table (`car_proto::methods`) and the
//! handler each service registers for a row; a row without a handler, or a handler
//! without a row, stops the daemon at startup (and fails a unit test first).
//!
//! Gates run in this order, in the connection's reader so they see every earlier frame's
//! effect (DECISIONS 7, 10):
//! 1. auth: before a successful `session.auth`, anything else → `-32001`, then close;
//! 2. the method must be an active row → else `-32601 unknown method: …`;
//! 3. role: the session's role must be allowed to call the row's role;
//! 4. handshake: rows marked `handshake_required` → `-32005` until negotiated;
//! 5. capability: rows naming a capability → `-32008` unless it was negotiated.
//!
//! Immediate handlers (`session.auth`, `server.handshake`) then run inline, so a client may
//! pipeline its handshake right behind its auth frame without racing the gate. All others
//! are spawned and bounded by their deadline class; an overrun answers `-32004` and a
//! panic answers `-32603`, and the connection stays usable either way.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::{self, DeadlineClass, MethodSpec};
use futures_util::FutureExt;
use serde_json::Value;

use crate::services;
use crate::session::Session;
use crate::state::ServerState;

/// The future an async handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send>>;

/// What a spawned handler gets.
#[derive(Debug, Clone)]
pub struct Call {
    pub session: Arc<Session>,
    pub state: Arc<ServerState>,
    pub method: &'static MethodSpec,
    /// The request's JSON-RPC id (`None` for a notification); inference heartbeats and
    /// cancellation name the call by it.
    pub id: Option<Value>,
}

/// A method's implementation.
#[derive(Clone, Copy)]
pub enum Handler {
    /// Runs inline in the reader; must not block.
    Immediate(fn(&Session, &ServerState, Value) -> Result<Value, RpcError>),
    /// Spawned, under the method's deadline.
    Async(fn(Call, Value) -> HandlerFuture),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handler::Immediate(_) => "Handler::Immediate",
            Handler::Async(_) => "Handler::Async",
        })
    }
}

/// The outcome of the gates for one call.
#[derive(Debug)]
pub enum Verdict {
    Run(&'static MethodSpec, Handler),
    Refuse(RpcError),
    /// Unauthenticated call: answer `-32001` (when it has an id), then close.
    CloseUnauthenticated,
}

/// Method name → (row, handler) for the rows this daemon serves.
#[derive(Debug)]
pub struct Dispatch {
    routes: HashMap<&'static str, (&'static MethodSpec, Handler)>,
}

impl Dispatch {
    /// Builds the map from the active rows; panics on a row without a handler.
    pub fn new(debug: bool) -> Self {
        let routes = methods::active(debug)
            .map(|spec| {
                let handler = services::handler_for(spec.name)
                    .unwrap_or_else(|| panic!("method table row {} has no handler", spec.name));
                let immediate = matches!(handler, Handler::Immediate(_));
                assert_eq!(
                    immediate,
                    spec.deadline == DeadlineClass::Immediate,
                    "{}: immediate handlers and the immediate deadline class go together",
                    spec.name
                );
                (spec.name, (spec, handler))
            })
            .collect();
        Dispatch { routes }
    }

    /// Applies the gates (see the module docs).
    pub fn gate(&self, session: &Session, method: &str) -> Verdict {
        let identity = session.identity();
        if !identity.authenticated && method != "session.auth" {
            return Verdict::CloseUnauthenticated;
        }
        let Some(&(spec, handler)) = self.routes.get(method) else {
            return Verdict::Refuse(RpcError::method_not_found(method));
        };
        if !identity.role.may_call(spec.role) {
            return Verdict::Refuse(RpcError::internal(format!(
                "permission denied: {method} needs the {} role, this session is {}",
                spec.role.as_str(),
                identity.role.as_str()
            )));
        }
        let negotiated = session.negotiated();
        if spec.handshake_required && negotiated.is_none() {
            return Verdict::Refuse(RpcError::handshake_required(method));
        }
        if let Some(cap) = spec.capability {
            let has = negotiated
                .as_ref()
                .is_some_and(|caps| caps.iter().any(|c| c == cap));
            if !has {
                return Verdict::Refuse(RpcError::capability_mismatch(format!(
                    "{method} needs {cap}, which this session did not negotiate"
                )));
            }
        }
        Verdict::Run(spec, handler)
    }
}

/// The server-side deadline for a call of this row: the flat handler deadline, except
/// `proposal.submit`, whose deadline is derived from the submitted action budgets.
pub fn deadline(spec: &MethodSpec, params: &Value, config: &crate::config::Config) -> Duration {
    match spec.deadline {
        DeadlineClass::Proposal => services::proposal::derived_deadline(params, config),
        _ => config.handler_timeout,
    }
}

/// Runs an async handler under its deadline, turning a panic into `-32603`.
pub async fn run(
    call: Call,
    handler: fn(Call, Value) -> HandlerFuture,
    params: Value,
) -> Result<Value, RpcError> {
    let method = call.method;
    let budget = deadline(method, &params, &call.state.config);
    let guarded = std::panic::AssertUnwindSafe(handler(call, params)).catch_unwind();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_handler_and_every_handler_a_row() {
        let all = Dispatch::new(true);
        assert_eq!(all.routes.len(), methods::METHODS.len());
        for name in services::HANDLED {
            assert!(
                methods::lookup(name).is_some(),
                "handler {name} has no method table row"
            );
        }
        assert_eq!(services::HANDLED.len(), methods::METHODS.len());
        let plain = Dispatch::new(false);
        assert!(plain.routes.keys().all(|m| !m.starts_with("debug.")));
    }
}
