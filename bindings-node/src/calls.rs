//! How a call's outcome reaches JavaScript: one completion sink per runtime.
//!
//! A Promise returned by napi's `spawn_future_with_callback` costs, per call, a new
//! threadsafe function (a libuv async handle opened and closed), a resource-name string and
//! an env cleanup hook. The hot calls (`daemonCall` and every generated typed member) avoid
//! all three: `index.js` creates the Promise itself, keeps its `resolve`/`reject` under a
//! numeric id, and hands the id to [`start`]; when the call ends, its outcome is queued on
//! the runtime's single completion function — `(id, result, error)` — which settles that
//! Promise. Completions queue FIFO and one libuv wake-up drains every completion queued
//! by then, so a burst of concurrent calls settles in one pass of the JS thread.
//!
//! The sink is a *weak* threadsafe function (it never keeps Node alive by itself); while
//! any call is pending, `index.js` holds a ref'd timer so a program awaiting a call does
//! not exit under it. The future runs on napi's tokio runtime, where the client's tasks
//! run; nothing here blocks or runs JS under a lock.
//!
//! `#[napi]` types appear in the signatures, hence the module-level `allow(unsafe_code)`;
//! no hand-written code here is unsafe.
#![allow(unsafe_code)]

use std::future::Future;

use car_daemon_client::Error;
use napi::bindgen_prelude::{Either, FnArgs};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use serde_json::Value;

use crate::error::ErrorObject;

/// A settled call as JS receives it: its id, then the result (a JSON string for
/// `daemonCall`, a value for a typed member; absent for a member that returns nothing),
/// then the error object (absent on success) that `lib/errors.js` turns into its class.
pub type Completion = FnArgs<(u32, Option<Either<String, Value>>, Option<ErrorObject>)>;

/// The runtime's completion function (`index.js`'s `settle`).
pub type JsCompletion = ThreadsafeFunction<Completion, (), Completion, Status, false, true>;

/// Runs `fut` on napi's tokio runtime and queues its outcome for `sink` under `id`.
pub fn start<F>(sink: &std::sync::Arc<JsCompletion>, id: u32, fut: F)
where
    F: Future<Output = Result<Option<Either<String, Value>>, Error>> + Send + 'static,
{
    let sink = sink.clone();
    napi::bindgen_prelude::spawn(async move {
        let args = match fut.await {
            Ok(result) => (id, result, None),
            Err(e) => (id, None, Some(ErrorObject::from(e.report()))),
        };
        let status = sink.call(FnArgs::from(args), ThreadsafeFunctionCallMode::NonBlocking);
        if status != Status::Ok {
            // Only when the environment is shutting down: no JS would run any more.
            tracing::debug!(id, ?status, "call completion not delivered to javascript");
        }
    });
}
