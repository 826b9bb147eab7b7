//! `watch`: the snapshot's pending approvals, then every `host.event` as it arrives, across
//! reconnects, with nothing printed twice and nothing silently lost.
//!
//! The cursor is the `(epoch, seq)` of the last event applied. The first subscription is
//! fresh (`host.subscribe {}`): its snapshot is printed and the cursor starts at the
//! snapshot's `seq`. When the connection drops, car-host reports it on stderr, waits (250
//! ms, doubling to 5 s while the daemon stays away) and resubscribes with
//! `{after_seq, epoch}`:
//! - `replayed: true`: the missed events arrive as ordinary `host.event` notifications and are
//!   printed like live ones;
//! - `replayed: false` (`reason: "epoch"` — a new daemon run — or `"gap"` — the daemon no longer
//!   holds them all): a note on stderr, the fresh snapshot is printed again, and the cursor
//!   restarts at its `seq`.
//!
//! Events at or below the cursor (or of another epoch) are dropped as duplicates. An
//! event beyond `cursor + 1` means the daemon dropped some for this subscriber (it fell
//! behind): car-host reconnects at once and resumes from the cursor, which replays them.
//!
//! Plumbing: one `car_daemon_client::Client` for the whole run. Its notification handler
//! for `host.event` (registered once; it serves every host connection) feeds one channel;
//! a subscription ends when [`Client::host_connection_closed`] resolves for the connection
//! it was made on, after the events already delivered are printed. Events an old
//! connection still delivers late are harmless: each connection's stream is gap-free from
//! where it started, so the cursor drops them as duplicates.
//!
//! [`Client::host_connection_closed`]: car_daemon_client::Client::host_connection_closed
//!
//! Output: human — one `approval …` line per pending approval in a snapshot, then one line
//! per event (`crate::output`). `--json` — a snapshot is one line
//! `{"kind": "watch.snapshot", epoch, seq, reason, agents, approvals}` (`approvals`:
//! the pending ones; `reason`: `null` at start, else why the resume was refused); every
//! event is the daemon's `host.event` params exactly as received. Notes and errors go to
//! stderr. `watch` runs until interrupted or its stdout closes; it exits 1 only when the
//! first connection fails.

use std::time::Duration;

use car_proto::methods::host::{ApprovalStatus, HostEvent, SubscribeReply};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::output::{approval_line, event_line, Out};
use crate::session::{Ctx, Failure};

const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What to do with one received event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Print,
    Duplicate,
    /// Events between the cursor and this one are missing.
    Gap {
        expected: u64,
    },
}

/// What a subscription reply means for the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscribed {
    /// A fresh start: print the snapshot.
    Fresh,
    /// Resumed; the missed events follow as notifications.
    Resumed { replayed: u64 },
    /// The resume was refused (`reason`); print the snapshot again.
    Resync { reason: String },
}

/// The `(epoch, seq)` of the last applied event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    epoch: Option<String>,
    seq: u64,
}

impl Cursor {
    /// `host.subscribe` params: fresh at first, then a resume from the cursor.
    pub fn params(&self) -> Value {
        match &self.epoch {
            None => json!({}),
            Some(epoch) => json!({"after_seq": self.seq, "epoch": epoch}),
        }
    }

    pub fn on_subscribed(&mut self, reply: &SubscribeReply) -> Subscribed {
        let outcome = match (&self.epoch, reply.replayed) {
            (None, _) => Subscribed::Fresh,
            (Some(_), Some(true)) => {
                return Subscribed::Resumed {
                    replayed: reply.replayed_count.unwrap_or(0),
                }
            }
            (Some(_), _) => Subscribed::Resync {
                reason: reply.reason.clone().unwrap_or_else(|| "unknown".into()),
            },
        };
        self.epoch = Some(reply.epoch.clone());
        self.seq = reply.seq;
        outcome
    }

    pub fn accept(&mut self, event: &HostEvent) -> Verdict {
        if self.epoch.as_deref() != Some(event.epoch.as_str()) || event.seq <= self.seq {
            return Verdict::Duplicate;
        }
        if event.seq != self.seq + 1 {
            return Verdict::Gap {
                expected: self.seq + 1,
            };
        }
        self.seq = event.seq;
        Verdict::Print
    }
}

/// Runs until interrupted (see the module docs).
pub async fn watch(ctx: &Ctx) -> Result<(), Failure> {
    // Registered once: the client delivers every host.event of every host connection.
    let (tx, mut events) = mpsc::unbounded_channel();
    ctx.client
        .register_notification_handler("host.event", move |params| {
            let _ = tx.send(params);
        });
    let mut cursor = Cursor::default();
    let mut backoff = FIRST_BACKOFF;
    let mut first = true;
    loop {
        let ended = session(ctx, &mut cursor, first, &mut events).await;
        let was_first = std::mem::replace(&mut first, false);
        match ended {
            Ok(Ended::Gap) => {
                // Start the resume on a fresh connection: what the old one still had
                // queued (beyond the gap) must not be read as another gap.
                ctx.client.disconnect();
                while events.try_recv().is_ok() {}
                backoff = FIRST_BACKOFF;
                continue;
            }
            Ok(Ended::Lost(at)) => {
                eprintln!("car-host: connection lost: the connection to {at} ended; reconnecting");
                backoff = FIRST_BACKOFF;
            }
            Err(e) if was_first || matches!(e, Failure::Output(_)) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "reconnect failed");
                eprintln!(
                    "car-host: reconnect failed: {}; retrying in {}ms",
                    first_line(&e.to_string()),
                    backoff.as_millis()
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

enum Ended {
    /// The connection (to the endpoint named) ended.
    Lost(String),
    /// Events were missing; resume at once.
    Gap,
}

/// One connection: subscribe, print, until it ends.
async fn session(
    ctx: &Ctx,
    cursor: &mut Cursor,
    first: bool,
    events: &mut mpsc::UnboundedReceiver<Value>,
) -> Result<Ended, Failure> {
    ctx.connect(first).await?;
    let at = ctx.where_();
    let (reply, raw): (SubscribeReply, Value) =
        ctx.call_decoded("host.subscribe", cursor.params()).await?;
    // The connection the subscription lives on; resolves at once if it already ended.
    let closed = ctx.client.host_connection_closed();
    tokio::pin!(closed);
    let out = ctx.out;
    let pending = reply
        .approvals
        .iter()
        .filter(|a| a.status == ApprovalStatus::Pending)
        .count();
    match cursor.on_subscribed(&reply) {
        Subscribed::Fresh => {
            eprintln!(
                "car-host: watching {at} (car-server {}): {} agents, {pending} pending approvals",
                reply.identity.version,
                reply.agents.len()
            );
            snapshot(out, &reply, &raw, None)?;
        }
        Subscribed::Resumed { replayed } => {
            eprintln!("car-host: reconnected; {replayed} missed events follow");
        }
        Subscribed::Resync { reason } => {
            let why = match reason.as_str() {
                "epoch" => "the daemon restarted",
                "gap" => "the daemon no longer holds every missed event",
                _ => "the daemon refused to replay",
            };
            eprintln!(
                "car-host: reconnected, but missed events are lost ({why}); current state follows: {pending} pending approvals"
            );
            snapshot(out, &reply, &raw, Some(&reason))?;
        }
    }
    loop {
        // Everything already delivered is printed before the end is noticed.
        let params = tokio::select! {
            biased;
            Some(params) = events.recv() => params,
            () = &mut closed => return Ok(Ended::Lost(at)),
        };
        let event = match serde_json::from_value::<HostEvent>(params.clone()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "unreadable host.event");
                if out.json {
                    out.json(&params)?;
                } else {
                    out.line(&format!("?  unreadable host.event  {params}"))?;
                }
                continue;
            }
        };
        match cursor.accept(&event) {
            Verdict::Print if out.json => out.json(&params)?,
            Verdict::Print => out.line(&event_line(&event))?,
            Verdict::Duplicate => tracing::debug!(seq = event.seq, "duplicate event dropped"),
            Verdict::Gap { expected } => {
                eprintln!(
                    "car-host: events {expected}..{} were dropped by the daemon (this watcher fell behind); resuming",
                    event.seq - 1
                );
                return Ok(Ended::Gap);
            }
        }
    }
}

fn snapshot(
    out: Out,
    reply: &SubscribeReply,
    raw: &Value,
    reason: Option<&str>,
) -> Result<(), Failure> {
    let pending = || {
        reply
            .approvals
            .iter()
            .enumerate()
            .filter(|(_, a)| a.status == ApprovalStatus::Pending)
    };
    if out.json {
        let rows = raw["approvals"].as_array().cloned().unwrap_or_default();
        let approvals: Vec<Value> = pending()
            .filter_map(|(i, _)| rows.get(i).cloned())
            .collect();
        out.json(&json!({
            "kind": "watch.snapshot",
            "epoch": reply.epoch,
            "seq": reply.seq,
            "reason": reason,
            "agents": raw["agents"],
            "approvals": approvals,
        }))?;
    } else {
        for (_, a) in pending() {
            out.line(&approval_line(a))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(
        epoch: &str,
        seq: u64,
        replayed: Option<bool>,
        reason: Option<&str>,
    ) -> SubscribeReply {
        serde_json::from_value(json!({
            "subscribed": true, "agents": [], "devices": [], "approvals": [], "events": [],
            "identity": {"version": "v", "pid": 1, "manifest_path": null, "manifest_role": "owner"},
            "epoch": epoch, "seq": seq, "replayed": replayed, "reason": reason,
            "replayed_count": replayed.map(|_| 2),
        }))
        .unwrap()
    }

    fn event(epoch: &str, seq: u64) -> HostEvent {
        serde_json::from_value(json!({
            "id": format!("event-{seq}"), "sequence": seq, "seq": seq, "epoch": epoch,
            "timestamp": "t", "kind": "host.notification", "agent_id": null,
            "message": null, "payload": {}
        }))
        .unwrap()
    }

    #[test]
    fn a_fresh_watch_starts_at_the_snapshot() {
        let mut c = Cursor::default();
        assert_eq!(c.params(), json!({}));
        assert_eq!(
            c.on_subscribed(&reply("e1", 5, None, None)),
            Subscribed::Fresh
        );
        assert_eq!(c.accept(&event("e1", 5)), Verdict::Duplicate);
        assert_eq!(c.accept(&event("e1", 6)), Verdict::Print);
        assert_eq!(c.accept(&event("e1", 6)), Verdict::Duplicate);
        assert_eq!(c.params(), json!({"after_seq": 6, "epoch": "e1"}));
    }

    #[test]
    fn a_resume_prints_the_replayed_events_once() {
        let mut c = Cursor::default();
        c.on_subscribed(&reply("e1", 6, None, None));
        assert_eq!(
            c.on_subscribed(&reply("e1", 9, Some(true), None)),
            Subscribed::Resumed { replayed: 2 }
        );
        // The cursor stays put until the replayed events are applied.
        assert_eq!(c.params(), json!({"after_seq": 6, "epoch": "e1"}));
        assert_eq!(c.accept(&event("e1", 7)), Verdict::Print);
        assert_eq!(c.accept(&event("e1", 8)), Verdict::Print);
        assert_eq!(c.accept(&event("e1", 7)), Verdict::Duplicate);
    }

    #[test]
    fn a_refused_resume_restarts_from_the_new_snapshot() {
        let mut c = Cursor::default();
        c.on_subscribed(&reply("e1", 6, None, None));
        assert_eq!(
            c.on_subscribed(&reply("e2", 1, Some(false), Some("epoch"))),
            Subscribed::Resync {
                reason: "epoch".into()
            }
        );
        assert_eq!(c.accept(&event("e1", 7)), Verdict::Duplicate);
        assert_eq!(c.accept(&event("e2", 1)), Verdict::Duplicate);
        assert_eq!(c.accept(&event("e2", 2)), Verdict::Print);
    }

    #[test]
    fn a_missing_event_is_a_gap_and_does_not_move_the_cursor() {
        let mut c = Cursor::default();
        c.on_subscribed(&reply("e1", 3, None, None));
        assert_eq!(c.accept(&event("e1", 6)), Verdict::Gap { expected: 4 });
        assert_eq!(c.params(), json!({"after_seq": 3, "epoch": "e1"}));
    }
}
