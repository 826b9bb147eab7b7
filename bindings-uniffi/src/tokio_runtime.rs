//! The process's one tokio runtime.
//!
//! This module owns the runtime every [`crate::CarDaemonClient`] runs its connection tasks
//! and handlers on. It is built on first use and lives for the rest of the process, so no
//! export ever touches tokio without a reactor ("no reactor running"), however the foreign
//! side creates and drops clients. Exports block their foreign caller's thread on it; that
//! thread never belongs to the runtime, except when a handler calls back into the daemon,
//! which the client's blocking facade moves to a helper thread. [`block_on`] applies the
//! same rule to the exports that run the async client directly (`AgentLoop.run`).

use std::future::Future;
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

/// Runs `fut` to completion on the shared runtime, blocking the calling thread. A caller
/// that belongs to a runtime (a handler or tool running on the blocking pool, where
/// `block_on` would panic) waits on a short-lived helper thread instead, exactly as the
/// client's blocking facade does.
pub(crate) fn block_on<T: Send>(fut: impl Future<Output = T> + Send) -> Result<T, CarError> {
    let handle = handle()?;
    if Handle::try_current().is_err() {
        return Ok(handle.block_on(fut));
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| handle.block_on(fut))
            .join()
            .map_err(|_| CarError::Transport {
                detail: "blocking call panicked".into(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_works_from_plain_threads_and_from_the_blocking_pool() {
        assert_eq!(block_on(async { 1 }), Ok(1));
        // A blocking-pool thread belongs to the runtime: a direct `Handle::block_on` there
        // panics, so the helper thread must take over.
        let nested = handle()
            .unwrap()
            .block_on(async { tokio::task::spawn_blocking(|| block_on(async { 2 })).await });
        assert_eq!(nested.unwrap(), Ok(2));
    }
}
