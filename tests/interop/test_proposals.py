"""`verify`, `proposal.submit` and the `tools.execute` reverse call through CAR's client:
`verify_proposal`, `execute_proposal` (a per-call tool function), `submit_proposal` with
`car_runtime.register_tool_handler`, `TerminalToolError`, and the event log the execution
leaves (`event_count`, `event_query`, `events.stats`).

Result shapes are the agent-IR spec's (`ProposalResult {proposal_id, results[], cost}`,
verification `{valid, issues[], simulated_state, execution_levels, conflicts}`); the tool
function receives CAR's `call_json` `{tool, params, action_id, request_id, timeout_ms,
session_id, attempt}`."""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, List

import pytest

import car_runtime
from conftest import action, proposal

ACTION_RESULT_KEYS = {"action_id", "status", "output", "error", "state_changes", "duration_ms", "timestamp"}
COST_KEYS = {"tool_calls", "actions_executed", "actions_rejected", "actions_skipped", "total_duration_ms", "retries"}
STATUSES = {"proposed", "validated", "rejected", "executing", "succeeded", "failed", "skipped"}
TIERS = {"decision_procedure", "heuristic", "sampled"}


class Recorder:
    """A tool function that records each call_json and echoes the parameters back."""

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []

    def __call__(self, call_json: str) -> str:
        call = json.loads(call_json)
        self.calls.append(call)
        return json.dumps({"echoed": call["params"], "tool": call["tool"]})


ECHO_SCHEMA = {
    "name": "echo",
    "description": "echoes its parameters",
    "parameters": {
        "type": "object",
        "properties": {"x": {"type": "number"}, "s": {"type": "string"}},
        "required": ["x"],
    },
}


# --- verify ------------------------------------------------------------------------------


def test_verify_valid_proposal(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool_schema(json.dumps(ECHO_SCHEMA))
    result = json.loads(rt.verify_proposal(proposal(action("a", "echo", {"x": 1}))))
    assert result["valid"] is True
    assert [i for i in result["issues"] if i["severity"] == "error"] == []
    assert isinstance(result["simulated_state"], dict)
    assert result["execution_levels"] == [["a"]]
    assert result["conflicts"] == []


def test_verify_reports_an_unknown_tool(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool_schema(json.dumps(ECHO_SCHEMA))
    result = json.loads(rt.verify_proposal(proposal(action("g", "ghost", {}))))
    assert result["valid"] is False
    errors = [i for i in result["issues"] if i["severity"] == "error"]
    assert [i["action_id"] for i in errors] == ["g"]
    for issue in result["issues"]:
        assert set(issue) >= {"action_id", "severity", "message", "tier"}
        assert issue["severity"] in {"error", "warning", "info"}
        assert issue["tier"] in TIERS
        assert isinstance(issue["message"], str) and issue["message"]


def test_verify_reports_a_schema_violation(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool_schema(json.dumps(ECHO_SCHEMA))
    wrong_type = json.loads(rt.verify_proposal(proposal(action("t", "echo", {"x": "not a number"}))))
    assert wrong_type["valid"] is False
    assert "t" in {i["action_id"] for i in wrong_type["issues"] if i["severity"] == "error"}
    missing = json.loads(rt.verify_proposal(proposal(action("m", "echo", {"s": "no x"}))))
    assert missing["valid"] is False
    assert "m" in {i["action_id"] for i in missing["issues"] if i["severity"] == "error"}


def test_verify_layers_and_write_conflicts(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("deploy")
    result = json.loads(
        rt.verify_proposal(
            proposal(
                action("a1", "deploy", {}, expected_effects={"deployed": True}),
                action("a2", "deploy", {}, expected_effects={"deployed": True}),
            )
        )
    )
    assert [sorted(level) for level in result["execution_levels"]] == [["a1", "a2"]]
    assert [sorted(c[:2]) + c[2:] for c in result["conflicts"]] == [["a1", "a2", "deployed"]]
    assert result["simulated_state"] == {"deployed": True}


def test_verify_calls_no_tool(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    tool = Recorder()
    car_runtime.register_tool_handler(tool)
    json.loads(rt.verify_proposal(proposal(action("a", "echo", {"x": 1}))))
    assert tool.calls == []


# --- execute_proposal / submit_proposal --------------------------------------------------


def test_execute_proposal_runs_the_tool_function(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    tool = Recorder()
    result = json.loads(rt.execute_proposal(proposal(action("a", "echo", {"x": 1, "s": "t"})), tool))

    assert len(tool.calls) == 1
    call = tool.calls[0]
    assert call["tool"] == "echo"
    assert call["params"] == {"x": 1, "s": "t"}
    assert call["action_id"] == "a"
    assert isinstance(call["request_id"], str) and call["request_id"]
    assert call["attempt"] == 1
    assert call["timeout_ms"] is None

    assert isinstance(result["proposal_id"], str) and result["proposal_id"]
    (r,) = result["results"]
    assert set(r) >= ACTION_RESULT_KEYS
    assert r["action_id"] == "a"
    assert r["status"] == "succeeded"
    assert r["output"] == {"echoed": {"x": 1, "s": "t"}, "tool": "echo"}
    assert r["error"] is None
    assert set(result["cost"]) >= COST_KEYS
    assert result["cost"]["tool_calls"] == 1
    assert result["cost"]["actions_executed"] == 1
    assert result["cost"]["actions_rejected"] == 0
    assert result["cost"]["actions_skipped"] == 0


def test_execute_proposal_keeps_the_proposal_id(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    result = json.loads(rt.execute_proposal(proposal(action("a", "echo"), id="abc123def456"), Recorder()))
    assert result["proposal_id"] == "abc123def456"


def test_execute_proposal_forwards_the_action_budget(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    tool = Recorder()
    rt.execute_proposal(proposal(action("a", "echo", {"x": 2}, timeout_ms=5000)), tool)
    assert tool.calls[0]["timeout_ms"] == 5000


def test_execute_proposal_runs_every_action(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    tool = Recorder()
    result = json.loads(
        rt.execute_proposal(proposal(action("a", "echo", {"x": 1}), action("b", "echo", {"x": 2})), tool)
    )
    assert sorted(c["params"]["x"] for c in tool.calls) == [1, 2]
    assert len({c["request_id"] for c in tool.calls}) == 2  # one routing id per callback
    assert {r["action_id"]: r["status"] for r in result["results"]} == {"a": "succeeded", "b": "succeeded"}
    assert result["cost"]["tool_calls"] == 2


def test_an_unregistered_tool_is_rejected_without_dispatch(rt: car_runtime.CarRuntime) -> None:
    tool = Recorder()
    result = json.loads(rt.execute_proposal(proposal(action("a", "ghost")), tool))
    assert tool.calls == []
    assert [r["status"] for r in result["results"]] == ["rejected"]
    assert result["cost"]["actions_rejected"] == 1
    assert result["cost"]["tool_calls"] == 0


def test_a_failing_tool_function_fails_the_action(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("boom")

    def tool_fn(call_json: str) -> str:
        raise ValueError("the disk is on fire")

    result = json.loads(rt.execute_proposal(proposal(action("a", "boom")), tool_fn))
    (r,) = result["results"]
    assert r["status"] == "failed"
    assert isinstance(r["error"], str) and r["error"]
    assert result["cost"]["actions_executed"] == 1


def test_submit_proposal_uses_the_registered_handler(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    handler = Recorder()
    car_runtime.register_tool_handler(handler)
    result = json.loads(rt.submit_proposal(proposal(action("a", "echo", {"x": 3}))))
    assert [c["params"] for c in handler.calls] == [{"x": 3}]
    assert handler.calls[0]["action_id"] == "a"
    (r,) = result["results"]
    assert r["status"] == "succeeded"
    assert r["output"] == {"echoed": {"x": 3}, "tool": "echo"}


def test_execute_proposal_does_not_replace_the_registered_handler(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    handler, per_call = Recorder(), Recorder()
    car_runtime.register_tool_handler(handler)
    rt.execute_proposal(proposal(action("a", "echo", {"x": 1})), per_call)
    rt.submit_proposal(proposal(action("b", "echo", {"x": 2})))
    assert [c["action_id"] for c in per_call.calls] == ["a"]
    assert [c["action_id"] for c in handler.calls] == ["b"]


def test_a_handler_may_call_the_runtime(rt: car_runtime.CarRuntime) -> None:
    # CAR: "The handler may call any CarRuntime method".
    rt.register_tool("remember")

    def tool_fn(call_json: str) -> str:
        call = json.loads(call_json)
        rt.state_set("seen", json.dumps(call["params"]["v"]))
        return json.dumps({"ok": True})

    result = json.loads(rt.execute_proposal(proposal(action("a", "remember", {"v": "hello"})), tool_fn))
    assert [r["status"] for r in result["results"]] == ["succeeded"]
    assert json.loads(rt.state_get("seen")) == "hello"


def test_terminal_tool_error_halts_the_session_until_reconnect(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("journal")

    def terminal(call_json: str) -> str:
        raise car_runtime.TerminalToolError("receipt journal unavailable")

    halted = json.loads(rt.execute_proposal(proposal(action("a", "journal")), terminal))
    (r,) = halted["results"]
    assert r["status"] == "failed"
    assert r.get("terminal") is True

    # Later proposals on this session are rejected without dispatching a tool.
    tool = Recorder()
    after = json.loads(rt.execute_proposal(proposal(action("b", "journal")), tool))
    assert tool.calls == []
    assert [x["status"] for x in after["results"]] == ["rejected"]

    # The halt is connection-local: a reconnect (close, then call) starts clean.
    rt.close()
    rt.register_tool("journal")
    again = json.loads(rt.execute_proposal(proposal(action("c", "journal")), tool))
    assert [x["status"] for x in again["results"]] == ["succeeded"]
    assert [c["action_id"] for c in tool.calls] == ["c"]


def test_a_reaped_callback_is_cancelled_by_request_id(rt: car_runtime.CarRuntime) -> None:
    # An action that outlives its timeout_ms is reaped; the daemon sends the
    # `tools.cancel` notification, which CAR's client routes to the cancel handler with the
    # request_id the tool call saw. The tool blocks until that cancel arrives (bounded),
    # so nothing here depends on timing beyond the action's own budget.
    rt.register_tool("slow")
    cancelled: List[str] = []
    seen: List[str] = []
    arrived = threading.Event()

    def on_cancel(request_id: str) -> None:
        cancelled.append(request_id)
        arrived.set()

    def slow(call_json: str) -> str:
        seen.append(json.loads(call_json)["request_id"])
        arrived.wait(60)
        return json.dumps({"late": True})

    car_runtime.register_tool_cancel_handler(on_cancel)
    result = json.loads(rt.execute_proposal(proposal(action("a", "slow", {}, timeout_ms=300)), slow))
    assert arrived.wait(60), "no tools.cancel reached the cancel handler"
    assert cancelled == seen
    (r,) = result["results"]
    assert r["status"] == "failed"
    assert isinstance(r["error"], str) and r["error"]


# --- the event log -----------------------------------------------------------------------


def run_one(rt: car_runtime.CarRuntime, action_id: str = "a") -> None:
    rt.register_tool("echo")
    rt.execute_proposal(proposal(action(action_id, "echo", {"x": 1})), Recorder())


def test_event_count_grows_with_execution(rt: car_runtime.CarRuntime) -> None:
    before = rt.event_count()
    assert isinstance(before, int) and before >= 0
    run_one(rt)
    assert rt.event_count() > before


def test_event_query_shape_and_order(rt: car_runtime.CarRuntime) -> None:
    run_one(rt, "first")
    run_one(rt, "second")
    q = json.loads(rt.event_query("{}"))
    assert set(q) >= {"count", "events"}
    assert q["count"] == len(q["events"]) >= 2
    assert q["count"] == rt.event_count()
    for e in q["events"]:
        assert isinstance(e["kind"], str) and e["kind"]
    stamps = [e["timestamp"] for e in q["events"] if "timestamp" in e]
    assert stamps == sorted(stamps, reverse=True)  # most recent first


def test_event_query_filters(rt: car_runtime.CarRuntime) -> None:
    run_one(rt, "first")
    run_one(rt, "second")
    limited = json.loads(rt.event_query(json.dumps({"limit": 1})))
    assert len(limited["events"]) == 1
    assert limited["count"] == 1

    succeeded = json.loads(rt.event_query(json.dumps({"kinds": ["action_succeeded"]})))
    assert succeeded["count"] == 2
    assert {e["kind"] for e in succeeded["events"]} == {"action_succeeded"}
    assert [e["action_id"] for e in succeeded["events"]] == ["second", "first"]

    by_action = json.loads(rt.event_query(json.dumps({"action_id": "first"})))
    assert by_action["count"] >= 1
    assert {e["action_id"] for e in by_action["events"]} == {"first"}


def test_action_events_carry_a_params_digest_never_the_params(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("login")
    login = action("a", "login", {"password": "hunter2-secret"})
    # A `password` parameter makes the action full_access (CAR's permission tiers): a host
    # approves this exact operation first, through CAR's own HostClient.
    record = json.loads(car_runtime.HostClient(rt).permission_approve(json.dumps({"action": login})))
    assert record["decision"] == "approved", record
    assert "hunter2-secret" not in json.dumps(record)
    rt.execute_proposal(proposal(login), Recorder())
    events = json.loads(rt.event_query(json.dumps({"kinds": ["action_succeeded"]})))["events"]
    assert events and "params_digest" in events[0]["data"]
    assert "hunter2-secret" not in rt.event_query("{}")


def test_events_stats(rt: car_runtime.CarRuntime) -> None:
    run_one(rt)
    # Index: "current event and span counts for the session log".
    stats = json.loads(rt.events_stats("{}"))
    assert isinstance(stats, dict)
    counts = [v for v in stats.values() if isinstance(v, int) and not isinstance(v, bool)]
    assert rt.event_count() in counts, stats


@pytest.mark.parametrize("bad", ['{"actions": "nope"}', '{"actions": [{"id": "a", "type": "teleport"}]}'])
def test_a_malformed_proposal_is_refused(rt: car_runtime.CarRuntime, bad: str) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("verify", json.dumps({"proposal": json.loads(bad)}))
    assert info.value.code == -32602


# --- the replan loop (replan.set_config) ---------------------------------------------------


def test_set_replan_config_replans_a_failed_action_through_a_daemon_handler(rt: car_runtime.CarRuntime) -> None:
    """CAR's `set_replan_config` turns the loop on; the replacement comes from the client's
    `proposal.replan` handler (registered with CAR's generic `register_daemon_handler`)."""
    rt.register_tool("summarize")

    def tool_fn(call_json: str) -> str:
        call = json.loads(call_json)
        if call["params"].get("mode") != "safe":
            raise ValueError("mode not allowed")
        return json.dumps({"ok": True})

    asked: List[Dict[str, Any]] = []

    def replan(params_json: str) -> str:
        params = json.loads(params_json)
        asked.append(params)
        return json.dumps({"proposal": json.loads(proposal(action("a", "summarize", {"mode": "safe"})))})

    rt.register_daemon_handler("proposal.replan", replan)
    rt.set_replan_config(2)
    result = json.loads(rt.execute_proposal(proposal(action("a", "summarize", {"mode": "wild"})), tool_fn))
    assert result["replans"] == 1
    (r,) = result["results"]
    assert r["status"] == "succeeded"
    assert len(asked) == 1
    assert asked[0]["failed"]["tool"] == "summarize"
    assert asked[0]["failed"]["parameters"] == {"mode": "wild"}

    # 0 turns it off again: the failure stands and no handler is asked.
    rt.set_replan_config(0)
    off = json.loads(rt.execute_proposal(proposal(action("a", "summarize", {"mode": "wild"})), tool_fn))
    assert off["results"][0]["status"] == "failed"
    assert len(asked) == 1
