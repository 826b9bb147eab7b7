use super::*;
use serde_json::json;

#[test]
fn declarations_are_unique_and_consistent() {
    let names: Vec<&str> = all().map(Declaration::name).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "all() is sorted and free of duplicates");
    assert!(gates_are_supported());
    for d in all() {
        assert!(
            !d.spec.summary.is_empty() && !d.spec.summary.ends_with('.'),
            "{}",
            d.name()
        );
        assert_eq!(lookup(d.name()).map(Declaration::name), Some(d.name()));
        for m in d.members {
            assert!(
                m.name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}: member {}",
                d.name(),
                m.name
            );
            let mut seen_optional = false;
            for a in m.args {
                assert!(
                    !seen_optional || a.optional,
                    "{}: required {} after an optional argument",
                    m.name,
                    a.name
                );
                seen_optional |= a.optional;
                if a.field.is_empty() {
                    assert_eq!(a.kind, ArgKind::Json, "{}: whole-params arg", m.name);
                }
            }
        }
    }
    assert!(lookup("nope").is_none());
}

#[test]
fn member_names_are_unique_across_the_contract() {
    let mut names: Vec<&str> = all()
        .flat_map(|d| d.members.iter().map(|m| m.name))
        .collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(n, names.len());
}

#[test]
fn role_filtering_follows_the_reference() {
    use CallerRole as C;
    assert!(C::Operator.sees(Role::Operator));
    assert!(!C::Operator.sees(Role::Host) && !C::Operator.sees(Role::Owner));
    assert!(!C::Operator.sees(Role::Agent));
    assert!(C::Host.sees(Role::Host) && C::Host.sees(Role::Owner) && !C::Host.sees(Role::Agent));
    assert!(C::Agent.sees(Role::Agent) && C::Agent.sees(Role::Owner) && !C::Agent.sees(Role::Host));
    // Only host labels are enforced by dispatch.
    assert!(!C::Operator.may_call(Role::Host) && C::Host.may_call(Role::Host));
    assert!(C::Operator.may_call(Role::Agent) && C::Operator.may_call(Role::Owner));
    assert!(!C::Agent.may_call(Role::Host));
}

#[test]
fn debug_declarations_are_hidden_by_default() {
    assert!(active(false).all(|d| !d.spec.debug));
    assert!(active(true).count() > active(false).count());
    assert!(all().filter(|d| d.spec.debug).all(|d| d.members.is_empty()));
}

#[test]
fn decoding_ignores_unknown_fields_treats_null_as_absent_and_names_paths() {
    let p: state::KeyParams =
        decode_params(json!({"key": "k", "tenant_id": null, "extra": [1]})).unwrap();
    assert_eq!(p.key.as_str(), "k");
    assert!(p.tenant_id.is_none());
    let _: fields::NoParams = decode_params(serde_json::Value::Null).unwrap();
    let e = decode_params::<state::KeyParams>(json!({"key": 5})).unwrap_err();
    assert_eq!(e.code, crate::errors::INVALID_PARAMS);
    assert!(
        e.message.starts_with("invalid params: key: "),
        "{}",
        e.message
    );
    let e = decode_params::<state::KeyParams>(json!({"key": ""})).unwrap_err();
    assert_eq!(e.message, "invalid params: key: must not be empty");
    let e = decode_params::<state::KeyParams>(json!({})).unwrap_err();
    assert!(e.message.contains("missing field `key`"), "{}", e.message);
    let e = decode_params::<tools::NameParams>(json!(5)).unwrap_err();
    assert!(
        e.message.starts_with("invalid params: params: "),
        "{}",
        e.message
    );
    // Nested paths: an array element's field.
    let e = decode_params::<fields::OneOrMany<tools::ToolDefinition>>(json!([
        {"name": "a"},
        {"name": 3}
    ]))
    .unwrap_err();
    assert!(
        e.message.starts_with("invalid params: [1].name: "),
        "{}",
        e.message
    );
    let one: fields::OneOrMany<tools::ToolDefinition> =
        decode_params(json!({"name": "a"})).unwrap();
    assert_eq!(one.0.len(), 1);
}

#[test]
fn only_params_with_an_array_form_accept_arrays() {
    assert!(accepts_array::<fields::OneOrMany<tools::ToolDefinition>>());
    assert!(accepts_array::<fields::Json>());
    assert!(!accepts_array::<state::SetParams>());
    assert!(!accepts_array::<fields::NoParams>());
    assert!(!accepts_array::<session::AuthParams>());
}

#[test]
fn observer_reads_are_never_gated_or_grantable() {
    let observer: Vec<_> = observer_methods().map(|d| d.name()).collect();
    for name in [
        "session.auth",
        "server.status",
        "host.approvals",
        "runs.list",
        "agents.list",
    ] {
        assert!(observer.contains(&name), "{name} is an observer read");
    }
    for name in [
        "secret.get",
        "agents.upsert",
        "memory.query",
        "host.resolve_approval",
    ] {
        assert!(!observer.contains(&name), "{name} is not for the observer");
    }
    for d in observer_methods() {
        let a = d.spec.access;
        assert!(!a.gated && !a.grantable, "{}", d.name());
    }
}

#[test]
fn gate_and_grant_sets_come_from_the_declarations() {
    let gated: Vec<_> = gated_methods().map(|d| d.name()).collect();
    assert_eq!(
        gated,
        [
            "scheduler.os_install",
            "scheduler.os_reconcile",
            "scheduler.os_uninstall"
        ]
    );
    // The host is the approver and never waits on its own calls, so a gated host-only
    // method would never be held: the declaration would lie.
    for d in gated_methods() {
        assert_ne!(
            d.spec.role,
            Role::Host,
            "{} is gated but host-only",
            d.name()
        );
    }
    let grantable: Vec<_> = grantable_methods().map(|d| d.name()).collect();
    assert_eq!(
        grantable,
        [
            "classify",
            "infer",
            "infer.cancel",
            "infer.deadline",
            "infer_stream"
        ]
    );
}

#[test]
fn owned_rows_are_declared_for_every_per_principal_namespace() {
    let owned = |name: &str| match lookup(name).unwrap().spec.access.scope {
        Scope::Owned(r) => Some(r),
        _ => None,
    };
    assert_eq!(owned("secret.get"), Some(Resource::Secrets));
    assert_eq!(owned("agents.tail_log"), Some(Resource::AgentLogs));
    assert_eq!(owned("runs.list"), Some(Resource::Runs));
    assert_eq!(owned("models.unregister"), Some(Resource::Models));
    assert_eq!(owned("tasks.list"), Some(Resource::Tasks));
    assert_eq!(owned("host.resolve_approval"), Some(Resource::Approvals));
    assert_eq!(owned("server.status"), None);
    for d in all() {
        let prefix = d.name().split('.').next().unwrap();
        if ["agents", "runs", "secret", "models", "tasks", "supervision"].contains(&prefix) {
            assert!(
                matches!(d.spec.access.scope, Scope::Owned(_)),
                "{} holds per-principal rows",
                d.name()
            );
        }
    }
}

#[test]
fn reserved_event_kinds_are_the_daemons() {
    let access = lookup("host.notify").unwrap().spec.access;
    for kind in [
        "approval.resolved",
        " Approval.Resolved",
        "agent.status_changed",
        "run.x",
    ] {
        assert!(access.is_reserved(&json!({"kind": kind})), "{kind}");
    }
    for params in [
        json!({"kind": "host.notification"}),
        json!({"kind": "my.approval.resolved"}),
        json!({}),
        json!({"kind": 3}),
    ] {
        assert!(!access.is_reserved(&params), "{params}");
    }
    // No other method reserves anything.
    assert_eq!(
        all().filter(|d| d.spec.access.reserved.is_some()).count(),
        1
    );
}

/// Acceptance of issue 25: a result is untyped JSON only where CAR's own shape is
/// free-form, and those methods are the ones docs/protocol-choices.md lists.
#[test]
fn only_free_form_methods_answer_untyped_json() {
    const FREE_FORM: &[&str] = &[
        "state.get",
        "debug.echo",
        "debug.call_client",
        "debug.notify_client",
    ];
    let mut generator = schemars::SchemaGenerator::default();
    let untyped: Vec<&str> = all()
        .filter(|d| {
            let schema = d.result_schema(&mut generator).to_value();
            schema == json!(true) || schema == json!({})
        })
        .map(|d| d.spec.name)
        .collect();
    let mut expected: Vec<&str> = FREE_FORM.to_vec();
    expected.sort_unstable();
    let mut got = untyped.clone();
    got.sort_unstable();
    assert_eq!(got, expected, "untyped results: {untyped:?}");
    let doc = include_str!("../../../docs/protocol-choices.md");
    assert!(doc.contains("`state.get`") && doc.contains("`debug.*`"));
}
