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
//! `run_terminal`, `run_turn_limit`, `run_bytes_limit` or `turn_too_large`. Writes take the
//! identity that started the run; a host session does not write turns.

use car_proto::errors::RpcError;
use car_proto::methods::runs::{
    self as m, RecordModelTurnParams, RecordModelTurnReply, RecordTurnsParams, RecordTurnsReply,
};
use serde_json::{json, Map, Value};

use crate::handler::{Call, Routes};
use crate::state::run_records::{append, Appended, MAX_BATCH};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::RecordModelTurn, _, _>(record_model_turn)
        .add::<m::RecordTurns, _, _>(record_turns);
}

/// Whose turns a session may write: the owner that started the run. A host session writes
/// none (CAR: the host token is not accepted for writes), so it gets an owner no run has.
fn writer_of(identity: &crate::state::session::Identity) -> String {
    if identity.role == car_proto::methods::CallerRole::Host {
        "host-session".into()
    } else {
        identity.owner_key()
    }
}

/// `runs.record_model_turn` → `{run_id, index, ok: true}` or `{run_id, ok: false, dropped}`.
async fn record_model_turn(
    call: Call,
    p: RecordModelTurnParams,
) -> Result<RecordModelTurnReply, RpcError> {
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
            Appended::Turns { base_index, .. } => RecordModelTurnReply {
                run_id,
                index: Some(base_index),
                ok: true,
                dropped: None,
            },
            Appended::Dropped(why) => RecordModelTurnReply {
                run_id,
                index: None,
                ok: false,
                dropped: Some(why.into()),
            },
        },
    )
}

/// `runs.record_turns` → `{run_id, base_index, count, ok: true}` or a drop.
async fn record_turns(call: Call, p: RecordTurnsParams) -> Result<RecordTurnsReply, RpcError> {
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
            Appended::Turns { base_index, count } => RecordTurnsReply {
                run_id,
                base_index,
                count: count as u64,
                ok: true,
                dropped: None,
            },
            Appended::Dropped(why) => RecordTurnsReply {
                run_id,
                base_index: 0,
                count: 0,
                ok: false,
                dropped: Some(why.into()),
            },
        },
    )
}
