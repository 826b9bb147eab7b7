//! `events.*`: reading the daemon's durable event log (`crate::state::store`).
//!
//! Every proposal, action, tool call, policy decision, retry, cancel and halt is recorded
//! with its timestamp and ids. Queries run after every event recorded before them, so a
//! caller always sees the events its own earlier calls caused.
//!
//! Scope (stricter than CAR, whose log is daemon-wide for every caller): an event records
//! the agent its session was bound to (`agent_id`), and a session bound to an agent reads
//! (`events.query`, `count`, `stats`, `cost_by_agent`) only the events its agent caused.
//! Operator, host and observer sessions read the whole log. The log keeps the newest
//! `--max-events` events, none older than `--event-max-age` (`crate::state::store`).

use car_proto::errors::RpcError;
use rusqlite::types::Value as SqlValue;
use serde_json::{json, Value};

use car_proto::methods::events::{self as m, EventQuery, QueryReply, TimeBound};
use car_proto::methods::fields::NoParams;

use crate::handler::{Call, Routes};
use crate::state::store::db_error;

/// The agent whose events this session may read, when it is bound to one (else the whole
/// log).
fn scope(call: &Call) -> Option<String> {
    call.session.agent_id()
}

/// The most events one `events.query` returns.
pub const MAX_LIMIT: u64 = 10_000;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Count, _, _>(count)
        .add::<m::Query, _, _>(query)
        .add::<m::Stats, _, _>(stats)
        .add::<m::CostByAgent, _, _>(cost_by_agent);
}

/// `events.count` → the number of events in the log.
async fn count(call: Call, _: NoParams) -> Result<u64, RpcError> {
    let agent = scope(&call);
    let n: i64 = call
        .state
        .data
        .store
        .run(move |c| {
            c.query_row(
                "SELECT COUNT(*) FROM events WHERE (?1 IS NULL OR agent_id = ?1)",
                [agent],
                |r| r.get(0),
            )
            .map_err(db_error)
        })
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A bound in Unix milliseconds; RFC 3339 `until` is exclusive, so it moves back 1 ms.
fn bound_ms(
    field: &str,
    bound: Option<TimeBound>,
    exclusive_text: bool,
) -> Result<Option<i64>, RpcError> {
    match bound {
        None => Ok(None),
        Some(TimeBound::Millis(ms)) => i64::try_from(ms)
            .map(Some)
            .map_err(|_| RpcError::invalid_params(format!("{field}: is out of range"))),
        Some(TimeBound::Rfc3339(text)) => {
            let ms = car_proto::clock::parse_rfc3339(&text)
                .map_err(|e| RpcError::invalid_params(format!("{field}: {e}")))?
                .timestamp_millis();
            Ok(Some(if exclusive_text { ms - 1 } else { ms }))
        }
    }
}

/// `events.query` (CAR's `EventQuery`) → `{count, events}`, newest first. `limit` absent or
/// 0 returns at most [`MAX_LIMIT`] events.
async fn query(call: Call, p: EventQuery) -> Result<QueryReply, RpcError> {
    let mut clauses = Vec::new();
    let mut args: Vec<SqlValue> = Vec::new();
    if let Some(agent) = scope(&call) {
        clauses.push("agent_id = ?".to_string());
        args.push(SqlValue::Text(agent));
    }
    if let Some(kinds) = p.kinds.filter(|k| !k.is_empty()) {
        clauses.push(format!("kind IN ({})", vec!["?"; kinds.len()].join(", ")));
        args.extend(kinds.into_iter().map(SqlValue::Text));
    }
    for (field, value) in [
        ("action_id", p.action_id),
        ("proposal_id", p.proposal_id),
        ("session_id", p.session_id),
    ] {
        if let Some(v) = value {
            clauses.push(format!("{field} = ?"));
            args.push(SqlValue::Text(v));
        }
    }
    let since = bound_ms("since", p.since, false)?;
    let until = bound_ms("until", p.until, true)?;
    if let (Some(s), Some(u)) = (since, until) {
        if s > u {
            return Err(RpcError::invalid_params(format!(
                "since: ({s}) is after until ({u})"
            )));
        }
    }
    if let Some(s) = since {
        clauses.push("ts_ms >= ?".into());
        args.push(SqlValue::Integer(s));
    }
    if let Some(u) = until {
        clauses.push("ts_ms <= ?".into());
        args.push(SqlValue::Integer(u));
    }
    for (key, value) in p.data_matches.unwrap_or_default() {
        let text = match value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        clauses.push("CAST(json_extract(data, ?) AS TEXT) = ?".into());
        args.push(SqlValue::Text(format!(
            "$.\"{}\"",
            key.replace('"', "\\\"")
        )));
        args.push(SqlValue::Text(text));
    }
    let limit = match p.limit {
        None | Some(0) => MAX_LIMIT,
        Some(n) => n.min(MAX_LIMIT),
    };
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT id, ts_ms, kind, session_id, proposal_id, action_id, request_id, data FROM events {filter} ORDER BY id DESC LIMIT {limit}"
    );
    let events = call
        .state
        .data
        .store
        .run(move |c| {
            let mut stmt = c.prepare(&sql).map_err(db_error)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| {
                    let data: String = r.get(7)?;
                    let ts_ms: i64 = r.get(1)?;
                    let timestamp = car_proto::clock::rfc3339_from_ms(ts_ms);
                    Ok(json!({
                        "id": r.get::<_, i64>(0)?,
                        "ts_ms": ts_ms,
                        "timestamp": timestamp,
                        "kind": r.get::<_, String>(2)?,
                        "session_id": r.get::<_, Option<String>>(3)?,
                        "proposal_id": r.get::<_, Option<String>>(4)?,
                        "action_id": r.get::<_, Option<String>>(5)?,
                        "request_id": r.get::<_, Option<String>>(6)?,
                        "data": serde_json::from_str::<Value>(&data).unwrap_or(Value::Null),
                    }))
                })
                .map_err(db_error)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db_error)
        })
        .await?;
    Ok(QueryReply {
        count: events.len(),
        events,
    })
}

async fn stats(call: Call, _: NoParams) -> Result<m::StatsReply, RpcError> {
    let agent = scope(&call);
    {
        call.state
            .data.store
            .run(move |c| {
                let mut by_kind = std::collections::BTreeMap::new();
                let mut stmt = c
                    .prepare("SELECT kind, COUNT(*) FROM events WHERE (?1 IS NULL OR agent_id = ?1) GROUP BY kind ORDER BY kind")
                    .map_err(db_error)?;
                let rows = stmt
                    .query_map([&agent], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                    })
                    .map_err(db_error)?;
                let mut total = 0i64;
                for row in rows {
                    let (kind, n) = row.map_err(db_error)?;
                    total += n;
                    by_kind.insert(kind, n);
                }
                let (first, last): (Option<i64>, Option<i64>) = c
                    .query_row(
                        "SELECT MIN(ts_ms), MAX(ts_ms) FROM events WHERE (?1 IS NULL OR agent_id = ?1)",
                        [&agent],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(db_error)?;
                Ok(m::StatsReply {
                    total,
                    by_kind,
                    first_ms: first,
                    last_ms: last,
                })
            })
            .await
    }
}

/// `events.cost_by_agent` → `[{agent, calls, tokens_in, tokens_out, cost_usd}]`, sorted by
/// agent, folded from the `inference.metered` events by their `agent` field.
async fn cost_by_agent(call: Call, _: NoParams) -> Result<Vec<m::AgentCost>, RpcError> {
    let agent = scope(&call);
    call.state
        .data.store
        .run(move |c| {
            let mut stmt = c
                .prepare(
                    "SELECT json_extract(data, '$.agent'), COUNT(*), \
                     SUM(json_extract(data, '$.tokens_in')), SUM(json_extract(data, '$.tokens_out')), \
                     SUM(json_extract(data, '$.cost_usd')) \
                     FROM events WHERE kind = 'inference.metered' AND (?1 IS NULL OR agent_id = ?1) GROUP BY 1 ORDER BY 1",
                )
                .map_err(db_error)?;
            let rows = stmt
                .query_map([&agent], |r| {
                    Ok(m::AgentCost {
                        agent: r.get::<_, Option<String>>(0)?.unwrap_or_else(|| "user".into()),
                        calls: r.get::<_, i64>(1)?.max(0) as u64,
                        tokens_in: r.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                        tokens_out: r.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
                        cost_usd: r.get::<_, Option<f64>>(4)?.unwrap_or(0.0),
                    })
                })
                .map_err(db_error)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db_error)
        })
        .await
}

#[cfg(test)]
mod tests {
    /// Every event kind a source file records is in the journal inventory
    /// `car_proto::methods::events::JOURNAL_KINDS` that `server.schema` publishes.
    #[test]
    fn recorded_kinds_are_in_the_journal_inventory() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let pattern = regex::Regex::new(
            r#"(?:\.event\(\s*|kind:\s*|\{\s*|=> )"((?:action|policy|proposal|run|session|state|tool)\.[a-z_]+|action_(?:succeeded|failed|rejected|skipped))""#,
        )
        .unwrap();
        let mut found = std::collections::BTreeSet::new();
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for c in pattern.captures_iter(&text) {
                        found.insert(c[1].to_string());
                    }
                }
            }
        }
        assert!(
            found.contains("action_succeeded") && found.contains("tool.called"),
            "{found:?}"
        );
        for kind in &found {
            assert!(
                car_proto::methods::events::JOURNAL_KINDS.contains(&kind.as_str()),
                "event kind {kind} is recorded but not in JOURNAL_KINDS"
            );
        }
    }
}
