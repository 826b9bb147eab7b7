//! Registry identity, persistence, corrupt files and the model cache with the real models.

mod common;

use std::fs;
use std::io::Write;

use car_inference::gguf::GgufError;
use car_inference::{
    CancelToken, EngineConfig, ErrorKind, GenerateRequest, InferenceEngine, InferenceError,
    ModelRegistry, RegisterRequest,
};
use common::{embed_dir, engine, engine_with, gguf_path, EMBED_ID, GGUF_ID};
use sha2::{Digest, Sha256};

fn sha256_of(path: &std::path::Path) -> String {
    hex::encode(Sha256::digest(fs::read(path).unwrap()))
}

fn local(id: &str, path: &std::path::Path) -> RegisterRequest {
    RegisterRequest {
        id: Some(id.into()),
        path: Some(path.to_path_buf()),
        ..Default::default()
    }
}

#[test]
fn identity_is_the_weights_hash_and_survives_reopening() {
    let (home, engine) = engine();
    let gguf = engine.registry().get(GGUF_ID).unwrap().identity();
    assert_eq!(
        gguf.sha256.as_deref(),
        Some(sha256_of(&gguf_path()).as_str())
    );
    assert_eq!(gguf.size, Some(fs::metadata(gguf_path()).unwrap().len()));
    let emb = engine.registry().get(EMBED_ID).unwrap().identity();
    let weights = embed_dir().join("model.safetensors");
    assert_eq!(emb.sha256.as_deref(), Some(sha256_of(&weights).as_str()));

    let listed: Vec<_> = engine.list().iter().map(|e| e.identity()).collect();
    assert_eq!(listed, vec![emb.clone(), gguf.clone()]);
    drop(engine);
    let reopened = ModelRegistry::open(home.path().join("models")).unwrap();
    let relisted: Vec<_> = reopened.list().iter().map(|e| e.identity()).collect();
    assert_eq!(relisted, listed);

    // The persisted JSON is the models.list shape.
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(home.path().join("models/registry.json")).unwrap())
            .unwrap();
    assert_eq!(json["models"][1]["kind"], "gguf");
    assert_eq!(json["models"][1]["sha256"], gguf.sha256.unwrap());
}

/// Acceptance 8 (engine side): corrupt GGUF files get precise errors and never reach
/// llama.cpp.
#[test]
fn corrupt_gguf_files_are_rejected_precisely() {
    let (home, engine) = engine();
    let real = fs::read(gguf_path()).unwrap();

    let truncated = home.path().join("truncated.gguf");
    fs::write(&truncated, &real[..real.len() / 2]).unwrap();
    let err = engine.register(&local("t", &truncated)).unwrap_err();
    assert!(
        matches!(
            &err,
            InferenceError::InvalidGguf {
                source: GgufError::TensorOutOfBounds { .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::InvalidParams);

    // Cut inside the metadata: the declared tensor count no longer fits what is left.
    let header_only = home.path().join("header.gguf");
    fs::write(&header_only, &real[..1000]).unwrap();
    let err = engine.register(&local("h", &header_only)).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("tensor count 272 cannot fit in the 976 bytes left"),
        "{err}"
    );

    // Cut inside the tokenizer vocabulary array: its declared 49,152 entries cannot fit
    // in what is left, which is refused before any entry is read.
    let mid_metadata = home.path().join("mid.gguf");
    fs::write(&mid_metadata, &real[..200_000]).unwrap();
    let err = engine.register(&local("mid", &mid_metadata)).unwrap_err();
    assert!(
        matches!(
            &err,
            InferenceError::InvalidGguf {
                source: GgufError::CountTooLarge {
                    what: "array element",
                    count: 49152,
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("array element count 49152 cannot fit in the 198893 bytes left"),
        "{err}"
    );

    let mut wrong = real[..4096].to_vec();
    wrong[..4].copy_from_slice(b"LMAO");
    let wrong_magic = home.path().join("magic.gguf");
    fs::write(&wrong_magic, &wrong).unwrap();
    let err = engine.register(&local("m", &wrong_magic)).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("bad magic \"LMAO\", expected \"GGUF\""),
        "{err}"
    );

    // Absurd tensor count in an otherwise real header.
    let mut absurd = real[..4096].to_vec();
    absurd[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let absurd_path = home.path().join("absurd.gguf");
    fs::write(&absurd_path, &absurd).unwrap();
    let err = engine.register(&local("a", &absurd_path)).unwrap_err();
    assert!(
        matches!(
            &err,
            InferenceError::InvalidGguf {
                source: GgufError::CountTooLarge { what: "tensor", .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(engine.list().len(), 2);
}

/// A file that was valid at registration but is replaced by a corrupt one is caught before
/// llama.cpp loads it, and a deleted one is reported as missing.
#[test]
fn weights_changed_or_missing_after_registration() {
    let (home, engine) = engine();
    let copy = home.path().join("copy.gguf");
    fs::copy(gguf_path(), &copy).unwrap();
    engine.register(&local("copy", &copy)).unwrap();
    let req = GenerateRequest {
        prompt: Some("hi".into()),
        max_tokens: Some(2),
        ..Default::default()
    };

    let mut f = fs::OpenOptions::new().append(true).open(&copy).unwrap();
    f.write_all(b"junk").unwrap();
    drop(f);
    let err = engine
        .generate(Some("copy"), &req, &CancelToken::new(), None)
        .unwrap_err();
    assert!(
        matches!(err, InferenceError::WeightsChanged { .. }),
        "{err}"
    );

    fs::remove_file(&copy).unwrap();
    let err = engine
        .generate(Some("copy"), &req, &CancelToken::new(), None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.to_string(),
        format!("model file not found: {}", copy.display())
    );
    // Removing the id works even though its file is gone.
    engine.remove("copy").unwrap();
}

/// A structurally valid GGUF that is not a usable model: llama.cpp refuses it with an
/// error, not a crash.
#[test]
fn a_valid_but_empty_gguf_fails_to_load_cleanly() {
    let (home, engine) = engine();
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let empty = home.path().join("empty.gguf");
    fs::write(&empty, bytes).unwrap();
    engine.register(&local("empty", &empty)).unwrap();
    let err = engine
        .generate(
            Some("empty"),
            &GenerateRequest {
                prompt: Some("hi".into()),
                ..Default::default()
            },
            &CancelToken::new(),
            None,
        )
        .unwrap_err();
    assert!(matches!(err, InferenceError::Engine(_)), "{err}");
    assert_eq!(err.kind(), ErrorKind::Internal);
}

#[test]
fn cache_evicts_least_recently_used_beyond_the_budget() {
    // A budget smaller than the two models together: loading one evicts the other.
    let gguf_size = fs::metadata(gguf_path()).unwrap().len();
    let (_home, engine) = engine_with(|c: &mut EngineConfig| c.memory_budget = gguf_size + 1);
    engine.tokenize(Some(GGUF_ID), "hello").unwrap();
    assert_eq!(engine.loaded_models(), vec![GGUF_ID.to_owned()]);
    engine.embed(Some(EMBED_ID), &["hello".into()]).unwrap();
    assert_eq!(engine.loaded_models(), vec![EMBED_ID.to_owned()]);
    engine.tokenize(Some(GGUF_ID), "hello").unwrap();
    assert_eq!(engine.loaded_models(), vec![GGUF_ID.to_owned()]);
    // Removing a model drops it from the cache.
    engine.remove(GGUF_ID).unwrap();
    assert!(engine.loaded_models().is_empty());
}

#[test]
fn engine_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<InferenceEngine>();
    assert_send_sync::<CancelToken>();
}
