//! `models.*`: the daemon's model registry (`CAR_HOME/models/registry.json`).
//!
//! `models.register` takes CAR's `ModelSchema`, bare or as `{schema: ModelSchema}`. Its
//! `source` says where the model runs: `{type: "local", path}` (a GGUF file or an embedding
//! model directory) or `{type: "remote_api", endpoint, api_key_env?, model?}` (an
//! OpenAI-compatible endpoint). The older flat shape (`path`, or `base_url` + `model` +
//! `api_key_env`, at top level) is accepted too.

use std::path::PathBuf;

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inference::ModelIdentity;
use crate::pricing::CostModel;

use super::fields::{Json, Name, NoParams};
use super::member::{json, member, opt_at, req_at, ArgKind::*};
use super::{host, op, Declaration};

/// CAR's `ModelSchema` (the fields this daemon reads; the rest is kept as sent).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ModelSchema {
    #[serde(default)]
    pub id: Option<Name>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub family: Option<String>,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// `{type: "local" | "remote_api", …}`.
    #[serde(default)]
    pub source: Option<serde_json::Map<String, Json>>,
    #[serde(default)]
    pub context_length: Option<u64>,
    /// Flat form: a local model file or directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Flat form: a remote endpoint.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Flat form: the remote model's name.
    #[serde(default)]
    pub model: Option<String>,
    /// The environment variable holding the remote API key (never the key itself); it
    /// must end in `_API_KEY`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Beyond CAR: a secret-store entry (`service/key` or `key`) holding the API key.
    #[serde(default)]
    pub api_key_secret: Option<String>,
    /// CAR's `CostModel`: the model's prices (USD per 1M tokens; `null` = unpriced).
    #[serde(default)]
    pub cost: Option<CostModel>,
}

/// `models.register` params: `{schema}` or the bare schema (its fields at top level; they
/// are listed here rather than flattened so a bad field's error names its path).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct RegisterParams {
    #[serde(default)]
    pub schema: Option<ModelSchema>,
    #[serde(default)]
    pub id: Option<Name>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub family: Option<String>,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub source: Option<serde_json::Map<String, Json>>,
    #[serde(default)]
    pub context_length: Option<u64>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_secret: Option<String>,
    #[serde(default)]
    pub cost: Option<CostModel>,
}

impl RegisterParams {
    /// The schema: `schema` when given, else the top-level fields.
    pub fn into_schema(self) -> ModelSchema {
        self.schema.unwrap_or(ModelSchema {
            id: self.id,
            name: self.name,
            provider: self.provider,
            family: self.family,
            capabilities: self.capabilities,
            source: self.source,
            context_length: self.context_length,
            path: self.path,
            base_url: self.base_url,
            model: self.model,
            api_key_env: self.api_key_env,
            api_key_secret: self.api_key_secret,
            cost: self.cost,
        })
    }
}

/// What a registered id points at (the registry's record; `kind` is the tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSource {
    /// A local GGUF generation model.
    Gguf {
        /// Absolute path of the `.gguf` file.
        path: PathBuf,
        /// SHA-256 of the file.
        sha256: String,
        /// File size in bytes.
        size: u64,
    },
    /// A local BERT-style embedding model directory.
    Embedding {
        /// Absolute path of the directory.
        path: PathBuf,
        /// SHA-256 of `model.safetensors`.
        sha256: String,
        /// Size of `model.safetensors` in bytes.
        size: u64,
    },
    /// A remote OpenAI-compatible endpoint.
    Remote {
        /// Base URL without `/v1`, e.g. `http://127.0.0.1:8080`.
        base_url: String,
        /// The provider's model name.
        model: String,
        /// Name of the env var (or `CAR_HOME/env` line) holding the API key.
        api_key_env: Option<String>,
        /// Name of the secret-store entry holding the API key (`service/key` or `key`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_secret: Option<String>,
    },
    /// Served by the session registered with `inference.register_runner`
    /// (`source: {type: "delegated"}`).
    Delegated {},
}

/// The `ModelSchema` fields a registry entry keeps as declared, beside what the registry
/// resolves (CAR's catalog fields: routing and pricing read them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    /// The declared prices; absent = unpriced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostModel>,
}

impl ModelMeta {
    /// The fields of `schema` an entry keeps.
    pub fn of(schema: &ModelSchema) -> Self {
        ModelMeta {
            provider: schema.provider.clone(),
            family: schema.family.clone(),
            capabilities: schema.capabilities.clone(),
            context_length: schema.context_length,
            cost: schema.cost.clone(),
        }
    }
}

/// One registry entry, as persisted in `registry.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelEntry {
    /// The registry id.
    pub id: String,
    /// What it points at.
    #[serde(flatten)]
    pub source: ModelSource,
    /// The agent that registered it; `None` for the host's and operators' entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What the registration declared about the model.
    #[serde(flatten)]
    pub meta: ModelMeta,
}

impl ModelEntry {
    /// The entry's immutable identity.
    pub fn identity(&self) -> ModelIdentity {
        let (sha256, size) = match &self.source {
            ModelSource::Gguf { sha256, size, .. }
            | ModelSource::Embedding { sha256, size, .. } => (Some(sha256.clone()), Some(*size)),
            ModelSource::Remote { .. } | ModelSource::Delegated {} => (None, None),
        };
        ModelIdentity {
            id: self.id.clone(),
            sha256,
            size,
        }
    }

    /// `gguf`, `embedding`, `remote` or `delegated`.
    pub fn kind_name(&self) -> &'static str {
        match self.source {
            ModelSource::Gguf { .. } => "gguf",
            ModelSource::Embedding { .. } => "embedding",
            ModelSource::Remote { .. } => "remote",
            ModelSource::Delegated {} => "delegated",
        }
    }

    /// The weights file of a local model (`None` for remote ones).
    pub fn weights_path(&self) -> Option<PathBuf> {
        match &self.source {
            ModelSource::Gguf { path, .. } => Some(path.clone()),
            ModelSource::Embedding { path, .. } => Some(path.join("model.safetensors")),
            ModelSource::Remote { .. } | ModelSource::Delegated {} => None,
        }
    }
}

/// A `models.list` row: the registry entry (`kind` is its tag) with its identity and
/// whether it is loaded, plus CAR's legacy catalog fields; the ones this registry does not
/// know (`hf_repo`, `tokenizer_repo`, `param_count`) are always `null`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ModelRow {
    #[serde(flatten)]
    pub entry: ModelEntry,
    pub identity: ModelIdentity,
    pub loaded: bool,
    /// The id again (CAR's catalog name).
    pub name: String,
    pub hf_repo: Option<String>,
    /// The weights file's name (local models).
    pub hf_filename: Option<String>,
    pub tokenizer_repo: Option<String>,
    /// `generate`, `embed` or `remote`.
    pub role: String,
    pub param_count: Option<u64>,
    /// The weights file's size in MiB (local models whose file is present).
    pub quantized_size_mb: Option<f64>,
    /// Whether the weights file is present.
    pub downloaded: bool,
}

/// `models.unregister` / `models.remove` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnregisterReply {
    pub id: String,
    pub unregistered: bool,
    /// The registry file.
    pub path: String,
    pub note: String,
    /// The model as it was listed.
    pub model: ModelRow,
}

/// `models.register` result: CAR's fields plus the registered model's identity.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterReply {
    pub id: String,
    pub registered: bool,
    /// The registry file.
    pub path: String,
    pub note: String,
    /// The model as `models.list` shows it.
    pub model: ModelRow,
}

/// `{id}` (CAR's client sends `model_id` for `models.remove`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct IdParams {
    #[serde(alias = "model_id")]
    pub id: Name,
}

crate::method!(
    /// `models.list` → registered models with their identities.
    List = op("models.list", "registered models with their immutable identities");
    access: Access::owned(Resource::Models).observer();
    NoParams => Vec<ModelRow>;
    member("list_models", &[], json())
);
crate::method!(
    /// `models.register` → `{id, registered, path, note, model}`.
    Register = op("models.register", "register a local gguf or embedding model, or a remote endpoint");
    access: Access::owned(Resource::Models);
    RegisterParams => RegisterReply;
    member("register_model", &[req_at("schema_json", "schema", Json)], json())
);
crate::method!(
    /// `models.unregister` → `{id, unregistered, path, note}`.
    Unregister = op("models.unregister", "unregister a model");
    access: Access::owned(Resource::Models);
    IdParams => UnregisterReply
);
crate::method!(
    /// `models.remove` (host) → like `models.unregister`.
    Remove = host("models.remove", "unregister a model (host session)");
    access: Access::owned(Resource::Models);
    IdParams => UnregisterReply;
    member("remove_model", &[req_at("model_id", "model_id", Str)], json())
);

crate::method!(
    /// `models.route {prompt, intent?}` → the route decision `infer` follows without a model.
    Route = op("models.route", "which model the router picks for a prompt, with its fallbacks and the ranking");
    access: Access::owned(Resource::Models);
    super::inference::routing::RouteParams => super::inference::routing::RouteDecision;
    member("route_model", &[req_at("prompt", "prompt", Str), opt_at("intent_json", "intent", Json)], json())
);
crate::method!(
    /// `models.stats` → `{profiles}`.
    Stats = op("models.stats", "each model's calls, outcomes and latency since the daemon started");
    access: Access::owned(Resource::Models).observer();
    NoParams => super::inference::routing::StatsReply;
    member("model_stats", &[], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<List>(),
    Declaration::of::<Route>(),
    Declaration::of::<Stats>(),
    Declaration::of::<Register>(),
    Declaration::of::<Unregister>(),
    Declaration::of::<Remove>(),
];
