"""The host surface through CAR's client: the shared host registry (`host_*` members of
`CarRuntime`) with its per-session ownership, the `host.event` stream (`host_subscribe`
plus `register_daemon_notification_handler`), the agent registry (`HostClient.agents_upsert`
/ `agents_remove`, `CarRuntime.agents_list`) with per-agent tokens (`CAR_AGENT_ID` +
`CAR_AGENT_TOKEN`), and the secret store (`secret.*` through `daemon_call`,
`HostClient.diagnostics_secret_store_activity`).

Shapes are CAR's: websocket-protocol-v0.48.md "host" (`HostAgent`, `HostDevice`,
`HostApproval`, `HostEvent`, `host.events` → `{events}`, `host.approvals` →
`{approvals}`), "Per-session ACL on host state", host-protocol.md (event envelope with
`sequence`), "agents" (`AgentSpec`, `ManagedAgent`) and "secret"."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import car_runtime
from conftest import Daemon, Inbox, client_env, wait_until

# CAR's HostAgent / HostApproval / HostEvent / HostDevice fields (websocket-protocol-v0.48.md
# "host", host-protocol.md "Agent Shape" / "Approval Shape").
AGENT_KEYS = {"id", "name", "kind", "capabilities", "project", "status", "current_task", "pid", "metadata"}
APPROVAL_KEYS = {"id", "agent_id", "action", "details", "options", "status", "created_at"}
EVENT_KEYS = {"id", "sequence", "timestamp", "kind", "agent_id", "message", "payload"}
DEVICE_KEYS = {"id", "name", "platform", "capabilities", "status", "updated_at", "metadata"}
SECRET_COUNTERS = {"get_attempts", "status_attempts", "availability_attempts", "write_attempts", "delete_attempts"}


def agent(id: str, **extra: Any) -> str:
    spec: Dict[str, Any] = {"id": id, "name": f"Agent {id}", "kind": "callback"}
    spec.update(extra)
    return json.dumps(spec)


def ids(rows: List[Dict[str, Any]]) -> List[str]:
    return [r["id"] for r in rows]


def events(rt: car_runtime.CarRuntime, limit: Any = None) -> List[Dict[str, Any]]:
    doc = json.loads(rt.host_events(limit) if limit is not None else rt.host_events())
    assert set(doc) == {"events"}, doc
    rows: List[Dict[str, Any]] = doc["events"]
    return rows


@pytest.fixture
def two(daemon: Daemon) -> Any:
    """Two of CAR's runtimes, i.e. two daemon sessions."""
    a, b = car_runtime.CarRuntime(), car_runtime.CarRuntime()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


# --- the host registry: acceptance -------------------------------------------------------


def test_two_runtimes_share_the_host_registry_and_only_owners_mutate(two: Any) -> None:
    """Acceptance: CAR's own client drives the host surface. Both sessions see both agents;
    neither can change the other's; notify and approve round trip; `host_events` has every
    change in order with a gap-free `sequence`."""
    a, b = two
    alpha = json.loads(a.host_register_agent(agent(
        "alpha", capabilities=["chat", "summarize"], project="/work/proj", pid=4242, metadata={"team": "core"})))
    assert set(alpha) >= AGENT_KEYS, alpha
    assert alpha["id"] == "alpha" and alpha["name"] == "Agent alpha" and alpha["kind"] == "callback"
    assert alpha["capabilities"] == ["chat", "summarize"]
    assert alpha["project"] == "/work/proj" and alpha["pid"] == 4242 and alpha["metadata"] == {"team": "core"}
    assert alpha["status"] == "idle" and alpha["current_task"] is None
    beta = json.loads(b.host_register_agent(agent("beta")))
    assert beta["id"] == "beta" and beta["capabilities"] == [] and beta["metadata"] == {}
    # The owning session is recorded (websocket-protocol "Per-session ACL": HostAgent.session_id).
    assert alpha["session_id"] != beta["session_id"]

    for rt in (a, b):
        listed = json.loads(rt.host_agents())
        assert isinstance(listed, list), listed
        assert sorted(ids(listed)) == ["alpha", "beta"]

    # b cannot change a's agent, nor take its id over (CAR's error text).
    refusals = [
        lambda: b.host_set_status(json.dumps({"agent_id": "alpha", "status": "running"})),
        lambda: b.host_unregister_agent(json.dumps({"agent_id": "alpha"})),
        lambda: b.host_register_agent(agent("alpha")),
    ]
    for attempt in refusals:
        with pytest.raises(RuntimeError, match="agent 'alpha' is owned by another session"):
            attempt()
    still = {r["id"]: r for r in json.loads(b.host_agents())}
    assert still["alpha"]["status"] == "idle" and still["alpha"]["name"] == "Agent alpha"

    running = json.loads(a.host_set_status(json.dumps(
        {"agent_id": "alpha", "status": "running", "current_task": "indexing", "message": "Alpha started"})))
    assert running["status"] == "running" and running["current_task"] == "indexing"

    note = json.loads(a.host_notify(json.dumps({"agent_id": "alpha", "message": "halfway", "payload": {"pct": 50}})))
    assert set(note) >= EVENT_KEYS, note
    assert note["kind"] == "host.notification"  # CAR's default kind
    assert note["agent_id"] == "alpha" and note["message"] == "halfway" and note["payload"] == {"pct": 50}

    approval = json.loads(a.host_request_approval(json.dumps({
        "agent_id": "alpha", "title": "Run cargo test", "description": "the whole workspace",
        "context": {"command": "cargo test --workspace"}})))
    assert set(approval) >= APPROVAL_KEYS, approval
    assert approval["action"] == "Run cargo test"
    assert approval["details"] == {"command": "cargo test --workspace"}
    assert approval["agent_id"] == "alpha" and approval["status"] == "pending"
    assert approval["options"] == ["approve", "deny"]
    # "If agent_id is provided, the agent's status auto-flips to waiting_for_approval."
    assert {r["id"]: r for r in json.loads(b.host_agents())}["alpha"]["status"] == "waiting_for_approval"
    pending = json.loads(b.host_approvals())
    assert set(pending) == {"approvals"}, pending
    assert [p["id"] for p in pending["approvals"] if p["status"] == "pending"] == [approval["id"]]
    # Raised by a's session, so only a resolves it.
    with pytest.raises(RuntimeError, match="is owned by another session"):
        b.host_resolve_approval(json.dumps({"approval_id": approval["id"], "approved": True}))
    resolved = json.loads(a.host_resolve_approval(
        json.dumps({"approval_id": approval["id"], "approved": True, "notes": "go ahead"})))
    assert resolved["id"] == approval["id"] and resolved["status"] == "approved"
    with pytest.raises(RuntimeError):  # once only
        a.host_resolve_approval(json.dumps({"approval_id": approval["id"], "approved": False}))

    assert json.loads(b.host_unregister_agent(json.dumps({"agent_id": "beta"}))) == {"ok": True}
    assert ids(json.loads(a.host_agents())) == ["alpha"]

    history = events(a, 100)
    for e in history:
        assert set(e) >= EVENT_KEYS, e
    got = [(e["kind"], e["agent_id"]) for e in history]
    assert got == [
        ("agent.registered", "alpha"),
        ("agent.registered", "beta"),
        ("agent.status_changed", "alpha"),
        ("host.notification", "alpha"),
        ("approval.requested", "alpha"),
        ("approval.resolved", "alpha"),
        ("agent.unregistered", "beta"),
    ], got
    seqs = [e["sequence"] for e in history]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap-free, in order"
    assert all(e["seq"] == e["sequence"] for e in history)  # this daemon's alias
    assert len({e["id"] for e in history}) == len(history)
    assert history[4]["payload"]["id"] == approval["id"]
    assert history[5]["payload"]["status"] == "approved"
    # Newest last; a limit keeps the newest; b reads the same history.
    assert events(a, 2) == history[-2:]
    assert events(b) == history


def test_register_agent_assigns_an_id(rt: car_runtime.CarRuntime) -> None:
    registered = json.loads(rt.host_register_agent(json.dumps({"name": "Anonymous", "kind": "builtin"})))
    assert isinstance(registered["id"], str) and registered["id"]
    assert ids(json.loads(rt.host_agents())) == [registered["id"]]


def test_set_status_takes_only_cars_status_values(rt: car_runtime.CarRuntime) -> None:
    rt.host_register_agent(agent("a1"))
    for status in ("idle", "running", "waiting_for_approval", "paused", "completed", "errored", "stopped"):
        assert json.loads(rt.host_set_status(json.dumps({"agent_id": "a1", "status": status})))["status"] == status
    with pytest.raises(RuntimeError, match="-32602"):
        rt.host_set_status(json.dumps({"agent_id": "a1", "status": "bogus"}))


def test_notify_with_a_kind_and_request_approval_without_an_agent(rt: car_runtime.CarRuntime) -> None:
    custom = json.loads(rt.host_notify(json.dumps({"kind": "build.finished", "message": "green"})))
    assert custom["kind"] == "build.finished" and custom["agent_id"] is None
    approval = json.loads(rt.host_request_approval(json.dumps({"title": "Delete cache", "required_approvals": 1})))
    assert approval["agent_id"] is None and approval["status"] == "pending"
    denied = json.loads(rt.host_resolve_approval(json.dumps({"approval_id": approval["id"], "approved": False})))
    assert denied["status"] == "denied"


def test_a_disconnected_sessions_agents_are_unregistered(daemon: Daemon) -> None:
    watcher, leaver = car_runtime.CarRuntime(), car_runtime.CarRuntime()
    try:
        watcher.host_register_agent(agent("stays"))
        leaver.host_register_agent(agent("goes"))
        assert sorted(ids(json.loads(watcher.host_agents()))) == ["goes", "stays"]
        leaver.close()
        wait_until(lambda: ids(json.loads(watcher.host_agents())) == ["stays"], "the closed session's agent to go")
        assert ("agent.unregistered", "goes") in [(e["kind"], e["agent_id"]) for e in events(watcher)]
    finally:
        watcher.close()
        leaver.close()


def test_devices(two: Any) -> None:
    a, b = two
    assert json.loads(a.host_devices()) == []
    phone = json.loads(a.host_register_device(json.dumps({
        "id": "phone-1", "name": "Phone", "platform": "ios", "capabilities": ["notify"], "status": "online",
        "metadata": {"model": "x"}})))
    assert set(phone) >= DEVICE_KEYS, phone
    assert (phone["id"], phone["platform"], phone["capabilities"]) == ("phone-1", "ios", ["notify"])
    unnamed = json.loads(a.host_register_device(json.dumps({"name": "Tablet", "platform": "android"})))
    assert isinstance(unnamed["id"], str) and unnamed["id"]
    away = json.loads(a.host_update_device(json.dumps({"device_id": "phone-1", "status": "away"})))
    assert away["status"] == "away" and away["name"] == "Phone"
    # "Only the owning session can update its device row."
    with pytest.raises(RuntimeError, match="device 'phone-1' is owned by another session"):
        b.host_update_device(json.dumps({"device_id": "phone-1", "status": "stolen"}))
    rows = {d["id"]: d for d in json.loads(b.host_devices())}
    assert set(rows) == {"phone-1", unnamed["id"]}
    assert rows["phone-1"]["status"] == "away"
    assert "device.updated" in [e["kind"] for e in events(b)]


# --- host.subscribe and the host.event stream ------------------------------------------


def test_host_subscribe_snapshot_then_events(two: Any) -> None:
    """CAR's `host_subscribe` answers the snapshot; the `host.event` notifications that follow
    reach a `register_daemon_notification_handler` callback, each one `sequence` after the
    last."""
    ui, worker = two
    worker.host_register_agent(agent("early"))
    inbox = Inbox()
    ui.register_daemon_notification_handler("host.event", inbox)
    snapshot = json.loads(ui.host_subscribe("{}"))
    assert snapshot["subscribed"] is True
    assert set(snapshot) >= {"subscribed", "agents", "devices", "approvals", "events", "identity"}, snapshot
    assert ids(snapshot["agents"]) == ["early"]
    assert snapshot["devices"] == [] and snapshot["approvals"] == []
    assert [e["kind"] for e in snapshot["events"]] == ["agent.registered"]
    assert set(snapshot["identity"]) >= {"version", "pid", "manifest_path", "manifest_role"}
    assert snapshot["identity"]["manifest_role"] in ("owner", "observer", "none")
    last = snapshot["events"][-1]["sequence"]

    worker.host_register_agent(agent("late"))
    worker.host_set_status(json.dumps({"agent_id": "late", "status": "completed"}))
    worker.host_notify(json.dumps({"message": "done"}))
    got = inbox.wait_for(lambda items: items if len(items) >= 3 else None, "three host.event notifications")
    assert [(e["kind"], e["agent_id"]) for e in got] == [
        ("agent.registered", "late"), ("agent.status_changed", "late"), ("host.notification", None)]
    assert [e["sequence"] for e in got] == [last + 1, last + 2, last + 3]
    for e in got:
        assert set(e) >= EVENT_KEYS, e
    assert got == events(worker)[-3:]  # the stream and the history agree


# --- the agent registry ----------------------------------------------------------------

# `agents.upsert` waits for a host's approval by default (test_agents_chat.py covers the
# gate); these tests need it to run at once.
NO_GATE = pytest.mark.daemon_args("--no-approvals")


def spec(id: str, **extra: Any) -> Dict[str, Any]:
    s: Dict[str, Any] = {"id": id, "name": f"Agent {id}", "command": sys.executable}
    s.update(extra)
    return s


def managed(rt: car_runtime.CarRuntime) -> Dict[str, Dict[str, Any]]:
    rows = json.loads(rt.agents_list("{}"))
    assert isinstance(rows, list), rows
    return {r["spec"]["id"]: r for r in rows}


@NO_GATE
def test_agents_upsert_list_remove(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    """Acceptance: `HostClient.agents_upsert` registers an agent, `agents_list` shows it with
    its token file, `HostClient.agents_remove` removes it."""
    host = car_runtime.HostClient(rt)
    given = spec("worker", args=["-c", "pass"], env={"PLAIN": "1"}, capabilities=["chat"],
                 method_allowlist=["memory.fact_count"], restart="on_failure", max_restarts=3)
    added = json.loads(host.agents_upsert(json.dumps(given)))
    assert set(added) >= {"spec", "status", "attached", "manifest_path", "token_path"}, added
    for key in ("id", "name", "command", "args", "env", "capabilities", "method_allowlist", "restart", "max_restarts"):
        assert added["spec"][key] == given[key], key
    assert added["status"] == "stopped" and added["attached"] is False
    token_file = Path(added["token_path"])
    assert token_file.is_file() and len(token_file.read_text().strip()) >= 32
    assert stat.S_IMODE(token_file.stat().st_mode) & 0o077 == 0, "owner-only"
    assert Path(added["manifest_path"]).is_file()

    listed = managed(rt)
    assert list(listed) == ["worker"]
    assert listed["worker"]["token_path"] == added["token_path"]
    # Stricter than CAR (docs/security.md): `env` values are shown to the host only, so the
    # operator session's list keeps the names and hides the values.
    shown = dict(listed["worker"]["spec"])
    assert shown.pop("env") == {"PLAIN": "[redacted]"}, listed["worker"]["spec"]
    assert shown == {k: v for k, v in added["spec"].items() if k != "env"}

    # Upsert replaces the spec and keeps the token.
    token = token_file.read_text()
    renamed = json.loads(host.agents_upsert(json.dumps(dict(given, name="Worker Two"))))
    assert renamed["spec"]["name"] == "Worker Two" and token_file.read_text() == token

    assert json.loads(host.agents_remove(json.dumps({"id": "worker"}))) == {"removed": True}
    assert managed(rt) == {}
    assert json.loads(host.agents_remove(json.dumps({"id": "worker"}))) == {"removed": False}  # idempotent


@NO_GATE
def test_agents_upsert_resolves_an_interpreter_and_refuses_a_relative_command(
    daemon: Daemon, rt: car_runtime.CarRuntime
) -> None:
    host = car_runtime.HostClient(rt)
    resolved = json.loads(host.agents_upsert(json.dumps({"id": "sh-agent", "name": "Sh", "interpreter": "sh"})))
    command = resolved["spec"]["command"]
    assert os.path.isabs(command) and os.access(command, os.X_OK), resolved
    with pytest.raises(car_runtime.DaemonRpcError, match="absolute"):
        host.agents_upsert(json.dumps({"id": "rel", "name": "Rel", "command": "sh"}))
    with pytest.raises(car_runtime.DaemonRpcError):
        host.agents_upsert(json.dumps(spec("a/b")))  # not file-name safe
    assert list(managed(rt)) == ["sh-agent"]


@NO_GATE
def test_agents_upsert_and_remove_need_the_host_role(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    # CAR labels both `host`; an ordinary session sending them through daemon_call is refused.
    for method, params in (("agents.upsert", spec("x")), ("agents.remove", {"id": "x"})):
        with pytest.raises(car_runtime.DaemonRpcError) as info:
            rt.daemon_call(method, json.dumps(params))
        assert info.value.code == -32603 and "host" in info.value.message, method
    assert managed(rt) == {}


@NO_GATE
def test_agent_token_binds_a_cars_runtime_and_remove_revokes_it(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    """`CAR_AGENT_ID` + `CAR_AGENT_TOKEN` (read by CAR's client when it connects) bind the
    connection to the agent: `attached` in `agents.list`, the spec's `method_allowlist`
    enforced; a wrong token, or another agent's, is refused; `agents.remove` revokes it."""
    host = car_runtime.HostClient(rt)
    bound = json.loads(host.agents_upsert(json.dumps(spec("bound", method_allowlist=["memory.fact_count"]))))
    host.agents_upsert(json.dumps(spec("other")))
    token = Path(bound["token_path"]).read_text().strip()
    rt.fact_count()  # rt's own connection is an ordinary one, made before the agent variables are set

    with client_env(daemon, CAR_AGENT_ID="bound", CAR_AGENT_TOKEN=token):
        agent_rt = car_runtime.CarRuntime()
        try:
            assert agent_rt.fact_count() == 0
            row = wait_until(lambda: managed(rt)["bound"] if managed(rt)["bound"]["attached"] else None, "attached")
            assert isinstance(row.get("session_id"), str) and row["session_id"]
            # Not in the allowlist. (CAR's typed `state_get` reads any error as "null", so the
            # refusal is observed through the generic bridge.)
            with pytest.raises(car_runtime.DaemonRpcError) as info:
                agent_rt.daemon_call("state.get", json.dumps({"key": "k"}))
            assert "method_allowlist" in info.value.message
            assert managed(rt)["other"]["attached"] is False

            assert json.loads(host.agents_remove(json.dumps({"id": "bound"}))) == {"removed": True}
            again = car_runtime.CarRuntime()
            try:
                with pytest.raises(RuntimeError):
                    again.fact_count()  # the token went with the agent
            finally:
                again.close()
        finally:
            agent_rt.close()

    for agent_id, wrong in (("other", token), ("other", "x" * 43)):
        with client_env(daemon, CAR_AGENT_ID=agent_id, CAR_AGENT_TOKEN=wrong):
            impostor = car_runtime.CarRuntime()
            try:
                with pytest.raises(RuntimeError):
                    impostor.fact_count()
            finally:
                impostor.close()
    assert managed(rt)["other"]["attached"] is False


@NO_GATE
def test_host_agents_lists_registry_agents_that_advertise_capabilities(
    daemon: Daemon, rt: car_runtime.CarRuntime
) -> None:
    # websocket-protocol-v0.48.md `host.agents`: HostAgent[] registered into host state,
    # "merged with any registry-supervised agent that advertises `capabilities` (e.g.
    # car-assistant with ["chat"]) ... This lets a host show a Chat tab by checking
    # capabilities.contains("chat")." An explicit registration for the same id wins.
    host = car_runtime.HostClient(rt)
    host.agents_upsert(json.dumps(spec("assistant", capabilities=["chat"])))
    host.agents_upsert(json.dumps(spec("plain")))  # no capabilities: not merged
    rows = {r["id"]: r for r in json.loads(rt.host_agents())}
    assert "assistant" in rows, rows
    assert "chat" in rows["assistant"]["capabilities"]
    assert "plain" not in rows


# --- the secret store -------------------------------------------------------------------

VALUE = "interop-s3cret-value-9f2c"


def secret(rt: car_runtime.CarRuntime, method: str, **params: Any) -> Any:
    return json.loads(rt.daemon_call(method, json.dumps(params)))


def activity(rt: car_runtime.CarRuntime) -> Dict[str, int]:
    counters: Dict[str, int] = json.loads(car_runtime.HostClient(rt).diagnostics_secret_store_activity("{}"))
    assert set(counters) == SECRET_COUNTERS, counters
    assert all(isinstance(v, int) and v >= 0 for v in counters.values())
    return counters


def test_secret_store_round_trip_through_daemon_call(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    """`secret.*` as CAR documents them, sent through CAR's generic bridge (its typed
    `secret_*` members do not reach the daemon: see the next test)."""
    before = activity(rt)
    assert secret(rt, "secret.available") is True
    put = secret(rt, "secret.put", key="interop_key", value=VALUE)
    assert put["ok"] is True and put["service"] == "car" and put["key"] == "interop_key", put
    secret(rt, "secret.put", service="my-app", key="token", value=VALUE + "-2")
    assert secret(rt, "secret.get", key="interop_key") == {"value": VALUE}
    assert secret(rt, "secret.get", service="my-app", key="token") == {"value": VALUE + "-2"}
    status = secret(rt, "secret.status", key="interop_key")
    assert status["exists"] is True and status["key"] == "interop_key" and status["service"] == "car"
    listed = secret(rt, "secret.list")
    assert set(listed) == {"secrets"}
    rows = {(r["service"], r["key"]): r for r in listed["secrets"]}
    assert rows[("car", "interop_key")]["exists"] is True
    assert rows[("my-app", "token")]["exists"] is True
    for shown in (status, listed):
        assert VALUE not in json.dumps(shown), "list and status never carry a value"

    deleted = secret(rt, "secret.delete", key="interop_key")
    assert deleted["ok"] is True
    assert secret(rt, "secret.status", key="interop_key")["exists"] is False
    with pytest.raises(car_runtime.DaemonRpcError):
        rt.daemon_call("secret.get", json.dumps({"key": "interop_key"}))
    assert ("car", "interop_key") not in {(r["service"], r["key"]) for r in secret(rt, "secret.list")["secrets"]}

    after = activity(rt)
    delta = {k: after[k] - before[k] for k in SECRET_COUNTERS}
    # At least one attempt per call of each kind (CAR names the counters, not what `list`
    # adds to them).
    least = {"availability_attempts": 1, "write_attempts": 2, "get_attempts": 3,
             "status_attempts": 2, "delete_attempts": 1}
    assert all(delta[k] >= n for k, n in least.items()), delta
    assert VALUE not in daemon.log_file.read_text(errors="replace"), "values are never logged"


def test_secret_store_activity_needs_the_host_role(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("diagnostics.secret_store_activity", "{}")
    assert info.value.code == -32603


def test_cars_typed_secret_members_never_reach_the_daemon(rt: car_runtime.CarRuntime) -> None:
    """CAR's 0.58.0 `CarRuntime.secret_*` members use the OS keychain of the calling
    process, even in daemon mode: they send no frame (observed with the wire tap), so the
    daemon's counters do not move. Only the read-only members are called here, so a
    developer's real keychain is never written."""
    before = activity(rt)
    for call in (lambda: rt.secret_available(), lambda: rt.secret_status("car-interop-probe-never-stored")):
        try:
            call()
        except RuntimeError:
            pass  # no keychain here (e.g. no D-Bus session): the client's own error
    assert activity(rt) == before
