//! The facade the daemon calls: one `InferenceEngine` per process.
//!
//! Owns: routing a call to the right engine by the registry entry's kind, the shared
//! loaded-model cache, default-model selection, per-call timing and attaching the model
//! identity to every result. Must not touch: JSON-RPC, sockets, admission or progress
//! heartbeats (the daemon's), or how each engine works inside.
//!
//! Every method blocks (model loads, decoding, HTTP) and is meant to run on a blocking
//! thread; the engine is `Send + Sync` and shared behind an `Arc`.
//!
//! A remote endpoint's key is resolved at every request (so a rotated key applies at once):
//! `api_key_env` through `keys` (refused unless it matches the `_API_KEY` rule, which an
//! entry registered before the rule may not), `api_key_secret` through
//! [`EngineConfig::secret_lookup`]. A missing key is an error naming where it was looked
//! for, before any request is sent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use car_proto::redact::Redacted;
use serde::{Deserialize, Serialize};

use crate::cache::ModelCache;
use crate::classify::{classify, LabelScore};
use crate::embed::BertEmbedder;
use crate::error::{InferenceError, Result};
use crate::generate::{CancelToken, GenerateRequest, GenerateResult, StreamControl, StreamEvent};
use crate::identity::ModelIdentity;
use crate::keys::{self, resolve_api_key, KeySource};
use crate::llama::{LlamaConfig, LlamaEngineModel};
use crate::registry::{ModelEntry, ModelRegistry, ModelSource, RegisterRequest};
use crate::remote::{RemoteClient, RemoteConfig, RemoteEndpoint};

/// Default `max_tokens` when a request gives none.
pub const DEFAULT_MAX_TOKENS: u32 = 256;
/// Default loaded-model budget: 4 GiB of estimated weights.
pub const DEFAULT_MEMORY_BUDGET: u64 = 4 * 1024 * 1024 * 1024;

/// Resolves an `api_key_secret` name (`service/key` or `key`) to its value; `None` when
/// there is no such secret. The daemon installs one backed by its secret store.
pub type SecretLookup = Arc<dyn Fn(&str) -> Option<Redacted<String>> + Send + Sync>;

/// How the engine is set up.
#[derive(Clone)]
pub struct EngineConfig {
    /// Where `registry.json` lives (`CAR_HOME/models`).
    pub models_dir: PathBuf,
    /// `CAR_HOME/env`, consulted for API keys after the process environment.
    pub env_file: Option<PathBuf>,
    /// Estimated bytes of loaded models kept before least-recently-used ones are dropped.
    pub memory_budget: u64,
    /// llama.cpp threads and context cap.
    pub llama: LlamaConfig,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: u32,
    /// Remote retry and timeout policy.
    pub remote: RemoteConfig,
    /// Reads the secrets named by remote endpoints' `api_key_secret`; without it such an
    /// endpoint fails with `ApiSecretMissing`.
    pub secret_lookup: Option<SecretLookup>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("models_dir", &self.models_dir)
            .field("env_file", &self.env_file)
            .field("memory_budget", &self.memory_budget)
            .field("llama", &self.llama)
            .field("default_max_tokens", &self.default_max_tokens)
            .field("remote", &self.remote)
            .field(
                "secret_lookup",
                &self.secret_lookup.as_ref().map(|_| "installed"),
            )
            .finish()
    }
}

impl EngineConfig {
    /// Defaults rooted at `car_home`: `models/` and `env` inside it.
    pub fn new(car_home: &Path) -> Self {
        Self {
            models_dir: car_home.join("models"),
            env_file: Some(car_home.join("env")),
            memory_budget: DEFAULT_MEMORY_BUDGET,
            llama: LlamaConfig::default(),
            default_max_tokens: DEFAULT_MAX_TOKENS,
            remote: RemoteConfig::default(),
            secret_lookup: None,
        }
    }
}

/// `embed` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbedResult {
    /// One vector per input text, in order (L2-normalised for local models).
    pub embeddings: Vec<Vec<f32>>,
    /// The model used.
    pub model_identity: ModelIdentity,
}

/// `classify` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifyResult {
    /// Scores summing to 1, best first.
    pub scores: Vec<LabelScore>,
    /// The embedding model used.
    pub model_identity: ModelIdentity,
}

/// What the engine can be asked to do, for default-model selection and kind checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Generate,
    Embed,
    Tokenize,
}

impl Use {
    fn verb(self) -> &'static str {
        match self {
            Use::Generate => "generate text",
            Use::Embed => "embed",
            Use::Tokenize => "tokenize",
        }
    }
}

/// Boxed because the two engines differ a lot in size and the enum lives in the cache.
enum Loaded {
    Llama(Box<LlamaEngineModel>),
    Bert(Box<BertEmbedder>),
}

/// The inference engines plus the registry, behind one thread-safe handle.
pub struct InferenceEngine {
    registry: ModelRegistry,
    cache: ModelCache<Loaded>,
    remote: RemoteClient,
    config: EngineConfig,
}

impl std::fmt::Debug for InferenceEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceEngine")
            .field("models_dir", &self.config.models_dir)
            .field("loaded", &self.cache.loaded())
            .finish()
    }
}

impl InferenceEngine {
    /// Opens the registry and prepares the engines; no model is loaded yet.
    pub fn open(config: EngineConfig) -> Result<Self> {
        Ok(Self {
            registry: ModelRegistry::open(&config.models_dir)?,
            cache: ModelCache::new(config.memory_budget),
            remote: RemoteClient::new(config.remote.clone()),
            config,
        })
    }

    /// The registry (for `models.list` / `models.register` / `models.remove`).
    pub fn registry(&self) -> &ModelRegistry {
        &self.registry
    }

    /// Registers a model for the host or an operator (validating and hashing local
    /// weights); see [`Self::register_as`].
    pub fn register(&self, request: &RegisterRequest) -> Result<ModelEntry> {
        self.register_as(request, None)
    }

    /// Registers a model for `owner` (an agent id; `None` for host and operators); an entry
    /// with the same id is replaced when `owner` may manage it, and weights no other id
    /// uses any more leave the cache.
    pub fn register_as(
        &self,
        request: &RegisterRequest,
        owner: Option<&str>,
    ) -> Result<ModelEntry> {
        let (entry, previous) = self.registry.register_replacing(request, owner)?;
        if let Some(previous) = &previous {
            self.evict_unshared(previous);
        }
        Ok(entry)
    }

    /// Drops `entry`'s weights from the cache unless a registered id still uses them.
    fn evict_unshared(&self, entry: &ModelEntry) {
        if let Some(key) = cache_key(entry) {
            let shared = self
                .registry
                .list()
                .iter()
                .any(|e| cache_key(e).as_deref() == Some(key.as_str()));
            if !shared {
                self.cache.evict(&key);
            }
        }
    }

    /// The registry file (`<models_dir>/registry.json`).
    pub fn registry_path(&self) -> std::path::PathBuf {
        self.config.models_dir.join(crate::registry::REGISTRY_FILE)
    }

    /// Every registered model with its identity fields.
    pub fn list(&self) -> Vec<ModelEntry> {
        self.registry.list()
    }

    /// Unregisters a model for the host or an operator; see [`Self::remove_as`].
    pub fn remove(&self, id: &str) -> Result<ModelEntry> {
        self.remove_as(id, None)
    }

    /// Unregisters a model for `owner` (an agent removes only its own) and drops it from
    /// the cache unless another id shares its weights.
    pub fn remove_as(&self, id: &str, owner: Option<&str>) -> Result<ModelEntry> {
        let entry = self.registry.remove(id, owner)?;
        self.evict_unshared(&entry);
        Ok(entry)
    }

    /// Ids of models currently loaded, most recently used first.
    pub fn loaded_models(&self) -> Vec<String> {
        let entries = self.registry.list();
        let mut ids = Vec::new();
        for key in self.cache.loaded() {
            for e in &entries {
                if cache_key(e).as_deref() == Some(key.as_str()) {
                    ids.push(e.id.clone());
                }
            }
        }
        ids
    }

    /// Generates text. `model` `None` picks the first registered GGUF model (by id), else
    /// the first remote one. `on_piece` streams text pieces (and makes remote calls use
    /// SSE); returning `StreamControl::Stop` from it ends generation like `cancel` does.
    /// Tool calls are in the result only; use [`Self::generate_with_events`] to have them
    /// streamed too.
    pub fn generate(
        &self,
        model: Option<&str>,
        request: &GenerateRequest,
        cancel: &CancelToken,
        on_piece: Option<&mut dyn FnMut(&str) -> StreamControl>,
    ) -> Result<GenerateResult> {
        match on_piece {
            None => self.generate_with_events(model, request, cancel, None),
            Some(cb) => {
                let mut on_event = |event: StreamEvent<'_>| match event {
                    StreamEvent::Text(piece) => cb(piece),
                    _ => StreamControl::Continue,
                };
                self.generate_with_events(model, request, cancel, Some(&mut on_event))
            }
        }
    }

    /// [`Self::generate`] with one callback for every stream event: text pieces and each
    /// completed tool call ([`StreamEvent::ToolCall`], after the last text piece). Returning
    /// `StreamControl::Stop` from any event ends generation like `cancel` does. A GGUF model
    /// calls tools through a generic tool prompt and grammar-constrained decoding (see
    /// `llama::tools`).
    pub fn generate_with_events(
        &self,
        model: Option<&str>,
        request: &GenerateRequest,
        cancel: &CancelToken,
        mut on_event: Option<&mut dyn FnMut(StreamEvent<'_>) -> StreamControl>,
    ) -> Result<GenerateResult> {
        let started = Instant::now();
        let entry = self.resolve(model, Use::Generate)?;
        let max_tokens = request.validate(self.config.default_max_tokens)?;
        request.conversation()?;
        let generated = match &entry.source {
            ModelSource::Gguf { .. } => {
                let loaded = self.load(&entry)?;
                let Loaded::Llama(m) = loaded.as_ref() else {
                    return Err(wrong_kind(&entry, Use::Generate));
                };
                let mut events = |event: StreamEvent<'_>| match on_event.as_mut() {
                    Some(cb) => cb(event),
                    None => StreamControl::Continue,
                };
                m.generate(
                    request,
                    max_tokens,
                    &self.config.llama,
                    cancel,
                    started,
                    &mut events,
                )?
            }
            ModelSource::Remote { .. } => {
                let endpoint = self.endpoint(&entry)?;
                self.remote
                    .chat(&endpoint, request, max_tokens, cancel, started, on_event)?
            }
            ModelSource::Embedding { .. } => return Err(wrong_kind(&entry, Use::Generate)),
            ModelSource::Delegated {} => {
                return Err(InferenceError::Engine(format!(
                    "{} is a delegated model: its runner serves it, not this engine",
                    entry.id
                )))
            }
        };
        Ok(GenerateResult {
            text: generated.text,
            tool_calls: generated.tool_calls,
            usage: generated.usage,
            stop_reason: generated.stop_reason,
            time_to_first_token_ms: generated.time_to_first_token_ms,
            latency_ms: started.elapsed().as_millis() as u64,
            model_identity: entry.identity(),
        })
    }

    /// The text a GGUF model is prompted with for `request`: its chat template applied to
    /// the conversation, the tool prompt included (what a benchmark feeds another engine
    /// to give it the same prompt).
    pub fn rendered_prompt(
        &self,
        model: Option<&str>,
        request: &GenerateRequest,
    ) -> Result<String> {
        let entry = self.resolve(model, Use::Generate)?;
        request.validate(self.config.default_max_tokens)?;
        let loaded = self.load(&entry)?;
        match loaded.as_ref() {
            Loaded::Llama(m) => Ok(m.prompt_for(request)?.1),
            _ => Err(wrong_kind(&entry, Use::Generate)),
        }
    }

    /// Embeds `texts`. `model` `None` picks the first registered embedding model.
    pub fn embed(&self, model: Option<&str>, texts: &[String]) -> Result<EmbedResult> {
        let entry = self.resolve(model, Use::Embed)?;
        let embeddings = self.embed_with(&entry, texts)?;
        Ok(EmbedResult {
            embeddings,
            model_identity: entry.identity(),
        })
    }

    /// Zero-shot classification of `text` against `labels` by embedding similarity.
    pub fn classify(
        &self,
        model: Option<&str>,
        text: &str,
        labels: &[String],
    ) -> Result<ClassifyResult> {
        let entry = self.resolve(model, Use::Embed)?;
        let scores = match entry.source {
            // A generative model scores each label as an answer (CAR classifies with
            // generative models too); the input checks are the embedding path's.
            ModelSource::Gguf { .. } => {
                crate::classify::validate(text, labels)?;
                let loaded = self.load(&entry)?;
                let Loaded::Llama(m) = loaded.as_ref() else {
                    return Err(InferenceError::Engine("cache kind mismatch".into()));
                };
                m.classify(text, labels, &self.config.llama)?
            }
            _ => classify(text, labels, |inputs| self.embed_with(&entry, inputs))?,
        };
        Ok(ClassifyResult {
            scores,
            model_identity: entry.identity(),
        })
    }

    /// Token ids of `text` under a GGUF model's vocabulary (no BOS, special text literal).
    pub fn tokenize(&self, model: Option<&str>, text: &str) -> Result<Vec<i32>> {
        let m = self.llama_for(model)?;
        let Loaded::Llama(m) = m.as_ref() else {
            return Err(InferenceError::Engine("cache kind mismatch".into()));
        };
        Ok(m.tokenize(text))
    }

    /// Text of `tokens` under a GGUF model's vocabulary.
    pub fn detokenize(&self, model: Option<&str>, tokens: &[i32]) -> Result<String> {
        let m = self.llama_for(model)?;
        let Loaded::Llama(m) = m.as_ref() else {
            return Err(InferenceError::Engine("cache kind mismatch".into()));
        };
        m.detokenize(tokens)
    }

    fn llama_for(&self, model: Option<&str>) -> Result<Arc<Loaded>> {
        let entry = self.resolve(model, Use::Tokenize)?;
        match entry.source {
            ModelSource::Gguf { .. } => self.load(&entry),
            _ => Err(wrong_kind(&entry, Use::Tokenize)),
        }
    }

    fn embed_with(&self, entry: &ModelEntry, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        match &entry.source {
            ModelSource::Embedding { .. } => {
                let loaded = self.load(entry)?;
                let Loaded::Bert(m) = loaded.as_ref() else {
                    return Err(wrong_kind(entry, Use::Embed));
                };
                m.embed(texts)
            }
            ModelSource::Remote { .. } => self.remote.embed(&self.endpoint(entry)?, texts),
            ModelSource::Gguf { .. } | ModelSource::Delegated {} => {
                Err(wrong_kind(entry, Use::Embed))
            }
        }
    }

    /// The named entry, or the default for `purpose`.
    fn resolve(&self, model: Option<&str>, purpose: Use) -> Result<ModelEntry> {
        if let Some(id) = model {
            return self.registry.get(id);
        }
        let all = self.registry.list();
        let pick = |kind: &str| all.iter().find(|e| e.kind_name() == kind).cloned();
        let found = match purpose {
            Use::Generate => pick("gguf").or_else(|| pick("remote")),
            Use::Embed => pick("embedding"),
            Use::Tokenize => pick("gguf"),
        };
        found.ok_or_else(|| InferenceError::ModelNotFound {
            id: format!("(no registered model can {})", purpose.verb()),
        })
    }

    /// Loads (or fetches from the cache) a local model after checking its weights are
    /// still the registered ones (by size; the hash is only computed at registration).
    fn load(&self, entry: &ModelEntry) -> Result<Arc<Loaded>> {
        let (Some(key), Some(weights)) = (cache_key(entry), entry.weights_path()) else {
            return Err(InferenceError::Engine(format!(
                "model {} has no local weights",
                entry.id
            )));
        };
        let meta = std::fs::metadata(&weights).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => InferenceError::WeightsMissing {
                path: weights.clone(),
            },
            _ => InferenceError::io(&weights, e),
        })?;
        let expected = entry.identity().size.unwrap_or(0);
        if meta.len() != expected {
            return Err(InferenceError::WeightsChanged {
                id: entry.id.clone(),
                path: weights,
                expected,
                actual: meta.len(),
            });
        }
        self.cache
            .get_or_load(&key, expected, || match &entry.source {
                ModelSource::Gguf { path, .. } => LlamaEngineModel::load(path, &self.config.llama)
                    .map(|m| Loaded::Llama(Box::new(m))),
                ModelSource::Embedding { path, .. } => {
                    BertEmbedder::load(path).map(|m| Loaded::Bert(Box::new(m)))
                }
                ModelSource::Remote { .. } | ModelSource::Delegated {} => Err(
                    InferenceError::Engine("remote and delegated models are not loaded".into()),
                ),
            })
    }

    fn endpoint(&self, entry: &ModelEntry) -> Result<RemoteEndpoint> {
        let ModelSource::Remote {
            base_url,
            model,
            api_key_env,
            api_key_secret,
        } = &entry.source
        else {
            return Err(InferenceError::Engine(format!(
                "model {} is not remote",
                entry.id
            )));
        };
        let (api_key, key_source) = match (api_key_env, api_key_secret) {
            (Some(_), Some(_)) => {
                return Err(InferenceError::invalid(
                    "api_key_secret",
                    "give either api_key_env or api_key_secret",
                ))
            }
            (Some(var), None) => (Some(self.env_key(var)?), KeySource::Env(var.clone())),
            (None, Some(name)) => (
                Some(self.secret_key(name)?),
                KeySource::Secret(name.clone()),
            ),
            (None, None) => (None, KeySource::None),
        };
        Ok(RemoteEndpoint {
            base_url: base_url.clone(),
            model: model.clone(),
            api_key,
            key_source,
        })
    }

    /// The key in env var `var`, if the `_API_KEY` rule allows it (an entry registered
    /// before the rule may name any variable: it still loads, but is refused here).
    fn env_key(&self, var: &str) -> Result<Redacted<String>> {
        if !keys::env_name_allowed(var) {
            return Err(InferenceError::ApiKeyEnvRefused {
                env_var: var.to_owned(),
            });
        }
        resolve_api_key(var, self.config.env_file.as_deref()).ok_or_else(|| {
            InferenceError::ApiKeyMissing {
                env_var: var.to_owned(),
            }
        })
    }

    /// The key in secret `name`, through [`EngineConfig::secret_lookup`].
    fn secret_key(&self, name: &str) -> Result<Redacted<String>> {
        keys::check_secret_name(name)?;
        let missing = |reason| InferenceError::ApiSecretMissing {
            secret: name.to_owned(),
            reason,
        };
        let lookup = self
            .config
            .secret_lookup
            .as_ref()
            .ok_or_else(|| missing("cannot be read: no secret store is configured"))?;
        lookup(name)
            .filter(|key| !key.expose().is_empty())
            .ok_or_else(|| {
                missing("is not in the secret store or may not be read (store it with secret.put)")
            })
    }
}

/// Cache key: kind plus weights hash, so two ids for one file share a load.
fn cache_key(entry: &ModelEntry) -> Option<String> {
    let sha = entry.identity().sha256?;
    Some(format!("{}:{sha}", entry.kind_name()))
}

fn wrong_kind(entry: &ModelEntry, purpose: Use) -> InferenceError {
    InferenceError::WrongModelKind {
        id: entry.id.clone(),
        kind: entry.kind_name(),
        operation: purpose.verb(),
    }
}

#[cfg(test)]
mod tests;
