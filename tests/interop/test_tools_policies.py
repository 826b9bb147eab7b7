"""`tools.*` and `policy.*` through CAR's typed members: `register_tool`,
`register_tool_schema`, `list_tools` (JSON array of ToolSchema with `source`, sorted by
name), `unregister_tool` (count), `register_policy` (the three built-in rules),
`list_policies` (array of `{name, description}`, registration order), `unregister_policy`
(count), and the rules' enforcement on proposals."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import car_runtime
from conftest import Daemon, action, by_name, proposal


def user_tools(rt: car_runtime.CarRuntime) -> List[Dict[str, Any]]:
    return [t for t in json.loads(rt.list_tools()) if t.get("source") == "user_defined"]


def test_register_tool_then_list(rt: car_runtime.CarRuntime) -> None:
    assert rt.register_tool("echo") is None
    tools = json.loads(rt.list_tools())
    assert isinstance(tools, list)
    echo = by_name(tools)["echo"]
    assert echo["source"] == "user_defined"
    assert isinstance(echo["description"], str)
    assert isinstance(echo["parameters"], dict)
    assert isinstance(echo["idempotent"], bool)


def test_every_listed_tool_is_a_tool_schema(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    for tool in json.loads(rt.list_tools()):
        assert isinstance(tool["name"], str) and tool["name"]
        assert tool["source"] in {"builtin", "user_defined", "subprocess", "mcp"}, tool
        assert isinstance(tool["description"], str)
        assert isinstance(tool["parameters"], dict)
        assert isinstance(tool["idempotent"], bool)


def test_register_tool_schema_preserves_every_field(rt: car_runtime.CarRuntime) -> None:
    schema = {
        "name": "calc",
        "description": "adds two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        "returns": {"type": "number"},
        "idempotent": True,
        "cache_ttl_secs": 30,
        "rate_limit": {"max_calls": 5, "interval_secs": 60.0},
    }
    assert rt.register_tool_schema(json.dumps(schema)) is None
    calc = by_name(json.loads(rt.list_tools()))["calc"]
    for key, value in schema.items():
        assert calc[key] == value, key
    assert calc["source"] == "user_defined"


def test_register_tool_schema_cannot_claim_another_source(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool_schema(json.dumps({"name": "sneaky", "description": "", "source": "builtin"}))
    assert by_name(json.loads(rt.list_tools()))["sneaky"]["source"] == "user_defined"


def test_list_tools_is_sorted_and_byte_stable(rt: car_runtime.CarRuntime) -> None:
    for name in ("zeta", "alpha", "mid"):
        rt.register_tool(name)
    first = rt.list_tools()
    names = [t["name"] for t in json.loads(first)]
    assert names == sorted(names)
    assert [t["name"] for t in user_tools(rt)] == ["alpha", "mid", "zeta"]
    assert rt.list_tools() == first


def test_unregister_tool_returns_how_many_were_removed(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("echo")
    assert rt.unregister_tool("echo") == 1
    assert "echo" not in by_name(json.loads(rt.list_tools()))
    assert rt.unregister_tool("echo") == 0
    assert rt.unregister_tool("never-registered") == 0


def test_tools_are_per_connection(daemon: Daemon) -> None:
    first, second = car_runtime.CarRuntime(), car_runtime.CarRuntime()
    try:
        first.register_tool("only-here")
        assert "only-here" in by_name(json.loads(first.list_tools()))
        assert "only-here" not in by_name(json.loads(second.list_tools()))
    finally:
        first.close()
        second.close()


def test_register_the_three_rule_kinds_then_list(rt: car_runtime.CarRuntime) -> None:
    assert rt.register_policy("no-rm", "deny_tool", "rm") is None
    assert rt.register_policy("no-prod", "deny_tool_param", "deploy", key="env", pattern="prod") is None
    assert rt.register_policy("needs-tests", "require_state", key="tests_passed", value_json="true") is None
    policies = json.loads(rt.list_policies())
    assert isinstance(policies, list)
    assert [p["name"] for p in policies] == ["no-rm", "no-prod", "needs-tests"]  # registration order
    for p in policies:
        assert set(p) >= {"name", "description"}
        assert isinstance(p["description"], str) and p["description"]


def test_list_policies_starts_empty(rt: car_runtime.CarRuntime) -> None:
    assert json.loads(rt.list_policies()) == []


def test_unregister_policy_returns_how_many_were_removed(rt: car_runtime.CarRuntime) -> None:
    rt.register_policy("no-rm", "deny_tool", "rm")
    rt.register_policy("no-curl", "deny_tool", "curl")
    assert rt.unregister_policy("no-rm") == 1
    assert [p["name"] for p in json.loads(rt.list_policies())] == ["no-curl"]
    assert rt.unregister_policy("no-rm") == 0
    assert rt.unregister_policy("never-registered") == 0


def test_a_name_covering_two_policies_removes_both(rt: car_runtime.CarRuntime) -> None:
    # policy.register appends without de-duplicating; unregister drops every match.
    rt.register_policy("deny", "deny_tool", "rm")
    rt.register_policy("deny", "deny_tool", "curl")
    assert rt.unregister_policy("deny") == 2
    assert json.loads(rt.list_policies()) == []


class Recorder:
    """A tool function that records each call_json and echoes the parameters back."""

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []

    def __call__(self, call_json: str) -> str:
        call = json.loads(call_json)
        self.calls.append(call)
        return json.dumps({"echoed": call["params"]})


def statuses(result_json: str) -> Dict[str, str]:
    return {r["action_id"]: r["status"] for r in json.loads(result_json)["results"]}


def test_deny_tool_blocks_the_action_before_dispatch(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("rm")
    rt.register_policy("no-rm", "deny_tool", "rm")
    tool = Recorder()
    result = rt.execute_proposal(proposal(action("a", "rm", {"path": "/tmp/x"})), tool)
    assert statuses(result) == {"a": "rejected"}
    assert tool.calls == []
    assert json.loads(result)["cost"]["actions_rejected"] == 1


def test_deny_tool_param_blocks_only_the_matching_value(rt: car_runtime.CarRuntime) -> None:
    # Not `deploy`: the permission tiers (CAR's rule) make a deploy tool full_access, which
    # waits for a human whatever the policies say; a `configure` tool runs at the default tier.
    rt.register_tool("configure")
    rt.register_policy("no-prod", "deny_tool_param", "configure", key="env", pattern="prod")
    tool = Recorder()
    assert statuses(rt.execute_proposal(proposal(action("p", "configure", {"env": "prod-eu"})), tool)) == {
        "p": "rejected"
    }
    assert tool.calls == []
    assert statuses(rt.execute_proposal(proposal(action("s", "configure", {"env": "staging"})), tool)) == {
        "s": "succeeded"
    }
    assert [c["params"] for c in tool.calls] == [{"env": "staging"}]


def test_require_state_gates_on_the_state_value(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("ship")
    rt.register_policy("needs-tests", "require_state", key="tests_passed", value_json="true")
    tool = Recorder()
    assert statuses(rt.execute_proposal(proposal(action("a", "ship")), tool)) == {"a": "rejected"}
    rt.state_set("tests_passed", "true")
    assert statuses(rt.execute_proposal(proposal(action("b", "ship")), tool)) == {"b": "succeeded"}
    assert len(tool.calls) == 1


def test_unregistered_policy_stops_blocking(rt: car_runtime.CarRuntime) -> None:
    rt.register_tool("rm")
    rt.register_policy("no-rm", "deny_tool", "rm")
    rt.unregister_policy("no-rm")
    tool = Recorder()
    assert statuses(rt.execute_proposal(proposal(action("a", "rm")), tool)) == {"a": "succeeded"}
