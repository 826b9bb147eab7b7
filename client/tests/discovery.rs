//! Acceptances 1 and 8 on the wire: each token source reaches `session.auth` (trimmed),
//! no token means no auth frame, the memory namespace rides on `session.auth`, and the
//! Unix socket is preferred for the default local URL while another port uses TCP; a
//! lifecycle agent's identity (`CAR_AGENT_ID` + `CAR_AGENT_TOKEN`, or `.agent(..)`) puts
//! `agent_id` and the agent's token on `session.auth`.

mod support;

use car_daemon_client::discovery::Secret;
use car_daemon_client::{Client, ClientConfig, Endpoint, EnvSnapshot};
use serde_json::{json, Value};
use support::{write_token_file, FakeConn, FakeDaemon, Via};

async fn good_fake(socket: Option<&std::path::Path>) -> FakeDaemon {
    FakeDaemon::start_with_socket(socket, |mut conn: FakeConn| async move {
        conn.accept_handshake().await;
        conn.serve().await;
    })
    .await
}

/// Connects with `config` and returns the first frame the daemon saw.
async fn first_frame(fake: &FakeDaemon, config: ClientConfig) -> Value {
    let client = Client::new(config.url(&fake.url));
    client.call("debug.echo", json!({})).await.unwrap();
    fake.frames()[0].2.clone()
}

#[tokio::test]
async fn no_token_anywhere_sends_no_auth_frame() {
    let fake = good_fake(None).await;
    let home = tempfile::tempdir().unwrap();
    let first = first_frame(&fake, support::isolated_config(home.path())).await;
    assert_eq!(first["method"], "server.handshake");
    assert!(!fake.methods().contains(&"session.auth".to_string()));
}

#[tokio::test]
async fn token_file_is_trimmed_and_sent_first() {
    let fake = good_fake(None).await;
    let home = tempfile::tempdir().unwrap();
    write_token_file(home.path(), "  file-token \n");
    let first = first_frame(&fake, support::isolated_config(home.path())).await;
    assert_eq!(first["method"], "session.auth");
    assert_eq!(first["params"], json!({"token": "file-token"}));
    assert_eq!(fake.methods()[1], "server.handshake");
}

#[tokio::test]
async fn env_token_beats_the_file_and_blank_env_falls_through() {
    let home = tempfile::tempdir().unwrap();
    write_token_file(home.path(), "file-token");
    let mut env = EnvSnapshot::with_car_home(home.path());
    env.auth_token = Some(Secret::new("\tenv-token  ".into()));
    let fake = good_fake(None).await;
    let first = first_frame(&fake, ClientConfig::with_env(env.clone())).await;
    assert_eq!(first["params"]["token"], "env-token");
    env.auth_token = Some(Secret::new("   ".into()));
    let fake = good_fake(None).await;
    let first = first_frame(&fake, ClientConfig::with_env(env)).await;
    assert_eq!(first["params"]["token"], "file-token");
}

#[tokio::test]
async fn argument_token_beats_env_and_namespace_rides_on_auth() {
    let home = tempfile::tempdir().unwrap();
    write_token_file(home.path(), "file-token");
    let mut env = EnvSnapshot::with_car_home(home.path());
    env.auth_token = Some(Secret::new("env-token".into()));
    env.memory_namespace = Some("proj-env".into());
    let fake = good_fake(None).await;
    let first = first_frame(
        &fake,
        ClientConfig::with_env(env.clone()).token("arg-token"),
    )
    .await;
    assert_eq!(
        first["params"],
        json!({"token": "arg-token", "memory_namespace": "proj-env"})
    );
    let fake = good_fake(None).await;
    let config = ClientConfig::with_env(env).memory_namespace("proj-arg");
    let first = first_frame(&fake, config).await;
    assert_eq!(first["params"]["memory_namespace"], "proj-arg");
}

#[tokio::test]
async fn unix_socket_preferred_for_the_default_url_and_tcp_for_another_port() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let fake = good_fake(Some(&socket)).await;
    let mut env = EnvSnapshot::with_car_home(dir.path());
    env.paths.car_server_socket = Some(socket.clone().into_os_string());

    // Default URL (nothing set) and the socket exists: the socket is used.
    let client = Client::new(ClientConfig::with_env(env.clone()));
    let session = client.connect().await.unwrap();
    assert_eq!(
        session.endpoint,
        Endpoint::Unix {
            path: socket.clone()
        }
    );
    assert_eq!(
        client.call("debug.echo", json!([1])).await.unwrap(),
        json!([1])
    );
    assert!(fake.frames().iter().all(|(_, via, _)| *via == Via::Unix));

    // CAR_DAEMON_URL names another port: TCP, even though the socket exists.
    env.daemon_url = Some(fake.url.clone());
    let client = Client::new(ClientConfig::with_env(env));
    let session = client.connect().await.unwrap();
    assert!(matches!(session.endpoint, Endpoint::Tcp { ref url, .. } if *url == fake.url));
    client.call("debug.echo", json!([2])).await.unwrap();
    assert_eq!(fake.frames().last().unwrap().1, Via::Tcp);
}

#[tokio::test]
async fn an_agent_identity_replaces_the_daemon_token_on_session_auth() {
    let home = tempfile::tempdir().unwrap();
    write_token_file(home.path(), "file-token");
    let mut env = EnvSnapshot::with_car_home(home.path());
    env.agent_id = Some("agent-7".into());
    env.agent_token = Some(Secret::new(" agent-token\n".into()));
    env.memory_namespace = Some("proj".into());
    let fake = good_fake(None).await;
    let first = first_frame(&fake, ClientConfig::with_env(env.clone())).await;
    assert_eq!(first["method"], "session.auth");
    assert_eq!(
        first["params"],
        json!({"token": "agent-token", "agent_id": "agent-7", "memory_namespace": "proj"})
    );
    // The builder beats the environment.
    let fake = good_fake(None).await;
    let config = ClientConfig::with_env(env.clone()).agent("agent-8", "arg-agent-token");
    let first = first_frame(&fake, config).await;
    assert_eq!(first["params"]["agent_id"], "agent-8");
    assert_eq!(first["params"]["token"], "arg-agent-token");
    // Only one of the two variables: authenticated as before, with the daemon token.
    env.agent_token = None;
    let fake = good_fake(None).await;
    let first = first_frame(&fake, ClientConfig::with_env(env)).await;
    assert_eq!(
        first["params"],
        json!({"token": "file-token", "memory_namespace": "proj"})
    );
}
