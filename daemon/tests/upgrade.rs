//! Acceptance: upgrade-time Origin and Host checks (issue 2 §8, docs/protocol-choices.md, "Auth and upgrade checks").

mod common;

use common::*;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::Error as WsError;

async fn upgrade_status(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = url.into_client_request().unwrap();
    for (k, v) in headers {
        request.headers_mut().insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("unexpected upgrade error: {e}"),
    }
}

#[tokio::test]
async fn cross_origin_and_foreign_host_upgrades_get_403() {
    let d = Daemon::start();
    assert_eq!(
        upgrade_status(&d.ws_url, &[("origin", "https://evil.example")]).await,
        403
    );
    assert_eq!(
        upgrade_status(&d.ws_url, &[("origin", "http://localhost.evil.example")]).await,
        403
    );
    assert_eq!(upgrade_status(&d.ws_url, &[("origin", "null")]).await, 403);
    assert_eq!(
        upgrade_status(&d.ws_url, &[("host", "evil.example")]).await,
        403
    );
    assert_eq!(
        upgrade_status(&d.ws_url, &[("host", &format!("evil.example:{}", d.port))]).await,
        403
    );
}

#[tokio::test]
async fn loopback_origins_and_no_origin_are_accepted() {
    let d = Daemon::start();
    for origin in [
        "http://localhost:3000",
        "https://127.0.0.1",
        "http://[::1]:8080",
        "http://127.0.0.2:1",
    ] {
        assert_eq!(
            upgrade_status(&d.ws_url, &[("origin", origin)]).await,
            101,
            "{origin}"
        );
    }
    assert_eq!(upgrade_status(&d.ws_url, &[]).await, 101);
    let localhost_url = d.ws_url.replace("127.0.0.1", "localhost");
    assert_eq!(
        upgrade_status(
            &localhost_url,
            &[("host", &format!("localhost:{}", d.port))]
        )
        .await,
        101
    );
    // A refused upgrade never reaches JSON-RPC, and the daemon keeps serving.
    Ws::authed(&d).await;
}
