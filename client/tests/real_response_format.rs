//! `response_format` against a real `car-server`: on the local SmolLM2 model the answer is
//! decoded under the schema's grammar and validates for every seed; a remote provider
//! receives the format in OpenAI's shape and an answer that does not match is refused; bad
//! formats are refused by field before anything runs.

use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::http_script::{Reply, Server};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

fn person_schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                          "age": {"type": "integer"},
                          "colour": {"enum": ["red", "green", "blue"]}},
           "required": ["name", "age", "colour"]})
}

/// Checks `v` against `person_schema` by hand (not with the daemon's validator).
fn is_person(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let name_ok = o["name"]
        .as_str()
        .is_some_and(|n| (1..=12).contains(&n.chars().count()));
    o.len() == 3
        && name_ok
        && (o["age"].is_i64() || o["age"].is_u64())
        && ["red", "green", "blue"].iter().any(|c| o["colour"] == *c)
}

#[tokio::test]
async fn json_schema_on_the_local_model_validates_for_twenty_seeds_of_twenty() {
    let Ok(gguf) = std::env::var("CAR_TEST_GGUF") else {
        panic!("CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` before the tests");
    };
    let d = Daemon::builder().start();
    let c = client(&d);
    c.call("models.register", json!({"id": "smol", "path": gguf}))
        .await
        .unwrap();
    let format =
        json!({"type": "json_schema", "name": "person", "schema": person_schema(), "strict": true});
    let mut valid = 0;
    for seed in 1..=20u32 {
        let r = tokio::time::timeout(
            Duration::from_secs(300),
            c.call(
                "infer",
                json!({"prompt": "Describe a person.", "model": "smol", "response_format": format,
                                   "params": {"seed": seed, "temperature": 0.9, "max_tokens": 96}}),
            ),
        )
        .await
        .expect("the generation finished")
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let text = r["text"].as_str().unwrap();
        let value: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {text:?}: {e}"));
        assert!(is_person(&value), "seed {seed}: {value}");
        valid += 1;
    }
    assert_eq!(valid, 20);
    // `json_object`: any JSON object.
    let r = c
        .call("infer", json!({"prompt": "Give me a JSON object.", "model": "smol", "response_format": {"type": "json_object"},
                              "params": {"seed": 3, "temperature": 0.0, "max_tokens": 64}}))
        .await;
    match r {
        Ok(r) => {
            let v: Value = serde_json::from_str(r["text"].as_str().unwrap()).unwrap();
            assert!(v.is_object(), "{v}");
        }
        // An unbounded object may run past max_tokens: then it is refused, not returned.
        Err(Error::Rpc { data, .. }) => {
            assert_eq!(data.unwrap()["reason"], "response_format_mismatch")
        }
        Err(e) => panic!("{e}"),
    }
}

fn text_reply(text: &str) -> Reply {
    Reply::openai_turn(text, &[], None)
}

#[tokio::test]
async fn a_remote_provider_receives_the_format_in_its_shape_and_a_mismatch_is_refused() {
    let server = Server::start(vec![
        text_reply(r#"{"name": "Ada", "age": 36, "colour": "green"}"#),
        text_reply(r#"{"name": "Ada"}"#),
        text_reply("not json"),
    ]);
    let d = Daemon::builder().start();
    let c = client(&d);
    c.call_as_host(
        "models.register",
        json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
    )
    .await
    .unwrap();
    let format = json!({"type": "json_schema", "name": "person", "schema": person_schema()});
    let r = c
        .call(
            "infer",
            json!({"prompt": "x", "model": "remote", "response_format": format}),
        )
        .await
        .unwrap();
    assert!(is_person(
        &serde_json::from_str(r["text"].as_str().unwrap()).unwrap()
    ));
    assert_eq!(
        server.requests()[0].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "person", "schema": person_schema(), "strict": true}})
    );
    for expected in ["is a required property", "it is not JSON"] {
        match c
            .call(
                "infer",
                json!({"prompt": "x", "model": "remote", "response_format": format}),
            )
            .await
        {
            Err(Error::Rpc {
                code,
                message,
                data,
            }) => {
                assert_eq!(code, -32603, "{message}");
                assert!(
                    message.contains("does not match response_format"),
                    "{message}"
                );
                assert!(message.contains(expected), "{message}");
                assert_eq!(data.unwrap()["reason"], "response_format_mismatch");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // OpenAI's nested form is accepted and `json_object` passes through.
    let server = Server::start(vec![text_reply("{}")]);
    c.call_as_host(
        "models.register",
        json!({"id": "remote2", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
    )
    .await
    .unwrap();
    c.call(
        "infer",
        json!({"prompt": "x", "model": "remote2", "response_format": {"type": "json_object"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        server.requests()[0].body["response_format"],
        json!({"type": "json_object"})
    );
}

#[tokio::test]
async fn bad_formats_are_refused_by_field_before_anything_runs() {
    let server = Server::start(vec![]);
    let d = Daemon::builder().start();
    let c = client(&d);
    c.call_as_host(
        "models.register",
        json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
    )
    .await
    .unwrap();
    for format in [
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "schema": {"type": 5}}),
        json!({"type": "xml"}),
        json!("json"),
    ] {
        match c
            .call(
                "infer",
                json!({"prompt": "x", "model": "remote", "response_format": format}),
            )
            .await
        {
            Err(Error::Rpc { code, message, .. }) => {
                assert_eq!(code, -32602, "{format}: {message}");
                assert!(message.contains("response_format"), "{format}: {message}");
            }
            other => panic!("{format}: expected -32602, got {other:?}"),
        }
    }
    assert!(server.requests().is_empty());
}
