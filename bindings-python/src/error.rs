//! Error translation at the Python boundary, both ways.
//!
//! Outbound: a client [`Error`]'s structured report becomes an instance of the exception
//! classes defined in `car_runtime/_errors.py` (built there by one factory, so the classes
//! and their attributes live in one Python file): `Rpc` → `DaemonRpcError(code, message,
//! data)` with the daemon's data untouched, `Transport` → `DaemonConnectionError` (a
//! `ConnectionError`), `Closed` → `ClientClosedError`, `Handshake` → `HandshakeError`,
//! `Timeout` → `DaemonTimeoutError` (a `TimeoutError`), `Refused` → `RefusedError` (a
//! `ValueError`), `InvalidArgument` → `InvalidArgumentError` (a `ValueError` and a
//! `TypeError`), `UnexpectedResult` → `UnexpectedResultError`. No JSON-RPC code is invented
//! for a client-side failure. A Rust panic becomes `InternalError` (an ordinary
//! `Exception`), never pyo3's `BaseException`-derived `PanicException`.
//!
//! Inbound: an exception raised by a Python callback becomes a [`HandlerError`]:
//! `TerminalToolError` sets the terminal bit, a `DaemonRpcError` keeps its code and data,
//! anything else is code `-32000` with `"<Type>: <message>"`.

use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use car_daemon_client::panic_text;
use car_daemon_client::{Error, HandlerError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use serde_json::Value;

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS_MODULE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("car_runtime._errors")?.unbind())
        })
        .map(|m| m.bind(py))
}

/// Builds an exception with the factory `name` of `car_runtime._errors`.
fn build<'py>(py: Python<'py>, name: &str, args: impl pyo3::call::PyCallArgs<'py>) -> PyErr {
    match errors_module(py).and_then(|m| m.getattr(name)?.call1(args)) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

fn json_text(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(Value::to_string)
}

/// The Python exception for a client error: its [`ErrorReport`](car_daemon_client::ErrorReport),
/// field by field, handed to `car_runtime._errors._from_report`, which picks the class.
pub(crate) fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let r = err.report();
    let (refusal_code, refusal_data) = match &r.refusal {
        Some(rpc) => (Some(rpc.code), json_text(&rpc.data)),
        None => (None, None),
    };
    let after_ms = r
        .after
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    build(
        py,
        "_from_report",
        (
            r.kind.as_str(),
            r.message,
            r.code,
            json_text(&r.data),
            refusal_code,
            refusal_data,
            r.method,
            after_ms,
        ),
    )
}

/// `InternalError` with `message`.
pub(crate) fn internal(py: Python<'_>, message: String) -> PyErr {
    build(py, "_internal_error", (message,))
}

/// Runs `f`, turning a Rust panic into `InternalError`.
pub(crate) fn guard_panics<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(out) => out,
        Err(payload) => {
            let text = panic_text(payload.as_ref());
            Python::attach(|py| Err(internal(py, format!("native panic: {text}"))))
        }
    }
}

/// The wire error for an exception raised by a Python callback.
pub(crate) fn handler_error(py: Python<'_>, err: &PyErr) -> HandlerError {
    let value = err.value(py);
    let message = value
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "<unprintable exception>".into());
    let is = |name: &str| {
        errors_module(py)
            .and_then(|m| m.getattr(name))
            .map(|cls| value.is_instance(&cls).unwrap_or(false))
            .unwrap_or(false)
    };
    if is("TerminalToolError") {
        return HandlerError::terminal(message);
    }
    if is("DaemonRpcError") {
        let code = value.getattr("code").and_then(|c| c.extract::<i64>());
        let text = value.getattr("message").and_then(|m| m.extract::<String>());
        let data = value
            .getattr("data")
            .ok()
            .filter(|d| !d.is_none())
            .and_then(|d| {
                py.import("json")
                    .and_then(|j| j.getattr("dumps")?.call1((d,)))
                    .and_then(|s| s.extract::<String>())
                    .ok()
            })
            .and_then(|s| serde_json::from_str::<Value>(&s).ok());
        if let (Ok(code), Ok(text)) = (code, text) {
            let mut e = HandlerError::new(text).with_code(code);
            if let Some(d) = data {
                e = e.with_data(d);
            }
            return e;
        }
    }
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    HandlerError::new(format!("{type_name}: {message}"))
}
