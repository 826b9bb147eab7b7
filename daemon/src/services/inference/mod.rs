//! `infer`, `infer_stream`, `infer.cancel`, `infer.deadline`, `embed`, `classify`,
//! `tokenize`, `detokenize` and `models.*`: JSON-RPC over the shared inference service
//! (`crate::state::inference`).
//!
//! A generation call: registers itself (so `infer.cancel {id}` can reach it), starts its
//! `infer.progress {id}` heartbeat, waits for an admission slot (queued calls heartbeat
//! too, and leave the queue when their connection drops), then runs the engine on the
//! blocking pool. `infer_stream` sends `inference.stream.event {id, request_id, event}` for
//! each text piece (`{type: "text", data}`), then `usage` and `stop_reason` events, then
//! answers with the final result. Engine errors map by kind: caller mistakes `-32602`, an
//! unknown model `-32602` naming `model`, a provider's content refusal `-32007`, anything
//! else `-32603`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use car_inference::{
    CacheHint, GenerateRequest, Message, StreamControl, StreamEvent, ToolCall, ToolChoice, ToolSpec,
};
use car_proto::errors::RpcError;
use serde_json::{json, Value};

use car_proto::methods::fields::Name;
use car_proto::methods::inference::{
    self as m, CancelParams, ClassifyParams, DeadlineParams, DetokenizeParams, EmbedParams,
    GenerateParams, InferReply, InferUsage, ResponseFormat, Stop, TokenizeParams,
};

use crate::handler::{Call, Routes};
use crate::state::inference::{Heartbeat, InferenceService};

fn service(call: &Call) -> Arc<InferenceService> {
    call.state.inference.clone()
}

mod delegated;
mod routed;

pub fn register(routes: &mut Routes) {
    delegated::register(routes);
    routes
        .add::<m::Infer, _, _>(|call, p| routed::generate(call, p, false))
        .add::<m::InferStream, _, _>(|call, p| routed::generate(call, p, true))
        .add::<m::Cancel, _, _>(cancel)
        .add::<m::Deadline, _, _>(deadline)
        .add::<m::Embed, _, _>(embed)
        .add::<m::Classify, _, _>(classify)
        .add::<m::Tokenize, _, _>(tokenize)
        .add::<m::Detokenize, _, _>(detokenize);
}

/// The text of a message's `content`: a string, or the `text` of its content parts.
fn content_text(i: usize, content: Value) -> Result<String, RpcError> {
    match content {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => parts
            .into_iter()
            .enumerate()
            .map(|(j, part)| match part {
                Value::String(s) => Ok(s),
                Value::Object(o) => match o.get("text") {
                    Some(Value::String(t)) => Ok(t.clone()),
                    _ => Err(RpcError::invalid_params(format!(
                        "messages[{i}].content[{j}]: only text parts are supported by this daemon's engines"
                    ))),
                },
                _ => Err(RpcError::invalid_params(format!(
                    "messages[{i}].content[{j}]: expected a string or a text part"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.join("")),
        _ => Err(RpcError::invalid_params(format!(
            "messages[{i}].content: expected a string or an array of content parts"
        ))),
    }
}

/// One of an assistant message's `tool_calls` (`{id, name, arguments}`, arguments an
/// object or JSON text), naming its position when malformed.
fn tool_call(i: usize, j: usize, call: Value) -> Result<ToolCall, RpcError> {
    let at = |what: &str| RpcError::invalid_params(format!("messages[{i}].tool_calls[{j}].{what}"));
    let id = call["id"]
        .as_str()
        .ok_or_else(|| at("id: expected a string"))?;
    let name = call["name"]
        .as_str()
        .ok_or_else(|| at("name: expected a string"))?;
    let arguments = car_inference::tools::parse_arguments(name, &call["arguments"])
        .map_err(|e| at(&format!("arguments: {e}")))?;
    Ok(ToolCall::new(id, name, arguments))
}

/// The local prefix cache's use for one request. `cache_control` (a boolean; CAR's
/// Anthropic breakpoint flag) absent or `true` reuses and saves KV prefixes; `false` opts
/// out (a cold prefill). `params.cache_ttl` is CAR's `"five_minutes"` (default) or
/// `"one_hour"`: how long the saved sequence lives.
fn cache_hint(cache_control: Option<&Value>, ttl: Option<&Value>) -> Result<CacheHint, RpcError> {
    use car_inference::prefix_cache::{DEFAULT_TTL, LONG_TTL};
    let enabled = match cache_control {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "cache_control: expected a boolean, got {other}"
            )))
        }
    };
    let ttl = match ttl {
        None | Some(Value::Null) => DEFAULT_TTL,
        Some(Value::String(s)) if s == "five_minutes" => DEFAULT_TTL,
        Some(Value::String(s)) if s == "one_hour" => LONG_TTL,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "params.cache_ttl: expected \"five_minutes\" or \"one_hour\", got {other}"
            )))
        }
    };
    Ok(CacheHint { enabled, ttl })
}

/// CAR's usage object for `usage` (see [`InferUsage`]).
pub(crate) fn infer_usage(usage: &car_inference::Usage) -> InferUsage {
    let (input, output, cached) = (
        u64::from(usage.prompt_tokens),
        u64::from(usage.completion_tokens),
        u64::from(usage.cache_read_tokens),
    );
    InferUsage {
        input_tokens: input,
        output_tokens: output,
        prompt_tokens: input,
        completion_tokens: output,
        total_tokens: input + cached + output,
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

/// Reads CAR's generation request; `context` is appended to the system instruction.
fn generate_request(p: GenerateParams) -> Result<(Option<String>, GenerateRequest), RpcError> {
    if p.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(RpcError::invalid_params(
            "images: this daemon's engines are text-only",
        ));
    }
    let knobs = p.knobs();
    let cache = cache_hint(p.cache_control.as_ref(), knobs.cache_ttl.as_ref())?;
    if knobs.max_tokens == Some(0) {
        return Err(RpcError::invalid_params(
            "params.max_tokens: must be at least 1",
        ));
    }
    let messages = match p.messages {
        None => None,
        Some(list) => Some(
            list.into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let mut message = Message::new(m.role, content_text(i, m.content)?);
                    message.tool_use_id = m.tool_use_id.or(m.tool_call_id);
                    for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                        message.tool_calls.push(tool_call(i, j, call)?);
                    }
                    Ok(message)
                })
                .collect::<Result<Vec<_>, RpcError>>()?,
        ),
    };
    // An empty prompt beside messages means "use the messages" (CAR's agent loop sends it).
    let prompt = p
        .prompt
        .filter(|text| !(text.is_empty() && messages.as_ref().is_some_and(|m| !m.is_empty())));
    let system = match (p.system, p.context) {
        (s, None) => s,
        (None, Some(c)) => Some(format!("Context:\n{c}")),
        (Some(s), Some(c)) => Some(format!("{s}\n\nContext:\n{c}")),
    };
    let tools = p
        .tools
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_value::<ToolSpec>(t)
                .map_err(|e| RpcError::invalid_params(format!("tools[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tool_choice = match knobs.tool_choice {
        None | Some(Value::Null) => None,
        Some(choice) => Some(
            serde_json::from_value::<ToolChoice>(choice)
                .map_err(|e| RpcError::invalid_params(format!("tool_choice: {e}")))?,
        ),
    };
    let request = GenerateRequest {
        prompt,
        messages,
        system,
        max_tokens: knobs.max_tokens,
        temperature: knobs.temperature,
        top_p: knobs.top_p,
        seed: knobs.seed,
        stop: knobs.stop.map(Stop::into_vec).unwrap_or_default(),
        tools,
        tool_choice,
        parallel_tool_calls: knobs.parallel_tool_calls,
        response_format: checked_format(p.response_format)?,
        cache,
    };
    Ok((p.model.map(Name::into_string), request))
}

/// One generation on the model `params` names (or the engine's default); routing and
/// fallback are [`routed`]'s.
async fn generate_on(
    call: Call,
    mut params: GenerateParams,
    stream: bool,
) -> Result<InferReply, RpcError> {
    if let Some(query) = params.context_query.take() {
        let block = call
            .state
            .data
            .memory
            .build_context(
                &call.session.identity().memory_scope(),
                &query,
                car_memory::validate_window(None).map_err(RpcError::invalid_params)?,
            )
            .await
            .map_err(|e| RpcError::internal(format!("memory: {e}")))?;
        if !block.text.trim().is_empty() {
            params.context = Some(match params.context.take() {
                Some(c) => format!("{c}\n\n{}", block.text),
                None => block.text,
            });
        }
    }
    let delegated_params = params
        .model
        .as_deref()
        .filter(|m| is_delegated(&call, m))
        .map(|_| params.clone());
    let (model, request) = generate_request(params)?;
    let format = request.response_format.clone();
    let svc = service(&call);
    let id = call.id.clone().unwrap_or(Value::Null);
    let trace_id = format!(
        "{}-{}",
        call.session.label(),
        crate::state::inference::id_key(&id)
    );
    let guard = svc
        .track(call.session.id, &id)
        .map_err(RpcError::invalid_params)?;
    let _heartbeat = Heartbeat::start(call.session.clone(), id.clone(), svc.progress_every);
    if let (Some(params), Some(name)) = (&delegated_params, model.as_deref()) {
        let cancel = guard.entry.cancel.clone();
        let mut reply = delegated::generate(&call, name, params, stream, trace_id, &cancel).await?;
        drop(guard);
        if let (Some(format), true) = (&format, reply.tool_calls.is_empty()) {
            check_answer(format, &reply.text)?;
        }
        // A delegated model is priced and metered like any other.
        let usage = car_inference::Usage {
            prompt_tokens: u32::try_from(reply.usage.prompt_tokens).unwrap_or(u32::MAX),
            completion_tokens: u32::try_from(reply.usage.completion_tokens).unwrap_or(u32::MAX),
            cache_read_tokens: u32::try_from(reply.usage.cache_read_input_tokens)
                .unwrap_or(u32::MAX),
        };
        reply.cost_usd = reply
            .cost_usd
            .or_else(|| cost_of(&call, &reply.model_used, &usage));
        meter(&call, &reply.model_used, &usage, reply.cost_usd);
        return Ok(reply);
    }
    let queued = Instant::now();
    let slot = svc
        .admission
        .clone()
        .acquire_owned()
        .await
        .expect("admission never closes");
    tracing::debug!(session = call.session.id, waited = ?queued.elapsed(), "admitted");
    let engine = svc.engine.clone();
    let entry = guard.entry.clone();
    let session = call.session.clone();
    let result = crate::state::inference::blocking(move || {
        // The slot is held until the generation itself ends, even if the handler was
        // dropped meanwhile and the cancel token is still being noticed.
        let _slot = slot;
        let cancel = entry.cancel.clone();
        let mut calls_seen = 0u32;
        let mut on_event = |event: StreamEvent<'_>| {
            if entry.past_deadline() {
                return StreamControl::Stop;
            }
            if stream {
                // A whole call is also sent as CAR's `tool_start` + one `tool_delta` (the
                // arguments' JSON text), so a client folding CAR's events sees every call.
                let events = match event {
                    StreamEvent::Text(piece) => vec![json!({"type": "text", "data": piece})],
                    StreamEvent::ToolCall(call) => {
                        let index = calls_seen;
                        calls_seen += 1;
                        vec![
                            json!({"type": "tool_call", "data": call}),
                            json!({"type": "tool_start", "name": call.name, "index": index, "id": call.id}),
                            json!({"type": "tool_delta", "index": index, "data": call.arguments.to_string()}),
                        ]
                    }
                    _ => return StreamControl::Continue,
                };
                for event in events {
                    session.notify(
                        "inference.stream.event",
                        &json!({"id": id, "request_id": id, "event": event}),
                    );
                }
            }
            StreamControl::Continue
        };
        let out =
            engine.generate_with_events(model.as_deref(), &request, &cancel, Some(&mut on_event));
        if let Ok(r) = &out {
            if stream {
                for event in [
                    {
                        let mut usage =
                            serde_json::to_value(infer_usage(&r.usage)).unwrap_or_default();
                        usage["type"] = json!("usage");
                        usage
                    },
                    json!({"type": "stop_reason", "data": r.stop_reason}),
                ] {
                    session.notify(
                        "inference.stream.event",
                        &json!({"id": id, "request_id": id, "event": event}),
                    );
                }
            }
        }
        out
    })
    .await?;
    drop(guard);
    if let Some(format) = &format {
        if result.tool_calls.is_empty() {
            check_answer(format, &result.text)?;
        }
    }
    let model_used = result.model_identity.id.clone();
    let cost_usd = cost_of(&call, &model_used, &result.usage);
    meter(&call, &model_used, &result.usage, cost_usd);
    Ok(InferReply {
        cost_usd,
        usage: infer_usage(&result.usage),
        text: result.text,
        tool_calls: result.tool_calls,
        trace_id,
        model_used,
        model_identity: result.model_identity,
        latency_ms: result.latency_ms,
        time_to_first_token_ms: result.time_to_first_token_ms,
        stop_reason: result.stop_reason,
    })
}

/// Checks a `response_format` before anything runs: a `json_schema` needs a schema that is a
/// valid JSON Schema (`-32602` naming `response_format.schema`).
fn checked_format(format: Option<ResponseFormat>) -> Result<Option<ResponseFormat>, RpcError> {
    let Some(format) = format else {
        return Ok(None);
    };
    let schema = format.schema().ok_or_else(|| {
        RpcError::invalid_params(
            "response_format.schema: a JSON Schema object is required for type json_schema",
        )
    })?;
    jsonschema::validator_for(&schema).map_err(|e| {
        RpcError::invalid_params(format!(
            "response_format.schema: not a valid JSON Schema: {e}"
        ))
    })?;
    Ok(Some(format))
}

/// Checks that `text` is one JSON value valid against `format` (the grammar makes a local
/// model's answer so unless generation was cut short; a remote provider may not enforce
/// it): else `-32603` with `data.reason: "response_format_mismatch"` and the answer.
fn check_answer(format: &ResponseFormat, text: &str) -> Result<(), RpcError> {
    let mismatch = |why: String| {
        RpcError::internal(format!("the answer does not match response_format: {why}"))
            .with_data(json!({"reason": "response_format_mismatch", "text": text}))
    };
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|e| mismatch(format!("it is not JSON ({e})")))?;
    let schema = format.schema().unwrap_or(Value::Bool(true));
    jsonschema::validate(&schema, &value).map_err(|e| {
        let at = e.instance_path().to_string();
        mismatch(if at.is_empty() {
            e.to_string()
        } else {
            format!("at {at}: {e}")
        })
    })
}

/// Whether `model` is registered as delegated (served by the inference runner).
fn is_delegated(call: &Call, model: &str) -> bool {
    call.state
        .inference
        .engine
        .registry()
        .get(model)
        .is_ok_and(|e| {
            matches!(
                e.source,
                car_proto::methods::models::ModelSource::Delegated {}
            )
        })
}

/// What one generation cost at `model`'s registered prices; `None` when it is unpriced.
fn cost_of(call: &Call, model: &str, usage: &car_inference::Usage) -> Option<f64> {
    let cost = call.state.inference.cost_model(model)?;
    cost.price(car_proto::pricing::Priced {
        prompt_tokens: u64::from(usage.prompt_tokens),
        cache_read_input_tokens: u64::from(usage.cache_read_tokens),
        cache_creation_input_tokens: 0,
        completion_tokens: u64::from(usage.completion_tokens),
    })
}

/// Journals one generation's usage as CAR's `InferenceMetered` (`inference.metered`), which
/// `events.cost_by_agent` folds by `agent`: the session's agent, else `user`. `cost_usd` is
/// the call's priced cost; an unpriced model's calls add 0 there (the fold is a sum) and are
/// marked `priced: false`.
fn meter(call: &Call, model: &str, usage: &car_inference::Usage, cost_usd: Option<f64>) {
    let agent = call
        .session
        .identity()
        .agent_id
        .unwrap_or_else(|| "user".to_string());
    call.state.data.store.record(crate::state::store::NewEvent {
        kind: "inference.metered",
        session_id: Some(call.session.label()),
        agent_id: call.session.agent_id(),
        data: json!({
            "agent": agent,
            "model": model,
            "tokens_in": usage.prompt_tokens + usage.cache_read_tokens,
            "tokens_out": usage.completion_tokens,
            "cost_usd": cost_usd.unwrap_or(0.0),
            "priced": cost_usd.is_some(),
        }),
        ..Default::default()
    });
}

/// `infer.cancel {id}` (needs `infer.cancel.v1`) → `{cancelled: true}`.
async fn cancel(call: Call, p: CancelParams) -> Result<m::CancelReply, RpcError> {
    {
        let id = p.id;
        let running = service(&call).find(call.session.id, &id).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "id: no infer call {id} is running on this connection"
            ))
        })?;
        running.cancel.cancel();
        Ok(m::CancelReply { cancelled: true })
    }
}

/// `infer.deadline {id, deadline_ms}` (needs `infer.deadline.v1`): stop call `id` once
/// `deadline_ms` from now has passed (its stop reason is then `cancelled`).
async fn deadline(call: Call, p: DeadlineParams) -> Result<m::DeadlineReply, RpcError> {
    {
        let id = p.id;
        let ms = p.deadline_ms;
        if ms > 86_400_000 {
            return Err(RpcError::invalid_params(
                "deadline_ms: must be an integer from 0 to 86400000",
            ));
        }
        let running = service(&call).find(call.session.id, &id).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "id: no infer call {id} is running on this connection"
            ))
        })?;
        *running.deadline.lock().expect("deadline lock") =
            Some(Instant::now() + Duration::from_millis(ms));
        Ok(m::DeadlineReply { deadline_ms: ms })
    }
}

/// `embed {texts, model?}` → `{embeddings, model_identity}`.
async fn embed(call: Call, p: EmbedParams) -> Result<m::EmbedReply, RpcError> {
    if p.texts.is_empty() {
        return Err(RpcError::invalid_params("texts: must not be empty"));
    }
    let (texts, model) = (p.texts, p.model.map(Name::into_string));
    let engine = service(&call).engine.clone();
    let r =
        crate::state::inference::blocking(move || engine.embed(model.as_deref(), &texts)).await?;
    Ok(m::EmbedReply {
        embeddings: r.embeddings,
        model_identity: r.model_identity,
    })
}

/// `classify {text, labels, model?}` → `[{label, score}]`, best first (CAR's shape).
async fn classify(call: Call, p: ClassifyParams) -> Result<Vec<m::LabelScore>, RpcError> {
    let (text, labels, model) = (p.text, p.labels, p.model.map(Name::into_string));
    let engine = service(&call).engine.clone();
    let r = crate::state::inference::blocking(move || {
        engine.classify(model.as_deref(), &text, &labels)
    })
    .await?;
    Ok(r.scores)
}

/// `tokenize {text, model?}` → `{tokens}`.
async fn tokenize(call: Call, p: TokenizeParams) -> Result<m::TokenizeReply, RpcError> {
    let (text, model) = (p.text, p.model.map(Name::into_string));
    let engine = service(&call).engine.clone();
    let tokens =
        crate::state::inference::blocking(move || engine.tokenize(model.as_deref(), &text)).await?;
    Ok(m::TokenizeReply { tokens })
}

/// `detokenize {tokens, model?}` → `{text}`.
async fn detokenize(call: Call, p: DetokenizeParams) -> Result<m::DetokenizeReply, RpcError> {
    let (tokens, model) = (p.tokens, p.model.map(Name::into_string));
    let engine = service(&call).engine.clone();
    let text =
        crate::state::inference::blocking(move || engine.detokenize(model.as_deref(), &tokens))
            .await?;
    Ok(m::DetokenizeReply { text })
}
