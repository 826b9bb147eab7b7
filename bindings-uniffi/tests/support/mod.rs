//! What the bridge tests share: one call on a raw host session, for what the daemon lets
//! only a host do and no binding member offers (registering a remote model endpoint: the
//! daemon sends an endpoint's API key to its URL, so only a host chooses one).

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// `method(params)` on a fresh host session of `d`; its result (panics on an error).
pub fn host_call(d: &car_test_harness::Daemon, method: &str, params: Value) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(d.ws_url.as_str())
            .await
            .expect("connect");
        let auth = json!({"host_token": d.host_token().trim()});
        let mut out = Value::Null;
        for (id, method, params) in [(1, "session.auth", auth), (2, method, params)] {
            let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            ws.send(Message::text(request.to_string()))
                .await
                .expect("send");
            out = loop {
                let frame = ws.next().await.expect("a reply").expect("a frame");
                let Message::Text(text) = frame else { continue };
                let msg: Value = serde_json::from_str(text.as_str()).expect("JSON");
                if msg["id"] == json!(id) {
                    assert!(msg.get("error").is_none(), "{msg}");
                    break msg["result"].clone();
                }
            };
        }
        let _ = ws.close(None).await;
        out
    })
}
