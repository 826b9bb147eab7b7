//! Local GGUF generation through llama.cpp (the `llama-cpp-2` crate).
//!
//! Owns: the process-wide llama.cpp backend, loading a GGUF model (after `gguf` validated
//! it), rendering the chat template, the per-request context and decode loop (sampling,
//! stop sequences, cancellation, streaming), and tokenize/detokenize. Must not touch: the
//! registry, the cache policy (see `cache`) or admission (the daemon's).
//!
//! A request gets its own llama.cpp context sized to `prompt + max_tokens` (capped by the
//! model's training context), so concurrent requests on one loaded model never share KV
//! state. The loaded model itself is shared (`LlamaModel` is `Send + Sync`). A context
//! starts from the saved sequence of an earlier request that shares a prefix of its prompt
//! (see `prefix_cache`), and leaves its own sequence there when it ends.
//!
//! Prompts: a GGUF whose Jinja chat template supports tools in a recognised call format
//! (`tool_formats`) is rendered through that template (`chat_template`, minijinja), tools
//! and tool turns included; any other, or one whose rendering fails (logged as a warning),
//! goes through llama.cpp's built-in template matcher with tool turns as plain text and the
//! generic tool prompt (`llama_tools`).

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{LlamaStateSeqFlags, SeqState};

use crate::chat_template::ChatTemplate;
use crate::error::{InferenceError, Result};
use crate::generate::{
    CancelToken, GenerateRequest, StopReason, StreamControl, StreamEvent, TextAssembler, Usage,
    DEFAULT_TEMPERATURE, DEFAULT_TOP_P,
};
use crate::gguf;
use crate::llama_tools::{self, Probe};
use crate::prefix_cache::{CacheStats, PrefixCache};
use crate::tool_formats::ToolFormat;

#[path = "llama_render.rs"]
mod render;

/// Tokens decoded per llama.cpp batch while reading the prompt.
pub(crate) const PROMPT_BATCH: u32 = 512;
/// Template used when the GGUF has none, or llama.cpp cannot apply the one it has.
/// ChatML is what most small instruct models (SmolLM2, Qwen) are trained on.
pub const FALLBACK_TEMPLATE: &str = "chatml";

/// The engine's tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlamaConfig {
    /// CPU threads for prompt processing and decoding.
    pub n_threads: u32,
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

/// A loaded GGUF model, shareable across threads.
pub struct LlamaEngineModel {
    pub(crate) model: LlamaModel,
    template: Option<LlamaChatTemplate>,
    /// The model's template compiled with minijinja, when it supports tools in a
    /// recognised format (otherwise `template` renders through llama.cpp).
    native: Option<(ChatTemplate, ToolFormat)>,
    /// llama-cpp-2 documents that creating contexts from one model in parallel is unsound
    /// (llama.cpp may write to the model while doing so), so creation is serialised.
    context_lock: Mutex<()>,
    /// Saved sequences of earlier requests, for prefix reuse.
    prefix: PrefixCache<SeqState>,
}

impl std::fmt::Debug for LlamaEngineModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaEngineModel")
            .field("n_ctx_train", &self.model.n_ctx_train())
            .field("has_template", &self.template.is_some())
            .field("tool_format", &self.tool_format().name())
            .field("prefix", &self.prefix)
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
            model,
            template,
            native: None,
            context_lock: Mutex::new(()),
            prefix: PrefixCache::new(config.prefix_cache_bytes),
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

    /// A fresh context of `n_ctx` tokens with the configured threads. Creation is
    /// serialised (see `context_lock`).
    pub(crate) fn context(
        &self,
        n_ctx: u32,
        config: &LlamaConfig,
    ) -> Result<llama_cpp_2::context::LlamaContext<'_>> {
        let threads = config.n_threads.max(1) as i32;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(PROMPT_BATCH)
            .with_n_ubatch(PROMPT_BATCH)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let _guard = self.context_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.model
            .new_context(backend()?, params)
            .map_err(|e| InferenceError::Engine(format!("creating context failed: {e}")))
    }

    /// The model's training context length.
    pub fn n_ctx_train(&self) -> u32 {
        self.model.n_ctx_train()
    }

    /// Plain-text tokenization: no BOS, and control-token text such as `<|im_start|>` is
    /// tokenized literally so user text cannot inject control tokens.
    pub fn tokenize(&self, text: &str) -> Vec<i32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// Inverse of `tokenize`; special tokens are rendered as their text. Ids outside the
    /// vocabulary are rejected before llama.cpp sees them.
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String> {
        let n_vocab = self.model.n_vocab();
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
        let bytes = self.model.vocab().detokenize(&tokens, false, true);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Runs one generation. `on_event` receives text as it becomes final and, once
    /// generation has ended, each tool call; returning `StreamControl::Stop` ends generation
    /// with `StopReason::Cancelled`, as does `cancel`. Tools are handled as `llama_tools`
    /// describes: a constrained answer is not streamed as text, and a parsed one sets
    /// `tool_calls` (with empty text) and `StopReason::ToolUse`. Stop sequences do not apply
    /// to a constrained answer.
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
        let vocab = self.model.vocab();
        let tokens = vocab.tokenize(prompt.as_bytes(), true, true);
        let n_train = self.model.n_ctx_train().min(config.max_context).max(16);
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
        let ids: Vec<i32> = tokens.iter().map(|t| t.0).collect();
        let hit = if request.cache.enabled {
            self.prefix.lookup(&ids, Instant::now())
        } else {
            None
        };
        // The context must hold every cell of a restored entry until the unshared ones
        // are dropped.
        let n_ctx = (n_prompt + max_tokens)
            .max(hit.as_ref().map_or(0, |h| h.len as u32))
            .min(n_train);
        let mut ctx = self.context(n_ctx, config)?;
        let reused = match &hit {
            Some(h) if h.len as u32 <= n_ctx => match ctx.state_seq_set(&h.state, 0) {
                Ok(()) => {
                    ctx.clear_kv_cache_seq(Some(0), Some(h.reuse as u32), None)
                        .map_err(|e| InferenceError::Engine(format!("kv cache: {e}")))?;
                    h.reuse
                }
                Err(e) => {
                    tracing::warn!(error = %e, "restoring a cached prefix failed; evaluating the whole prompt");
                    ctx.clear_kv_cache();
                    0
                }
            },
            _ => 0,
        };
        drop(hit);

        let mut out = Generated {
            text: String::new(),
            tool_calls: Vec::new(),
            usage: Usage {
                prompt_tokens: n_prompt - reused as u32,
                completion_tokens: 0,
                cache_read_tokens: reused as u32,
            },
            stop_reason: StopReason::Length,
            time_to_first_token_ms: None,
        };
        let mut batch = LlamaBatch::new(PROMPT_BATCH as usize, 1);
        let last = tokens.len() - 1;
        for (chunk_index, chunk) in tokens[reused..].chunks(PROMPT_BATCH as usize).enumerate() {
            if cancel.is_cancelled() {
                out.stop_reason = StopReason::Cancelled;
                return Ok(out);
            }
            batch.clear();
            for (j, token) in chunk.iter().enumerate() {
                let pos = reused + chunk_index * PROMPT_BATCH as usize + j;
                batch
                    .add(*token, pos as i32, &[0], pos == last)
                    .map_err(|e| InferenceError::Engine(format!("batch: {e}")))?;
            }
            ctx.decode(&mut batch)
                .map_err(|e| InferenceError::Engine(format!("prompt decode failed: {e}")))?;
        }
        // The token ids whose cells the context holds, for saving it afterwards.
        let mut in_cells = ids;

        // `auto` first probes freely (see `llama_tools`); a start with the format's trigger
        // restarts constrained. A native format's answer keeps special-token text (such as
        // a `<tool_call>` token), which its parser reads.
        let trigger = plan.as_ref().map_or("{", |p| p.format.trigger());
        let special = plan
            .as_ref()
            .is_some_and(|p| p.format != ToolFormat::Generic);
        let mut constrained = plan.as_ref().is_some_and(|p| p.eager);
        let mut probing = plan.is_some() && !constrained;
        let mut callback_stopped = false;
        let mut consumer_stopped = false;
        let (assembler, stop_reason) = loop {
            let grammar = plan
                .as_ref()
                .filter(|_| constrained)
                .map(|p| &p.grammar[..]);
            let mut sampler = self.sampler(request, grammar)?;
            let no_stops: &[String] = &[];
            let mut assembler =
                TextAssembler::new(if constrained { no_stops } else { &request.stop });
            let mut stop_reason = StopReason::Length;
            let mut held = String::new();
            let mut probe: Vec<u8> = Vec::new();
            let mut restart = false;
            let mut emit = |piece: String| {
                if !piece.is_empty() && !callback_stopped {
                    callback_stopped = on_event(StreamEvent::Text(&piece)) == StreamControl::Stop;
                }
                callback_stopped
            };
            out.usage.completion_tokens = 0;
            for n_past in n_prompt..n_prompt.saturating_add(max_tokens) {
                if cancel.is_cancelled() {
                    stop_reason = StopReason::Cancelled;
                    break;
                }
                let token = sampler.sample(&ctx, batch.n_tokens() - 1);
                if out.time_to_first_token_ms.is_none() {
                    out.time_to_first_token_ms = Some(started.elapsed().as_millis() as u64);
                }
                if vocab.is_eog(token) {
                    stop_reason = StopReason::Stop;
                    break;
                }
                out.usage.completion_tokens += 1;
                let (mut piece, hit) = assembler.push_bytes(&vocab.token_to_piece(
                    token,
                    constrained && special,
                    None,
                ));
                if probing {
                    // Hold text back until its start shows whether it is the trigger.
                    held.push_str(&piece);
                    piece = String::new();
                    probe.extend(vocab.token_to_piece(token, true, None));
                    match llama_tools::probe(&String::from_utf8_lossy(&probe), trigger) {
                        Probe::Call => {
                            restart = true;
                            break;
                        }
                        Probe::Text => {
                            probing = false;
                            piece = std::mem::take(&mut held);
                        }
                        Probe::Undecided => {}
                    }
                }
                if constrained {
                    piece.clear();
                }
                if emit(piece) {
                    stop_reason = StopReason::Cancelled;
                    consumer_stopped = true;
                    break;
                }
                if hit {
                    stop_reason = StopReason::StopSequence;
                    break;
                }
                if n_past >= n_ctx {
                    break;
                }
                batch.clear();
                batch
                    .add(token, n_past as i32, &[0], true)
                    .map_err(|e| InferenceError::Engine(format!("batch: {e}")))?;
                ctx.decode(&mut batch)
                    .map_err(|e| InferenceError::Engine(format!("decode failed: {e}")))?;
                in_cells.push(token.0);
            }
            if restart {
                // Forget the probe and recompute the last prompt token's logits.
                probing = false;
                constrained = true;
                ctx.clear_kv_cache_seq(Some(0), Some(n_prompt - 1), None)
                    .map_err(|e| InferenceError::Engine(format!("kv cache: {e}")))?;
                in_cells.truncate(n_prompt as usize);
                batch.clear();
                batch
                    .add(tokens[last], (n_prompt - 1) as i32, &[0], true)
                    .map_err(|e| InferenceError::Engine(format!("batch: {e}")))?;
                ctx.decode(&mut batch)
                    .map_err(|e| InferenceError::Engine(format!("decode failed: {e}")))?;
                continue;
            }
            // When the consumer stopped the stream, the result holds exactly what it
            // received; otherwise any held-back tail is flushed (a Stop answer to it has
            // nothing to stop).
            if !constrained && !consumer_stopped {
                let tail = if assembler.stopped() {
                    held
                } else {
                    held + &assembler.finish()
                };
                let _ = emit(tail);
            }
            break (assembler, stop_reason);
        };
        out.text = if consumer_stopped {
            assembler.emitted_text().to_owned()
        } else {
            assembler.text().to_owned()
        };
        out.stop_reason = stop_reason;
        let parsed = match (&plan, stop_reason) {
            (Some(p), StopReason::Stop) if constrained => {
                p.format.parse(&out.text, p.first_id, false)
            }
            (Some(p), StopReason::Length) if constrained => {
                p.format.parse(&out.text, p.first_id, true)
            }
            _ => None,
        };
        if request.cache.enabled {
            self.save_prefix(&ctx, in_cells, request.cache.ttl);
        }
        if let Some(calls) = parsed {
            out.text.clear();
            out.stop_reason = StopReason::ToolUse;
            for call in &calls {
                out.tool_calls.push(call.clone());
                if on_event(StreamEvent::ToolCall(call)) == StreamControl::Stop {
                    out.stop_reason = StopReason::Cancelled;
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Keeps the context's sequence (the cells of `in_cells`) for later requests.
    fn save_prefix(
        &self,
        ctx: &llama_cpp_2::context::LlamaContext<'_>,
        in_cells: Vec<i32>,
        ttl: std::time::Duration,
    ) {
        match ctx.state_seq_get(0, LlamaStateSeqFlags::empty()) {
            Ok(state) => {
                let bytes = state.byte_len() as u64;
                self.prefix
                    .insert(in_cells, state, bytes, ttl, Instant::now());
            }
            Err(e) => tracing::warn!(error = %e, "saving the sequence for prefix reuse failed"),
        }
    }

    /// What the prefix cache holds now.
    pub fn prefix_cache_stats(&self) -> CacheStats {
        self.prefix.stats()
    }

    /// Greedy at temperature 0; otherwise top-p, then temperature, then a seeded draw (the
    /// order llama.cpp's own samplers use). A `grammar` (GBNF, rule `root`) constrains the
    /// candidates before any of these.
    fn sampler(&self, request: &GenerateRequest, grammar: Option<&str>) -> Result<LlamaSampler> {
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
