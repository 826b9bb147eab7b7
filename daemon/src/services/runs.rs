//! `runs.*`: durable agent-run records with traces (SQLite, `crate::store`).
//!
//! A run is started with an intent and completed with an outcome (`success`, `failure` or
//! `cancelled`). `idempotency_key` makes `runs.start` safe to repeat: the same owner and key
//! return the existing run (`created: false`). A run still running when the connection
//! that started it closes is marked `incomplete` (and so are runs left running by a daemon
//! that died); an incomplete run may still be completed later.
//!
//! Ownership: a run belongs to the agent the starting session is bound to, else to the
//! user (`user`). Host sessions see every run; other sessions see their owner's runs and
//! are told `no run …` about the rest, so ids of other owners' runs are not revealed.
//! Trace records (`started`, `completed`, `incomplete`) are pushed as `runs.trace.event`
//! `{run_id, record}` to sessions that called `runs.subscribe`.

use car_proto::errors::RpcError;
use car_proto::methods::CallerRole;
use rusqlite::{params, OptionalExtension, Row};
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};
use crate::session::{Identity, Session};
use crate::state::{RunEvent, ServerState};
use crate::store::{db_error, now_ms};

const OUTCOMES: &[&str] = &["success", "failure", "cancelled"];
const MAX_TEXT: usize = 16 * 1024;

fn owner_of(identity: &Identity) -> String {
    match (&identity.role, &identity.agent_id) {
        (CallerRole::Agent, Some(agent)) => format!("agent:{agent}"),
        _ => "user".into(),
    }
}

fn sees(identity: &Identity, owner: &str) -> bool {
    identity.role == CallerRole::Host || owner == owner_of(identity)
}

const COLUMNS: &str = "run_id, owner, intent, agent_id, agent_name, idempotency_key, status, outcome, summary, started_ms, completed_ms";

fn run_json(r: &Row<'_>) -> rusqlite::Result<(String, Value)> {
    let owner: String = r.get(1)?;
    Ok((
        owner,
        json!({
            "run_id": r.get::<_, String>(0)?,
            "intent": r.get::<_, String>(2)?,
            "agent_id": r.get::<_, Option<String>>(3)?,
            "agent_name": r.get::<_, Option<String>>(4)?,
            "idempotency_key": r.get::<_, Option<String>>(5)?,
            "status": r.get::<_, String>(6)?,
            "outcome": r.get::<_, Option<String>>(7)?,
            "summary": r.get::<_, Option<String>>(8)?,
            "started_ms": r.get::<_, i64>(9)?,
            "completed_ms": r.get::<_, Option<i64>>(10)?,
        }),
    ))
}

fn load(c: &rusqlite::Connection, run_id: &str) -> Result<Option<(String, Value)>, RpcError> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM runs WHERE run_id = ?1"),
        [run_id],
        run_json,
    )
    .optional()
    .map_err(db_error)
}

fn append_trace(
    c: &rusqlite::Connection,
    run_id: &str,
    kind: &str,
    data: &Value,
) -> Result<Value, RpcError> {
    let seq: i64 = c
        .query_row(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM run_trace WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )
        .map_err(db_error)?;
    let ts = now_ms();
    c.execute(
        "INSERT INTO run_trace (run_id, seq, ts_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![run_id, seq, ts, kind, data.to_string()],
    )
    .map_err(db_error)?;
    Ok(json!({"seq": seq, "ts_ms": ts, "kind": kind, "data": data}))
}

fn no_run(run_id: &str) -> RpcError {
    RpcError::invalid_params(format!("run_id: no run {run_id:?} visible to this session"))
}

fn publish(state: &ServerState, owner: String, run_id: &str, record: Value) {
    let _ = state.run_events.send(RunEvent {
        owner,
        run_id: run_id.to_string(),
        record,
    });
}

fn text(p: &Params, field: &str) -> Result<Option<String>, RpcError> {
    match p.opt_text(field)? {
        Some(t) if t.trim().is_empty() => Err(RpcError::invalid_params(format!(
            "{field} must not be blank"
        ))),
        Some(t) if t.len() > MAX_TEXT => Err(RpcError::invalid_params(format!(
            "{field} is longer than {MAX_TEXT} bytes"
        ))),
        other => Ok(other),
    }
}

fn new_run_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    format!(
        "run-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// `runs.start {intent, agent_id?, agent_name?, idempotency_key?}` → the run, with `created`.
pub fn start(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p =
            Params::new(params)?.only(&["intent", "agent_id", "agent_name", "idempotency_key"])?;
        let intent =
            text(&p, "intent")?.ok_or_else(|| RpcError::invalid_params("intent is required"))?;
        let identity = call.session.identity();
        let agent_id = p.opt_str("agent_id")?;
        if let (Some(bound), Some(given)) = (&identity.agent_id, &agent_id) {
            if bound != given {
                return Err(RpcError::invalid_params(format!(
                    "agent_id {given:?} does not match this session's agent {bound:?}"
                )));
            }
        }
        let agent_id = agent_id.or(identity.agent_id.clone());
        let agent_name = p.opt_str("agent_name")?;
        let key = p.opt_str("idempotency_key")?;
        let owner = owner_of(&identity);
        let run_id = new_run_id();
        let (owner2, run_id2) = (owner.clone(), run_id.clone());
        let (run, created, record) = call
            .state
            .store
            .run(move |c| {
                let tx = c.transaction().map_err(db_error)?;
                if let Some(key) = &key {
                    let existing: Option<String> = tx
                        .query_row("SELECT run_id FROM runs WHERE owner = ?1 AND idempotency_key = ?2", params![owner2, key], |r| r.get(0))
                        .optional()
                        .map_err(db_error)?;
                    if let Some(existing) = existing {
                        let (_, run) = load(&tx, &existing)?.expect("row just found");
                        return Ok((run, false, None));
                    }
                }
                tx.execute(
                    "INSERT INTO runs (run_id, owner, intent, agent_id, agent_name, idempotency_key, status, started_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                    params![run_id2, owner2, intent, agent_id, agent_name, key, now_ms()],
                )
                .map_err(db_error)?;
                let record = append_trace(&tx, &run_id2, "started", &json!({"intent": intent}))?;
                let (_, run) = load(&tx, &run_id2)?.expect("row just inserted");
                tx.commit().map_err(db_error)?;
                Ok((run, true, Some(record)))
            })
            .await?;
        if let Some(record) = record {
            call.session.track_run(&run_id);
            publish(&call.state, owner, &run_id, record);
        }
        let mut run = run;
        run["created"] = json!(created);
        Ok(run)
    })
}

/// `runs.complete {run_id, outcome, summary?}` → the completed run.
pub fn complete(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["run_id", "outcome", "summary"])?;
        let run_id = p.str("run_id")?;
        let outcome = p.str("outcome")?;
        if !OUTCOMES.contains(&outcome.as_str()) {
            return Err(RpcError::invalid_params(format!(
                "outcome must be success, failure or cancelled, got {outcome:?}"
            )));
        }
        let summary = text(&p, "summary")?;
        let identity = call.session.identity();
        let id = run_id.clone();
        let (owner, run, record) = call
            .state
            .store
            .run(move |c| {
                let tx = c.transaction().map_err(db_error)?;
                let (owner, run) = match load(&tx, &id)? {
                    Some((owner, run)) if sees(&identity, &owner) => (owner, run),
                    _ => return Err(no_run(&id)),
                };
                if run["status"] == "completed" {
                    return Err(RpcError::invalid_params(format!("run_id: run {id:?} is already completed ({})", run["outcome"])));
                }
                tx.execute(
                    "UPDATE runs SET status = 'completed', outcome = ?2, summary = ?3, completed_ms = ?4 WHERE run_id = ?1",
                    params![id, outcome, summary, now_ms()],
                )
                .map_err(db_error)?;
                let record = append_trace(&tx, &id, "completed", &json!({"outcome": outcome, "summary": summary}))?;
                let (_, run) = load(&tx, &id)?.expect("row exists");
                tx.commit().map_err(db_error)?;
                Ok((owner, run, record))
            })
            .await?;
        call.session.untrack_run(&run_id);
        publish(&call.state, owner, &run_id, record);
        Ok(run)
    })
}

/// `runs.list {status?, limit?}` → runs visible to this session, newest first.
pub fn list(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["status", "limit"])?;
        let status = p.opt_str("status")?;
        if let Some(s) = &status {
            if !["running", "completed", "incomplete"].contains(&s.as_str()) {
                return Err(RpcError::invalid_params(format!(
                    "status must be running, completed or incomplete, got {s:?}"
                )));
            }
        }
        let limit = p.opt_u64("limit", 1, 10_000)?.unwrap_or(100) as i64;
        let identity = call.session.identity();
        call.state
            .store
            .run(move |c| {
                let mut stmt = c
                    .prepare(&format!("SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1) ORDER BY started_ms DESC, rowid DESC"))
                    .map_err(db_error)?;
                let rows = stmt.query_map(params![status], run_json).map_err(db_error)?;
                let mut out = Vec::new();
                for row in rows {
                    let (owner, run) = row.map_err(db_error)?;
                    if sees(&identity, &owner) {
                        out.push(run);
                        if out.len() as i64 >= limit {
                            break;
                        }
                    }
                }
                Ok(Value::Array(out))
            })
            .await
    })
}

/// `runs.get_trace {run_id}` → `{run, records}`.
pub fn get_trace(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let run_id = Params::new(params)?.only(&["run_id"])?.str("run_id")?;
        let identity = call.session.identity();
        call.state
            .store
            .run(move |c| {
                let run = match load(c, &run_id)? {
                    Some((owner, run)) if sees(&identity, &owner) => run,
                    _ => return Err(no_run(&run_id)),
                };
                let mut stmt = c
                    .prepare("SELECT seq, ts_ms, kind, data FROM run_trace WHERE run_id = ?1 ORDER BY seq")
                    .map_err(db_error)?;
                let records = stmt
                    .query_map([&run_id], |r| {
                        let data: String = r.get(3)?;
                        Ok(json!({"seq": r.get::<_, i64>(0)?, "ts_ms": r.get::<_, i64>(1)?, "kind": r.get::<_, String>(2)?, "data": serde_json::from_str::<Value>(&data).unwrap_or(Value::Null)}))
                    })
                    .map_err(db_error)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(db_error)?;
                Ok(json!({"run": run, "records": records}))
            })
            .await
    })
}

/// `runs.subscribe {run_id?}` → `{subscribed: true}`; then `runs.trace.event` notifications.
pub fn subscribe(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let only = Params::new(params)?.only(&["run_id"])?.opt_str("run_id")?;
        let events = call.state.run_events.subscribe();
        call.session
            .forward(events, "runs.trace.event", move |session, e: RunEvent| {
                let wanted = only.as_ref().is_none_or(|r| r == &e.run_id)
                    && sees(&session.identity(), &e.owner);
                wanted.then(|| json!({"run_id": e.run_id, "record": e.record}))
            });
        Ok(json!({"subscribed": true}))
    })
}

/// Marks runs still running on a closed connection `incomplete`.
pub async fn on_session_closed(session: &Session, state: &ServerState) {
    let open = session.take_open_runs();
    if open.is_empty() {
        return;
    }
    let result = state
        .store
        .run(move |c| {
            let mut marked = Vec::new();
            for run_id in open {
                let n = c
                    .execute("UPDATE runs SET status = 'incomplete' WHERE run_id = ?1 AND status = 'running'", [&run_id])
                    .map_err(db_error)?;
                if n == 1 {
                    let record = append_trace(c, &run_id, "incomplete", &json!({"reason": "the connection that started it closed"}))?;
                    let owner: String = c.query_row("SELECT owner FROM runs WHERE run_id = ?1", [&run_id], |r| r.get(0)).map_err(db_error)?;
                    marked.push((owner, run_id, record));
                }
            }
            Ok(marked)
        })
        .await;
    match result {
        Ok(marked) => {
            for (owner, run_id, record) in marked {
                publish(state, owner, &run_id, record);
            }
        }
        Err(e) => tracing::error!(error = %e, "could not mark runs incomplete"),
    }
}

/// At startup: runs a previous daemon left running can no longer complete on their
/// connection; mark them incomplete.
pub fn mark_orphans_incomplete_job(c: &mut rusqlite::Connection) -> Result<usize, RpcError> {
    let running: Vec<String> = c
        .prepare("SELECT run_id FROM runs WHERE status = 'running'")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(db_error)?;
    for run_id in &running {
        c.execute(
            "UPDATE runs SET status = 'incomplete' WHERE run_id = ?1",
            [run_id],
        )
        .map_err(db_error)?;
        append_trace(
            c,
            run_id,
            "incomplete",
            &json!({"reason": "the daemon stopped while it was running"}),
        )?;
    }
    Ok(running.len())
}
