"""Connection-level behaviour through CAR's client: discovery and auth, the generic
`daemon_call` bridge and its error mapping, `server.schema`, `capabilities.list`,
`session.init`, `connection_epoch()` and `close()`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import car_runtime
from conftest import Daemon, client_env

# Every method this daemon serves, with the role CAR's capability manifest gives it
# (car-reference/capabilities.json). `server.handshake` carries no role there.
SERVED_ROLES = {
    "capabilities.list": "operator",
    "classify": "operator",
    "detokenize": "operator",
    "embed": "operator",
    "events.count": "operator",
    "events.query": "operator",
    "events.stats": "operator",
    "agents.chat": "agent",
    "agents.chat.approve": "operator",
    "agents.chat.cancel": "operator",
    "agents.list": "operator",
    "agents.remove": "host",
    "agents.upsert": "host",
    "diagnostics.secret_store_activity": "host",
    "host.agents": "operator",
    "host.approvals": "operator",
    "host.devices": "operator",
    "host.events": "operator",
    "host.notify": "operator",
    "host.register_agent": "operator",
    "host.register_device": "operator",
    "host.request_approval": "agent",
    "host.resolve_approval": "agent",
    "host.set_status": "operator",
    "host.subscribe": "operator",
    "host.unregister_agent": "operator",
    "host.update_device": "operator",
    "infer": "agent",
    "infer.cancel": "operator",
    "infer.deadline": "operator",
    "infer_stream": "agent",
    "memory.add_fact": "agent",
    "memory.build_context": "operator",
    "memory.consolidate": "agent",
    "memory.delete": "agent",
    "memory.fact_count": "operator",
    "memory.load": "operator",
    "memory.persist": "operator",
    "memory.query": "operator",
    "models.list": "operator",
    "models.register": "operator",
    "models.remove": "host",
    "policy.list": "operator",
    "policy.register": "operator",
    "policy.unregister": "operator",
    "proposal.submit": "owner",
    "runs.complete": "owner",
    "runs.get_trace": "owner",
    "runs.list": "owner",
    "runs.start": "agent",
    "runs.subscribe": "owner",
    "secret.available": "operator",
    "secret.delete": "operator",
    "secret.get": "agent",
    "secret.list": "operator",
    "secret.put": "operator",
    "secret.status": "operator",
    "server.schema": "operator",
    "session.auth": "agent",
    "session.clear_halt": "host",
    "session.init": "operator",
    "skill.find": "operator",
    "skill.ingest": "operator",
    "skill.report": "operator",
    "skills.list": "operator",
    "state.exists": "operator",
    "state.get": "operator",
    "state.keys": "operator",
    "state.set": "operator",
    "state.snapshot": "operator",
    "tokenize": "operator",
    "tools.list": "operator",
    "tools.register": "operator",
    "tools.unregister": "operator",
    "verify": "operator",
    "agent_permissions.evaluate": "operator",
    "agent_permissions.evaluate_tool": "host",
    "agent_permissions.get": "operator",
    "agent_permissions.list_grants": "host",
    "agent_permissions.reset": "host",
    "agent_permissions.reset_tool": "host",
    "agent_permissions.revoke_grant": "host",
    "agent_permissions.set": "host",
    "agent_permissions.set_default": "host",
    "agent_permissions.set_tool": "host",
    "permission.approve": "host",
    "permission.classify": "operator",
    "permission.evaluate": "agent",
    "permission.get_tier": "operator",
    "permission.pending": "agent",
    "permission.reject": "host",
    "permission.set_tier": "host",
    "session.bind_context": "agent",
    "session.consumer.issue": "operator",
    "session.consumer.revoke": "operator",
    "session.policy.close": "operator",
    "session.policy.open": "operator",
    "supervision.decide": "operator",
    "supervision.pending": "operator",
    "supervision.subscribe": "operator",
    "supervision.unsubscribe": "operator",
}


def test_client_is_cars_published_wheel() -> None:
    """The suite proves nothing unless the client under test is CAR's 0.58.0 wheel."""
    assert car_runtime.__version__ == "0.58.0"
    assert "site-packages" in Path(car_runtime.__file__).parts
    assert car_runtime.protocol_version() == 3


def test_daemon_publishes_what_cars_client_discovers(daemon: Daemon) -> None:
    assert re.fullmatch(r"ws://127\.0\.0\.1:\d+/?", daemon.url)
    assert daemon.ready["port"] > 0
    token = daemon.token_file.read_text().strip()
    assert len(token) >= 32
    assert daemon.token_file.stat().st_mode & 0o077 == 0
    assert daemon.host_token_file.exists(), "CAR's client reads the host token for host-management calls"


def test_first_call_authenticates_through_the_token_file(rt: car_runtime.CarRuntime) -> None:
    # A fresh daemon: no facts yet. Reaching it at all proves session.auth (token read
    # from $CAR_HOME/ai.parslee.car/auth-token) and server.handshake (protocol 3) passed.
    assert rt.fact_count() == 0


def test_wrong_token_is_refused(daemon: Daemon) -> None:
    with client_env(daemon, CAR_AUTH_TOKEN="x" * 43):
        wrong = car_runtime.CarRuntime()
        try:
            with pytest.raises(RuntimeError):
                wrong.fact_count()
        finally:
            wrong.close()


def test_daemon_call_returns_result_json(rt: car_runtime.CarRuntime) -> None:
    rt.state_set("k", "7")
    assert json.loads(rt.daemon_call("state.get", json.dumps({"key": "k"}))) == 7


def test_unknown_method_is_32601(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("no.such.method", "{}")
    assert info.value.code == -32601
    assert isinstance(info.value.message, str) and info.value.message


def test_wrong_typed_param_is_32602_naming_the_field(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("state.get", json.dumps({"key": 5}))
    assert info.value.code == -32602
    assert "key" in info.value.message


def test_missing_required_param_is_32602(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("memory.query", "{}")
    assert info.value.code == -32602
    assert "query" in info.value.message


def test_unknown_params_fields_are_ignored(rt: car_runtime.CarRuntime) -> None:
    # docs/protocol-choices.md, "The contract": a newer client's extra fields never break an older daemon.
    rt.daemon_call("state.set", json.dumps({"key": "k", "value": 1, "cache_control": {"ttl": "5m"}}))
    assert rt.state_get("k") == "1"


def test_typed_member_rejection_raises_runtime_error(rt: car_runtime.CarRuntime) -> None:
    # Typed members report daemon rejections as RuntimeError (the pyi's contract);
    # an unknown run is a rejection.
    with pytest.raises(RuntimeError):
        rt.runs_complete(json.dumps({"run_id": "no-such-run", "outcome": {"status": "success"}}))


def test_capability_gated_method_without_negotiation_is_32008(rt: car_runtime.CarRuntime) -> None:
    # CAR's 0.58.0 client negotiates no optional capability, so infer.cancel /
    # infer.deadline are refused with -32008 (protocol capability mismatch).
    for method in ("infer.cancel", "infer.deadline"):
        with pytest.raises(car_runtime.DaemonRpcError) as info:
            rt.daemon_call(method, json.dumps({"id": 1}))
        assert info.value.code == -32008, method


def test_server_schema(rt: car_runtime.CarRuntime) -> None:
    doc = json.loads(rt.server_schema())
    assert set(doc) >= {"schema", "digest", "digest_algorithm", "car_version"}
    assert isinstance(doc["schema"], dict)
    assert doc["digest_algorithm"].lower().replace("-", "") == "sha256"
    assert re.fullmatch(r"(sha256:)?[0-9a-f]{64}", doc["digest"])
    assert isinstance(doc["car_version"], str) and doc["car_version"]
    # Same release, same document: the digest is stable between calls and through the
    # generic bridge.
    again = json.loads(rt.daemon_call("server.schema", "{}"))
    assert again["digest"] == doc["digest"]
    assert again["schema"] == doc["schema"]


def test_server_schema_coverage_partitions(rt: car_runtime.CarRuntime) -> None:
    # The pyi: "Within schema, coverage.rpc_results and coverage.journal_event_payloads
    # partition the source-derived inventories into exact covered and uncovered lists."
    coverage = json.loads(rt.server_schema())["schema"]["coverage"]
    for inventory in ("rpc_results", "journal_event_payloads"):
        part = coverage[inventory]
        assert isinstance(part["covered"], list) and isinstance(part["uncovered"], list)
        assert not set(part["covered"]) & set(part["uncovered"]), inventory


def test_capabilities_list(rt: car_runtime.CarRuntime) -> None:
    doc = json.loads(rt.capabilities_list("{}"))
    assert set(doc) >= {"caller_role", "count", "methods"}
    assert doc["caller_role"] == "operator"  # an unbound daemon session
    methods = doc["methods"]
    assert doc["count"] == len(methods)
    names = [m["method"] for m in methods]
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for row in methods:
        assert row["role"] in {"agent", "owner", "operator", "host"}, row
        if row["method"] in SERVED_ROLES:
            assert row["role"] == SERVED_ROLES[row["method"]], row
    assert "host" not in {m["role"] for m in methods}, "a non-host session never sees host rows"
    # Same answer through the generic bridge.
    assert json.loads(rt.daemon_call("capabilities.list", "{}")) == doc


def test_capabilities_list_unbound_session_sees_operator_rows(rt: car_runtime.CarRuntime) -> None:
    # CAR's filtering rule: "an unbound daemon session receives `operator`" rows (an
    # agent-scoped session gets agent/owner/operator, a host session host/owner/operator).
    methods = json.loads(rt.capabilities_list("{}"))["methods"]
    roles = {m["method"]: m["role"] for m in methods}
    assert set(roles.values()) == {"operator"}
    expected = sorted(m for m, role in SERVED_ROLES.items() if role == "operator")
    assert [m for m in sorted(roles) if m in SERVED_ROLES] == expected


def test_session_init(rt: car_runtime.CarRuntime) -> None:
    reply = json.loads(
        rt.daemon_call(
            "session.init",
            json.dumps(
                {
                    "tools": [{"name": "lookup", "description": "finds things", "parameters": {"type": "object"}}],
                    "policies": [{"name": "no-rm", "rule": "deny_tool", "target": "rm"}],
                }
            ),
        )
    )
    assert isinstance(reply["session_id"], str) and reply["session_id"]
    assert reply["tools_registered"] == 1
    assert reply["policies_registered"] == 1
    assert "lookup" in [t["name"] for t in json.loads(rt.list_tools())]
    assert [p["name"] for p in json.loads(rt.list_policies())] == ["no-rm"]


def test_host_subscribe(rt: car_runtime.CarRuntime) -> None:
    # websocket-protocol-v0.48.md `host.subscribe`: `{subscribed, agents, devices, approvals,
    # events, identity?}`, the current snapshot (test_host.py covers the stream after it).
    snapshot = json.loads(rt.host_subscribe("{}"))
    assert snapshot["subscribed"] is True
    for key in ("agents", "devices", "approvals", "events"):
        assert snapshot[key] == [], key  # a fresh daemon
    assert set(snapshot["identity"]) >= {"version", "pid", "manifest_path", "manifest_role"}


def test_connection_epoch_is_stable_until_close(rt: car_runtime.CarRuntime) -> None:
    first = rt.connection_epoch()
    assert isinstance(first, int)
    rt.state_set("k", "1")
    assert rt.connection_epoch() == first
    rt.close()
    # A call after close reconnects, on a new epoch.
    assert rt.fact_count() == 0
    second = rt.connection_epoch()
    assert second != first
    assert rt.connection_epoch() == second


def test_close_drops_per_connection_state(rt: car_runtime.CarRuntime) -> None:
    # docs/protocol-choices.md, "Bindings" / CAR's connection_epoch docstring: tools, policies and state belong to
    # the daemon session, so a reconnect starts without them.
    rt.state_set("k", "1")
    rt.register_tool("echo")
    rt.register_policy("no-rm", "deny_tool", "rm")
    rt.close()
    assert rt.state_get("k") == "null"
    assert "echo" not in [t["name"] for t in json.loads(rt.list_tools())]
    assert json.loads(rt.list_policies()) == []


def test_disconnect_is_close(rt: car_runtime.CarRuntime) -> None:
    first = rt.connection_epoch()
    rt.disconnect()
    assert rt.connection_epoch() != first
