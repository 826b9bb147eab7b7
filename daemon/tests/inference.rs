//! Issue 9 acceptance through a real daemon and real model files (`scripts/fetch-models`
//! provides them: run `eval "$(scripts/fetch-models)"` first; CI always does).

mod common;

use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, TimeoutPolicy};
use car_test_harness::http_script::{Reply, Server};
use common::*;
use serde_json::{json, Value};

/// Generations from different tests would share the two cores and stretch each other's
/// latency (and the cancel bound); the tests of this file take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn model_path(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run `eval \"$(scripts/fetch-models)\"` before the tests")
    })
}

/// A daemon with SmolLM2 (`smol`) and MiniLM (`minilm`) registered, plus a negotiated
/// connection that has the cancel/deadline capabilities.
async fn daemon_with_models(args: &[&str]) -> (Daemon, Ws) {
    let d = Daemon::builder().args(args.iter().copied()).start();
    let mut ws = Ws::authed(&d).await;
    let r = ws
        .call("server.handshake", json!({"protocol_version": 3, "required_capabilities": ["infer.model-identity.v1", "models.catalog-identity.v1"], "optional_capabilities": ["infer.cancel.v1", "infer.deadline.v1"]}))
        .await;
    assert_eq!(
        r["result"]["negotiated_capabilities"]
            .as_array()
            .unwrap()
            .len(),
        4,
        "{r}"
    );
    // The old flat form and CAR's `{schema: ModelSchema}` with a local source.
    let r = ws
        .call(
            "models.register",
            json!({"id": "smol", "path": model_path("CAR_TEST_GGUF")}),
        )
        .await;
    assert_eq!(
        (
            r["result"]["id"].clone(),
            r["result"]["registered"].clone(),
            r["result"]["model"]["kind"].clone()
        ),
        (json!("smol"), json!(true), json!("gguf")),
        "{r}"
    );
    let r = ws
        .call(
            "models.register",
            json!({"schema": {"id": "minilm", "source": {"type": "local", "path": model_path("CAR_TEST_EMBED_DIR")}}}),
        )
        .await;
    assert_eq!(
        (
            r["result"]["id"].clone(),
            r["result"]["registered"].clone(),
            r["result"]["model"]["kind"].clone()
        ),
        (json!("minilm"), json!(true), json!("embedding")),
        "{r}"
    );
    (d, ws)
}

/// Sends `infer_stream` and collects this call's `inference.stream.event` events (checking
/// each carries the call's `request_id`) until its response, which is returned whole.
async fn stream(ws: &mut Ws, params: Value) -> (Vec<Value>, Value) {
    let id = ws.request("infer_stream", params).await;
    let mut events = Vec::new();
    loop {
        let f = ws.recv_json().await;
        if f["method"] == "inference.stream.event" {
            assert_eq!(f["params"]["request_id"], json!(id), "{f}");
            events.push(f["params"]["event"].clone());
        } else if f["id"] == json!(id) {
            return (events, f);
        }
    }
}

/// The concatenated `data` of the `text` events.
fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["data"].as_str().unwrap())
        .collect()
}

/// Reads frames until call `id`'s first `text` stream event; returns its piece.
async fn first_piece(ws: &mut Ws, id: u64) -> String {
    loop {
        let f = ws.recv_json().await;
        assert_ne!(f["id"], json!(id), "the call ended before streaming: {f}");
        if f["method"] == "inference.stream.event"
            && f["params"]["request_id"] == json!(id)
            && f["params"]["event"]["type"] == "text"
        {
            return f["params"]["event"]["data"].as_str().unwrap().to_string();
        }
    }
}

/// Reads frames until the first `infer.progress` heartbeat of call `id`: the call has
/// been registered (so `infer.cancel` reaches it) and is waiting for, or holding, an
/// admission slot.
async fn first_heartbeat(ws: &mut Ws, id: u64) {
    loop {
        let f = ws.recv_json().await;
        assert_ne!(
            f["id"],
            json!(id),
            "the call ended before its heartbeat: {f}"
        );
        if f["method"] == "infer.progress" && f["params"]["id"] == json!(id) {
            return;
        }
    }
}

/// Sends `infer.cancel` for call `id` and reads until both answers arrived (in either
/// order); returns the cancel answer, the call's answer and the call's stream events read
/// meanwhile.
async fn cancel(ws: &mut Ws, id: u64) -> (Value, Value, Vec<Value>) {
    let cancel_id = ws.request("infer.cancel", json!({"id": id})).await;
    let (mut cancelled, mut done, mut events) = (None, None, Vec::new());
    while cancelled.is_none() || done.is_none() {
        let f = ws.recv_json().await;
        if f["id"] == json!(cancel_id) {
            cancelled = Some(f);
        } else if f["id"] == json!(id) {
            done = Some(f);
        } else if f["method"] == "inference.stream.event" && f["params"]["request_id"] == json!(id)
        {
            events.push(f["params"]["event"].clone());
        }
    }
    (cancelled.unwrap(), done.unwrap(), events)
}

#[tokio::test]
async fn infer_returns_coherent_text_with_usage_and_identity_and_seeds_repeat() {
    let _turn = SERIAL.lock().await;
    let (_d, mut ws) = daemon_with_models(&[]).await;
    let params = json!({"model": "smol", "prompt": "What is the capital of France? Answer in one word.", "max_tokens": 16, "temperature": 0.0, "seed": 7});
    let r = ws.call("infer", params.clone()).await["result"].clone();
    assert!(r["text"].as_str().unwrap().contains("Paris"), "{r}");
    assert!(
        r["usage"]["prompt_tokens"].as_u64().unwrap() > 0
            && r["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{r}"
    );
    let listed = ws.call("models.list", json!({})).await["result"].clone();
    let smol = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "smol")
        .unwrap()
        .clone();
    assert_eq!(r["model_identity"], smol["identity"]);
    assert_eq!(smol["identity"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(smol["loaded"], true);
    // The generation was metered for this unbound session's agent, `user` (CAR's
    // InferenceMetered folded by events.cost_by_agent).
    let costs = ws.call("events.cost_by_agent", Value::Null).await["result"].clone();
    let usage = &r["usage"];
    assert_eq!(
        costs,
        json!([{
            "agent": "user",
            "calls": 1,
            "tokens_in": usage["prompt_tokens"].as_u64().unwrap() + usage["cache_read_input_tokens"].as_u64().unwrap(),
            "tokens_out": usage["completion_tokens"],
            "cost_usd": 0.0,
        }]),
        "{r}"
    );
    let sampled = json!({"model": "smol", "prompt": "Write one sentence about the sea.", "max_tokens": 24, "temperature": 0.9, "seed": 42});
    let a = ws.call("infer", sampled.clone()).await["result"]["text"].clone();
    let b = ws.call("infer", sampled).await["result"]["text"].clone();
    assert_eq!(a, b, "same seed, same text");
    // CAR's knobs live under `params` and win over the same knobs at top level.
    let r = ws
        .call("infer", json!({"model": "smol", "prompt": "Count from one to twenty in words.", "params": {"max_tokens": 3, "temperature": 0.0}, "max_tokens": 50}))
        .await["result"]
        .clone();
    assert_eq!(
        (
            r["usage"]["completion_tokens"].clone(),
            r["stop_reason"].clone()
        ),
        (json!(3), json!("length")),
        "{r}"
    );
    assert_eq!(r["usage"]["output_tokens"], 3, "{r}");

    // The next turn of a conversation reads the shared prefix from the KV cache; CAR's
    // usage split says so, and `cache_control: false` asks for a cold prefill.
    let mut turn = json!({"model": "smol", "messages": [{"role": "user", "content": "Name a fruit."}], "params": {"max_tokens": 6, "temperature": 0.0, "cache_ttl": "one_hour"}, "cache_control": true});
    let first = ws.call("infer", turn.clone()).await["result"].clone();
    let messages = turn["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": first["text"]}));
    messages.push(json!({"role": "user", "content": "Another one?"}));
    let warm = ws.call("infer", turn.clone()).await["result"]["usage"].clone();
    turn["cache_control"] = json!(false);
    let cold = ws.call("infer", turn).await["result"]["usage"].clone();
    let n = |u: &Value, k: &str| u[k].as_u64().unwrap();
    assert!(
        n(&warm, "cache_read_input_tokens") >= n(&first["usage"], "prompt_tokens"),
        "{warm} after {first}"
    );
    assert_eq!(n(&cold, "cache_read_input_tokens"), 0, "{cold}");
    assert_eq!(
        n(&warm, "prompt_tokens") + n(&warm, "cache_read_input_tokens"),
        n(&cold, "prompt_tokens"),
        "the whole input is the uncached plus the cached part: {warm} vs {cold}"
    );
    assert_eq!(n(&warm, "cache_creation_input_tokens"), 0);
}

#[tokio::test]
async fn infer_stream_sends_pieces_that_concatenate_to_the_final_text() {
    let _turn = SERIAL.lock().await;
    let (_d, mut ws) = daemon_with_models(&[]).await;
    let (events, reply) = stream(&mut ws, json!({"model": "smol", "prompt": "Count from one to five in words.", "max_tokens": 32, "temperature": 0.0})).await;
    let result = reply["result"].clone();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let pieces = text_of(&events);
    assert!(
        kinds.iter().filter(|k| **k == "text").count() >= 2,
        "{kinds:?}"
    );
    assert_eq!(&kinds[kinds.len() - 2..], ["usage", "stop_reason"]);
    assert_eq!(pieces, result["text"].as_str().unwrap());
}

#[tokio::test]
async fn heartbeats_keep_a_long_generation_alive_past_the_clients_idle_window() {
    let _turn = SERIAL.lock().await;
    let (d, _ws) =
        daemon_with_models(&["--infer-progress-ms", "100", "--llama-threads", "1"]).await;
    let client = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)).timeouts(TimeoutPolicy {
            infer_idle: Duration::from_millis(600),
            ..TimeoutPolicy::default()
        }),
    );
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = progress.clone();
    client.register_notification_handler("infer.progress", move |_| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    let started = Instant::now();
    let r = client
        .call("infer", json!({"model": "smol", "prompt": "Tell a long story about a lighthouse keeper.", "max_tokens": 200, "temperature": 0.0}))
        .await
        .expect("heartbeats kept the call alive");
    let took = started.elapsed();
    assert!(r["text"].as_str().unwrap().len() > 20);
    eprintln!("generation took {took:?} against a 600 ms idle window");
    assert!(
        took > Duration::from_millis(600),
        "the generation must outlast the idle window for this test to mean anything ({took:?})"
    );
    assert!(progress.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    // The same call with the heartbeats slower than the window times out.
    let (d2, _ws2) =
        daemon_with_models(&["--infer-progress-ms", "5000", "--llama-threads", "1"]).await;
    let client = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(&d2.home)).timeouts(TimeoutPolicy {
            infer_idle: Duration::from_millis(600),
            ..TimeoutPolicy::default()
        }),
    );
    let err = client
        .call("infer", json!({"model": "smol", "prompt": "Tell a long story about a lighthouse keeper.", "max_tokens": 200, "temperature": 0.0}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, car_daemon_client::Error::Timeout { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn infer_cancel_stops_a_generation_and_needs_its_capability() {
    let _turn = SERIAL.lock().await;
    let (d, mut ws) = daemon_with_models(&["--infer-progress-ms", "50"]).await;
    const MAX: u64 = 2000;
    let essay = json!({"model": "smol", "prompt": "Write a very long essay about rivers.", "max_tokens": MAX, "temperature": 0.0});
    // A streamed generation, cancelled once its first piece arrived: it stops long before
    // its natural end, reports `cancelled`, and its text is exactly what was streamed.
    let id = ws.request("infer_stream", essay.clone()).await;
    let first = first_piece(&mut ws, id).await;
    let (c, done, events) = cancel(&mut ws, id).await;
    assert_eq!(c["result"], json!({"cancelled": true}), "{c}");
    let r = &done["result"];
    assert_eq!(r["stop_reason"], "cancelled", "{done}");
    let tokens = r["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..MAX).contains(&tokens), "{tokens} tokens: {done}");
    assert_eq!(
        format!("{first}{}", text_of(&events)),
        r["text"].as_str().unwrap(),
        "the result holds exactly the streamed pieces"
    );
    assert_eq!(
        events.last(),
        Some(&json!({"type": "stop_reason", "data": "cancelled"})),
        "{events:?}"
    );
    // A plain infer call, cancelled once its first heartbeat shows it is registered.
    let id = ws.request("infer", essay).await;
    first_heartbeat(&mut ws, id).await;
    let (c, done, _) = cancel(&mut ws, id).await;
    assert_eq!(c["result"], json!({"cancelled": true}), "{c}");
    let r = &done["result"];
    assert_eq!(r["stop_reason"], "cancelled", "{done}");
    assert!(
        r["usage"]["completion_tokens"].as_u64().unwrap() < MAX,
        "{done}"
    );
    // The call is gone once it answered: cancelling it again names the id.
    let r = ws.call("infer.cancel", json!({"id": id})).await;
    assert_eq!(
        (code(&r), message(&r)),
        (
            -32602,
            format!("invalid params: id: no infer call {id} is running on this connection")
        )
    );
    let r = ws.call("infer.cancel", json!({"id": 424242})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: id: no infer call 424242 is running on this connection"
        )
    );
    // Without negotiating infer.cancel.v1: -32008.
    let mut plain = Ws::authed(&d).await;
    plain.call("server.handshake", handshake_params()).await;
    let r = plain.call("infer.cancel", json!({"id": 1})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32008,
            "protocol capability mismatch: infer.cancel needs infer.cancel.v1, which this session did not negotiate"
        )
    );
    let r = plain
        .call("infer.deadline", json!({"id": 1, "deadline_ms": 5}))
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32008,
            "protocol capability mismatch: infer.deadline needs infer.deadline.v1, which this session did not negotiate"
        )
    );
}

#[tokio::test]
async fn admission_runs_generations_one_at_a_time_and_drops_queued_callers() {
    let _turn = SERIAL.lock().await;
    let (d, _ws) =
        daemon_with_models(&["--max-generations", "1", "--infer-progress-ms", "50"]).await;
    let prompt = json!({"model": "smol", "prompt": "Describe a forest in detail.", "max_tokens": 48, "temperature": 0.0});
    let mut a = Ws::authed(&d).await;
    let mut b = Ws::authed(&d).await;
    let started = Instant::now();
    let a_id = a.request("infer_stream", prompt.clone()).await;
    // a streams, so it holds the only slot; only then does b ask.
    first_piece(&mut a, a_id).await;
    b.request("infer", prompt.clone()).await;
    let wait = |mut ws: Ws| async move {
        loop {
            let f = ws.recv_json().await;
            if f.get("result").is_some() {
                return (Instant::now(), f["result"]["latency_ms"].as_u64().unwrap());
            }
        }
    };
    let ((a_done, a_ms), (b_done, b_ms)) = tokio::join!(wait(a), wait(b));
    assert!(a_done < b_done, "a finishes first");
    // b's own generation time excludes the queue; its end-to-end time includes a's run.
    let b_total = b_done.duration_since(started).as_millis() as u64;
    assert!(
        b_total >= a_ms + b_ms,
        "b ran after a: a {a_ms} ms, b {b_ms} ms, b end-to-end {b_total} ms"
    );

    // A queued caller whose connection drops leaves the queue: the next caller runs next.
    let mut running = Ws::authed(&d).await;
    let mut queued = Ws::authed(&d).await;
    let mut third = Ws::authed(&d).await;
    let running_id = running.request("infer_stream", json!({"model": "smol", "prompt": "Describe a city.", "max_tokens": 64, "temperature": 0.0})).await;
    first_piece(&mut running, running_id).await;
    // A heartbeat comes from a handler already waiting on the admission queue, so each
    // caller below is queued behind the one before it.
    let queued_id = queued.request("infer", json!({"model": "smol", "prompt": "Describe a desert.", "max_tokens": 400, "temperature": 0.0})).await;
    first_heartbeat(&mut queued, queued_id).await;
    let third_id = third
        .request(
            "infer",
            json!({"model": "smol", "prompt": "Say hi.", "max_tokens": 4, "temperature": 0.0}),
        )
        .await;
    first_heartbeat(&mut third, third_id).await;
    drop(queued);
    tokio::time::timeout(Duration::from_secs(300), wait(third))
        .await
        .expect("the third caller ran");
    // Four generations were admitted (a, b, running, third); the dropped caller never was.
    let admitted = d.stderr().matches("admitted").count();
    assert_eq!(admitted, 4, "{}", d.stderr());
    drop(running);
}

#[tokio::test]
async fn embeddings_classify_tokens_and_memory_ranking() {
    let _turn = SERIAL.lock().await;
    let (d, mut ws) = daemon_with_models(&[]).await;
    let e = ws.call("embed", json!({"texts": ["the cat sat on the mat", "the cat sat on the mat", "a kitten was sitting on the rug", "quarterly tax filing deadlines"]})).await["result"].clone();
    let v: Vec<Vec<f64>> = serde_json::from_value(e["embeddings"].clone()).unwrap();
    let cos = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert!((cos(&v[0], &v[1]) - 1.0).abs() < 1e-4);
    assert!(
        cos(&v[0], &v[2]) > cos(&v[0], &v[3]) + 0.1,
        "paraphrase beats unrelated"
    );
    assert_eq!(e["model_identity"]["id"], "minilm");
    let c = ws.call("classify", json!({"text": "my invoice total is wrong", "labels": ["billing", "weather", "sports"]})).await["result"].clone();
    // CAR's shape: `[{label, score}]`, best first.
    assert_eq!(c[0]["label"], "billing", "{c}");
    assert_eq!(c.as_array().unwrap().len(), 3, "{c}");
    assert!(c[0]["score"].as_f64().unwrap() >= c[1]["score"].as_f64().unwrap());
    let t = ws
        .call("tokenize", json!({"model": "smol", "text": "hello world"}))
        .await["result"]["tokens"]
        .clone();
    let back = ws
        .call("detokenize", json!({"model": "smol", "tokens": t}))
        .await["result"]["text"]
        .clone();
    assert_eq!(back, "hello world");

    // Memory ranking with the embedding model registered keeps the fixture's hit rate.
    let mut mem = Ws::tcp(&d.ws_url).await;
    mem.call(
        "session.auth",
        json!({"token": d.token(), "memory_namespace": "ranked"}),
    )
    .await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/memory-ranking.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for f in fixture["facts"].as_array().unwrap() {
        assert!(mem.call("memory.add_fact", f.clone()).await["result"].is_u64());
    }
    let mut hits = 0;
    for q in fixture["queries"].as_array().unwrap() {
        let ranked = mem
            .call("memory.query", json!({"query": q["query"], "k": 3}))
            .await["result"]
            .clone();
        if ranked
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["fact_id"] == q["expected_fact_id"])
        {
            hits += 1;
        }
    }
    eprintln!("memory ranking hit rate with embeddings (top 3): {hits}/20");
    assert!(hits >= 18, "{hits}/20 with embeddings on");
}

#[tokio::test]
async fn bad_models_and_requests_get_precise_errors() {
    let _turn = SERIAL.lock().await;
    let (d, mut ws) = daemon_with_models(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.gguf");
    let real = std::fs::read(model_path("CAR_TEST_GGUF")).unwrap();
    std::fs::write(&truncated, &real[..4096]).unwrap();
    let wrong_magic = dir.path().join("magic.gguf");
    std::fs::write(&wrong_magic, b"NOPE0000000000000000000000000000").unwrap();
    let mut absurd = real[..64].to_vec();
    absurd[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // tensor count
    let absurd_path = dir.path().join("absurd.gguf");
    std::fs::write(&absurd_path, &absurd).unwrap();
    let missing = dir.path().join("missing.gguf");
    for (params, expected) in [
        (
            json!({"path": missing}),
            format!("invalid params: model file not found: {}", missing.display()),
        ),
        (
            json!({"path": truncated}),
            format!(
                "invalid params: invalid gguf file {}: tensor count 272 cannot fit in the 4072 bytes left",
                truncated.display()
            ),
        ),
        (
            json!({"schema": {"source": {"type": "local", "path": wrong_magic}}}),
            format!(
                "invalid params: invalid gguf file {}: bad magic \"NOPE\", expected \"GGUF\"",
                wrong_magic.display()
            ),
        ),
        (
            json!({"path": absurd_path}),
            format!(
                "invalid params: invalid gguf file {}: metadata count 33 cannot fit in the 40 bytes left",
                absurd_path.display()
            ),
        ),
        (
            json!({"schema": {"id": "x", "source": {"type": "weird"}}}),
            "invalid params: schema.source.type: \"weird\" is not served by this daemon (local, remote_api or delegated)".to_string(),
        ),
        (
            json!({"id": "x"}),
            "invalid params: schema.source: needs a local path or a remote_api endpoint"
                .to_string(),
        ),
    ] {
        let r = ws.call("models.register", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r)),
            (-32602, expected),
            "{params} → {r}"
        );
    }
    for (method, params, expected) in [
        (
            "infer",
            json!({"model": "nope", "prompt": "x"}),
            "invalid params: model not found: nope",
        ),
        (
            "infer",
            json!({"model": "smol"}),
            "invalid params: invalid prompt: one of prompt or messages is required",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "max_tokens": 0}),
            "invalid params: params.max_tokens: must be at least 1",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "params": {"max_tokens": 0}}),
            "invalid params: params.max_tokens: must be at least 1",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "tools": [{"name": "t"}]}),
            "invalid params: invalid tools: tools[0].parameters of tool \"t\" must be a JSON Schema object, got null",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "images": [{"data": "aGk="}]}),
            "invalid params: images: this daemon's engines are text-only",
        ),
        (
            "infer",
            json!({"model": "smol", "messages": [{"role": "user", "content": [{"type": "image", "url": "x"}]}]}),
            "invalid params: messages[0].content[0]: only text parts are supported by this daemon's engines",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "cache_control": {"type": "ephemeral"}}),
            "invalid params: cache_control: expected a boolean, got {\"type\":\"ephemeral\"}",
        ),
        (
            "infer",
            json!({"model": "smol", "prompt": "x", "params": {"cache_ttl": "forever"}}),
            "invalid params: params.cache_ttl: expected \"five_minutes\" or \"one_hour\", got \"forever\"",
        ),
        (
            "infer",
            json!({"model": "minilm", "prompt": "x"}),
            "invalid params: model minilm is of kind embedding and cannot generate text",
        ),
        (
            "embed",
            json!({"texts": []}),
            "invalid params: texts: must not be empty",
        ),
        (
            "embed",
            json!({"texts": [1]}),
            "invalid params: texts[0]: invalid type: integer `1`, expected a string",
        ),
        (
            "detokenize",
            json!({"model": "smol", "tokens": [99999999]}),
            "invalid params: invalid tokens: token 0 is 99999999, outside the vocabulary 0..49152",
        ),
    ] {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{method} {params} → {r}"
        );
    }
    // Registering an id again replaces it (CAR's rule): the same weights, the same identity.
    let before = ws.call("models.list", json!({})).await["result"].clone();
    let r = ws
        .call(
            "models.register",
            json!({"id": "smol", "path": model_path("CAR_TEST_GGUF")}),
        )
        .await;
    assert_eq!(r["result"]["registered"], true, "{r}");
    let after = ws.call("models.list", json!({})).await["result"].clone();
    let identity = |list: &Value| {
        list.as_array()
            .unwrap()
            .iter()
            .filter(|m| m["id"] == "smol")
            .map(|m| m["identity"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(identity(&before), identity(&after));
    assert_eq!(identity(&after).len(), 1, "{after}");
    // Empty tools and images are no request for them: the call runs.
    let r = ws
        .call("infer", json!({"model": "smol", "prompt": "Say hi.", "max_tokens": 2, "tools": [], "images": []}))
        .await;
    assert_eq!(r["result"]["usage"]["completion_tokens"], 2, "{r}");
    // models.remove is a host method; models.unregister is the operator form.
    let r = ws.call("models.remove", json!({"id": "smol"})).await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = ws.call("models.unregister", json!({"id": "smol"})).await;
    assert_eq!(
        (
            r["result"]["id"].clone(),
            r["result"]["unregistered"].clone()
        ),
        (json!("smol"), json!(true)),
        "{r}"
    );
    let r = ws.call("models.unregister", json!({"id": "smol"})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (-32602, "invalid params: model not found: smol")
    );
    let r = Ws::host(&d)
        .await
        .call("models.remove", json!({"id": "minilm"}))
        .await;
    assert_eq!(
        (
            r["result"]["id"].clone(),
            r["result"]["unregistered"].clone()
        ),
        (json!("minilm"), json!(true)),
        "{r}"
    );
    assert!(
        Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object(),
        "the daemon survived"
    );
}

/// Acceptance 7 through the daemon: a remote OpenAI-compatible model registered with
/// `models.register {base_url, model, api_key_env}`, served by a scripted local HTTP server.
/// A streamed generation survives a 429 (retried after its `Retry-After`), refusals in two
/// forms become `-32007`, and a rejected key names its env var without ever showing the key.
#[tokio::test]
async fn a_remote_provider_streams_retries_and_refuses_through_the_daemon() {
    const KEY_VAR: &str = "CAR_TEST_REMOTE_API_KEY";
    const KEY: &str = "sk-daemon-test-secret-42";
    let delta = |content: &str| json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    let mut busy = Reply::json(429, json!({"error": {"message": "rate limited"}}));
    busy.headers.push(("retry-after", "0".into()));
    let server = Server::start(vec![
        busy,
        Reply::sse(
            &[
                delta("Hel"),
                delta("lo"),
                delta(" there"),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ],
            Duration::from_millis(5),
        ),
        Reply::sse(
            &[json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]})],
            Duration::ZERO,
        ),
        Reply::json(
            400,
            json!({"error": {"code": "content_filter", "message": "blocked by policy", "type": "invalid_request_error"}}),
        ),
        Reply::json(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
        ),
    ]);
    let d = Daemon::builder().env(KEY_VAR, KEY).start();
    // Registering a remote endpoint needs a host session.
    let mut ws = Ws::host(&d).await;
    let r = ws.call("server.handshake", handshake_params()).await;
    assert!(r["result"].is_object(), "{r}");
    let r = ws
        .call(
            "models.register",
            json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "gpt-test", "api_key_env": KEY_VAR}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let listed = ws.call("models.list", json!({})).await;
    assert!(
        listed["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "remote"),
        "{listed}"
    );
    assert!(!listed.to_string().contains(KEY), "{listed}");

    // Streaming, through a 429.
    let (events, reply) = stream(
        &mut ws,
        json!({"model": "remote", "prompt": "say hello", "max_tokens": 20}),
    )
    .await;
    let result = &reply["result"];
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hel", "lo", " there"], "{events:?}");
    assert_eq!(result["text"], "Hello there", "{reply}");
    assert_eq!(result["model_used"], "remote", "{reply}");
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("stop_reason")),
        "{events:?}"
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "the 429 was retried once");
    for r in &seen {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.authorization.as_deref(), Some(&*format!("Bearer {KEY}")));
        assert_eq!(r.body["model"], "gpt-test");
        assert_eq!(r.body["stream"], true);
    }

    // Refusals: a `content_filter` finish and a provider error coded `content_filter`.
    for needle in ["content refused", "blocked by policy"] {
        let r = ws
            .call(
                "infer",
                json!({"model": "remote", "prompt": "something refused"}),
            )
            .await;
        assert_eq!(code(&r), -32007, "{r}");
        assert!(message(&r).contains(needle), "{r}");
    }

    // A rejected key: the message names the variable, never the key (nor does the log).
    let r = ws
        .call("infer", json!({"model": "remote", "prompt": "hi"}))
        .await;
    assert_eq!(code(&r), -32603, "{r}");
    assert!(message(&r).contains(KEY_VAR), "{r}");
    assert!(!r.to_string().contains(KEY), "{r}");
    assert_eq!(
        server.requests().len(),
        5,
        "401 and refusals are not retried"
    );
    assert!(!d.stderr().contains(KEY), "the key leaked into the log");
}
