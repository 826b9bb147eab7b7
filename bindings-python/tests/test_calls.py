"""Plain calls against a real daemon: state, tools, policies, verify, events, runs, memory,
skills, and acceptance 5 (honest errors)."""

from __future__ import annotations

import json

import pytest

import car_runtime
from car_runtime import CarRuntime, DaemonRpcError

from conftest import Daemon, action, proposal


def test_state_round_trip(rt: CarRuntime) -> None:
    assert rt.state_get("missing") == "null"
    assert rt.state_exists("missing") is False
    rt.state_set("b", json.dumps({"n": 1}))
    rt.state_set("a", "[1, 2]")
    rt.state_set("a", '"t"', tenant="t1")
    assert json.loads(rt.state_get("b")) == {"n": 1}
    assert rt.state_exists("b") is True
    assert rt.state_keys() == ["a", "b"]
    assert rt.state_keys(tenant="t1") == ["a"]
    assert json.loads(rt.state_snapshot()) == {"a": [1, 2], "b": {"n": 1}}
    assert json.loads(rt.state_get("a", tenant="t1")) == "t"


def test_tools_and_policies(rt: CarRuntime) -> None:
    rt.register_tool("read_file")
    rt.register_tool_schema(json.dumps([{"name": "write_file", "description": "writes"}]))
    names = [t["name"] for t in json.loads(rt.list_tools())]
    assert names == ["read_file", "write_file"]
    assert rt.unregister_tool("read_file") == 1
    assert rt.unregister_tool("read_file") == 0
    rt.register_policy("no-writes", "deny_tool", target="write_file")
    rt.register_policy("needs-ok", "require_state", key="ok", value_json="true")
    assert [p["name"] for p in json.loads(rt.list_policies())] == ["needs-ok", "no-writes"]
    assert rt.unregister_policy("needs-ok") == 1
    verdict = json.loads(rt.verify_proposal(proposal(action("w", "write_file"))))
    assert verdict["valid"] is False
    assert any(i["category"] for i in verdict["issues"])


def test_verify_events_and_runs(rt: CarRuntime) -> None:
    rt.register_tool("t")
    verdict = json.loads(
        rt.verify_proposal(proposal(action("a", "t"), action("b", "t", dependencies=["a"])))
    )
    assert verdict["valid"] is True
    assert verdict["execution_levels"] == [["a"], ["b"]]
    before = rt.event_count()
    rt.execute_proposal(proposal(action("a", "t")), lambda call_json: "{}")
    assert rt.event_count() > before
    events = json.loads(rt.event_query(json.dumps({"kinds": ["tool.called"], "limit": 5})))
    assert events and all(e["kind"] == "tool.called" for e in events)
    run = json.loads(rt.runs_start(json.dumps({"intent": "test run"})))
    done = json.loads(rt.runs_complete(json.dumps({"run_id": run["run_id"], "outcome": "success"})))
    assert done


def test_memory_and_skills(rt: CarRuntime) -> None:
    assert rt.fact_count() == 0
    assert rt.add_fact("python", "the binding releases the GIL", "fact", tags=["py"]) == 1
    assert rt.add_fact("tests", "daemons run on port zero", "pattern", confidence=0.9) == 2
    assert rt.fact_count() == 2
    rows = json.loads(rt.query_facts("GIL binding", k=1))
    assert len(rows) == 1 and rows[0]["subject"] == "python"
    assert set(rows[0]) >= {"fact_id", "subject", "body", "kind", "confidence", "tags", "source"}
    context = rt.build_context("GIL")
    assert isinstance(context, str) and "GIL" in context
    assert isinstance(json.loads(rt.consolidate()), dict)
    assert rt.persist_memory("py-test.json") == 2
    assert rt.load_memory("py-test.json") >= 0
    assert rt.ingest_skill(
        "login", "click('#login')", "web", "tester", "https://example.test/*",
        ["login", "sign in"], "logs in",
    ) >= 1
    found = json.loads(rt.find_skill("tester", "https://example.test/home", "login"))
    assert found[0]["name"] == "login" and "code" in found[0] and "match_score" in found[0]
    assert rt.find_skill("nobody", "https://other.test/", "bake bread") == "null"
    report = json.loads(rt.report_outcome("login", "success"))
    assert report["success_count"] == 1 and report["fail_count"] == 0
    assert [s["name"] for s in json.loads(rt.list_skills())] == ["login"]


def test_memory_namespace_applies_to_later_runtimes(daemon: Daemon) -> None:
    car_runtime.set_memory_namespace("team-a")
    assert car_runtime.get_memory_namespace() == "team-a"
    with CarRuntime() as a:
        a.add_fact("ns", "only in team-a", "fact")
        assert a.fact_count() == 1
    car_runtime.set_memory_namespace(None)
    with CarRuntime() as shared, CarRuntime(memory_namespace="team-a") as again:
        assert shared.fact_count() == 0
        assert again.fact_count() == 1


def test_rpc_errors_carry_the_daemons_code(rt: CarRuntime) -> None:
    with pytest.raises(DaemonRpcError) as e:
        rt.daemon_call("no.such.method")
    assert e.value.code == -32601
    assert "no.such.method" in e.value.message
    with pytest.raises(DaemonRpcError) as e:
        rt.daemon_call("state.get", "{}")
    assert e.value.code == -32602
    assert "key" in e.value.message
    with pytest.raises(DaemonRpcError) as e:
        rt.register_policy("p", "no_such_rule")
    assert e.value.code == -32602 and "rule" in e.value.message
    with pytest.raises(DaemonRpcError) as e:
        rt.daemon_call("proposal.submit", "{}")
    assert e.value.code == -32602 and "proposal" in e.value.message


def test_client_side_failures_have_no_invented_code(rt: CarRuntime, daemon: Daemon) -> None:
    with pytest.raises(ValueError, match="params_json is not valid JSON"):
        rt.daemon_call("state.get", "{not json")
    with pytest.raises(ValueError, match="value_json is not valid JSON"):
        rt.state_set("k", "nope")
    with pytest.raises(car_runtime.RefusedError, match="not a host-management method"):
        rt.daemon_call_host_management("state.get", '{"key": "k"}')
    with pytest.raises(car_runtime.DaemonTimeoutError) as t:
        rt.daemon_call("debug.sleep", '{"ms": 2000}', timeout=0.2)
    assert isinstance(t.value, TimeoutError) and t.value.method == "debug.sleep"
    assert not hasattr(t.value, "code")
    with pytest.raises(car_runtime.DaemonConnectionError) as c:
        CarRuntime("ws://127.0.0.1:1").daemon_call("state.keys")
    assert isinstance(c.value, ConnectionError) and not hasattr(c.value, "code")
    with pytest.raises(car_runtime.HandshakeError):
        CarRuntime(daemon.url, token="wrong-token").daemon_call("state.keys")
    rt.close()
    rt.close()
    with pytest.raises(car_runtime.ClientClosedError):
        rt.state_keys()


def test_host_management_uses_the_host_token(rt: CarRuntime) -> None:
    assert json.loads(rt.daemon_call_host_management("session.clear_halt", "{}")) is not None


def test_panics_surface_as_ordinary_exceptions() -> None:
    for where in ("call", "task"):
        with pytest.raises(car_runtime.InternalError, match="deliberate panic"):
            car_runtime._native._panic_for_tests(where)


def test_explicit_url_and_token(daemon: Daemon) -> None:
    with CarRuntime(daemon.url, token=daemon.token) as rt:
        rt.state_set("k", "1")
        assert rt.state_get("k") == "1"
