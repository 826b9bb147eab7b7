//! Continuous batching on the real SmolLM2-135M-Instruct GGUF: concurrent generations on
//! one model run as sequences of one shared context and are decoded together, yet each
//! answers exactly as it would alone, a cancelled one frees its sequence for a waiting
//! request, and prefix reuse works per sequence. (How much throughput batching adds is a
//! benchmark, `daemon/benches/infer_socket.rs`, not a test.)

mod common;

use std::sync::{Arc, Mutex};

use car_inference::{
    CacheHint, CancelToken, GenerateRequest, GenerateResult, InferenceEngine, Message, StopReason,
    StreamControl,
};
use common::{detached, engine, engine_with, GGUF_ID};

fn ask(prompt: &str, max_tokens: u32, cache: bool) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(prompt.into()),
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        cache: CacheHint {
            enabled: cache,
            ..CacheHint::default()
        },
        ..Default::default()
    }
}

/// Which stream each piece came from, in arrival order.
type Log = Arc<Mutex<Vec<usize>>>;

fn run_logged(
    engine: &InferenceEngine,
    req: &GenerateRequest,
    who: usize,
    log: &Log,
    cancel: &CancelToken,
) -> GenerateResult {
    let mut on_piece = |_: &str| {
        log.lock().unwrap().push(who);
        StreamControl::Continue
    };
    engine
        .generate(Some(GGUF_ID), req, cancel, Some(&mut on_piece))
        .unwrap()
}

/// Whether some stream's pieces arrived on both sides of another stream's piece.
fn interleaved(log: &[usize]) -> bool {
    log.iter().enumerate().any(|(i, a)| {
        log[i + 1..]
            .iter()
            .position(|b| b != a)
            .is_some_and(|j| log[i + 1 + j..].contains(a))
    })
}

/// Waits for `cond`; panics naming `what` after [`common::SAFETY`] (a hang guard, not a
/// speed bound).
fn until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < common::SAFETY, "{what}: never happened");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Words the 135M model repeats back under greedy decoding when asked to.
const WORDS: [&str; 4] = ["banana", "elephant", "guitar", "pumpkin"];

#[test]
fn concurrent_greedy_generations_answer_as_each_would_alone() {
    let _serial = common::serial();
    let (_home, engine) = engine();
    let requests: Vec<_> = WORDS
        .iter()
        .map(|w| ask(&format!("Repeat this word exactly: {w}"), 24, false))
        .collect();
    let alone: Vec<GenerateResult> = requests
        .iter()
        .map(|r| {
            engine
                .generate(Some(GGUF_ID), r, &CancelToken::new(), None)
                .unwrap()
        })
        .collect();
    let log: Log = Arc::default();
    let together: Vec<GenerateResult> = std::thread::scope(|s| {
        let handles: Vec<_> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (engine, log) = (&engine, &log);
                s.spawn(move || run_logged(engine, r, i, log, &CancelToken::new()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Not compared byte for byte: llama.cpp's CPU kernels may round differently with other
    // sequences in the batch, which can flip a near-tie under greedy decoding. What must
    // hold: each answer is its own prompt's (its word, none of the others'), read from the
    // same prompt tokens, and ends on its own.
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        let word = WORDS[i];
        assert!(
            a.text.to_lowercase().contains(word),
            "{word} alone: {:?}",
            a.text
        );
        let text = t.text.to_lowercase();
        assert!(text.contains(word), "{word} batched: {:?}", t.text);
        for other in WORDS.iter().filter(|w| **w != word) {
            assert!(
                !text.contains(other),
                "{word}'s answer mentions {other}: {text:?}"
            );
        }
        assert_eq!(t.usage.prompt_tokens, a.usage.prompt_tokens, "{word}");
        assert!(
            matches!(t.stop_reason, StopReason::Stop | StopReason::Length),
            "{word}: {:?}",
            t.stop_reason
        );
    }
    let log = log.lock().unwrap();
    assert!(
        interleaved(&log),
        "the four streams never overlapped: {log:?}"
    );
}

#[test]
fn a_cancelled_sequence_frees_its_slot_for_a_waiting_request() {
    let _serial = common::serial();
    let (_home, engine) = engine_with(|c| c.llama.n_seq = 2);
    let engine = Arc::new(engine);
    let log: Log = Arc::default();
    let long = ask("Count from 1 to 300, one number per line.", 400, false);
    let short = ask("What is the capital of France?", 8, false);
    let cancel_a = CancelToken::new();
    let start = |who: usize, req: &GenerateRequest, cancel: &CancelToken| {
        let (engine, log, req, cancel) = (engine.clone(), log.clone(), req.clone(), cancel.clone());
        detached(move || run_logged(&engine, &req, who, &log, &cancel))
    };
    let a = start(0, &long, &cancel_a);
    let b = start(1, &long, &CancelToken::new());
    // Both sequences are decoding before the third request arrives.
    let seen = |who: usize| log.lock().unwrap().contains(&who);
    until("both long requests stream", || seen(0) && seen(1));
    let c = start(2, &short, &CancelToken::new());
    // With both sequences busy, the third request waits: nothing of it has arrived
    // while the first two keep streaming.
    let pieces = |who: usize| log.lock().unwrap().iter().filter(|w| **w == who).count();
    let before = pieces(0);
    until("the first request streams on", || pieces(0) >= before + 4);
    assert_eq!(
        pieces(2),
        0,
        "a third request ran beside two full sequences"
    );
    let cancelled_at = {
        let mut log = log.lock().unwrap();
        cancel_a.cancel();
        log.push(usize::MAX);
        log.len()
    };
    let c = c.wait("the waiting request");
    assert_ne!(c.stop_reason, StopReason::Cancelled, "{c:?}");
    assert!(c.text.contains("Paris"), "{c:?}");
    let a = a.wait("the cancelled request");
    assert_eq!(a.stop_reason, StopReason::Cancelled);
    let b = b.wait("the other request");
    assert_ne!(b.stop_reason, StopReason::Cancelled);
    let log = log.lock().unwrap();
    let first_c = log.iter().position(|w| *w == 2).expect("c streamed");
    assert!(first_c >= cancelled_at, "c started before a slot was free");
}

/// Two conversations sharing a long system prompt run concurrently twice: the second time
/// each restores its own saved sequence into its own seq id (evaluating only its last
/// prompt token) and still answers its own question. (Whether a reused prefix answers
/// exactly as a cold prefill is `prefix_reuse.rs`'s test; across batches of different
/// sizes llama.cpp's kernels may round a near-tie differently.)
#[test]
fn prefix_reuse_works_per_sequence() {
    let _serial = common::serial();
    let (_home, engine) = engine();
    let system = "You are a helpful assistant. You answer briefly, politely and exactly as asked.";
    let conversation = |word: &str| GenerateRequest {
        system: Some(system.into()),
        messages: Some(vec![Message::new(
            "user",
            format!("Repeat this word exactly: {word}"),
        )]),
        max_tokens: Some(16),
        temperature: Some(0.0),
        ..Default::default()
    };
    let words = ["banana", "guitar"];
    let run_both = |engine: &InferenceEngine| -> Vec<GenerateResult> {
        std::thread::scope(|s| {
            let handles: Vec<_> = words
                .iter()
                .map(|w| {
                    let req = conversation(w);
                    s.spawn(move || {
                        engine
                            .generate(Some(GGUF_ID), &req, &CancelToken::new(), None)
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let first = run_both(&engine);
    let again = run_both(&engine);
    for (i, (f, a)) in first.iter().zip(&again).enumerate() {
        let whole = f.usage.prompt_tokens + f.usage.cache_read_tokens;
        assert_eq!(a.usage.prompt_tokens, 1, "{:?}", a.usage);
        assert_eq!(a.usage.cache_read_tokens, whole - 1);
        let text = a.text.to_lowercase();
        assert!(text.contains(words[i]), "{}: {:?}", words[i], a.text);
        assert!(!text.contains(words[1 - i]), "{}: {:?}", words[i], a.text);
    }
}
