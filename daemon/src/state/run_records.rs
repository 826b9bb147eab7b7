//! A run's trace records: how they are stored, how they look on the wire, and how they reach
//! `runs.subscribe` sessions (docs/protocol-choices.md, "Run lifecycle").
//!
//! Stored as `run_trace (run_id, seq, ts_ms, kind, data)`; on the wire a record is CAR's
//! `RunRecord`: the data's fields beside `record` (the kind), `seq` and `ts_ms`. Kinds:
//! `started`, `model_turn`, `turn`, `cancellation_requested` and `ended` (the terminal,
//! with `termination: "outcome" | "incomplete" | "cancelled"`). Rows an older daemon wrote
//! as `completed` / `incomplete` read back as `ended`.
//!
//! Records are published on the database thread right after their transaction commits
//! ([`Pending::publish`]), so subscribers get them in append order and a `runs.subscribe`
//! snapshot taken in another database job is never overtaken by an earlier record.
//!
//! Also owns appending turns ([`append`], with CAR's limits) and the proposal recorder, so
//! `runs.*` and `proposal.submit` write a trace the same way without importing each other.

use car_proto::errors::RpcError;
use car_proto::methods::runs::RunRecord;
use rusqlite::Row;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use crate::state::store::db_error;
use crate::state::{RunEvent, ServerState};
use car_proto::clock::now_ms;

/// The kinds that are turns of a run (they take the run's turn indexes).
pub const TURN_KINDS_SQL: &str = "kind IN ('turn', 'model_turn')";

/// CAR's live status of a run whose row says `status`.
pub fn live_status(status: &str) -> &'static str {
    match status {
        "completed" => "completed",
        "incomplete" => "incomplete",
        "cancelled" => "cancelled",
        _ => "in_progress",
    }
}

/// Whether a run in `status` has ended.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "incomplete" | "cancelled")
}

/// The wire form of a stored record.
pub fn render(seq: i64, ts_ms: i64, kind: &str, data: Value) -> Value {
    let mut map = match data {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => Map::from_iter([("data".to_string(), other)]),
    };
    let kind = match kind {
        // An older daemon's terminal rows.
        "completed" => {
            let status = map.remove("outcome").unwrap_or(Value::Null);
            let outcome = match map.remove("agent_outcome") {
                Some(o @ Value::Object(_)) => o,
                _ => {
                    json!({"status": status, "summary": map.get("summary").cloned().unwrap_or(Value::Null)})
                }
            };
            map.remove("summary");
            map.insert("termination".into(), json!("outcome"));
            map.insert("outcome".into(), outcome);
            "ended"
        }
        "incomplete" => {
            map.insert("termination".into(), json!("incomplete"));
            "ended"
        }
        other => other,
    };
    map.insert("record".into(), json!(kind));
    map.insert("seq".into(), json!(seq));
    map.insert("ts_ms".into(), json!(ts_ms));
    Value::Object(map)
}

/// Lower-case hex SHA-256 of `value`'s canonical JSON.
pub fn digest(value: &Value) -> String {
    car_proto::schema::digest(value)
}

/// The number of turns `run_id` holds.
pub fn turn_count(c: &Connection, run_id: &str) -> Result<i64, RpcError> {
    c.query_row(
        &format!("SELECT COUNT(*) FROM run_trace WHERE run_id = ?1 AND {TURN_KINDS_SQL}"),
        [run_id],
        |r| r.get(0),
    )
    .map_err(db_error)
}

/// The stored bytes of a run's turns.
pub fn turn_bytes(c: &Connection, run_id: &str) -> Result<i64, RpcError> {
    c.query_row(
        &format!("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM run_trace WHERE run_id = ?1 AND {TURN_KINDS_SQL}"),
        [run_id],
        |r| r.get(0),
    )
    .map_err(db_error)
}

/// The run's `ended` record, if it has one.
pub fn ended_record(c: &Connection, run_id: &str) -> Result<Option<Value>, RpcError> {
    c.query_row(
        "SELECT seq, ts_ms, kind, data FROM run_trace WHERE run_id = ?1 AND kind IN ('ended', 'completed', 'incomplete') ORDER BY seq DESC LIMIT 1",
        [run_id],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?)),
    )
    .optional()
    .map_err(db_error)
    .map(|row| {
        row.map(|(seq, ts, kind, data)| {
            render(seq, ts, &kind, serde_json::from_str(&data).unwrap_or(Value::Null))
        })
    })
}

/// The run's turn records in order (`runs.subscribe`'s `turns_so_far`).
pub fn turns(c: &Connection, run_id: &str) -> Result<Vec<Value>, RpcError> {
    records(c, run_id, Some(TURN_KINDS_SQL), 0)
}

/// The run's records from offset `from`, optionally only those matching `filter` (SQL).
pub fn records(
    c: &Connection,
    run_id: &str,
    filter: Option<&str>,
    from: i64,
) -> Result<Vec<Value>, RpcError> {
    let filter = filter.map(|f| format!(" AND {f}")).unwrap_or_default();
    let mut stmt = c
        .prepare(&format!("SELECT seq, ts_ms, kind, data FROM run_trace WHERE run_id = ?1{filter} ORDER BY seq LIMIT -1 OFFSET ?2"))
        .map_err(db_error)?;
    let rows = stmt
        .query_map(params![run_id, from], |r| {
            let data: String = r.get(3)?;
            Ok(render(
                r.get(0)?,
                r.get(1)?,
                &r.get::<_, String>(2)?,
                serde_json::from_str(&data).unwrap_or(Value::Null),
            ))
        })
        .map_err(db_error)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db_error)
}

/// Records appended inside one transaction, to be published once it commits.
#[derive(Debug, Default)]
pub struct Pending(Vec<RunEvent>);

impl Pending {
    /// Appends a `kind` record with `data` (an object) to `run_id`'s trace, inside the
    /// caller's transaction; returns its wire form. A turn's `cursor` is its index + 1;
    /// any other record's is the run's turn count.
    pub fn append(
        &mut self,
        c: &Connection,
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
        let (owner, agent_id, status): (String, Option<String>, String) = c
            .query_row(
                "SELECT owner, agent_id, status FROM runs WHERE run_id = ?1",
                [run_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(db_error)?;
        let cursor = match (kind, data["index"].as_u64()) {
            ("turn" | "model_turn", Some(index)) => index + 1,
            _ => turn_count(c, run_id)? as u64,
        };
        let record = render(seq, ts, kind, data.clone());
        self.0.push(RunEvent {
            owner,
            run_id: run_id.to_string(),
            agent_id,
            record: record.clone(),
            cursor,
            status: live_status(&status).to_string(),
        });
        Ok(record)
    }

    /// Sends the records to subscribers. Call after the transaction committed, still on the
    /// database thread.
    pub fn publish(self, to: &broadcast::Sender<RunEvent>) {
        for event in self.0 {
            let _ = to.send(event);
        }
    }
}

/// Most turns one call may append.
pub const MAX_BATCH: usize = 256;
/// Most turns one run may hold.
pub const MAX_TURNS: i64 = 2000;
/// Longest string field kept whole.
pub const MAX_FIELD_BYTES: usize = 16 * 1024;
/// Largest encoded turn.
pub const MAX_TURN_BYTES: usize = 256 * 1024;
/// Most encoded turn bytes one run's trace may hold: 32 MiB (2,000 turns averaging
/// 16 KiB). Without it the per-turn caps alone allow 2,000 × 256 KiB = 500 MiB a run.
pub const MAX_RUN_TURN_BYTES: i64 = 32 * 1024 * 1024;

pub const COLUMNS: &str = "run_id, owner, intent, agent_id, agent_name, idempotency_key, status, outcome, summary, started_ms, completed_ms";

/// One `runs` row ([`COLUMNS`] order) as `(owner, run)`.
pub fn run_row(r: &Row<'_>) -> rusqlite::Result<(String, RunRecord)> {
    let owner: String = r.get(1)?;
    Ok((
        owner,
        RunRecord {
            run_id: r.get(0)?,
            intent: r.get(2)?,
            agent_id: r.get(3)?,
            agent_name: r.get(4)?,
            idempotency_key: r.get(5)?,
            status: r.get(6)?,
            outcome: r.get(7)?,
            summary: r.get(8)?,
            started_ms: r.get(9)?,
            completed_ms: r.get(10)?,
        },
    ))
}

/// The run `run_id` as `(owner, run)`, if it exists.
pub fn load(
    c: &rusqlite::Connection,
    run_id: &str,
) -> Result<Option<(String, RunRecord)>, RpcError> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM runs WHERE run_id = ?1"),
        [run_id],
        run_row,
    )
    .optional()
    .map_err(db_error)
}

/// What an append did.
#[derive(Debug)]
pub enum Appended {
    Turns { base_index: i64, count: usize },
    Dropped(&'static str),
}

/// Truncates every string longer than [`MAX_FIELD_BYTES`] (at a character boundary).
fn bound_strings(value: &mut Value) {
    match value {
        Value::String(s) if s.len() > MAX_FIELD_BYTES => {
            let mut end = MAX_FIELD_BYTES;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push_str("…[truncated]");
        }
        Value::Array(items) => items.iter_mut().for_each(bound_strings),
        Value::Object(map) => map.values_mut().for_each(bound_strings),
        _ => {}
    }
}

/// Appends `turns` (each a JSON object) as `kind` records of `run_id`. `writer` is the
/// owner the caller must match (`None`: the daemon's own proposal recorder).
pub async fn append(
    state: &ServerState,
    writer: Option<String>,
    run_id: String,
    kind: &'static str,
    mut turns: Vec<Map<String, Value>>,
) -> Result<Appended, RpcError> {
    let mut batch_bytes: i64 = 0;
    for turn in &mut turns {
        // The daemon's own fields: the index it stamps and the record's kind, seq and time.
        for key in ["index", "record", "seq", "ts_ms"] {
            turn.remove(key);
        }
        let mut value = Value::Object(std::mem::take(turn));
        bound_strings(&mut value);
        let encoded = value.to_string().len();
        if encoded > MAX_TURN_BYTES {
            return Ok(Appended::Dropped("turn_too_large"));
        }
        batch_bytes += encoded as i64;
        if let Value::Object(map) = value {
            *turn = map;
        }
    }
    let id = run_id.clone();
    let events = state.runs.events.clone();
    state
        .data
        .store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            let Some((owner, run)) = load(&tx, &id)? else {
                return Ok(Appended::Dropped("run_not_found"));
            };
            if writer.as_ref().is_some_and(|w| w != &owner) {
                return Ok(Appended::Dropped("run_not_found"));
            }
            if is_terminal(&run.status) {
                return Ok(Appended::Dropped("run_terminal"));
            }
            let existing = turn_count(&tx, &id)?;
            if existing + turns.len() as i64 > MAX_TURNS {
                return Ok(Appended::Dropped("run_turn_limit"));
            }
            if turn_bytes(&tx, &id)? + batch_bytes > MAX_RUN_TURN_BYTES {
                return Ok(Appended::Dropped("run_bytes_limit"));
            }
            let count = turns.len();
            let mut pending = Pending::default();
            for (i, mut turn) in turns.into_iter().enumerate() {
                turn.insert("index".into(), json!(existing + i as i64));
                pending.append(&tx, &id, kind, &Value::Object(turn))?;
            }
            tx.commit().map_err(db_error)?;
            pending.publish(&events);
            Ok(Appended::Turns {
                base_index: existing,
                count,
            })
        })
        .await
}

/// The proposal recorder: the tool calls of a finished proposal become turns of `run_id`
/// (the run the connection started most recently when the proposal was submitted), in
/// action order (`{tool, parameters, output, status, error?, policy_rejected,
/// verifier_verdict: "not_run", proposal_id, action_id}`).
pub async fn record_proposal(
    state: &ServerState,
    run_id: Option<String>,
    proposal: &Value,
    result: &Value,
) {
    let Some(run_id) = run_id else {
        return;
    };
    let actions = proposal["actions"].as_array().cloned().unwrap_or_default();
    let results = result["results"].as_array().cloned().unwrap_or_default();
    let turns: Vec<Map<String, Value>> = actions
        .iter()
        .filter(|a| a["type"] == "tool_call")
        .filter_map(|a| {
            let r = results.iter().find(|r| r["action_id"] == a["id"])?;
            let mut t = Map::new();
            t.insert("tool".into(), a["tool"].clone());
            t.insert(
                "parameters".into(),
                a.get("parameters").cloned().unwrap_or(json!({})),
            );
            t.insert("output".into(), r["output"].clone());
            t.insert("status".into(), r["status"].clone());
            if !r["error"].is_null() {
                t.insert("error".into(), r["error"].clone());
            }
            t.insert("policy_rejected".into(), json!(r["status"] == "rejected"));
            t.insert("verifier_verdict".into(), json!("not_run"));
            t.insert("proposal_id".into(), result["proposal_id"].clone());
            t.insert("action_id".into(), a["id"].clone());
            Some(t)
        })
        .collect();
    if turns.is_empty() {
        return;
    }
    match append(state, None, run_id.clone(), "turn", turns).await {
        Ok(Appended::Turns { .. }) => {}
        Ok(Appended::Dropped(why)) => {
            tracing::debug!(run = %run_id, why, "proposal turns not recorded")
        }
        Err(e) => tracing::warn!(run = %run_id, error = %e, "recording proposal turns failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_flat_and_old_terminal_rows_read_as_ended() {
        let turn = render(3, 9, "turn", json!({"index": 1, "tool": "t"}));
        assert_eq!(
            turn,
            json!({"record": "turn", "seq": 3, "ts_ms": 9, "index": 1, "tool": "t"})
        );
        let old = render(
            4,
            9,
            "completed",
            json!({"outcome": "success", "summary": "s", "agent_outcome": null}),
        );
        assert_eq!(
            old,
            json!({"record": "ended", "seq": 4, "ts_ms": 9, "termination": "outcome",
                   "outcome": {"status": "success", "summary": "s"}})
        );
        let lost = render(5, 9, "incomplete", json!({"reason": "r"}));
        assert_eq!(lost["record"], "ended");
        assert_eq!(lost["termination"], "incomplete");
        assert_eq!(live_status("running"), "in_progress");
        assert!(is_terminal("cancelled") && !is_terminal("running"));
    }
}
