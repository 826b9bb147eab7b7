"""Multi-agent coordination from Python against a real daemon: CAR's module-level
`run_swarm` / `run_pipeline` / `run_tournament` with a per-call `agent_fn` and with the
process-wide `register_agent_runner`."""

from __future__ import annotations

import json
import threading

import pytest

import car_runtime
from car_runtime import CarRuntime

from conftest import Daemon


def spec(name: str) -> dict:
    return {"name": name, "system_prompt": "", "tools": [], "max_turns": 1, "metadata": {}}


def echo(spec_json: str, task: str) -> str:
    name = json.loads(spec_json)["name"]
    return json.dumps({"name": name, "answer": f"{name}: {task[:20]}", "turns": 1, "tool_calls": 0, "duration_ms": 1.0})


def test_run_swarm_with_a_per_call_agent_fn(daemon: Daemon) -> None:
    seen = []
    lock = threading.Lock()

    def fn(spec_json: str, task: str) -> str:
        with lock:
            seen.append(json.loads(spec_json)["name"])
        return echo(spec_json, task)

    r = json.loads(car_runtime.run_swarm("parallel", json.dumps([spec("a"), spec("b")]), "T", fn))
    assert [o["name"] for o in r["outputs"]] == ["a", "b"]
    assert r["final_summary"] == "## a\na: T\n\n## b\nb: T"
    assert sorted(seen) == ["a", "b"]


def test_the_registered_runner_serves_pipelines_and_budgets(daemon: Daemon) -> None:
    car_runtime.register_agent_runner(echo)
    r = json.loads(car_runtime.run_pipeline(json.dumps([spec("one"), spec("two")]), "Build"))
    assert r["final_answer"].startswith("two: Build")
    r = json.loads(
        car_runtime.run_swarm("sequential", json.dumps([spec("a"), spec("b"), spec("c")]), "T", None, None, json.dumps({"max_agents": 2}))
    )
    assert r["outputs"][2]["error"] == "coordination budget agent cap reached: 2 of 2 agents already started"
    # The same runner serves a CarRuntime's generated wrapper.
    with CarRuntime() as rt:
        v = json.loads(rt.multi_vote(json.dumps({"agents": [spec("x"), spec("y")], "task": "Q"})))
    assert len(v["votes"]) == 2


def test_run_tournament_and_a_runner_that_raises(daemon: Daemon) -> None:
    def fn(spec_json: str, task: str) -> str:
        name = json.loads(spec_json)["name"]
        if name.startswith("judge"):
            return json.dumps({"name": name, "answer": '{"winner": "B", "rationale": "later is better"}'})
        if name == "broken":
            raise RuntimeError("no model")
        return echo(spec_json, task)

    r = json.loads(car_runtime.run_tournament(json.dumps([spec("a"), spec("b"), spec("broken")]), json.dumps(spec("judge")), "T", fn))
    assert r["winner_name"] == "b"
    assert r["ranking"][-1] == "broken"
    assert "no model" in r["candidates"][2]["error"]


def test_bad_input_is_a_daemon_rpc_error(daemon: Daemon) -> None:
    with pytest.raises(car_runtime.DaemonRpcError, match="agents"):
        car_runtime.run_swarm("parallel", "[]", "T", echo)
    with pytest.raises(TypeError):
        car_runtime.register_agent_runner("not callable")  # type: ignore[arg-type]
