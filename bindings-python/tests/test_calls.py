"""Plain calls against a real daemon through the generated typed members: state, tools,
policies, verify, events, runs, memory, skills, models, and the error projection (the
daemon's codes and data untouched, client-side failures with no invented code)."""

from __future__ import annotations

import json
import os

import pytest

import car_runtime
from car_runtime import CarRuntime, DaemonRpcError

from conftest import Daemon, action, proposal

# Read at import: the `daemon` fixture clears every CAR_* variable while a test runs.
TEST_GGUF = os.environ.get("CAR_TEST_GGUF")


def test_state_round_trip(rt: CarRuntime) -> None:
    assert rt.state_get("missing") == "null"
    assert rt.state_exists("missing") is False
    assert rt.state_set("b", json.dumps({"n": 1})) is None
    rt.state_set("a", "[1, 2]")
    rt.state_set("a", '"t"', tenant="t1")
    assert json.loads(rt.state_get("b")) == {"n": 1}
    assert rt.state_exists("b") is True
    assert rt.state_keys() == ["a", "b"]
    assert rt.state_keys(tenant="t1") == ["a"]
    assert json.loads(rt.state_snapshot()) == {"a": [1, 2], "b": {"n": 1}}
    assert json.loads(rt.state_get("a", tenant="t1")) == "t"
    # The JSON-string wrapper answers CAR's "ok".
    assert json.loads(rt.daemon_call("state.set", '{"key": "c", "value": 3}')) == "ok"


def test_tools_and_policies(rt: CarRuntime) -> None:
    rt.register_tool("read_file")
    rt.register_tool_schema(json.dumps([{"name": "write_file", "description": "writes"}]))
    tools = json.loads(rt.list_tools())
    assert [t["name"] for t in tools] == ["read_file", "write_file"]
    assert tools[1]["description"] == "writes" and tools[1]["source"] == "user_defined"
    assert rt.unregister_tool("read_file") == 1
    assert rt.unregister_tool("read_file") == 0
    rt.register_policy("no-writes", "deny_tool", target="write_file")
    rt.register_policy("needs-ok", "require_state", key="ok", value_json="true")
    policies = json.loads(rt.list_policies())
    assert [p["name"] for p in policies] == ["no-writes", "needs-ok"]
    assert all(isinstance(p["description"], str) and p["description"] for p in policies)
    assert rt.unregister_policy("needs-ok") == 1
    assert rt.unregister_policy("needs-ok") == 0
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
    queried = json.loads(rt.event_query(json.dumps({"kinds": ["tool.called"], "limit": 5})))
    assert queried["count"] == len(queried["events"]) >= 1
    assert all(e["kind"] == "tool.called" for e in queried["events"])
    run = json.loads(rt.runs_start(json.dumps({"intent": "test run", "agent_id": "py-agent"})))
    assert run["run_id"] and run["agent_id"] == "py-agent"
    outcome = {"status": "success", "summary": "all green", "tools_called": ["t"]}
    done = json.loads(rt.runs_complete(json.dumps({"run_id": run["run_id"], "outcome": outcome})))
    # CAR's {run_id, ok}, on the completed run record.
    assert (done["run_id"], done["ok"], done["status"]) == (run["run_id"], True, "completed")
    assert (done["outcome"], done["summary"]) == ("success", "all green")
    # A bare status string is still accepted.
    other = json.loads(rt.runs_start(json.dumps({"intent": "second run", "agent_id": "py-agent"})))
    done = json.loads(rt.runs_complete(json.dumps({"run_id": other["run_id"], "outcome": "failure"})))
    assert (done["run_id"], done["ok"], done["outcome"]) == (other["run_id"], True, "failure")
    with pytest.raises(DaemonRpcError) as e:
        rt.runs_complete(json.dumps({"run_id": run["run_id"], "outcome": {"summary": "no status"}}))
    assert e.value.code == -32602 and "outcome" in e.value.message


def test_memory_and_skills(rt: CarRuntime) -> None:
    assert rt.fact_count() == 0
    assert rt.add_fact("python", "the binding releases the GIL", "fact", tags=["py"]) == 1
    assert rt.add_fact("tests", "daemons run on port zero", "pattern", confidence=0.9,
                       fact_id="port-zero") == 2
    assert rt.fact_count() == 2
    rows = json.loads(rt.query_facts("GIL binding", k=1))
    assert len(rows) == 1 and rows[0]["subject"] == "python"
    assert set(rows[0]) >= {"fact_id", "subject", "body", "kind", "confidence", "tags", "source"}
    assert rows[0]["tags"] == ["py"] and rows[0]["kind"] == "fact"
    context = rt.build_context("GIL")
    assert isinstance(context, str) and "the binding releases the GIL" in context
    assert isinstance(json.loads(rt.consolidate()), dict)
    assert rt.persist_memory("py-test.json") == 2
    deleted = json.loads(rt.memory_delete(json.dumps({"id": "port-zero"})))
    assert deleted == {"id": "port-zero", "deleted": True, "kind": "pattern", "fact_count": 1}
    assert rt.load_memory("py-test.json") == 2
    assert rt.fact_count() == 2
    assert rt.ingest_skill(
        "login", "click('#login')", "web", "tester", "https://example.test/*",
        ["login", "sign in"], "logs in",
    ) >= 1
    found = json.loads(rt.find_skill("tester", "https://example.test/home", "login"))
    assert found[0]["name"] == "login" and found[0]["code"] == "click('#login')"
    assert isinstance(found[0]["match_score"], float) and found[0]["match_score"] > 0
    report = json.loads(rt.report_outcome("login", "success"))
    assert (report["success_count"], report["fail_count"], report["degraded"]) == (1, 0, False)
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


def test_rpc_errors_carry_the_daemons_code_and_data(rt: CarRuntime) -> None:
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
    # A role refusal keeps the daemon's data.reason untouched.
    with pytest.raises(DaemonRpcError) as e:
        rt.daemon_call("models.remove", '{"id": "x"}')
    assert isinstance(e.value.data, dict) and e.value.data["reason"] == "host_required"


def test_client_side_failures_have_no_invented_code(rt: CarRuntime, daemon: Daemon) -> None:
    with pytest.raises(car_runtime.InvalidArgumentError, match="params_json is not valid JSON"):
        rt.daemon_call("state.get", "{not json")
    with pytest.raises(ValueError, match="state_set: value_json is not valid JSON"):
        rt.state_set("k", "nope")
    with pytest.raises(TypeError, match="add_fact: confidence must be a number, got a string"):
        rt.add_fact("s", "b", "fact", "high")  # type: ignore[arg-type]
    with pytest.raises(car_runtime.InvalidArgumentError, match="add_fact: kind is required"):
        rt.add_fact("s", "b", None)  # type: ignore[arg-type]
    with pytest.raises(car_runtime.InvalidArgumentError, match="ingest_skill: task_keywords must be a list of strings"):
        rt.ingest_skill("n", "c", "web", "p", "u", "login", "d")  # type: ignore[arg-type]
    with pytest.raises(car_runtime.InvalidArgumentError) as bad:
        rt.query_facts("q", k=True)  # type: ignore[arg-type]
    assert str(bad.value) == "query_facts: k must be an integer, got a boolean"
    assert not hasattr(bad.value, "code")
    with pytest.raises(car_runtime.RefusedError, match="not a host-management method"):
        rt.daemon_call_host_management("state.get", '{"key": "k"}')
    with pytest.raises(car_runtime.DaemonTimeoutError) as t:
        rt.daemon_call("debug.sleep", '{"ms": 2000}', timeout=0.2)
    assert isinstance(t.value, TimeoutError) and t.value.method == "debug.sleep"
    assert t.value.after_ms == 200
    assert not hasattr(t.value, "code")
    with pytest.raises(car_runtime.DaemonConnectionError) as c:
        CarRuntime("ws://127.0.0.1:1").daemon_call("state.keys")
    assert isinstance(c.value, ConnectionError) and not hasattr(c.value, "code")
    with pytest.raises(car_runtime.HandshakeError) as h:
        CarRuntime(daemon.url, token="wrong-token").daemon_call("state.keys")
    assert h.value.code == -32603


def test_close_drops_the_connection_and_a_later_call_reconnects(rt: CarRuntime) -> None:
    rt.register_daemon_handler("host.ping", lambda p: '"pong"')
    first = rt.connection_epoch()
    assert rt.connection_epoch() == first
    rt.state_set("k", "1")
    rt.close()
    rt.close()
    # A new daemon session: a new epoch, empty per-connection state, handlers kept.
    assert rt.state_keys() == []
    second = rt.connection_epoch()
    assert second > first
    reply = json.loads(rt.daemon_call("debug.call_client", json.dumps({"method": "host.ping"})))
    assert reply == {"result": "pong"}
    with rt:
        rt.state_set("k", "2")
    assert rt.connection_epoch() > second


def test_host_management_uses_the_host_token(rt: CarRuntime) -> None:
    assert json.loads(rt.daemon_call_host_management("session.clear_halt", "{}")) == {
        "cleared": False
    }


def test_models_register_and_the_operator_unregister(rt: CarRuntime) -> None:
    assert TEST_GGUF, "CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` first"
    schema = {"id": "tiny", "name": "tiny", "provider": "local",
              "source": {"type": "local", "path": TEST_GGUF}}
    reply = json.loads(rt.register_model(json.dumps(schema)))
    assert (reply["id"], reply["registered"]) == ("tiny", True)
    assert reply["path"].endswith("registry.json") and reply["note"]
    assert reply["model"]["id"] == "tiny"
    assert [m["id"] for m in json.loads(rt.list_models())] == ["tiny"]
    # models.remove is host-only; models.unregister is the operator form.
    with pytest.raises(DaemonRpcError) as e:
        rt.daemon_call("models.remove", '{"id": "tiny"}')
    assert e.value.data["reason"] == "host_required"
    gone = json.loads(rt.models_unregister('{"id": "tiny"}'))
    assert (gone["id"], gone["unregistered"]) == ("tiny", True)
    assert json.loads(rt.list_models()) == []


def test_panics_surface_as_ordinary_exceptions() -> None:
    for where in ("call", "task"):
        with pytest.raises(car_runtime.InternalError, match="deliberate panic"):
            car_runtime._native._panic_for_tests(where)


def test_explicit_url_and_token(daemon: Daemon) -> None:
    with CarRuntime(daemon.url, token=daemon.token) as rt:
        rt.state_set("k", "1")
        assert rt.state_get("k") == "1"
