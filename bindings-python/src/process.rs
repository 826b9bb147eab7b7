//! The per-process resources of the native module: the tokio runtime every client runs on,
//! the callback hub that hands daemon callbacks to Python worker threads, and the chat
//! turns' one-at-a-time slot (`chat`).
//!
//! This module owns their fork safety. After `os.fork()` the child has only the forking
//! thread: the parent's runtime workers and any lock they held are gone. So each resource
//! is keyed by the pid that built it and rebuilt when the pid changes; the parent's copy is
//! leaked, never dropped (dropping it would touch locks and threads that no longer exist).
//!
//! The slots below are locked only by threads attached to the interpreter. `os.fork()` runs
//! attached, so no other thread can be inside one of these critical sections at fork time
//! and the child never inherits a held lock. It must not run Python code or call the
//! daemon.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};

use crate::chat::TurnSlot;
use crate::hub::Hub;

struct Resources {
    pid: u32,
    runtime: &'static Runtime,
    hub: Arc<Hub>,
    chat_slot: Arc<TurnSlot>,
}

static RESOURCES: Mutex<Option<Resources>> = Mutex::new(None);

/// The current process's runtime handle and hub, built on first use and after a fork.
///
/// Takes `Python` as proof the caller is attached (see the module docs).
pub(crate) fn current(py: Python<'_>) -> PyResult<(Handle, Arc<Hub>)> {
    let (handle, hub, _) = resources(py)?;
    Ok((handle, hub))
}

/// [`current`] and the process's chat-turn slot (see `chat`).
pub(crate) fn resources(_py: Python<'_>) -> PyResult<(Handle, Arc<Hub>, Arc<TurnSlot>)> {
    let mut slot = lock(&RESOURCES);
    let pid = std::process::id();
    if let Some(r) = slot.as_ref() {
        if r.pid == pid {
            return Ok((
                r.runtime.handle().clone(),
                r.hub.clone(),
                r.chat_slot.clone(),
            ));
        }
    }
    if let Some(stale) = slot.take() {
        // The parent's hub, chat slot and runtime: their threads do not exist in this process.
        std::mem::forget(stale.hub);
        std::mem::forget(stale.chat_slot);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("car-runtime-py")
        .enable_all()
        .build()
        .map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("cannot start the tokio runtime: {e}"))
        })?;
    // One runtime per process incarnation, alive until the process ends.
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    let hub = Arc::new(Hub::default());
    let chat_slot = Arc::new(TurnSlot::default());
    *slot = Some(Resources {
        pid,
        runtime,
        hub: hub.clone(),
        chat_slot: chat_slot.clone(),
    });
    Ok((runtime.handle().clone(), hub, chat_slot))
}

/// A poisoned slot only means a panic happened while it was held; every critical section
/// is a single read or replace, so the data is still whole.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
