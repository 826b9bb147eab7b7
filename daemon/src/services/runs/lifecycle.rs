//! How runs end and change hands (docs/protocol-choices.md, "Run lifecycle"):
//! `runs.cancel`, `runs.resume`, and what a closing connection or a restart does to the runs
//! it was producing.
//!
//! `runs.cancel {run_id, idempotency_key, reason}` (needs `runs.cancel.v1`; a host session
//! or one bound to the run's agent, else the same `no run …` an unknown id gets): records a
//! `cancellation_requested` trace record (the reason's SHA-256, never the text), stops the
//! run's work — the proposals running for it stop, each `tools.execute` they wait on is
//! withdrawn and sent `tools.cancel {request_id, action_id, reason}`, the producer
//! connection's inference calls are cancelled — and ends the run `cancelled` in the same
//! first-terminal-wins transaction `runs.complete` uses. It answers CAR's receipt; the same
//! key with the same reason and caller answers the same receipt again, a different key
//! after the end answers `already_terminal` and appends nothing.
//!
//! `runs.resume {run_id}` (needs `runs.resume.v1`; only a session bound to the run's agent):
//! takes over a running run whose producer connection dropped while its resume lease runs;
//! the connection becomes the run's producer (its turns, completion and cancellation), but
//! it submits no new proposal under the run (a resumed run is recovery only).

use std::sync::Arc;

use car_proto::capabilities::RUNS_RESUME_V1;
use car_proto::errors::RpcError;
use car_proto::methods::runs::{
    self as m, CancelParams, CancelReceipt, CancelStatus, ResumeParams, ResumeReply,
    MAX_CANCEL_KEY_BYTES, MAX_CANCEL_REASON_BYTES,
};
use car_proto::methods::CallerRole;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use super::{ended, may_read, no_run};
use crate::handler::{Call, Routes};
use crate::state::run_records::load;
use crate::state::run_records::{self as records, is_terminal, Pending};
use crate::state::run_registry::ClaimRefused;
use crate::state::session::{ActiveCallback, Identity, Session};
use crate::state::store::{db_error, NewEvent};
use crate::state::ServerState;
use car_proto::clock::now_ms;

/// CAR's receipt version.
const RECEIPT_VERSION: u64 = 1;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Cancel, _, _>(cancel)
        .add::<m::Resume, _, _>(resume);
}

/// Who a receipt names: `host`, `agent:<id>`, or `operator`.
fn principal_of(identity: &Identity) -> String {
    match (identity.role, &identity.agent_id) {
        (CallerRole::Host, _) => "host".into(),
        (_, Some(agent)) => format!("agent:{agent}"),
        _ => "operator".into(),
    }
}

fn bounded(field: &str, value: String, max: usize) -> Result<String, RpcError> {
    if value.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "{field}: must not be empty"
        )));
    }
    if value.len() > max {
        return Err(RpcError::invalid_params(format!(
            "{field}: is longer than {max} bytes"
        )));
    }
    Ok(value)
}

/// One cancellation request, as its receipt names it.
#[derive(Debug, Clone)]
struct Ask {
    run_id: String,
    key: String,
    reason_digest: String,
    principal: String,
}

impl Ask {
    fn receipt(
        &self,
        status: CancelStatus,
        terminal_digest: Option<String>,
        callback: Option<&ActiveCallback>,
    ) -> CancelReceipt {
        let mut body = json!({
            "receipt_version": RECEIPT_VERSION,
            "run_id": self.run_id,
            "idempotency_key": self.key,
            "reason_digest": self.reason_digest,
            "principal": self.principal,
            "status": status,
            "terminal_digest": terminal_digest,
            "action_id": callback.map(|c| c.action_id.clone()),
            "request_id": callback.map(|c| c.request_id.clone()),
        });
        body["receipt_digest"] = json!(records::digest(&body));
        serde_json::from_value(body).expect("a receipt decodes")
    }

    /// The receipt already answered for this key; a key reused with another reason or by
    /// another caller is refused.
    fn earlier(&self, c: &Connection) -> Result<Option<CancelReceipt>, RpcError> {
        let row: Option<(String, String, String)> = c
            .query_row(
                "SELECT reason_digest, principal, receipt FROM run_cancellations WHERE run_id = ?1 AND idempotency_key = ?2",
                params![self.run_id, self.key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db_error)?;
        match row {
            None => Ok(None),
            Some((digest, principal, receipt))
                if digest == self.reason_digest && principal == self.principal =>
            {
                serde_json::from_str(&receipt)
                    .map(Some)
                    .map_err(|e| RpcError::internal(format!("stored receipt: {e}")))
            }
            Some(_) => Err(RpcError::invalid_params(format!(
                "idempotency_key: {:?} already cancelled run {:?} with another reason or caller",
                self.key, self.run_id
            ))
            .with_data(json!({"reason": "idempotency_conflict"}))),
        }
    }

    fn keep(&self, c: &Connection, receipt: &CancelReceipt) -> Result<(), RpcError> {
        c.execute(
            "INSERT INTO run_cancellations (run_id, idempotency_key, reason_digest, principal, receipt) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                self.run_id,
                self.key,
                self.reason_digest,
                self.principal,
                serde_json::to_string(receipt).expect("a receipt encodes")
            ],
        )
        .map_err(db_error)?;
        Ok(())
    }

    /// `already_terminal`, bound to the run's `ended` record.
    fn already_ended(&self, c: &Connection) -> Result<CancelReceipt, RpcError> {
        let terminal = records::ended_record(c, &self.run_id)?.map(|r| records::digest(&r));
        let receipt = self.receipt(CancelStatus::AlreadyTerminal, terminal, None);
        self.keep(c, &receipt)?;
        Ok(receipt)
    }
}

/// `runs.cancel {run_id, idempotency_key, reason}` → CAR's receipt.
async fn cancel(call: Call, p: CancelParams) -> Result<CancelReceipt, RpcError> {
    let key = bounded("idempotency_key", p.idempotency_key, MAX_CANCEL_KEY_BYTES)?;
    let reason = bounded("reason", p.reason, MAX_CANCEL_REASON_BYTES)?;
    let identity = call.session.identity();
    let ask = Ask {
        run_id: p.run_id.into_string(),
        key,
        reason_digest: car_proto::schema::sha256_hex(reason.as_bytes()),
        principal: principal_of(&identity),
    };
    let events = call.state.runs.events.clone();
    let first = ask.clone();
    // The receipt when the request is already answered; `None` while the run runs.
    let answered = call
        .state
        .data.store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            match load(&tx, &first.run_id)? {
                Some((_, run)) if may_read(&identity, run.agent_id.as_deref()) => {
                    if let Some(receipt) = first.earlier(&tx)? {
                        return Ok(Some(receipt));
                    }
                    if is_terminal(&run.status) {
                        let receipt = first.already_ended(&tx)?;
                        tx.commit().map_err(db_error)?;
                        return Ok(Some(receipt));
                    }
                }
                _ => return Err(no_run(&first.run_id)),
            }
            let mut pending = Pending::default();
            pending.append(
                &tx,
                &first.run_id,
                "cancellation_requested",
                &json!({"idempotency_key": first.key, "reason_digest": first.reason_digest, "principal": first.principal}),
            )?;
            tx.commit().map_err(db_error)?;
            pending.publish(&events);
            Ok(None)
        })
        .await?;
    if let Some(receipt) = answered {
        return Ok(receipt);
    }
    let callback = stop_work(&call.state, &ask.run_id);
    let events = call.state.runs.events.clone();
    let last = ask.clone();
    let receipt = call
        .state
        .data.store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            if let Some(receipt) = last.earlier(&tx)? {
                return Ok(receipt);
            }
            let status: String = tx
                .query_row(
                    "SELECT status FROM runs WHERE run_id = ?1",
                    [&last.run_id],
                    |r| r.get(0),
                )
                .map_err(db_error)?;
            // The first terminal wins: a run completed meanwhile stays completed.
            if is_terminal(&status) {
                let receipt = last.already_ended(&tx)?;
                tx.commit().map_err(db_error)?;
                return Ok(receipt);
            }
            tx.execute(
                "UPDATE runs SET status = 'cancelled', outcome = 'cancelled', completed_ms = ?2 WHERE run_id = ?1",
                params![last.run_id, now_ms()],
            )
            .map_err(db_error)?;
            let mut pending = Pending::default();
            let ended = pending.append(
                &tx,
                &last.run_id,
                "ended",
                &json!({"termination": "cancelled", "idempotency_key": last.key, "reason_digest": last.reason_digest, "principal": last.principal}),
            )?;
            let receipt = last.receipt(
                CancelStatus::CancelledConfirmed,
                Some(records::digest(&ended)),
                callback.as_ref(),
            );
            last.keep(&tx, &receipt)?;
            tx.commit().map_err(db_error)?;
            pending.publish(&events);
            Ok(receipt)
        })
        .await?;
    if receipt.status == CancelStatus::CancelledConfirmed {
        call.state.data.store.record(NewEvent {
            kind: "run.cancelled",
            session_id: Some(call.session.label()),
            agent_id: call.session.agent_id(),
            action_id: receipt.action_id.clone(),
            request_id: receipt.request_id.clone(),
            data: json!({
                "run_id": receipt.run_id,
                "idempotency_key": receipt.idempotency_key,
                "reason_digest": receipt.reason_digest,
                "principal": receipt.principal,
                "receipt_digest": receipt.receipt_digest,
            }),
            ..Default::default()
        });
    }
    Ok(receipt)
}

/// Stops what runs for `run_id`: its proposals (work token), the tool callbacks they wait
/// on (withdrawn, and the client is sent `tools.cancel`), the producer's inference calls.
/// Returns the oldest callback withdrawn. Every step is synchronous, so nothing the run's
/// work produces afterwards can land in its trace.
fn stop_work(state: &ServerState, run_id: &str) -> Option<ActiveCallback> {
    if let Some(work) = state.runs.live.work(run_id) {
        work.cancel();
    }
    let producer = state.runs.live.release(run_id)?;
    producer.untrack_run(run_id);
    let reason = format!("run {run_id:?} was cancelled");
    let withdrawn = producer.withdraw_callbacks(
        run_id,
        &RpcError::internal(format!("cancelled: {reason}"))
            .with_data(json!({"reason": "run_cancelled", "run_id": run_id})),
    );
    for c in &withdrawn {
        producer.notify(
            "tools.cancel",
            &json!({"request_id": c.request_id, "action_id": c.action_id, "reason": reason}),
        );
        state.data.store.record(NewEvent {
            kind: "tool.cancelled",
            session_id: Some(producer.label()),
            agent_id: producer.agent_id(),
            action_id: Some(c.action_id.clone()),
            request_id: Some(c.request_id.clone()),
            data: json!({"reason": reason, "run_id": run_id}),
            ..Default::default()
        });
    }
    state.inference.cancel_session(producer.id);
    withdrawn.into_iter().next()
}

/// `runs.resume {run_id}` → `{run_id, agent_id, client_id, resumed_from_client_id}`.
async fn resume(call: Call, p: ResumeParams) -> Result<ResumeReply, RpcError> {
    let run_id = p.run_id.into_string();
    let identity = call.session.identity();
    let agent = match (identity.role, identity.agent_id) {
        (CallerRole::Agent, Some(agent)) => agent,
        _ => {
            return Err(RpcError::internal(
                "permission denied: runs.resume needs a session bound to the run's agent (session.auth {token, agent_id}); a host or unbound session cannot resume a run",
            )
            .with_data(json!({"reason": "not_owner"})))
        }
    };
    let id = run_id.clone();
    let run = call.state.data.store.run(move |c| load(c, &id)).await?;
    let run = match run {
        Some((_, run)) if run.agent_id.as_deref() == Some(agent.as_str()) => run,
        _ => return Err(no_run(&run_id)),
    };
    if is_terminal(&run.status) {
        return Err(ended(&run_id, &run));
    }
    let from = call
        .state
        .runs.live
        .claim(&run_id, &call.session)
        .map_err(|refused| match refused {
            ClaimRefused::ProducerLive => RpcError::invalid_params(format!(
                "run_id: run {run_id:?} still has a live producer connection; only a run whose producer disconnected can be resumed"
            ))
            .with_data(json!({"reason": "producer_live"})),
            ClaimRefused::NoLease => RpcError::invalid_params(format!(
                "run_id: run {run_id:?} has no resume lease: its producer did not negotiate runs.resume.v1, or the lease ran out"
            ))
            .with_data(json!({"reason": "no_lease"})),
        })?;
    call.session.track_run(&run_id);
    let client_id = call.session.label();
    call.state.data.store.record(NewEvent {
        kind: "run.resumed",
        session_id: Some(client_id.clone()),
        agent_id: call.session.agent_id(),
        data: json!({"run_id": run_id, "client_id": client_id, "resumed_from_client_id": from}),
        ..Default::default()
    });
    Ok(ResumeReply {
        run_id,
        agent_id: agent,
        client_id,
        resumed_from_client_id: from,
    })
}

/// The connection closed: each run it was producing is leased for `runs.resume` (when it
/// negotiated `runs.resume.v1`) or ends `incomplete` now.
pub async fn on_session_closed(session: &Session, state: &Arc<ServerState>) {
    let resumable = session.negotiated_capability(RUNS_RESUME_V1);
    let mut lost = Vec::new();
    for run_id in session.take_open_runs() {
        match state.runs.live.producer_closed(&run_id, session, resumable) {
            Some(lease) => {
                let state = state.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(state.daemon.config.run_resume_lease) => {}
                        // A daemon that stops marks its running runs incomplete at its next start.
                        _ = state.daemon.shutdown.cancelled() => return,
                    }
                    if state.runs.live.expire(&run_id, lease) {
                        mark_incomplete(
                            &state,
                            vec![run_id],
                            "its producer connection closed and no runs.resume claimed it within the lease",
                        )
                        .await;
                    }
                });
            }
            None => lost.push(run_id),
        }
    }
    mark_incomplete(state, lost, "the connection that started it closed").await;
}

/// Ends the still-running ones of `runs` `incomplete`.
async fn mark_incomplete(state: &ServerState, runs: Vec<String>, reason: &'static str) {
    if runs.is_empty() {
        return;
    }
    let events = state.runs.events.clone();
    let result = state
        .data
        .store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            let pending = incomplete(&tx, &runs, reason)?;
            tx.commit().map_err(db_error)?;
            pending.publish(&events);
            Ok(())
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "could not mark runs incomplete");
    }
}

fn incomplete(c: &Connection, runs: &[String], reason: &str) -> Result<Pending, RpcError> {
    let mut pending = Pending::default();
    for run_id in runs {
        let n = c
            .execute(
                "UPDATE runs SET status = 'incomplete', completed_ms = ?2 WHERE run_id = ?1 AND status = 'running'",
                params![run_id, now_ms()],
            )
            .map_err(db_error)?;
        if n == 1 {
            pending.append(
                c,
                run_id,
                "ended",
                &json!({"termination": "incomplete", "reason": reason}),
            )?;
        }
    }
    Ok(pending)
}

/// At startup: runs a previous daemon left running have lost their producer; they end
/// `incomplete`.
pub fn mark_orphans_incomplete_job(c: &mut Connection) -> Result<usize, RpcError> {
    let running: Vec<String> = c
        .prepare("SELECT run_id FROM runs WHERE status = 'running'")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(db_error)?;
    let tx = c.transaction().map_err(db_error)?;
    // Nobody is subscribed yet: the records are not published.
    incomplete(&tx, &running, "the daemon stopped while it was running")?;
    tx.commit().map_err(db_error)?;
    Ok(running.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_receipt_digests_every_field_before_it() {
        let ask = Ask {
            run_id: "r".into(),
            key: "k".into(),
            reason_digest: car_proto::schema::sha256_hex(b"why"),
            principal: "host".into(),
        };
        let r = ask.receipt(CancelStatus::AlreadyTerminal, Some("t".into()), None);
        let mut body = serde_json::to_value(&r).unwrap();
        let digest = body
            .as_object_mut()
            .unwrap()
            .remove("receipt_digest")
            .unwrap();
        assert_eq!(digest, json!(records::digest(&body)));
        assert_eq!(body["status"], "already_terminal");
        assert_eq!(body["action_id"], Value::Null);
        assert_eq!(
            ask.receipt(CancelStatus::AlreadyTerminal, Some("t".into()), None)
                .receipt_digest,
            r.receipt_digest,
            "deterministic"
        );
    }
}
