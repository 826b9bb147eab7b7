"""`car_runtime.agent_loop.run_agent` (the shared Rust loop) against a real daemon with a
scripted OpenAI-compatible server as the model: one- and two-argument tool functions, the
tool's output observed by the model, CAR's `AgentOutcome` returned."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Dict, Iterator, List

import pytest

import car_runtime
from car_runtime import agent_loop


class ScriptedModel:
    """Streams `add(2, 3)` first, then `finish` with an answer built from the tool result."""

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                model.requests.append(body)
                results = [m for m in body["messages"] if m["role"] == "tool"]
                if results:
                    total = json.loads(results[-1]["content"])["sum"]
                    name, args = "finish", {"answer": f"the sum is {total}"}
                else:
                    name, args = "add", {"a": 2, "b": 3}
                call = {"index": 0, "id": f"call_{len(model.requests)}", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)}}
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in (
                    {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                ):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    model = ScriptedModel()
    yield model
    model.server.shutdown()
    model.server.server_close()


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
