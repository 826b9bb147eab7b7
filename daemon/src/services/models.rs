//! `models.*`: the model registry behind inference (`CAR_HOME/models/registry.json`).
//!
//! `models.register` takes CAR's `ModelSchema`, bare or as `{schema}`. Its `source` says
//! where the model runs: `{type: "local", path}` (also `model_path` / `file`) is a GGUF file
//! or an embedding-model directory; `{type: "remote_api", endpoint}` (also `base_url` /
//! `url`, with `api_key_env` and `model` / `model_id`) is an OpenAI-compatible endpoint,
//! whose model name defaults to the schema's `name`. The flat form (`path`, or `base_url`
//! and `model` at top level) is accepted too. Unlike CAR's daemon, a registration takes
//! effect at once: no restart is needed.
//!
//! Beyond CAR (the daemon sends the endpoint's API key to the registered URL): registering
//! a remote endpoint needs a host session (`permission denied`, `data.reason:
//! "host_required"` otherwise; the method's label stays CAR's `operator`, so local models
//! register from any session), and the key is named either by `api_key_env`, which must
//! end in `_API_KEY`, or by `api_key_secret`, a `secret.*` entry.
//!
//! Owner scope (issue 24; CAR lets any caller replace or remove any id): a model an agent
//! registers records the agent as `owner`, and an agent's `models.register` (same id) or
//! `models.unregister` of an entry it does not own is refused (`-32603`, `data.reason:
//! "not_owner"`) before any file is read; host and operator sessions manage every entry
//! (`car_inference::ModelRegistry`). Local files are opened safely there too (FIFOs and
//! devices refused at once).

use car_inference::RegisterRequest;
use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::models::{
    self as m, IdParams, ModelRow, ModelSchema, RegisterParams, RegisterReply, UnregisterReply,
};
use car_proto::methods::CallerRole;
use serde_json::{json, Map, Value};

use crate::handler::{Call, Routes};
use crate::state::inference::blocking;
use crate::state::inference::refresh_memory_embedder;
use car_proto::methods::inference::routing::{RouteParams, StatsReply};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::List, _, _>(list)
        .add::<m::Register, _, _>(register_model)
        .add::<m::Unregister, _, _>(unregister)
        .add::<m::Remove, _, _>(unregister)
        .add::<m::Route, _, _>(|call: Call, p: RouteParams| async move {
            if p.prompt.trim().is_empty() {
                return Err(RpcError::invalid_params("prompt: must not be empty"));
            }
            call.state
                .inference
                .route(&p.prompt, p.intent.as_ref())
                .map_err(RpcError::invalid_params)
        })
        .add::<m::Stats, _, _>(|call: Call, _: NoParams| async move {
            Ok(StatsReply {
                profiles: call.state.inference.ledger.live_stats(),
            })
        });
}

/// A `models.list` row for `entry` (see [`ModelRow`]).
fn row_of(entry: &car_inference::ModelEntry, loaded: bool) -> ModelRow {
    let kind = entry.kind_name();
    let path = entry.weights_path();
    let size = path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());
    ModelRow {
        entry: entry.clone(),
        identity: entry.identity(),
        loaded,
        name: entry.id.clone(),
        hf_repo: None,
        hf_filename: path
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|f| f.to_string_lossy().into_owned()),
        tokenizer_repo: None,
        role: match kind {
            "gguf" => "generate",
            "embedding" => "embed",
            other => other,
        }
        .to_string(),
        param_count: None,
        quantized_size_mb: size.map(|b| b as f64 / (1024.0 * 1024.0)),
        downloaded: path.as_ref().is_some_and(|p| p.exists()),
    }
}

/// `models.list` → registered models with their identities and whether they are loaded.
async fn list(call: Call, _: NoParams) -> Result<Vec<ModelRow>, RpcError> {
    let engine = call.state.inference.engine.clone();
    let loaded = engine.loaded_models();
    Ok(engine
        .list()
        .iter()
        .map(|e| row_of(e, loaded.contains(&e.id)))
        .collect())
}

fn text_at(source: &Map<String, Value>, keys: &[&str]) -> Result<Option<String>, RpcError> {
    for key in keys {
        match source.get(*key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(Some(s.clone())),
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "schema.source.{key}: expected a string"
                )))
            }
        }
    }
    Ok(None)
}

/// The registry request for a `ModelSchema`.
fn request_of(schema: ModelSchema) -> Result<RegisterRequest, RpcError> {
    if let Some(cost) = &schema.cost {
        cost.check()
            .map_err(|e| RpcError::invalid_params(format!("cost.{e}")))?;
    }
    let mut request = RegisterRequest {
        meta: car_inference::ModelMeta::of(&schema),
        delegated: false,
        id: schema.id.map(|n| n.into_string()),
        path: schema.path.map(Into::into),
        base_url: schema.base_url,
        model: schema.model,
        api_key_env: schema.api_key_env,
        api_key_secret: schema.api_key_secret,
    };
    if let Some(source) = schema.source {
        let kind = text_at(&source, &["type", "kind"])?.unwrap_or_default();
        match kind.as_str() {
            "local" | "" if request.base_url.is_none() => {
                if let Some(path) = text_at(&source, &["path", "model_path", "file"])? {
                    request.path = Some(path.into());
                }
            }
            "remote_api" | "openai" | "openai_compatible" => {
                request.base_url =
                    text_at(&source, &["endpoint", "base_url", "url"])?.or(request.base_url);
                request.api_key_env = text_at(&source, &["api_key_env"])?.or(request.api_key_env);
                request.api_key_secret =
                    text_at(&source, &["api_key_secret"])?.or(request.api_key_secret);
                request.model = text_at(&source, &["model", "model_id"])?
                    .or(request.model)
                    .or(schema.name.clone());
            }
            "local" => {}
            "delegated" => request.delegated = true,
            other => {
                return Err(RpcError::invalid_params(format!(
                "schema.source.type: {other:?} is not served by this daemon (local, remote_api or delegated)"
            )))
            }
        }
    }
    if request.delegated {
        if request.path.is_some() || request.base_url.is_some() {
            return Err(RpcError::invalid_params(
                "schema.source: a delegated model takes neither a path nor an endpoint",
            ));
        }
        if request.id.is_none() {
            return Err(RpcError::invalid_params(
                "schema.id: a delegated model needs an id",
            ));
        }
    } else if request.path.is_none() && request.base_url.is_none() {
        return Err(RpcError::invalid_params(
            "schema.source: needs a local path or a remote_api endpoint",
        ));
    }
    Ok(request)
}

/// `models.register` → `{id, registered: true, path, note, model}`.
async fn register_model(call: Call, p: RegisterParams) -> Result<RegisterReply, RpcError> {
    let request = request_of(p.into_schema())?;
    if request.base_url.is_some() && call.session.identity().role != CallerRole::Host {
        // The daemon will send an API key to the registered URL: only a host chooses it.
        return Err(RpcError::internal(
            "permission denied: registering a remote endpoint needs a host session (session.auth with host_token)",
        )
        .with_data(json!({"reason": "host_required"})));
    }
    let engine = call.state.inference.engine.clone();
    let entry = blocking({
        let engine = engine.clone();
        let owner = call.session.identity().agent_id;
        move || engine.register_as(&request, owner.as_deref())
    })
    .await?;
    refresh_memory_embedder(&engine, &call.state.data.memory);
    let path = engine.registry_path();
    Ok(RegisterReply {
        id: entry.id.clone(),
        registered: true,
        path: path.display().to_string(),
        note: "registered; usable at once (no daemon restart needed)".into(),
        model: row_of(&entry, false),
    })
}

/// `models.unregister {id}` / `models.remove {id}` (host) → `{id, unregistered, path,
/// note, model}`.
async fn unregister(call: Call, p: IdParams) -> Result<UnregisterReply, RpcError> {
    let id = p.id.into_string();
    let engine = call.state.inference.engine.clone();
    let entry = blocking({
        let engine = engine.clone();
        let id = id.clone();
        let owner = call.session.identity().agent_id;
        move || engine.remove_as(&id, owner.as_deref())
    })
    .await?;
    refresh_memory_embedder(&engine, &call.state.data.memory);
    Ok(UnregisterReply {
        id,
        unregistered: true,
        path: engine.registry_path().display().to_string(),
        note: "unregistered; effective at once".into(),
        model: row_of(&entry, false),
    })
}
