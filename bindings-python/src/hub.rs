//! The callback hub: how a daemon callback reaches Python code without Python ever running
//! on a tokio thread.
//!
//! The client runs a synchronous reverse-call or notification handler on tokio's blocking
//! pool. The closures this module builds do not attach to the interpreter there: they put
//! a [`Job`] on the hub's queue and wait for its outcome. Python-owned worker threads (the
//! pool in `car_runtime/_callbacks.py`) block in [`next_callback`] with the GIL released,
//! take the job, and run it attached via [`CallbackJob::run`], which sends the outcome back.
//!
//! It also owns the process-wide tool and tool-cancel handlers (the chat handler is
//! `chat`'s). Those slots are only read and written by attached threads (a worker running
//! a job, or the registering caller), so no lock here is ever held across `fork()` (see
//! `process`).

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use car_daemon_client::{HandlerError, HandlerResult};
use pyo3::prelude::*;
use pyo3::types::PyString;
use serde_json::Value;

use crate::error;
use crate::process::{self, lock};

/// The process-wide `tools.execute` handler (`register_tool_handler`).
static TOOL_HANDLER: Mutex<Option<Py<PyAny>>> = Mutex::new(None);
/// The process-wide `tools.cancel` subscriber (`register_tool_cancel_handler`).
static TOOL_CANCEL_HANDLER: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

/// Which Python callable a job runs.
#[derive(Clone)]
pub(crate) enum Target {
    /// A callable registered on one runtime (reverse-call, notification or run tool fn).
    Func(Arc<Py<PyAny>>),
    /// Whatever `register_tool_handler` holds when the job runs.
    ProcessTool,
    /// Whatever `register_tool_cancel_handler` holds when the job runs.
    ProcessToolCancel,
    /// Whatever `register_chat_handler` holds when the job runs (see `chat`).
    Chat,
}

/// How the job's outcome is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A reverse call: the callable returns the result JSON as `str`.
    Request,
    /// A notification: the return value is ignored; an exception goes to
    /// `sys.unraisablehook`.
    Notification,
    /// A chat turn: the return value is ignored; an exception is the turn's error.
    Chat,
}

pub(crate) struct Job {
    target: Target,
    kind: Kind,
    arg: String,
    reply: SyncSender<HandlerResult>,
}

/// The queue between handler closures and Python worker threads.
#[derive(Default)]
pub(crate) struct Hub {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

impl Hub {
    /// Runs `target(arg)` on a Python worker thread and waits for it. Called on a tokio
    /// blocking-pool thread, never attached.
    pub(crate) fn dispatch(&self, target: Target, kind: Kind, arg: String) -> HandlerResult {
        let (reply, outcome) = sync_channel(1);
        lock(&self.queue).push_back(Job {
            target,
            kind,
            arg,
            reply,
        });
        self.ready.notify_one();
        outcome.recv().unwrap_or_else(|_| {
            Err(HandlerError::new(
                "the python callback was dropped before it answered",
            ))
        })
    }

    fn next(&self, wait: Duration) -> Option<Job> {
        let mut queue = lock(&self.queue);
        if let Some(job) = queue.pop_front() {
            return Some(job);
        }
        let (mut queue, _) = self
            .ready
            .wait_timeout_while(queue, wait, |q| q.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        queue.pop_front()
    }
}

/// One callback taken by a worker thread; `run()` it exactly once.
#[pyclass(module = "car_runtime._native", name = "CallbackJob")]
pub(crate) struct CallbackJob {
    job: Mutex<Option<Job>>,
}

#[pymethods]
impl CallbackJob {
    /// Runs the callback on this (attached, Python-owned) thread and sends its outcome.
    fn run(&self, py: Python<'_>) -> PyResult<()> {
        let Some(job) = lock(&self.job).take() else {
            return Ok(());
        };
        let outcome = error::guard_panics(|| Ok(run_job(py, &job)))
            .unwrap_or_else(|e| Err(HandlerError::new(format!("python callback failed: {e}"))));
        // The waiting handler may be gone (its call was cancelled); nothing to tell then.
        let _ = job.reply.send(outcome);
        Ok(())
    }
}

fn run_job(py: Python<'_>, job: &Job) -> HandlerResult {
    let func = match &job.target {
        Target::Func(f) => Some(f.clone_ref(py)),
        Target::ProcessTool => lock(&TOOL_HANDLER).as_ref().map(|f| f.clone_ref(py)),
        Target::ProcessToolCancel => lock(&TOOL_CANCEL_HANDLER).as_ref().map(|f| f.clone_ref(py)),
        Target::Chat => crate::chat::handler().map(|f| f.clone_ref(py)),
    };
    let Some(func) = func else {
        return match job.target {
            Target::ProcessTool => Err(HandlerError::new(
                "no tool handler registered: call car_runtime.register_tool_handler first",
            )
            .with_code(car_proto::errors::METHOD_NOT_FOUND)),
            Target::Chat => Err(HandlerError::new(
                "no chat handler registered: the handler was unregistered before the turn ran",
            )),
            _ => Ok(Value::Null),
        };
    };
    let func = func.bind(py);
    let result = func.call1((job.arg.as_str(),));
    match (job.kind, result) {
        (Kind::Notification, Ok(_)) => Ok(Value::Null),
        (Kind::Notification, Err(err)) => {
            err.write_unraisable(py, Some(func));
            Ok(Value::Null)
        }
        (Kind::Chat, Ok(_)) => Ok(Value::Null),
        (Kind::Chat, Err(err)) => Err(error::handler_error(py, &err)),
        (Kind::Request, Ok(value)) => {
            let Ok(text) = value.cast::<PyString>() else {
                let type_name = value
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "object".into());
                return Err(HandlerError::new(format!(
                    "callback returned {type_name}, expected a JSON string"
                )));
            };
            let text = text
                .to_cow()
                .map_err(|e| HandlerError::new(e.to_string()))?;
            serde_json::from_str(&text)
                .map_err(|e| HandlerError::new(format!("callback returned invalid JSON: {e}")))
        }
        (Kind::Request, Err(err)) => Err(error::handler_error(py, &err)),
    }
}

/// Waits up to `timeout_s` seconds (GIL released) for the next callback; `None` when none
/// arrived. Called by the worker threads of `car_runtime._callbacks`.
#[pyfunction]
pub(crate) fn next_callback(py: Python<'_>, timeout_s: f64) -> PyResult<Option<CallbackJob>> {
    error::guard_panics(|| {
        let (_, hub) = process::current(py)?;
        let wait = Duration::try_from_secs_f64(timeout_s.max(0.0))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("timeout_s: {e}")))?;
        let job = py.detach(move || hub.next(wait));
        Ok(job.map(|job| CallbackJob {
            job: Mutex::new(Some(job)),
        }))
    })
}

/// Sets (or with `None` clears) the process-wide `tools.execute` handler.
#[pyfunction]
#[pyo3(signature = (handler))]
pub(crate) fn set_tool_handler(handler: Option<Py<PyAny>>) {
    *lock(&TOOL_HANDLER) = handler;
}

/// Whether a process-wide tool handler is registered.
#[pyfunction]
pub(crate) fn has_tool_handler() -> bool {
    lock(&TOOL_HANDLER).is_some()
}

/// Sets (or with `None` clears) the process-wide `tools.cancel` subscriber.
#[pyfunction]
#[pyo3(signature = (handler))]
pub(crate) fn set_tool_cancel_handler(handler: Option<Py<PyAny>>) {
    *lock(&TOOL_CANCEL_HANDLER) = handler;
}
