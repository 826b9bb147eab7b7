"""`car_runtime.agent_loop.run_agent` (the shared Rust loop) against a real daemon with a
scripted OpenAI-compatible server as the model: one- and two-argument tool functions, the
tool's output observed by the model, CAR's `AgentOutcome` returned."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import car_runtime
from car_runtime import agent_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from scripted_openai import ScriptedModel  # noqa: E402


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    model = ScriptedModel()
    yield model
    model.close()


def config(rt: car_runtime.CarRuntime, add: Any) -> agent_loop.AgentLoopConfig:
    return {
        "agent_name": "calc",
        "identity": "You are a calculator.",
        "tool_schemas": [{"name": "add", "description": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}}],
        "tools": {"add": add},
        "default_model": "scripted",
        "max_tokens": 64,
        "max_turns": 4,
        "runtime": rt,
    }


def test_run_agent_with_one_and_two_argument_tools(rt: car_runtime.CarRuntime, scripted: ScriptedModel) -> None:
    rt.register_model(json.dumps({"id": "scripted", "base_url": scripted.url, "model": "m"}))
    seen: List[Any] = []

    def add(params: Dict[str, Any]) -> Dict[str, Any]:
        seen.append(params)
        return {"sum": params["a"] + params["b"]}

    outcome = agent_loop.run_agent(config(rt, add), "add 2 and 3")
    assert outcome["status"] == "success", outcome
    assert outcome["summary"] == "the sum is 5"
    assert outcome["tools_called"] == ["add", "finish"]
    assert seen == [{"a": 2, "b": 3}]

    calls: List[Dict[str, Any]] = []

    def add_with_call(params: Dict[str, Any], call: Dict[str, Any]) -> Dict[str, Any]:
        calls.append(call)
        return {"sum": params["a"] + params["b"]}

    again = agent_loop.run_agent(config(rt, add_with_call), "add 2 and 3", max_turns=3)
    assert again["status"] == "success" and again["run_id"] != outcome["run_id"]
    assert calls[0]["tool"] == "add" and calls[0]["action_id"] == "call_3"


def test_a_failing_tool_is_observed_and_bad_configs_are_refused(rt: car_runtime.CarRuntime, scripted: ScriptedModel) -> None:
    rt.register_model(json.dumps({"id": "scripted", "base_url": scripted.url, "model": "m"}))

    def broken(params: Dict[str, Any]) -> Dict[str, Any]:
        raise RuntimeError("the adder is broken")

    outcome = agent_loop.run_agent(config(rt, broken), "add 2 and 3", max_turns=1)
    assert outcome["status"] == "give_up", outcome
    assert outcome["metrics"]["actions_failed"] == 1
    with pytest.raises(TypeError):
        agent_loop.run_agent(config(rt, "not callable"), "x")
    bad = config(rt, lambda p: p)
    bad["max_turns"] = "many"  # type: ignore[typeddict-item]
    with pytest.raises(car_runtime.InvalidArgumentError):
        agent_loop.run_agent(bad, "x")
