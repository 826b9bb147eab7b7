"""Acceptance 2 and 3 (callback half): tool functions, process-wide handlers, reverse calls
and notifications, run on Python-owned worker threads."""

from __future__ import annotations

import json
import threading
from typing import Dict, List

import pytest

import car_runtime
from car_runtime import CarRuntime, DaemonRpcError, TerminalToolError

from conftest import action, proposal


def results(reply: str) -> Dict[str, Dict[str, object]]:
    return {r["action_id"]: r for r in json.loads(reply)["results"]}


def test_one_and_two_argument_tool_functions(rt: CarRuntime) -> None:
    calls: List[Dict[str, object]] = []

    def one(call_json: str) -> str:
        call = json.loads(call_json)
        calls.append(call)
        return json.dumps({"doubled": call["params"]["x"] * 2})

    def two(tool: str, params_json: str) -> str:
        return json.dumps({"tool": tool, "x": json.loads(params_json)["x"]})

    r1 = results(rt.execute_proposal(proposal(action("a", "double", {"x": 21})), one))
    assert r1["a"]["status"] == "succeeded" and r1["a"]["output"] == {"doubled": 42}
    assert set(calls[0]) == {"tool", "params", "action_id", "request_id", "timeout_ms",
                             "session_id", "attempt"}
    assert calls[0]["action_id"] == "a" and calls[0]["attempt"] == 1
    r2 = results(rt.execute_proposal(proposal(action("b", "echo", {"x": 5})), two))
    assert r2["b"]["output"] == {"tool": "echo", "x": 5}

    class Tools:
        def handle(self, tool: str, params_json: str) -> str:
            return json.dumps(tool)

    r3 = results(rt.execute_proposal(proposal(action("c", "bound")), Tools().handle))
    assert r3["c"]["output"] == "bound"
    with pytest.raises(TypeError, match="one argument"):
        rt.execute_proposal(proposal(action("d", "t")), lambda a, b, c: "{}")


def test_an_ordinary_exception_fails_only_its_action(rt: CarRuntime) -> None:
    def tool(tool: str, params_json: str) -> str:
        if tool == "flaky":
            raise ValueError("disk is full")
        return '"ok"'

    reply = rt.execute_proposal(
        proposal(
            action("bad", "flaky", failure_behavior="skip"),
            action("good", "fine"),
            action("after", "fine", dependencies=["good"]),
        ),
        tool,
    )
    r = results(reply)
    assert r["bad"]["status"] == "failed"
    assert "ValueError: disk is full" in json.dumps(r["bad"]["error"])
    assert r["bad"]["terminal"] is False
    assert r["good"]["status"] == "succeeded" and r["after"]["status"] == "succeeded"
    # The session is not halted: the next proposal runs.
    again = results(rt.execute_proposal(proposal(action("next", "fine")), tool))
    assert again["next"]["status"] == "succeeded"


def test_terminal_tool_error_halts_the_session(rt: CarRuntime) -> None:
    attempts: List[int] = []

    def tool(call_json: str) -> str:
        call = json.loads(call_json)
        if call["tool"] == "journal":
            attempts.append(call["attempt"])
            raise TerminalToolError("receipt journal is unavailable")
        return '"ok"'

    rt.state_set("before", "1")
    reply = rt.execute_proposal(
        proposal(
            {"id": "w", "type": "state_write", "key": "written", "value": 1},
            action("j", "journal", dependencies=["w"], failure_behavior="retry", max_retries=3),
        ),
        tool,
    )
    r = results(reply)
    assert attempts == [1], "a terminal error stops retries"
    assert r["j"]["status"] == "failed" and r["j"]["terminal"] is True
    assert rt.state_exists("written") is False, "the proposal's writes are rolled back"
    halted = results(rt.execute_proposal(proposal(action("x", "other")), tool))
    assert halted["x"]["status"] == "rejected"
    # The halt is per connection: a reconnect (or session.clear_halt as host) lifts it.
    rt.disconnect()
    resumed = results(rt.execute_proposal(proposal(action("y", "other")), tool))
    assert resumed["y"]["status"] == "succeeded"


def test_callbacks_run_on_python_owned_threads_and_may_call_back(rt: CarRuntime) -> None:
    seen: List[str] = []
    rt.add_fact("callbacks", "a tool may call back into the runtime", "fact")

    def tool(call_json: str) -> str:
        seen.append(threading.current_thread().name)
        assert threading.current_thread() is not threading.main_thread()
        return json.dumps({"facts": rt.fact_count(), "keys": rt.state_keys()})

    r = results(rt.execute_proposal(proposal(action("a", "count")), tool))
    assert r["a"]["output"] == {"facts": 1, "keys": []}
    assert seen and seen[0].startswith("car-runtime-callback-")


def test_parallel_tool_calls_run_concurrently(rt: CarRuntime) -> None:
    barrier = threading.Barrier(3, timeout=10)

    def tool(call_json: str) -> str:
        barrier.wait()  # deadlocks unless all three run at once
        return '"met"'

    reply = rt.execute_proposal(
        proposal(action("a", "t"), action("b", "t"), action("c", "t")), tool
    )
    assert {r["status"] for r in results(reply).values()} == {"succeeded"}


def test_process_wide_tool_handler_serves_submit_proposal(rt: CarRuntime) -> None:
    with pytest.raises(car_runtime.RefusedError, match="no tool handler registered"):
        rt.submit_proposal(proposal(action("a", "t")))
    rt.register_tool("t")
    car_runtime.register_tool_handler(
        lambda call_json: json.dumps({"via": "process", "tool": json.loads(call_json)["tool"]})
    )
    with CarRuntime() as other:
        other.register_tool("t")
        for runtime in (rt, other):
            r = results(runtime.submit_proposal(proposal(action("a", "t"))))
            assert r["a"]["output"] == {"via": "process", "tool": "t"}
    car_runtime.unregister_tool_handler()
    with pytest.raises(car_runtime.RefusedError):
        rt.submit_proposal(proposal(action("a", "t")))


def test_tool_cancel_handler_gets_the_request_id(rt: CarRuntime) -> None:
    cancelled: List[str] = []
    got_cancel = threading.Event()
    request_ids: List[str] = []

    def on_cancel(request_id: str) -> None:
        cancelled.append(request_id)
        got_cancel.set()

    def slow(call_json: str) -> str:
        request_ids.append(json.loads(call_json)["request_id"])
        got_cancel.wait(10)
        return '"late"'

    car_runtime.register_tool_cancel_handler(on_cancel)
    car_runtime.register_tool_handler(slow)
    rt.register_tool("slow")
    reply = rt.submit_proposal(
        proposal(action("s", "slow", timeout_ms=200, failure_behavior="skip"))
    )
    assert results(reply)["s"]["status"] == "failed"
    assert got_cancel.wait(10)
    assert cancelled == request_ids


def test_daemon_handlers_and_notifications(rt: CarRuntime) -> None:
    rt.register_daemon_handler("host.ask", lambda p: json.dumps({"answer": json.loads(p)["q"] * 2}))
    reply = json.loads(rt.daemon_call(
        "debug.call_client", json.dumps({"method": "host.ask", "params": {"q": 21}})
    ))
    assert reply == {"result": {"answer": 42}}

    def refuse(params_json: str) -> str:
        raise DaemonRpcError(-32007, "content refused", {"why": "test"})

    rt.register_daemon_handler("host.refuse", refuse)
    reply = json.loads(rt.daemon_call("debug.call_client", json.dumps({"method": "host.refuse"})))
    assert reply["error"]["code"] == -32007 and reply["error"]["data"] == {"why": "test"}
    rt.unregister_daemon_handler("host.ask")
    reply = json.loads(rt.daemon_call("debug.call_client", json.dumps({"method": "host.ask"})))
    assert reply["error"]["code"] == -32601

    got: List[int] = []
    done = threading.Event()

    def on_note(params_json: str) -> None:
        got.append(json.loads(params_json)["n"])
        if len(got) == 20:
            done.set()

    rt.register_daemon_notification_handler("test.note", on_note)
    for n in range(20):
        rt.daemon_call("debug.notify_client", json.dumps({"method": "test.note", "params": {"n": n}}))
    assert done.wait(10)
    assert got == list(range(20)), "notifications arrive in order"
    rt.unregister_daemon_notification_handler("test.note")


def test_handlers_survive_reconnect(rt: CarRuntime) -> None:
    rt.register_daemon_handler("host.ping", lambda p: '"pong"')
    rt.disconnect()
    reply = json.loads(rt.daemon_call("debug.call_client", json.dumps({"method": "host.ping"})))
    assert reply == {"result": "pong"}


def test_bad_callback_results_fail_the_action(rt: CarRuntime) -> None:
    r = results(rt.execute_proposal(
        proposal(action("a", "t", failure_behavior="skip"), action("b", "u", failure_behavior="skip")),
        lambda tool, params: {"not": "a string"} if tool == "t" else "{broken",  # type: ignore
    ))
    assert "expected a JSON string" in json.dumps(r["a"]["error"])
    assert "invalid JSON" in json.dumps(r["b"]["error"])
