//! The model registry persisted at `<models_dir>/registry.json`.
//!
//! Owns: model ids, what each id points at (a GGUF file, an embedding model directory, or a
//! remote OpenAI-compatible endpoint), the identity computed at registration, and atomic
//! persistence. Must not touch: loaded models (the engines and their caches) or API keys
//! (only the *name* of the key is stored: an env var or a secret-store entry).
//!
//! Registration validates before it records: a GGUF file must pass the header validator, an
//! embedding directory must hold `model.safetensors`, `tokenizer.json` and `config.json`,
//! and the weights are hashed (streamed) so the identity is fixed from then on. A remote
//! endpoint names its key by at most one of `api_key_env` (which must match
//! `^[A-Z][A-Z0-9_]*_API_KEY$`) and `api_key_secret` (`service/key` or `key`); see `keys`
//! for the rules and why. Loading checks none of this: an entry written before these rules
//! still loads, and its endpoint refuses the key at request time instead. Writes go to a
//! temp file in the same directory, are synced, then renamed over `registry.json`
//! (`car_proto::safe_file::write_atomic`).
//!
//! Files are opened safely: the caller names the path, so the weights are opened through
//! `car_proto::safe_file` (after `canonicalize`, so a model's own symlinks, such as a
//! Hugging Face cache's, still resolve): a FIFO, a device or a link to one is refused at
//! once, never read and never left blocking a thread.
//!
//! Ownership: an entry registered by an agent records that agent as its `owner`. An agent
//! may replace (same-id register) or remove only entries it owns; an entry with no owner
//! (registered by the host or an operator, or before owners were recorded) is managed only
//! by them. Host and operator callers (owner `None`) manage every entry. The check runs
//! before any file is hashed and again under the lock that records the change.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{InferenceError, Result};
use crate::gguf;
use crate::identity::hash_file;
use crate::keys;

/// File name of the registry inside `models_dir`.
pub const REGISTRY_FILE: &str = "registry.json";
const MAX_ID_LEN: usize = 128;
/// Files an embedding model directory must contain.
pub const EMBEDDING_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

pub use car_proto::methods::models::{ModelEntry, ModelMeta, ModelSource};

/// What `models.register` asks for: a local `path`, or a remote `base_url` + `model`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// Caller-chosen id; derived from the file, directory or remote model name when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// A `.gguf` file, or a directory with `model.safetensors` + `tokenizer.json` +
    /// `config.json`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Remote endpoint base URL (`http://` or `https://`; a trailing `/v1` is dropped).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Remote model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Env var that holds the remote API key; must match `^[A-Z][A-Z0-9_]*_API_KEY$`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Secret-store entry (`service/key` or `key`) that holds the remote API key, instead
    /// of `api_key_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<String>,
    /// What the registration declares about the model (provider, family, capabilities,
    /// context length, prices), kept on the entry as given.
    #[serde(default)]
    pub meta: ModelMeta,
    /// Served by the inference runner (`source: {type: "delegated"}`): needs `id`, takes
    /// neither `path` nor `base_url`.
    #[serde(default)]
    pub delegated: bool,
}

#[derive(Serialize, Deserialize)]
struct RegistryFile {
    version: u32,
    models: Vec<ModelEntry>,
}

/// The persistent id → model table. `Send + Sync`; every method takes `&self`.
#[derive(Debug)]
pub struct ModelRegistry {
    models_dir: PathBuf,
    entries: Mutex<BTreeMap<String, ModelEntry>>,
}

impl ModelRegistry {
    /// Opens (creating the directory if needed) the registry under `models_dir`.
    pub fn open(models_dir: impl Into<PathBuf>) -> Result<Self> {
        let models_dir = models_dir.into();
        fs::create_dir_all(&models_dir).map_err(|e| InferenceError::io(&models_dir, e))?;
        let file = models_dir.join(REGISTRY_FILE);
        let mut entries = BTreeMap::new();
        match fs::read(&file) {
            Ok(bytes) => {
                let parsed: RegistryFile = serde_json::from_slice(&bytes).map_err(|e| {
                    InferenceError::CorruptRegistry {
                        path: file.clone(),
                        reason: e.to_string(),
                    }
                })?;
                for entry in parsed.models {
                    entries.insert(entry.id.clone(), entry);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(InferenceError::io(&file, e)),
        }
        Ok(Self {
            models_dir,
            entries: Mutex::new(entries),
        })
    }

    /// The directory holding `registry.json`.
    pub fn models_dir(&self) -> &Path {
        &self.models_dir
    }

    /// Validates, hashes and records a model for the host or an operator; returns the new
    /// entry.
    pub fn register(&self, request: &RegisterRequest) -> Result<ModelEntry> {
        self.register_replacing(request, None)
            .map(|(entry, _)| entry)
    }

    /// Registers a model for `owner` (an agent id, or `None` for the host and operators);
    /// an entry with the same id is replaced (CAR's rule) when `owner` may manage it, and
    /// returned as the second value.
    pub fn register_replacing(
        &self,
        request: &RegisterRequest,
        owner: Option<&str>,
    ) -> Result<(ModelEntry, Option<ModelEntry>)> {
        if let Some(id) = &request.id {
            // Refused before any file is opened or hashed.
            self.check_owner(self.lock().get(id), owner)?;
        }
        let mut entry = match (&request.path, &request.base_url) {
            (None, None) if request.delegated => ModelEntry {
                id: pick_id(request.id.as_deref(), "")?,
                source: ModelSource::Delegated {},
                owner: None,
                meta: request.meta.clone(),
            },
            (Some(_), Some(_)) => {
                return Err(InferenceError::invalid(
                    "path",
                    "give either path or base_url, not both",
                ))
            }
            (None, None) => {
                return Err(InferenceError::invalid(
                    "path",
                    "one of path or base_url is required",
                ))
            }
            (Some(path), None) => local_entry(request.id.as_deref(), path, &request.meta)?,
            (None, Some(base_url)) => remote_entry(request, base_url)?,
        };
        entry.owner = owner.map(str::to_owned);
        let mut entries = self.lock();
        self.check_owner(entries.get(&entry.id), owner)?;
        let previous = entries.insert(entry.id.clone(), entry.clone());
        if let Err(e) = self.persist(&entries) {
            match &previous {
                Some(p) => entries.insert(p.id.clone(), p.clone()),
                None => entries.remove(&entry.id),
            };
            return Err(e);
        }
        tracing::info!(id = %entry.id, kind = entry.kind_name(), replaced = previous.is_some(), owner = ?owner, "model registered");
        Ok((entry, previous))
    }

    /// Removes a model for `owner` (see [`Self::register_replacing`]); returns the removed
    /// entry. Files on disk are left alone.
    pub fn remove(&self, id: &str, owner: Option<&str>) -> Result<ModelEntry> {
        let mut entries = self.lock();
        let Some(existing) = entries.get(id) else {
            return Err(InferenceError::ModelNotFound { id: id.to_owned() });
        };
        self.check_owner(Some(existing), owner)?;
        let entry = entries
            .remove(id)
            .ok_or_else(|| InferenceError::ModelNotFound { id: id.to_owned() })?;
        if let Err(e) = self.persist(&entries) {
            entries.insert(entry.id.clone(), entry);
            return Err(e);
        }
        tracing::info!(id, owner = ?owner, "model removed");
        Ok(entry)
    }

    /// Whether `owner` may replace or remove `existing` (host and operators: always; an
    /// agent: only its own entries).
    fn check_owner(&self, existing: Option<&ModelEntry>, owner: Option<&str>) -> Result<()> {
        match (existing, owner) {
            (Some(entry), Some(agent)) if entry.owner.as_deref() != Some(agent) => {
                Err(InferenceError::NotOwner {
                    id: entry.id.clone(),
                    agent: agent.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The entry for `id`.
    pub fn get(&self, id: &str) -> Result<ModelEntry> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| InferenceError::ModelNotFound { id: id.to_owned() })
    }

    /// Every entry, sorted by id.
    pub fn list(&self) -> Vec<ModelEntry> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ModelEntry>> {
        // A panic while holding this lock cannot leave the map half-updated (every mutation
        // is a single insert/remove), so a poisoned lock is still safe to use.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, entries: &BTreeMap<String, ModelEntry>) -> Result<()> {
        let file = self.models_dir.join(REGISTRY_FILE);
        let body = RegistryFile {
            version: 1,
            models: entries.values().cloned().collect(),
        };
        let json = serde_json::to_vec_pretty(&body)
            .map_err(|e| InferenceError::Engine(format!("registry serialisation failed: {e}")))?;
        car_proto::safe_file::write_atomic(&file, &json, 0o600)
            .map_err(|e| InferenceError::io(&file, e))
    }
}

/// Checks an id: 1–128 chars of `A-Z a-z 0-9 . _ - : /`, not starting with `.` or `/`, no `..`.
pub fn validate_id(id: &str) -> Result<()> {
    let bad = |reason| {
        Err(InferenceError::InvalidModelId {
            id: id.to_owned(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("must not be empty");
    }
    if id.len() > MAX_ID_LEN {
        return bad("longer than 128 characters");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/'))
    {
        return bad("only letters, digits and . _ - : / are allowed");
    }
    if id.starts_with('.') || id.starts_with('/') || id.contains("..") {
        return bad("must not start with . or / or contain ..");
    }
    Ok(())
}

/// Turns a file or model name into a valid id by replacing disallowed characters.
fn derive_id(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    while id.contains("..") {
        id = id.replace("..", ".");
    }
    let id = id.trim_start_matches('.').to_owned();
    id.chars().take(MAX_ID_LEN).collect()
}

fn local_entry(id: Option<&str>, path: &Path, meta: &ModelMeta) -> Result<ModelEntry> {
    let path = fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => InferenceError::WeightsMissing {
            path: path.to_path_buf(),
        },
        _ => InferenceError::io(path, e),
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if path.is_dir() {
        check_embedding_dir(&path)?;
        let id = pick_id(id, &name)?;
        // The weights may be a link (a Hugging Face cache's blob): resolve it, then open
        // what it names safely.
        let weights = path.join("model.safetensors");
        let weights = fs::canonicalize(&weights).map_err(|e| InferenceError::io(&weights, e))?;
        let (sha256, size) = hash_file(&weights)?;
        Ok(ModelEntry {
            id,
            source: ModelSource::Embedding { path, sha256, size },
            owner: None,
            meta: meta.clone(),
        })
    } else {
        gguf::validate_file(&path).map_err(|source| InferenceError::InvalidGguf {
            path: path.clone(),
            source,
        })?;
        let stem = name.strip_suffix(".gguf").unwrap_or(&name);
        let id = pick_id(id, stem)?;
        let (sha256, size) = hash_file(&path)?;
        Ok(ModelEntry {
            id,
            source: ModelSource::Gguf { path, sha256, size },
            owner: None,
            meta: meta.clone(),
        })
    }
}

/// Fails unless `dir` holds the three files an embedding model needs.
pub fn check_embedding_dir(dir: &Path) -> Result<()> {
    for f in EMBEDDING_FILES {
        if !dir.join(f).is_file() {
            return Err(InferenceError::InvalidEmbeddingModel {
                path: dir.to_path_buf(),
                reason: format!("missing {f}"),
            });
        }
    }
    Ok(())
}

fn pick_id(id: Option<&str>, derived_from: &str) -> Result<String> {
    let id = match id {
        Some(id) => id.to_owned(),
        None => derive_id(derived_from),
    };
    validate_id(&id)?;
    Ok(id)
}

fn remote_entry(request: &RegisterRequest, base_url: &str) -> Result<ModelEntry> {
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(InferenceError::invalid(
            "base_url",
            format!("{base_url:?} must start with http:// or https://"),
        ));
    }
    let mut base = base_url.trim_end_matches('/').to_owned();
    if let Some(stripped) = base.strip_suffix("/v1") {
        base = stripped.to_owned();
    }
    let model = match request.model.as_deref() {
        Some(m) if !m.trim().is_empty() => m.to_owned(),
        _ => {
            return Err(InferenceError::invalid(
                "model",
                "a remote registration needs the provider's model name",
            ))
        }
    };
    match (&request.api_key_env, &request.api_key_secret) {
        (Some(_), Some(_)) => {
            return Err(InferenceError::invalid(
                "api_key_secret",
                "give either api_key_env or api_key_secret",
            ))
        }
        (Some(var), None) => keys::check_env_name(var)?,
        (None, Some(name)) => keys::check_secret_name(name)?,
        (None, None) => {}
    }
    let id = pick_id(request.id.as_deref(), &model)?;
    Ok(ModelEntry {
        id,
        source: ModelSource::Remote {
            base_url: base,
            model,
            api_key_env: request.api_key_env.clone(),
            api_key_secret: request.api_key_secret.clone(),
        },
        owner: None,
        meta: request.meta.clone(),
    })
}

#[cfg(test)]
mod tests;
