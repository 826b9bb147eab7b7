//! The process's one tokio runtime.
//!
//! This module owns the runtime every [`crate::CarDaemonClient`] runs its connection tasks
//! and handlers on. It is built on first use and lives for the rest of the process, so no
//! export ever touches tokio without a reactor ("no reactor running"), however the foreign
//! side creates and drops clients. Exports block their foreign caller's thread on it; that
//! thread never belongs to the runtime, except when a handler calls back into the daemon,
//! which the client's blocking facade moves to a helper thread.

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

use crate::error::CarError;

/// Two workers: the runtime only moves frames; handlers run on its blocking pool.
const WORKER_THREADS: usize = 2;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The shared runtime's handle, starting it on first use.
pub(crate) fn handle() -> Result<Handle, CarError> {
    let built = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("car-runtime-uniffi")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the tokio runtime: {e}"))
    });
    match built {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(detail) => Err(CarError::Transport {
            detail: detail.clone(),
        }),
    }
}
