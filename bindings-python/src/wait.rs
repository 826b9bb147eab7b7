//! Blocking on a client future from a Python thread.
//!
//! This module owns the one rule every blocking call follows: the wait happens with the
//! interpreter released (other Python threads and the callback workers keep running), in
//! slices, re-attaching between slices only to run `PyErr_CheckSignals` so Ctrl-C raises
//! `KeyboardInterrupt` within a slice. Interrupting drops the call's future, which removes
//! it from the connection's pending table. A panic inside the future becomes
//! `InternalError`.
//!
//! A streaming call ([`wait_streaming`]) follows the same rule; its events are queued by
//! the future and handed to Python on the waiting thread itself: a slice also ends when an
//! event is queued, and the thread re-attaches to deliver everything queued so far (then
//! checks for signals). Python code never runs on a tokio thread, inside `block_on`, or
//! with a Rust lock held.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use car_daemon_client::Error;
use futures_util::FutureExt;
use pyo3::prelude::*;
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error;

/// How often a blocked call looks for a pending signal (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

enum Waited<T> {
    Done(Result<T, Error>),
    Panicked(String),
    Interrupted(PyErr),
}

/// What one slice of a wait ended with.
enum Slice<T> {
    Done(Result<T, Error>),
    Panicked(String),
    Event(Value),
    Elapsed,
}

/// Hands one streamed event to Python (attached, on the waiting thread). An error
/// abandons the call at once and is raised from the wait.
pub(crate) type Deliver<'a> = dyn FnMut(Python<'_>, Value) -> PyResult<()> + Send + 'a;

/// Drives `fut` in slices on `handle`'s runtime; runs detached (see the module docs).
fn drive<T, F>(
    handle: &Handle,
    fut: F,
    mut events: Option<(&mut UnboundedReceiver<Value>, &mut Deliver<'_>)>,
) -> Waited<T>
where
    F: Future<Output = Result<T, Error>>,
{
    let mut fut = std::pin::pin!(AssertUnwindSafe(fut).catch_unwind());
    loop {
        // The timer must be built inside the runtime's context, hence the async block.
        let slice = handle.block_on(async {
            let next_event = async {
                match events.as_mut() {
                    Some((rx, _)) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                out = &mut fut => match out {
                    Ok(result) => Slice::Done(result),
                    Err(panic) => Slice::Panicked(error::panic_text(panic.as_ref())),
                },
                Some(event) = next_event => Slice::Event(event),
                () = tokio::time::sleep(SIGNAL_POLL) => Slice::Elapsed,
            }
        });
        let first = match slice {
            Slice::Done(result) => return Waited::Done(result),
            Slice::Panicked(text) => return Waited::Panicked(text),
            Slice::Event(event) => Some(event),
            Slice::Elapsed => None,
        };
        let attached = Python::attach(|py| {
            if let (Some(first), Some((rx, deliver))) = (first, events.as_mut()) {
                deliver(py, first)?;
                while let Ok(event) = rx.try_recv() {
                    deliver(py, event)?;
                }
            }
            py.check_signals()
        });
        if let Err(e) = attached {
            return Waited::Interrupted(e);
        }
    }
}

/// Runs `drive` detached, on this thread unless it belongs to a runtime.
fn detached<T, F>(
    py: Python<'_>,
    handle: &Handle,
    fut: F,
    events: Option<(&mut UnboundedReceiver<Value>, &mut Deliver<'_>)>,
) -> Waited<T>
where
    T: Send,
    F: Future<Output = Result<T, Error>> + Send,
{
    py.detach(|| {
        if Handle::try_current().is_err() {
            drive(handle, fut, events)
        } else {
            // Never the case for a thread Python created, but `block_on` must not run on
            // a runtime thread, so such a caller waits on a helper thread.
            std::thread::scope(|s| {
                s.spawn(|| drive(handle, fut, events))
                    .join()
                    .unwrap_or_else(|p| Waited::Panicked(error::panic_text(p.as_ref())))
            })
        }
    })
}

fn finish<T>(py: Python<'_>, waited: Waited<T>) -> PyResult<T> {
    match waited {
        Waited::Done(Ok(value)) => Ok(value),
        Waited::Done(Err(e)) => Err(error::to_py(py, e)),
        Waited::Panicked(text) => Err(error::internal(py, format!("native panic: {text}"))),
        Waited::Interrupted(e) => Err(e),
    }
}

/// Runs `fut` to completion on `handle`'s runtime, blocking this (Python) thread.
pub(crate) fn wait<T, F>(py: Python<'_>, handle: &Handle, fut: F) -> PyResult<T>
where
    T: Send,
    F: Future<Output = Result<T, Error>> + Send,
{
    let waited = detached(py, handle, fut, None);
    finish(py, waited)
}

/// [`wait`] for a streaming call: `fut` queues its events on the channel whose receiver is
/// `events`, and `deliver` gets each of them, in order, on this thread while the call runs
/// and before this returns. An error from `deliver` drops the call at once (as Ctrl-C
/// does) and is raised here.
pub(crate) fn wait_streaming<T, F>(
    py: Python<'_>,
    handle: &Handle,
    fut: F,
    mut events: UnboundedReceiver<Value>,
    deliver: &mut Deliver<'_>,
) -> PyResult<T>
where
    T: Send,
    F: Future<Output = Result<T, Error>> + Send,
{
    let waited = detached(py, handle, fut, Some((&mut events, &mut *deliver)));
    if matches!(waited, Waited::Done(_)) {
        // Events queued in the slice that completed the call (the future has finished,
        // so nothing more can arrive).
        while let Ok(event) = events.try_recv() {
            deliver(py, event)?;
        }
    }
    finish(py, waited)
}
