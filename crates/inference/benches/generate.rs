//! Engine benchmark: SmolLM2 decode tokens/s and time to first token through
//! `InferenceEngine`, and MiniLM embeddings/s.
//!
//! Run: `eval "$(scripts/fetch-models)"; cargo bench -p car-inference --bench generate`
//! Env: `CAR_BENCH_THREADS` (default: all cores), `CAR_BENCH_RUNS` (default 3),
//! `CAR_BENCH_TOKENS` (default 128). Prints one `name: value` line per figure and a final
//! JSON line with all of them (the same keys `bench_llama_cpp_python.py` prints).
#![allow(clippy::print_stdout)]

mod common;

use std::time::Instant;

use car_inference::{CancelToken, GenerateRequest, StreamControl};
use car_test_harness::bench::{env_num, median, sentences, threads, STORY_PROMPT};

fn main() {
    let threads = threads();
    let runs = env_num("CAR_BENCH_RUNS", 3).max(1);
    let max_tokens = env_num("CAR_BENCH_TOKENS", 128);
    let (_home, engine) = common::engine(
        threads,
        &[
            ("smollm2", "CAR_TEST_GGUF"),
            ("minilm", "CAR_TEST_EMBED_DIR"),
        ],
    );

    // Cold load + warm-up, not measured.
    let load_started = Instant::now();
    let warm = GenerateRequest {
        prompt: Some("Hi".into()),
        max_tokens: Some(4),
        ..Default::default()
    };
    engine
        .generate(Some("smollm2"), &warm, &CancelToken::new(), None)
        .expect("warm-up");
    let load_ms = load_started.elapsed().as_secs_f64() * 1000.0;

    let mut decode = Vec::new();
    let mut ttft = Vec::new();
    let mut tokens = 0;
    for run in 0..runs {
        // Sampled (not greedy) so the model keeps writing instead of stopping early; the
        // seed keeps runs comparable with the llama-cpp-python script.
        let req = GenerateRequest {
            prompt: Some(STORY_PROMPT.into()),
            max_tokens: Some(max_tokens),
            temperature: Some(0.8),
            seed: Some(1234 + run),
            ..Default::default()
        };
        let mut first_piece: Option<Instant> = None;
        let mut pieces = 0u32;
        let mut cb = |_: &str| {
            first_piece.get_or_insert_with(Instant::now);
            pieces += 1;
            StreamControl::Continue
        };
        let started = Instant::now();
        let out = engine
            .generate(Some("smollm2"), &req, &CancelToken::new(), Some(&mut cb))
            .expect("generate");
        let ended = Instant::now();
        let first = first_piece.unwrap_or(ended);
        let after_first = ended.duration_since(first).as_secs_f64();
        let n = out.usage.completion_tokens.saturating_sub(1);
        if after_first > 0.0 && n > 0 {
            decode.push(f64::from(n) / after_first);
        }
        ttft.push(first.duration_since(started).as_secs_f64() * 1000.0);
        tokens = out.usage.completion_tokens;
        println!(
            "run {run}: {} prompt tokens, {} completion tokens, {} pieces, ttft {:.1} ms, {:.1} tok/s",
            out.usage.prompt_tokens,
            out.usage.completion_tokens,
            pieces,
            ttft.last().copied().unwrap_or(0.0),
            decode.last().copied().unwrap_or(0.0)
        );
    }

    let sentences = sentences();
    engine
        .embed(Some("minilm"), &sentences[..8])
        .expect("embed warm-up");
    let mut eps = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        engine.embed(Some("minilm"), &sentences).expect("embed");
        eps.push(sentences.len() as f64 / started.elapsed().as_secs_f64());
    }

    let decode_tps = median(decode);
    let ttft_ms = median(ttft);
    let embeds = median(eps);
    println!("threads: {threads}");
    println!("model_load_and_warmup_ms: {load_ms:.1}");
    println!("decode_tokens_per_s: {decode_tps:.1}");
    println!("time_to_first_token_ms: {ttft_ms:.1}");
    println!("embeddings_per_s: {embeds:.1}");
    println!(
        "{{\"engine\":\"car-inference\",\"threads\":{threads},\"completion_tokens\":{tokens},\"decode_tokens_per_s\":{decode_tps:.2},\"time_to_first_token_ms\":{ttft_ms:.2},\"embeddings_per_s\":{embeds:.2}}}"
    );
}
