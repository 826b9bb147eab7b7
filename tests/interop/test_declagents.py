"""Declarative agents, routing and standing goals through CAR's generated wrappers
(`declagents_list`, `declagents_get`, `declagents_invoke`, `declagents_route`,
`declagents_routing_stats`, `declagents_run_scenarios`, `declagents_route_split`, `goal_set`, `goal_status`,
`goal_suggest`, `goal_clear`, `HostClient.declagents_set_enabled` / `declagents_remove`) and
CAR's typed members `discovery_resolve` / `discovery_report` / `discovery_route_compose`
against this daemon. The agent is a spec file dropped into `$CAR_HOME/declagents/` (CAR
registers specs from its coder loop, which its client does not drive); its model is the
scripted OpenAI-compatible server, which always asks for an `add` tool first: the agent's
allowlist is empty, so the daemon refuses that call and the model answers from the refusal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

import car_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from scripted_openai import ScriptedModel  # noqa: E402

from conftest import Daemon
from test_agent_loop import register_scripted, scripted  # noqa: F401 (a fixture)


def call(method: Any, params: Dict[str, Any]) -> Any:
    return json.loads(method(json.dumps(params)))


def drop_spec(daemon: Daemon, spec: Dict[str, Any]) -> None:
    folder = daemon.home / "declagents"
    folder.mkdir(exist_ok=True)
    staged = folder / f".{spec['id']}.tmp"
    staged.write_text(json.dumps({"spec": spec}))
    staged.rename(folder / f"{spec['id']}.json")


def test_a_dropped_in_agent_is_listed_invoked_routed_and_disabled(
    daemon: Daemon, rt: car_runtime.CarRuntime, scripted: ScriptedModel
) -> None:
    register_scripted(daemon, scripted)
    drop_spec(daemon, {
        "id": "helper", "name": "Helper", "identity": "You answer arithmetic questions.",
        "tools": [], "model": "scripted", "max_turns": 3,
        "scenarios": [{"name": "refusal", "input": "add 2 and 3", "expect": "tool failed"}],
    })
    listed = call(rt.declagents_list, {})["agents"]
    assert [(a["id"], a["kind"], a["enabled"], a["tools"]) for a in listed] == [
        ("helper", "declarative", True, [])], listed
    got = call(rt.declagents_get, {"id": "helper"})
    assert got["registry_path"].endswith("declagents/helper.json"), got

    reply = call(rt.declagents_invoke, {"id": "helper", "input": "add 2 and 3"})
    assert reply["output"].startswith("the tool failed"), reply
    assert "unknown tool" in reply["output"], "the empty allowlist exposed a tool"
    assert reply["turns"] == 2 and "error" not in reply, reply
    stats = call(rt.declagents_routing_stats, {})
    assert stats["agents"]["helper"]["successes"] == 1, stats

    routed = call(rt.declagents_route, {"need": "answer an arithmetic question"})
    assert routed["chosen"] == "helper" and routed["invoked"] is False, routed
    assert routed["candidates"][0]["success_rate"] > 0.5, routed
    # The planner (the scripted model) answers with a tool call, not a split: the whole
    # need is the one subtask, routed like any other.
    split = call(rt.declagents_route_split, {"need": "answer an arithmetic question"})
    assert split["final_subtasks"] == ["answer an arithmetic question"], split
    assert [s["chosen"] for s in split["subtasks"]] == ["helper"], split
    plan = json.loads(rt.discovery_route_compose("answer an arithmetic question"))
    (step,) = plan["plan"]["steps"]
    assert (step["service"], step["invoke_kind"]) == ("agentdns://local/agent/helper", "declagents.invoke"), plan
    scenarios = call(rt.declagents_run_scenarios, {"id": "helper"})
    assert (scenarios["passed"], scenarios["failed"]) == (1, 0), scenarios

    host = car_runtime.HostClient(rt)
    assert call(host.declagents_set_enabled, {"id": "helper", "enabled": False}) == {"ok": True}
    with pytest.raises(car_runtime.DaemonRpcError, match="disabled"):
        call(rt.declagents_invoke, {"id": "helper", "input": "x"})
    assert call(host.declagents_remove, {"id": "helper"}) == {"removed": True}
    assert call(rt.declagents_list, {})["agents"] == []
    with pytest.raises(car_runtime.DaemonRpcError, match="no declarative agent"):
        call(rt.declagents_get, {"id": "helper"})


def test_standing_goals_round_trip(rt: car_runtime.CarRuntime, tmp_path: Path) -> None:
    stored = call(rt.goal_set, {"session_id": "chat-9", "goal": {"check": "test -f out.txt"}})
    assert stored["set"] is True and stored["goal"]["max_iterations"] == 8, stored
    status = call(rt.goal_status, {"session_id": "chat-9"})
    assert status["goal"]["status"] == "active", status
    (tmp_path / "package.json").write_text("{}")
    suggestion = call(rt.goal_suggest, {"prompt": "fix the failing tests", "cwd": str(tmp_path)})
    assert suggestion["goal"]["check"] == "npm test", suggestion
    assert suggestion["signals"] == ["project marker package.json"], suggestion
    assert call(rt.goal_clear, {}) == {"cleared": 1}
    assert call(rt.goal_status, {}) == {"goals": []}
    with pytest.raises(car_runtime.DaemonRpcError, match="check"):
        call(rt.goal_set, {"session_id": "chat-9", "check": "  "})


def test_discovery_resolves_and_learns_through_cars_members(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    drop_spec(daemon, {"id": "poet", "identity": "You write short poems about the sea."})
    found = json.loads(rt.discovery_resolve("write a poem about the sea", 3))
    assert found["count"] == 1, found
    (service,) = found["services"]
    assert (service["identifier"], service["kind"], service["protocol"]) == (
        "agentdns://local/agent/poet", "declarative", "in-daemon"), service
    reported = json.loads(rt.discovery_report("agentdns://peer/tool/search", "success"))
    assert (reported["successes"], reported["failures"]) == (1, 0), reported
    # CAR's typed member raises a plain RuntimeError carrying the daemon's -32602.
    with pytest.raises(RuntimeError, match="-32602.*recorded by declagents"):
        rt.discovery_report("agentdns://local/agent/poet", "success")
