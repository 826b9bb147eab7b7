//! Shared helpers for the integration tests: the real test models and an engine over a
//! temporary `CAR_HOME`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use car_inference::{EngineConfig, InferenceEngine, LlamaConfig, RegisterRequest};

/// Id the SmolLM2 GGUF is registered under.
pub const GGUF_ID: &str = "smollm2";
/// Id the MiniLM embedding model is registered under.
pub const EMBED_ID: &str = "minilm";

fn model_path(var: &str) -> PathBuf {
    let hint = "run `eval \"$(scripts/fetch-models)\"` from the repository root first";
    let Some(p) = std::env::var_os(var) else {
        panic!("{var} is not set: {hint}");
    };
    let p = PathBuf::from(p);
    assert!(p.exists(), "{var}={} does not exist: {hint}", p.display());
    p
}

/// `SmolLM2-135M-Instruct.Q4_1.gguf`, from `CAR_TEST_GGUF`.
pub fn gguf_path() -> PathBuf {
    model_path("CAR_TEST_GGUF")
}

/// The all-MiniLM-L6-v2 directory, from `CAR_TEST_EMBED_DIR`.
pub fn embed_dir() -> PathBuf {
    model_path("CAR_TEST_EMBED_DIR")
}

/// Threads for llama.cpp in tests (`CAR_TEST_THREADS`, default 2).
pub fn threads() -> u32 {
    std::env::var("CAR_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// An engine over a fresh temporary `CAR_HOME`, with both test models registered.
pub fn engine() -> (tempfile::TempDir, InferenceEngine) {
    engine_with(|_| {})
}

/// Like `engine`, with a chance to adjust the configuration first.
pub fn engine_with(adjust: impl FnOnce(&mut EngineConfig)) -> (tempfile::TempDir, InferenceEngine) {
    let home = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(home.path());
    config.llama = LlamaConfig {
        n_threads: threads(),
        ..LlamaConfig::default()
    };
    adjust(&mut config);
    let engine = InferenceEngine::open(config).unwrap();
    engine
        .register(&RegisterRequest {
            id: Some(GGUF_ID.into()),
            path: Some(gguf_path()),
            ..Default::default()
        })
        .unwrap();
    engine
        .register(&RegisterRequest {
            id: Some(EMBED_ID.into()),
            path: Some(embed_dir()),
            ..Default::default()
        })
        .unwrap();
    (home, engine)
}

/// Serialises the tests of a test binary that generate locally: each test loads its own
/// model, whose llama.cpp context has its own spinning thread pool, and on 2 cores several
/// of them make each token take seconds; the tests assert no speed, but they need not be
/// that slow. (Concurrency within one model is batched; `batching.rs` tests it.)
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a test waits for something that must happen before declaring it never will.
/// A hang guard, not a speed bound: nothing asserts how much of it was used.
pub const SAFETY: Duration = Duration::from_secs(60);

/// The result of a closure running on its own detached thread.
pub struct Detached<T>(mpsc::Receiver<T>);

/// Runs `f` on a detached thread, so that an `f` that never returns (the bug a test is
/// looking for) fails the test after [`SAFETY`] instead of hanging it.
pub fn detached<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Detached<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    Detached(rx)
}

impl<T> Detached<T> {
    /// `f`'s result; panics naming `what` if it has not returned within [`SAFETY`].
    pub fn wait(self, what: &str) -> T {
        match self.0.recv_timeout(SAFETY) {
            Ok(v) => v,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{what}: not done after {SAFETY:?} (a hang guard, not a speed bound)")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the thread panicked"),
        }
    }
}
