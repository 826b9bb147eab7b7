//! Which key a remote endpoint sends and what of a provider's error reaches the caller,
//! end to end through the engine against a scripted local HTTP server.

use std::sync::Mutex;
use std::time::Duration;

use car_test_harness::http_script::{Reply, Server};
use serde_json::json;

use super::*;
use crate::ErrorKind;

/// Read from `CAR_HOME/env` (never set in the process environment).
const ENV_VAR: &str = "CAR_INFERENCE_UNIT_API_KEY";
const ENV_KEY: &str = "sk-env-unit-0b1c2d3e4f";
const SECRET: &str = "llm/provider";
const SECRET_KEY: &str = "sk-secret-unit-9f8e7d6c5b";

fn config(home: &Path) -> EngineConfig {
    std::fs::write(home.join("env"), format!("{ENV_VAR}={ENV_KEY}\n")).unwrap();
    let mut config = EngineConfig::new(home);
    config.remote = RemoteConfig {
        max_retries: 0,
        ..RemoteConfig::default()
    };
    config
}

fn remote(server: &Server, env: Option<&str>, secret: Option<&str>) -> RegisterRequest {
    RegisterRequest {
        id: Some("remote".into()),
        base_url: Some(server.base_url.clone()),
        model: Some("m".into()),
        api_key_env: env.map(Into::into),
        api_key_secret: secret.map(Into::into),
        ..Default::default()
    }
}

/// An engine whose secret lookup knows `SECRET` and records every name it is asked for.
fn engine_with_secrets(home: &Path) -> (InferenceEngine, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let mut config = config(home);
    config.secret_lookup = Some(Arc::new(move |name: &str| {
        seen.lock().unwrap().push(name.to_owned());
        (name == SECRET).then(|| Redacted::new(SECRET_KEY.to_owned()))
    }));
    (InferenceEngine::open(config).unwrap(), asked)
}

fn prompt() -> GenerateRequest {
    GenerateRequest {
        prompt: Some("hi".into()),
        max_tokens: Some(5),
        ..Default::default()
    }
}

fn infer(engine: &InferenceEngine) -> Result<GenerateResult> {
    engine.generate(Some("remote"), &prompt(), &CancelToken::new(), None)
}

fn ok_reply() -> Reply {
    Reply::json(
        200,
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}),
    )
}

fn html(status: u16, body: &str) -> Reply {
    Reply {
        status,
        headers: vec![("content-type", "text/html".into())],
        chunks: vec![(Duration::ZERO, body.as_bytes().to_vec())],
        streamed: false,
    }
}

#[test]
fn registration_refuses_keys_outside_the_rules() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start(vec![]);
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    for var in [
        "HOME",
        "CAR_AUTH_TOKEN",
        "aws_secret",
        "AWS_SECRET_ACCESS_KEY",
        "PATH",
    ] {
        let err = engine
            .register(&remote(&server, Some(var), None))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidParams, "{var}");
        assert_eq!(
            err.to_string(),
            format!(
                "invalid api_key_env: {var:?} is refused: it must name a variable ending in \
                 _API_KEY (^[A-Z][A-Z0-9_]*_API_KEY$), or use api_key_secret"
            )
        );
    }
    let err = engine
        .register(&remote(&server, Some(ENV_VAR), Some(SECRET)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid api_key_secret: give either api_key_env or api_key_secret"
    );
    let err = engine
        .register(&remote(&server, None, Some("bad\u{7}name")))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid api_key_secret: must not contain control characters"
    );
    assert!(engine.list().is_empty());
    assert!(server.requests().is_empty());

    // What the rules allow registers, and an entry without a secret is stored as before.
    let entry = engine
        .register(&remote(&server, Some(ENV_VAR), None))
        .unwrap();
    let json = serde_json::to_value(&entry).unwrap();
    assert_eq!(json["api_key_env"], ENV_VAR);
    assert!(json.get("api_key_secret").is_none(), "{json}");
    let entry = engine
        .register(&remote(&server, None, Some(SECRET)))
        .unwrap();
    assert_eq!(
        serde_json::to_value(&entry).unwrap()["api_key_secret"],
        SECRET
    );
}

#[test]
fn an_old_entry_naming_any_env_var_loads_but_its_key_is_never_sent() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start(vec![ok_reply()]);
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    // A registry written before the rule (and before api_key_secret existed); HOME is set
    // in every test process, so only the refusal keeps its value from being sent.
    let old = json!({"version": 1, "models": [
        {"id": "remote", "kind": "remote", "base_url": server.base_url, "model": "m", "api_key_env": "HOME"},
        {"id": "keyless", "kind": "remote", "base_url": server.base_url, "model": "m", "api_key_env": null},
    ]});
    std::fs::write(models.join(crate::registry::REGISTRY_FILE), old.to_string()).unwrap();
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    assert_eq!(engine.list().len(), 2);

    let err = infer(&engine).unwrap_err();
    assert!(matches!(&err, InferenceError::ApiKeyEnvRefused { env_var } if env_var == "HOME"));
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(
        err.to_string(),
        "api key env var HOME is refused: api_key_env must name a variable ending in \
         _API_KEY (^[A-Z][A-Z0-9_]*_API_KEY$); register the model again with such a \
         variable or with api_key_secret"
    );
    let err = engine.embed(Some("remote"), &["x".into()]).unwrap_err();
    assert!(matches!(err, InferenceError::ApiKeyEnvRefused { .. }));
    assert!(server.requests().is_empty());

    // The other old entry still works, and sends no key.
    let out = engine
        .generate(Some("keyless"), &prompt(), &CancelToken::new(), None)
        .unwrap();
    assert_eq!(out.text, "hello");
    assert_eq!(server.requests()[0].authorization, None);
}

#[test]
fn api_key_secret_is_resolved_through_the_lookup() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start(vec![
        ok_reply(),
        Reply::json(401, json!({"error": {"message": "no"}})),
    ]);
    let (engine, asked) = engine_with_secrets(home.path());
    engine
        .register(&remote(&server, None, Some(SECRET)))
        .unwrap();
    assert_eq!(infer(&engine).unwrap().text, "hello");
    let reqs = server.requests();
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some(&*format!("Bearer {SECRET_KEY}"))
    );
    assert_eq!(*asked.lock().unwrap(), [SECRET]);

    let err = infer(&engine).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("provider rejected the api key from secret {SECRET} (http 401)")
    );

    // A secret the store does not have: an error naming it, and no request.
    engine
        .register(&remote(&server, None, Some("other/key")))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(
        err.to_string(),
        "api key missing: secret other/key is not in the secret store or may not be read \
         (store it with secret.put)"
    );
    assert_eq!(server.requests().len(), 2);
    assert_eq!(*asked.lock().unwrap(), [SECRET, SECRET, "other/key"]);
}

#[test]
fn without_a_lookup_a_secret_cannot_be_read() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start(vec![]);
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    engine
        .register(&remote(&server, None, Some(SECRET)))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    assert!(matches!(&err, InferenceError::ApiSecretMissing { secret, .. } if secret == SECRET));
    assert_eq!(
        err.to_string(),
        format!("api key missing: secret {SECRET} cannot be read: no secret store is configured")
    );
    assert!(server.requests().is_empty());
}

#[test]
fn an_html_error_body_is_not_echoed() {
    let home = tempfile::tempdir().unwrap();
    let page = format!(
        "<html><body><pre>Authorization: Bearer {ENV_KEY}\ninternal details</pre></body></html>"
    );
    let server = Server::start(vec![html(502, &page), html(404, "not found, sorry")]);
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    engine
        .register(&remote(&server, Some(ENV_VAR), None))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider error: http 502: gave up after 1 attempts: the provider's error body is \
             not JSON ({} bytes)",
            page.len()
        )
    );
    let err = infer(&engine).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider error: http 404: the provider's error body is not JSON (16 bytes)"
    );
    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some(&*format!("Bearer {ENV_KEY}"))
    );
}

#[test]
fn a_key_echoed_in_an_error_message_is_redacted() {
    let home = tempfile::tempdir().unwrap();
    let echo = |key: &str| {
        Reply::json(
            400,
            json!({"error": {"message": format!("bad request from Bearer {key} (key {key})")}}),
        )
    };
    let streamed_error = Reply::sse(
        &[json!({"error": {"message": format!("stream failed for {SECRET_KEY}")}})],
        Duration::ZERO,
    );
    let refusal = Reply::json(
        400,
        json!({"error": {"code": "content_filter", "message": format!("refused {SECRET_KEY}")}}),
    );
    let server = Server::start(vec![
        echo(ENV_KEY),
        echo(SECRET_KEY),
        streamed_error,
        refusal,
    ]);
    let (engine, _) = engine_with_secrets(home.path());
    engine
        .register(&remote(&server, Some(ENV_VAR), None))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider error: http 400: bad request from Bearer [redacted] (key [redacted])"
    );
    engine
        .register(&remote(&server, None, Some(SECRET)))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider error: http 400: bad request from Bearer [redacted] (key [redacted])"
    );
    assert!(!format!("{err:?}").contains(SECRET_KEY));

    let mut cb = |_: &str| StreamControl::Continue;
    let err = engine
        .generate(
            Some("remote"),
            &prompt(),
            &CancelToken::new(),
            Some(&mut cb),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider error: stream failed for [redacted]"
    );

    let err = infer(&engine).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContentRefused);
    assert_eq!(err.to_string(), "content refused: refused [redacted]");
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn a_long_error_message_is_cut_to_200_characters() {
    let home = tempfile::tempdir().unwrap();
    let long = format!("overloaded\n{}", "z".repeat(10 * 1024));
    let server = Server::start(vec![Reply::json(503, json!({"error": {"message": long}}))]);
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    engine.register(&remote(&server, None, None)).unwrap();
    let err = infer(&engine).unwrap_err();
    let InferenceError::ProviderStatus { status, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*status, 503);
    let reason = message
        .strip_prefix("gave up after 1 attempts: ")
        .unwrap_or_else(|| panic!("{message}"));
    assert_eq!(reason.chars().count(), 200);
    assert!(reason.starts_with("overloaded zzz"), "{reason}");
    assert!(!reason.contains('\n'));
}

#[test]
fn endpoints_never_print_their_key() {
    let endpoint = RemoteEndpoint {
        base_url: "http://127.0.0.1:9".into(),
        model: "m".into(),
        api_key: Some(Redacted::new(SECRET_KEY.into())),
        key_source: KeySource::Secret(SECRET.into()),
    };
    let shown = format!("{endpoint:?}");
    assert!(
        !shown.contains(SECRET_KEY) && shown.contains("[redacted]"),
        "{shown}"
    );
    let mut config = EngineConfig::new(Path::new("/nonexistent"));
    config.secret_lookup = Some(Arc::new(|_: &str| Some(Redacted::new(SECRET_KEY.into()))));
    let shown = format!("{config:?}");
    assert!(
        shown.contains("secret_lookup: Some(\"installed\")"),
        "{shown}"
    );
}

#[test]
fn the_key_is_redacted_from_any_provider_text_in_an_error() {
    // Not an error body: a tool call whose name echoes the key and whose arguments are
    // broken. Only the redaction applied to every remote error catches this one.
    let home = tempfile::tempdir().unwrap();
    let call = json!({"id": "c1", "type": "function",
        "function": {"name": format!("tool_{ENV_KEY}"), "arguments": "{broken"}});
    let server = Server::start(vec![Reply::json(
        200,
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [call]}, "finish_reason": "tool_calls"}]}),
    )]);
    let engine = InferenceEngine::open(config(home.path())).unwrap();
    engine
        .register(&remote(&server, Some(ENV_VAR), None))
        .unwrap();
    let err = infer(&engine).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("engine error: tool call \"tool_[redacted]\" has arguments"),
        "{msg}"
    );
    assert!(!format!("{err:?}").contains(ENV_KEY));
}
