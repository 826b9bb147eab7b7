//! Serving chat turns through the `ChatHandler` callback interface against a real
//! `car-server` (approvals off): an agent registered with `HostClient.agents_upsert`, a
//! client bound to it serving `agent.chat`, and an operator client starting turns with
//! `agents_chat` and receiving `agents.chat.event` in order, ending with one terminal event.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_daemon_client::{ClientConfig, EnvSnapshot};
use car_runtime_uniffi::{
    CarDaemonClient, CarError, ChatHandler, ChatTurn, DaemonNotificationHandler, HostClient,
};
use car_test_harness::Daemon;
use serde_json::{json, Value};

const AGENT: &str = "uniffi-chat-agent";
/// Only bounds a hang: a turn takes milliseconds.
const WAIT: Duration = Duration::from_secs(30);

struct Events(Mutex<mpsc::Sender<Value>>);
impl DaemonNotificationHandler for Events {
    fn notify(&self, params_json: String) -> Result<(), CarError> {
        let event = serde_json::from_str(&params_json).expect("JSON");
        let _ = self.0.lock().unwrap().send(event);
        Ok(())
    }
}

/// A chat handler from a closure.
struct FnChat<F>(F);
impl<F: Fn(Arc<ChatTurn>) -> Result<String, CarError> + Send + Sync> ChatHandler for FnChat<F> {
    fn run(&self, turn: Arc<ChatTurn>) -> Result<String, CarError> {
        (self.0)(turn)
    }
}

struct Setup {
    _daemon: Daemon,
    host: Arc<CarDaemonClient>,
    agent: Arc<CarDaemonClient>,
    events: mpsc::Receiver<Value>,
}

impl Setup {
    fn new() -> Self {
        let d = Daemon::builder().args(["--no-approvals"]).start();
        let env = || ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home));
        let host = CarDaemonClient::with_config(env()).unwrap();
        let spec = json!({"id": AGENT, "name": "Chat", "command": "/bin/sh"});
        let agent = HostClient::new(host.clone())
            .agents_upsert(spec.to_string())
            .unwrap();
        let agent: Value = serde_json::from_str(&agent).unwrap();
        let token = std::fs::read_to_string(agent["token_path"].as_str().unwrap()).unwrap();
        let agent = CarDaemonClient::with_config(env().agent(AGENT, token.trim())).unwrap();
        let (tx, events) = mpsc::channel();
        host.register_daemon_notification_handler(
            "agents.chat.event".into(),
            Arc::new(Events(Mutex::new(tx))),
        );
        Setup {
            _daemon: d,
            host,
            agent,
            events,
        }
    }

    fn chat(&self, session_id: &str, prompt: &str) -> Result<Value, CarError> {
        let params = json!({"agent_id": AGENT, "prompt": prompt, "session_id": session_id});
        let ack = self.host.agents_chat(params.to_string())?;
        Ok(serde_json::from_str(&ack).unwrap())
    }

    /// `session_id`'s events up to and including its terminal one.
    fn turn(&self, session_id: &str) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let event = self.events.recv_timeout(WAIT).expect("an event");
            assert_eq!(event["session_id"], session_id, "{event}");
            assert_eq!(event["agent_id"], AGENT, "{event}");
            let kind = event["kind"].as_str().unwrap().to_string();
            got.push(event);
            if kind == "done" || kind == "error" {
                return got;
            }
        }
    }
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

#[test]
fn a_foreign_handler_streams_a_turn_and_its_outcome_is_the_one_terminal_event() {
    let s = Setup::new();
    let (seen_tx, seen) = mpsc::channel();
    let seen_tx = Mutex::new(seen_tx);
    s.agent
        .serve_chat(Arc::new(FnChat(move |turn: Arc<ChatTurn>| {
            let _ = seen_tx.lock().unwrap().send(turn.params_json());
            if turn.prompt() == "fail" {
                turn.emit_token("partial".into());
                return Err(CarError::Handler {
                    detail: "the model is on fire".into(),
                    terminal: false,
                });
            }
            turn.emit_tool_call("lookup".into(), Some(r#"{"q":1}"#.into()))?;
            for piece in ["Hel", "lo"] {
                turn.emit_token(piece.into());
            }
            Ok("Hello".into())
        })));
    s.agent.connection_epoch().unwrap();
    assert_eq!(
        s.chat("u1", "hi").unwrap(),
        json!({"accepted": true, "session_id": "u1"})
    );
    let events = s.turn("u1");
    assert_eq!(kinds(&events), ["tool_call", "token", "token", "done"]);
    assert_eq!(events[0]["tool"], "lookup");
    assert_eq!(events[0]["params"], json!({"q": 1}));
    assert_eq!(
        (&events[3]["finish_reason"], &events[3]["text"]),
        (&json!("stop"), &json!("Hello"))
    );
    let params: Value = serde_json::from_str(&seen.recv_timeout(WAIT).unwrap()).unwrap();
    assert_eq!(
        (&params["session_id"], &params["prompt"]),
        (&json!("u1"), &json!("hi"))
    );

    s.chat("u2", "fail").unwrap();
    let events = s.turn("u2");
    assert_eq!(kinds(&events), ["token", "error"]);
    assert_eq!(events[1]["error"], "the model is on fire");

    s.agent.stop_serving_chat();
    let err = s.chat("u3", "hi").unwrap_err();
    assert!(
        matches!(&err, CarError::DaemonRpc { code: -32601, .. }),
        "{err:?}"
    );
}

#[test]
fn a_cancelled_turn_sees_its_cancel_and_frees_the_session() {
    let s = Setup::new();
    let (cancelled_tx, cancelled) = mpsc::channel();
    let cancelled_tx = Mutex::new(cancelled_tx);
    s.agent
        .serve_chat(Arc::new(FnChat(move |turn: Arc<ChatTurn>| {
            if turn.prompt() == "wait" {
                turn.emit_token("thinking".into());
                let seen = turn.wait_cancelled(WAIT.as_millis() as u64);
                let _ = cancelled_tx
                    .lock()
                    .unwrap()
                    .send((seen, turn.is_cancelled()));
                // Parked approvals of a cancelled turn are denied at once.
                assert!(!turn
                    .request_approval("a1".into(), "rm".into(), None)
                    .unwrap());
                return Ok("partial".into());
            }
            Ok("again".into())
        })));
    s.agent.connection_epoch().unwrap();
    s.chat("c1", "wait").unwrap();
    let first = s.events.recv_timeout(WAIT).unwrap();
    assert_eq!(first["kind"], "token");
    let reply = s
        .host
        .agents_chat_cancel(json!({"session_id": "c1"}).to_string())
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&reply).unwrap()["cancelled"],
        true
    );
    assert_eq!(cancelled.recv_timeout(WAIT).unwrap(), (true, true));
    // The session takes its next turn once the cancelled one ended; its events are only
    // the new turn's.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match s.chat("c1", "next") {
            Ok(_) => break,
            Err(CarError::DaemonRpc { detail, .. })
                if detail.contains("in flight") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let events = s.turn("c1");
    assert_eq!(kinds(&events), ["done"]);
    assert_eq!(events[0]["text"], "again");
}

#[test]
fn chat_event_calls_inside_a_turn_go_into_it_and_its_own_terminal_wins() {
    let s = Setup::new();
    // Weak: the handler is stored in the client it would otherwise keep alive.
    let agent = Arc::downgrade(&s.agent);
    s.agent
        .serve_chat(Arc::new(FnChat(move |turn: Arc<ChatTurn>| {
            let agent = agent.upgrade().expect("the agent client");
            let sid = turn.session_id();
            agent.chat_event(sid.clone(), "token".into(), Some("par".into()))?;
            turn.emit_token("tial".into());
            let event = json!({"session_id": sid, "kind": "tool_call", "tool": "lookup"});
            agent.daemon_call("agent.chat.event".into(), event.to_string())?;
            agent.chat_event(sid.clone(), "done".into(), Some("the whole answer".into()))?;
            // A later terminal is ignored, and so is the error `run` then throws.
            agent.chat_event(sid, "error".into(), Some("not this".into()))?;
            Err(CarError::Handler {
                detail: "nor this".into(),
                terminal: false,
            })
        })));
    s.agent.connection_epoch().unwrap();
    s.chat("r1", "hi").unwrap();
    let events = s.turn("r1");
    assert_eq!(kinds(&events), ["token", "token", "tool_call", "done"]);
    assert_eq!(
        (&events[0]["delta"], &events[1]["delta"], &events[2]["tool"]),
        (&json!("par"), &json!("tial"), &json!("lookup"))
    );
    assert_eq!(
        (&events[3]["finish_reason"], &events[3]["text"]),
        (&json!("stop"), &json!("the whole answer"))
    );
    // Outside a turn of its session the event goes to the daemon (which drops it).
    s.agent
        .chat_event("nobody".into(), "token".into(), Some("x".into()))
        .unwrap();
}
