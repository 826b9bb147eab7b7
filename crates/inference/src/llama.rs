//! Local GGUF generation through llama.cpp (the `llama-cpp-2` crate).
//!
//! Owns: the process-wide llama.cpp backend, loading a GGUF model (after `gguf` validated
//! it), rendering the chat template, the per-request context and decode loop (sampling,
//! stop sequences, cancellation, streaming), and tokenize/detokenize. Must not touch: the
//! registry, the cache policy (see `cache`) or admission (the daemon's).
//!
//! Concurrent requests on one loaded model run as sequences of one shared llama.cpp
//! context, decoded together (`llama::sched`, continuous batching; each request's decode
//! state is `llama::seq`); a request too large for the shared context gets one of its own.
//! Sequences never see each other's KV cells. The loaded model itself is shared
//! (`LlamaModel` is `Send + Sync`). A sequence starts from the saved sequence of an earlier
//! request that shares a prefix of its prompt (see `prefix_cache`), and leaves its own
//! there when it ends. The caller's stream callback runs on the caller's thread: the
//! scheduler relays text pieces through a channel.
//!
//! Prompts: a GGUF whose Jinja chat template supports tools in a recognised call format
//! (`tool_formats`) is rendered through that template (`chat_template`, minijinja), tools
//! and tool turns included; any other, or one whose rendering fails (logged as a warning),
//! goes through llama.cpp's built-in template matcher with tool turns as plain text and the
//! generic tool prompt (`llama::tools`).

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{LlamaStateSeqFlags, SeqState};

use crate::chat_template::ChatTemplate;
use crate::error::{InferenceError, Result};
use crate::generate::{
    CancelToken, GenerateRequest, StopReason, StreamControl, StreamEvent, Usage,
    DEFAULT_TEMPERATURE, DEFAULT_TOP_P,
};
use crate::gguf;
use crate::llama::seq::{Job, Relay};
use crate::prefix_cache::{CacheStats, PrefixCache};
use crate::tool_formats::ToolFormat;
use sched::Scheduler;

mod render;

pub(crate) mod classify;
mod sched;
mod seq;
pub(crate) mod tools;

#[cfg(test)]
mod native_tools_tests;

/// Tokens decoded per llama.cpp batch while reading the prompt.
pub(crate) const PROMPT_BATCH: u32 = 512;
/// Template used when the GGUF has none, or llama.cpp cannot apply the one it has.
/// ChatML is what most small instruct models (SmolLM2, Qwen) are trained on.
pub const FALLBACK_TEMPLATE: &str = "chatml";

/// Default sequences per loaded model decoded together (`LlamaConfig::n_seq`).
pub const DEFAULT_SEQUENCES: u32 = 4;
/// Most sequences one shared context may hold.
pub const MAX_SEQUENCES: u32 = 64;
/// Default KV cells per sequence of the shared context (`LlamaConfig::seq_context`).
pub const DEFAULT_SEQ_CONTEXT: u32 = 2048;

/// The engine's tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlamaConfig {
    /// CPU threads for prompt processing and decoding (one shared context per model
    /// decodes every sequence, so this is normally all cores).
    pub n_threads: u32,
    /// Sequences per loaded model decoded together in one shared context (1 to
    /// [`MAX_SEQUENCES`]); further concurrent requests wait for a free one.
    pub n_seq: u32,
    /// KV cells per sequence of the shared context (capped by the model's window); the
    /// context has `n_seq × seq_context` cells in one unified cache, and a request
    /// needing more than all of them runs in a context of its own.
    pub seq_context: u32,
    /// Upper bound on any context window, whatever the model was trained for.
    pub max_context: u32,
    /// Bytes of saved KV sequences kept per loaded model for prefix reuse (0: none).
    pub prefix_cache_bytes: u64,
}

impl Default for LlamaConfig {
    fn default() -> Self {
        Self {
            n_threads: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(4),
            n_seq: DEFAULT_SEQUENCES,
            seq_context: DEFAULT_SEQ_CONTEXT,
            max_context: 8192,
            prefix_cache_bytes: crate::prefix_cache::DEFAULT_BUDGET,
        }
    }
}

fn backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs through tracing (target `llama-cpp-2`) instead of raw stderr.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| InferenceError::Engine(format!("llama.cpp backend init failed: {e}")))
}

/// What a loaded model's scheduler thread shares with its callers: the weights, context
/// creation and the prefix cache.
pub(crate) struct Core {
    pub(crate) model: LlamaModel,
    /// llama-cpp-2 documents that creating contexts from one model in parallel is unsound
    /// (llama.cpp may write to the model while doing so), so creation is serialised.
    context_lock: Mutex<()>,
    /// Saved sequences of earlier requests, for prefix reuse.
    pub(crate) prefix: PrefixCache<SeqState>,
}

impl Core {
    /// A fresh context of `n_ctx` cells for up to `n_seq` sequences (one unified KV
    /// cache) with `threads` threads. Creation is serialised (see `context_lock`).
    pub(crate) fn context(
        &self,
        n_ctx: u32,
        n_seq: u32,
        threads: u32,
    ) -> Result<llama_cpp_2::context::LlamaContext<'_>> {
        let threads = threads.max(1) as i32;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(PROMPT_BATCH)
            .with_n_ubatch(PROMPT_BATCH)
            .with_n_seq_max(n_seq.max(1))
            .with_kv_unified(true)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let _guard = self.context_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.model
            .new_context(backend()?, params)
            .map_err(|e| InferenceError::Engine(format!("creating context failed: {e}")))
    }

    /// Keeps sequence `seq_id` of `ctx` (the cells of `in_cells`) for later requests.
    pub(crate) fn save_prefix(
        &self,
        ctx: &llama_cpp_2::context::LlamaContext<'_>,
        seq_id: i32,
        in_cells: Vec<i32>,
        ttl: std::time::Duration,
    ) {
        if in_cells.len() < crate::prefix_cache::MIN_REUSE {
            return;
        }
        match ctx.state_seq_get(seq_id, LlamaStateSeqFlags::empty()) {
            Ok(state) => {
                let bytes = state.byte_len() as u64;
                self.prefix
                    .insert(in_cells, state, bytes, ttl, Instant::now());
            }
            Err(e) => tracing::warn!(error = %e, "saving the sequence for prefix reuse failed"),
        }
    }

    /// Greedy at temperature 0; otherwise top-p, then temperature, then a seeded draw (the
    /// order llama.cpp's own samplers use). A `grammar` (GBNF, rule `root`) constrains the
    /// candidates before any of these.
    pub(crate) fn sampler(
        &self,
        request: &GenerateRequest,
        grammar: Option<&str>,
    ) -> Result<LlamaSampler> {
        let mut chain = Vec::new();
        if let Some(g) = grammar {
            chain.push(LlamaSampler::grammar(&self.model, g, "root").map_err(|e| {
                InferenceError::Engine(format!("llama.cpp rejected the tool grammar: {e}"))
            })?);
        }
        let temperature = request.temperature.unwrap_or(DEFAULT_TEMPERATURE);
        if temperature <= 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            let seed = request.seed.unwrap_or_else(random_seed);
            chain.push(LlamaSampler::top_p(
                request.top_p.unwrap_or(DEFAULT_TOP_P),
                1,
            ));
            chain.push(LlamaSampler::temp(temperature));
            chain.push(LlamaSampler::dist(seed));
        }
        Ok(LlamaSampler::chain_simple(chain))
    }
}

/// A loaded GGUF model, shareable across threads.
pub struct LlamaEngineModel {
    pub(crate) core: Arc<Core>,
    template: Option<LlamaChatTemplate>,
    /// The model's template compiled with minijinja, when it supports tools in a
    /// recognised format (otherwise `template` renders through llama.cpp).
    native: Option<(ChatTemplate, ToolFormat)>,
    /// The batch scheduler of this model, started by the first generation.
    scheduler: Mutex<Option<Scheduler>>,
}

impl std::fmt::Debug for LlamaEngineModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaEngineModel")
            .field("n_ctx_train", &self.core.model.n_ctx_train())
            .field("has_template", &self.template.is_some())
            .field("tool_format", &self.tool_format().name())
            .field("prefix", &self.core.prefix)
            .finish()
    }
}

impl LlamaEngineModel {
    /// Validates the header, then loads the weights (memory-mapped) with llama.cpp.
    pub fn load(path: &Path, config: &LlamaConfig) -> Result<Self> {
        let summary = gguf::validate_file(path).map_err(|source| InferenceError::InvalidGguf {
            path: path.to_path_buf(),
            source,
        })?;
        let backend = backend()?;
        let started = Instant::now();
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| {
                InferenceError::Engine(format!("loading {} failed: {e}", path.display()))
            })?;
        let template = model.chat_template(None).ok();
        let source = template
            .as_ref()
            .and_then(|t| t.to_str().ok().map(str::to_owned));
        let mut loaded = Self {
            core: Arc::new(Core {
                model,
                context_lock: Mutex::new(()),
                prefix: PrefixCache::new(config.prefix_cache_bytes),
            }),
            template,
            native: None,
            scheduler: Mutex::new(None),
        };
        if let Some(source) = source {
            loaded.native = loaded.native_template(&source);
        }
        tracing::info!(
            path = %path.display(),
            architecture = summary.architecture.as_deref().unwrap_or("unknown"),
            has_template = loaded.template.is_some(),
            tool_format = loaded.tool_format().name(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "gguf model loaded"
        );
        Ok(loaded)
    }

    /// A fresh single-sequence context of `n_ctx` tokens with the configured threads.
    pub(crate) fn context(
        &self,
        n_ctx: u32,
        config: &LlamaConfig,
    ) -> Result<llama_cpp_2::context::LlamaContext<'_>> {
        self.core.context(n_ctx, 1, config.n_threads)
    }

    /// The model's training context length.
    pub fn n_ctx_train(&self) -> u32 {
        self.core.model.n_ctx_train()
    }

    /// Plain-text tokenization: no BOS, and control-token text such as `<|im_start|>` is
    /// tokenized literally so user text cannot inject control tokens.
    pub fn tokenize(&self, text: &str) -> Vec<i32> {
        self.core
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// Inverse of `tokenize`; special tokens are rendered as their text. Ids outside the
    /// vocabulary are rejected before llama.cpp sees them.
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String> {
        let n_vocab = self.core.model.n_vocab();
        if let Some((i, t)) = tokens
            .iter()
            .enumerate()
            .find(|(_, t)| **t < 0 || **t >= n_vocab)
        {
            return Err(InferenceError::invalid(
                "tokens",
                format!("token {i} is {t}, outside the vocabulary 0..{n_vocab}"),
            ));
        }
        let tokens: Vec<LlamaToken> = tokens.iter().map(|t| LlamaToken(*t)).collect();
        let bytes = self.core.model.vocab().detokenize(&tokens, false, true);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Runs one generation. `on_event` receives text as it becomes final and, once
    /// generation has ended, each tool call; returning `StreamControl::Stop` ends generation
    /// with `StopReason::Cancelled` (the text is then exactly what `on_event` received), as
    /// does `cancel`. Tools are handled as `llama::tools` describes: a constrained answer is
    /// not streamed as text, and a parsed one sets `tool_calls` (with empty text) and
    /// `StopReason::ToolUse`. Stop sequences do not apply to a constrained answer.
    ///
    /// The generation runs as one sequence of the model's shared batch (`llama::sched`),
    /// or alone in a context of its own when it needs more cells than the shared one has;
    /// `on_event` runs on the calling thread, which blocks until the end.
    pub fn generate(
        &self,
        request: &GenerateRequest,
        max_tokens: u32,
        config: &LlamaConfig,
        cancel: &CancelToken,
        started: Instant,
        on_event: &mut dyn FnMut(StreamEvent<'_>) -> StreamControl,
    ) -> Result<Generated> {
        let (plan, prompt) = self.prompt_for(request)?;
        let tokens = self
            .core
            .model
            .vocab()
            .tokenize(prompt.as_bytes(), true, true);
        let n_train = self.n_window(config);
        let n_prompt = tokens.len() as u32;
        if n_prompt == 0 {
            return Err(InferenceError::invalid("prompt", "renders to no tokens"));
        }
        if n_prompt >= n_train {
            return Err(InferenceError::invalid(
                "prompt",
                format!("{n_prompt} tokens do not fit the {n_train}-token context window"),
            ));
        }
        let (relay, events) = mpsc::channel();
        let stop = CancelToken::new();
        let job = Box::new(Job {
            request: request.clone(),
            plan,
            tokens,
            max_tokens,
            n_train,
            cancel: cancel.clone(),
            stop: stop.clone(),
            started,
            relay,
        });
        let Err(job) = self.submit(job, config) else {
            return relay_events(&events, &stop, on_event);
        };
        let threads = config.n_threads.max(1);
        std::thread::scope(|s| {
            let core = &*self.core;
            std::thread::Builder::new()
                .name("llama-solo".into())
                .spawn_scoped(s, move || sched::run_solo(core, job, threads))
                .map_err(|e| {
                    InferenceError::Engine(format!("starting a generation thread: {e}"))
                })?;
            relay_events(&events, &stop, on_event)
        })
    }

    /// The usable context window: the training context capped by `max_context`.
    fn n_window(&self, config: &LlamaConfig) -> u32 {
        self.core
            .model
            .n_ctx_train()
            .min(config.max_context)
            .max(16)
    }

    /// Hands `job` to the model's scheduler (started on first use, restarted if its
    /// thread is gone); gives it back when it needs more cells than the shared context.
    fn submit(&self, job: Box<Job>, config: &LlamaConfig) -> std::result::Result<(), Box<Job>> {
        let n_seq = config.n_seq.clamp(1, MAX_SEQUENCES);
        let per_seq = config.seq_context.clamp(16, self.n_window(config));
        let shape = sched::Shape {
            n_seq,
            cells: n_seq * per_seq,
            threads: config.n_threads.max(1),
        };
        if job.cells() > shape.cells {
            return Err(job);
        }
        let mut guard = self.scheduler.lock().unwrap_or_else(|p| p.into_inner());
        let mut job = job;
        for _ in 0..2 {
            let scheduler = match guard.take() {
                Some(s) => s,
                None => match Scheduler::spawn(self.core.clone(), shape) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "no batch scheduler; running alone");
                        return Err(job);
                    }
                },
            };
            match scheduler.submit(job) {
                Ok(()) => {
                    *guard = Some(scheduler);
                    return Ok(());
                }
                Err(back) => {
                    tracing::warn!("the batch scheduler thread ended; starting another");
                    job = back;
                }
            }
        }
        Err(job)
    }

    /// What the prefix cache holds now.
    pub fn prefix_cache_stats(&self) -> CacheStats {
        self.core.prefix.stats()
    }
}

/// The engine part of a result; the caller adds identity and latency.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Final text.
    pub text: String,
    /// Tool calls.
    pub tool_calls: Vec<crate::tools::ToolCall>,
    /// Token counts.
    pub usage: Usage,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Milliseconds from `started` to the first sampled token.
    pub time_to_first_token_ms: Option<u64>,
}

/// Delivers a generation's text pieces to `on_event` as they arrive and returns its result.
/// When `on_event` answers `Stop`, the sequence is told to stop (`stop`), later pieces are
/// not delivered, and the result holds exactly the text delivered. Tool calls are
/// delivered after the text, as the result lists them.
fn relay_events(
    events: &Receiver<Relay>,
    stop: &CancelToken,
    on_event: &mut dyn FnMut(StreamEvent<'_>) -> StreamControl,
) -> Result<Generated> {
    let mut delivered = String::new();
    let mut stopped = false;
    let result = loop {
        match events.recv() {
            Ok(Relay::Text(piece)) => {
                if !stopped {
                    delivered.push_str(&piece);
                    if on_event(StreamEvent::Text(&piece)) == StreamControl::Stop {
                        stopped = true;
                        stop.cancel();
                    }
                }
            }
            Ok(Relay::Done(result)) => break result,
            Err(_) => {
                break Err(InferenceError::Engine(
                    "the generation ended without a result".into(),
                ))
            }
        }
    };
    let mut out = result?;
    if stopped {
        out.text = delivered;
        out.tool_calls.clear();
        out.stop_reason = StopReason::Cancelled;
        return Ok(out);
    }
    let calls = std::mem::take(&mut out.tool_calls);
    for call in calls {
        out.tool_calls.push(call);
        let call = out.tool_calls.last().expect("just pushed");
        if on_event(StreamEvent::ToolCall(call)) == StreamControl::Stop {
            out.stop_reason = StopReason::Cancelled;
            break;
        }
    }
    Ok(out)
}

fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS per process and perturbed per instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}
