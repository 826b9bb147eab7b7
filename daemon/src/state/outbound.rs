//! One connection's outbound queue, bounded by bytes (docs/protocol-choices.md, "Framing").
//!
//! Handlers, reverse calls and notifications push frames here; the connection's single
//! writer task drains it to the socket. The queue counts the bytes not yet written: a push
//! that would take it past the limit marks the peer a slow consumer and aborts the
//! connection instead of letting daemon memory grow behind a peer that stopped reading.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the writer sends.
#[derive(Debug)]
pub enum OutFrame {
    Text(String),
    Ping,
    /// Send a Close frame with this code and reason, then stop writing.
    Close(u16, String),
}

/// The sending side, cloned into every producer of the connection.
#[derive(Debug, Clone)]
pub struct Outbound {
    tx: mpsc::UnboundedSender<OutFrame>,
    pending: Arc<AtomicUsize>,
    slow: Arc<AtomicBool>,
    limit: usize,
    abort: CancellationToken,
}

/// The writer's side.
#[derive(Debug)]
pub struct OutboundReceiver {
    pub rx: mpsc::UnboundedReceiver<OutFrame>,
    pending: Arc<AtomicUsize>,
}

impl OutboundReceiver {
    /// Called by the writer after a text frame of `len` bytes reached the socket.
    pub fn written(&self, len: usize) {
        self.pending.fetch_sub(len, Ordering::AcqRel);
    }
}

/// A queue of at most `limit` unwritten bytes; `abort` is cancelled on overflow.
pub fn channel(limit: usize, abort: CancellationToken) -> (Outbound, OutboundReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let pending = Arc::new(AtomicUsize::new(0));
    (
        Outbound {
            tx,
            pending: pending.clone(),
            slow: Arc::new(AtomicBool::new(false)),
            limit,
            abort,
        },
        OutboundReceiver { rx, pending },
    )
}

impl Outbound {
    /// Queues a text frame. Returns false when the connection is gone or the peer was just
    /// closed as a slow consumer.
    pub fn send_text(&self, frame: String) -> bool {
        let len = frame.len();
        let before = self.pending.fetch_add(len, Ordering::AcqRel);
        if before + len > self.limit {
            self.pending.fetch_sub(len, Ordering::AcqRel);
            if !self.slow.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    pending_bytes = before,
                    limit = self.limit,
                    "slow consumer: peer stopped reading; closing the connection"
                );
            }
            self.abort.cancel();
            return false;
        }
        if self.tx.send(OutFrame::Text(frame)).is_err() {
            self.pending.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Queues a control frame (not counted against the limit: they are tiny).
    pub fn send_control(&self, frame: OutFrame) -> bool {
        self.tx.send(frame).is_ok()
    }

    /// True once the peer was closed as a slow consumer.
    pub fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_aborts_and_drains_restore_room() {
        let abort = CancellationToken::new();
        let (out, mut rx) = channel(10, abort.clone());
        assert!(out.send_text("12345".into()));
        assert!(out.send_text("12345".into()));
        assert!(!abort.is_cancelled());
        let Some(OutFrame::Text(first)) = rx.rx.try_recv().ok() else {
            panic!()
        };
        rx.written(first.len());
        assert!(out.send_text("abcde".into()));
        assert!(!out.send_text("x".into()));
        assert!(abort.is_cancelled() && out.is_slow());
    }
}
