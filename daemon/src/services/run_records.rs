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

use car_proto::errors::RpcError;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use crate::state::RunEvent;
use crate::store::db_error;
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
