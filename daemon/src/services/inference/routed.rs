//! Which model a generation runs on, what happens when it fails, and the receipt it leaves.
//!
//! - A non-empty `model` is a hard pin: only that model runs, and its error is the answer (CAR
//!   forces `strict_model: true` then; `intent` is recorded, never followed).
//! - Without one, the router (`car_inference::route`, over the registered models, the outcome
//!   ledger and the price table) picks a model by `intent` and the prompt; when the chosen model
//!   fails with an engine or provider error (`-32603`; not a caller mistake, a refusal or a
//!   response-format mismatch), the next in `fallbacks` runs, unless `params.strict_model` is true.
//!   The reply's `model_used` says who answered.
//! - Every attempt leaves a receipt in the outcome ledger under the call's `trace_id`: a failure
//!   when it errored, else pending until `outcomes.resolve_pending` gives a verdict.

use std::time::Instant;

use car_proto::errors::{RpcError, INTERNAL_ERROR};
use car_proto::methods::inference::{GenerateParams, InferReply};

use crate::handler::Call;

/// The text the router sizes and classifies: the prompt, the context and every message.
fn prompt_text(p: &GenerateParams) -> String {
    let mut text = String::new();
    for part in [p.context.as_deref(), p.prompt.as_deref()]
        .into_iter()
        .flatten()
    {
        text.push_str(part);
        text.push('\n');
    }
    for m in p.messages.iter().flatten() {
        if let serde_json::Value::String(s) = &m.content {
            text.push_str(s);
            text.push('\n');
        }
    }
    text
}

/// Whether another model may be tried after `e`.
fn may_fall_back(e: &RpcError) -> bool {
    e.code == INTERNAL_ERROR
        && e.data
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(serde_json::Value::as_str)
            != Some("response_format_mismatch")
}

fn record(
    call: &Call,
    model: &str,
    trace_id: &str,
    started: Instant,
    outcome: &Result<InferReply, RpcError>,
) {
    let ledger = &call.state.inference.ledger;
    match outcome {
        Ok(r) => ledger.record_call(
            &r.model_used,
            &r.trace_id,
            false,
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.latency_ms as f64,
            r.cost_usd,
        ),
        Err(_) => ledger.record_call(
            model,
            trace_id,
            true,
            0,
            0,
            started.elapsed().as_secs_f64() * 1000.0,
            None,
        ),
    }
}

/// `infer` / `infer_stream` (see the module docs).
pub async fn generate(
    call: Call,
    params: GenerateParams,
    stream: bool,
) -> Result<InferReply, RpcError> {
    let pinned = params
        .model
        .as_ref()
        .filter(|m| !m.trim().is_empty())
        .cloned();
    let chain: Vec<String> = match pinned {
        Some(model) => vec![model.into_string()],
        None => {
            let decision = call
                .state
                .inference
                .route(&prompt_text(&params), params.intent.as_ref())
                .map_err(RpcError::invalid_params)?;
            let strict = params
                .params
                .as_ref()
                .and_then(|k| k.strict_model)
                .unwrap_or(false);
            let mut chain = vec![decision.model_id];
            if !strict {
                chain.extend(decision.fallbacks);
            }
            chain
        }
    };
    let trace_id = format!(
        "{}-{}",
        call.session.label(),
        crate::state::inference::id_key(call.id.as_ref().unwrap_or(&serde_json::Value::Null))
    );
    let mut last = None;
    for (i, model) in chain.iter().enumerate() {
        let mut attempt = params.clone();
        attempt.model = Some(car_proto::methods::fields::Name(model.clone()));
        let started = Instant::now();
        let outcome = super::generate_on(call.clone(), attempt, stream).await;
        record(&call, model, &trace_id, started, &outcome);
        match outcome {
            Err(e) if may_fall_back(&e) && i + 1 < chain.len() => {
                tracing::info!(%model, error = %e.message, next = %chain[i + 1], "model failed; falling back");
                last = Some(e);
            }
            done => return done,
        }
    }
    Err(last.unwrap_or_else(|| RpcError::internal("no model ran")))
}
