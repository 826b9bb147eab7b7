//! Blocking on a client future from a Python thread.
//!
//! This module owns the one rule every blocking call follows: the wait happens with the
//! interpreter released (other Python threads and the callback workers keep running), in
//! slices, re-attaching between slices only to run `PyErr_CheckSignals` so Ctrl-C raises
//! `KeyboardInterrupt` within a slice. Interrupting drops the call's future, which removes
//! it from the connection's pending table. A panic inside the future becomes
//! `InternalError`.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use car_daemon_client::Error;
use futures_util::FutureExt;
use pyo3::prelude::*;
use tokio::runtime::Handle;

use crate::errors;

/// How often a blocked call looks for a pending signal (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

enum Waited<T> {
    Done(Result<T, Error>),
    Panicked(String),
    Interrupted(PyErr),
}

/// Runs `fut` to completion on `handle`'s runtime, blocking this (Python) thread.
pub(crate) fn wait<T, F>(py: Python<'_>, handle: &Handle, fut: F) -> PyResult<T>
where
    T: Send,
    F: Future<Output = Result<T, Error>> + Send,
{
    let drive = || {
        let mut fut = std::pin::pin!(AssertUnwindSafe(fut).catch_unwind());
        loop {
            // The timer must be built inside the runtime's context, hence the async block.
            match handle.block_on(async { tokio::time::timeout(SIGNAL_POLL, &mut fut).await }) {
                Ok(Ok(result)) => return Waited::Done(result),
                Ok(Err(panic)) => return Waited::Panicked(errors::panic_text(panic.as_ref())),
                Err(_elapsed) => {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        return Waited::Interrupted(e);
                    }
                }
            }
        }
    };
    let waited = py.detach(|| {
        if Handle::try_current().is_err() {
            drive()
        } else {
            // Never the case for a thread Python created, but `block_on` must not run on
            // a runtime thread, so such a caller waits on a helper thread.
            std::thread::scope(|s| {
                s.spawn(drive)
                    .join()
                    .unwrap_or_else(|p| Waited::Panicked(errors::panic_text(p.as_ref())))
            })
        }
    });
    match waited {
        Waited::Done(Ok(value)) => Ok(value),
        Waited::Done(Err(e)) => Err(errors::to_py(py, e)),
        Waited::Panicked(text) => Err(errors::internal(py, format!("native panic: {text}"))),
        Waited::Interrupted(e) => Err(e),
    }
}
