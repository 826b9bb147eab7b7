//! The pre-auth budget: what a peer that has not authenticated may cost the daemon.
//!
//! Before `session.auth` succeeds a peer is a stranger, so it gets little:
//! - **A connection slot** from [`PreAuth`]'s pool (`--max-unauthenticated`, default
//!   [`DEFAULT_MAX_UNAUTHENTICATED`]), taken at accept and given back when the session
//!   authenticates or the connection ends. With the pool empty a new connection is closed at once,
//!   before any byte is read, so a flood of idle sockets cannot pin memory or starve authenticated
//!   clients (whose connections hold no slot).
//! - **A byte budget** of [`PRE_AUTH_BYTES`] read from the socket ([`Budgeted`]), HTTP upgrade
//!   included: a peer that sends more before authenticating — say the first 64 KiB of a 15 MiB
//!   frame — reads as closed (EOF) and the connection ends. tungstenite buffers a frame until it is
//!   whole, so without this a stranger pinned up to `--max-message-bytes` per socket. Once
//!   authenticated the budget no longer applies (`--max-message-bytes` does).
//! - **A deadline** (`--auth-deadline`, default [`DEFAULT_AUTH_DEADLINE`]) from accept to a
//!   successful `session.auth`; a session still unauthenticated then is closed (1008).
//!
//! With auth off (`--no-auth`) every session starts authenticated: only the slot taken
//! during the upgrade applies.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf, Take};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use crate::config::DEFAULT_MAX_UNAUTHENTICATED;
/// Bytes a peer may send before it authenticates.
pub const PRE_AUTH_BYTES: u64 = 64 * 1024;
/// How long a connection may stay unauthenticated, by default.
pub const DEFAULT_AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// The pool of unauthenticated-connection slots.
#[derive(Debug)]
pub struct PreAuth {
    slots: Arc<Semaphore>,
}

impl PreAuth {
    pub fn new(max: usize) -> Self {
        PreAuth {
            slots: Arc::new(Semaphore::new(max)),
        }
    }

    /// A slot for a new connection, or `None` when every slot is taken.
    pub fn admit(&self) -> Option<Ticket> {
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        Some(Ticket {
            permit,
            authenticated: CancellationToken::new(),
        })
    }
}

/// One connection's pre-auth state: its slot, and the token cancelled when it
/// authenticates (handed to its `Session`).
#[derive(Debug)]
pub struct Ticket {
    permit: OwnedSemaphorePermit,
    pub authenticated: CancellationToken,
}

impl Ticket {
    /// Splits the ticket: the slot (dropped by the session when it authenticates, or with
    /// the connection) and the token cancelled at authentication.
    pub fn into_parts(self) -> (OwnedSemaphorePermit, CancellationToken) {
        (self.permit, self.authenticated)
    }
}

/// Evicts a session (through `on_deadline`) unless it authenticated or closed within
/// `deadline`.
pub async fn enforce_deadline(
    authenticated: CancellationToken,
    deadline: Duration,
    closed: CancellationToken,
    on_deadline: impl FnOnce(),
) {
    tokio::select! {
        _ = authenticated.cancelled() => {}
        _ = closed.cancelled() => {}
        _ = tokio::time::sleep(deadline) => {
            if !authenticated.is_cancelled() {
                on_deadline();
            }
        }
    }
}

/// A socket whose reads end (EOF) after [`PRE_AUTH_BYTES`] until `authenticated` fires,
/// then are unlimited.
#[derive(Debug)]
pub struct Budgeted<S> {
    inner: Take<S>,
    lifted: bool,
    authenticated: CancellationToken,
}

impl<S: AsyncRead> Budgeted<S> {
    pub fn new(inner: S, authenticated: CancellationToken) -> Self {
        Budgeted {
            inner: inner.take(PRE_AUTH_BYTES),
            lifted: false,
            authenticated,
        }
    }

    /// The wrapped socket.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Budgeted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.lifted && this.authenticated.is_cancelled() {
            this.inner.set_limit(u64::MAX);
            this.lifted = true;
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Budgeted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.inner.get_mut()).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.inner.get_mut()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.inner.get_mut()).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.inner.get_mut()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.get_ref().is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn reads_stop_at_the_budget_until_authenticated() {
        let (mut peer, ours) = tokio::io::duplex(1 << 20);
        let authed = CancellationToken::new();
        let mut budgeted = Budgeted::new(ours, authed.clone());
        peer.write_all(&vec![7u8; PRE_AUTH_BYTES as usize + 10])
            .await
            .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0;
        loop {
            match budgeted.read(&mut buf).await.unwrap() {
                0 => break,
                n => total += n,
            }
        }
        assert_eq!(total as u64, PRE_AUTH_BYTES, "reads end at the budget");
        authed.cancel();
        let n = budgeted.read(&mut buf).await.unwrap();
        assert_eq!(n, 10);
    }

    #[tokio::test]
    async fn slots_come_back_when_dropped() {
        let pool = PreAuth::new(1);
        let (slot, _) = pool.admit().unwrap().into_parts();
        assert!(pool.admit().is_none());
        drop(slot);
        assert!(pool.admit().is_some());
    }

    #[tokio::test]
    async fn the_deadline_evicts_only_a_session_that_never_authenticates() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let authed = CancellationToken::new();
        enforce_deadline(
            authed.clone(),
            Duration::from_millis(10),
            CancellationToken::new(),
            move || tx.send(()).unwrap(),
        )
        .await;
        rx.await.expect("evicted at the deadline");
        authed.cancel();
        enforce_deadline(
            authed,
            Duration::from_secs(10),
            CancellationToken::new(),
            || panic!("an authenticated session is not evicted"),
        )
        .await;
    }
}
