//! `NativeRuntime`: one `car-daemon-client` [`Client`] exposed to JavaScript.
//!
//! This module owns the class `index.js` wraps as `CarRuntime`: construction from explicit
//! settings over the environment, the generic bridge (`call`, `callStreaming`,
//! `callHostManagement`), the typed-member path (`callMember`, which runs
//! `car_daemon_client::typed` for every generated member), `connectionEpoch`, handler
//! registration, `executeProposal`, `runAgent` (the shared agent loop) and `disconnect`.
//! Every call returns a Promise that settles on the JS thread: with the result, or rejected
//! with the error object [`crate::error::to_js`] builds from the client's structured
//! error. It holds no protocol logic. Every client starts with the process-wide tool
//! handler and tool-cancel listener wired in, so `registerToolHandler` serves every
//! runtime, including ones created earlier; likewise every client serves `agent.chat`
//! while a chat handler is registered (see `chat`; the shared client routes an
//! `agent.chat.event` call for a turn it is serving into that turn).
//!
//! `#[napi]` expands to unsafe FFI glue, hence the module-level `allow(unsafe_code)`; no
//! hand-written code here is unsafe.
#![allow(unsafe_code)]

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use car_daemon_client::{
    AgentConfig, CallOptions, Client, ClientConfig, Error, HandlerResult, Naming, Projected,
    ToolCall,
};
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};
use napi::Env;
use napi_derive::napi;
use serde_json::Value;

use crate::callbacks::{self, JsHandler, JsListener, JsStreamListener};
use crate::calls::{self, JsCompletion};
use crate::chat;
use crate::error::{invalid_argument, parse_json, to_js};

/// The native client behind `CarRuntime` (see `index.js`).
#[napi]
pub struct NativeRuntime {
    /// Shared so the chat module can reach every live runtime's client (`chat::track`).
    client: Arc<Client>,
    /// Settles `startCall` / `startMember` calls (see `calls`); set once by `index.js`.
    completion: OnceLock<Arc<JsCompletion>>,
}

impl std::fmt::Debug for NativeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeRuntime")
            .field("client", &self.client)
            .finish()
    }
}

fn non_empty(name: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(invalid_argument(format!(
            "{name} must be a non-empty string"
        )));
    }
    Ok(())
}

/// A Promise settled by `fut`: resolved with `done(value)`, or rejected with the package's
/// error class for the client error.
fn settle<'env, T, V>(
    env: &'env Env,
    fut: impl Future<Output = Result<T, Error>> + Send + 'static,
    done: impl FnOnce(T) -> V + 'static,
) -> napi::Result<PromiseRaw<'env, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
{
    env.spawn_future_with_callback(async move { Ok(fut.await) }, move |env, outcome| {
        outcome.map(done).map_err(|e| to_js(env, e))
    })
}

/// The tool function of one `execute_proposal` or `run_agent` run: each call goes to the
/// wrapped JS `tool_fn` as its call JSON.
///
/// The client runs a run's tool function on its blocking pool (never on a tokio worker or
/// the JS thread), so waiting there for the JS Promise is allowed and blocks no other task;
/// the JS function itself runs on the JS thread, reached through the threadsafe function.
fn serve_tools(tool_fn: JsHandler) -> impl Fn(ToolCall) -> HandlerResult + Send + Sync + Clone {
    let tool_fn = Arc::new(tool_fn);
    let runtime = tokio::runtime::Handle::current();
    move |call: ToolCall| {
        let tool_fn = tool_fn.clone();
        let call_json = call.to_call_json().to_string();
        runtime.block_on(async move { callbacks::invoke(&tool_fn, call_json).await })
    }
}

fn install_global_tool_handler(client: &Client) {
    client.register_async_handler("tools.execute", callbacks::run_global_tool);
}

fn install_global_cancel_listener(client: &Client) {
    client.register_tool_cancel_handler(callbacks::deliver_tool_cancel);
}

#[napi]
impl NativeRuntime {
    /// A runtime that connects on its first call. Explicit settings win over
    /// `CAR_DAEMON_URL`, `CAR_AUTH_TOKEN` / the token file and `CAR_MEMORY_NAMESPACE`.
    #[napi(constructor)]
    pub fn new(
        url: Option<String>,
        token: Option<String>,
        memory_namespace: Option<String>,
    ) -> napi::Result<Self> {
        let mut config = ClientConfig::from_env();
        let check = |name: &str, v: &str| {
            non_empty(name, v).map_err(|e| napi::Error::from_reason(e.to_string()))
        };
        if let Some(url) = url {
            check("url", &url)?;
            config = config.url(url);
        }
        if let Some(token) = token {
            check("token", &token)?;
            config = config.token(token);
        }
        if let Some(ns) = memory_namespace {
            check("memoryNamespace", &ns)?;
            config = config.memory_namespace(ns);
        }
        config.client_version = format!("car-runtime-node/{}", car_proto::CAR_VERSION);
        let client = Arc::new(Client::new(config));
        install_global_tool_handler(&client);
        install_global_cancel_listener(&client);
        chat::track(&client);
        Ok(Self {
            client,
            completion: OnceLock::new(),
        })
    }

    /// Installs the function that settles `startCall` / `startMember` calls:
    /// `(id, result, error) => void` (see `calls`). Only the first one counts.
    #[napi]
    pub fn set_completion(&self, sink: JsCompletion) {
        let _ = self.completion.set(Arc::new(sink));
    }

    fn sink(&self) -> napi::Result<&Arc<JsCompletion>> {
        self.completion
            .get()
            .ok_or_else(|| napi::Error::from_reason("setCompletion was not called"))
    }

    /// `call` settled through the completion function under `id`: resolves to the result
    /// JSON string.
    #[napi]
    pub fn start_call(
        &self,
        id: u32,
        method: String,
        params_json: String,
        timeout_ms: Option<u32>,
    ) -> napi::Result<()> {
        let client = self.client.clone();
        calls::start(self.sink()?, id, async move {
            non_empty("method", &method)?;
            let params = parse_json("paramsJson", &params_json)?;
            let options = match timeout_ms {
                Some(0) => return Err(invalid_argument("timeoutMs must be a positive integer")),
                Some(ms) => CallOptions::timeout(Duration::from_millis(u64::from(ms))),
                None => CallOptions::default(),
            };
            let result = client.call_with(&method, params, options).await?;
            Ok(Some(Either::A(result.to_string())))
        });
        Ok(())
    }

    /// `callMember` settled through the completion function under `id`: resolves to the
    /// projected result (`undefined` for a member that returns nothing).
    #[napi]
    pub fn start_member(
        &self,
        id: u32,
        method: String,
        member: String,
        args: Vec<Option<Value>>,
    ) -> napi::Result<()> {
        let client = self.client.clone();
        calls::start(self.sink()?, id, async move {
            Ok(
                match client
                    .call_member(&method, &member, &args, Naming::Camel)
                    .await?
                {
                    Projected::Unit => None,
                    other => Some(Either::B(other.into_value())),
                },
            )
        });
        Ok(())
    }

    /// Calls `method` with `paramsJson`; `timeoutMs` replaces the method's default wait.
    #[napi]
    pub fn call<'env>(
        &self,
        env: &'env Env,
        method: String,
        params_json: String,
        timeout_ms: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                non_empty("method", &method)?;
                let params = parse_json("paramsJson", &params_json)?;
                let options = match timeout_ms {
                    Some(0) => {
                        return Err(invalid_argument("timeoutMs must be a positive integer"))
                    }
                    Some(ms) => CallOptions::timeout(Duration::from_millis(u64::from(ms))),
                    None => CallOptions::default(),
                };
                client.call_with(&method, params, options).await
            },
            |v| v.to_string(),
        )
    }

    /// Calls the typed member `member` (CAR's Python name) of `method` with `args` in
    /// declaration order (`null` for an absent optional argument); resolves to the
    /// projected result (`undefined` for a member that returns nothing).
    #[napi]
    pub fn call_member<'env>(
        &self,
        env: &'env Env,
        method: String,
        member: String,
        args: Vec<Option<Value>>,
    ) -> napi::Result<PromiseRaw<'env, Either<Value, ()>>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                client
                    .call_member(&method, &member, &args, Naming::Camel)
                    .await
            },
            |projected| match projected {
                Projected::Unit => Either::B(()),
                other => Either::A(other.into_value()),
            },
        )
    }

    /// The current connection's epoch, connecting first when there is none; it changes
    /// whenever a new daemon session is established.
    #[napi]
    pub fn connection_epoch<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, f64>> {
        let client = self.client.clone();
        // Epochs count connections; a JS number holds them exactly.
        settle(env, async move { client.connection_epoch().await }, |e| {
            e as f64
        })
    }

    /// Calls a streaming method (`infer_stream`): `onEvent` gets the params JSON of each of
    /// this call's `inference.stream.event` notifications, in order, then `null` once. The
    /// Promise settles only after that `null` has run in JS, so every event has been
    /// delivered first (events and the marker share one FIFO queue); streams running
    /// concurrently on one runtime never see each other's events.
    #[napi]
    pub fn call_streaming<'env>(
        &self,
        env: &'env Env,
        method: String,
        params_json: String,
        on_event: JsStreamListener,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                non_empty("method", &method)?;
                let params = parse_json("paramsJson", &params_json)?;
                // `call_streaming` runs this on the calling task: it only queues (never
                // waits for JS).
                let outcome = client
                    .call_streaming(&method, params, CallOptions::default(), |event| {
                        callbacks::stream_event(&on_event, &method, event.to_string());
                    })
                    .await;
                // Also after a failure: events queued before it reach JS before the
                // rejection.
                callbacks::flush_stream(&on_event, &method).await;
                outcome
            },
            |v| v.to_string(),
        )
    }

    /// Calls a host-management method over the host-token connection.
    #[napi]
    pub fn call_host_management<'env>(
        &self,
        env: &'env Env,
        method: String,
        params_json: String,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                non_empty("method", &method)?;
                let params = parse_json("paramsJson", &params_json)?;
                client.call_host_management(&method, params).await
            },
            |v| v.to_string(),
        )
    }

    /// Serves daemon→client requests named `method` with a wrapped JS handler.
    #[napi]
    pub fn register_handler(&self, method: String, handler: JsHandler) {
        let handler = Arc::new(handler);
        self.client.register_async_handler(&method, move |params| {
            let handler = handler.clone();
            async move { callbacks::invoke(&handler, params.to_string()).await }
        });
    }

    /// Removes the handler for `method`; for `tools.execute` the process-wide tool handler
    /// serves again.
    #[napi]
    pub fn unregister_handler(&self, method: String) {
        self.client.unregister_handler(&method);
        if method == "tools.execute" {
            install_global_tool_handler(&self.client);
        }
    }

    /// Delivers notifications named `method` to a wrapped JS listener, in arrival order.
    #[napi]
    pub fn register_notification_handler(&self, method: String, listener: JsListener) {
        let name = method.clone();
        self.client
            .register_notification_handler(&method, move |params| {
                callbacks::notify(&listener, &name, params.to_string())
            });
    }

    #[napi]
    pub fn unregister_notification_handler(&self, method: String) {
        self.client.unregister_notification_handler(&method);
        if method == "tools.cancel" {
            install_global_cancel_listener(&self.client);
        }
    }

    /// Runs a proposal whose `tools.execute` calls go to `toolFn` (wrapped by `index.js`).
    #[napi]
    pub fn execute_proposal<'env>(
        &self,
        env: &'env Env,
        proposal_json: String,
        session_id: Option<String>,
        tool_fn: JsHandler,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                let proposal = parse_json("proposalJson", &proposal_json)?;
                if !proposal.is_object() {
                    return Err(invalid_argument("proposalJson must be a JSON object"));
                }
                if let Some(id) = &session_id {
                    non_empty("sessionId", id)?;
                }
                client
                    .execute_proposal(proposal, session_id, serve_tools(tool_fn))
                    .await
            },
            |v| v.to_string(),
        )
    }

    /// Runs CAR's agent loop (`car_daemon_client::agent_loop`) for `configJson` (CAR's
    /// `AgentLoopConfig` in its wire shape) on `goal`; the tool calls go to `toolFn`
    /// (wrapped by `index.js`), `maxTurns` overrides the config's. Resolves to CAR's
    /// `AgentOutcome` as JSON.
    #[napi]
    pub fn run_agent<'env>(
        &self,
        env: &'env Env,
        config_json: String,
        goal: String,
        max_turns: Option<u32>,
        tool_fn: JsHandler,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        settle(
            env,
            async move {
                let config: AgentConfig =
                    serde_json::from_value(parse_json("configJson", &config_json)?)
                        .map_err(|e| invalid_argument(format!("configJson: {e}")))?;
                non_empty("goal", &goal)?;
                if max_turns == Some(0) {
                    return Err(invalid_argument("maxTurns must be a positive integer"));
                }
                let outcome = client
                    .run_agent(&config, &goal, max_turns, serve_tools(tool_fn))
                    .await?;
                // Plain strings, numbers and JSON values: serialising cannot fail.
                serde_json::to_string(&outcome).map_err(|e| Error::UnexpectedResult {
                    method: "runs.complete".into(),
                    detail: format!("the agent outcome is not serialisable: {e}"),
                })
            },
            |v| v,
        )
    }

    /// Drops the connections (pending calls reject as closed); the next call reconnects.
    /// Handlers stay registered.
    #[napi]
    pub fn disconnect(&self) {
        self.client.disconnect();
    }

    #[napi(getter)]
    pub fn is_connected(&self) -> bool {
        self.client.is_connected()
    }
}
