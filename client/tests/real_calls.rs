//! Against the real `car-server`: token discovery from the daemon's own token file
//! (acceptance 1), 1,000 concurrent calls from 8 threads (acceptance 3), the Unix socket
//! preferred for the default URL and TCP for another port (acceptance 8), and the error
//! taxonomy for daemon refusals.

mod support;

use std::sync::Arc;

use car_daemon_client::{BlockingClient, Client, ClientConfig, Endpoint, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::json;

fn daemon() -> Daemon {
    Daemon::builder().args(["--debug-methods"]).start()
}

/// The config a same-host binding would build: only `CAR_HOME` set.
fn local_config(d: &Daemon) -> ClientConfig {
    ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home))
}

#[tokio::test]
async fn token_file_authenticates_and_negotiates() {
    let d = daemon();
    let client = Client::new(local_config(&d));
    let session = client.connect().await.unwrap();
    let auth = session
        .auth
        .clone()
        .expect("a token file exists, so session.auth was sent");
    assert_eq!(auth["ok"], true);
    assert_eq!(auth["auth_enabled"], true);
    assert_eq!(session.handshake.protocol_version, 3);
    for cap in [
        "infer.model-identity.v1",
        "models.catalog-identity.v1",
        "infer.cancel.v1",
        "infer.deadline.v1",
    ] {
        assert!(session.has_capability(cap), "{cap}");
    }
    assert_eq!(
        client
            .call("debug.echo", json!({"k": [1, "two"]}))
            .await
            .unwrap(),
        json!({"k": [1, "two"]})
    );
}

#[tokio::test]
async fn wrong_or_missing_token_fails_closed() {
    let d = daemon();
    let client = Client::new(local_config(&d).token("not-the-token"));
    match client.connect().await {
        Err(Error::Handshake {
            rpc: Some(rpc),
            reason,
        }) => {
            assert_eq!(rpc.code, -32603, "{reason}");
            assert!(rpc.message.contains("token mismatch"), "{}", rpc.message);
        }
        other => panic!("{other:?}"),
    }
    // No token at all: no auth frame, so the daemon answers the handshake with -32001
    // before it closes the connection (the answer is queued ahead of its Close frame).
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(support::config_for(&d.ws_url, home.path()));
    match client.connect().await {
        Err(Error::Handshake { rpc: Some(rpc), .. }) => assert_eq!(rpc.code, -32001),
        other => panic!("{other:?}"),
    }
    assert!(!client.is_connected());
}

#[tokio::test]
async fn daemon_refusals_are_rpc_errors() {
    let d = daemon();
    let client = Client::new(local_config(&d));
    match client.call("no.such.method", json!({})).await {
        Err(Error::Rpc { code, message, .. }) => {
            assert_eq!(code, -32601);
            assert!(message.contains("no.such.method"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // The connection survives a refusal.
    assert_eq!(
        client.call("debug.echo", json!([7])).await.unwrap(),
        json!([7])
    );
}

#[tokio::test]
async fn unix_socket_preferred_and_tcp_for_another_port() {
    let d = daemon();
    let client = Client::new(local_config(&d));
    let session = client.connect().await.unwrap();
    assert_eq!(
        session.endpoint,
        Endpoint::Unix {
            path: d.socket.clone()
        }
    );
    client.call("debug.echo", json!({})).await.unwrap();

    let mut env = EnvSnapshot::with_car_home(&d.home);
    env.daemon_url = Some(d.ws_url.clone());
    assert_ne!(d.port, 9100);
    let client = Client::new(ClientConfig::with_env(env));
    let session = client.connect().await.unwrap();
    assert!(matches!(session.endpoint, Endpoint::Tcp { ref url, .. } if *url == d.ws_url));
    client.call("debug.echo", json!({})).await.unwrap();
}

#[test]
fn thousand_concurrent_calls_from_eight_threads() {
    let d = daemon();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(local_config(&d));
    let handle = runtime.handle().clone();
    // Each thread drives 125 calls at once; all 1,000 share one socket.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (client, handle) = (client.clone(), handle.clone());
            std::thread::spawn(move || {
                handle.block_on(async move {
                    let calls = (0..125).map(|i| {
                        let client = client.clone();
                        async move {
                            let params = json!({"thread": t, "i": i, "pad": "x".repeat(i)});
                            let got = client.call("debug.echo", params.clone()).await.unwrap();
                            assert_eq!(got, params);
                        }
                    });
                    futures_util::future::join_all(calls).await;
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    // The blocking facade: eight plain threads sharing one client.
    let blocking = Arc::new(BlockingClient::new(local_config(&d)).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let blocking = blocking.clone();
            std::thread::spawn(move || {
                for i in 0..125 {
                    let params = json!({"thread": t, "i": i});
                    assert_eq!(blocking.call("debug.echo", params.clone()).unwrap(), params);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_sync_handler_can_call_back_through_the_blocking_client() {
    let d = daemon();
    let blocking = Arc::new(BlockingClient::new(local_config(&d)).unwrap());
    // The handler runs on the runtime's blocking pool and makes a nested blocking call.
    let inner = blocking.clone();
    blocking.client().register_handler("t.nested", move |p| {
        inner
            .call("debug.echo", json!({"nested": p}))
            .map_err(|e| car_daemon_client::HandlerError::new(e.to_string()))
    });
    let got = blocking
        .call(
            "debug.call_client",
            json!({"method": "t.nested", "params": {"n": 1}, "timeout_ms": 10_000}),
        )
        .unwrap();
    assert_eq!(got, json!({"result": {"nested": {"n": 1}}}));
}
