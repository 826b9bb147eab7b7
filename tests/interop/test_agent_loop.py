"""CAR's own agent loop (`car_runtime.agent_loop.run_agent` from the 0.58.0 wheel),
unmodified, against this daemon with a scripted OpenAI-compatible server as the model: the
model asks for a tool, the tool runs through `tools.execute`, the model's answer is built
from the tool's output, and the run with its model turns and tool call is in the trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from websockets.sync.client import connect

import car_runtime
from car_runtime import agent_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from scripted_openai import ScriptedModel  # noqa: E402

from conftest import Daemon


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    model = ScriptedModel()
    try:
        yield model
    finally:
        model.close()


def host_call(daemon: Daemon, method: str, params: Dict[str, Any]) -> Any:
    """One call on a raw host-management session (CAR's client does not read runs.*)."""
    with connect(daemon.url) as ws:
        token = daemon.host_token_file.read_text().strip()
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.auth", "params": {"host_token": token}}))
        assert json.loads(ws.recv())["result"]["ok"] is True
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == 2:
                return msg["result"]


def register_scripted(daemon: Daemon, scripted: ScriptedModel) -> None:
    """Registers the scripted provider as model `scripted`. A remote endpoint is registered
    by a host session (the daemon sends a remote model's key to its URL, so only the host
    chooses one); CAR's client has no host path for `models.register`, so the user's host
    does it, as CarHost would, before CAR's agent loop runs."""
    reply = host_call(daemon, "models.register", {"schema": {
        "id": "scripted", "name": "scripted", "provider": "openai",
        "source": {"type": "remote_api", "endpoint": scripted.url}}})
    assert reply["registered"] is True, reply


def test_run_agent_completes_a_two_tool_task(
    daemon: Daemon, rt: car_runtime.CarRuntime, scripted: ScriptedModel
) -> None:
    register_scripted(daemon, scripted)
    calls: List[Dict[str, Any]] = []

    def add(params: Dict[str, Any]) -> Dict[str, Any]:
        calls.append(params)
        return {"sum": params["a"] + params["b"]}

    config: Dict[str, Any] = {
        "agent_name": "calc",
        "identity": "You are a calculator.",
        "target_outcome": "the sum",
        "tool_schemas": [{"name": "add", "description": "add two numbers", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}}],
        "tools": {"add": add},
        "default_model": "scripted",
        "max_tokens": 64,
        "max_turns": 4,
        "runtime": rt,
    }
    outcome = agent_loop.run_agent(config, "add 2 and 3")  # type: ignore[arg-type]

    assert outcome["status"] == "success", outcome
    assert calls == [{"a": 2, "b": 3}]  # the tool ran, through tools.execute
    assert outcome["summary"] == "the sum is 5"  # the answer came from the tool's output
    assert outcome["tools_called"] == ["add", "finish"]
    # The model saw its tool in OpenAI's format and the tool's result linked to its call.
    first, second = scripted.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["add", "finish"]
    linked = [m for m in second["messages"] if m["role"] == "tool"]
    assert linked and linked[0]["tool_call_id"] == "call_1"

    trace = host_call(daemon, "runs.get_trace", {"run_id": outcome["run_id"]})
    kinds = [r["record"] for r in trace["records"]]
    assert kinds[0] == "started" and kinds[-1] == "ended", kinds
    assert trace["records"][-1]["outcome"]["status"] == "success", trace
    model_turns = [r for r in trace["records"] if r["record"] == "model_turn"]
    assert [t["requested_tool_calls"][0]["name"] for t in model_turns] == ["add", "finish"]
    tool_turns = [r for r in trace["records"] if r["record"] == "turn"]
    assert [(t["tool"], t["status"]) for t in tool_turns] == [("add", "succeeded"), ("finish", "succeeded")]
    assert tool_turns[0]["output"] == {"sum": 5}
    # Model turn, then the tool call it asked for, turn after turn.
    order = [(r["record"], r.get("tool") or r.get("requested_tool_calls", [{}])[0].get("name"))
             for r in trace["records"] if r["record"] in ("model_turn", "turn")]
    assert order == [("model_turn", "add"), ("turn", "add"), ("model_turn", "finish"), ("turn", "finish")]


def test_run_chat_turn_answers_a_conversation(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    """CAR's `run_chat_turn` (the turn its `serve_chat` runs per message) on this daemon:
    the tool runs, and the model's text reply after its result is the answer."""
    scripted = ScriptedModel(answer_as_text=True)
    try:
        _chat_turn(daemon, rt, scripted)
    finally:
        scripted.close()


def _chat_turn(daemon: Daemon, rt: car_runtime.CarRuntime, scripted: ScriptedModel) -> None:
    register_scripted(daemon, scripted)
    schemas = [{"name": "add", "description": "add two numbers", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"]}}]
    config: Dict[str, Any] = {"agent_name": "calc", "identity": "You are a calculator.",
                              "tool_schemas": schemas, "default_model": "scripted",
                              "max_tokens": 64, "max_turns": 4, "runtime": rt}
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": "add 2 and 3"}]
    result = agent_loop.run_chat_turn(  # type: ignore[call-overload]
        rt, config, schemas, {"add": lambda p: {"sum": p["a"] + p["b"]}}, {}, "chat-1", history,
        include_run_id=True)
    assert result["text"] == "the sum is 5", result
    assert result["run_id"], result
    roles = [m["role"] for m in scripted.requests[0]["messages"]]
    assert roles[-3:] == ["user", "assistant", "user"], roles
