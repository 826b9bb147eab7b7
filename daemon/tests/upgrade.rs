//! Acceptance: upgrade-time Origin and Host checks (issue 2 §8, docs/protocol-choices.md, "Auth and
//! upgrade checks").

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
async fn only_the_dashboard_page_and_allowed_origins_may_upgrade() {
    let d = Daemon::builder()
        .args(["--allow-origin", "http://localhost:5173/"])
        .start();
    let dashboard = d.dashboard_url.clone().expect("the dashboard is served");
    let dash_port: u16 = dashboard
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for origin in [
        format!("http://127.0.0.1:{dash_port}"),
        format!("http://localhost:{dash_port}"),
        "http://localhost:5173".to_string(),
    ] {
        assert_eq!(
            upgrade_status(&d.ws_url, &[("origin", &origin)]).await,
            101,
            "{origin}"
        );
    }
    // Other loopback pages (a local dev server, a hostile localhost page) are refused
    // before any JSON-RPC, as is the dashboard's port under a foreign name.
    for origin in [
        "http://localhost:3000".to_string(),
        "https://127.0.0.1".to_string(),
        "http://127.0.0.2:1".to_string(),
        format!("http://127.0.0.1:{}", d.port),
        format!("http://evil.example:{dash_port}"),
        // The dashboard's port number on another loopback address or scheme is some other
        // local server's page.
        format!("http://[::1]:{dash_port}"),
        format!("http://127.0.0.2:{dash_port}"),
        format!("https://127.0.0.1:{dash_port}"),
    ] {
        assert_eq!(
            upgrade_status(&d.ws_url, &[("origin", &origin)]).await,
            403,
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

#[tokio::test]
async fn without_a_dashboard_no_browser_page_may_upgrade() {
    let d = Daemon::builder().args(["--no-dashboard"]).start();
    assert!(d.dashboard_url.is_none());
    assert_eq!(
        upgrade_status(&d.ws_url, &[("origin", "http://127.0.0.1:9101")]).await,
        403
    );
    assert_eq!(upgrade_status(&d.ws_url, &[]).await, 101);
}

#[test]
fn a_bad_allow_origin_or_mcp_bind_is_a_usage_error() {
    for args in [
        &["--allow-origin", "localhost:5173"][..],
        &["--mcp-bind", "nonsense"][..],
    ] {
        let (status, stderr) = Daemon::builder()
            .args(args.iter().copied())
            .spawn()
            .unwrap_err();
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}
