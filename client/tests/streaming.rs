//! `call_streaming`: each streaming call receives exactly its own `inference.stream.event`
//! notifications, in order, all of them before it returns — even when two streams share
//! one connection and the daemon answers right after the last event.

mod support;

use car_daemon_client::{CallOptions, Client};
use serde_json::{json, Value};
use support::{config_for, FakeConn, FakeDaemon, SAFETY};

#[tokio::test]
async fn concurrent_streams_get_their_own_events_before_their_answers() {
    let fake = FakeDaemon::start(|mut conn: FakeConn| async move {
        conn.accept_handshake().await;
        let (a, b) = (conn.recv().await.unwrap(), conn.recv().await.unwrap());
        // Interleave the two streams' events, then answer each right after its last one.
        for i in 0..5 {
            for req in [&a, &b] {
                let event = json!({"type": "text", "data": format!("{}-{i}", req["params"]["tag"].as_str().unwrap())});
                conn.send(json!({"jsonrpc": "2.0", "method": "inference.stream.event", "params": {"id": req["id"], "request_id": req["id"], "event": event}}))
                    .await;
            }
        }
        conn.reply(&a, json!({"text": "a done"})).await;
        conn.reply(&b, json!({"text": "b done"})).await;
        // Keep the socket open until the client goes away.
        while conn.recv().await.is_some() {}
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(config_for(&fake.url, home.path()));
    client.connect().await.unwrap();
    let stream = |tag: &'static str| {
        let client = client.clone();
        async move {
            let mut seen: Vec<String> = Vec::new();
            let result = client
                .call_streaming(
                    "infer_stream",
                    json!({"tag": tag}),
                    CallOptions::timeout(SAFETY),
                    |params: Value| {
                        seen.push(params["event"]["data"].as_str().unwrap().to_string());
                    },
                )
                .await
                .unwrap();
            (seen, result)
        }
    };
    let ((a_seen, a), (b_seen, b)) = tokio::join!(stream("a"), stream("b"));
    assert_eq!(a_seen, (0..5).map(|i| format!("a-{i}")).collect::<Vec<_>>());
    assert_eq!(b_seen, (0..5).map(|i| format!("b-{i}")).collect::<Vec<_>>());
    assert_eq!(
        (a["text"].clone(), b["text"].clone()),
        (json!("a done"), json!("b done"))
    );
}
