//! `events.*`: reading the daemon's durable event log (`crate::store`).
//!
//! Every proposal, action, tool call, policy decision, retry, cancel and halt is recorded
//! with its timestamp and ids. Queries run after every event recorded before them, so a
//! caller always sees the events its own earlier calls caused.

use car_proto::errors::RpcError;
use rusqlite::types::Value as SqlValue;
use serde_json::{json, Map, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};
use crate::store::db_error;

/// Rows `events.query` returns when `limit` is not given, and the most it returns.
pub const DEFAULT_LIMIT: u64 = 100;
pub const MAX_LIMIT: u64 = 10_000;

/// `events.count` → the number of events in the log.
pub fn count(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        let n: i64 = call
            .state
            .store
            .run(|c| {
                c.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
                    .map_err(db_error)
            })
            .await?;
        Ok(json!(n))
    })
}

/// `events.query {kinds?, action_id?, proposal_id?, session_id?, since?, until?, limit?}` →
/// events newest first. `since`/`until` are inclusive Unix-millisecond bounds.
pub fn query(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&[
            "kinds",
            "action_id",
            "proposal_id",
            "session_id",
            "since",
            "until",
            "limit",
        ])?;
        let mut clauses = Vec::new();
        let mut args: Vec<SqlValue> = Vec::new();
        if let Some(kinds) = p.opt_str_list("kinds")? {
            if kinds.is_empty() {
                return Err(RpcError::invalid_params(
                    "kinds must not be empty (omit it to match every kind)",
                ));
            }
            clauses.push(format!("kind IN ({})", vec!["?"; kinds.len()].join(", ")));
            args.extend(kinds.into_iter().map(SqlValue::Text));
        }
        for field in ["action_id", "proposal_id", "session_id"] {
            if let Some(v) = p.opt_str(field)? {
                clauses.push(format!("{field} = ?"));
                args.push(SqlValue::Text(v));
            }
        }
        let since = p.opt_u64("since", 0, i64::MAX as u64)?;
        let until = p.opt_u64("until", 0, i64::MAX as u64)?;
        if let (Some(s), Some(u)) = (since, until) {
            if s > u {
                return Err(RpcError::invalid_params(format!(
                    "since ({s}) is after until ({u})"
                )));
            }
        }
        if let Some(s) = since {
            clauses.push("ts_ms >= ?".into());
            args.push(SqlValue::Integer(s as i64));
        }
        if let Some(u) = until {
            clauses.push("ts_ms <= ?".into());
            args.push(SqlValue::Integer(u as i64));
        }
        let limit = p.opt_u64("limit", 1, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT);
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let sql = format!(
            "SELECT id, ts_ms, kind, session_id, proposal_id, action_id, request_id, data FROM events {filter} ORDER BY id DESC LIMIT {limit}"
        );
        call.state
            .store
            .run(move |c| {
                let mut stmt = c.prepare(&sql).map_err(db_error)?;
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(args), |r| {
                        let data: String = r.get(7)?;
                        Ok(json!({
                            "id": r.get::<_, i64>(0)?,
                            "ts_ms": r.get::<_, i64>(1)?,
                            "kind": r.get::<_, String>(2)?,
                            "session_id": r.get::<_, Option<String>>(3)?,
                            "proposal_id": r.get::<_, Option<String>>(4)?,
                            "action_id": r.get::<_, Option<String>>(5)?,
                            "request_id": r.get::<_, Option<String>>(6)?,
                            "data": serde_json::from_str::<Value>(&data).unwrap_or(Value::Null),
                        }))
                    })
                    .map_err(db_error)?;
                rows.collect::<Result<Vec<_>, _>>()
                    .map(Value::Array)
                    .map_err(db_error)
            })
            .await
    })
}

/// `events.stats` → `{total, by_kind, first_ms, last_ms}`.
pub fn stats(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        call.state
            .store
            .run(|c| {
                let mut by_kind = Map::new();
                let mut stmt = c
                    .prepare("SELECT kind, COUNT(*) FROM events GROUP BY kind ORDER BY kind")
                    .map_err(db_error)?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                    .map_err(db_error)?;
                let mut total = 0i64;
                for row in rows {
                    let (kind, n) = row.map_err(db_error)?;
                    total += n;
                    by_kind.insert(kind, json!(n));
                }
                let (first, last): (Option<i64>, Option<i64>) = c
                    .query_row("SELECT MIN(ts_ms), MAX(ts_ms) FROM events", [], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .map_err(db_error)?;
                Ok(json!({"total": total, "by_kind": by_kind, "first_ms": first, "last_ms": last}))
            })
            .await
    })
}
