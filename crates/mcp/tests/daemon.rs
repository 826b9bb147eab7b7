//! `car-mcp` against a real `car-server` (the harness starts it on port 0 with a temporary
//! `CAR_HOME`): the Streamable HTTP endpoint in process, and the `car-mcp` stdio binary as a
//! child process. The happy path (initialize → tools/list → memory_add_fact → memory_query
//! sees it, also over the daemon's WebSocket → verify), the daemon tool group's bearer rule,
//! tool errors as `isError` results, and the `car_context` prompt.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio as Pipe};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use car_test_harness::Daemon;
use common::{call, endpoint, post};
use serde_json::{json, Value};

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn http_happy_path_shares_the_daemons_memory() {
    let daemon = Daemon::start();
    let e = endpoint(&daemon.ws_url, false).await;

    let init = post(e.addr, &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).await;
    assert_eq!(init.status, 200);
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-06-18");
    let session = init.header("mcp-session-id").unwrap().to_string();
    let bearer = format!("Bearer {}", daemon.token().trim());
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Authorization", bearer.as_str()),
    ];
    let r = post(
        e.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(r.status, 202);

    let list = post(
        e.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await
    .json();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in [
        "memory_add_fact",
        "memory_query",
        "memory_delete",
        "skill_ingest",
        "skill_list",
        "skill_find",
        "verify",
        "events_query",
        "events_stats",
        "workflow_verify",
        "workflow_list_paused",
        "scheduler_list",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert!(!names.contains(&"workflow_run"));

    let added = post(e.addr, &headers, &call(3, "memory_add_fact", json!({
        "subject": "zebra-habits", "body": "the zebra sleeps standing up", "fact_id": "mcp-fact-1"}))).await.json();
    assert_eq!(added["result"]["isError"], false, "{added}");
    assert!(text(&added["result"]).parse::<u64>().is_ok(), "{added}");

    let found = post(
        e.addr,
        &headers,
        &call(4, "memory_query", json!({"query": "zebra sleeps", "k": 5})),
    )
    .await
    .json();
    assert_eq!(found["result"]["isError"], false, "{found}");
    assert!(found["result"].get("structuredContent").is_none());
    let hits: Value = serde_json::from_str(&text(&found["result"])).unwrap();
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["body"] == "the zebra sleeps standing up"),
        "{hits}"
    );

    // The same fact over the daemon's WebSocket: one shared graph.
    let ws = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(&daemon.home)).url(&daemon.ws_url),
    );
    let over_ws = ws
        .call("memory.query", json!({"query": "zebra sleeps"}))
        .await
        .unwrap();
    assert!(
        over_ws
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["fact_id"] == "mcp-fact-1"),
        "{over_ws}"
    );
    ws.close();

    let verified = post(
        e.addr,
        &headers,
        &call(
            5,
            "verify",
            json!({"proposal": {"actions": [
        {"id": "a", "type": "state_write", "key": "k", "value": 1},
        {"id": "b", "type": "state_write", "key": "j", "value": 2, "dependencies": ["a"]}]}}),
        ),
    )
    .await
    .json();
    assert_eq!(verified["result"]["isError"], false, "{verified}");
    let report: Value = serde_json::from_str(&text(&verified["result"])).unwrap();
    assert_eq!(report["valid"], true, "{report}");

    // Input the daemon rejects is a tool execution error naming the field.
    let bad = post(
        e.addr,
        &headers,
        &call(6, "memory_query", json!({"query": 5})),
    )
    .await
    .json();
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(text(&bad["result"]).contains("query"), "{bad}");

    // An object result is repeated as structuredContent.
    let deleted = post(
        e.addr,
        &headers,
        &call(7, "memory_delete", json!({"id": "mcp-fact-1"})),
    )
    .await
    .json();
    let structured = &deleted["result"]["structuredContent"];
    assert_eq!(structured["deleted"], true, "{deleted}");
    assert_eq!(
        serde_json::from_str::<Value>(&text(&deleted["result"])).unwrap(),
        *structured
    );

    let prompt = post(
        e.addr,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 8, "method": "prompts/get",
        "params": {"name": "car_context", "arguments": {"query": "zebra"}}}),
    )
    .await
    .json();
    assert_eq!(prompt["result"]["messages"][0]["role"], "user", "{prompt}");
    assert!(prompt["result"]["messages"][0]["content"]["text"].is_string());
}

/// CAR serves the memory and skill tools to any local process with no header; here a
/// request without the daemon token (or with a wrong one) reads, writes and deletes nothing.
#[tokio::test]
async fn a_stranger_without_the_token_reads_and_writes_nothing() {
    let daemon = Daemon::start();
    let e = endpoint(&daemon.ws_url, false).await;
    let owner = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(&daemon.home)).url(&daemon.ws_url),
    );
    owner
        .call(
            "memory.add_fact",
            json!({"subject": "private", "body": "the vault code is 4711", "fact_id": "secret-1"}),
        )
        .await
        .unwrap();

    for bad in [
        None,
        Some("Bearer not-the-token"),
        Some("Basic Zm9vOmJhcg=="),
    ] {
        let headers: Vec<(&str, &str)> = bad.iter().map(|h| ("Authorization", *h)).collect();
        let calls = [
            call(1, "memory_query", json!({"query": "vault code"})),
            call(
                2,
                "memory_add_fact",
                json!({"subject": "x", "body": "planted"}),
            ),
            call(3, "memory_delete", json!({"id": "secret-1"})),
            call(
                4,
                "skill_ingest",
                json!({"name": "s", "code": "x", "description": "d"}),
            ),
            call(5, "skill_list", json!({})),
            call(6, "verify", json!({"proposal": {"actions": []}})),
        ];
        for request in calls {
            let r = post(e.addr, &headers, &request).await.json();
            assert_eq!(r["result"]["isError"], true, "{bad:?} {request}: {r}");
            assert!(!text(&r["result"]).contains("4711"), "{r}");
        }
        let prompt = post(
            e.addr,
            &headers,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/get",
                "params": {"name": "car_context", "arguments": {"query": "vault code"}}}),
        )
        .await
        .json();
        assert!(prompt["error"].is_object(), "{prompt}");
        assert!(!prompt.to_string().contains("4711"), "{prompt}");
        if bad.is_none() {
            assert_eq!(prompt["error"]["code"], -32001, "{prompt}");
        }
    }
    // Listing stays open (metadata only, as in CAR).
    let list = post(
        e.addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
    )
    .await
    .json();
    assert!(list["result"]["tools"].as_array().unwrap().len() > 10);

    // Nothing was written or deleted.
    let hits = owner
        .call("memory.query", json!({"query": "vault code planted"}))
        .await
        .unwrap();
    let bodies: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["body"].as_str())
        .collect();
    assert!(bodies.contains(&"the vault code is 4711"), "{hits}");
    assert!(!bodies.contains(&"planted"), "{hits}");
    owner.close();
}

#[tokio::test]
async fn daemon_tools_need_the_callers_bearer_token() {
    let daemon = Daemon::start();
    let e = endpoint(&daemon.ws_url, true).await;
    let token = daemon.token();
    let bearer = format!("Bearer {}", token.trim());

    let r = post(e.addr, &[], &call(1, "events_stats", json!({})))
        .await
        .json();
    assert_eq!(r["result"]["isError"], true);
    assert!(text(&r["result"]).contains("Authorization"), "{r}");

    let r = post(
        e.addr,
        &[("Authorization", "Bearer not-the-token")],
        &call(2, "events_stats", json!({})),
    )
    .await
    .json();
    assert_eq!(r["result"]["isError"], true, "{r}");

    let r = post(
        e.addr,
        &[("Authorization", &bearer), ("X-Car-Agent-Id", "a1")],
        &call(3, "events_stats", json!({})),
    )
    .await
    .json();
    assert_eq!(r["result"]["isError"], true);
    assert!(text(&r["result"]).contains("X-Car-Agent-Id"), "{r}");

    let r = post(
        e.addr,
        &[("Authorization", &bearer)],
        &call(4, "events_stats", json!({})),
    )
    .await
    .json();
    assert_eq!(r["result"]["isError"], false, "{r}");

    let r = post(
        e.addr,
        &[("Authorization", &bearer)],
        &call(5, "events_query", json!({"limit": 3})),
    )
    .await
    .json();
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(r["result"]["structuredContent"]["events"].is_array(), "{r}");

    let r = post(
        e.addr,
        &[("Authorization", &bearer)],
        &call(
            6,
            "workflow_verify",
            json!({"workflow": {
        "id": "w", "name": "w", "start": "s", "stages": [], "edges": []}}),
        ),
    )
    .await
    .json();
    assert!(r["result"]["isError"].is_boolean(), "{r}");

    // Mutations are on here: the tool is listed; the daemon's own authority check still applies.
    let list = post(
        e.addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
    )
    .await
    .json();
    assert!(list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "scheduler_unschedule"));
    let r = post(
        e.addr,
        &[("Authorization", &bearer)],
        &call(8, "scheduler_unschedule", json!({"id": "nope"})),
    )
    .await
    .json();
    assert_eq!(
        r["result"]["isError"], true,
        "a host-only method refuses a daemon-token session: {r}"
    );
}

/// One line-oriented exchange with a child `car-mcp`.
struct StdioPeer {
    child: std::process::Child,
    reader: BufReader<std::process::ChildStdout>,
}

impl StdioPeer {
    fn ask(&mut self, message: Value) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        // Notifications get no line back; requests and batches (refused) do.
        if message.is_object() && message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

#[test]
fn stdio_binary_serves_the_core_tools() {
    let daemon = Daemon::start();
    // The client's project: `policy_check` reads its `.car/policies/` (car-mcp sends its own
    // working directory, as CAR's stdio server reads the one it runs in).
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".car/policies")).unwrap();
    std::fs::write(
        project.path().join(".car/policies/rules.toml"),
        "deny_tool = [\"WebFetch\"]\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_car-mcp"))
        .current_dir(project.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CAR_HOME", &daemon.home)
        .env("CAR_DAEMON_URL", &daemon.ws_url)
        .env("CAR_LOG", "debug")
        .stdin(Pipe::piped())
        .stdout(Pipe::piped())
        .stderr(Pipe::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stdout.take().unwrap());
    let mut io = StdioPeer { child, reader };

    let init = io.ask(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}}));
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
    io.ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let list = io.ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        16,
        "CAR's sixteen stdio tools: {list}"
    );
    let policy = io.ask(call(9, "policy_check", json!({"tool": "WebFetch"})));
    assert_eq!(
        policy["result"]["structuredContent"]["basis"], "denied_by_rule",
        "{policy}"
    );
    let added = io.ask(call(
        3,
        "memory_add_fact",
        json!({"subject": "stdio", "body": "okapis have striped legs"}),
    ));
    assert_eq!(added["result"]["isError"], false, "{added}");
    let found = io.ask(call(4, "memory_query", json!({"query": "okapis striped"})));
    assert!(
        text(&found["result"]).contains("okapis have striped legs"),
        "{found}"
    );
    let daemon_tool = io.ask(call(5, "events_stats", json!({})));
    assert_eq!(daemon_tool["error"]["code"], -32601);
    let batch = io.ask(json!([{"jsonrpc": "2.0", "id": 6, "method": "ping"}]));
    assert_eq!(batch["error"]["code"], -32600);

    drop(io.child.stdin.take());
    let status = io.child.wait().unwrap();
    assert!(
        status.success(),
        "car-mcp exits cleanly when stdin closes: {status}"
    );
}
