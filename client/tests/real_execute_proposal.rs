//! `execute_proposal` against the real daemon: tool calls of a run go to that run's tool
//! function, concurrent runs stay apart, and the registered tool handler is untouched.

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, HandlerError, ToolCall};
use car_test_harness::Daemon;
use serde_json::json;

#[tokio::test]
async fn runs_use_their_own_tool_functions() {
    let d = Daemon::start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    client
        .register_tool_handler(|_| Err(HandlerError::new("the default handler must not be used")));
    let proposal = |tag: &str| {
        json!({"actions": [
            {"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"tag": tag}},
            {"id": "b", "type": "tool_call", "tool": "upper", "parameters": {"tag": tag}, "dependencies": ["a"]}
        ]})
    };
    let runs = (0..4).map(|i| {
        let client = client.clone();
        let tag = format!("run{i}");
        async move {
            let mine = tag.clone();
            let r = client
                .execute_proposal(proposal(&tag), None, move |call: ToolCall| {
                    assert_eq!(call.params["tag"], mine.as_str(), "a call from another run");
                    Ok(json!({"tool": call.tool, "tag": call.params["tag"]}))
                })
                .await
                .unwrap();
            (tag, r)
        }
    });
    for (tag, r) in futures_util::future::join_all(runs).await {
        assert_eq!(
            r["outputs"]["b"],
            json!({"tool": "upper", "tag": tag}),
            "{r}"
        );
    }
    // The tools it used were registered on the connection.
    let tools = client.call("tools.list", json!({})).await.unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        (names, tools["count"].as_u64()),
        (vec!["echo", "upper"], Some(2))
    );
    // A terminal error from the run's function halts the session like any other.
    let r = client
        .execute_proposal(
            json!({"actions": [{"id": "t", "type": "tool_call", "tool": "echo"}]}),
            Some("mine".into()),
            |_| Err(HandlerError::terminal("journal gone")),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["terminal"], true);
}
