"""`connectors.*` through CAR's generated wrappers (`connectors_add_stdio`, `connectors_list`,
`connectors_tools`, `connectors_enable_tools`, `connectors_disable_tools`,
`connectors_refresh`, `connectors_remove`, `connectors_add`) against a real third-party MCP
server (npm `@modelcontextprotocol/server-everything`, installed by
`scripts/fetch-mcp-servers`), and an enabled connector tool run inside a proposal CAR's
client submits."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import car_runtime
import pytest
from conftest import action, by_name, proposal


def everything() -> str:
    path = os.environ.get("CAR_TEST_MCP_EVERYTHING")
    if not path:
        pytest.fail('CAR_TEST_MCP_EVERYTHING is not set: run `eval "$(scripts/fetch-mcp-servers)"` first')
    return path


def call(method: Any, params: Dict[str, Any]) -> Any:
    return json.loads(method(json.dumps(params)))


def test_a_stdio_connector_is_added_enabled_called_and_removed(rt: car_runtime.CarRuntime) -> None:
    status = call(rt.connectors_add_stdio, {"name": "everything", "command": "node", "args": [everything(), "stdio"]})
    assert status["slug"] == "everything"
    assert status["connected"] is True
    assert status["enabled_count"] == 0
    listed = call(rt.connectors_list, {})["connectors"]
    assert [c["slug"] for c in listed] == ["everything"]

    views = by_name(call(rt.connectors_tools, {"slug": "everything"}))
    assert views["get-sum"]["canonical"] == "mcp_everything_get-sum"
    assert views["get-sum"]["enabled"] is False
    assert "mcp_everything_get-sum" not in by_name(json.loads(rt.list_tools()))

    assert call(rt.connectors_enable_tools, {"slug": "everything", "tools": ["get-sum"]}) == {"enabled": 1}
    tool = by_name(json.loads(rt.list_tools()))["mcp_everything_get-sum"]
    assert tool["source"] == "mcp"
    called_back = []

    def tool_fn(call_json: str) -> str:
        called_back.append(call_json)
        return "{}"

    result = json.loads(rt.execute_proposal(proposal(action("a", "mcp_everything_get-sum", {"a": 2, "b": 3})), tool_fn))
    assert called_back == [], "the daemon runs connector tools itself"
    (r,) = result["results"]
    assert r["status"] == "succeeded", r
    assert "5" in json.dumps(r["output"])

    assert call(rt.connectors_disable_tools, {"slug": "everything", "tools": ["get-sum"]}) == {"disabled": 1}
    assert "mcp_everything_get-sum" not in by_name(json.loads(rt.list_tools()))
    refreshed = call(rt.connectors_refresh, {"slug": "everything"})
    assert any(v["name"] == "echo" for v in refreshed)
    assert call(rt.connectors_remove, {"slug": "everything"}) == {"removed": "everything"}
    assert call(rt.connectors_list, {})["connectors"] == []


def test_an_unreachable_remote_connector_is_added_with_its_error(rt: car_runtime.CarRuntime) -> None:
    status = call(rt.connectors_add, {"name": "gone", "url": "http://127.0.0.1:1/mcp"})
    assert status["connected"] is False
    assert isinstance(status["last_error"], str) and status["last_error"]
