//! `models.*`: the daemon's model registry (`CAR_HOME/models/registry.json`).
//!
//! `models.register` takes CAR's `ModelSchema`, bare or as `{schema: ModelSchema}`. Its
//! `source` says where the model runs: `{type: "local", path}` (a GGUF file or an embedding
//! model directory) or `{type: "remote_api", endpoint, api_key_env?, model?}` (an
//! OpenAI-compatible endpoint). The older flat shape (`path`, or `base_url` + `model` +
//! `api_key_env`, at top level) is accepted too.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
use super::member::{json, member, req_at, ArgKind::*};
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
        })
    }
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
    pub model: Json,
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
    NoParams => Json;
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
    IdParams => Json
);
crate::method!(
    /// `models.remove` (host) → like `models.unregister`.
    Remove = host("models.remove", "unregister a model (host session)");
    access: Access::owned(Resource::Models);
    IdParams => Json;
    member("remove_model", &[req_at("model_id", "model_id", Str)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<List>(),
    Declaration::of::<Register>(),
    Declaration::of::<Unregister>(),
    Declaration::of::<Remove>(),
];
