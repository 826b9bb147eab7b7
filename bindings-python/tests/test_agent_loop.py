"""`car_runtime.agent_loop.run_agent` (the shared Rust loop) against a real daemon with a
scripted OpenAI-compatible server as the model: one- and two-argument tool functions, the
tool's output observed by the model, CAR's `AgentOutcome` returned."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import car_runtime
from car_runtime import agent_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from scripted_openai import ScriptedModel  # noqa: E402

from conftest import Daemon


@pytest.fixture
def scripted(daemon: Daemon) -> Iterator[ScriptedModel]:
    """The scripted model, registered as `scripted`: a remote endpoint is registered by a
    host session (the daemon sends an endpoint's key to its URL, so only a host picks one)."""
    model = ScriptedModel()
    reply = daemon.host_call("models.register", {"id": "scripted", "base_url": model.url, "model": "m"})
    assert reply["registered"] is True, reply
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
    seen: List[Any] = []

    def add(params: Dict[str, Any]) -> Dict[str, Any]:
        seen.append(params)
        return {"sum": params["a"] + params["b"]}

    outcome = agent_loop.run_agent(config(rt, add), "add 2 and 3")
    assert outcome["status"] == "success", outcome
    assert outcome["summary"] == "the sum is 5"
    assert outcome["tools_called"] == ["add", "finish"]
    assert seen == [{"a": 2, "b": 3}]
    # The model saw the tool's output linked to its call, and the run is in its trace.
    linked = [m for m in scripted.requests[1]["messages"] if m["role"] == "tool"]
    assert linked and linked[0]["tool_call_id"] == "call_1" and json.loads(linked[0]["content"]) == {"sum": 5}
    trace = json.loads(rt.daemon_call_host_management("runs.get_trace", json.dumps({"run_id": outcome["run_id"]})))
    assert [r["record"] for r in trace["records"]] == ["started", "model_turn", "turn", "model_turn", "ended"], trace
    assert trace["records"][2]["tool"] == "add" and trace["records"][2]["output"] == {"sum": 5}
    assert trace["records"][-1]["outcome"]["summary"] == "the sum is 5"

    calls: List[Dict[str, Any]] = []

    def add_with_call(params: Dict[str, Any], call: Dict[str, Any]) -> Dict[str, Any]:
        calls.append(call)
        return {"sum": params["a"] + params["b"]}

    again = agent_loop.run_agent(config(rt, add_with_call), "add 2 and 3", max_turns=3)
    assert again["status"] == "success" and again["run_id"] != outcome["run_id"]
    assert calls[0]["tool"] == "add" and calls[0]["action_id"] == "call_3"


def test_a_failing_tool_is_observed_and_bad_configs_are_refused(rt: car_runtime.CarRuntime, scripted: ScriptedModel) -> None:

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


def test_a_tool_gets_its_budget_and_an_abort_event_the_daemons_cancel_sets(
    rt: car_runtime.CarRuntime, scripted: ScriptedModel
) -> None:
    seen: Dict[str, Any] = {}

    def slow_add(params: Dict[str, Any], *, abort: Any, timeout_ms: Any) -> Dict[str, Any]:
        seen["timeout_ms"] = timeout_ms
        # The daemon gives up after the schema's 300 ms and sends `tools.cancel`; the event
        # ends the wait (the bound only keeps a broken build from hanging the suite).
        seen["aborted"] = abort.wait(60)
        return {"sum": params["a"] + params["b"]}

    cfg = config(rt, slow_add)
    cfg["tool_schemas"] = [dict(cfg["tool_schemas"][0], timeoutMs=300)]
    outcome = agent_loop.run_agent(cfg, "add 2 and 3")
    assert seen == {"timeout_ms": 300, "aborted": True}
    assert outcome["status"] == "success", outcome
    assert outcome["summary"].startswith("the tool failed:") and "exceeded its timeout_ms (300ms)" in outcome["summary"], outcome
    assert outcome["metrics"]["actions_failed"] == 1

    # A program's own `tools.cancel` subscriber still hears the cancel.
    heard: List[str] = []
    car_runtime.register_tool_cancel_handler(heard.append)
    try:
        outcome = agent_loop.run_agent(cfg, "add 2 and 3")
    finally:
        car_runtime.unregister_tool_cancel_handler()
    assert outcome["summary"].startswith("the tool failed:"), outcome
    assert len(heard) == 1, heard


def test_a_chat_turn_answers_from_the_conversation(rt: car_runtime.CarRuntime, scripted: ScriptedModel) -> None:
    cfg = config(rt, lambda p: p)
    schemas = cfg["tool_schemas"]
    seen: List[Any] = []

    def add(params: Dict[str, Any], *, timeout_ms: Any) -> Dict[str, Any]:
        seen.append(timeout_ms)
        return {"sum": params["a"] + params["b"]}

    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": "add 2 and 3"}]
    text = agent_loop.run_chat_turn(rt, cfg, schemas, {"add": add}, {"add": 5000}, "chat-1", history)
    assert text == "the sum is 5"
    assert seen == [5000]
    roles = [m["role"] for m in scripted.requests[0]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    turn = agent_loop.run_chat_turn(rt, cfg, schemas, {"add": add}, {}, "chat-1", history, "scripted",
                                    include_run_id=True)
    assert turn["text"] == "the sum is 5" and turn["run_id"], turn
    with pytest.raises(car_runtime.InvalidArgumentError, match="messages"):
        agent_loop.run_chat_turn(rt, cfg, schemas, {"add": add}, {}, "chat-1", [{"role": "assistant", "content": "x"}])
    with pytest.raises(TypeError):
        agent_loop.run_chat_turn(rt, cfg, schemas, {"add": add}, {}, 7, history)  # type: ignore[arg-type]


def test_main_runs_a_task_and_prints_the_answer_or_the_outcome(
    rt: car_runtime.CarRuntime, scripted: ScriptedModel, capsys: pytest.CaptureFixture[str]
) -> None:
    def add(params: Dict[str, Any]) -> Dict[str, Any]:
        return {"sum": params["a"] + params["b"]}

    assert agent_loop.main(config(rt, add), ["--task", "add 2 and 3"]) == 0
    assert capsys.readouterr().out == "the sum is 5\n"
    assert agent_loop.main(config(rt, add), ["--task", "add 2 and 3", "--json", "--max-turns", "3"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "success" and outcome["tools_called"] == ["add", "finish"]
    # One turn is not enough to finish: give_up, exit 1.
    assert agent_loop.main(config(rt, add), ["--task", "add 2 and 3", "--max-turns", "1"]) == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        agent_loop.main(config(rt, add), [])
    assert exit_info.value.code == 2


def test_serve_chat_answers_each_session_with_its_own_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_chat import Chat

    home = tmp_path / "car-home"
    home.mkdir()
    d = Daemon(home, extra_env={"CAR_NO_APPROVALS": "1"}).start()
    for k in list(os.environ):
        if k.startswith("CAR_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CAR_HOME", str(home))
    model = ScriptedModel(answer_as_text=True)
    chat = Chat(monkeypatch)
    stop = None
    try:
        d.host_call("models.register", {"id": "scripted", "base_url": model.url, "model": "m"})
        cfg = config(chat.agent, lambda p: {"sum": p["a"] + p["b"]})
        cfg["agent_id"] = "py-chat-agent"
        stop = agent_loop.serve_chat(cfg)
        chat.attach()
        for session, prompt in [("s1", "add 2 and 3"), ("s2", "add them"), ("s1", "again")]:
            assert chat.chat(session, prompt)["accepted"] is True
            events = chat.turn(session)
            assert [(e["kind"], e.get("delta")) for e in events] == [("token", "the sum is 5"), ("done", None)], events
        # Each session kept its own conversation: s1's second turn carried its first.
        last = [m for m in model.requests[-2]["messages"] if m["role"] in ("user", "assistant")]
        assert [m["content"] for m in last] == ["add 2 and 3", "the sum is 5", "again"], last
        with pytest.raises(ValueError):
            agent_loop.serve_chat(config(chat.agent, lambda p: p), history_turns=0)
    finally:
        if stop is not None:
            stop()
        chat.close()
        model.close()
        d.stop()
