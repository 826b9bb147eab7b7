//! Handler types: what a service implements and registers. A leaf module: services and
//! dispatch both depend on it; it depends on neither.
//!
//! A service registers one typed function per declared method with [`Routes::add`] (or
//! [`Routes::immediate`] for the two methods answered inline in the reader). The route
//! decodes the request's params into the declaration's `Params` type before the handler
//! runs (`car_proto::methods::decode_params`: unknown fields ignored, `null` = absent, a
//! wrong type is `-32602` naming the field path) and encodes the typed result, so a
//! handler never sees raw JSON.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::{decode_params, Declaration, Method, MethodSpec};
use serde_json::Value;

use crate::session::Session;
use crate::state::ServerState;

/// The future an async route returns.
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

#[cfg(test)]
mod tests {
    /// The layering rule: services depend on this leaf module, dispatch names no service,
    /// and this module names neither.
    #[test]
    fn dispatch_and_services_do_not_import_each_other() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let read = |f: &str| std::fs::read_to_string(src.join(f)).unwrap();
        let code = |text: String| -> String {
            text.lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let dispatch = code(read("dispatch.rs"));
        assert!(!dispatch.contains("services"), "dispatch.rs names services");
        let handler = code(read("handler.rs"));
        let handler = handler.split("#[cfg(test)]").next().unwrap();
        assert!(
            !handler.contains("crate::services") && !handler.contains("crate::dispatch"),
            "handler.rs must stay a leaf"
        );
        for entry in std::fs::read_dir(src.join("services")).unwrap() {
            let path = entry.unwrap().path();
            let files: Vec<std::path::PathBuf> = if path.is_dir() {
                std::fs::read_dir(&path)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect()
            } else {
                vec![path]
            };
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                let text = text.split("#[cfg(test)]").next().unwrap();
                assert!(
                    !code(text.to_string()).contains("crate::dispatch"),
                    "{} imports dispatch",
                    file.display()
                );
            }
        }
    }
}
