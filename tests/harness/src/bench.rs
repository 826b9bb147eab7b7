//! Shared pieces of the inference benchmarks (`car-inference`'s `generate`, `car-server`'s
//! `infer_socket`): their settings from the environment, the median they report, and the
//! texts they embed, so both measure the same thing the same way.

use std::path::PathBuf;

/// A model path from `var` (set by `eval "$(scripts/fetch-models)"`); panics naming the
/// variable when it is missing.
pub fn env_path(var: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(var).unwrap_or_else(|| {
        panic!("{var} is not set: run `eval \"$(scripts/fetch-models)\"` first")
    }))
}

/// A number from `var`, or `default` when it is unset or not a number.
pub fn env_num(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `CAR_BENCH_THREADS`, defaulting to every core.
pub fn threads() -> u32 {
    env_num(
        "CAR_BENCH_THREADS",
        std::thread::available_parallelism().map_or(2, |n| n.get() as u32),
    )
}

/// The median (the upper one of an even count); 0 for no samples.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The 256 sentences the embedding figures are measured on.
pub fn sentences() -> Vec<String> {
    (0..256)
        .map(|i| {
            format!(
                "This is benchmark sentence number {i}, about topic {}.",
                i % 17
            )
        })
        .collect()
}

/// The prompt the generation figures are measured on (also in
/// `crates/inference/bench_llama_cpp_python.py`).
pub const STORY_PROMPT: &str = "Write a long story about a dragon who learns to read.";
