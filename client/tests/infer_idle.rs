//! Acceptance 5: an inference call outlives its idle window while `infer.progress {id}`
//! keeps arriving, and times out one idle window after the progress stops (fake daemon,
//! shortened intervals). Other calls keep their absolute deadline; per-call overrides win.
//!
//! An idle window is a duration, so these tests cannot be free of the clock; they only
//! rely on what a loaded machine cannot break. Tokio timers never fire early, so lower
//! bounds hold by construction. The one margin is the gap between heartbeats: `BEAT` is a
//! tenth of `IDLE`, so only a stall of the whole test process of 0.9 s could make a call
//! time out while progress is still being sent. Nothing asserts how soon after its
//! deadline something happened; that figure is printed, not checked.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_daemon_client::{CallOptions, Client, Error, TimeoutPolicy};
use serde_json::json;
use support::{config_for, within, FakeConn, FakeDaemon};

const IDLE: Duration = Duration::from_secs(1);
const BEAT: Duration = Duration::from_millis(100);
/// Heartbeats per call: 3 s of progress, three idle windows.
const BEATS: u32 = 30;

/// After the handshake, answers each `infer`-class call by sending `BEATS` progress
/// notifications (every `BEAT`) using `progress_method`, recording when it started to
/// send the last one, then answering only when `answer` is true.
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
                    // Taken before sending: the client cannot see this beat any earlier.
                    *last.lock().unwrap() = Some(Instant::now());
                    conn.send(json!({"jsonrpc": "2.0", "method": progress_method, "params": {"id": req["id"]}}))
                        .await;
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

/// A client with the shortened idle window and default connect bounds.
fn client(fake: &FakeDaemon, home: &std::path::Path) -> Client {
    Client::new(config_for(&fake.url, home).timeouts(TimeoutPolicy {
        infer_idle: IDLE,
        ..TimeoutPolicy::default()
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
    // Without the heartbeats this call would time out after one window.
    let got = within(
        "the infer answer",
        client.call("infer", json!({"prompt": "hi"})),
    )
    .await;
    assert_eq!(got, Ok(json!({"text": "done"})));
    // By construction of the fake (its sleeps never end early) the answer came after
    // three windows: the call was kept alive, not merely answered in time.
    assert!(started.elapsed() > IDLE * 3, "{:?}", started.elapsed());
}

#[tokio::test]
async fn infer_times_out_one_idle_window_after_progress_stops() {
    // Both heartbeat forms, at the same time (each against its own fake and client).
    let run = |method: &'static str| async move {
        let last: Arc<Mutex<Option<Instant>>> = Arc::default();
        let fake = progress_fake(method, false, last.clone()).await;
        let home = tempfile::tempdir().unwrap();
        let client = client(&fake, home.path());
        client.connect().await.unwrap();
        let started = Instant::now();
        let err = within(
            "the idle timeout",
            client.call("infer_stream", json!({"prompt": "hi"})),
        )
        .await
        .unwrap_err();
        let ended = Instant::now();
        assert_eq!(
            err,
            Error::Timeout {
                method: "infer_stream".into(),
                after: IDLE
            },
            "{method}"
        );
        let last = last.lock().unwrap().expect("progress was sent");
        // The window restarted at every heartbeat: the call gave up no sooner than one
        // full window after the last one was sent (and so after all 3 s of progress).
        let after_last = ended - last;
        assert!(after_last >= IDLE, "{method}: {after_last:?}");
        assert!(ended - started > IDLE * 3, "{method}");
        eprintln!("{method}: timed out {after_last:?} after the last heartbeat (window {IDLE:?})");
    };
    tokio::join!(run("infer.progress"), run("inference.stream.event"));
}

/// A fake whose first call gets a heartbeat every `BEAT` until the client sends its next
/// request; then the first call is answered (late, after the client gave up on it) and
/// the next request after it, on the same socket, so the late answer is read first.
async fn heartbeat_until_next_request() -> FakeDaemon {
    FakeDaemon::start(|mut conn: FakeConn| async move {
        conn.accept_handshake().await;
        let Some(first) = conn.recv().await else {
            return;
        };
        let next = loop {
            tokio::select! {
                next = conn.recv() => break next,
                () = tokio::time::sleep(BEAT) => {
                    conn.send(json!({"jsonrpc": "2.0", "method": "infer.progress", "params": {"id": first["id"]}}))
                        .await;
                }
            }
        };
        let Some(next) = next else { return };
        conn.reply(&first, json!({"text": "late"})).await;
        conn.reply(&next, next["params"].clone()).await;
        conn.serve().await;
    })
    .await
}

#[tokio::test]
async fn standard_calls_ignore_progress_and_overrides_win() {
    let override_ = Duration::from_millis(250);
    // "infer" with an absolute per-call timeout, and a standard-class method given one:
    // neither is extended by progress for the call.
    for method in ["infer", "debug.sleep"] {
        let fake = heartbeat_until_next_request().await;
        let home = tempfile::tempdir().unwrap();
        let client = client(&fake, home.path());
        // The heartbeats never stop, so a deadline they extended would never fire and
        // the hang guard would.
        let err = within(
            "the per-call timeout",
            client.call_with(method, json!({}), CallOptions::timeout(override_)),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err,
            Error::Timeout {
                method: method.into(),
                after: override_
            }
        );
        // The late answer to the abandoned call arrives before this call's answer; it is
        // dropped, and the connection stays usable.
        let echoed = within(
            "the next call",
            client.call("debug.echo", json!({"after": method})),
        )
        .await;
        assert_eq!(echoed, Ok(json!({"after": method})));
        assert!(client.is_connected());
    }
}
