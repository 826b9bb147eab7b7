//! Continuous batching: concurrent generations on one loaded model share one llama.cpp
//! context, each as its own sequence, decoded together one batch per step.
//!
//! Owns: the per-model scheduler thread and its shared context, which sequences run
//! (admission by free seq ids and KV cells), building each step's batch, and the one-off
//! context of a request too large for the shared one. Must not touch: what a sequence
//! does with its logits (`llama::seq`), or the caller's callback (`llama` relays).
//!
//! Shape:
//! - the shared context has `n_seq` sequences over one unified KV cache of `n_seq × seq_context`
//!   cells (each capped by the model's window). A request reserves the cells it may fill (prompt +
//!   `max_tokens`, or a restored prefix if longer) and is admitted, in arrival order, when a seq id
//!   is free and its cells fit; otherwise it waits in the scheduler's queue (a cancelled waiter is
//!   answered at once);
//! - each step, every decoding sequence adds the token it sampled last and prompting sequences add
//!   their next prompt chunk with the room left (at most [`PROMPT_BATCH`] tokens in all), so a new
//!   request's prompt is evaluated alongside the others' decode tokens; one `llama_decode` serves
//!   them all and each samples at its own batch index;
//! - a finished, failed or cancelled sequence saves its cells for prefix reuse (see
//!   `prefix_cache`), clears them (`llama_memory_seq_rm` on its seq id) and frees its id for the
//!   next waiter. A failed decode fails only the sequences in that batch;
//! - a request needing more cells than the whole shared context gets its own context (one sequence)
//!   on a thread of its own, as before batching;
//! - the thread ends once the model is dropped (its sender is gone) and nothing runs.
//!
//! The scheduler thread owns the context (`LlamaContext` is `Send`, not `Sync`); callers
//! never touch it, so no lock is held across decoding or the callers' callbacks.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;

use crate::error::{InferenceError, Result};
use crate::generate::StopReason;
use crate::llama::seq::{Job, Sequence, Step};
use crate::llama::{Core, PROMPT_BATCH};

/// A context with several sequences and the ones running in it.
pub(crate) struct Batcher<'m> {
    core: &'m Core,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    slots: Vec<Option<Sequence>>,
    /// KV cells of the context, and those reserved by running sequences.
    cells: u32,
    reserved: u32,
}

impl<'m> Batcher<'m> {
    /// A context of `cells` KV cells shared by up to `n_seq` sequences.
    pub fn new(core: &'m Core, n_seq: u32, cells: u32, threads: u32) -> Result<Self> {
        let ctx = core.context(cells, n_seq, threads)?;
        Ok(Self {
            core,
            ctx,
            batch: LlamaBatch::new(PROMPT_BATCH as usize, 1),
            slots: (0..n_seq.max(1)).map(|_| None).collect(),
            cells,
            reserved: 0,
        })
    }

    /// Whether no sequence is running.
    pub fn idle(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Starts `job` in a free sequence if its cells fit; gives it back otherwise.
    pub fn admit(&mut self, job: Box<Job>) -> std::result::Result<(), Box<Job>> {
        let Some(slot) = self.slots.iter().position(Option::is_none) else {
            return Err(job);
        };
        let need = job.cells();
        if self.reserved + need > self.cells {
            return Err(job);
        }
        let seq_id = slot as i32;
        let ids: Vec<i32> = job.tokens.iter().map(|t| t.0).collect();
        let hit = if job.request.cache.enabled {
            self.core
                .prefix
                .lookup(&ids, std::time::Instant::now())
                // Restoring needs room for every cell of the entry until the unshared
                // ones are dropped.
                .filter(|h| self.reserved + need.max(h.len as u32) <= self.cells)
        } else {
            None
        };
        let mut reserve = need;
        let reused = match hit {
            Some(h) => match self.ctx.state_seq_set(&h.state, seq_id) {
                Ok(()) => {
                    reserve = need.max(h.len as u32);
                    match self.ctx.clear_kv_cache_seq(
                        Some(seq_id as u32),
                        Some(h.reuse as u32),
                        None,
                    ) {
                        Ok(_) => h.reuse,
                        Err(e) => {
                            tracing::warn!(error = %e, "trimming a restored prefix failed; evaluating the whole prompt");
                            self.clear(seq_id);
                            0
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "restoring a cached prefix failed; evaluating the whole prompt");
                    self.clear(seq_id);
                    0
                }
            },
            None => 0,
        };
        match Sequence::start(self.core, job, seq_id, reserve, reused) {
            Ok(seq) => {
                self.reserved += reserve;
                self.slots[slot] = Some(seq);
            }
            Err((job, e)) => {
                self.clear(seq_id);
                job.reject(Err(e));
            }
        }
        Ok(())
    }

    fn clear(&mut self, seq_id: i32) {
        let _ = self.ctx.clear_kv_cache_seq(Some(seq_id as u32), None, None);
    }

    fn release(&mut self, slot: usize) -> Option<Sequence> {
        let seq = self.slots[slot].take()?;
        self.reserved -= seq.reserved;
        Some(seq)
    }

    /// One decode of every running sequence's next tokens.
    pub fn step(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].as_ref().is_some_and(Sequence::cancelled) {
                let seq = self.release(slot).expect("checked");
                seq.finish(self.core, &mut self.ctx, StopReason::Cancelled);
            }
        }
        self.batch.clear();
        let mut room = PROMPT_BATCH as usize;
        let mut in_batch = vec![false; self.slots.len()];
        // Decoding sequences first (one token each), then prompt chunks in the room left.
        for prompting in [false, true] {
            for (slot, used) in in_batch.iter_mut().enumerate() {
                let Some(seq) = self.slots[slot].as_mut() else {
                    continue;
                };
                if *used || seq.prompting() != prompting {
                    continue;
                }
                match seq.fill(&mut self.batch, room) {
                    Ok(n) => {
                        room -= n;
                        *used = n > 0;
                    }
                    Err(e) => {
                        let seq = self.release(slot).expect("present");
                        seq.fail(&mut self.ctx, e);
                    }
                }
            }
        }
        if self.batch.n_tokens() == 0 {
            return;
        }
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            let message = format!("decode failed: {e}");
            tracing::error!(error = %e, "batched decode failed");
            for (slot, used) in in_batch.iter().enumerate() {
                if *used {
                    if let Some(seq) = self.release(slot) {
                        seq.fail(&mut self.ctx, InferenceError::Engine(message.clone()));
                    }
                }
            }
            return;
        }
        for slot in 0..self.slots.len() {
            let Some(seq) = self.slots[slot].as_mut() else {
                continue;
            };
            match seq.on_logits(self.core, &mut self.ctx) {
                Ok(None | Some(Step::Continue)) => {}
                Ok(Some(Step::Finished(reason))) => {
                    let seq = self.release(slot).expect("present");
                    seq.finish(self.core, &mut self.ctx, reason);
                }
                Err(e) => {
                    let seq = self.release(slot).expect("present");
                    seq.fail(&mut self.ctx, e);
                }
            }
        }
    }
}

/// How a model's shared context is sized and run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub n_seq: u32,
    pub cells: u32,
    pub threads: u32,
}

/// The handle callers submit jobs through; dropping it ends the thread once idle.
pub(crate) struct Scheduler {
    tx: Sender<Box<Job>>,
}

impl Scheduler {
    /// Starts the scheduler thread of `core`'s model.
    pub fn spawn(core: Arc<Core>, shape: Shape) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("llama-batch".into())
            .spawn(move || run(&core, rx, shape))
            .map_err(|e| InferenceError::Engine(format!("starting the batch thread: {e}")))?;
        Ok(Self { tx })
    }

    /// Queues `job`; gives it back if the thread is gone.
    pub fn submit(&self, job: Box<Job>) -> std::result::Result<(), Box<Job>> {
        self.tx.send(job).map_err(|e| e.0)
    }
}

/// The scheduler thread: takes jobs, admits them in order, steps the batch.
fn run(core: &Core, rx: Receiver<Box<Job>>, shape: Shape) {
    let mut waiting: VecDeque<Box<Job>> = VecDeque::new();
    let mut batcher: Option<Batcher<'_>> = None;
    let mut open = true;
    loop {
        let idle = batcher.as_ref().is_none_or(Batcher::idle);
        if idle && waiting.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return,
            }
        }
        while open {
            match rx.try_recv() {
                Ok(job) => waiting.push_back(job),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        // A waiter cancelled before it started is answered now, not when a slot frees.
        waiting.retain_mut(|job| {
            if job.cancelled() {
                let done = job.cancelled_result();
                let _ = job.relay.send(crate::llama::seq::Relay::Done(Ok(done)));
                false
            } else {
                true
            }
        });
        if batcher.is_none() && !waiting.is_empty() {
            match Batcher::new(core, shape.n_seq, shape.cells, shape.threads) {
                Ok(b) => batcher = Some(b),
                Err(e) => {
                    tracing::error!(error = %e, "creating the shared context failed");
                    for job in waiting.drain(..) {
                        job.reject(Err(InferenceError::Engine(e.to_string())));
                    }
                    continue;
                }
            }
        }
        let Some(b) = batcher.as_mut() else {
            continue;
        };
        while let Some(job) = waiting.pop_front() {
            if let Err(job) = b.admit(job) {
                waiting.push_front(job);
                break;
            }
        }
        b.step();
    }
}

/// Runs `job` alone in a context of its own, sized to it.
pub(crate) fn run_solo(core: &Core, job: Box<Job>, threads: u32) {
    let cells = job.cells();
    let mut batcher = match Batcher::new(core, 1, cells, threads) {
        Ok(b) => b,
        Err(e) => return job.reject(Err(e)),
    };
    if let Err(job) = batcher.admit(job) {
        return job.reject(Err(InferenceError::Engine(
            "a one-off context has no room for its request".into(),
        )));
    }
    while !batcher.idle() {
        batcher.step();
    }
}
