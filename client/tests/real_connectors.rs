//! MCP connectors against a real `car-server` and a real third-party MCP server from npm
//! (`@modelcontextprotocol/server-everything`, installed by `scripts/fetch-mcp-servers`),
//! over stdio and over Streamable HTTP: tools stay invisible until enabled, an enabled tool
//! runs inside a proposal (and in an agent loop the daemon runs), `deny_connector` refuses
//! it, a killed server fails its call at once, secrets stay out of `connectors.json`, and a
//! stdio server gets a minimal environment.

mod support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::http_script::{Reply, Server};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;

fn everything() -> String {
    std::env::var("CAR_TEST_MCP_EVERYTHING").unwrap_or_else(|_| {
        panic!("CAR_TEST_MCP_EVERYTHING is not set: run `eval \"$(scripts/fetch-mcp-servers)\"` before the tests")
    })
}

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

async fn add_stdio(c: &Client, name: &str) -> Value {
    within(
        "connectors.add_stdio",
        c.call(
            "connectors.add_stdio",
            json!({"name": name, "command": "node", "args": [everything(), "stdio"]}),
        ),
    )
    .await
    .unwrap()
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn proposal(tool: &str, parameters: Value) -> Value {
    json!({"proposal": {"actions": [{"id": "a1", "type": "tool_call", "tool": tool, "parameters": parameters}]}})
}

/// server-everything over Streamable HTTP on a free port, killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("node")
            .args([everything(), "streamableHttp".into()])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server-everything");
        let deadline = std::time::Instant::now() + support::SAFETY;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything never listened (hang guard)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_stdio_connectors_tools_are_invisible_until_enabled_then_run_in_a_proposal() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let status = add_stdio(&c, "Everything").await;
    assert_eq!(status["slug"], "everything", "{status}");
    assert_eq!(status["connected"], true, "{status}");
    assert!(status["tool_count"].as_u64().unwrap() > 3, "{status}");
    assert_eq!(status["enabled_count"], 0);
    assert!(status["url"].as_str().unwrap().starts_with("stdio:node"));

    // Disabled: listed by the connector, absent from the session, refused in a proposal.
    let views = c
        .call("connectors.tools", json!({"slug": "everything"}))
        .await
        .unwrap();
    let sum = views
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "get-sum")
        .unwrap()
        .clone();
    assert_eq!(
        (sum["canonical"].as_str(), sum["enabled"].as_bool()),
        (Some("mcp_everything_get-sum"), Some(false))
    );
    let listed = c.call("tools.list", json!({})).await.unwrap();
    assert!(
        !tool_names(&listed).iter().any(|n| n.starts_with("mcp_")),
        "{listed}"
    );
    let r = c
        .call(
            "proposal.submit",
            proposal("mcp_everything_get-sum", json!({"a": 2, "b": 3})),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["status"], "rejected", "{r}");

    // Enabled: in this session and in one opened later, and run by the daemon.
    let enabled = c
        .call(
            "connectors.enable_tools",
            json!({"slug": "everything", "tools": ["get-sum"]}),
        )
        .await
        .unwrap();
    assert_eq!(enabled["enabled"], 1);
    for session in [&c, &client(&d)] {
        let listed = session.call("tools.list", json!({})).await.unwrap();
        assert!(
            tool_names(&listed).contains(&"mcp_everything_get-sum".to_string()),
            "{listed}"
        );
    }
    let r = c
        .call(
            "proposal.submit",
            proposal("mcp_everything_get-sum", json!({"a": 2, "b": 3})),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    assert!(r["results"][0]["output"].to_string().contains('5'), "{r}");
    let status = &c.call("connectors.list", json!({})).await.unwrap()["connectors"][0];
    assert_eq!(status["enabled_count"], 1, "{status}");

    // Disabled again: gone from the session.
    let disabled = c
        .call(
            "connectors.disable_tools",
            json!({"slug": "everything", "tools": ["get-sum"]}),
        )
        .await
        .unwrap();
    assert_eq!(disabled["disabled"], 1);
    let listed = c.call("tools.list", json!({})).await.unwrap();
    assert!(
        !tool_names(&listed).iter().any(|n| n.starts_with("mcp_")),
        "{listed}"
    );

    let removed = c
        .call("connectors.remove", json!({"slug": "everything"}))
        .await
        .unwrap();
    assert_eq!(removed["removed"], "everything");
    assert_eq!(
        c.call("connectors.list", json!({})).await.unwrap()["connectors"],
        json!([])
    );
}

#[tokio::test]
async fn a_deny_connector_policy_refuses_every_tool_of_the_connector() {
    let d = Daemon::builder().start();
    let c = client(&d);
    add_stdio(&c, "everything").await;
    c.call(
        "connectors.enable_tools",
        json!({"slug": "everything", "tools": ["get-sum", "echo"]}),
    )
    .await
    .unwrap();
    c.call(
        "policy.register",
        json!({"name": "no-everything", "rule": "deny_connector", "target": "everything"}),
    )
    .await
    .unwrap();
    for (tool, params) in [
        ("mcp_everything_get-sum", json!({"a": 1, "b": 1})),
        ("mcp_everything_echo", json!({"message": "hi"})),
    ] {
        let r = c
            .call("proposal.submit", proposal(tool, params))
            .await
            .unwrap();
        assert_eq!(r["results"][0]["status"], "rejected", "{r}");
        let err = r["results"][0]["error"].as_str().unwrap();
        assert!(
            err.contains("no-everything") && err.contains("connector everything"),
            "{err}"
        );
    }
}

/// The pids of `pid`'s child processes.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    found
}

#[tokio::test]
async fn killing_the_server_mid_call_fails_the_action_at_once() {
    let d = Daemon::builder().start();
    let c = client(&d);
    add_stdio(&c, "everything").await;
    c.call(
        "connectors.enable_tools",
        json!({"slug": "everything", "tools": ["trigger-long-running-operation", "echo"]}),
    )
    .await
    .unwrap();
    let server = children(d.pid());
    assert_eq!(server.len(), 1, "one child: the stdio server ({server:?})");
    let call = c.call(
        "proposal.submit",
        proposal(
            "mcp_everything_trigger-long-running-operation",
            json!({"duration": 600, "steps": 600}),
        ),
    );
    let kill = async {
        // Once the daemon has called the tool (its `tool.called` event), the server dies.
        loop {
            let seen = c
                .call(
                    "events.query",
                    json!({"kinds": ["tool.called"], "action_id": "a1"}),
                )
                .await
                .unwrap();
            if seen["count"].as_u64() > Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        unsafe_kill(server[0]);
    };
    // The operation would run for ten minutes; the hang guard is one.
    let (r, ()) = within("the proposal with a killed server", async {
        tokio::join!(call, kill)
    })
    .await;
    let r = r.unwrap();
    assert_eq!(r["results"][0]["status"], "failed", "{r}");
    assert!(
        !r["results"][0]["error"].as_str().unwrap().is_empty(),
        "{r}"
    );
    let status = &c.call("connectors.list", json!({})).await.unwrap()["connectors"][0];
    assert_eq!(status["connected"], false, "{status}");
    // The next call of one of its tools starts the server again.
    let r = within(
        "a call after the kill",
        c.call(
            "proposal.submit",
            proposal("mcp_everything_echo", json!({"message": "back"})),
        ),
    )
    .await
    .unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    let restarted = children(d.pid());
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_ne!(restarted, server, "a new server process");
    let status = &c.call("connectors.list", json!({})).await.unwrap()["connectors"][0];
    assert_eq!(status["connected"], true, "{status}");
    unsafe_kill(restarted[0]);
    within("the server's exit to be seen", async {
        loop {
            let s = c.call("connectors.list", json!({})).await.unwrap();
            if s["connectors"][0]["connected"] == false {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Refresh starts it again.
    let views = within(
        "refresh",
        c.call("connectors.refresh", json!({"slug": "everything"})),
    )
    .await
    .unwrap();
    assert!(!views.as_array().unwrap().is_empty());
    let status = &c.call("connectors.list", json!({})).await.unwrap()["connectors"][0];
    assert_eq!(status["connected"], true, "{status}");
}

fn unsafe_kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn a_stdio_server_gets_a_minimal_environment() {
    let d = Daemon::builder()
        .env("OPENAI_API_KEY", "daemon-secret-canary")
        .start();
    let c = client(&d);
    let status = within(
        "add_stdio",
        c.call(
            "connectors.add_stdio",
            json!({"name": "env", "command": "node", "args": [everything(), "stdio"],
                                              "env": {"GIVEN": "given-value"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(status["connected"], true, "{status}");
    c.call(
        "connectors.enable_tools",
        json!({"slug": "env", "tools": ["get-env"]}),
    )
    .await
    .unwrap();
    let r = c
        .call("proposal.submit", proposal("mcp_env_get-env", json!({})))
        .await
        .unwrap();
    let out = r["results"][0]["output"].to_string();
    assert!(out.contains("given-value"), "{out}");
    assert!(
        !out.contains("daemon-secret-canary") && !out.contains("CAR_HOME"),
        "{out}"
    );
    // The env value is a secret: not in the manifest.
    let manifest = std::fs::read_to_string(d.home.join("connectors.json")).unwrap();
    assert!(
        manifest.contains("GIVEN") && !manifest.contains("given-value"),
        "{manifest}"
    );
}

/// One streamed OpenAI reply with tool calls.
fn turn(calls: &[(&str, &str, Value)]) -> Reply {
    Reply::openai_turn("", calls, None)
}

#[tokio::test]
async fn an_http_connector_serves_an_agent_loop_the_daemon_runs_and_keeps_its_headers_secret() {
    let server = HttpServer::start();
    let model = Server::start(vec![
        turn(&[("c1", "mcp_remote_get-sum", json!({"a": 20, "b": 22}))]),
        turn(&[("c2", "finish", json!({"answer": "42"}))]),
    ]);
    let d = Daemon::builder().start();
    let c = client(&d);
    c.call_as_host(
        "models.register",
        json!({"id": "scripted", "base_url": format!("{}/v1", model.base_url), "model": "m"}),
    )
    .await
    .unwrap();
    let status = within(
        "connectors.add",
        c.call("connectors.add", json!({"name": "remote", "url": server.url, "headers": {"X-Api-Key": "header-secret-canary"}})),
    )
    .await
    .unwrap();
    assert_eq!(status["connected"], true, "{status}");
    assert_eq!(status["url"], server.url.as_str());
    c.call(
        "connectors.enable_tools",
        json!({"slug": "remote", "tools": ["get-sum"]}),
    )
    .await
    .unwrap();
    let manifest = std::fs::read_to_string(d.home.join("connectors.json")).unwrap();
    assert!(
        manifest.contains("X-Api-Key") && !manifest.contains("header-secret-canary"),
        "{manifest}"
    );

    let stage = json!({"name": "adder", "tools": ["mcp_remote_get-sum"], "max_turns": 3,
                       "metadata": {"model": "scripted", "max_tokens": 32}});
    let r = within(
        "the pipeline",
        c.call(
            "multi.pipeline",
            json!({"stages": [stage], "task": "Add 20 and 22."}),
        ),
    )
    .await
    .unwrap();
    let out = &r["stages"][0];
    assert!(out["error"].is_null(), "{out}");
    assert_eq!(out["answer"], "42");
    assert_eq!(
        out["outcome"]["tools_called"],
        json!(["mcp_remote_get-sum", "finish"])
    );
    // The model observed the server's answer.
    let observed = model.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        observed["content"].as_str().unwrap().contains("42"),
        "{observed}"
    );
}

#[tokio::test]
async fn connectors_survive_a_restart_with_their_tools_enabled() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().join("car-home");
    {
        let d = Daemon::builder().home(&home).start();
        let c = client(&d);
        add_stdio(&c, "everything").await;
        c.call(
            "connectors.enable_tools",
            json!({"slug": "everything", "tools": ["echo"]}),
        )
        .await
        .unwrap();
    }
    let d = Daemon::builder().home(&home).start();
    let c = client(&d);
    // The daemon connects its connectors in the background at startup.
    let connected = within("the connector reconnects", async {
        loop {
            let listed = c.call("connectors.list", json!({})).await.unwrap();
            if listed["connectors"][0]["connected"] == true {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(
        connected["connectors"][0]["enabled_count"], 1,
        "{connected}"
    );
    let fresh = client(&d);
    let r = fresh
        .call(
            "proposal.submit",
            proposal("mcp_everything_echo", json!({"message": "again"})),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    assert!(
        r["results"][0]["output"].to_string().contains("again"),
        "{r}"
    );
}

#[tokio::test]
async fn bad_connector_input_is_refused_by_field_and_agents_may_not_add() {
    let d = Daemon::builder().start();
    let c = client(&d);
    for (method, params, field) in [
        (
            "connectors.add",
            json!({"name": "x", "url": "ftp://example.invalid"}),
            "url",
        ),
        (
            "connectors.add",
            json!({"name": "___", "url": "http://127.0.0.1:1/mcp"}),
            "name",
        ),
        (
            "connectors.add",
            json!({"name": "x", "url": "http://127.0.0.1:1/mcp", "headers": {"bad header": "v"}}),
            "headers",
        ),
        (
            "connectors.add_stdio",
            json!({"name": "x", "command": " "}),
            "command",
        ),
        (
            "connectors.add_stdio",
            json!({"name": "x", "command": "node", "env": {"A=B": "v"}}),
            "env",
        ),
        ("connectors.tools", json!({"slug": "nope"}), "slug"),
        (
            "connectors.enable_tools",
            json!({"slug": "nope", "tools": ["a"]}),
            "slug",
        ),
        ("connectors.remove", json!({"slug": "nope"}), "slug"),
        ("connectors.add", json!({"name": "x"}), "url"),
    ] {
        match c.call(method, params.clone()).await {
            Err(Error::Rpc { code, message, .. }) => {
                assert_eq!(code, -32602, "{method} {params}: {message}");
                assert!(
                    message.contains(field),
                    "{method} {params}: {message:?} should name {field}"
                );
            }
            other => panic!("{method} {params}: expected -32602, got {other:?}"),
        }
    }
    // An unreachable server is added, not connected, with its error.
    let status = within(
        "add unreachable",
        c.call(
            "connectors.add",
            json!({"name": "gone", "url": "http://127.0.0.1:1/mcp"}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(status["connected"], false, "{status}");
    assert!(status["last_error"].is_string(), "{status}");
    // A tool the server does not list cannot be enabled.
    add_stdio(&c, "everything").await;
    match c
        .call(
            "connectors.enable_tools",
            json!({"slug": "everything", "tools": ["get-sum", "no-such-tool"]}),
        )
        .await
    {
        Err(Error::Rpc { code, message, .. }) => {
            assert_eq!(code, -32602);
            assert!(
                message.contains("tools[1]") && message.contains("no-such-tool"),
                "{message}"
            );
        }
        other => panic!("expected -32602, got {other:?}"),
    }
    // An agent session may read connectors but not change them.
    let host = client(&d);
    let agent = support::agent_client(&d.home, &host, "worker").await;
    agent.call("connectors.list", json!({})).await.unwrap();
    match agent
        .call(
            "connectors.add_stdio",
            json!({"name": "mine", "command": "node"}),
        )
        .await
    {
        Err(Error::Rpc { data, .. }) => assert_eq!(data.unwrap()["reason"], "agent_not_allowed"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_daemon_holds_a_bounded_number_of_connectors() {
    let d = Daemon::builder().start();
    let c = client(&d);
    // Unreachable servers are added (not connected) without spawning anything.
    for i in 0..32 {
        let s = within(
            "add",
            c.call(
                "connectors.add",
                json!({"name": format!("c{i}"), "url": "http://127.0.0.1:1/mcp"}),
            ),
        )
        .await
        .unwrap();
        assert_eq!(s["connected"], false);
    }
    match c
        .call(
            "connectors.add",
            json!({"name": "one-more", "url": "http://127.0.0.1:1/mcp"}),
        )
        .await
    {
        Err(Error::Rpc { code, message, .. }) => {
            assert_eq!(code, -32602);
            assert!(message.contains("at most 32 connectors"), "{message}");
        }
        other => panic!("expected -32602, got {other:?}"),
    }
    // Replacing an existing one is not a new one.
    within(
        "replace",
        c.call(
            "connectors.add",
            json!({"name": "c0", "url": "http://127.0.0.1:2/mcp"}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        c.call("connectors.list", json!({})).await.unwrap()["connectors"]
            .as_array()
            .unwrap()
            .len(),
        32
    );
}
