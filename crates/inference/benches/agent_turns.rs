//! Agent-conversation benchmark: time to first token at each turn of a tool-calling
//! conversation on SmolLM2, as an agent loop sends it (the whole conversation again, one
//! tool call and its result longer each turn), with KV prefix reuse against a cold prefill
//! of the same context (`cache_control: false`).
//!
//! Run: `eval "$(scripts/fetch-models)"; cargo bench -p car-inference --bench agent_turns`
//! (or `scripts/bench-agent-turns`, which adds llama-cpp-python on the same prompts).
//! Env: `CAR_BENCH_THREADS` (default: all cores), `CAR_BENCH_TURNS` (default 10),
//! `CAR_BENCH_RUNS` (default 3; each run is a fresh engine, so turn 1 is always cold),
//! `CAR_BENCH_PROMPTS` (a path: each turn's rendered prompt is written there as JSON, for
//! `crates/inference/bench_agent_turns_llama_cpp_python.py`). Prints one line per turn and a final
//! JSON line with the per-turn medians.
#![allow(clippy::print_stdout)]

mod common;

use car_inference::{
    CacheHint, CancelToken, GenerateRequest, InferenceEngine, Message, ToolCall, ToolChoice,
    ToolSpec,
};
use car_test_harness::bench::{env_num, median, threads};
use serde_json::json;

/// Tokens generated per turn: only the first one is timed.
const MAX_TOKENS: u32 = 8;

fn tools() -> Vec<ToolSpec> {
    let lookup = json!({
        "name": "lookup_item",
        "description": "Look up one inventory item by its SKU: name, stock, warehouse and notes.",
        "parameters": {"type": "object", "properties": {
            "sku": {"type": "string", "description": "The item's SKU, such as A-104."}
        }, "required": ["sku"]}
    });
    let finish = json!({
        "name": "finish",
        "description": "Return the final answer to the user and stop.",
        "parameters": {"type": "object", "properties": {
            "answer": {"type": "string"}
        }, "required": ["answer"]}
    });
    [lookup, finish]
        .into_iter()
        .map(|t| serde_json::from_value(t).expect("tool schema"))
        .collect()
}

/// The conversation as of turn `turn` (1-based): the goal, then `turn - 1` tool calls and
/// their results.
fn conversation(turn: u32) -> Vec<Message> {
    let mut messages = vec![Message::new(
        "user",
        "Check the stock of items A-101 to A-110, one lookup at a time, then report which are below ten units.",
    )];
    for k in 1..turn {
        let id = format!("call_{k}");
        let sku = format!("A-{}", 100 + k);
        messages.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(&id, "lookup_item", json!({"sku": sku}))],
        ));
        messages.push(Message::tool_result(
            id,
            json!({
                "sku": sku,
                "name": format!("Widget model {k}, brushed steel, {} mm", 20 + k * 5),
                "stock": (k * 7) % 23,
                "warehouse": if k % 2 == 0 { "north" } else { "south" },
                "notes": "Reorder from the usual supplier; lead time is about two weeks, and partial shipments are accepted."
            })
            .to_string(),
        ));
    }
    messages
}

fn request(turn: u32, cache: bool) -> GenerateRequest {
    GenerateRequest {
        system: Some("You are an inventory agent. Use the tools to answer; call finish with the answer when done.".into()),
        messages: Some(conversation(turn)),
        max_tokens: Some(MAX_TOKENS),
        temperature: Some(0.0),
        tools: tools(),
        tool_choice: Some(ToolChoice::Auto),
        cache: CacheHint {
            enabled: cache,
            ..CacheHint::default()
        },
        ..Default::default()
    }
}

fn engine(threads: u32) -> (tempfile::TempDir, InferenceEngine) {
    let (home, engine) = common::engine(threads, &[("smollm2", "CAR_TEST_GGUF")]);
    // Load the model outside the timed turns.
    engine
        .generate(
            None,
            &GenerateRequest {
                prompt: Some("Hi".into()),
                max_tokens: Some(1),
                cache: CacheHint {
                    enabled: false,
                    ..CacheHint::default()
                },
                ..Default::default()
            },
            &CancelToken::new(),
            None,
        )
        .expect("warm-up");
    (home, engine)
}

fn ttft(engine: &InferenceEngine, req: &GenerateRequest) -> (f64, u32, u32) {
    let out = engine
        .generate(None, req, &CancelToken::new(), None)
        .expect("generate");
    (
        out.time_to_first_token_ms.expect("a first token") as f64,
        out.usage.prompt_tokens + out.usage.cache_read_tokens,
        out.usage.cache_read_tokens,
    )
}

fn main() {
    let threads = threads();
    let turns = env_num("CAR_BENCH_TURNS", 10).max(1);
    let runs = env_num("CAR_BENCH_RUNS", 3).max(1);
    println!("threads: {threads}, turns: {turns}, runs: {runs}");

    if let Ok(path) = std::env::var("CAR_BENCH_PROMPTS") {
        let (_home, engine) = engine(threads);
        let prompts: Vec<String> = (1..=turns)
            .map(|t| {
                engine
                    .rendered_prompt(None, &request(t, true))
                    .expect("render")
            })
            .collect();
        let doc = json!({"prompts": prompts, "threads": threads, "max_tokens": MAX_TOKENS});
        std::fs::write(&path, doc.to_string()).expect("write prompts");
    }

    let mut warm = vec![Vec::new(); turns as usize];
    let mut cold = vec![Vec::new(); turns as usize];
    let mut sizes = vec![(0, 0); turns as usize];
    for _ in 0..runs {
        let (_home, engine) = engine(threads);
        for t in 1..=turns {
            let i = (t - 1) as usize;
            // The agent's turn, reusing what the previous turn left in the cache, then a
            // cold prefill of the same context (which neither reads nor saves).
            let (w, prompt, reused) = ttft(&engine, &request(t, true));
            let (c, _, _) = ttft(&engine, &request(t, false));
            warm[i].push(w);
            cold[i].push(c);
            sizes[i] = (prompt, reused);
        }
    }
    let mut rows = Vec::new();
    for (i, (w, c)) in warm.into_iter().zip(cold).enumerate() {
        let (w, c) = (median(w), median(c));
        let (prompt, reused) = sizes[i];
        println!(
            "turn {:>2}: prompt {prompt:>5} tokens ({reused:>5} reused)  ttft reuse {w:>7.1} ms  cold {c:>7.1} ms  ratio {:.3}",
            i + 1,
            w / c
        );
        rows.push(
            json!({"turn": i + 1, "prompt_tokens": prompt, "reused_tokens": reused,
            "ttft_reuse_ms": w, "ttft_cold_ms": c}),
        );
    }
    println!(
        "{}",
        json!({"engine": "car-inference", "threads": threads, "turns": rows})
    );
}
