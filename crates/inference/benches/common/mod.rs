//! What the engine benchmarks share: an engine over a temporary `CAR_HOME` with the test
//! models registered.
#![allow(dead_code)]

use car_inference::{EngineConfig, InferenceEngine, LlamaConfig, RegisterRequest};
use car_test_harness::bench::env_path;

/// An engine with `threads` llama.cpp threads and each `(id, env var naming the model
/// path)` registered; the directory lives as long as the returned guard.
pub fn engine(threads: u32, models: &[(&str, &str)]) -> (tempfile::TempDir, InferenceEngine) {
    let home = tempfile::tempdir().expect("temp dir");
    let mut config = EngineConfig::new(home.path());
    config.llama = LlamaConfig {
        n_threads: threads,
        ..LlamaConfig::default()
    };
    let engine = InferenceEngine::open(config).expect("engine");
    for (id, var) in models {
        engine
            .register(&RegisterRequest {
                id: Some((*id).into()),
                path: Some(env_path(var)),
                ..Default::default()
            })
            .expect("register");
    }
    (home, engine)
}
