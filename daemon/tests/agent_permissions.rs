//! `agent_permissions.*` against a real daemon: the policy's CRUD and presets, its
//! resolution (tool override → agent → default), grants and their revocation, the file
//! surviving a restart, host-only mutations, and the proposal gate consulting the policy
//! for a connection bound to an agent.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::tools::{assert_names, call, register, result_of, submit};
use common::{Daemon, Ws};
use serde_json::{json, Value};

async fn ok(ws: &mut Ws, method: &str, params: Value) -> Value {
    let r = ws.call(method, params).await;
    assert!(r["error"].is_null(), "{method}: {r}");
    r["result"].clone()
}

fn balanced() -> Value {
    json!({"read_only": "always_allow", "sandbox_edit": "require_approval", "full_access": "require_approval"})
}

#[tokio::test]
async fn the_policy_resolves_tool_then_agent_then_default_and_survives_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let d = Daemon::builder().home(home.path()).start();
    let mut host = Ws::host(&d).await;
    let mut op = Ws::authed(&d).await;
    let empty = ok(&mut op, "agent_permissions.get", json!(null)).await;
    assert_eq!(
        empty,
        json!({"default": balanced(), "agents": {}, "tools": {}})
    );

    // Operators read and evaluate; every mutation is a host's.
    let r = op
        .call(
            "agent_permissions.set",
            json!({"agent_id": "alpha", "mode": "deny"}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");

    let p = ok(
        &mut host,
        "agent_permissions.set",
        json!({"agent_id": "alpha", "mode": "deny", "tier": "full_access"}),
    )
    .await;
    assert_eq!(p["agents"], json!({"alpha": {"full_access": "deny"}}));
    let p = ok(
        &mut host,
        "agent_permissions.set",
        json!({"agent_id": "beta", "mode": "always_allow"}),
    )
    .await;
    assert_eq!(
        p["agents"]["beta"],
        json!({"read_only": "always_allow", "sandbox_edit": "always_allow", "full_access": "always_allow"})
    );
    let e = ok(
        &mut op,
        "agent_permissions.evaluate",
        json!({"agent_id": "alpha", "tier": "full_access"}),
    )
    .await;
    assert_eq!(
        e,
        json!({"agent_id": "alpha", "tier": "full_access", "mode": "deny", "has_override": true})
    );
    let e = ok(
        &mut op,
        "agent_permissions.evaluate",
        json!({"agent_id": "alpha", "tier": "sandbox_edit"}),
    )
    .await;
    assert_eq!(
        (e["mode"].clone(), e["has_override"].clone()),
        (json!("require_approval"), json!(false))
    );

    let p = ok(
        &mut host,
        "agent_permissions.set_default",
        json!({"preset": "cautious"}),
    )
    .await;
    assert_eq!(
        p["default"],
        json!({"read_only": "always_allow", "sandbox_edit": "require_approval", "full_access": "deny"})
    );
    let p = ok(
        &mut host,
        "agent_permissions.set_default",
        json!({"preset": "trusting"}),
    )
    .await;
    assert_eq!(p["default"]["sandbox_edit"], "always_allow");
    assert_eq!(p["default"]["full_access"], "require_approval");
    let p = ok(
        &mut host,
        "agent_permissions.set_default",
        json!({"tier": "sandbox_edit", "mode": "deny"}),
    )
    .await;
    assert_eq!(p["default"]["sandbox_edit"], "deny");
    let p = ok(
        &mut host,
        "agent_permissions.reset",
        json!({"agent_id": "beta"}),
    )
    .await;
    assert!(p["agents"].get("beta").is_none(), "{p}");

    // Tool overrides win; evaluate_tool reports where the mode came from.
    let p = ok(
        &mut host,
        "agent_permissions.set_tool",
        json!({"agent_id": "alpha", "tool": "shell", "mode": "require_approval"}),
    )
    .await;
    assert_eq!(p["tools"], json!({"alpha": {"shell": "require_approval"}}));
    let tool = |agent: &str, tool: &str, tier: Option<&str>| {
        let mut p = json!({"agent_id": agent, "tool": tool});
        if let Some(t) = tier {
            p["tier"] = json!(t);
        }
        p
    };
    let e = ok(
        &mut host,
        "agent_permissions.evaluate_tool",
        tool("alpha", "shell", None),
    )
    .await;
    assert_eq!(
        e,
        json!({"agent_id": "alpha", "tool": "shell", "tier": "sandbox_edit", "mode": "require_approval", "source": "tool"})
    );
    let e = ok(
        &mut host,
        "agent_permissions.evaluate_tool",
        tool("alpha", "read_file", None),
    )
    .await;
    assert_eq!(
        (e["tier"].clone(), e["mode"].clone(), e["source"].clone()),
        (json!("read_only"), json!("always_allow"), json!("default"))
    );
    let e = ok(
        &mut host,
        "agent_permissions.evaluate_tool",
        tool("alpha", "send_email", None),
    )
    .await;
    assert_eq!(
        (e["tier"].clone(), e["mode"].clone(), e["source"].clone()),
        (json!("full_access"), json!("deny"), json!("agent"))
    );

    // An always_allow tool override is a grant, up to its tier.
    let p = ok(
        &mut host,
        "agent_permissions.set_tool",
        json!({"agent_id": "alpha", "tool": "send_email", "mode": "always_allow", "reason": "newsletter"}),
    )
    .await;
    assert_eq!(p["tools"]["alpha"]["send_email"], "always_allow");
    ok(
        &mut host,
        "agent_permissions.set_tool",
        json!({"agent_id": "gamma", "tool": "shell", "mode": "always_allow", "tier": "sandbox_edit"}),
    )
    .await;
    let grants = ok(&mut host, "agent_permissions.list_grants", json!({})).await["grants"].clone();
    assert_eq!(grants.as_array().unwrap().len(), 2, "{grants}");
    let mail = &grants[0];
    assert_eq!(
        (
            mail["agent_id"].clone(),
            mail["tool"].clone(),
            mail["tier"].clone(),
            mail["reason"].clone()
        ),
        (
            json!("alpha"),
            json!("send_email"),
            json!("full_access"),
            json!("newsletter")
        )
    );
    assert!(mail["grant_id"].as_str().unwrap().starts_with("grant-"));
    assert!(mail["created_at"].as_str().unwrap().ends_with('Z'));
    let only = ok(
        &mut host,
        "agent_permissions.list_grants",
        json!({"agent_id": "gamma"}),
    )
    .await;
    assert_eq!(only["grants"].as_array().unwrap().len(), 1);
    let e = ok(
        &mut host,
        "agent_permissions.evaluate_tool",
        tool("alpha", "send_email", None),
    )
    .await;
    assert_eq!(
        (e["mode"].clone(), e["source"].clone()),
        (json!("always_allow"), json!("tool"))
    );
    // Above its tier a grant does not apply: shell running something full_access.
    let e = ok(
        &mut host,
        "agent_permissions.evaluate_tool",
        tool("gamma", "shell", Some("full_access")),
    )
    .await;
    assert_eq!(
        (e["mode"].clone(), e["source"].clone()),
        (json!("require_approval"), json!("default"))
    );

    let before = ok(&mut op, "agent_permissions.get", json!({})).await;
    let grants_before = ok(&mut host, "agent_permissions.list_grants", json!({})).await;
    let file = home.path().join("agent-permissions.json");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    drop((host, op));
    drop(d);
    let d = Daemon::builder().home(home.path()).start();
    let mut host = Ws::host(&d).await;
    assert_eq!(
        ok(&mut host, "agent_permissions.get", json!({})).await,
        before
    );
    assert_eq!(
        ok(&mut host, "agent_permissions.list_grants", json!({})).await,
        grants_before
    );

    // Revoking a grant removes its override; a second revoke finds nothing.
    let id = grants_before["grants"][0]["grant_id"].clone();
    let r = ok(
        &mut host,
        "agent_permissions.revoke_grant",
        json!({"grant_id": id}),
    )
    .await;
    assert_eq!(r, json!({"revoked": true}));
    let r = ok(
        &mut host,
        "agent_permissions.revoke_grant",
        json!({"grant_id": id}),
    )
    .await;
    assert_eq!(r, json!({"revoked": false}));
    let p = ok(&mut host, "agent_permissions.get", json!({})).await;
    assert_eq!(
        p["tools"]["alpha"],
        json!({"shell": "require_approval"}),
        "{p}"
    );
    let p = ok(
        &mut host,
        "agent_permissions.reset_tool",
        json!({"agent_id": "gamma", "tool": "shell"}),
    )
    .await;
    assert!(p["tools"].get("gamma").is_none(), "{p}");
    let grants = ok(&mut host, "agent_permissions.list_grants", json!({})).await;
    assert_eq!(grants, json!({"grants": []}));
}

#[tokio::test]
async fn agent_permissions_refuse_bad_input_naming_the_field() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    for (method, params, field) in [
        (
            "agent_permissions.set",
            json!({"agent_id": "../x", "mode": "deny"}),
            "agent_id",
        ),
        (
            "agent_permissions.set",
            json!({"agent_id": "a", "mode": "maybe"}),
            "mode",
        ),
        (
            "agent_permissions.set",
            json!({"agent_id": "a", "mode": "deny", "tier": "root"}),
            "tier",
        ),
        ("agent_permissions.set", json!({"mode": "deny"}), "agent_id"),
        ("agent_permissions.set_default", json!({}), "preset"),
        (
            "agent_permissions.set_default",
            json!({"preset": "reckless"}),
            "preset",
        ),
        (
            "agent_permissions.set_default",
            json!({"preset": "balanced", "tier": "read_only", "mode": "deny"}),
            "preset",
        ),
        (
            "agent_permissions.set_default",
            json!({"tier": "read_only"}),
            "mode",
        ),
        (
            "agent_permissions.set_default",
            json!({"mode": "deny"}),
            "tier",
        ),
        ("agent_permissions.reset", json!({}), "agent_id"),
        (
            "agent_permissions.evaluate",
            json!({"agent_id": "a"}),
            "tier",
        ),
        (
            "agent_permissions.evaluate",
            json!({"agent_id": "a b", "tier": "read_only"}),
            "agent_id",
        ),
        (
            "agent_permissions.set_tool",
            json!({"agent_id": "a", "mode": "deny"}),
            "tool",
        ),
        (
            "agent_permissions.set_tool",
            json!({"agent_id": "a", "tool": "t", "mode": "deny", "tier": 1}),
            "tier",
        ),
        (
            "agent_permissions.reset_tool",
            json!({"agent_id": "a"}),
            "tool",
        ),
        (
            "agent_permissions.evaluate_tool",
            json!({"agent_id": "a", "tool": ""}),
            "tool",
        ),
        (
            "agent_permissions.list_grants",
            json!({"agent_id": 5}),
            "agent_id",
        ),
        ("agent_permissions.revoke_grant", json!({}), "grant_id"),
        ("agent_permissions.get", json!([1]), "params"),
    ] {
        let r = host.call(method, params).await;
        assert_names(&r, field);
    }
}

#[tokio::test]
async fn the_proposal_gate_applies_an_agents_policy_and_grants() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let r = host
        .call(
            "agents.upsert",
            json!({"id": "alpha", "name": "Alpha", "command": "/bin/sh"}),
        )
        .await;
    let token_path = r["result"]["token_path"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(token_path)
        .unwrap()
        .trim()
        .to_string();
    let mut agent = Ws::tcp(&d.ws_url).await;
    let r = agent
        .call("session.auth", json!({"token": token, "agent_id": "alpha"}))
        .await;
    assert!(r["result"].is_object(), "{r}");
    register(&mut agent, &["send_email", "echo"]).await;
    let mail = || vec![call("m", "send_email", json!({"to": "a@example.com"}))];

    // Balanced default: full_access still needs an approval.
    let (reply, calls) = submit(&mut agent, mail()).await;
    assert!(calls.is_empty());
    assert_eq!(result_of(&reply, "m")["status"], "rejected", "{reply}");

    // A grant lets the agent run the tool without a per-operation approval.
    ok(
        &mut host,
        "agent_permissions.set_tool",
        json!({"agent_id": "alpha", "tool": "send_email", "mode": "always_allow"}),
    )
    .await;
    let r = agent
        .call(
            "permission.evaluate",
            json!({"proposal": {"actions": mail()}}),
        )
        .await;
    let row = &r["result"]["decisions"][0];
    assert_eq!(row["decision"], "allow", "{r}");
    assert!(row["reason"]
        .as_str()
        .unwrap()
        .contains("policy always allows"));
    let (reply, calls) = submit(&mut agent, mail()).await;
    assert_eq!(calls.len(), 1, "{reply}");
    assert_eq!(result_of(&reply, "m")["status"], "succeeded");

    // A deny applies to the agent only.
    ok(
        &mut host,
        "agent_permissions.set",
        json!({"agent_id": "alpha", "mode": "deny", "tier": "read_only"}),
    )
    .await;
    let (reply, calls) = submit(&mut agent, vec![call("e", "echo", json!({}))]).await;
    assert!(calls.is_empty());
    let e = result_of(&reply, "e");
    assert!(
        e["error"].as_str().unwrap().contains("permission denied"),
        "{e}"
    );
    let (reply, _) = submit(
        &mut host,
        vec![json!({"id": "w", "type": "state_write", "key": "k", "value": 1})],
    )
    .await;
    assert_eq!(result_of(&reply, "w")["status"], "succeeded", "{reply}");

    // Revoking the grant brings the approval requirement back.
    let grants = ok(
        &mut host,
        "agent_permissions.list_grants",
        json!({"agent_id": "alpha"}),
    )
    .await;
    let id = grants["grants"][0]["grant_id"].clone();
    ok(
        &mut host,
        "agent_permissions.revoke_grant",
        json!({"grant_id": id}),
    )
    .await;
    let (reply, calls) = submit(&mut agent, mail()).await;
    assert!(calls.is_empty());
    assert!(result_of(&reply, "m")["error"]
        .as_str()
        .unwrap()
        .contains("needs approval"));
}
