//! `outcomes.*`: the durable outcome ledger (`car_inference::outcomes`, kept by the inference
//! service; receipts are written by `infer` and `infer_stream`).
//!
//! `resolve_pending` takes CAR's `[traceId, success, confidence, output]` tuples; an empty
//! trace id is skipped, a confidence outside [0, 1] is `-32602` naming its tuple, and the
//! answer counts the tuples passed (CAR's `recorded`). Agent sessions may not resolve
//! (declared `not_for_agents`: an agent could otherwise grade its own model's work).

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::outcomes as m;

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::ScoreboardMethod, _, _>(|call: Call, _: NoParams| async move {
            Ok(call.state.inference.ledger.scoreboard())
        })
        .add::<m::ResolvePending, _, _>(resolve);
}

async fn resolve(call: Call, p: m::ResolveParams) -> Result<m::ResolveReply, RpcError> {
    let mut verdicts = Vec::new();
    for (i, (trace_id, success, confidence, _output)) in p.action_results.iter().enumerate() {
        if !confidence.is_finite() || !(0.0..=1.0).contains(confidence) {
            return Err(RpcError::invalid_params(format!(
                "actionResults[{i}][2]: confidence must be within [0, 1], got {confidence}"
            )));
        }
        if !trace_id.is_empty() {
            verdicts.push((trace_id.clone(), *success, *confidence));
        }
    }
    let ledger = call.state.inference.ledger.clone();
    tokio::task::spawn_blocking(move || ledger.resolve(&verdicts))
        .await
        .map_err(|e| RpcError::internal(format!("outcome ledger task failed: {e}")))?;
    Ok(m::ResolveReply {
        recorded: p.action_results.len() as u64,
    })
}
