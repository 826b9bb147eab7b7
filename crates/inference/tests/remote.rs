//! The remote OpenAI-compatible provider against a scripted local HTTP server.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use car_inference::{
    CancelToken, EngineConfig, ErrorKind, GenerateRequest, GenerateResult, InferenceEngine,
    InferenceError, RegisterRequest, RemoteConfig, StopReason, StreamControl,
};
use car_test_harness::http_script::{Reply, Server};
use serde_json::{json, Value};

const KEY_VAR: &str = "CAR_TEST_REMOTE_API_KEY";
const KEY: &str = "sk-test-secret-123";

/// An engine with the remote model registered as `remote` and its key in `CAR_HOME/env`.
fn engine(server: &Server, max_retries: u32) -> (tempfile::TempDir, InferenceEngine) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("env"), format!("{KEY_VAR}={KEY}\n")).unwrap();
    let mut config = EngineConfig::new(home.path());
    config.remote = RemoteConfig {
        max_retries,
        base_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        max_retry_after: Duration::from_millis(300),
        ..RemoteConfig::default()
    };
    let engine = InferenceEngine::open(config).unwrap();
    engine
        .register(&RegisterRequest {
            id: Some("remote".into()),
            base_url: Some(format!("{}/v1", server.base_url)),
            model: Some("gpt-test".into()),
            api_key_env: Some(KEY_VAR.into()),
            ..Default::default()
        })
        .unwrap();
    (home, engine)
}

fn request() -> GenerateRequest {
    GenerateRequest {
        system: Some("be brief".into()),
        prompt: Some("say hello".into()),
        max_tokens: Some(20),
        temperature: Some(0.0),
        stop: vec!["STOP".into()],
        ..Default::default()
    }
}

/// `request()` with a stream callback: the result and the pieces the callback received.
fn stream(engine: &InferenceEngine) -> (GenerateResult, Vec<String>) {
    let mut pieces = Vec::new();
    let mut cb = |p: &str| {
        pieces.push(p.to_owned());
        StreamControl::Continue
    };
    let out = engine
        .generate(
            Some("remote"),
            &request(),
            &CancelToken::new(),
            Some(&mut cb),
        )
        .unwrap();
    (out, pieces)
}

fn completion(content: &str, finish: &str) -> Value {
    json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    })
}

fn delta(content: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
}

#[test]
fn non_streaming_chat_sends_the_openai_shape() {
    let server = Server::start(vec![Reply::json(200, completion("Hello there!", "stop"))]);
    let (_home, engine) = engine(&server, 0);
    let out = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap();
    assert_eq!(out.text, "Hello there!");
    assert_eq!(out.stop_reason, StopReason::Stop);
    assert_eq!(out.usage.prompt_tokens, 11);
    assert_eq!(out.usage.completion_tokens, 3);
    assert_eq!(out.model_identity.id, "remote");
    assert_eq!(out.model_identity.sha256, None);

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    let b = &reqs[0].body;
    assert_eq!(b["model"], "gpt-test");
    assert_eq!(b["stream"], false);
    assert_eq!(b["max_tokens"], 20);
    assert_eq!(b["stop"], json!(["STOP"]));
    assert_eq!(
        b["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(
        b["messages"][1],
        json!({"role": "user", "content": "say hello"})
    );
}

/// Acceptance 7: streaming over SSE; pieces concatenate to the final text.
#[test]
fn streaming_chat_delivers_pieces() {
    let mut events = vec![json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})];
    events.extend(["Hel", "lo", ", wor", "ld"].iter().map(|c| delta(c)));
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}));
    // OpenAI counts cached prompt tokens inside prompt_tokens; CAR's split takes them out.
    events.push(
        json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 2}}}),
    );
    let server = Server::start(vec![Reply::sse(&events, Duration::from_millis(10))]);
    let (_home, engine) = engine(&server, 0);
    let (out, pieces) = stream(&engine);
    assert_eq!(out.text, "Hello, world");
    // One piece per content delta: none of them can start the "STOP" stop sequence.
    assert_eq!(pieces, ["Hel", "lo", ", wor", "ld"]);
    assert_eq!(out.stop_reason, StopReason::Length);
    assert_eq!(
        (
            out.usage.prompt_tokens,
            out.usage.cache_read_tokens,
            out.usage.completion_tokens
        ),
        (7, 2, 4)
    );
    assert!(out.time_to_first_token_ms.is_some());
    let b = &server.requests()[0].body;
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"]["include_usage"], true);
}

#[test]
fn stop_sequences_are_enforced_locally_on_streams() {
    let events: Vec<Value> = ["one ", "two ST", "OP three"]
        .iter()
        .map(|c| delta(c))
        .collect();
    let server = Server::start(vec![Reply::sse(&events, Duration::ZERO)]);
    let (_home, engine) = engine(&server, 0);
    let (out, pieces) = stream(&engine);
    assert_eq!(out.text, "one two ");
    assert_eq!(pieces.concat(), out.text);
    assert_eq!(out.stop_reason, StopReason::StopSequence);
}

#[test]
fn a_streamed_request_answered_with_one_json_body_still_streams_its_text() {
    let server = Server::start(vec![Reply::json(200, completion("All at once.", "stop"))]);
    let (_home, engine) = engine(&server, 0);
    let (out, pieces) = stream(&engine);
    assert_eq!(out.text, "All at once.");
    assert_eq!(pieces, ["All at once."]);
    assert_eq!(out.stop_reason, StopReason::Stop);
    assert_eq!(server.requests()[0].body["stream"], true);
}

/// Acceptance 7: a 429 is retried after its Retry-After (capped), then succeeds.
#[test]
fn retries_a_429_then_succeeds() {
    let mut busy = Reply::json(429, json!({"error": {"message": "rate limited"}}));
    // An hour, uncapped: the retry can only come within the hang guard if it was capped.
    busy.headers.push(("retry-after", "3600".into()));
    let server = Server::start(vec![busy, Reply::json(200, completion("ok", "stop"))]);
    let (home, engine) = engine(&server, 2);
    let (out, took) = common::detached(move || {
        let _home = home;
        let started = Instant::now();
        let out = engine.generate(Some("remote"), &request(), &CancelToken::new(), None);
        (out, started.elapsed())
    })
    .wait("the retried request");
    assert_eq!(out.unwrap().text, "ok");
    assert_eq!(server.requests().len(), 2);
    // It did wait, for the configured 300 ms cap (waits never end early), rather than for
    // the 20 ms backoff a missing Retry-After would give.
    assert!(took >= Duration::from_millis(300), "{took:?}");
}

#[test]
fn a_500_exhausts_bounded_retries() {
    let replies = (0..3)
        .map(|_| Reply::json(500, json!({"error": {"message": "upstream exploded"}})))
        .collect();
    let server = Server::start(replies);
    let (_home, engine) = engine(&server, 2);
    let err = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap_err();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(
        err.to_string(),
        "provider error: http 500: gave up after 3 attempts: upstream exploded"
    );
}

#[test]
fn a_401_names_the_env_var_but_never_the_key() {
    let server = Server::start(vec![Reply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
    )]);
    let (_home, engine) = engine(&server, 3);
    let err = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(
        msg,
        format!("provider rejected the api key from env var {KEY_VAR} (http 401)")
    );
    assert!(!msg.contains(KEY) && !format!("{err:?}").contains(KEY));
    // 401 is not retried.
    assert_eq!(server.requests().len(), 1);
}

/// Acceptance 7: refusals in every detected form become `ContentRefused` (-32007).
#[test]
fn refusals_become_content_refused() {
    let server = Server::start(vec![
        Reply::json(200, completion("", "content_filter")),
        Reply::json(
            400,
            json!({"error": {"code": "content_filter", "message": "blocked by policy", "type": "invalid_request_error"}}),
        ),
        Reply::json(
            200,
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}),
        ),
        Reply::sse(
            &[
                json!({"choices": [{"index": 0, "delta": {"refusal": "No."}, "finish_reason": null}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ],
            Duration::ZERO,
        ),
    ]);
    let (_home, engine) = engine(&server, 3);
    let mut results = Vec::new();
    for streaming in [false, false, false, true] {
        let mut cb = |_: &str| StreamControl::Continue;
        let cb: Option<&mut dyn FnMut(&str) -> StreamControl> =
            if streaming { Some(&mut cb) } else { None };
        results.push(
            engine
                .generate(Some("remote"), &request(), &CancelToken::new(), cb)
                .unwrap_err(),
        );
    }
    for err in &results {
        assert_eq!(err.kind(), ErrorKind::ContentRefused, "{err}");
        assert!(err.to_string().starts_with("content refused: "));
    }
    assert_eq!(results[1].to_string(), "content refused: blocked by policy");
    assert_eq!(
        results[2].to_string(),
        "content refused: I can't help with that."
    );
    assert_eq!(server.requests().len(), 4);
}

/// This thread's kernel id (Linux `/proc`; `None` where there is none).
fn current_tid() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?; // "<pid>/task/<tid>"
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Polls, under the hang guard, until thread `tid` of this process is asleep in the
/// kernel (state `S`: blocked waiting, not running). Returns at once without a `tid`.
fn wait_until_blocked(tid: Option<&str>) {
    let Some(tid) = tid else { return };
    let stat = format!("/proc/self/task/{tid}/stat");
    let deadline = Instant::now() + common::SAFETY;
    loop {
        let text = std::fs::read_to_string(&stat).unwrap();
        // "<tid> (<name>) <state> ...": the state follows the last ')'.
        let state = text
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("S") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "thread {tid} never blocked: {text}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A cancel ends a stream whose provider has gone quiet, without waiting for it to speak
/// again. How long that takes is measured by `cargo bench -p car-inference --bench cancel`.
#[test]
fn cancel_ends_a_stalled_stream() {
    let mut reply = Reply::sse(&[delta("first")], Duration::ZERO);
    // After the first event the provider goes quiet for an hour: far beyond the hang
    // guard, so the call can only end in time through the cancel.
    reply
        .chunks
        .insert(1, (Duration::from_secs(3600), b": still here\n\n".to_vec()));
    let server = Server::start(vec![reply]);
    let (home, engine) = engine(&server, 0);
    let cancel = CancelToken::new();
    let worker_cancel = cancel.clone();
    let (first_tx, first_rx) = mpsc::channel();
    let worker = common::detached(move || {
        let _home = home;
        let mut first = Some((first_tx, current_tid()));
        let mut cb = |_: &str| {
            if let Some((tx, tid)) = first.take() {
                let _ = tx.send(tid);
            }
            StreamControl::Continue
        };
        let out = engine.generate(Some("remote"), &request(), &worker_cancel, Some(&mut cb));
        (out, Instant::now())
    });
    let tid = first_rx
        .recv_timeout(common::SAFETY)
        .expect("no piece streamed (a hang guard, not a speed bound)");
    // Cancel once the generating thread has gone to sleep waiting on the silent stream,
    // the case under test, rather than while it is still busy with the first piece, where
    // the check between chunks would see the flag without any waiting involved.
    wait_until_blocked(tid.as_deref());
    let fired = Instant::now();
    cancel.cancel();
    let (out, returned) = worker.wait("the cancelled stream");
    let out = out.unwrap();
    assert_eq!(out.stop_reason, StopReason::Cancelled);
    assert_eq!(out.text, "first");
    eprintln!(
        "stalled stream: returned {:?} after the cancel",
        returned.duration_since(fired)
    );
}

#[test]
fn embeddings_come_back_in_input_order() {
    let server = Server::start(vec![Reply::json(
        200,
        json!({"object": "list", "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}
        ], "model": "gpt-test"}),
    )]);
    let (_home, engine) = engine(&server, 0);
    let out = engine
        .embed(Some("remote"), &["a".into(), "b".into()])
        .unwrap();
    assert_eq!(out.embeddings, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/v1/embeddings");
    assert_eq!(reqs[0].body["input"], json!(["a", "b"]));
}

#[test]
fn a_missing_key_fails_before_any_request() {
    let server = Server::start(vec![]);
    let home = tempfile::tempdir().unwrap();
    let engine = InferenceEngine::open(EngineConfig::new(home.path())).unwrap();
    engine
        .register(&RegisterRequest {
            id: Some("remote".into()),
            base_url: Some(server.base_url.clone()),
            model: Some("m".into()),
            api_key_env: Some("CAR_TEST_NEVER_SET_API_KEY".into()),
            ..Default::default()
        })
        .unwrap();
    let err = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap_err();
    assert!(matches!(err, InferenceError::ApiKeyMissing { .. }));
    assert_eq!(
        err.to_string(),
        "api key missing: set env var CAR_TEST_NEVER_SET_API_KEY (or add it to CAR_HOME/env)"
    );
    assert!(server.requests().is_empty());
}
