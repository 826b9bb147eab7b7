//! The durable store: one lazily loaded graph per scope, persisted with group commit.
//!
//! Owns where each scope's snapshot and journal live, lazy loading (with corrupt files
//! moved aside), the locking discipline, the durability guarantee and when to compact. It
//! must not know about JSON-RPC or sessions: the daemon maps a connection to a [`Scope`] and
//! calls these methods.
//!
//! # Durability and group commit
//! A mutation runs under the scope's short `std::sync::Mutex` (never held across an
//! `.await`), records what it touched in the graph ([`crate::changes`]) and bumps the
//! scope's version. The caller then awaits a flush covering that version: flushes are
//! serialised by a per-scope async mutex, and each one takes (under the graph lock) every
//! change made so far, so it covers every mutation applied up to then. A caller that
//! acquires the flush lock and finds its version already written returns at once; so N
//! concurrent writers share a handful of writes instead of N. Every mutating method returns
//! only after its change is on disk. File I/O runs in `spawn_blocking`.
//!
//! A flush normally **appends** the touched records to the scope's journal and
//! `fdatasync`s it ([`crate::journal`]): O(change), independent of the graph's size. It
//! **compacts** instead (writes the whole snapshot atomically: temp file, fsync, rename,
//! directory fsync; then removes the journal) when the graph was replaced
//! (`memory.load`), when the scope has no snapshot file yet (its first write), when a
//! previous write failed, or when the journal would outgrow
//! [`crate::journal::Journal::wants_compaction`]'s limit (about the snapshot's size), so a
//! compaction's O(graph) cost is amortised over at least as many bytes of appends. The
//! compaction's encoding runs under the graph lock (readers and writers of that scope wait
//! for it, a few tens of milliseconds at 100k facts, once per ~snapshot-size of appends).
//! [`MemoryStore::flush_all`] (shutdown) compacts every scope with a journal, so a clean
//! shutdown leaves only snapshots. Loading replays the journal on top of the snapshot.
//!
//! The flush lock guard moves into the blocking task, so a caller that is cancelled mid-flush
//! cannot let a second, newer write race an older one.
//!
//! A failed write is reported to its caller; the change stays in memory and the next flush
//! compacts, so it is written by the next successful flush (including
//! [`MemoryStore::flush_all`] at shutdown).
//!
//! # Size cap
//! Every snapshot the store reads or writes, its own or a caller's, is bounded by one cap
//! ([`snapshot::MAX_SNAPSHOT_BYTES`] unless [`MemoryStore::set_max_file_bytes`] says
//! otherwise): `memory.load` refuses a larger file, a scope's own oversize snapshot (or
//! journal) is moved aside with a warning, and a write after which the graph's snapshot
//! would exceed the cap fails (so the store never writes what it would refuse to read
//! back): appends check the exact snapshot length the graph keeps
//! ([`Graph::encoded_len`]), and a journal never grows past half the cap.
//!
//! Closures given to [`MemoryStore::mutate`] must leave the graph unchanged when they
//! return `Err` (every `Graph` method does): an error skips the flush.

use crate::confine;
use crate::context::ContextBlock;
use crate::embed::{Embedder, Embeddings, SemanticQuery};
use crate::error::{MemoryError, ValidationError};
use crate::fact::{validate_query, FactHit, NewFact};
use crate::flush::Durable;
pub use crate::flush::FlushStats;
use crate::graph::Graph;
use crate::journal;
use crate::proactive::{DeletedKind, StatusSlots};
use crate::snapshot;
use car_proto::safe_file::{self, ReadLimits};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

/// Longest snapshot file name most file systems accept, in bytes.
const MAX_FILE_NAME_BYTES: usize = 255;

/// Which graph a connection uses (docs/protocol-choices.md, "Memory scope").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The daemon-wide graph: `memory_dir/shared.json`.
    Shared,
    /// A `memory_namespace`'s graph: `memory_dir/memory-namespaces/<encode(ns)>.json`.
    Namespace(String),
    /// An agent's graph: `memory_dir/agents/<encode(id)>.json`.
    Agent(String),
}

impl Scope {
    /// Where this scope's snapshot lives under `memory_dir`. An empty name, or one whose
    /// encoded file name exceeds 255 bytes, is refused naming the field.
    pub fn snapshot_path(&self, memory_dir: &Path) -> Result<PathBuf, ValidationError> {
        let (field, dir, name) = match self {
            Scope::Shared => return Ok(memory_dir.join(confine::SHARED_FILE)),
            Scope::Namespace(ns) => ("memory_namespace", confine::NAMESPACES_DIR, ns),
            Scope::Agent(id) => ("agent_id", confine::AGENTS_DIR, id),
        };
        if name.is_empty() {
            return Err(ValidationError::new(field, "must not be empty"));
        }
        let file = format!("{}.json", car_proto::namespace::encode(name));
        if file.len() > MAX_FILE_NAME_BYTES {
            return Err(ValidationError::new(
                field,
                format!("is too long: its encoded file name would be {} bytes (at most {MAX_FILE_NAME_BYTES})", file.len()),
            ));
        }
        Ok(memory_dir.join(dir).join(file))
    }
}

/// A scope's graph and how many mutations it has seen.
#[derive(Debug)]
pub(crate) struct Versioned {
    pub(crate) graph: Graph,
    pub(crate) version: u64,
}

#[derive(Debug)]
struct ScopeState {
    path: PathBuf,
    graph: Mutex<Versioned>,
    durable: Arc<tokio::sync::Mutex<Durable>>,
}

impl ScopeState {
    fn lock(&self) -> MutexGuard<'_, Versioned> {
        // Graph methods leave the graph consistent at every step they can panic in (they
        // validate first, then mutate), so a poisoned lock still guards a usable graph.
        self.graph.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct ScopeSlot {
    path: PathBuf,
    state: tokio::sync::OnceCell<Arc<ScopeState>>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    scopes: Mutex<HashMap<Scope, Arc<ScopeSlot>>>,
    embeddings: RwLock<Option<Arc<Embeddings>>>,
    /// The cap on any snapshot file read or written, in bytes.
    max_file_bytes: AtomicU64,
    /// Proactive status slots: in memory only, never written (see [`crate::proactive`]).
    statuses: StatusSlots,
}

/// The memory store of one daemon. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

fn task_error(e: tokio::task::JoinError) -> MemoryError {
    MemoryError::Task(e.to_string())
}

impl MemoryStore {
    /// Opens (creating if needed) the memory directory, `CAR_HOME/memory`. Graphs are loaded
    /// lazily on first use of their scope.
    pub async fn open(memory_dir: impl Into<PathBuf>) -> Result<Self, MemoryError> {
        let dir: PathBuf = memory_dir.into();
        let create = dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&create)
                .map_err(|e| MemoryError::io("create directory", &create, e))
        })
        .await
        .map_err(task_error)??;
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                scopes: Mutex::new(HashMap::new()),
                embeddings: RwLock::new(None),
                max_file_bytes: AtomicU64::new(snapshot::MAX_SNAPSHOT_BYTES),
                statuses: StatusSlots::default(),
            }),
        })
    }

    /// The memory directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Installs (or with `None` removes) the embedder used to blend embedding similarity into
    /// ranking. Installing a different embedder starts a fresh vector cache.
    pub fn set_embedder(&self, embedder: Option<Arc<dyn Embedder>>) {
        let mut slot = self
            .inner
            .embeddings
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *slot = embedder.map(|e| Arc::new(Embeddings::new(e)));
    }

    /// Sets the cap, in bytes, on every snapshot file this store reads or writes (its own
    /// scopes' and `memory.persist` / `memory.load` files). The default is
    /// [`snapshot::MAX_SNAPSHOT_BYTES`]. Scopes already loaded are not re-read.
    pub fn set_max_file_bytes(&self, cap: u64) {
        self.inner.max_file_bytes.store(cap, Ordering::Relaxed);
    }

    /// The cap, in bytes, on every snapshot file this store reads or writes.
    pub fn max_file_bytes(&self) -> u64 {
        self.inner.max_file_bytes.load(Ordering::Relaxed)
    }

    fn embeddings(&self) -> Option<Arc<Embeddings>> {
        self.inner
            .embeddings
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn state(&self, scope: &Scope) -> Result<Arc<ScopeState>, MemoryError> {
        let slot = {
            let path = scope.snapshot_path(&self.inner.dir)?;
            let mut scopes = self
                .inner
                .scopes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            scopes
                .entry(scope.clone())
                .or_insert_with(|| {
                    Arc::new(ScopeSlot {
                        path,
                        state: tokio::sync::OnceCell::new(),
                    })
                })
                .clone()
        };
        let cap = self.max_file_bytes();
        slot.state
            .get_or_try_init(|| async {
                let path = slot.path.clone();
                let (graph, journal) =
                    tokio::task::spawn_blocking(move || journal::load(&path, cap))
                        .await
                        .map_err(task_error)??;
                Ok::<_, MemoryError>(Arc::new(ScopeState {
                    path: slot.path.clone(),
                    graph: Mutex::new(Versioned { graph, version: 0 }),
                    durable: Arc::new(tokio::sync::Mutex::new(Durable::new(journal))),
                }))
            })
            .await
            .cloned()
    }

    /// Runs `f` on the scope's graph under its lock; when it returns `Ok`, waits until a
    /// snapshot containing the change is on disk. `f` runs on the calling task, so it must
    /// be quick (every `Graph` mutation is) and must not block.
    pub async fn mutate<T>(
        &self,
        scope: &Scope,
        f: impl FnOnce(&mut Graph) -> Result<T, MemoryError>,
    ) -> Result<T, MemoryError> {
        let state = self.state(scope).await?;
        let (value, version) = {
            let mut cell = state.lock();
            let value = f(&mut cell.graph)?;
            cell.version += 1;
            (value, cell.version)
        };
        self.flush_to(&state, version).await?;
        Ok(value)
    }

    /// Like [`MemoryStore::mutate`], but `f` also says whether it changed the graph; only a
    /// change is written (and waited for).
    pub(crate) async fn mutate_if_changed<T>(
        &self,
        scope: &Scope,
        f: impl FnOnce(&mut Graph) -> Result<(T, bool), MemoryError>,
    ) -> Result<T, MemoryError> {
        let state = self.state(scope).await?;
        let (value, version) = {
            let mut cell = state.lock();
            let (value, changed) = f(&mut cell.graph)?;
            if !changed {
                return Ok(value);
            }
            cell.version += 1;
            (value, cell.version)
        };
        self.flush_to(&state, version).await?;
        Ok(value)
    }

    /// The proactive status slots of every scope.
    pub(crate) fn status_slots(&self) -> &StatusSlots {
        &self.inner.statuses
    }

    /// Runs `f` on the scope's graph under its lock, without writing anything.
    pub async fn read<T>(
        &self,
        scope: &Scope,
        f: impl FnOnce(&Graph) -> T,
    ) -> Result<T, MemoryError> {
        let state = self.state(scope).await?;
        let cell = state.lock();
        Ok(f(&cell.graph))
    }

    async fn flush_to(&self, state: &Arc<ScopeState>, version: u64) -> Result<(), MemoryError> {
        self.flush(state, version, false).await
    }

    /// Writes what changed up to (at least) `version`; with `compact`, writes a full
    /// snapshot if there is a journal or anything unwritten.
    async fn flush(
        &self,
        state: &Arc<ScopeState>,
        version: u64,
        compact: bool,
    ) -> Result<(), MemoryError> {
        let cap = self.max_file_bytes();
        let mut durable = state.durable.clone().lock_owned().await;
        if durable.is_settled(version, compact) {
            return Ok(());
        }
        let state = state.clone();
        tokio::task::spawn_blocking(move || durable.write(&state.path, &state.graph, cap, compact))
            .await
            .map_err(task_error)?
    }

    /// Compacts every loaded scope that has a journal or unwritten changes into its
    /// snapshot (for shutdown). Returns the first error after trying every scope.
    pub async fn flush_all(&self) -> Result<(), MemoryError> {
        let slots: Vec<Arc<ScopeSlot>> = self
            .inner
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut first_error = None;
        for slot in slots {
            if let Some(state) = slot.state.get() {
                let version = state.lock().version;
                if let Err(e) = self.flush(state, version, true).await {
                    tracing::warn!(path = %state.path.display(), error = %e, "memory flush failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The scope's write counters since it was loaded (loading it if needed).
    pub async fn flush_stats(&self, scope: &Scope) -> Result<FlushStats, MemoryError> {
        let state = self.state(scope).await?;
        let stats = state.durable.lock().await.stats();
        Ok(stats)
    }

    /// `memory.add_fact`: adds (or replaces by id) and returns the new fact count.
    pub async fn add_fact(&self, scope: &Scope, fact: NewFact) -> Result<usize, MemoryError> {
        self.mutate(scope, |g| Ok(g.add_fact(fact))).await
    }

    /// `memory.fact_count`.
    pub async fn fact_count(&self, scope: &Scope) -> Result<usize, MemoryError> {
        self.read(scope, Graph::fact_count).await
    }

    /// `memory.delete`: what was removed and how many facts remain. An unknown id is not an
    /// error (`deleted: false`) and writes nothing, but still waits until the state it
    /// observed is on disk, so a "not there" answer never precedes a concurrent delete's
    /// durability. A `proactive-status:<tenant or global>` id naming a set status slot
    /// clears that slot (kind `status`); one naming no slot falls through to the facts.
    pub async fn delete(
        &self,
        scope: &Scope,
        fact_id: &str,
    ) -> Result<crate::DeleteReport, MemoryError> {
        let state = self.state(scope).await?;
        if self.inner.statuses.clear(scope, fact_id) {
            return Ok(crate::DeleteReport {
                id: fact_id.to_owned(),
                deleted: true,
                kind: Some(DeletedKind::Status),
                fact_count: state.lock().graph.fact_count(),
            });
        }
        let (report, version) = {
            let mut cell = state.lock();
            let report = cell.graph.delete(fact_id);
            if report.deleted {
                cell.version += 1;
            }
            (report, cell.version)
        };
        self.flush_to(&state, version).await?;
        Ok(report)
    }

    /// `memory.consolidate`.
    pub async fn consolidate(
        &self,
        scope: &Scope,
    ) -> Result<crate::ConsolidationReport, MemoryError> {
        self.mutate(scope, |g| Ok(g.consolidate())).await
    }

    /// `memory.query`: `k` already validated by [`crate::validate_k`]. With an embedder
    /// installed, missing fact vectors and the query vector are computed in one batch in
    /// `spawn_blocking`, outside every lock; an embedder failure falls back to lexical
    /// ranking with a warning.
    pub async fn query(
        &self,
        scope: &Scope,
        query: &str,
        k: usize,
    ) -> Result<Vec<FactHit>, MemoryError> {
        validate_query(query)?;
        let state = self.state(scope).await?;
        let semantic = self.prepare_semantic(&state, query).await;
        let cell = state.lock();
        let semantic_query = semantic.as_ref().map(|(e, v)| SemanticQuery {
            vector: v,
            embeddings: e,
        });
        Ok(cell.graph.query(query, k, semantic_query)?)
    }

    /// `memory.build_context`: `window` already validated by [`crate::validate_window`].
    pub async fn build_context(
        &self,
        scope: &Scope,
        query: &str,
        window: usize,
    ) -> Result<ContextBlock, MemoryError> {
        let state = self.state(scope).await?;
        let semantic = if query.trim().is_empty() {
            None
        } else {
            self.prepare_semantic(&state, query).await
        };
        let cell = state.lock();
        let semantic_query = semantic.as_ref().map(|(e, v)| SemanticQuery {
            vector: v,
            embeddings: e,
        });
        cell.graph.build_context(query, window, semantic_query)
    }

    async fn prepare_semantic(
        &self,
        state: &Arc<ScopeState>,
        query: &str,
    ) -> Option<(Arc<Embeddings>, Vec<f32>)> {
        let embeddings = self.embeddings()?;
        let missing = state.lock().graph.missing_embeddings(&embeddings);
        let worker = embeddings.clone();
        let text = query.to_owned();
        match tokio::task::spawn_blocking(move || worker.prepare(&text, &missing)).await {
            Ok(Ok(vector)) => Some((embeddings, vector)),
            Ok(Err(error)) => {
                tracing::warn!(model = embeddings.model_id(), %error, "embedding failed; ranking lexically");
                None
            }
            Err(error) => {
                tracing::warn!(model = embeddings.model_id(), %error, "embedding task failed; ranking lexically");
                None
            }
        }
    }

    /// `skill.ingest`: the input already validated by [`crate::SkillInput::validate`].
    pub async fn ingest_skill(
        &self,
        scope: &Scope,
        skill: crate::SkillInput,
    ) -> Result<usize, MemoryError> {
        self.mutate(scope, |g| g.ingest_skill(skill)).await
    }

    /// `skill.find`.
    pub async fn find_skills(
        &self,
        scope: &Scope,
        query: &crate::SkillQuery,
    ) -> Result<Vec<crate::SkillMatch>, MemoryError> {
        self.read(scope, |g| g.find_skills(query))
            .await?
            .map_err(Into::into)
    }

    /// `skill.report`.
    pub async fn report_outcome(
        &self,
        scope: &Scope,
        name: &str,
        outcome: crate::Outcome,
    ) -> Result<crate::OutcomeReport, MemoryError> {
        self.mutate(scope, |g| g.report_outcome(name, outcome))
            .await
    }

    /// `skills.list`.
    pub async fn list_skills(
        &self,
        scope: &Scope,
        domain: Option<&str>,
    ) -> Result<Vec<crate::Skill>, MemoryError> {
        self.read(scope, |g| g.list_skills(domain)).await
    }

    /// `memory.persist`: writes the scope's graph to a caller path confined by
    /// [`confine::resolve`] (atomically) and returns the number of facts written. Missing
    /// directories are created and the path is resolved again before the write; if the
    /// answer changed (a symlink appeared), nothing is written.
    pub async fn persist(&self, scope: &Scope, path: &str) -> Result<usize, MemoryError> {
        let state = self.state(scope).await?;
        let dir = self.inner.dir.clone();
        let cap = self.max_file_bytes();
        let requested = path.to_owned();
        tokio::task::spawn_blocking(move || {
            let target = confine::resolve(&dir, &requested)?;
            let (bytes, count) = {
                let cell = state.lock();
                (snapshot::encode(&cell.graph), cell.graph.fact_count())
            };
            let caller_file = |e: MemoryError| MemoryError::CallerFile {
                op: "persist to",
                path: requested.clone(),
                reason: match e {
                    MemoryError::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                },
            };
            snapshot::check_write_size(&target, bytes.len(), cap).map_err(caller_file)?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| caller_file(MemoryError::io("create directory", parent, e)))?;
            }
            if confine::resolve(&dir, &requested)? != target {
                return Err(crate::ConfineError {
                    path: requested.clone(),
                    reason: "changed while being written (a symlink appeared)".to_owned(),
                }
                .into());
            }
            snapshot::write_atomic(&target, &bytes).map_err(caller_file)?;
            Ok(count)
        })
        .await
        .map_err(task_error)?
    }

    /// `memory.load`: replaces the scope's graph (facts and skills) with a confined file's
    /// snapshot, writes the scope's own snapshot durably, and returns the fact count. The
    /// file is opened without following a final symlink, must be a regular file with one
    /// hard link, and at most [`MemoryStore::max_file_bytes`] long (checked on open and
    /// enforced while reading).
    pub async fn load(&self, scope: &Scope, path: &str) -> Result<usize, MemoryError> {
        let dir = self.inner.dir.clone();
        let cap = self.max_file_bytes();
        let requested = path.to_owned();
        let graph = tokio::task::spawn_blocking(move || {
            let target = confine::resolve(&dir, &requested)?;
            let caller_file = |reason: String| MemoryError::CallerFile {
                op: "load from",
                path: requested.clone(),
                reason,
            };
            let bytes = safe_file::read(&target, ReadLimits::cap(cap).single_link())
                .map_err(|e| caller_file(e.to_string()))?;
            snapshot::decode(&bytes).map_err(caller_file)
        })
        .await
        .map_err(task_error)??;
        self.mutate(scope, move |g| {
            g.replace_with(graph);
            Ok(g.fact_count())
        })
        .await
    }
}
