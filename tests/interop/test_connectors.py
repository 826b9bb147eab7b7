"""`connectors.*` through CAR's generated wrappers (`connectors_add_stdio`, `connectors_list`,
`connectors_tools`, `connectors_enable_tools`, `connectors_disable_tools`,
`connectors_refresh`, `connectors_remove`, `connectors_add`, `connectors_authenticate`,
`connectors_complete_authentication`) against real third-party MCP servers (npm
`@modelcontextprotocol/server-everything`, and an OAuth-protected server on PyPI `mcp`'s own
authorization server, both installed by `scripts/fetch-mcp-servers`), and an enabled
connector tool run inside a proposal CAR's client submits."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator

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


@pytest.fixture
def oauth_server() -> Iterator[str]:
    """tests/mcp-servers/oauth_server.py on an ephemeral port: its MCP URL."""
    python = os.environ.get("CAR_TEST_MCP_OAUTH_PY")
    if not python:
        pytest.fail('CAR_TEST_MCP_OAUTH_PY is not set: run `eval "$(scripts/fetch-mcp-servers)"` first')
    script = Path(__file__).resolve().parents[1] / "mcp-servers" / "oauth_server.py"
    proc = subprocess.Popen(
        [python, str(script), "--port", "0", "--exit-with-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http://"), url
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_an_oauth_connector_is_authorized_through_cars_wrappers(rt: car_runtime.CarRuntime, oauth_server: str) -> None:
    redirect = "http://127.0.0.1:9/callback"
    begun = call(rt.connectors_authenticate, {"name": "guarded", "url": oauth_server, "redirect_uri": redirect})
    assert set(begun) == {"authorize_url", "state"}
    # The browser's part: follow the authorize URL to its redirect.
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirected:
        opener.open(begun["authorize_url"], timeout=20)
    assert redirected.value.code == 302
    query = urllib.parse.parse_qs(urllib.parse.urlparse(redirected.value.headers["Location"]).query)
    assert query["state"] == [begun["state"]]
    status = call(rt.connectors_complete_authentication, {"state": begun["state"], "code": query["code"][0]})
    assert status["slug"] == "guarded"
    assert status["connected"] is True
    assert call(rt.connectors_enable_tools, {"slug": "guarded", "tools": ["echo"]}) == {"enabled": 1}
    result = json.loads(rt.execute_proposal(proposal(action("a", "mcp_guarded_echo", {"text": "hi"})), lambda _: "{}"))
    assert result["results"][0]["status"] == "succeeded", result

    with pytest.raises(car_runtime.DaemonRpcError) as refused:
        call(rt.connectors_complete_authentication, {"state": begun["state"], "code": query["code"][0]})
    assert refused.value.code == -32602
    assert "state" in refused.value.message
