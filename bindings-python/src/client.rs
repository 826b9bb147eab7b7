//! `NativeClient`: one `car-daemon-client` [`BlockingClient`] seen from Python.
//!
//! This module owns the translation of calls and handler registrations, and the client's
//! fork safety: every entry point first checks the pid the client was built in, and in a
//! forked child rebuilds it on the child's runtime (see `process`) and re-installs the
//! handlers registered so far. The parent's client is leaked in the child, never dropped.
//! Every handler it installs only enqueues a job on the callback hub (see `hub`): no
//! Python code runs on a tokio thread and no Rust lock is held while Python runs.
//!
//! Every client serves `agent.chat` while a chat handler is registered (see `chat`); the
//! shared client routes an `agent.chat.event` call for a turn it is serving into that turn.
//!
//! Typed members (generated in `_generated.py`) arrive at [`NativeClient::call_member`]:
//! their Python values become JSON values (`values`) and `car_daemon_client::typed`
//! builds the params and projects the result, as for every other binding.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_daemon_client::{
    typed, BlockingClient, CallOptions, ClientConfig, Error, HandlerError, HandlerResult, Naming,
    ToolCall, ToolCancel,
};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;
use tokio::runtime::Handle;

use crate::chat;
use crate::error::{guard_panics, to_py};
use crate::hub::{Hub, Kind, Target};
use crate::process::{self, lock};
use crate::values;
use crate::wait::{wait, wait_streaming};

type Callbacks = HashMap<String, Arc<Py<PyAny>>>;

/// Everything a client incarnation needs; locked only while attached (see `process`).
struct State {
    pid: u32,
    client: Arc<BlockingClient>,
    handle: Handle,
    hub: Arc<Hub>,
    requests: Callbacks,
    notifications: Callbacks,
}

/// The daemon client behind `car_runtime.CarRuntime`.
#[pyclass(module = "car_runtime._native", name = "NativeClient")]
pub(crate) struct NativeClient {
    config: ClientConfig,
    state: Mutex<State>,
}

/// Caller's JSON text, or the client-side `InvalidArgumentError` naming the argument.
fn parse_json(py: Python<'_>, field: &str, text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| {
        to_py(
            py,
            Error::InvalidArgument(format!("{field} is not valid JSON: {e}")),
        )
    })
}

fn request_handler(
    hub: &Arc<Hub>,
    f: &Arc<Py<PyAny>>,
) -> impl Fn(Value) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let (hub, f) = (hub.clone(), f.clone());
    move |params: Value| hub.dispatch(Target::Func(f.clone()), Kind::Request, params.to_string())
}

fn notification_handler(hub: &Arc<Hub>, f: &Arc<Py<PyAny>>) -> impl Fn(Value) + Send + Sync {
    let (hub, f) = (hub.clone(), f.clone());
    move |params: Value| {
        let _ = hub.dispatch(
            Target::Func(f.clone()),
            Kind::Notification,
            params.to_string(),
        );
    }
}

/// A `tools.cancel` request id as the cancel handler gets it: the string itself when the
/// id is a string (the daemon's `cb-<n>`), else its JSON text.
fn request_id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A tool function for the shared client that hands each call's `call_json` to the Python
/// callable `f` (through the callback hub: never on a runtime worker, never under a lock).
fn tool_dispatcher(hub: Arc<Hub>, f: Py<PyAny>) -> impl Fn(ToolCall) -> HandlerResult + Clone {
    let f = Arc::new(f);
    move |call: ToolCall| {
        hub.dispatch(
            Target::Func(f.clone()),
            Kind::Request,
            call.to_call_json().to_string(),
        )
    }
}

/// CAR's `AgentLoopConfig` (without its callables) from `config_json`.
fn agent_config(py: Python<'_>, config_json: &str) -> PyResult<car_daemon_client::AgentConfig> {
    serde_json::from_value(parse_json(py, "config_json", config_json)?)
        .map_err(|e| to_py(py, Error::InvalidArgument(format!("config_json: {e}"))))
}

/// Installs the process-wide tool and cancel handlers plus this runtime's own.
fn install(client: &BlockingClient, hub: &Arc<Hub>, requests: &Callbacks, notes: &Callbacks) {
    let c = client.client();
    let h = hub.clone();
    c.register_tool_handler(move |call: ToolCall| {
        h.dispatch(
            Target::ProcessTool,
            Kind::Request,
            call.to_call_json().to_string(),
        )
    });
    let h = hub.clone();
    c.register_tool_cancel_handler(move |cancel: ToolCancel| {
        let _ = h.dispatch(
            Target::ProcessToolCancel,
            Kind::Notification,
            request_id_text(&cancel.request_id),
        );
    });
    for (method, f) in requests {
        c.register_handler(method, request_handler(hub, f));
    }
    for (method, f) in notes {
        c.register_notification_handler(method, notification_handler(hub, f));
    }
}

impl NativeClient {
    /// The client for this process, rebuilt after a fork.
    fn current(&self, py: Python<'_>) -> PyResult<(Arc<BlockingClient>, Handle, Arc<Hub>)> {
        let mut st = lock(&self.state);
        let pid = std::process::id();
        if st.pid != pid {
            let (handle, hub) = process::current(py)?;
            let client = Arc::new(BlockingClient::with_handle(
                self.config.clone(),
                handle.clone(),
            ));
            install(&client, &hub, &st.requests, &st.notifications);
            chat::track(py, &client)?;
            // The parent's client: its tasks and locks belong to the parent process.
            std::mem::forget(std::mem::replace(&mut st.client, client));
            st.pid = pid;
            st.handle = handle;
            st.hub = hub;
        }
        Ok((st.client.clone(), st.handle.clone(), st.hub.clone()))
    }

    fn options(timeout_s: Option<f64>) -> PyResult<CallOptions> {
        match timeout_s {
            None => Ok(CallOptions::default()),
            Some(s) => Duration::try_from_secs_f64(s)
                .map(CallOptions::timeout)
                .map_err(|e| PyValueError::new_err(format!("timeout: {e}"))),
        }
    }
}

#[pymethods]
impl NativeClient {
    /// A client that connects on its first call; discovery reads the environment now.
    #[new]
    #[pyo3(signature = (url=None, token=None, memory_namespace=None))]
    fn new(
        py: Python<'_>,
        url: Option<String>,
        token: Option<String>,
        memory_namespace: Option<String>,
    ) -> PyResult<Self> {
        guard_panics(|| {
            let mut config = ClientConfig::from_env();
            config.client_version = format!("car-runtime-python/{}", car_proto::CAR_VERSION);
            if let Some(url) = url {
                config = config.url(url);
            }
            if let Some(token) = token {
                config = config.token(token);
            }
            if let Some(ns) = memory_namespace {
                config = config.memory_namespace(ns);
            }
            let (handle, hub) = process::current(py)?;
            let client = Arc::new(BlockingClient::with_handle(config.clone(), handle.clone()));
            let (requests, notifications) = (Callbacks::new(), Callbacks::new());
            install(&client, &hub, &requests, &notifications);
            chat::track(py, &client)?;
            Ok(Self {
                config,
                state: Mutex::new(State {
                    pid: std::process::id(),
                    client,
                    handle,
                    hub,
                    requests,
                    notifications,
                }),
            })
        })
    }

    /// Calls `method` with `params_json`; returns the result JSON.
    #[pyo3(signature = (method, params_json, timeout_s=None))]
    fn call(
        &self,
        py: Python<'_>,
        method: String,
        params_json: &str,
        timeout_s: Option<f64>,
    ) -> PyResult<String> {
        guard_panics(|| {
            let params = parse_json(py, "params_json", params_json)?;
            let options = Self::options(timeout_s)?;
            let (client, handle, _) = self.current(py)?;
            let value = wait(py, &handle, async move {
                client.client().call_with(&method, params, options).await
            })?;
            Ok(value.to_string())
        })
    }

    /// Calls a streaming method (`infer_stream`): `on_event(params_json)` gets each of
    /// this call's `inference.stream.event` params, in order, on this thread, all before
    /// the result JSON is returned. The wait is detached; the thread re-attaches only to
    /// run `on_event` (see `wait`), never on a tokio thread or with a lock held.
    ///
    /// When `on_event` raises an `Exception`, later events of the call are not delivered,
    /// the call still runs to completion (the binding cannot stop the daemon's work, and
    /// abandoning it would leave the generation running unobserved), and the exception is
    /// then raised here in place of the call's outcome. A `BaseException` that is not an
    /// `Exception` (`KeyboardInterrupt`, `SystemExit`) abandons the call at once, as
    /// Ctrl-C during the wait does, and is raised.
    #[pyo3(signature = (method, params_json, on_event, timeout_s=None))]
    fn call_streaming(
        &self,
        py: Python<'_>,
        method: String,
        params_json: &str,
        on_event: Py<PyAny>,
        timeout_s: Option<f64>,
    ) -> PyResult<String> {
        guard_panics(|| {
            let params = parse_json(py, "params_json", params_json)?;
            let options = Self::options(timeout_s)?;
            let (client, handle, _) = self.current(py)?;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let call = async move {
                client
                    .client()
                    .call_streaming(&method, params, options, move |event| {
                        // The receiver lives until the wait ends; a send only fails after
                        // the call was abandoned, when nobody wants the event.
                        let _ = tx.send(event);
                    })
                    .await
            };
            let mut raised: Option<PyErr> = None;
            let mut deliver = |py: Python<'_>, event: Value| -> PyResult<()> {
                if raised.is_some() {
                    return Ok(());
                }
                match on_event.call1(py, (event.to_string(),)) {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_instance_of::<PyException>(py) => {
                        raised = Some(e);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            };
            let outcome = wait_streaming(py, &handle, call, rx, &mut deliver);
            if let Some(e) = raised {
                return Err(e);
            }
            Ok(outcome?.to_string())
        })
    }

    /// Calls a host-management method over the host-token connection.
    fn call_host_management(
        &self,
        py: Python<'_>,
        method: String,
        params_json: &str,
    ) -> PyResult<String> {
        guard_panics(|| {
            let params = parse_json(py, "params_json", params_json)?;
            let (client, handle, _) = self.current(py)?;
            let value = wait(py, &handle, async move {
                client.client().call_host_management(&method, params).await
            })?;
            Ok(value.to_string())
        })
    }

    /// Calls the typed member `member` of `method` with `args` (Python values in
    /// declaration order, `None` for an absent optional argument); returns the projected
    /// result (`None`, `str`, `int`, `bool` or `list[str]`).
    fn call_member(
        &self,
        py: Python<'_>,
        method: String,
        member: String,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        guard_panics(|| {
            let (_, found) = typed::lookup(&method, &member).map_err(|e| to_py(py, e))?;
            let args = values::args(found, args).map_err(|e| to_py(py, e))?;
            let (client, handle, _) = self.current(py)?;
            let projected = wait(py, &handle, async move {
                client
                    .client()
                    .call_member(&method, &member, &args, Naming::Snake)
                    .await
            })?;
            values::result(py, projected)
        })
    }

    /// The current connection's epoch, connecting first when there is none (see
    /// `CarRuntime.connection_epoch`).
    fn connection_epoch(&self, py: Python<'_>) -> PyResult<u64> {
        guard_panics(|| {
            let (client, handle, _) = self.current(py)?;
            wait(py, &handle, async move {
                client.client().connection_epoch().await
            })
        })
    }

    /// Submits a proposal whose `tools.execute` calls go to `tool_fn(call_json) -> str`.
    #[pyo3(signature = (proposal_json, tool_fn, session_id=None))]
    fn execute_proposal(
        &self,
        py: Python<'_>,
        proposal_json: &str,
        tool_fn: Py<PyAny>,
        session_id: Option<String>,
    ) -> PyResult<String> {
        guard_panics(|| {
            let proposal = parse_json(py, "proposal_json", proposal_json)?;
            let (client, handle, hub) = self.current(py)?;
            let run_tool = tool_dispatcher(hub, tool_fn);
            let value = wait(py, &handle, async move {
                client
                    .client()
                    .execute_proposal(proposal, session_id, run_tool)
                    .await
            })?;
            Ok(value.to_string())
        })
    }

    /// Runs the shared agent loop (`car_daemon_client::agent_loop`): `config_json` is CAR's
    /// `AgentLoopConfig` without its callables; the run's tool calls go to
    /// `tool_fn(call_json) -> str`. Returns CAR's `AgentOutcome` as JSON.
    #[pyo3(signature = (config_json, goal, tool_fn, max_turns=None))]
    fn run_agent(
        &self,
        py: Python<'_>,
        config_json: &str,
        goal: String,
        tool_fn: Py<PyAny>,
        max_turns: Option<u32>,
    ) -> PyResult<String> {
        guard_panics(|| {
            let config = agent_config(py, config_json)?;
            let (client, handle, hub) = self.current(py)?;
            let run_tool = tool_dispatcher(hub, tool_fn);
            let outcome = wait(py, &handle, async move {
                client
                    .client()
                    .run_agent(&config, &goal, max_turns, run_tool)
                    .await
            })?;
            Ok(serde_json::to_string(&outcome).unwrap_or_default())
        })
    }

    /// One chat turn on the shared loop (`Client::run_chat_turn`): `messages_json` is the
    /// conversation (`[{role, content}]`, newest user turn last); returns CAR's
    /// `ChatTurnResult` (`{text, run_id}`) as JSON.
    #[pyo3(signature = (config_json, messages_json, tool_fn, requested_model=None))]
    fn run_chat_turn(
        &self,
        py: Python<'_>,
        config_json: &str,
        messages_json: &str,
        tool_fn: Py<PyAny>,
        requested_model: Option<String>,
    ) -> PyResult<String> {
        guard_panics(|| {
            let config = agent_config(py, config_json)?;
            let messages = match parse_json(py, "messages_json", messages_json)? {
                Value::Array(items) => items,
                other => {
                    return Err(to_py(
                        py,
                        Error::InvalidArgument(format!("messages: expected a list, got {other}")),
                    ))
                }
            };
            let (client, handle, hub) = self.current(py)?;
            let run_tool = tool_dispatcher(hub, tool_fn);
            let turn = wait(py, &handle, async move {
                client
                    .client()
                    .run_chat_turn(&config, &messages, requested_model.as_deref(), run_tool)
                    .await
            })?;
            Ok(serde_json::to_string(&turn).unwrap_or_default())
        })
    }

    /// Serves daemon→client requests named `method` with `handler(params_json) -> str`.
    fn register_handler(&self, py: Python<'_>, method: String, handler: Py<PyAny>) -> PyResult<()> {
        guard_panics(|| {
            let (client, _, hub) = self.current(py)?;
            let f = Arc::new(handler);
            client
                .client()
                .register_handler(&method, request_handler(&hub, &f));
            lock(&self.state).requests.insert(method, f);
            Ok(())
        })
    }

    fn unregister_handler(&self, py: Python<'_>, method: String) -> PyResult<()> {
        guard_panics(|| {
            let (client, _, _) = self.current(py)?;
            let removed = lock(&self.state).requests.remove(&method);
            if method == "tools.execute" && removed.is_some() {
                // Back to the process-wide tool handler.
                let st = lock(&self.state);
                install(&client, &st.hub, &Callbacks::new(), &Callbacks::new());
            } else {
                client.client().unregister_handler(&method);
            }
            Ok(())
        })
    }

    /// Delivers notifications named `method` to `handler(params_json)`, in order.
    fn register_notification_handler(
        &self,
        py: Python<'_>,
        method: String,
        handler: Py<PyAny>,
    ) -> PyResult<()> {
        guard_panics(|| {
            let (client, _, hub) = self.current(py)?;
            let f = Arc::new(handler);
            client
                .client()
                .register_notification_handler(&method, notification_handler(&hub, &f));
            lock(&self.state).notifications.insert(method, f);
            Ok(())
        })
    }

    fn unregister_notification_handler(&self, py: Python<'_>, method: String) -> PyResult<()> {
        guard_panics(|| {
            let (client, _, _) = self.current(py)?;
            lock(&self.state).notifications.remove(&method);
            client.client().unregister_notification_handler(&method);
            Ok(())
        })
    }

    /// Drops the connections (pending calls fail with `ClientClosedError`); the next call
    /// reconnects. Handlers stay registered.
    fn disconnect(&self, py: Python<'_>) -> PyResult<()> {
        guard_panics(|| {
            self.current(py)?.0.disconnect();
            Ok(())
        })
    }

    /// Whether a connection is open now.
    #[getter]
    fn connected(&self, py: Python<'_>) -> PyResult<bool> {
        guard_panics(|| Ok(self.current(py)?.0.client().is_connected()))
    }
}

impl Drop for NativeClient {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if st.pid != std::process::id() {
            // Built by the parent before a fork: leak it (see the module docs).
            let client = std::mem::replace(
                &mut st.client,
                Arc::new(BlockingClient::with_handle(
                    self.config.clone(),
                    st.handle.clone(),
                )),
            );
            std::mem::forget(client);
        }
    }
}
