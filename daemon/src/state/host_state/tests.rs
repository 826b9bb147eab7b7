use super::*;
use car_proto::methods::host::ApprovalStatus;

fn agent(id: &str) -> AgentFields {
    AgentFields {
        id: Some(id.into()),
        name: id.to_uppercase(),
        kind: "test".into(),
        capabilities: vec![],
        project: None,
        pid: None,
        display: None,
        metadata: json!({}),
    }
}

#[test]
fn events_are_numbered_without_gaps_and_replayed_after_a_cursor() {
    let host = HostState::new();
    host.register_agent("sess-1", agent("a")).unwrap();
    host.register_agent("sess-2", agent("b")).unwrap();
    let change = StatusChange {
        status: AgentStatus::Running,
        current_task: None,
        message: None,
        payload: None,
    };
    host.set_status("sess-1", "a", change).unwrap();
    let seqs: Vec<u64> = host.events(10).iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    let sub = host.subscribe(Some((1, Some(host.epoch.as_str()))));
    match sub.replay {
        Replay::Events(events) => {
            assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3])
        }
        other => panic!("expected a replay, got {other:?}"),
    }
    assert_eq!(sub.seq, 3);
    // Up to date: an empty replay, not a refusal.
    let sub = host.subscribe(Some((3, Some(host.epoch.as_str()))));
    assert!(matches!(sub.replay, Replay::Events(ref e) if e.is_empty()));
}

#[test]
fn a_foreign_epoch_or_a_cursor_beyond_the_ring_is_refused() {
    let host = HostState::new();
    for i in 0..(RING_EVENTS + 10) {
        host.notify("host.notification", None, Some(format!("n{i}")), json!({}));
    }
    assert!(matches!(
        host.subscribe(Some((5, Some("epoch-other")))).replay,
        Replay::Refused("epoch")
    ));
    assert!(matches!(
        host.subscribe(Some((5, None))).replay,
        Replay::Refused("epoch")
    ));
    assert!(matches!(
        host.subscribe(Some((5, Some(host.epoch.as_str())))).replay,
        Replay::Refused("gap")
    ));
    // A cursor from the future of this epoch is a gap too.
    let future = (RING_EVENTS + 100) as u64;
    assert!(matches!(
        host.subscribe(Some((future, Some(host.epoch.as_str()))))
            .replay,
        Replay::Refused("gap")
    ));
    // The oldest held event's predecessor is still resumable.
    let oldest = host.events(RING_EVENTS).first().unwrap().seq;
    assert!(matches!(
        host.subscribe(Some((oldest - 1, Some(host.epoch.as_str())))).replay,
        Replay::Events(ref e) if e.len() == RING_EVENTS
    ));
}

#[test]
fn only_the_owner_mutates_and_closing_the_owner_removes_its_rows() {
    let host = HostState::new();
    host.register_agent("sess-1", agent("a")).unwrap();
    let err = host.unregister_agent("sess-2", "a").unwrap_err();
    assert_eq!(err.data.as_ref().unwrap()["reason"], "not_owner");
    assert!(
        err.message.contains("owned by another session"),
        "{}",
        err.message
    );
    let err = host.register_agent("sess-2", agent("a")).unwrap_err();
    assert_eq!(err.data.as_ref().unwrap()["reason"], "not_owner");
    host.on_session_closed("sess-1");
    assert!(host.agents().is_empty());
    assert_eq!(host.events(1)[0].kind, "agent.unregistered");
    host.register_agent("sess-2", agent("a")).unwrap();
}

#[test]
fn a_system_approval_is_resolved_only_by_a_host_with_another_credential() {
    let host = HostState::new();
    let who = |session: &str, credential: &str, is_host: bool| Principal {
        session: session.into(),
        credential: credential.into(),
        is_host,
    };
    let (approval, mut rx) = host.request_approval(ApprovalRequest {
        agent_id: None,
        action: "scheduler.os_install".into(),
        description: None,
        details: json!({}),
        required_approvals: 1,
        client_id: None,
        parked: Some(who("sess-1", "operator", false)),
    });
    for (caller, reason) in [
        (who("sess-1", "operator", false), "self_approval"),
        (who("sess-2", "operator", false), "self_approval"),
        (who("sess-3", "agent:a1", false), "host_only"),
        (who("sess-4", "observer", false), "host_only"),
    ] {
        let err = host
            .resolve_approval(&caller, &approval.id, true, None)
            .unwrap_err();
        assert_eq!(err.data.as_ref().unwrap()["reason"], reason, "{caller:?}");
    }
    assert!(rx.try_recv().is_err(), "still parked");
    let resolved = host
        .resolve_approval(
            &who("sess-9", "host", true),
            &approval.id,
            false,
            Some("no".into()),
        )
        .unwrap();
    assert_eq!(resolved.status, ApprovalStatus::Denied);
    assert_eq!(rx.try_recv(), Ok(false));
    let again = host
        .resolve_approval(&who("sess-9", "host", true), &approval.id, true, None)
        .unwrap_err();
    assert_eq!(again.data.as_ref().unwrap()["reason"], "already_resolved");
}
