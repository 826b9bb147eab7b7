//! The daemon side of inference: one engine, one admission queue and one registry of
//! in-flight calls for every connection (the reason the daemon exists).
//!
//! Owns: the shared [`InferenceEngine`] (`car-inference`: registry, model cache, llama.cpp,
//! candle, remote providers), the admission semaphore bounding concurrent generations, the
//! table of in-flight `infer`/`infer_stream` calls that `infer.cancel` and `infer.deadline`
//! reach, the `infer.progress` heartbeat, and the adapter that lends the engine's
//! embeddings to memory ranking. Must not touch: JSON-RPC params and errors (that is
//! `services::inference`) or sockets.
//!
//! Engine calls block (llama.cpp decodes on the calling thread), so they run on tokio's
//! blocking pool, never on a worker. A call whose handler is dropped — its connection
//! closed, or its deadline passed — fires its cancel token, so the blocking generation
//! stops within a token and frees its admission slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_inference::{CancelToken, InferenceEngine};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::state::session::Session;

/// One in-flight generation, reachable by `infer.cancel` / `infer.deadline`.
#[derive(Debug, Default)]
pub struct InFlight {
    pub cancel: CancelToken,
    /// Set by `infer.deadline`; the stream callback stops generation once it passes.
    pub deadline: Mutex<Option<Instant>>,
}

impl InFlight {
    pub fn past_deadline(&self) -> bool {
        self.deadline
            .lock()
            .expect("deadline lock")
            .is_some_and(|d| Instant::now() >= d)
    }
}

type Key = (u64, String);

/// The shared inference state.
#[derive(Debug)]
pub struct InferenceService {
    pub engine: Arc<InferenceEngine>,
    /// Permits for concurrent local generations (FIFO: tokio's semaphore is fair).
    pub admission: Arc<Semaphore>,
    pub progress_every: Duration,
    inflight: Mutex<HashMap<Key, Arc<InFlight>>>,
    /// The delegated-inference runner and its open calls.
    pub runners: Arc<crate::state::inference_runner::Runners>,
    /// Every generation's receipt (`$CAR_HOME/outcome_ledger.jsonl`) and the live profiles.
    pub ledger: Arc<car_inference::outcomes::OutcomeLedger>,
    /// The user's price table (`$CAR_HOME/prices.json`).
    pub prices: crate::state::prices::PriceTable,
}

/// The table key of a request id (its compact JSON, so `7` and `"7"` differ).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

impl InferenceService {
    pub fn new(
        engine: InferenceEngine,
        max_generations: usize,
        progress_every: Duration,
        state_root: &std::path::Path,
    ) -> Self {
        InferenceService {
            ledger: Arc::new(car_inference::outcomes::OutcomeLedger::open(
                &state_root.join("outcome_ledger.jsonl"),
            )),
            prices: crate::state::prices::PriceTable::open(state_root),
            engine: Arc::new(engine),
            admission: Arc::new(Semaphore::new(max_generations)),
            progress_every,
            inflight: Mutex::new(HashMap::new()),
            runners: Default::default(),
        }
    }

    /// The route for `prompt` and `intent` over the registered models, the outcome ledger
    /// and the prices (`car_inference::route`); the error names the field at fault.
    pub fn route(
        &self,
        prompt: &str,
        intent: Option<&car_proto::methods::inference::routing::IntentHint>,
    ) -> Result<car_proto::methods::inference::routing::RouteDecision, String> {
        let entries = self.engine.list();
        let price = |e: &car_proto::methods::models::ModelEntry| {
            let cost = self.cost_model(&e.id)?;
            (cost.input_per_mtok.is_some() || cost.output_per_mtok.is_some())
                .then(|| cost.input_per_mtok.unwrap_or(0.0) + cost.output_per_mtok.unwrap_or(0.0))
        };
        car_inference::route::route(&entries, &self.ledger, prompt, intent, &price)
    }

    /// What `model` costs: the price table's entry, else its registered `cost`.
    pub fn cost_model(&self, model: &str) -> Option<car_proto::pricing::CostModel> {
        self.prices
            .get(model)
            .or_else(|| self.engine.registry().get(model).ok()?.meta.cost)
    }

    /// Registers an in-flight call; the guard removes it (and cancels it) when dropped.
    pub fn track(self: &Arc<Self>, session: u64, id: &Value) -> Result<InFlightGuard, String> {
        let key = (session, id_key(id));
        let entry = Arc::new(InFlight::default());
        let mut table = self.inflight.lock().expect("inflight lock");
        if table.contains_key(&key) {
            return Err(format!(
                "an infer call with id {id} is already running on this connection"
            ));
        }
        table.insert(key.clone(), entry.clone());
        Ok(InFlightGuard {
            service: self.clone(),
            key,
            entry,
        })
    }

    /// Cancels every in-flight call of `session` (its run was cancelled); how many.
    pub fn cancel_session(&self, session: u64) -> usize {
        let table = self.inflight.lock().expect("inflight lock");
        let mut n = 0;
        for ((s, _), entry) in table.iter() {
            if *s == session {
                entry.cancel.cancel();
                n += 1;
            }
        }
        n
    }

    /// How many generation calls are running or waiting for admission.
    pub fn in_flight(&self) -> usize {
        self.inflight.lock().expect("inflight lock").len()
    }

    /// The in-flight call `id` of `session`, if it is still running.
    pub fn find(&self, session: u64, id: &Value) -> Option<Arc<InFlight>> {
        self.inflight
            .lock()
            .expect("inflight lock")
            .get(&(session, id_key(id)))
            .cloned()
    }
}

/// Keeps a call in the in-flight table; dropping it cancels the generation (a dropped
/// handler must not leave llama.cpp decoding for nobody) and removes the entry.
#[derive(Debug)]
pub struct InFlightGuard {
    service: Arc<InferenceService>,
    key: Key,
    pub entry: Arc<InFlight>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.entry.cancel.cancel();
        self.service
            .inflight
            .lock()
            .expect("inflight lock")
            .remove(&self.key);
    }
}

/// Sends `infer.progress {id}` every `every` until dropped (docs/protocol-choices.md, "Reverse
/// calls and heartbeats"), from the moment the call arrives — so queued and cold-loading calls
/// heartbeat too.
#[derive(Debug)]
pub struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    pub fn start(session: Arc<Session>, id: Value, every: Duration) -> Self {
        Heartbeat(tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                if !session.notify("infer.progress", &json!({ "id": id })) {
                    break;
                }
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Lends the engine's default embedding model to memory ranking.
#[derive(Debug)]
pub struct MemoryEmbedder {
    pub engine: Arc<InferenceEngine>,
    pub model_id: String,
}

impl car_memory::Embedder for MemoryEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        self.engine
            .embed(Some(&self.model_id), &owned)
            .map(|r| r.embeddings)
            .map_err(|e| e.to_string())
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }
}

/// Points memory ranking at the first registered embedding model, or back to lexical
/// ranking when there is none.
pub fn refresh_memory_embedder(engine: &Arc<InferenceEngine>, memory: &car_memory::MemoryStore) {
    let model = engine
        .list()
        .into_iter()
        .find(|e| e.kind_name() == "embedding")
        .map(|e| e.id);
    match model {
        Some(model_id) => {
            tracing::info!(model = %model_id, "memory ranking blends embeddings");
            memory.set_embedder(Some(Arc::new(MemoryEmbedder {
                engine: engine.clone(),
                model_id,
            })));
        }
        None => memory.set_embedder(None),
    }
}

/// Runs a blocking engine call on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, car_inference::InferenceError> + Send + 'static,
) -> Result<T, car_proto::errors::RpcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| car_proto::errors::RpcError::internal(format!("inference task failed: {e}")))?
        .map_err(car_proto::errors::RpcError::from)
}
