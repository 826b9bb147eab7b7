//! `NativeRuntime`: one `car-daemon-client` [`Client`] exposed to JavaScript.
//!
//! This module owns the class `index.js` wraps as `CarRuntime`: construction from explicit
//! settings over the environment, the generic bridge (`call`, `callStreaming`,
//! `callHostManagement`), handler registration, `executeProposal`, `disconnect` and
//! `close`. It parses and validates JSON arguments, maps errors through [`crate::errors`]
//! and hands JS functions to [`crate::callbacks`]; it holds no protocol logic. Every client
//! starts with the process-wide tool handler and tool-cancel listener wired in, so
//! `registerToolHandler` serves every runtime, including ones created earlier.
//!
//! `#[napi]` expands to unsafe FFI glue, hence the module-level `allow(unsafe_code)`; no
//! hand-written code here is unsafe.
#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_daemon_client::{CallOptions, Client, ClientConfig, ToolCall};
use napi_derive::napi;

use crate::callbacks::{self, JsHandler, JsListener, JsStreamListener};
use crate::errors::{client_error, invalid_argument, parse_json};

/// Names registered through this runtime, so `close()` can release their JS functions.
#[derive(Debug, Default)]
struct Registered {
    requests: BTreeSet<String>,
    notifications: BTreeSet<String>,
}

/// The native client behind `CarRuntime` (see `index.js`).
#[napi]
pub struct NativeRuntime {
    client: Client,
    registered: Mutex<Registered>,
}

impl std::fmt::Debug for NativeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeRuntime")
            .field("client", &self.client)
            .finish()
    }
}

fn non_empty(name: &str, value: &str) -> napi::Result<()> {
    if value.is_empty() {
        return Err(invalid_argument(format!(
            "{name} must be a non-empty string"
        )));
    }
    Ok(())
}

impl NativeRuntime {
    fn registered(&self) -> std::sync::MutexGuard<'_, Registered> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn install_global_tool_handler(client: &Client) {
        client.register_async_handler("tools.execute", callbacks::run_global_tool);
    }

    fn install_global_cancel_listener(client: &Client) {
        client.register_tool_cancel_handler(callbacks::deliver_tool_cancel);
    }
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
        if let Some(url) = url {
            non_empty("url", &url)?;
            config = config.url(url);
        }
        if let Some(token) = token {
            non_empty("token", &token)?;
            config = config.token(token);
        }
        if let Some(ns) = memory_namespace {
            non_empty("memoryNamespace", &ns)?;
            config = config.memory_namespace(ns);
        }
        config.client_version = format!("car-runtime-node/{}", car_proto::CAR_VERSION);
        let client = Client::new(config);
        Self::install_global_tool_handler(&client);
        Self::install_global_cancel_listener(&client);
        Ok(Self {
            client,
            registered: Mutex::default(),
        })
    }

    /// Calls `method` with `paramsJson`; `timeoutMs` replaces the method's default wait.
    #[napi]
    pub async fn call(
        &self,
        method: String,
        params_json: String,
        timeout_ms: Option<u32>,
    ) -> napi::Result<String> {
        non_empty("method", &method)?;
        let params = parse_json("paramsJson", &params_json)?;
        let options = match timeout_ms {
            Some(0) => return Err(invalid_argument("timeoutMs must be a positive integer")),
            Some(ms) => CallOptions::timeout(Duration::from_millis(u64::from(ms))),
            None => CallOptions::default(),
        };
        let result = self
            .client
            .call_with(&method, params, options)
            .await
            .map_err(client_error)?;
        Ok(result.to_string())
    }

    /// Calls a streaming method (`infer_stream`): `onEvent` gets the params JSON of each of
    /// this call's `inference.stream.event` notifications, in order, then `null` once. The
    /// Promise settles only after that `null` has run in JS, so every event has been
    /// delivered first (events and the marker share one FIFO queue); streams running
    /// concurrently on one runtime never see each other's events.
    #[napi]
    pub async fn call_streaming(
        &self,
        method: String,
        params_json: String,
        on_event: JsStreamListener,
    ) -> napi::Result<String> {
        non_empty("method", &method)?;
        let params = parse_json("paramsJson", &params_json)?;
        // `call_streaming` runs this on the calling task: it only queues (never waits for JS).
        let outcome = self
            .client
            .call_streaming(&method, params, CallOptions::default(), |event| {
                callbacks::stream_event(&on_event, &method, event.to_string());
            })
            .await;
        // Also after a failure: events queued before it reach JS before the rejection.
        callbacks::flush_stream(&on_event, &method).await;
        Ok(outcome.map_err(client_error)?.to_string())
    }

    /// Calls a host-management method over the host-token connection.
    #[napi]
    pub async fn call_host_management(
        &self,
        method: String,
        params_json: String,
    ) -> napi::Result<String> {
        non_empty("method", &method)?;
        let params = parse_json("paramsJson", &params_json)?;
        let result = self
            .client
            .call_host_management(&method, params)
            .await
            .map_err(client_error)?;
        Ok(result.to_string())
    }

    /// Serves daemon→client requests named `method` with a wrapped JS handler.
    #[napi]
    pub fn register_handler(&self, method: String, handler: JsHandler) -> napi::Result<()> {
        non_empty("method", &method)?;
        let handler = Arc::new(handler);
        self.client.register_async_handler(&method, move |params| {
            let handler = handler.clone();
            async move { callbacks::invoke(&handler, params.to_string()).await }
        });
        self.registered().requests.insert(method);
        Ok(())
    }

    /// Removes the handler for `method`; for `tools.execute` the process-wide tool handler
    /// serves again.
    #[napi]
    pub fn unregister_handler(&self, method: String) {
        self.client.unregister_handler(&method);
        if method == "tools.execute" {
            Self::install_global_tool_handler(&self.client);
        }
        self.registered().requests.remove(&method);
    }

    /// Delivers notifications named `method` to a wrapped JS listener, in arrival order.
    #[napi]
    pub fn register_notification_handler(
        &self,
        method: String,
        listener: JsListener,
    ) -> napi::Result<()> {
        non_empty("method", &method)?;
        let name = method.clone();
        self.client
            .register_notification_handler(&method, move |params| {
                callbacks::notify(&listener, &name, params.to_string())
            });
        self.registered().notifications.insert(method);
        Ok(())
    }

    #[napi]
    pub fn unregister_notification_handler(&self, method: String) {
        self.client.unregister_notification_handler(&method);
        if method == "tools.cancel" {
            Self::install_global_cancel_listener(&self.client);
        }
        self.registered().notifications.remove(&method);
    }

    /// Runs a proposal whose `tools.execute` calls go to `toolFn` (wrapped by `index.js`).
    #[napi]
    pub async fn execute_proposal(
        &self,
        proposal_json: String,
        session_id: Option<String>,
        tool_fn: JsHandler,
    ) -> napi::Result<String> {
        let proposal = parse_json("proposalJson", &proposal_json)?;
        if !proposal.is_object() {
            return Err(invalid_argument("proposalJson must be a JSON object"));
        }
        if let Some(id) = &session_id {
            non_empty("sessionId", id)?;
        }
        let tool_fn = Arc::new(tool_fn);
        let runtime = tokio::runtime::Handle::current();
        // The client runs a run's tool function on its blocking pool (never on a worker),
        // so waiting there for the JS Promise is allowed and blocks no other task.
        let serve = move |call: ToolCall| {
            let tool_fn = tool_fn.clone();
            let call_json = call.to_call_json().to_string();
            runtime.block_on(async move { callbacks::invoke(&tool_fn, call_json).await })
        };
        let result = self
            .client
            .execute_proposal(proposal, session_id, serve)
            .await
            .map_err(client_error)?;
        Ok(result.to_string())
    }

    /// Drops the connections; the next call reconnects. Handlers stay registered.
    #[napi]
    pub fn disconnect(&self) {
        self.client.disconnect();
    }

    /// Closes for good (idempotent): pending calls reject, later calls reject, and every
    /// JS function registered through this runtime is released.
    #[napi]
    pub fn close(&self) {
        self.client.close();
        let registered = std::mem::take(&mut *self.registered());
        for method in registered.requests {
            self.client.unregister_handler(&method);
        }
        for method in registered.notifications {
            self.client.unregister_notification_handler(&method);
        }
    }

    #[napi(getter)]
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    #[napi(getter)]
    pub fn is_connected(&self) -> bool {
        self.client.is_connected()
    }
}
