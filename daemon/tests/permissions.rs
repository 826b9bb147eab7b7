//! `permission.*` against a real daemon: the per-connection standing tier (raising it is
//! host-only), the classifier's examples, evaluate / pending / approve / reject over the
//! durable ledger (surviving a restart, reviewer stamped), and the gate on
//! `proposal.submit` (a blocked proposal runs nothing; approving its fingerprint lets it
//! run).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::tools::{assert_names, call, register, result_of, submit};
use common::{code, Daemon, Ws};
use serde_json::{json, Value};

fn proposal(actions: Vec<Value>) -> Value {
    json!({"proposal": {"actions": actions}})
}

fn row<'a>(rows: &'a Value, id: &str) -> &'a Value {
    rows.as_array()
        .unwrap_or_else(|| panic!("{rows}"))
        .iter()
        .find(|r| r["action_id"] == id)
        .unwrap_or_else(|| panic!("no row {id} in {rows}"))
}

#[tokio::test]
async fn the_standing_tier_is_per_connection_and_only_a_host_sets_it() {
    let d = Daemon::start();
    let mut op = Ws::authed(&d).await;
    let r = op.call("permission.get_tier", json!(null)).await;
    assert_eq!(r["result"], json!({"granted_tier": "sandbox_edit"}), "{r}");
    let r = op
        .call("permission.set_tier", json!({"tier": "full_access"}))
        .await;
    assert_eq!(code(&r), -32603, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "host_required");

    let mut host = Ws::host(&d).await;
    let r = host
        .call("permission.set_tier", json!({"tier": "read_only"}))
        .await;
    assert_eq!(r["result"], json!({"granted_tier": "read_only"}), "{r}");
    let r = host.call("permission.get_tier", json!({})).await;
    assert_eq!(r["result"]["granted_tier"], "read_only");
    // Another connection keeps its own tier.
    let r = op.call("permission.get_tier", json!({})).await;
    assert_eq!(r["result"]["granted_tier"], "sandbox_edit");

    // A read_only session's write is escalated, not run.
    let (reply, _) = submit(
        &mut host,
        vec![json!({"id": "w", "type": "state_write", "key": "k", "value": 1})],
    )
    .await;
    let w = result_of(&reply, "w");
    assert_eq!(w["status"], "rejected", "{reply}");
    assert!(
        w["error"]
            .as_str()
            .unwrap()
            .contains("requires sandbox_edit, granted read_only"),
        "{w}"
    );
    assert_eq!(reply["result"]["final_state"], json!({}));

    for bad in [json!({}), json!({"tier": "root"}), json!({"tier": 3})] {
        let r = host.call("permission.set_tier", bad).await;
        assert_names(&r, "tier");
    }
    let r = op.call("permission.get_tier", json!([1])).await;
    assert_names(&r, "params");
}

#[tokio::test]
async fn classify_matches_signals_at_their_boundaries() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let r = ws
        .call(
            "permission.classify",
            proposal(vec![
                call("mail", "send_email", json!({"to": "a@example.com", "body": "hi"})),
                call("read", "read_file", json!({"path": "notes.txt"})),
                call("wipe", "shell", json!({"command": "rm -rf /"})),
                call("url", "fetch", json!({"url": "https://example.com/http/send"})),
                call("key", "call_api", json!({"api_key": "sk-123"})),
                call("ssh", "read_file", json!({"path": "~/.ssh/id_rsa"})),
                json!({"id": "comp", "type": "tool_call", "tool": "db_insert", "reversibility": "compensable"}),
                json!({"id": "s", "type": "state_write", "key": "k", "value": 1, "reversibility": "reversible"}),
            ]),
        )
        .await;
    let rows = &r["result"]["classifications"];
    let tier = |id: &str| row(rows, id)["required_tier"].clone();
    assert_eq!(tier("mail"), "full_access", "{r}");
    assert_eq!(tier("read"), "read_only");
    assert_eq!(tier("wipe"), "full_access");
    assert_eq!(
        tier("url"),
        "read_only",
        "a URL value is not scanned for words"
    );
    assert_eq!(tier("key"), "full_access");
    assert_eq!(tier("ssh"), "full_access");
    assert_eq!(tier("comp"), "sandbox_edit");
    assert_eq!(tier("s"), "sandbox_edit");
    assert_eq!(row(rows, "mail")["reversibility"], "irreversible");
    assert_eq!(row(rows, "read")["reversibility"], "reversible");
    assert_eq!(row(rows, "comp")["reversibility"], "compensable");
    assert_eq!(row(rows, "s")["tool"], Value::Null);
    assert_eq!(row(rows, "comp")["missing_compensation"], true);
    assert_eq!(row(rows, "mail")["missing_compensation"], false);
    // Actions that declare nothing count as irreversible in the declared contract.
    assert_eq!(r["result"]["declared_rollback_contract"], "irreversible");
    let r = ws
        .call(
            "permission.classify",
            proposal(vec![
                json!({"id": "s", "type": "state_write", "key": "k", "value": 1, "reversibility": "reversible"}),
            ]),
        )
        .await;
    assert_eq!(r["result"]["declared_rollback_contract"], "reversible");
    let r = ws.call("permission.classify", proposal(vec![])).await;
    assert_eq!(r["result"]["declared_rollback_contract"], "reversible");

    for method in [
        "permission.classify",
        "permission.evaluate",
        "permission.pending",
    ] {
        let r = ws.call(method, json!({})).await;
        assert_names(&r, "proposal");
        let r = ws.call(method, json!({"proposal": "nope"})).await;
        assert_names(&r, "proposal");
        let r = ws
            .call(
                method,
                json!({"proposal": {"actions": [{"id": "a", "type": "teleport"}]}}),
            )
            .await;
        assert_names(&r, "proposal.actions[0].type");
    }
    let r = ws
        .call(
            "permission.evaluate",
            json!({"proposal": {"actions": []}, "skill": 5}),
        )
        .await;
    assert_names(&r, "skill");
}

#[tokio::test]
async fn decisions_are_recorded_durably_and_survive_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let d = Daemon::builder().home(home.path()).start();
    let mut host = Ws::host(&d).await;
    let mut op = Ws::authed(&d).await;
    let actions = vec![
        call("mail", "send_email", json!({"to": "a@example.com"})),
        call("echo", "echo", json!({"text": "hi"})),
        json!({"id": "w", "type": "state_write", "key": "k", "value": 1}),
        call("ship", "deploy_service", json!({"name": "api"})),
        call("pay", "pay_invoice", json!({"invoice": 7})),
    ];
    let r = op
        .call("permission.evaluate", proposal(actions.clone()))
        .await;
    let rows = r["result"]["decisions"].clone();
    assert_eq!(row(&rows, "mail")["decision"], "needs_approval", "{r}");
    assert_eq!(row(&rows, "mail")["required"], "full_access");
    assert_eq!(row(&rows, "mail")["granted"], "sandbox_edit");
    assert_eq!(row(&rows, "mail")["reversibility"], "irreversible");
    assert_eq!(row(&rows, "echo")["decision"], "allow");
    assert_eq!(row(&rows, "echo")["reversibility"], "reversible");
    assert_eq!(row(&rows, "w")["decision"], "allow");
    let fp = |id: &str| row(&rows, id)["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(fp("mail").len(), 64);
    let r = op
        .call("permission.pending", proposal(actions.clone()))
        .await;
    let pending: Vec<&str> = r["result"]["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(pending, ["mail", "ship", "pay"], "{r}");

    // Only a host records decisions; the reviewer is stamped by the daemon.
    let approve = json!({"fingerprint": fp("mail"), "required_tier": "full_access", "reason": "expected mail", "evidence": {"ticket": 7}, "reviewer": "forged"});
    let r = op.call("permission.approve", approve.clone()).await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = host.call("permission.approve", approve).await;
    let record = &r["result"];
    assert_eq!(record["fingerprint"], fp("mail").as_str(), "{r}");
    assert_eq!(record["decision"], "approved");
    assert_eq!(record["required_tier"], "full_access");
    assert_eq!(record["reason"], "expected mail");
    assert_eq!(record["evidence"], json!({"ticket": 7}));
    let reviewer = record["reviewer"].as_str().unwrap();
    assert!(
        reviewer.starts_with("conn:") && reviewer != "forged",
        "{record}"
    );
    assert!(record["recorded_at"].as_str().unwrap().ends_with('Z'));
    // An under-scoped approval cannot widen access.
    let r = host
        .call(
            "permission.approve",
            json!({"fingerprint": fp("ship"), "required_tier": "read_only"}),
        )
        .await;
    assert_eq!(r["result"]["required_tier"], "read_only", "{r}");
    // The {action} form classifies the action itself.
    let r = host
        .call(
            "permission.reject",
            json!({"action": actions[4], "reason": "no payments"}),
        )
        .await;
    assert_eq!(r["result"]["fingerprint"], fp("pay").as_str(), "{r}");
    assert_eq!(r["result"]["decision"], "rejected");
    assert_eq!(r["result"]["required_tier"], "full_access");

    let check = |rows: &Value| {
        assert_eq!(row(rows, "mail")["decision"], "allow", "{rows}");
        assert!(row(rows, "mail")["reason"]
            .as_str()
            .unwrap()
            .contains("approved by conn:"));
        assert_eq!(row(rows, "ship")["decision"], "needs_approval");
        assert!(
            row(rows, "ship")["reason"]
                .as_str()
                .unwrap()
                .contains("does not cover"),
            "{rows}"
        );
        assert_eq!(row(rows, "pay")["decision"], "deny");
        assert!(row(rows, "pay")["reason"]
            .as_str()
            .unwrap()
            .contains("no payments"));
    };
    // Visible to every connection at once.
    let r = op
        .call("permission.evaluate", proposal(actions.clone()))
        .await;
    check(&r["result"]["decisions"]);

    let ledger = home.path().join("approvals.jsonl");
    let mode = std::fs::metadata(&ledger).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 3);
    drop((host, op));
    drop(d);
    let d = Daemon::builder().home(home.path()).start();
    let mut op = Ws::authed(&d).await;
    let r = op.call("permission.evaluate", proposal(actions)).await;
    check(&r["result"]["decisions"]);
}

#[tokio::test]
async fn approve_and_reject_refuse_bad_input_naming_the_field() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let fp = "a".repeat(64);
    for method in ["permission.approve", "permission.reject"] {
        for (params, field) in [
            (json!({}), "fingerprint"),
            (
                json!({"fingerprint": "abc", "required_tier": "full_access"}),
                "fingerprint",
            ),
            (json!({"fingerprint": fp}), "required_tier"),
            (
                json!({"fingerprint": fp, "required_tier": "root"}),
                "required_tier",
            ),
            (json!({"fingerprint": 7}), "fingerprint"),
            (json!({"action": "send"}), "action"),
            (
                json!({"action": {"id": "a"}}),
                "action: missing field `type`",
            ),
            (
                json!({"action": {"id": "a", "type": "tool_call"}}),
                "action.tool",
            ),
            (
                json!({"action": {"id": "a", "type": "tool_call", "tool": "t"}, "fingerprint": fp}),
                "fingerprint",
            ),
            (
                json!({"fingerprint": fp, "required_tier": "full_access", "reason": 5}),
                "reason",
            ),
            (
                json!({"fingerprint": fp, "required_tier": "full_access", "reason": "x".repeat(5000)}),
                "reason",
            ),
        ] {
            let r = host.call(method, params.clone()).await;
            assert_names(&r, field);
        }
    }
}

#[tokio::test]
async fn a_full_access_action_blocks_the_whole_proposal_until_its_fingerprint_is_approved() {
    let d = Daemon::start();
    let mut op = Ws::authed(&d).await;
    let mut host = Ws::host(&d).await;
    register(&mut op, &["send_email", "echo"]).await;
    let actions = vec![
        call("greet", "echo", json!({"text": "hello"})),
        call("mail", "send_email", json!({"to": "a@example.com"})),
        json!({"id": "w", "type": "state_write", "key": "sent", "value": true, "dependencies": ["mail"]}),
    ];
    let (reply, calls) = submit(&mut op, actions.clone()).await;
    assert!(calls.is_empty(), "no tool is called: {calls:?}");
    let result = &reply["result"];
    for id in ["greet", "mail", "w"] {
        assert_eq!(result_of(&reply, id)["status"], "rejected", "{reply}");
    }
    let mail = result_of(&reply, "mail");
    let error = mail["error"].as_str().unwrap();
    assert!(
        error.contains("requires full_access, granted sandbox_edit"),
        "{error}"
    );
    assert_eq!(result["final_state"], json!({}));
    assert_eq!(result["admission"]["gate"], "permission");
    let blocked = result["admission"]["decisions"].as_array().unwrap();
    assert_eq!(blocked.len(), 1, "{result}");
    let fingerprint = blocked[0]["fingerprint"].as_str().unwrap().to_string();
    assert!(
        error.contains(&fingerprint),
        "the error names the fingerprint"
    );
    assert!(result_of(&reply, "greet")["error"]
        .as_str()
        .unwrap()
        .contains("blocked by the permission gate (actions mail)"));
    let events = op
        .call("events.query", json!({"kinds": ["proposal.rejected"]}))
        .await;
    assert_eq!(events["result"]["count"], 1, "{events}");

    // The approval, recorded on the host's connection, lets the operation run.
    let r = host
        .call(
            "permission.approve",
            json!({"fingerprint": fingerprint, "required_tier": "full_access"}),
        )
        .await;
    assert_eq!(r["result"]["decision"], "approved", "{r}");
    let (reply, calls) = submit(&mut op, actions.clone()).await;
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(tools.len(), 2, "{reply}");
    assert!(tools.contains(&"send_email") && tools.contains(&"echo"));
    for id in ["greet", "mail", "w"] {
        assert_eq!(result_of(&reply, id)["status"], "succeeded", "{reply}");
    }
    assert!(reply["result"].get("admission").is_none());

    // Other parameters are another operation; a rejection then denies it outright.
    let other = vec![call("mail", "send_email", json!({"to": "b@example.com"}))];
    let r = host
        .call("permission.reject", json!({"action": other[0]}))
        .await;
    assert_eq!(r["result"]["decision"], "rejected", "{r}");
    let (reply, calls) = submit(&mut op, other).await;
    assert!(calls.is_empty());
    let mail = result_of(&reply, "mail");
    assert!(
        mail["error"]
            .as_str()
            .unwrap()
            .starts_with("permission denied"),
        "{mail}"
    );
    assert_eq!(
        reply["result"]["admission"]["decisions"][0]["decision"],
        "deny"
    );
}
