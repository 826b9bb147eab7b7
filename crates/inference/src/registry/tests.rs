//! Unit tests for the registry on small crafted files (the real models are covered in
//! `tests/registry.rs`).

use super::*;
use crate::ErrorKind;

/// The smallest valid GGUF: header, no metadata, no tensors.
fn tiny_gguf(dir: &Path, name: &str) -> PathBuf {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn local(path: &Path, id: Option<&str>) -> RegisterRequest {
    RegisterRequest {
        id: id.map(str::to_owned),
        path: Some(path.to_path_buf()),
        ..Default::default()
    }
}

#[test]
fn registers_persists_and_reopens() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let gguf = tiny_gguf(home.path(), "Tiny Model.Q4.gguf");
    let reg = ModelRegistry::open(&models).unwrap();
    let entry = reg.register(&local(&gguf, None)).unwrap();
    assert_eq!(entry.id, "Tiny-Model.Q4");
    let ident = entry.identity();
    assert_eq!(ident.size, Some(24));
    assert_eq!(ident.sha256.as_deref().map(str::len), Some(64));

    let reopened = ModelRegistry::open(&models).unwrap();
    assert_eq!(reopened.list(), vec![entry.clone()]);
    assert_eq!(reopened.get("Tiny-Model.Q4").unwrap(), entry);
    // No temp files are left behind next to the registry.
    let names: Vec<_> = fs::read_dir(&models)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(REGISTRY_FILE)]);
}

#[test]
fn duplicate_ids_and_removal() {
    let home = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf(home.path(), "a.gguf");
    let reg = ModelRegistry::open(home.path().join("models")).unwrap();
    reg.register(&local(&gguf, Some("m1"))).unwrap();
    // Registering the same id again replaces the entry (CAR's rule).
    let (again, previous) = reg
        .register_replacing(&local(&gguf, Some("m1")), None)
        .unwrap();
    assert_eq!(again.id, "m1");
    assert_eq!(previous.map(|p| p.id).as_deref(), Some("m1"));
    assert_eq!(reg.list().len(), 1);
    assert_eq!(reg.remove("m1", None).unwrap().id, "m1");
    let err = reg.remove("m1", None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.to_string(), "model not found: m1");
    assert!(ModelRegistry::open(home.path().join("models"))
        .unwrap()
        .list()
        .is_empty());
}

#[test]
fn rejects_bad_ids() {
    for id in [
        "",
        ".hidden",
        "/abs",
        "a..b",
        "sp ace",
        "semi;colon",
        &"x".repeat(129),
    ] {
        let err = validate_id(id).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidParams, "{id:?}");
    }
    for id in ["smollm2", "org/model:q4", "a.b-c_d"] {
        validate_id(id).unwrap();
    }
}

#[test]
fn rejects_corrupt_and_missing_files() {
    let home = tempfile::tempdir().unwrap();
    let reg = ModelRegistry::open(home.path().join("models")).unwrap();
    let bad = home.path().join("bad.gguf");
    fs::write(&bad, b"NOPE and more bytes here").unwrap();
    let err = reg.register(&local(&bad, None)).unwrap_err();
    assert!(matches!(
        err,
        InferenceError::InvalidGguf {
            source: gguf::GgufError::BadMagic { .. },
            ..
        }
    ));
    assert_eq!(err.kind(), ErrorKind::InvalidParams);

    let err = reg
        .register(&local(&home.path().join("absent.gguf"), None))
        .unwrap_err();
    assert!(matches!(err, InferenceError::WeightsMissing { .. }));
    assert_eq!(err.kind(), ErrorKind::NotFound);

    let dir = home.path().join("emb");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("model.safetensors"), b"x").unwrap();
    let err = reg.register(&local(&dir, None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid embedding model {}: missing tokenizer.json",
            fs::canonicalize(&dir).unwrap().display()
        )
    );
    assert!(reg.list().is_empty());
}

#[test]
fn registers_remote_endpoints() {
    let home = tempfile::tempdir().unwrap();
    let reg = ModelRegistry::open(home.path().join("models")).unwrap();
    let entry = reg
        .register(&RegisterRequest {
            base_url: Some("http://127.0.0.1:9/v1/".into()),
            model: Some("gpt-4o-mini".into()),
            api_key_env: Some("OPENAI_API_KEY".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(entry.id, "gpt-4o-mini");
    assert_eq!(
        entry.source,
        ModelSource::Remote {
            base_url: "http://127.0.0.1:9".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            api_key_secret: None,
        }
    );
    assert_eq!(entry.identity().sha256, None);
    let json = serde_json::to_value(&entry).unwrap();
    assert_eq!(json["kind"], "remote");

    for (base, model, env, secret) in [
        ("ftp://x", Some("m"), None, None),
        ("http://x", None, None, None),
        ("http://x", Some("m"), Some("BAD-NAME"), None),
        ("http://x", Some("m"), Some("HOME"), None),
        ("http://x", Some("m"), Some("CAR_AUTH_TOKEN"), None),
        ("http://x", Some("m"), Some("aws_secret"), None),
        (
            "http://x",
            Some("m"),
            Some("OPENAI_API_KEY"),
            Some("openai"),
        ),
        ("http://x", Some("m"), None, Some("")),
    ] {
        let err = reg
            .register(&RegisterRequest {
                base_url: Some(base.into()),
                model: model.map(Into::into),
                api_key_env: env.map(Into::into),
                api_key_secret: secret.map(Into::into),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidParams, "{base} {model:?}");
    }
    assert_eq!(reg.list().len(), 1);
    let err = reg.register(&RegisterRequest::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid path: one of path or base_url is required"
    );
}

#[test]
fn corrupt_registry_file_is_reported() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    fs::create_dir_all(&models).unwrap();
    fs::write(models.join(REGISTRY_FILE), b"{not json").unwrap();
    let err = ModelRegistry::open(&models).unwrap_err();
    assert!(matches!(err, InferenceError::CorruptRegistry { .. }));
}

#[test]
fn registry_files_from_before_api_key_secret_still_load() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    fs::create_dir_all(&models).unwrap();
    // Written by an older build: no api_key_secret field, and an env var the current rule
    // would refuse at registration (the engine refuses to send it; see engine_tests).
    let old = r#"{"version": 1, "models": [
        {"id": "old", "kind": "remote", "base_url": "http://127.0.0.1:9", "model": "m",
         "api_key_env": "MY_KEY"}
    ]}"#;
    fs::write(models.join(REGISTRY_FILE), old).unwrap();
    let reg = ModelRegistry::open(&models).unwrap();
    let entry = reg.get("old").unwrap();
    assert_eq!(
        entry.source,
        ModelSource::Remote {
            base_url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key_env: Some("MY_KEY".into()),
            api_key_secret: None,
        }
    );
    // Rewriting the file (any registration) keeps the old entry as it was.
    reg.register(&RegisterRequest {
        id: Some("new".into()),
        base_url: Some("http://127.0.0.1:9".into()),
        model: Some("m".into()),
        api_key_secret: Some("svc/key".into()),
        ..Default::default()
    })
    .unwrap();
    let text = fs::read_to_string(models.join(REGISTRY_FILE)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["models"][1]["id"], "old");
    assert!(json["models"][1].get("api_key_secret").is_none(), "{text}");
    assert_eq!(json["models"][0]["api_key_secret"], "svc/key");
    assert_eq!(ModelRegistry::open(&models).unwrap().list().len(), 2);
}

#[test]
fn an_agent_replaces_and_removes_only_its_own_models() {
    let home = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf(home.path(), "a.gguf");
    let reg = ModelRegistry::open(home.path().join("models")).unwrap();
    reg.register(&local(&gguf, Some("host-model"))).unwrap();
    let (mine, _) = reg
        .register_replacing(&local(&gguf, Some("mine")), Some("agent-a"))
        .unwrap();
    assert_eq!(mine.owner.as_deref(), Some("agent-a"));
    for (id, agent) in [("host-model", "agent-a"), ("mine", "agent-b")] {
        let err = reg
            .register_replacing(&local(&gguf, Some(id)), Some(agent))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
        assert!(err.to_string().contains(agent), "{err}");
        let err = reg.remove(id, Some(agent)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    }
    // Nothing changed; the owner replaces and removes its own, the host manages all.
    assert_eq!(reg.get("host-model").unwrap().owner, None);
    reg.register_replacing(&local(&gguf, Some("mine")), Some("agent-a"))
        .unwrap();
    reg.remove("mine", Some("agent-a")).unwrap();
    reg.remove("host-model", None).unwrap();
    // The owner survives a reopen.
    reg.register_replacing(&local(&gguf, Some("kept")), Some("agent-a"))
        .unwrap();
    let reopened = ModelRegistry::open(home.path().join("models")).unwrap();
    assert_eq!(
        reopened.get("kept").unwrap().owner.as_deref(),
        Some("agent-a")
    );
}

#[cfg(unix)]
#[test]
fn fifos_devices_and_links_to_devices_are_refused_without_a_read() {
    let home = tempfile::tempdir().unwrap();
    let reg = ModelRegistry::open(home.path().join("models")).unwrap();
    let fifo = home.path().join("m.gguf");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let link = home.path().join("zero.gguf");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    for path in [fifo.as_path(), Path::new("/dev/zero"), link.as_path()] {
        // Would block forever (FIFO) or read forever (device) if opened plainly.
        let err = reg.register(&local(path, None)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidParams, "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    // An embedding directory whose weights are a link to a FIFO is refused too (by the
    // directory check's `stat`, or by the safe open if the link is swapped in after it).
    let dir = home.path().join("emb");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    fs::write(dir.join("config.json"), "{}").unwrap();
    std::os::unix::fs::symlink(&fifo, dir.join("model.safetensors")).unwrap();
    let err = reg.register(&local(&dir, None)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidParams, "{err}");
    assert!(reg.list().is_empty());
}
