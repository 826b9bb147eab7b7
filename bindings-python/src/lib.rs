//! `car_runtime._native`: the PyO3 module under the `car_runtime` Python package.
//!
//! Owns: translation between Python and the shared client. Must not touch: protocol logic (it
//! is the shared client's), or the GIL across a blocking wait (every wait releases it).
//!
//! A translation layer around `car-daemon-client` and nothing else: JSON strings in and
//! out, client errors mapped to the package's exception classes, Python callbacks run on
//! Python-owned worker threads (a streaming call's events on the thread that made it).
//! The idiomatic API (`CarRuntime`, one- or two-argument tool functions, context managers)
//! lives in the `.py` files next to this module.
//!
//! - `client`: `NativeClient`, calls and handler registration, rebuilt after `fork()`;
//! - `chat`: serving `agent.chat` with the process-wide Python chat handler, and routing a running
//!   turn's `chat_event`s into it;
//! - `hub`: the queue that hands daemon callbacks to Python worker threads, and the process-wide
//!   tool handlers;
//! - `process`: the per-process tokio runtime and hub, keyed by pid;
//! - `wait`: blocking with the GIL released and Ctrl-C honoured, and handing a streaming call's
//!   events to Python on the waiting thread;
//! - `errors`: `Error` ↔ exception translation and panic containment;
//! - `values`: Python values in and out of typed member calls.

mod chat;
mod client;
mod error;
mod hub;
mod process;
mod values;
mod wait;

use pyo3::prelude::*;

/// Sets (or with `None` clears) the process-wide `agent.chat` handler; every runtime of
/// the process serves chat while one is set.
#[pyfunction]
#[pyo3(signature = (handler))]
fn set_chat_handler(py: Python<'_>, handler: Option<Py<PyAny>>) -> PyResult<()> {
    error::guard_panics(|| chat::set_handler(py, handler))
}

/// The version of the bundled client (the workspace version).
#[pyfunction]
fn client_version() -> &'static str {
    car_proto::CAR_VERSION
}

/// The daemon protocol version this client speaks.
#[pyfunction]
fn protocol_version() -> u64 {
    car_proto::PROTOCOL_VERSION
}

/// Panics inside the native module, for the test that proves a panic surfaces as
/// `car_runtime.InternalError` (an `Exception`), not pyo3's `PanicException`. `where_`
/// is `"call"` (in the calling thread) or `"task"` (inside a future on the runtime).
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, where_: &str) -> PyResult<()> {
    error::guard_panics(|| match where_ {
        "call" => panic!("deliberate panic for tests"),
        "task" => {
            let (handle, _) = process::current(py)?;
            wait::wait(py, &handle, async {
                if where_ == "task" {
                    panic!("deliberate panic in a task for tests");
                }
                Ok(())
            })
        }
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "where_ must be \"call\" or \"task\", got {other:?}"
        ))),
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::NativeClient>()?;
    m.add_class::<hub::CallbackJob>()?;
    m.add_function(wrap_pyfunction!(client_version, m)?)?;
    m.add_function(wrap_pyfunction!(protocol_version, m)?)?;
    m.add_function(wrap_pyfunction!(hub::next_callback, m)?)?;
    m.add_function(wrap_pyfunction!(hub::set_tool_handler, m)?)?;
    m.add_function(wrap_pyfunction!(hub::has_tool_handler, m)?)?;
    m.add_function(wrap_pyfunction!(hub::set_tool_cancel_handler, m)?)?;
    m.add_function(wrap_pyfunction!(set_chat_handler, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    Ok(())
}
