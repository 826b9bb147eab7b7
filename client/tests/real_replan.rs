//! The replan loop against a real `car-server` (`replan.set_config`): a proposal stopped by a
//! failed action is rolled back and replaced by the client's `proposal.replan` answer; the
//! loop stops when the replans are spent, when the client declines, and when it has no
//! handler; rejections replan only with `replan_on_rejected`; bad configurations are refused
//! by field.

use std::sync::{Arc, Mutex};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error, ToolCall};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

/// Writes `draft`, then calls `summarize` with `mode`; `summarize` fails unless `mode` is "safe".
fn proposal(mode: &str) -> Value {
    json!({"actions": [
        {"id": "w", "type": "state_write", "key": "draft", "value": mode},
        {"id": "d", "type": "tool_call", "tool": "summarize", "parameters": {"mode": mode},
         "dependencies": ["w"]}
    ]})
}

async fn setup(c: &Client) {
    c.call("tools.register", json!([{"name": "summarize"}]))
        .await
        .unwrap();
    c.register_tool_handler(|call: ToolCall| {
        if call.params["mode"] == "safe" {
            Ok(json!({"summarizeed": true}))
        } else {
            Err(car_daemon_client::HandlerError::new(format!(
                "mode {} is not allowed",
                call.params["mode"]
            )))
        }
    });
}

async fn submit(c: &Client, p: Value) -> Value {
    c.call("proposal.submit", json!({"proposal": p}))
        .await
        .unwrap()
}

fn status(result: &Value, id: &str) -> String {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action_id"] == id)
        .map(|r| r["status"].as_str().unwrap().to_string())
        .unwrap()
}

async fn kinds(c: &Client) -> Vec<String> {
    let events = c
        .call("events.query", json!({"kinds": ["replan.requested", "replan.exhausted", "replan.unavailable", "state.rolled_back"]}))
        .await
        .unwrap();
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_failed_action_is_rolled_back_and_replaced_by_the_clients_new_proposal() {
    let d = Daemon::start();
    let c = client(&d);
    setup(&c).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        c.register_handler("proposal.replan", move |params: Value| {
            seen.lock().unwrap().push(params.clone());
            Ok(json!({"proposal": proposal("safe")}))
        });
    }
    c.call("replan.set_config", json!({"max_replans": 2}))
        .await
        .unwrap();
    let result = submit(&c, proposal("reckless")).await;
    assert_eq!(result["replans"], 1, "{result}");
    assert_eq!(status(&result, "d"), "succeeded", "{result}");
    assert_eq!(result["final_state"]["draft"], "safe", "{result}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let asked = &seen[0];
    assert_eq!(asked["replan"], 1);
    assert_eq!(asked["max_replans"], 2);
    assert_eq!(asked["failed"]["action_id"], "d");
    assert_eq!(asked["failed"]["tool"], "summarize");
    assert_eq!(asked["failed"]["status"], "failed");
    assert_eq!(asked["failed"]["parameters"], json!({"mode": "reckless"}));
    assert!(
        asked["failed"]["error"]
            .as_str()
            .unwrap()
            .contains("is not allowed"),
        "{asked}"
    );
    assert_eq!(asked["proposal"], proposal("reckless"));
    let k = kinds(&c).await;
    assert!(k.contains(&"replan.requested".to_string()), "{k:?}");
    // The failed run's write of `draft` was undone before the replacement ran.
    assert!(k.contains(&"state.rolled_back".to_string()), "{k:?}");
}

#[tokio::test]
async fn the_loop_stops_when_spent_declined_or_unavailable() {
    let d = Daemon::start();
    let c = client(&d);
    setup(&c).await;
    let asked = Arc::new(Mutex::new(0usize));
    {
        let asked = asked.clone();
        c.register_handler("proposal.replan", move |_| {
            *asked.lock().unwrap() += 1;
            Ok(json!({"proposal": proposal("reckless")}))
        });
    }
    c.call(
        "replan.set_config",
        json!({"max_replans": 2, "delay_ms": 1}),
    )
    .await
    .unwrap();
    let spent = submit(&c, proposal("reckless")).await;
    assert_eq!(spent["replans"], 2, "{spent}");
    assert_eq!(status(&spent, "d"), "failed");
    assert_eq!(*asked.lock().unwrap(), 2);
    assert!(kinds(&c).await.contains(&"replan.exhausted".to_string()));

    // Declined: `null` stops the loop after rolling the failed run back.
    c.register_handler("proposal.replan", |_| Ok(Value::Null));
    let declined = submit(&c, proposal("reckless")).await;
    assert!(declined.get("replans").is_none(), "{declined}");
    assert_eq!(status(&declined, "d"), "failed");
    // The exhausted run above left its write; this run's write was undone on top of it.
    let w = &declined["results"][0];
    assert_eq!(w["action_id"], "w");
    assert_eq!(w["rolled_back"], true, "{declined}");

    // A garbage answer spends a replan; it never loops.
    c.register_handler("proposal.replan", |_| Ok(json!({"proposal": 7})));
    let garbage = submit(&c, proposal("reckless")).await;
    assert_eq!(garbage["replans"], 2, "{garbage}");

    // No handler: the client answers -32601 and the loop ends.
    c.unregister_handler("proposal.replan");
    let unavailable = submit(&c, proposal("reckless")).await;
    assert_eq!(status(&unavailable, "d"), "failed");
    assert!(kinds(&c).await.contains(&"replan.unavailable".to_string()));

    // 0 turns it off: no callback at all.
    c.call("replan.set_config", json!({"max_replans": 0}))
        .await
        .unwrap();
    *asked.lock().unwrap() = 0;
    {
        let asked = asked.clone();
        c.register_handler("proposal.replan", move |_| {
            *asked.lock().unwrap() += 1;
            Ok(Value::Null)
        });
    }
    let off = submit(&c, proposal("reckless")).await;
    assert_eq!(status(&off, "d"), "failed");
    assert_eq!(off["final_state"]["draft"], "reckless", "{off}");
    assert_eq!(*asked.lock().unwrap(), 0);
}

#[tokio::test]
async fn rejections_replan_only_when_asked_and_bad_configs_name_the_field() {
    let d = Daemon::start();
    let c = client(&d);
    setup(&c).await;
    c.call(
        "policy.register",
        json!({"name": "no-summarize", "rule": "deny_tool", "target": "summarize"}),
    )
    .await
    .unwrap();
    let asked = Arc::new(Mutex::new(0usize));
    {
        let asked = asked.clone();
        c.register_handler("proposal.replan", move |_| {
            *asked.lock().unwrap() += 1;
            Ok(json!({"proposal": {"actions": [
                {"id": "w", "type": "state_write", "key": "draft", "value": "parked"}
            ]}}))
        });
    }
    c.call("replan.set_config", json!({"max_replans": 1}))
        .await
        .unwrap();
    let rejected = submit(&c, proposal("safe")).await;
    assert_eq!(status(&rejected, "d"), "rejected", "{rejected}");
    assert_eq!(*asked.lock().unwrap(), 0);

    c.call(
        "replan.set_config",
        json!({"max_replans": 1, "replan_on_rejected": true, "verify_before_execute": null}),
    )
    .await
    .unwrap();
    let replanned = submit(&c, proposal("safe")).await;
    assert_eq!(*asked.lock().unwrap(), 1);
    assert_eq!(replanned["replans"], 1, "{replanned}");
    assert_eq!(replanned["final_state"]["draft"], "parked", "{replanned}");

    for (config, field) in [
        (json!({"max_replans": -1}), "max_replans"),
        (json!({"max_replans": 1000}), "max_replans"),
        (json!({}), "max_replans"),
        (json!({"max_replans": 1, "delay_ms": 3_600_000}), "delay_ms"),
        (
            json!({"max_replans": 1, "replan_on_rejected": "yes"}),
            "replan_on_rejected",
        ),
    ] {
        match c.call("replan.set_config", config.clone()).await {
            Err(Error::Rpc { code, message, .. }) => {
                assert_eq!(code, -32602, "{config}: {message}");
                assert!(message.contains(field), "{config}: {message}");
            }
            other => panic!("{config}: {other:?}"),
        }
    }
}
