//! A minimal supervised agent: started by `car-server` (`agents.start`) with
//! `CAR_AGENT_ID`, `CAR_AGENT_TOKEN`, `CAR_DAEMON_URL` and `CAR_HOME` in its environment,
//! it connects back bound to its agent id, serves chat turns by echoing the prompt, and
//! runs until it is stopped. Each connection prints one line to stdout, which the
//! supervisor captures in `CAR_HOME/logs/agents/<id>/stdout.log`.
//!
//! `CAR_TEST_AGENT_CRASH_AFTER_MS`: exit with status 3 that long after attaching (used to
//! exercise restarts).

use std::time::Duration;

use car_daemon_client::{ChatTurnContext, Client};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let id = std::env::var("CAR_AGENT_ID").unwrap_or_default();
    let client = Client::from_env();
    client.serve_chat(|turn: &ChatTurnContext| Ok(format!("echo: {}", turn.params().prompt)));
    // The first call authenticates the connection as the agent.
    match client.call("state.keys", json!({})).await {
        Ok(_) => {
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = writeln!(out, "agent {id} attached (pid {})", std::process::id());
            let _ = out.flush();
        }
        Err(e) => {
            eprintln!("agent {id} could not attach: {e}");
            std::process::exit(2);
        }
    }
    if let Some(ms) = std::env::var("CAR_TEST_AGENT_CRASH_AFTER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        eprintln!("agent {id} crashing on purpose");
        std::process::exit(3);
    }
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}
