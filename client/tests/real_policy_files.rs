//! Policy files enforced on `proposal.submit` against a real `car-server`: CAR's six rule
//! kinds from `<cwd>/.car/policies/*.toml` (the daemon's working directory) and
//! `<CAR_HOME>/policies/*.toml`, read at every submit; a malformed file refuses every tool
//! call (fails closed); `rate_limit_tool` windows are per connection. The tools are the
//! built-in ones (`agents.register_basics`), which the daemon runs itself.

use std::path::Path;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

fn write_policy(dir: &Path, file: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

async fn calculate(c: &Client, expression: &str) -> Value {
    let r = c
        .call("proposal.submit", json!({"proposal": {"actions": [{"id": "a", "type": "tool_call", "tool": "calculate",
                                                               "parameters": {"expression": expression}}]}}))
        .await
        .unwrap();
    r["results"][0].clone()
}

async fn basics(d: &Daemon) -> Client {
    let c = client(d);
    c.call("agents.register_basics", json!({})).await.unwrap();
    c
}

#[tokio::test]
async fn a_deny_tool_file_in_the_working_directory_rejects_the_action() {
    let cwd = tempfile::tempdir().unwrap();
    let d = Daemon::builder().cwd(cwd.path()).start();
    let c = basics(&d).await;
    assert_eq!(calculate(&c, "1+1").await["status"], "succeeded");
    // Read at every submit: a file written now applies to the next proposal.
    write_policy(
        &cwd.path().join(".car/policies"),
        "security.toml",
        "deny_tool = [\"calculate\"]\n",
    );
    let r = calculate(&c, "1+1").await;
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("deny_tool:calculate"),
        "{r}"
    );
    let events = c
        .call("events.query", json!({"kinds": ["policy.denied"]}))
        .await
        .unwrap();
    assert_eq!(
        events["events"][0]["data"]["policy"], "policy_files",
        "{events}"
    );
}

#[tokio::test]
async fn a_malformed_policy_file_fails_closed_naming_the_file() {
    let d = Daemon::builder().start();
    let c = basics(&d).await;
    write_policy(&d.home.join("policies"), "broken.toml", "deny_tool = [\n");
    let r = calculate(&c, "2*3").await;
    assert_eq!(r["status"], "rejected", "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("could not be loaded") && err.contains("broken.toml"),
        "{err}"
    );
    // A rule of the wrong shape fails closed too.
    write_policy(
        &d.home.join("policies"),
        "broken.toml",
        "[[allow_tool_param]]\ntool = \"calculate\"\n",
    );
    let r = calculate(&c, "2*3").await;
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("allow_tool_param[0]"),
        "{r}"
    );
}

#[tokio::test]
async fn param_rules_deny_allow_and_match() {
    let d = Daemon::builder().start();
    let c = basics(&d).await;
    write_policy(
        &d.home.join("policies"),
        "params.toml",
        r#"
[[deny_tool_param]]
tool = "calculate"
param = "expression"
contains = "666"

[[deny_tool_param_matching]]
tool = "calculate"
param = "expression"
matches = "^9+$"

[[allow_tool_param]]
tool = "read_file"
param = "path"
allow = ["notes.txt"]
"#,
    );
    assert_eq!(calculate(&c, "1+2").await["status"], "succeeded");
    let r = calculate(&c, "666+1").await;
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("deny_tool_param:calculate.expression"),
        "{r}"
    );
    let r = calculate(&c, "999").await;
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("deny_tool_param_matching") && !err.contains("999"),
        "{err}"
    );
    let r = c
        .call("proposal.submit", json!({"proposal": {"actions": [{"id": "a", "type": "tool_call", "tool": "read_file",
                                                               "parameters": {"path": "secrets.txt"}}]}}))
        .await
        .unwrap();
    assert!(
        r["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("allow_tool_param:read_file.path"),
        "{r}"
    );
}

#[tokio::test]
async fn a_rate_limit_admits_max_calls_per_connection() {
    let d = Daemon::builder().start();
    write_policy(
        &d.home.join("policies"),
        "rate.toml",
        "[[rate_limit_tool]]\ntool = \"calculate\"\nmax_calls = 2\ninterval_secs = 3600.0\n",
    );
    let c = basics(&d).await;
    assert_eq!(calculate(&c, "1").await["status"], "succeeded");
    assert_eq!(calculate(&c, "2").await["status"], "succeeded");
    let r = calculate(&c, "3").await;
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("rate_limit_tool:calculate"),
        "{r}"
    );
    // Another connection has its own window (CAR's rule).
    let other = basics(&d).await;
    assert_eq!(calculate(&other, "4").await["status"], "succeeded");
}
