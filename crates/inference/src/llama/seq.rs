//! One generation as a sequence of a llama.cpp context: the per-request decode state
//! machine that `llama::sched` steps one token per batch.
//!
//! Owns: what a request is while it decodes — its prompt evaluation (in chunks, starting
//! after a restored prefix), sampling (an optional tool grammar), tool probing and the
//! restart into constrained decoding, stop sequences (`TextAssembler`), cancellation,
//! `max_tokens` and the context-length limit, time to first token, usage, the parsed tool
//! calls and saving its KV cells for prefix reuse when it ends. Must not touch: which
//! sequences share a batch or a context (`llama::sched`), or the caller's stream callback
//! (text pieces go out through a channel; `llama` relays them).
//!
//! A sequence is fed through [`Sequence::fill`] (its next prompt chunk, or the token it
//! sampled last) and, after the batch is decoded, [`Sequence::on_logits`] samples its next
//! token from the logits at its own batch index. Every KV operation names the sequence's
//! seq id, so sequences sharing a context never see each other's cells.

use std::sync::mpsc::Sender;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use crate::error::{InferenceError, Result};
use crate::generate::{CancelToken, GenerateRequest, StopReason, TextAssembler, Usage};
use crate::llama::tools::{self, Probe, ToolPlan};
use crate::llama::{Core, Generated};
use crate::tool_formats::ToolFormat;

/// What a running generation sends its caller.
#[derive(Debug)]
pub(crate) enum Relay {
    /// A piece of final text.
    Text(String),
    /// The end: the result (text, tool calls, usage) or why it failed.
    Done(Result<Generated>),
}

/// A prepared request waiting for a sequence.
pub(crate) struct Job {
    pub request: GenerateRequest,
    pub plan: Option<ToolPlan>,
    /// The rendered prompt's tokens (never empty, shorter than `n_train`).
    pub tokens: Vec<LlamaToken>,
    pub max_tokens: u32,
    /// The model's usable context window (training context capped by `max_context`).
    pub n_train: u32,
    /// The caller's cancel token.
    pub cancel: CancelToken,
    /// Set by the relay when the consumer's callback returned `Stop`.
    pub stop: CancelToken,
    pub started: Instant,
    pub relay: Sender<Relay>,
}

impl Job {
    /// KV cells the generation may fill: prompt plus `max_tokens`, within the window.
    pub fn cells(&self) -> u32 {
        (self.tokens.len() as u32)
            .saturating_add(self.max_tokens)
            .min(self.n_train)
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled() || self.stop.is_cancelled()
    }

    /// Answers a job that never got a sequence.
    pub fn reject(self, result: Result<Generated>) {
        let _ = self.relay.send(Relay::Done(result));
    }

    /// The result of a job cancelled before it started.
    pub fn cancelled_result(&self) -> Generated {
        Generated {
            text: String::new(),
            tool_calls: Vec::new(),
            usage: Usage {
                prompt_tokens: self.tokens.len() as u32,
                completion_tokens: 0,
                cache_read_tokens: 0,
            },
            stop_reason: StopReason::Cancelled,
            time_to_first_token_ms: None,
        }
    }
}

fn kv_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Engine(format!("kv cache: {e}"))
}

fn batch_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Engine(format!("batch: {e}"))
}

/// What [`Sequence::on_logits`] decided.
pub(crate) enum Step {
    /// Feed the sampled token in the next batch.
    Continue,
    /// The generation ended for this reason.
    Finished(StopReason),
}

/// One request's decode state inside a context.
pub(crate) struct Sequence {
    job: Box<Job>,
    pub seq_id: i32,
    /// KV cells reserved for it in a shared context.
    pub reserved: u32,
    n_prompt: u32,
    /// Prompt tokens whose cells exist.
    evaluated: usize,
    /// The token ids whose cells the context holds, for saving them at the end.
    in_cells: Vec<i32>,
    /// The token to feed next (its position), once the prompt is in.
    pending: Option<(LlamaToken, i32)>,
    /// Batch index of this sequence's logits in the batch being decoded.
    logits_at: Option<i32>,
    /// Position the next sampled token takes.
    n_past: u32,
    out: Generated,
    sampler: LlamaSampler,
    assembler: TextAssembler,
    constrained: bool,
    probing: bool,
    special: bool,
    trigger: &'static str,
    held: String,
    probe: Vec<u8>,
    /// The relay's receiver is gone: nobody is listening any more.
    consumer_gone: bool,
}

impl Sequence {
    /// Starts `job` as `seq_id`, whose cells are empty; `reused` leading prompt tokens
    /// are already in them (a restored prefix).
    pub fn start(
        core: &Core,
        job: Box<Job>,
        seq_id: i32,
        reserved: u32,
        reused: usize,
    ) -> std::result::Result<Self, (Box<Job>, InferenceError)> {
        let constrained = job.plan.as_ref().is_some_and(|p| p.eager);
        let sampler = match Self::sampler_for(core, &job, constrained) {
            Ok(s) => s,
            Err(e) => return Err((job, e)),
        };
        let n_prompt = job.tokens.len() as u32;
        let plan = job.plan.as_ref();
        let special = plan.is_some_and(|p| p.format != ToolFormat::Generic);
        let trigger = plan.map_or("{", |p| p.format.trigger());
        let probing = plan.is_some() && !constrained;
        let assembler = Self::assembler_for(&job, constrained);
        let in_cells = job.tokens[..reused].iter().map(|t| t.0).collect();
        Ok(Self {
            seq_id,
            reserved,
            n_prompt,
            evaluated: reused,
            in_cells,
            pending: None,
            logits_at: None,
            n_past: n_prompt,
            out: Generated {
                text: String::new(),
                tool_calls: Vec::new(),
                usage: Usage {
                    prompt_tokens: n_prompt - reused as u32,
                    completion_tokens: 0,
                    cache_read_tokens: reused as u32,
                },
                stop_reason: StopReason::Length,
                time_to_first_token_ms: None,
            },
            sampler,
            assembler,
            constrained,
            probing,
            special,
            trigger,
            held: String::new(),
            probe: Vec::new(),
            consumer_gone: false,
            job,
        })
    }

    fn sampler_for(core: &Core, job: &Job, constrained: bool) -> Result<LlamaSampler> {
        let format = match (&job.plan, &job.request.response_format) {
            (None, Some(format)) => Some(crate::grammar::response_format_gbnf(format)),
            _ => None,
        };
        let grammar = job
            .plan
            .as_ref()
            .filter(|_| constrained)
            .map(|p| &p.grammar[..])
            .or(format.as_deref());
        core.sampler(&job.request, grammar)
    }

    fn assembler_for(job: &Job, constrained: bool) -> TextAssembler {
        let no_stops: &[String] = &[];
        TextAssembler::new(if constrained {
            no_stops
        } else {
            &job.request.stop
        })
    }

    /// Whether the caller cancelled, the consumer stopped, or nobody listens any more.
    pub fn cancelled(&self) -> bool {
        self.consumer_gone || self.job.cancelled()
    }

    /// Whether it still has prompt tokens to evaluate (and no sampled token to feed).
    pub fn prompting(&self) -> bool {
        self.pending.is_none() && self.evaluated < self.job.tokens.len()
    }

    /// Adds this sequence's tokens for the next decode to `batch`, at most `room` of them:
    /// the token it sampled last, or its next prompt chunk. Returns how many it added.
    pub fn fill(&mut self, batch: &mut LlamaBatch, room: usize) -> Result<usize> {
        self.logits_at = None;
        if room == 0 {
            return Ok(0);
        }
        if let Some((token, pos)) = self.pending.take() {
            self.logits_at = Some(batch.n_tokens());
            batch
                .add(token, pos, &[self.seq_id], true)
                .map_err(batch_err)?;
            self.in_cells.push(token.0);
            return Ok(1);
        }
        let total = self.job.tokens.len();
        if self.evaluated >= total {
            return Ok(0);
        }
        let end = total.min(self.evaluated + room);
        for pos in self.evaluated..end {
            let last = pos == total - 1;
            if last {
                self.logits_at = Some(batch.n_tokens());
            }
            batch
                .add(self.job.tokens[pos], pos as i32, &[self.seq_id], last)
                .map_err(batch_err)?;
            self.in_cells.push(self.job.tokens[pos].0);
        }
        let added = end - self.evaluated;
        self.evaluated = end;
        Ok(added)
    }

    /// Samples from the logits this sequence asked for in the batch just decoded (if it
    /// asked for any) and decides what comes next.
    pub fn on_logits(&mut self, core: &Core, ctx: &mut LlamaContext<'_>) -> Result<Option<Step>> {
        let Some(idx) = self.logits_at.take() else {
            return Ok(None);
        };
        let end = self.n_prompt.saturating_add(self.job.max_tokens);
        let token = self.sampler.sample(ctx, idx);
        if self.out.time_to_first_token_ms.is_none() {
            self.out.time_to_first_token_ms = Some(self.job.started.elapsed().as_millis() as u64);
        }
        let vocab = core.model.vocab();
        if vocab.is_eog(token) {
            return Ok(Some(Step::Finished(StopReason::Stop)));
        }
        self.out.usage.completion_tokens += 1;
        let bytes = vocab.token_to_piece(token, self.constrained && self.special, None);
        let (mut piece, hit) = self.assembler.push_bytes(&bytes);
        if self.probing {
            // Hold text back until its start shows whether it is the trigger.
            self.held.push_str(&piece);
            piece = String::new();
            self.probe.extend(vocab.token_to_piece(token, true, None));
            match tools::probe(&String::from_utf8_lossy(&self.probe), self.trigger) {
                Probe::Call => {
                    self.restart(core, ctx)?;
                    return Ok(Some(Step::Continue));
                }
                Probe::Text => {
                    self.probing = false;
                    piece = std::mem::take(&mut self.held);
                }
                Probe::Undecided => {}
            }
        }
        if self.constrained {
            piece.clear();
        }
        self.emit(piece);
        if self.cancelled() {
            return Ok(Some(Step::Finished(StopReason::Cancelled)));
        }
        if hit {
            return Ok(Some(Step::Finished(StopReason::StopSequence)));
        }
        let pos = self.n_past;
        self.n_past += 1;
        if self.n_past >= end || pos + 1 >= self.job.n_train {
            return Ok(Some(Step::Finished(StopReason::Length)));
        }
        self.pending = Some((token, pos as i32));
        Ok(Some(Step::Continue))
    }

    /// The answer starts with a tool call: forget the probe and decode again from the
    /// last prompt token, constrained by the grammar.
    fn restart(&mut self, core: &Core, ctx: &mut LlamaContext<'_>) -> Result<()> {
        self.probing = false;
        self.constrained = true;
        self.sampler = Self::sampler_for(core, &self.job, true)?;
        self.assembler = Self::assembler_for(&self.job, true);
        self.held.clear();
        self.probe.clear();
        self.out.usage.completion_tokens = 0;
        let last = self.n_prompt - 1;
        ctx.clear_kv_cache_seq(Some(self.seq_id as u32), Some(last), None)
            .map_err(kv_err)?;
        self.in_cells.truncate(last as usize);
        self.pending = Some((self.job.tokens[last as usize], last as i32));
        self.n_past = self.n_prompt;
        Ok(())
    }

    fn emit(&mut self, piece: String) {
        if !piece.is_empty()
            && !self.consumer_gone
            && self.job.relay.send(Relay::Text(piece)).is_err()
        {
            self.consumer_gone = true;
        }
    }

    /// Ends the generation: flushes held-back text, parses a constrained answer, saves
    /// the cells for prefix reuse, frees the seq id's cells and answers the caller.
    pub fn finish(mut self, core: &Core, ctx: &mut LlamaContext<'_>, reason: StopReason) {
        let reason = if self.cancelled() {
            StopReason::Cancelled
        } else {
            reason
        };
        // When the consumer stopped the stream the relay answers with exactly what it
        // received; otherwise any held-back tail is flushed.
        let consumer_stopped = self.consumer_gone || self.job.stop.is_cancelled();
        if !self.constrained && !consumer_stopped {
            let tail = if self.assembler.stopped() {
                std::mem::take(&mut self.held)
            } else {
                std::mem::take(&mut self.held) + &self.assembler.finish()
            };
            self.emit(tail);
        }
        self.out.text = self.assembler.text().to_owned();
        self.out.stop_reason = reason;
        let parsed = match (&self.job.plan, reason) {
            (Some(p), StopReason::Stop) if self.constrained => {
                p.format.parse(&self.out.text, p.first_id, false)
            }
            (Some(p), StopReason::Length) if self.constrained => {
                p.format.parse(&self.out.text, p.first_id, true)
            }
            _ => None,
        };
        if let Some(calls) = parsed {
            self.out.text.clear();
            self.out.stop_reason = StopReason::ToolUse;
            self.out.tool_calls = calls;
        }
        if self.job.request.cache.enabled {
            let cells = std::mem::take(&mut self.in_cells);
            core.save_prefix(ctx, self.seq_id, cells, self.job.request.cache.ttl);
        }
        let _ = ctx.clear_kv_cache_seq(Some(self.seq_id as u32), None, None);
        let out = std::mem::replace(&mut self.out, self.job.cancelled_result());
        self.job.reject(Ok(out));
    }

    /// Ends the generation with `error`, freeing its cells.
    pub fn fail(self, ctx: &mut LlamaContext<'_>, error: InferenceError) {
        let _ = ctx.clear_kv_cache_seq(Some(self.seq_id as u32), None, None);
        self.job.reject(Err(error));
    }
}
