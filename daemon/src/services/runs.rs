//! `runs.*`: durable agent-run records with traces (SQLite, `crate::store`).
//!
//! A run is started with an intent for an agent (the session's bound agent, the given
//! `agent_id`, or `name:<slug>` of `agent_name`; with none of them `runs.start` is refused)
//! and completed with CAR's `AgentOutcome` or a bare status. `idempotency_key` is the run's
//! id, so `runs.start` is safe to repeat: the same owner and key return the existing run
//! (`created: false`). A run still running when the connection that started it closes is
//! marked `incomplete` (and so are runs left running by a daemon that died); an incomplete
//! run may still be completed later.
//!
//! Ownership: a run is completed by the identity that started it (the bound agent, else the
//! user) or a host session. Reads follow CAR's rule: `runs.get_trace` and `runs.list` need a
//! host session or a session bound to the run's agent (`-32603 permission denied` with
//! `data.reason: "not_owner"` otherwise); an unknown run id answers CAR's not-found marker
//! `{run_id, not_found: true}`.
//! Trace records (`started`, `completed`, `incomplete`) are pushed as `runs.trace.event`
//! `{run_id, record}` to sessions that called `runs.subscribe`.

use car_proto::errors::RpcError;
use car_proto::methods::CallerRole;
use rusqlite::{params, OptionalExtension, Row};
use serde_json::{json, Value};

use car_proto::methods::fields::Name;
use car_proto::methods::runs::{
    self as m, CompleteParams, ListParams, Outcome, StartParams, SubscribeParams, TraceParams,
    UnsubscribeParams, UnsubscribeReply,
};

use crate::handler::{Call, Routes};
use crate::session::{Identity, Session};
use crate::state::{RunEvent, ServerState};
use crate::store::{db_error, now_ms};

/// CAR's `AgentOutcome` statuses, plus `cancelled`.
const OUTCOMES: &[&str] = &[
    "success",
    "partial_success",
    "done",
    "give_up",
    "timeout",
    "failure",
    "cancelled",
];
const MAX_TEXT: usize = 16 * 1024;

pub(super) fn owner_of(identity: &Identity) -> String {
    match (&identity.role, &identity.agent_id) {
        (CallerRole::Agent, Some(agent)) => format!("agent:{agent}"),
        _ => "user".into(),
    }
}

/// Who may complete a run: the identity that started it, or a host session.
pub(super) fn sees(identity: &Identity, owner: &str) -> bool {
    identity.role == CallerRole::Host || owner == owner_of(identity)
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

pub(super) fn load(
    c: &rusqlite::Connection,
    run_id: &str,
) -> Result<Option<(String, Value)>, RpcError> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM runs WHERE run_id = ?1"),
        [run_id],
        run_json,
    )
    .optional()
    .map_err(db_error)
}

pub(super) fn append_trace(
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

pub(super) fn publish(state: &ServerState, owner: String, run_id: &str, record: Value) {
    let _ = state.run_events.send(RunEvent {
        owner,
        run_id: run_id.to_string(),
        record,
    });
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
    super::run_turns::register(routes);
}

/// `runs.unsubscribe {run_id?}` → `{removed}`: stops this connection's subscription to that
/// run (or its all-runs subscription).
async fn unsubscribe(call: Call, p: UnsubscribeParams) -> Result<UnsubscribeReply, RpcError> {
    let run_id = p.run_id.map(Name::into_string);
    Ok(UnsubscribeReply {
        removed: call.session.remove_run_subscriptions(run_id.as_deref()),
    })
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
async fn start(call: Call, p: StartParams) -> Result<Value, RpcError> {
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
        let owner = owner_of(&identity);
        // CAR: an idempotency key is the run's id.
        let run_id = key.clone().unwrap_or_else(new_run_id);
        let (owner2, run_id2) = (owner.clone(), run_id.clone());
        let (run, created, record) = call
            .state
            .store
            .run(move |c| {
                let tx = c.transaction().map_err(db_error)?;
                if key.is_some() {
                    if let Some((existing_owner, run)) = load(&tx, &run_id2)? {
                        if existing_owner != owner2 {
                            return Err(RpcError::invalid_params(
                                "idempotency_key: names a run of another owner",
                            ));
                        }
                        return Ok((run, false, None));
                    }
                }
                tx.execute(
                    "INSERT INTO runs (run_id, owner, intent, agent_id, agent_name, idempotency_key, status, started_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                    params![run_id2, owner2, intent, agent_id, agent_name, key, now_ms()],
                )
                .map_err(db_error)?;
                let record = append_trace(&tx, &run_id2, "started", &json!({"intent": intent, "outcome_description": outcome_description}))?;
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
        if run["agent_id"].is_null() {
            run["agent_id"] = run["owner"].clone();
        }
        Ok(run)
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
async fn complete(call: Call, p: CompleteParams) -> Result<Value, RpcError> {
    {
        let run_id = p.run_id.into_string();
        let (outcome, summary, agent_outcome) = match p.outcome {
            Outcome::Status(status) => (status, p.summary, None),
            Outcome::Outcome(o) => {
                let summary = o.summary.clone().or(p.summary);
                (
                    o.status.clone(),
                    summary,
                    Some(serde_json::to_value(&o).unwrap_or_default()),
                )
            }
        };
        if !OUTCOMES.contains(&outcome.as_str()) {
            return Err(RpcError::invalid_params(format!(
                "outcome: must be one of {}, got {outcome:?}",
                OUTCOMES.join(", ")
            )));
        }
        // CAR's loop sends an empty summary when the model gave none: that is no summary.
        let summary = text("summary", summary.filter(|s| !s.trim().is_empty()))?;
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
                let record = append_trace(&tx, &id, "completed", &json!({"outcome": outcome, "summary": summary, "agent_outcome": agent_outcome}))?;
                let (_, run) = load(&tx, &id)?.expect("row exists");
                tx.commit().map_err(db_error)?;
                Ok((owner, run, record))
            })
            .await?;
        call.session.untrack_run(&run_id);
        publish(&call.state, owner, &run_id, record);
        let mut run = run;
        run["ok"] = json!(true);
        Ok(run)
    }
}

/// `runs.list {status?, limit?}` → runs visible to this session, newest first.
async fn list(call: Call, p: ListParams) -> Result<Value, RpcError> {
    {
        let status = p.status.map(|s| {
            if s == "in_progress" {
                "running".to_string()
            } else {
                s
            }
        });
        if let Some(s) = &status {
            if !["running", "completed", "incomplete"].contains(&s.as_str()) {
                return Err(RpcError::invalid_params(format!(
                    "status: must be in_progress, running, completed or incomplete, got {s:?}"
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
            .store
            .run(move |c| {
                let mut stmt = c
                    .prepare(&format!("SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1) ORDER BY started_ms DESC, rowid DESC"))
                    .map_err(db_error)?;
                let rows = stmt.query_map(params![status], run_json).map_err(db_error)?;
                let mut out = Vec::new();
                for row in rows {
                    let (_, run) = row.map_err(db_error)?;
                    if agent.as_ref().is_none_or(|a| run["agent_id"].as_str() == Some(a.as_str())) {
                        out.push(run);
                        if out.len() as i64 >= limit {
                            break;
                        }
                    }
                }
                Ok(json!({"agent_id": agent, "runs": out}))
            })
            .await
    }
}

/// `runs.get_trace {run_id}` → `{run, records}`.
async fn get_trace(call: Call, p: TraceParams) -> Result<Value, RpcError> {
    {
        let run_id = p.run_id.into_string();
        let cursor = p.cursor.unwrap_or(0) as i64;
        let identity = call.session.identity();
        call.state
            .store
            .run(move |c| {
                let run = match load(c, &run_id)? {
                    Some((_, run)) if may_read(&identity, run["agent_id"].as_str()) => run,
                    Some(_) => return Err(not_entitled("runs.get_trace")),
                    // CAR's not-found marker: nothing is revealed, there is no owner to check.
                    None => return Ok(json!({"run_id": run_id, "not_found": true})),
                };
                let mut stmt = c
                    .prepare("SELECT seq, ts_ms, kind, data FROM run_trace WHERE run_id = ?1 ORDER BY seq LIMIT -1 OFFSET ?2")
                    .map_err(db_error)?;
                let records = stmt
                    .query_map(params![run_id, cursor], |r| {
                        let data: String = r.get(3)?;
                        Ok(json!({"seq": r.get::<_, i64>(0)?, "ts_ms": r.get::<_, i64>(1)?, "kind": r.get::<_, String>(2)?, "data": serde_json::from_str::<Value>(&data).unwrap_or(Value::Null)}))
                    })
                    .map_err(db_error)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(db_error)?;
                let next = cursor + records.len() as i64;
                Ok(json!({"run_id": run_id, "agent_id": run["agent_id"], "run": run, "records": records, "cursor": next}))
            })
            .await
    }
}

/// `runs.subscribe {run_id?}` → `{subscribed: true}`; then `runs.trace.event` notifications.
async fn subscribe(call: Call, p: SubscribeParams) -> Result<Value, RpcError> {
    {
        let only = p.run_id.map(Name::into_string);
        let events = call.state.run_events.subscribe();
        let stop = call.session.add_run_subscription(only.clone());
        call.session.forward_until(
            events,
            "runs.trace.event",
            move |session, e: RunEvent| {
                let wanted = only.as_ref().is_none_or(|r| r == &e.run_id)
                    && sees(&session.identity(), &e.owner);
                wanted.then(|| json!({"run_id": e.run_id, "record": e.record}))
            },
            stop,
        );
        Ok(json!({"subscribed": true}))
    }
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
