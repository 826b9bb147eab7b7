//! `runs.*`: durable agent-run records with traces (SQLite, `crate::state::store`).
//!
//! A run is started with an intent for an agent (the session's bound agent, the given
//! `agent_id`, or `name:<slug>` of `agent_name`; with none of them `runs.start` is refused)
//! and ends once: completed with CAR's `AgentOutcome` or a bare status (`runs.complete`),
//! cancelled (`runs.cancel`, in [`lifecycle`]), or incomplete (its producer
//! connection closed and nobody resumed it, or the daemon stopped while it ran). An ended
//! run is never reopened: a later `runs.complete` is `-32602` (`data.reason:
//! "run_terminal"`). `idempotency_key` is the run's id, so `runs.start` is safe to repeat:
//! the same owner and key return the existing run (`created: false`).
//!
//! Ownership: a run is completed by the identity that started it (the bound agent, else the
//! user) or a host session; anyone else is told `no run …` (`data.reason:
//! "run_not_found"`), as for an unknown id. Reads follow CAR's rule: `runs.get_trace`,
//! `runs.list` and `runs.subscribe` need a host session or a session bound to the run's
//! agent (`-32603 permission denied` with `data.reason: "not_owner"` otherwise); an unknown
//! run id answers `runs.get_trace` with CAR's not-found marker `{run_id, not_found: true}`.
//! Trace records ([`records`]) stream as `runs.trace.event` `{run_id, agent_id,
//! record, cursor, status}` after the `runs.subscribe` snapshot. Ended runs are kept per
//! owner by count and age, and `runs.delete` removes one ([`retention`]).

pub mod lifecycle;
pub mod retention;
mod turns;

use car_proto::errors::RpcError;
use car_proto::methods::CallerRole;
use rusqlite::params;
use serde_json::{json, Value};

use car_proto::methods::fields::Name;
use car_proto::methods::runs::{
    self as m, CompleteParams, CompleteReply, ListParams, ListReply, Outcome, RunRecord,
    StartParams, StartReply, SubscribeParams, SubscribeReply, TraceEvent, TraceParams, TraceReply,
    UnsubscribeParams, UnsubscribeReply,
};

use crate::handler::{Call, Routes};
use crate::state::run_records::{
    self as records, is_terminal, live_status, load, run_row, Pending, COLUMNS,
};
use crate::state::session::Identity;
use crate::state::store::db_error;
use crate::state::RunEvent;
use car_proto::clock::now_ms;
use car_proto::methods::runs::OUTCOME_STATUSES;

const MAX_TEXT: usize = 16 * 1024;

/// Who may complete a run: the identity that started it, or a host session.
pub(super) fn sees(identity: &Identity, owner: &str) -> bool {
    identity.role == CallerRole::Host || owner == identity.owner_key()
}

/// Who may read a run's record and trace (CAR's rule): a host session, or a session bound
/// to the run's agent.
pub(super) fn may_read(identity: &Identity, agent_id: Option<&str>) -> bool {
    identity.role == CallerRole::Host
        || (identity.agent_id.is_some() && identity.agent_id.as_deref() == agent_id)
}

pub(super) fn not_entitled(what: &str) -> RpcError {
    RpcError::internal(format!(
        "permission denied: {what} needs a host session or a session bound to the run's agent"
    ))
    .with_data(json!({"reason": "not_owner"}))
}

/// An unknown run, or one the caller may not act on: the two answer the same.
pub(super) fn no_run(run_id: &str) -> RpcError {
    RpcError::invalid_params(format!("run_id: no run {run_id:?} visible to this session"))
        .with_data(json!({"reason": "run_not_found"}))
}

/// A run that has ended, for a method that needs it running.
pub(super) fn ended(run_id: &str, run: &RunRecord) -> RpcError {
    let how = match run.status.as_str() {
        "completed" => format!(
            "is already completed ({})",
            serde_json::to_string(&run.outcome).unwrap_or_default()
        ),
        "cancelled" => "was cancelled".to_string(),
        _ => "already ended incomplete".to_string(),
    };
    RpcError::invalid_params(format!(
        "run_id: run {run_id:?} {how}; an ended run is never reopened"
    ))
    .with_data(json!({"reason": "run_terminal"}))
}

fn text(field: &str, value: Option<String>) -> Result<Option<String>, RpcError> {
    match value {
        Some(t) if t.trim().is_empty() => Err(RpcError::invalid_params(format!(
            "{field}: must not be blank"
        ))),
        Some(t) if t.len() > MAX_TEXT => Err(RpcError::invalid_params(format!(
            "{field}: is longer than {MAX_TEXT} bytes"
        ))),
        other => Ok(other),
    }
}

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Start, _, _>(start)
        .add::<m::Complete, _, _>(complete)
        .add::<m::List, _, _>(list)
        .add::<m::GetTrace, _, _>(get_trace)
        .add::<m::Subscribe, _, _>(subscribe)
        .add::<m::Unsubscribe, _, _>(unsubscribe);
    turns::register(routes);
    lifecycle::register(routes);
    retention::register(routes);
}

/// `runs.unsubscribe {run_id?}` → `{run_id, removed}`: stops this connection's
/// subscription to that run (or its all-runs subscription).
async fn unsubscribe(call: Call, p: UnsubscribeParams) -> Result<UnsubscribeReply, RpcError> {
    let run_id = p.run_id.map(Name::into_string);
    Ok(UnsubscribeReply {
        removed: call.session.remove_run_subscriptions(run_id.as_deref()),
        run_id,
    })
}

fn new_run_id() -> String {
    format!("run-{}", car_proto::token::random_hex(8))
}

/// `runs.start {intent, agent_id?, agent_name?, idempotency_key?}` → the run, with `created`.
async fn start(call: Call, p: StartParams) -> Result<StartReply, RpcError> {
    {
        let intent = text("intent", Some(p.intent))?
            .ok_or_else(|| RpcError::invalid_params("intent: is required"))?;
        // CAR's loop sends an empty outcome_description when it has none.
        let outcome_description = text(
            "outcome_description",
            p.outcome_description.filter(|s| !s.trim().is_empty()),
        )?;
        let identity = call.session.identity();
        let agent_id = p.agent_id.map(Name::into_string);
        if let (Some(bound), Some(given)) = (&identity.agent_id, &agent_id) {
            if bound != given {
                return Err(RpcError::invalid_params(format!(
                    "agent_id: {given:?} does not match this session's agent {bound:?}"
                )));
            }
        }
        let agent_name = p.agent_name.map(Name::into_string);
        let agent_id = agent_id
            .or(identity.agent_id.clone())
            .or_else(|| agent_name.as_ref().map(|n| format!("name:{}", slug(n))))
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "agent_id: a run needs an owning agent: send agent_id or agent_name, or authenticate as an agent",
                )
            })?;
        let key = p.idempotency_key.map(Name::into_string);
        let owner = identity.owner_key();
        // CAR: an idempotency key is the run's id.
        let run_id = key.clone().unwrap_or_else(new_run_id);
        let (owner2, run_id2) = (owner, run_id.clone());
        let events = call.state.runs.events.clone();
        let (run, created) = call
            .state
            .data.store
            .run(move |c| {
                let tx = c.transaction().map_err(db_error)?;
                if key.is_some() {
                    if let Some((existing_owner, run)) = load(&tx, &run_id2)? {
                        if existing_owner != owner2 {
                            return Err(RpcError::invalid_params(
                                "idempotency_key: names a run of another owner",
                            ));
                        }
                        return Ok((run, false));
                    }
                }
                tx.execute(
                    "INSERT INTO runs (run_id, owner, intent, agent_id, agent_name, idempotency_key, status, started_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                    params![run_id2, owner2, intent, agent_id, agent_name, key, now_ms()],
                )
                .map_err(db_error)?;
                let mut pending = Pending::default();
                pending.append(&tx, &run_id2, "started", &json!({"intent": intent, "outcome_description": outcome_description, "agent_id": agent_id}))?;
                let (_, run) = load(&tx, &run_id2)?.expect("row just inserted");
                retention::prune(&tx, &owner2)?;
                tx.commit().map_err(db_error)?;
                pending.publish(&events);
                Ok((run, true))
            })
            .await?;
        if created {
            call.session.track_run(&run_id);
            call.state.runs.live.attach(&run_id, &call.session, false);
        }
        Ok(StartReply { run, created })
    }
}

/// `name:<slug>`: an agent id derived from a display name (lower-case ASCII letters,
/// digits and `-`).
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `runs.complete {run_id, outcome, summary?}` → the completed run.
async fn complete(call: Call, p: CompleteParams) -> Result<CompleteReply, RpcError> {
    {
        let run_id = p.run_id.into_string();
        let (outcome, summary, agent_outcome) = match p.outcome {
            Outcome::Status(status) => (status, p.summary, None),
            Outcome::Outcome(o) => {
                let summary = o.summary.clone().or(p.summary);
                (o.status.clone(), summary, serde_json::to_value(&o).ok())
            }
        };
        if !OUTCOME_STATUSES.contains(&outcome.as_str()) {
            return Err(RpcError::invalid_params(format!(
                "outcome: must be one of {}, got {outcome:?}",
                OUTCOME_STATUSES.join(", ")
            )));
        }
        // CAR's loop sends an empty summary when the model gave none: that is no summary.
        let summary = text("summary", summary.filter(|s| !s.trim().is_empty()))?;
        let identity = call.session.identity();
        let id = run_id.clone();
        let events = call.state.runs.events.clone();
        // CAR's outcome as recorded in the `ended` record (a bare status becomes one).
        let recorded =
            agent_outcome.unwrap_or_else(|| json!({"status": outcome, "summary": summary}));
        let run = call
            .state
            .data.store
            .run(move |c| {
                let tx = c.transaction().map_err(db_error)?;
                let run = match load(&tx, &id)? {
                    Some((owner, run)) if sees(&identity, &owner) => run,
                    _ => return Err(no_run(&id)),
                };
                // The first terminal wins: an ended run is never completed again.
                if is_terminal(&run.status) {
                    return Err(ended(&id, &run));
                }
                tx.execute(
                    "UPDATE runs SET status = 'completed', outcome = ?2, summary = ?3, completed_ms = ?4 WHERE run_id = ?1",
                    params![id, outcome, summary, now_ms()],
                )
                .map_err(db_error)?;
                let mut pending = Pending::default();
                pending.append(&tx, &id, "ended", &json!({"termination": "outcome", "outcome": recorded}))?;
                let (_, run) = load(&tx, &id)?.expect("row exists");
                tx.commit().map_err(db_error)?;
                pending.publish(&events);
                Ok(run)
            })
            .await?;
        call.session.untrack_run(&run_id);
        if let Some(producer) = call.state.runs.live.release(&run_id) {
            producer.untrack_run(&run_id);
        }
        Ok(CompleteReply { run, ok: true })
    }
}

/// `runs.list {status?, limit?}` → runs visible to this session, newest first.
async fn list(call: Call, p: ListParams) -> Result<ListReply, RpcError> {
    {
        let status = p.status.map(|s| {
            if s == "in_progress" {
                "running".to_string()
            } else {
                s
            }
        });
        if let Some(s) = &status {
            if !["running", "completed", "incomplete", "cancelled"].contains(&s.as_str()) {
                return Err(RpcError::invalid_params(format!(
                    "status: must be in_progress, running, completed, incomplete or cancelled, got {s:?}"
                )));
            }
        }
        let identity = call.session.identity();
        let agent = p
            .agent_id
            .map(Name::into_string)
            .or(identity.agent_id.clone());
        match &agent {
            Some(a) if !may_read(&identity, Some(a)) => return Err(not_entitled("runs.list")),
            None if identity.role != CallerRole::Host => {
                return Err(RpcError::invalid_params(
                    "agent_id: is required for a session not bound to an agent",
                ))
            }
            _ => {}
        }
        let limit = p.limit.unwrap_or(100).clamp(1, 10_000) as i64;
        call.state
            .data.store
            .run(move |c| {
                let mut stmt = c
                    .prepare(&format!("SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1) ORDER BY started_ms DESC, rowid DESC"))
                    .map_err(db_error)?;
                let rows = stmt.query_map(params![status], run_row).map_err(db_error)?;
                let mut out = Vec::new();
                for row in rows {
                    let (_, run) = row.map_err(db_error)?;
                    if agent.as_ref().is_none_or(|a| run.agent_id.as_deref() == Some(a.as_str())) {
                        out.push(run);
                        if out.len() as i64 >= limit {
                            break;
                        }
                    }
                }
                Ok(ListReply {
                    agent_id: agent,
                    runs: out,
                })
            })
            .await
    }
}

/// `runs.get_trace {run_id, cursor?}` → `{run_id, agent_id, run, records, cursor,
/// next_cursor}`: the records from offset `cursor` (echoed, CAR's rule), `next_cursor` the
/// offset after them.
async fn get_trace(call: Call, p: TraceParams) -> Result<TraceReply, RpcError> {
    let run_id = p.run_id.into_string();
    let cursor = p.cursor.unwrap_or(0).min(i64::MAX as u64) as i64;
    let identity = call.session.identity();
    call.state
        .data
        .store
        .run(move |c| {
            let run = match load(c, &run_id)? {
                Some((_, run)) if may_read(&identity, run.agent_id.as_deref()) => run,
                Some(_) => return Err(not_entitled("runs.get_trace")),
                // CAR's not-found marker: nothing is revealed, there is no owner to check.
                None => {
                    return Ok(TraceReply::NotFound {
                        run_id,
                        not_found: true,
                    })
                }
            };
            let records = records::records(c, &run_id, None, cursor)?;
            let next = cursor + records.len() as i64;
            Ok(TraceReply::Found {
                agent_id: run.agent_id.clone(),
                run_id,
                run: Box::new(run),
                records,
                cursor: cursor as u64,
                next_cursor: next as u64,
            })
        })
        .await
}

/// `runs.subscribe {run_id}` → CAR's snapshot `{run_id, agent_id, turns_so_far, cursor,
/// status}`, then a `runs.trace.event` for every record appended after it. The snapshot is
/// read and the subscriber registered in one database job, the one that appends and
/// publishes records, so no record is missed or repeated. Without `run_id` →
/// `{subscribed: true}` and the records of every run this session may read.
async fn subscribe(call: Call, p: SubscribeParams) -> Result<SubscribeReply, RpcError> {
    let Some(run_id) = p.run_id.map(Name::into_string) else {
        let events = call.state.runs.events.subscribe();
        let stop = call.session.add_run_subscription(None);
        call.session.forward_until(
            events,
            "runs.trace.event",
            |session, e: RunEvent| {
                may_read(&session.identity(), e.agent_id.as_deref()).then(|| trace_event(e))
            },
            stop,
        );
        return Ok(SubscribeReply::All { subscribed: true });
    };
    let identity = call.session.identity();
    let sender = call.state.runs.events.clone();
    let id = run_id.clone();
    let (snapshot, events) = call
        .state
        .data
        .store
        .run(move |c| {
            let run = match load(c, &id)? {
                Some((_, run)) if may_read(&identity, run.agent_id.as_deref()) => run,
                Some(_) => return Err(not_entitled("runs.subscribe")),
                None => return Err(no_run(&id)),
            };
            let turns = records::turns(c, &id)?;
            let events = sender.subscribe();
            Ok((
                SubscribeReply::Run {
                    run_id: id,
                    agent_id: run.agent_id,
                    cursor: turns.len() as u64,
                    turns_so_far: turns,
                    status: live_status(&run.status).to_string(),
                },
                events,
            ))
        })
        .await?;
    let stop = call.session.add_run_subscription(Some(run_id.clone()));
    call.session.forward_until(
        events,
        "runs.trace.event",
        move |_, e: RunEvent| (e.run_id == run_id).then(|| trace_event(e)),
        stop,
    );
    Ok(snapshot)
}

/// `runs.trace.event` params.
fn trace_event(e: RunEvent) -> Value {
    serde_json::to_value(TraceEvent {
        run_id: e.run_id,
        agent_id: e.agent_id,
        record: e.record,
        cursor: e.cursor,
        status: e.status,
    })
    .unwrap_or_default()
}
