//! Handler types: what a service implements and registers, and how one service calls
//! another's method ([`Invoke`]). The layer between services and the state: services and
//! dispatch depend on it; it depends only on `state` (the layering test in `lib.rs`).
//!
//! A service registers one typed function per declared method with [`Routes::add`] (or
//! [`Routes::immediate`] for the two methods answered inline in the reader). The route
//! decodes the request's params into the declaration's `Params` type before the handler
//! runs (`car_proto::methods::decode_params`: unknown fields ignored, `null` = absent, a
//! wrong type is `-32602` naming the field path) and encodes the typed result, so a
//! handler never sees raw JSON.

pub mod agent_runner;
pub mod declarative;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::{decode_params, Declaration, Method, MethodSpec};
use serde_json::Value;

use crate::state::session::Session;
use crate::state::ServerState;

/// The future an async route returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send>>;

/// How a service runs another namespace's method: by name through dispatch (its gates,
/// access rule and deadline, as the same session), never by importing that service (the
/// layering rule in the crate docs). Dispatch implements it; [`Call::invoke`] uses it.
pub trait Invoke: Send + Sync + std::fmt::Debug {
    fn invoke(&self, call: Call, method: &str, params: Value) -> HandlerFuture;

    /// Tears down a connection-less session the daemon made (a declarative agent's) as a
    /// closed connection is torn down: its open runs marked incomplete, its routes dropped.
    fn close(
        &self,
        session: Arc<Session>,
        state: Arc<ServerState>,
    ) -> futures_util::future::BoxFuture<'static, ()>;
}

/// What a spawned handler gets.
#[derive(Debug, Clone)]
pub struct Call {
    pub session: Arc<Session>,
    pub state: Arc<ServerState>,
    pub method: &'static MethodSpec,
    /// The request's JSON-RPC id (`None` for a notification); inference heartbeats and
    /// cancellation name the call by it.
    pub id: Option<Value>,
    /// The dispatch table, for [`Call::invoke`].
    pub invoke: Arc<dyn Invoke>,
}

impl Call {
    /// Runs method `M` for this call's session through dispatch and decodes its result.
    pub async fn invoke<M: Method>(&self, params: M::Params) -> Result<M::Result, RpcError>
    where
        M::Params: serde::Serialize,
        M::Result: serde::de::DeserializeOwned,
    {
        let params = serde_json::to_value(params).map_err(|e| {
            RpcError::internal(format!("{} params do not encode: {e}", M::SPEC.name))
        })?;
        let value = self
            .invoke
            .invoke(self.clone(), M::SPEC.name, params)
            .await?;
        serde_json::from_value(value).map_err(|e| {
            RpcError::internal(format!("{} result does not decode: {e}", M::SPEC.name))
        })
    }
}

pub type AsyncHandler = dyn Fn(Call, Value) -> HandlerFuture + Send + Sync;
type ImmediateFn =
    dyn Fn(&Arc<Session>, &ServerState, Value) -> Result<Value, RpcError> + Send + Sync;

/// A method's implementation with its types erased.
#[derive(Clone)]
pub enum Handler {
    /// Runs inline in the reader; must not block.
    Immediate(Arc<ImmediateFn>),
    /// Spawned, under the method's deadline.
    Async(Arc<AsyncHandler>),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handler::Immediate(_) => "Handler::Immediate",
            Handler::Async(_) => "Handler::Async",
        })
    }
}

fn encode<T: serde::Serialize>(method: &str, value: T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(method, error = %e, "result does not encode");
        RpcError::internal(format!(
            "internal error: {method} result does not encode: {e}"
        ))
    })
}

/// Decodes params, refusing an array where the params schema has no array form (serde
/// would otherwise read a struct positionally).
fn decode<T: serde::de::DeserializeOwned>(params: Value, arrays: bool) -> Result<T, RpcError> {
    if params.is_array() && !arrays {
        return Err(RpcError::invalid_params(
            "params: must be an object, got an array",
        ));
    }
    decode_params(params)
}

/// Method name → handler, filled by the services.
#[derive(Debug, Default)]
pub struct Routes {
    routes: BTreeMap<&'static str, (&'static Declaration, Handler)>,
}

impl Routes {
    pub fn new() -> Self {
        Routes::default()
    }

    /// Files `handler` under `M`'s declaration: the contract's own (so dispatch and
    /// `server.schema` share one value), or for a method outside the contract (a test's
    /// throwaway declaration) `M`'s, which dispatch then refuses unless it was told of it.
    fn insert<M: Method>(&mut self, handler: Handler) {
        let name = M::SPEC.name;
        let decl = car_proto::methods::lookup(name)
            .unwrap_or_else(|| Box::leak(Box::new(Declaration::of::<M>())));
        let previous = self.routes.insert(name, (decl, handler));
        assert!(previous.is_none(), "two routes for {name}");
    }

    /// Registers the async handler of method `M`.
    pub fn add<M, F, Fut>(&mut self, handler: F) -> &mut Self
    where
        M: Method,
        F: Fn(Call, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<M::Result, RpcError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let arrays = car_proto::methods::accepts_array::<M::Params>();
        let erased = move |call: Call, params: Value| -> HandlerFuture {
            let handler = handler.clone();
            Box::pin(async move {
                let params: M::Params = decode(params, arrays)?;
                let result = handler(call, params).await?;
                encode(M::SPEC.name, result)
            })
        };
        self.insert::<M>(Handler::Async(Arc::new(erased)));
        self
    }

    /// Registers the inline handler of method `M` (answered in the connection's reader).
    pub fn immediate<M, F>(&mut self, handler: F) -> &mut Self
    where
        M: Method,
        F: Fn(&Arc<Session>, &ServerState, M::Params) -> Result<M::Result, RpcError>
            + Send
            + Sync
            + 'static,
    {
        let arrays = car_proto::methods::accepts_array::<M::Params>();
        let erased = move |session: &Arc<Session>, state: &ServerState, params: Value| {
            let params: M::Params = decode(params, arrays)?;
            encode(M::SPEC.name, handler(session, state, params)?)
        };
        self.insert::<M>(Handler::Immediate(Arc::new(erased)));
        self
    }

    /// The registered routes.
    pub fn into_inner(self) -> BTreeMap<&'static str, (&'static Declaration, Handler)> {
        self.routes
    }
}
