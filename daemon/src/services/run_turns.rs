//! The turns of a run's trace: `runs.record_model_turn` (a model turn, as CAR's agent loop
//! sends it), `runs.record_turns` (client-narrated `RunTurn`s), and the proposal recorder
//! (every tool call of a proposal submitted on the connection that started a run is a turn
//! of that run).
//!
//! Every turn is a `turn` or `model_turn` record of the run's trace, in append order, with
//! the daemon-stamped `index` (its 0-based position among the run's turns; a client's
//! `index` / `turn_index` is ignored), and is published as a `runs.trace.event`. Limits (CAR's):
//! at most 256 turns a call, 2,000 a run; string fields over 16 KiB are truncated with a
//! `…[truncated]` marker; a turn still over 256 KiB is refused; a run's turns hold at most
//! 32 MiB in all (ours: CAR sets no total). A write that cannot land is
//! not an error but a drop the caller treats as "stop sending for this run": `{ok: false,
//! dropped}` with `run_not_found` (no such run, or not the caller's: the two look the same),
//! `run_terminal`, `run_turn_limit`, `run_bytes_limit` or `turn_too_large`. Writes take the identity that
//! started the run; a host session does not write turns.

use car_proto::errors::RpcError;
use car_proto::methods::runs::{self as m, RecordModelTurnParams, RecordTurnsParams};
use serde_json::{json, Map, Value};

use super::run_records::{is_terminal, turn_bytes, turn_count, Pending};
use super::runs::{load, owner_of};
use crate::handler::{Call, Routes};
use crate::state::ServerState;
use crate::store::db_error;

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

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::RecordModelTurn, _, _>(record_model_turn)
        .add::<m::RecordTurns, _, _>(record_turns);
}

/// What an append did.
#[derive(Debug)]
enum Appended {
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
async fn append(
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
    let events = state.run_events.clone();
    state
        .store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            let Some((owner, run)) = load(&tx, &id)? else {
                return Ok(Appended::Dropped("run_not_found"));
            };
            if writer.as_ref().is_some_and(|w| w != &owner) {
                return Ok(Appended::Dropped("run_not_found"));
            }
            if is_terminal(run["status"].as_str().unwrap_or_default()) {
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

/// Whose turns a session may write: the owner that started the run. A host session writes
/// none (CAR: the host token is not accepted for writes), so it gets an owner no run has.
fn writer_of(identity: &crate::session::Identity) -> String {
    if identity.role == car_proto::methods::CallerRole::Host {
        "host-session".into()
    } else {
        owner_of(identity)
    }
}

/// `runs.record_model_turn` → `{run_id, index, ok: true}` or `{run_id, ok: false, dropped}`.
async fn record_model_turn(call: Call, p: RecordModelTurnParams) -> Result<Value, RpcError> {
    let run_id = p.run_id.into_string();
    let mut turn = Map::new();
    for (key, value) in [
        ("model_id", p.model_id.map(Value::String)),
        ("assistant_text", p.assistant_text.map(Value::String)),
        (
            "requested_tool_calls",
            p.requested_tool_calls.map(Value::Array),
        ),
        ("token_usage", p.token_usage),
        ("duration_ms", p.duration_ms.map(Value::from)),
    ] {
        if let Some(v) = value {
            turn.insert(key.into(), v);
        }
    }
    let writer = writer_of(&call.session.identity());
    Ok(
        match append(
            &call.state,
            Some(writer),
            run_id.clone(),
            "model_turn",
            vec![turn],
        )
        .await?
        {
            Appended::Turns { base_index, .. } => {
                json!({"run_id": run_id, "index": base_index, "ok": true})
            }
            Appended::Dropped(why) => json!({"run_id": run_id, "ok": false, "dropped": why}),
        },
    )
}

/// `runs.record_turns` → `{run_id, base_index, count, ok: true}` or a drop.
async fn record_turns(call: Call, p: RecordTurnsParams) -> Result<Value, RpcError> {
    if p.turns.is_empty() {
        return Err(RpcError::invalid_params("turns: must not be empty"));
    }
    if p.turns.len() > MAX_BATCH {
        return Err(RpcError::invalid_params(format!(
            "turns: has {} turns, at most {MAX_BATCH} a call",
            p.turns.len()
        )));
    }
    let run_id = p.run_id.into_string();
    let turns: Vec<Map<String, Value>> = p
        .turns
        .into_iter()
        .map(|mut t| {
            t.entry("verifier_verdict").or_insert(json!("not_run"));
            t
        })
        .collect();
    let writer = writer_of(&call.session.identity());
    Ok(
        match append(&call.state, Some(writer), run_id.clone(), "turn", turns).await? {
            Appended::Turns { base_index, count } => {
                json!({"run_id": run_id, "base_index": base_index, "count": count, "ok": true})
            }
            Appended::Dropped(why) => json!({
                "run_id": run_id, "base_index": 0, "count": 0, "ok": false, "dropped": why,
            }),
        },
    )
}

/// The proposal recorder: the tool calls of a finished proposal become turns of `run_id`
/// (the run the connection started most recently when the proposal was submitted), in
/// action order (`{tool, parameters, output, status, error?, policy_rejected,
/// verifier_verdict: "not_run", proposal_id, action_id}`).
pub async fn record_proposal(
    call: &Call,
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
    match append(&call.state, None, run_id.clone(), "turn", turns).await {
        Ok(Appended::Turns { .. }) => {}
        Ok(Appended::Dropped(why)) => {
            tracing::debug!(run = %run_id, why, "proposal turns not recorded")
        }
        Err(e) => tracing::warn!(run = %run_id, error = %e, "recording proposal turns failed"),
    }
}
