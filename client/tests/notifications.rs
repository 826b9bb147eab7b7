//! Acceptance 7 against the real `car-server` (`debug.notify_client` makes the daemon push
//! a notification to this connection): a panicking notification handler is logged and
//! later notifications still arrive, in order; `tools.cancel` reaches its typed handler.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, ToolCancel};
use car_test_harness::Daemon;
use serde_json::json;
use support::within;
use tokio::sync::mpsc;

/// Everything the global tracing subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .init();
        logs
    })
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_logged_and_later_notifications_arrive_in_order() {
    let logs = capture_logs();
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    client.register_notification_handler("n.test", move |params| {
        let i = params["i"].as_i64().unwrap();
        if i % 10 == 0 {
            panic!("subscriber exploded on {i}");
        }
        seen_tx.send(i).unwrap();
    });
    for i in 0..50 {
        let sent = client
            .call(
                "debug.notify_client",
                json!({"method": "n.test", "params": {"i": i}}),
            )
            .await
            .unwrap();
        assert_eq!(sent, json!({"sent": true}));
    }
    let want: Vec<i64> = (0..50).filter(|i| i % 10 != 0).collect();
    let seen = within("the notifications", async {
        let mut seen = Vec::new();
        while seen.len() < want.len() {
            seen.push(seen_rx.recv().await.unwrap());
        }
        seen
    })
    .await;
    assert_eq!(seen, want);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("notification handler panicked"), "{text}");
    assert!(text.contains("subscriber exploded on 40"), "{text}");
    // The reader survived: calls still work.
    assert_eq!(
        client.call("debug.echo", json!([1])).await.unwrap(),
        json!([1])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_cancel_reaches_its_handler() {
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let (got_tx, mut got_rx) = mpsc::unbounded_channel();
    client.register_tool_cancel_handler(move |c| got_tx.send(c).unwrap());
    let params = json!({"request_id": "cb-1", "action_id": "a0", "reason": "tool 'x' callback timed out (185s)"});
    client
        .call(
            "debug.notify_client",
            json!({"method": "tools.cancel", "params": params}),
        )
        .await
        .unwrap();
    let got = within("tools.cancel", got_rx.recv()).await.unwrap();
    assert_eq!(
        got,
        ToolCancel {
            request_id: json!("cb-1"),
            action_id: Some("a0".into()),
            reason: Some("tool 'x' callback timed out (185s)".into()),
        }
    );
}
