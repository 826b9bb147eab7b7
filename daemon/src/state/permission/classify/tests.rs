use super::*;

fn tool(name: &str, parameters: Value) -> Assessment {
    let map = parameters.as_object().cloned().unwrap_or_default();
    assess(Operation::Tool {
        tool: name,
        parameters: &map,
    })
}

#[test]
fn names_split_into_whole_segments() {
    assert_eq!(segments("send_email"), ["send", "email"]);
    assert_eq!(segments("sendEmail"), ["send", "email"]);
    assert_eq!(segments("HTTPRequest"), ["http", "request"]);
    assert_eq!(segments("x-api-key"), ["x", "api", "key"]);
    assert_eq!(segments("auth.token"), ["auth", "token"]);
    assert_eq!(segments("s3Upload2"), ["s3", "upload2"]);
}

#[test]
fn tool_names_decide_the_tier_by_segment() {
    assert_eq!(tool("send_email", json!({})).tier, Tier::FullAccess);
    assert_eq!(tool("deployService", json!({})).tier, Tier::FullAccess);
    assert_eq!(tool("read_secret", json!({})).tier, Tier::FullAccess);
    assert_eq!(tool("read_file", json!({})).tier, Tier::ReadOnly);
    assert_eq!(tool("echo", json!({})).tier, Tier::ReadOnly);
    assert_eq!(tool("write_file", json!({})).tier, Tier::SandboxEdit);
    // Unknown names run at the default tier; substrings are not segments.
    assert_eq!(tool("work", json!({})).tier, Tier::SandboxEdit);
    assert_eq!(tool("format_date", json!({})).tier, Tier::SandboxEdit);
    assert_eq!(tool("resend_later", json!({})).tier, Tier::SandboxEdit);
    assert_eq!(tool("login", json!({})).tier, Tier::SandboxEdit);
}

#[test]
fn commands_keys_paths_and_phrases_escalate_only_where_they_belong() {
    let shell = |p: Value| tool("shell", p).tier;
    assert_eq!(shell(json!({"cmd": "ls -la"})), Tier::SandboxEdit);
    assert_eq!(shell(json!({"command": "rm -rf /"})), Tier::FullAccess);
    assert_eq!(
        shell(json!({"command": "/usr/bin/curl -s x"})),
        Tier::FullAccess
    );
    assert_eq!(
        shell(json!({"command": "git", "args": ["push", "origin"]})),
        Tier::FullAccess
    );
    assert_eq!(
        shell(json!({"command": "terraform plan"})),
        Tier::SandboxEdit
    );
    assert_eq!(
        shell(json!({"command": "terraform apply"})),
        Tier::FullAccess
    );
    // Command keywords count only in command fields.
    assert_eq!(
        tool("note", json!({"text": "use curl and aws"})).tier,
        Tier::SandboxEdit
    );
    // A URL, a message body, a search: no value scan for common words.
    assert_eq!(
        tool("fetch", json!({"url": "https://example.com/send?http=1"})).tier,
        Tier::ReadOnly
    );
    assert_eq!(
        tool("search", json!({"q": "release notes send format"})).tier,
        Tier::ReadOnly
    );
    // Credential key names, at any depth; the value is never read.
    assert_eq!(
        tool("call_api", json!({"api_key": "x"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("connect", json!({"db_password": "x"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("connect", json!({"auth": {"token": "x"}})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("connect", json!({"opts": [{"secretAccessKey": "x"}]})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool(
            "infer",
            json!({"max_tokens": 5, "token_count": 1, "secret_name": "n", "key": "k"})
        )
        .tier,
        Tier::SandboxEdit
    );
    // Target paths.
    assert_eq!(
        tool("read_file", json!({"path": "~/.ssh/id_rsa"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("read_file", json!({"file": "/home/u/.aws/credentials"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("read_file", json!({"path": "certs/server.pem"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("read_file", json!({"path": "/secret/key"})).tier,
        Tier::ReadOnly
    );
    assert_eq!(
        tool("read_file", json!({"path": "/tmp/x/secret.txt"})).tier,
        Tier::ReadOnly
    );
    // A path-like value under another key is not a declared target.
    assert_eq!(
        tool("echo", json!({"text": "~/.ssh/id_rsa"})).tier,
        Tier::ReadOnly
    );
    // Always-dangerous phrases anywhere, at a word start.
    assert_eq!(
        tool("run_sql", json!({"sql": "DROP   TABLE users"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("query", json!({"q": "delete from t"})).tier,
        Tier::FullAccess
    );
    assert_eq!(
        tool("query", json!({"q": "undelete from t"})).tier,
        Tier::ReadOnly
    );
}

#[test]
fn reversibility_is_its_own_axis() {
    let rev = |n: &str| tool(n, json!({})).reversibility;
    assert_eq!(rev("read_secret"), Reversibility::Reversible);
    assert_eq!(rev("db_insert"), Reversibility::Compensable);
    assert_eq!(tool("db_insert", json!({})).tier, Tier::SandboxEdit);
    assert_eq!(rev("deploy_service"), Reversibility::Compensable);
    assert_eq!(rev("send_email"), Reversibility::Irreversible);
    assert_eq!(rev("delete_file"), Reversibility::Irreversible);
    assert_eq!(rev("mystery"), Reversibility::Irreversible);
    assert_eq!(
        tool("read_file", json!({"path": "x; rm -rf /"})).reversibility,
        Reversibility::Irreversible
    );
    let state = assess(Operation::State {
        action_type: "state_write",
        key: "k",
    });
    assert_eq!(
        (state.tier, state.reversibility),
        (Tier::SandboxEdit, Reversibility::Reversible)
    );
}

#[test]
fn fingerprints_ignore_key_order_and_separate_operations() {
    let a = json!({"b": 1, "a": [1, 2]});
    let b = json!({"a": [1, 2], "b": 1});
    let fp = |p: &Value| {
        fingerprint(Operation::Tool {
            tool: "t",
            parameters: p.as_object().unwrap(),
        })
    };
    assert_eq!(fp(&a), fp(&b));
    assert_ne!(fp(&a), fp(&json!({"b": 2, "a": [1, 2]})));
    assert_eq!(fp(&a).len(), 64);
    let w = fingerprint(Operation::State {
        action_type: "state_write",
        key: "k",
    });
    let d = fingerprint(Operation::State {
        action_type: "state_delete",
        key: "k",
    });
    assert_ne!(w, d);
}
