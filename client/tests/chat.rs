//! Serving `agent.chat` on the wire, against the scripted fake daemon (the real daemon's
//! `agents.chat` is not there yet): the ack comes first and the events follow in order,
//! ending with exactly one terminal event; invalid params are `-32602` naming the field;
//! approvals park until `agent.chat.approve` (or a cancel, or the connection's end)
//! decides; a cancel ends the turn as `done {finish_reason: "cancelled"}`; one turn per
//! session at a time; the agent-loop runner keeps a thread per session and honours the
//! turn's `model`.

mod support;

use std::sync::Arc;

use car_daemon_client::{AgentConfig, ChatThreadLimits, ChatTurnContext, Client, ToolCall};
use serde_json::{json, Value};
use support::{within, FakeConn, FakeDaemon, SAFETY};
use tokio::sync::mpsc;

/// A client serving chat and the fake's side of its connection.
struct Rig {
    client: Client,
    conn: FakeConn,
    _fake: FakeDaemon,
    _home: tempfile::TempDir,
}

async fn rig(serve: impl FnOnce(&Client)) -> Rig {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let fake = FakeDaemon::start(move |mut conn: FakeConn| {
        let tx = tx.clone();
        async move {
            conn.accept_handshake().await;
            let _ = tx.send(conn);
        }
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(support::config_for(&fake.url, home.path()));
    serve(&client);
    client.connect().await.unwrap();
    let conn = within("the connection", rx.recv()).await.unwrap();
    Rig {
        client,
        conn,
        _fake: fake,
        _home: home,
    }
}

impl Rig {
    async fn request(&mut self, id: &str, method: &str, params: Value) {
        self.conn
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    async fn chat(&mut self, id: &str, params: Value) {
        self.request(id, "agent.chat", params).await;
    }

    async fn next(&mut self) -> Value {
        within("a frame from the client", self.conn.recv())
            .await
            .expect("the client is still connected")
    }

    /// Frames until (and with) `session_id`'s terminal event.
    async fn until_terminal(&mut self, session_id: &str) -> Vec<Value> {
        self.until(|frames| frames.iter().any(|f| is_terminal(f, session_id)))
            .await
    }

    /// Frames until `done` holds for all of them so far.
    async fn until(&mut self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        while !done(&frames) {
            frames.push(self.next().await);
        }
        frames
    }
}

fn is_terminal(frame: &Value, session_id: &str) -> bool {
    is_event(frame, session_id)
        && matches!(frame["params"]["kind"].as_str(), Some("done" | "error"))
}

fn is_event(frame: &Value, session_id: &str) -> bool {
    frame["method"] == "agent.chat.event" && frame["params"]["session_id"] == session_id
}

fn events(frames: &[Value], session_id: &str) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| is_event(f, session_id))
        .map(|f| {
            assert!(f.get("id").is_none(), "events are notifications: {f}");
            let mut e = f["params"].clone();
            e.as_object_mut().unwrap().remove("session_id");
            e
        })
        .collect()
}

fn response<'a>(frames: &'a [Value], id: &str) -> &'a Value {
    frames
        .iter()
        .find(|f| f["id"] == id && f.get("method").is_none())
        .unwrap_or_else(|| panic!("no response to {id} in {frames:?}"))
}

#[tokio::test]
async fn a_turn_is_acked_first_then_streams_its_events_in_order() {
    let mut r = rig(|c| {
        c.serve_chat(|turn: &ChatTurnContext| {
            let p = turn.params();
            assert!(std::thread::current().name() == Some("car-chat-turn"));
            for i in 0..100 {
                turn.emit_token(&format!("t{i}"));
            }
            turn.emit_tool_call("search", Some(json!({"q": p.prompt})));
            turn.emit_goal_evaluated(1, true, false, "looks done");
            Ok(format!("{}|{:?}", p.prompt, p.requested_model()))
        })
    })
    .await;
    r.chat(
        "c1",
        json!({"session_id": "s1", "prompt": "hello", "model": "m1", "stream": true,
               "context": {"host_client_id": "h"}}),
    )
    .await;
    let frames = r.until_terminal("s1").await;
    assert_eq!(
        frames[0],
        json!({"jsonrpc": "2.0", "id": "c1", "result": {"accepted": true, "session_id": "s1"}}),
        "the ack comes before any event"
    );
    let got = events(&frames, "s1");
    assert_eq!(got.len(), frames.len() - 1);
    let mut want: Vec<Value> = (0..100)
        .map(|i| json!({"kind": "token", "delta": format!("t{i}")}))
        .collect();
    want.push(json!({"kind": "tool_call", "tool": "search", "params": {"q": "hello"}}));
    want.push(
        json!({"kind": "goal_evaluated", "iteration": 1, "met": true, "grounded": false,
                     "reason": "looks done"}),
    );
    want.push(json!({"kind": "done", "finish_reason": "stop", "text": "hello|Some(\"m1\")"}));
    assert_eq!(got, want);
}

#[tokio::test]
async fn invalid_params_are_refused_naming_the_field_and_start_no_turn() {
    let mut r = rig(|c| c.serve_chat(|_: &ChatTurnContext| Ok("ran".into()))).await;
    r.chat("bad", json!({"session_id": "s1"})).await;
    let refusal = r.next().await;
    assert_eq!(refusal["id"], "bad");
    assert_eq!(refusal["error"]["code"], -32602, "{refusal}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt"),
        "{refusal}"
    );
    // Nothing ran for the refused call: the next frame is the next call's ack.
    r.chat("good", json!({"session_id": "s1", "prompt": "p"}))
        .await;
    let frames = r.until_terminal("s1").await;
    assert_eq!(frames[0]["id"], "good");
    assert_eq!(
        events(&frames, "s1"),
        [json!({"kind": "done", "finish_reason": "stop", "text": "ran"})]
    );
}

#[tokio::test]
async fn approvals_park_until_the_daemon_decides() {
    let mut r = rig(|c| {
        c.serve_chat(|turn: &ChatTurnContext| {
            let ok = turn.request_approval("a1", "delete file", Some(json!({"path": "/x"})));
            Ok(format!("approved={ok}"))
        })
    })
    .await;
    for (decision, approved) in [
        (json!("approve"), true),
        (json!(true), true),
        (json!("nope"), false),
        (Value::Null, false),
    ] {
        r.chat("c1", json!({"session_id": "s1", "prompt": "p"}))
            .await;
        assert_eq!(r.next().await["result"]["accepted"], true);
        let pending = r.next().await;
        assert_eq!(
            events(std::slice::from_ref(&pending), "s1"),
            [
                json!({"kind": "approval_pending", "approval_id": "a1", "action": "delete file",
                    "details": {"path": "/x"}})
            ]
        );
        // Unknown approvals and sessions resolve nothing.
        r.request(
            "x1",
            "agent.chat.approve",
            json!({"session_id": "s1", "approval_id": "zz", "decision": true}),
        )
        .await;
        assert_eq!(r.next().await["result"], json!({"resolved": false}));
        r.request(
            "x2",
            "agent.chat.approve",
            json!({"session_id": "nobody", "approval_id": "a1", "decision": true}),
        )
        .await;
        assert_eq!(r.next().await["result"], json!({"resolved": false}));
        let mut params = json!({"session_id": "s1", "approval_id": "a1"});
        if !decision.is_null() {
            params["decision"] = decision.clone();
        }
        r.request("ap", "agent.chat.approve", params).await;
        // The answer and the turn's end race each other: wait for both.
        let frames = r
            .until(|fs| {
                fs.iter().any(|f| is_terminal(f, "s1"))
                    && fs
                        .iter()
                        .any(|f| f["id"] == "ap" && f.get("result").is_some())
            })
            .await;
        assert_eq!(response(&frames, "ap")["result"], json!({"resolved": true}));
        assert_eq!(
            events(&frames, "s1"),
            [json!({"kind": "done", "finish_reason": "stop",
                    "text": format!("approved={approved}")})],
            "{decision}"
        );
    }
}

#[tokio::test]
async fn a_cancel_denies_the_parked_approval_and_ends_the_turn_as_cancelled() {
    let mut r = rig(|c| {
        c.serve_chat(|turn: &ChatTurnContext| {
            turn.emit_token("working");
            let ok = turn.request_approval("a1", "deploy", None);
            let stopped = turn.abort_signal().wait(SAFETY);
            Ok(format!("approved={ok} stopped={stopped}"))
        })
    })
    .await;
    r.chat("c1", json!({"session_id": "s1", "prompt": "p"}))
        .await;
    assert_eq!(r.next().await["id"], "c1");
    assert_eq!(r.next().await["params"]["kind"], "token");
    assert_eq!(r.next().await["params"]["kind"], "approval_pending");
    // Cancels for sessions with no turn are ignored.
    for session in ["other", "s1"] {
        r.conn
            .send(json!({"jsonrpc": "2.0", "method": "agent.chat.cancel",
                         "params": {"session_id": session}}))
            .await;
    }
    let frames = r.until_terminal("s1").await;
    assert_eq!(
        events(&frames, "s1"),
        [json!({"kind": "done", "finish_reason": "cancelled",
                "text": "approved=false stopped=true"})]
    );
}

#[tokio::test]
async fn one_turn_per_session_at_a_time() {
    let mut r = rig(|c| {
        c.serve_chat(|turn: &ChatTurnContext| {
            if turn.params().prompt == "wait" {
                turn.request_approval("go", "continue", None);
            }
            Ok(turn.params().prompt.clone())
        })
    })
    .await;
    r.chat("c1", json!({"session_id": "s1", "prompt": "wait"}))
        .await;
    assert_eq!(r.next().await["id"], "c1");
    assert_eq!(r.next().await["params"]["kind"], "approval_pending");
    r.chat("c2", json!({"session_id": "s1", "prompt": "again"}))
        .await;
    let busy = r.next().await;
    assert_eq!(busy["id"], "c2");
    assert_eq!(busy["error"]["code"], -32000, "{busy}");
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already has a turn in flight"),
        "{busy}"
    );
    // Another session runs meanwhile.
    r.chat("c3", json!({"session_id": "s2", "prompt": "other"}))
        .await;
    let frames = r.until_terminal("s2").await;
    assert_eq!(response(&frames, "c3")["result"]["accepted"], true);
    r.request(
        "ap",
        "agent.chat.approve",
        json!({"session_id": "s1", "approval_id": "go", "decision": "yes"}),
    )
    .await;
    r.until_terminal("s1").await;
    // Once its terminal event was sent, the session takes a new turn.
    r.chat("c4", json!({"session_id": "s1", "prompt": "next"}))
        .await;
    let frames = r.until_terminal("s1").await;
    assert_eq!(response(&frames, "c4")["result"]["accepted"], true);
    assert_eq!(events(&frames, "s1")[0]["text"], "next");
}

#[tokio::test]
async fn failures_and_panics_end_the_turn_with_error() {
    let mut r = rig(|c| {
        c.serve_chat(
            |turn: &ChatTurnContext| match turn.params().prompt.as_str() {
                "fail" => Err("model unavailable".into()),
                _ => panic!("handler blew up"),
            },
        )
    })
    .await;
    r.chat("c1", json!({"session_id": "s1", "prompt": "fail"}))
        .await;
    let frames = r.until_terminal("s1").await;
    assert_eq!(
        events(&frames, "s1"),
        [json!({"kind": "error", "error": "model unavailable"})]
    );
    r.chat("c2", json!({"session_id": "s1", "prompt": "panic"}))
        .await;
    let frames = r.until_terminal("s1").await;
    let got = events(&frames, "s1");
    assert_eq!(got[0]["kind"], "error");
    assert!(
        got[0]["error"]
            .as_str()
            .unwrap()
            .contains("handler blew up"),
        "{got:?}"
    );
    // The connection is fine.
    r.client.stop_serving_chat();
    r.chat("c3", json!({"session_id": "s1", "prompt": "p"}))
        .await;
    assert_eq!(r.next().await["error"]["code"], -32601);
}

#[tokio::test]
async fn a_lost_connection_denies_the_parked_approval_and_nothing_hangs() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let r = rig(move |c| {
        c.serve_chat(move |turn: &ChatTurnContext| {
            let ok = turn.request_approval("a1", "deploy", None);
            // Emitting after the connection ended is quiet, not an error or a hang.
            turn.emit_token("after the end");
            tx.send((ok, turn.is_cancelled())).unwrap();
            Ok("unheard".into())
        })
    })
    .await;
    let Rig {
        mut conn, client, ..
    } = r;
    conn.send(json!({"jsonrpc": "2.0", "id": "c1", "method": "agent.chat",
                     "params": {"session_id": "s1", "prompt": "p"}}))
        .await;
    assert_eq!(within("ack", conn.recv()).await.unwrap()["id"], "c1");
    let pending = within("approval_pending", conn.recv()).await.unwrap();
    assert_eq!(pending["params"]["kind"], "approval_pending");
    conn.drop_socket();
    let (approved, cancelled) = within("the turn's end", rx.recv()).await.unwrap();
    assert!(!approved && cancelled);
    drop(client);
}

/// The fake daemon's side of the agent loop for one chat turn: answers the loop's calls
/// (`infer` with `infer_reply`; `{"refuse": message}` answers with that error), serves a
/// `proposal.submit` by reverse-calling `tools.execute`, and returns the turn's frames and `infer`
/// params.
async fn drive_loop_turn(
    r: &mut Rig,
    session_id: &str,
    mut infer_reply: impl FnMut(&Value) -> Value,
) -> (Vec<Value>, Vec<Value>) {
    let (mut frames, mut infers, mut submit) = (Vec::new(), Vec::new(), None::<Value>);
    loop {
        let f = r.next().await;
        let reply = match f["method"].as_str() {
            Some(_) if f.get("id").is_none() => None,
            Some("infer") => {
                infers.push(f["params"].clone());
                Some(infer_reply(&f["params"]))
            }
            Some("runs.start") => Some(json!({"run_id": "run-1"})),
            Some("verify") => Some(json!({"valid": true, "issues": []})),
            Some("tools.list") => Some(json!({"tools": [{"name": "add"}, {"name": "finish"}]})),
            Some("proposal.submit") => {
                let action = &f["params"]["proposal"]["actions"][0];
                let call = json!({"tool": action["tool"], "parameters": action["parameters"],
                                  "action_id": action["id"],
                                  "session_id": f["params"]["session_id"]});
                r.request("te-1", "tools.execute", call).await;
                submit = Some(f.clone());
                None
            }
            Some(_) => Some(json!({})),
            None if f["id"] == "te-1" => {
                let submitted = submit.take().expect("tools.execute answers a submit");
                let action_id = &submitted["params"]["proposal"]["actions"][0]["id"];
                r.conn
                    .reply(
                        &submitted,
                        json!({"results": [{"action_id": action_id, "status": "succeeded",
                                             "output": f["result"]}]}),
                    )
                    .await;
                None
            }
            None => None,
        };
        match reply {
            Some(Value::Object(o)) if o.contains_key("refuse") => {
                let message = o["refuse"].as_str().unwrap_or_default();
                r.conn.reply_error(&f, -32603, message).await;
            }
            Some(result) => r.conn.reply(&f, result).await,
            None => {}
        }
        let terminal = is_terminal(&f, session_id);
        frames.push(f);
        if terminal {
            return (frames, infers);
        }
    }
}

fn dialogue(infer: &Value) -> Vec<String> {
    infer["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .collect()
}

fn text_reply(text: &str) -> Value {
    json!({"text": text, "tool_calls": [], "model_used": "m"})
}

#[tokio::test]
async fn the_agent_loop_runner_keeps_a_thread_per_session_and_honours_the_model() {
    let config = AgentConfig {
        agent_name: "chat".into(),
        identity: "You chat.".into(),
        default_model: Some("cfg-model".into()),
        tool_schemas: vec![json!({"name": "add"})],
        max_turns: 4,
        max_tokens: 256,
        ..AgentConfig::default()
    };
    let limits = ChatThreadLimits {
        max_sessions: 64,
        max_turns: 1,
    };
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = calls.clone();
    let mut r = rig(move |c| {
        c.serve_chat_with_agent_loop(config, limits, move |call: ToolCall| {
            seen.lock().unwrap().push(call.params.clone());
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() + 1}))
        })
    })
    .await;

    // Turn 1 calls a tool, then answers; the empty model keeps the config's.
    r.chat(
        "c1",
        json!({"session_id": "s1", "prompt": "q1", "model": ""}),
    )
    .await;
    let mut n = 0;
    let (frames, infers) = drive_loop_turn(&mut r, "s1", |_| {
        n += 1;
        if n == 1 {
            json!({"text": "", "model_used": "m",
                   "tool_calls": [{"id": "call-1", "name": "add", "arguments": {"a": 1}}]})
        } else {
            text_reply("r1")
        }
    })
    .await;
    assert_eq!(response(&frames, "c1")["result"]["accepted"], true);
    assert_eq!(
        events(&frames, "s1"),
        [
            json!({"kind": "tool_call", "tool": "add", "params": {"a": 1}}),
            json!({"kind": "token", "delta": "r1"}),
            json!({"kind": "done", "finish_reason": "stop", "text": "r1"}),
        ]
    );
    assert_eq!(*calls.lock().unwrap(), [json!({"a": 1})]);
    assert_eq!(infers[0]["model"], "cfg-model");
    assert_eq!(dialogue(&infers[0]), ["user:q1"]);

    // Turn 2 sees turn 1 and asks for its own model.
    r.chat(
        "c2",
        json!({"session_id": "s1", "prompt": "q2", "model": "m-2"}),
    )
    .await;
    let (_, infers) = drive_loop_turn(&mut r, "s1", |_| text_reply("r2")).await;
    assert_eq!(infers[0]["model"], "m-2");
    assert_eq!(dialogue(&infers[0]), ["user:q1", "assistant:r1", "user:q2"]);

    // max_turns = 1: turn 3 sees only turn 2. Another session starts empty.
    r.chat("c3", json!({"session_id": "s1", "prompt": "q3"}))
        .await;
    let (_, infers) = drive_loop_turn(&mut r, "s1", |_| text_reply("r3")).await;
    assert_eq!(dialogue(&infers[0]), ["user:q2", "assistant:r2", "user:q3"]);
    r.chat("c4", json!({"session_id": "s2", "prompt": "x"}))
        .await;
    let (_, infers) = drive_loop_turn(&mut r, "s2", |_| text_reply("y")).await;
    assert_eq!(dialogue(&infers[0]), ["user:x"]);

    // A failed turn ends with error and leaves the thread as it was.
    r.chat("c5", json!({"session_id": "s2", "prompt": "boom"}))
        .await;
    let (frames, _) =
        drive_loop_turn(&mut r, "s2", |_| json!({"refuse": "model unavailable"})).await;
    let got = events(&frames, "s2");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["kind"], "error");
    assert!(
        got[0]["error"]
            .as_str()
            .unwrap()
            .contains("model unavailable"),
        "{got:?}"
    );
    r.chat("c6", json!({"session_id": "s2", "prompt": "again"}))
        .await;
    let (_, infers) = drive_loop_turn(&mut r, "s2", |_| text_reply("z")).await;
    assert_eq!(
        dialogue(&infers[0]),
        ["user:x", "assistant:y", "user:again"]
    );
}
