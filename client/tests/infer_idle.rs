//! Acceptance 5: an inference call outlives its idle window while `infer.progress {id}`
//! keeps arriving, and times out one idle window after the progress stops (fake daemon,
//! shortened intervals). Other calls keep their absolute deadline; per-call overrides win.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_daemon_client::{CallOptions, Client, Error, TimeoutPolicy};
use serde_json::{json, Value};
use support::{config_for, FakeConn, FakeDaemon};

const IDLE: Duration = Duration::from_millis(300);
const BEAT: Duration = Duration::from_millis(100);
const BEATS: u32 = 12;

/// After the handshake, answers each `infer`-class call by sending `BEATS` progress
/// notifications (every `BEAT`) using `progress_method`, recording when the last one went
/// out, then answering only when `answer` is true.
async fn progress_fake(
    progress_method: &'static str,
    answer: bool,
    last: Arc<Mutex<Option<Instant>>>,
) -> FakeDaemon {
    FakeDaemon::start(move |mut conn: FakeConn| {
        let last = last.clone();
        async move {
            conn.accept_handshake().await;
            while let Some(req) = conn.recv().await {
                // Progress for some other id must not keep this call alive.
                conn.send(json!({"jsonrpc": "2.0", "method": "infer.progress", "params": {"id": 999_999}}))
                    .await;
                for _ in 0..BEATS {
                    tokio::time::sleep(BEAT).await;
                    conn.send(json!({"jsonrpc": "2.0", "method": progress_method, "params": {"id": req["id"]}}))
                        .await;
                    *last.lock().unwrap() = Some(Instant::now());
                }
                if answer {
                    tokio::time::sleep(BEAT).await;
                    conn.reply(&req, json!({"text": "done"})).await;
                }
            }
        }
    })
    .await
}

fn client(fake: &FakeDaemon, home: &std::path::Path) -> Client {
    Client::new(config_for(&fake.url, home).timeouts(TimeoutPolicy {
        infer_idle: IDLE,
        ..support::quick_timeouts()
    }))
}

#[tokio::test]
async fn infer_outlives_its_idle_window_while_progress_arrives() {
    let last = Arc::default();
    let fake = progress_fake("infer.progress", true, last).await;
    let home = tempfile::tempdir().unwrap();
    let client = client(&fake, home.path());
    client.connect().await.unwrap();
    let started = Instant::now();
    let got = client.call("infer", json!({"prompt": "hi"})).await.unwrap();
    assert_eq!(got, json!({"text": "done"}));
    // The call lived through many idle windows.
    assert!(started.elapsed() > IDLE * 3, "{:?}", started.elapsed());
}

#[tokio::test]
async fn infer_times_out_one_idle_window_after_progress_stops() {
    for method in ["infer.progress", "inference.stream.event"] {
        let last: Arc<Mutex<Option<Instant>>> = Arc::default();
        let fake = progress_fake(method, false, last.clone()).await;
        let home = tempfile::tempdir().unwrap();
        let client = client(&fake, home.path());
        client.connect().await.unwrap();
        let started = Instant::now();
        let err = client
            .call("infer_stream", json!({"prompt": "hi"}))
            .await
            .unwrap_err();
        let ended = Instant::now();
        assert!(
            matches!(&err, Error::Timeout { method, after } if method == "infer_stream" && *after == IDLE),
            "{err:?}"
        );
        let last = last.lock().unwrap().expect("progress was sent");
        // It outlived the idle window several times over, and only gave up after the
        // last progress event plus one window (with scheduling slack, not two windows).
        assert!(ended - started > IDLE * 3);
        let after_last = ended - last;
        assert!(
            after_last >= IDLE - Duration::from_millis(20),
            "{method}: {after_last:?}"
        );
        assert!(after_last < IDLE * 2, "{method}: {after_last:?}");
    }
}

#[tokio::test]
async fn standard_calls_ignore_progress_and_overrides_win() {
    let last = Arc::default();
    let fake = progress_fake("infer.progress", false, last).await;
    let home = tempfile::tempdir().unwrap();
    let client = client(&fake, home.path());
    // An absolute per-call timeout is not extended by progress for the call.
    let started = Instant::now();
    let err = client
        .call_with(
            "infer",
            Value::Null,
            CallOptions::timeout(Duration::from_millis(250)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { after, .. } if after == Duration::from_millis(250)));
    assert!(started.elapsed() < BEAT * BEATS);
    // A late answer to the abandoned call is dropped and the connection stays usable.
    assert!(client.is_connected());
}
