"""CAR's MCP server driven by the official MCP Python SDK (PyPI ``mcp``), over Streamable
HTTP (the daemon's ``/mcp``) and over stdio (the ``car-mcp`` binary): list tools, add a fact,
query it back, verify a proposal, and the bearer rule (HTTP: no token, no call).
"""

import json
import uuid

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

# CAR's sixteen tools (MCP.md, "The tool list — 16 tools").
CORE_TOOLS = {
    "memory_add_fact", "memory_query", "memory_update_status", "memory_save_knowledge",
    "memory_save_procedural", "memory_delete", "memory_intervene", "memory_evaluate",
    "skill_ingest", "skill_list", "skill_find", "verify", "simulate", "equivalent", "optimize",
    "policy_check",
}
DAEMON_READ_TOOLS = {
    "events_query", "events_stats", "events_cost_by_agent", "workflow_verify",
    "workflow_list_paused", "scheduler_list",
}
PROPOSAL = {"actions": [
    {"id": "a", "type": "state_write", "key": "k", "value": 1},
    {"id": "b", "type": "state_write", "key": "j", "value": 2, "dependencies": ["a"]},
]}


def text_of(result):
    return result.content[0].text


async def exercise_core_tools(session, label):
    """The shared scenario: tools, a fact round trip, a verified proposal."""
    init = await session.initialize()
    assert init.serverInfo.name == "car-runtime"
    assert init.capabilities.tools is not None
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    assert CORE_TOOLS <= names, names
    for tool in tools.tools:
        assert tool.inputSchema["type"] == "object"
        assert tool.annotations is not None

    marker = f"{label}-{uuid.uuid4().hex[:8]}"
    added = await session.call_tool(
        "memory_add_fact", {"subject": marker, "body": f"the {marker} pangolin rolls into a ball"})
    assert not added.isError, text_of(added)
    assert int(text_of(added)) >= 1

    found = await session.call_tool("memory_query", {"query": f"{marker} pangolin", "k": 5})
    assert not found.isError, text_of(found)
    hits = json.loads(text_of(found))
    assert any(marker in hit["body"] for hit in hits), hits

    verified = await session.call_tool("verify", {"proposal": PROPOSAL})
    assert not verified.isError, text_of(verified)
    assert json.loads(text_of(verified))["valid"] is True

    simulated = await session.call_tool("simulate", {"proposal": PROPOSAL})
    assert not simulated.isError, text_of(simulated)
    assert simulated.structuredContent["final_state"] == {"k": 1, "j": 2}

    saved = await session.call_tool(
        "memory_save_procedural",
        {"subject": f"{marker} fix", "body": f"when {marker} fails rerun with --clean"})
    assert not saved.isError, text_of(saved)
    reminder = await session.call_tool(
        "memory_intervene", {"query": f"{marker} fails", "trigger": {"tool_error": True}})
    assert reminder.structuredContent["decision"] == "inject", text_of(reminder)
    assert reminder.structuredContent["selected"]["id"] == saved.structuredContent["id"]

    checked = await session.call_tool("policy_check", {"tool": "Read"})
    assert checked.structuredContent["decision"] == "allow", text_of(checked)

    rejected = await session.call_tool("memory_query", {"query": 5})
    assert rejected.isError
    return names


def test_streamable_http(daemon):
    async def run():
        # No header: listing works, every call is refused and nothing reaches memory.
        async with streamablehttp_client(daemon.mcp_url) as (read, write, _session_id):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {t.name for t in (await session.list_tools()).tools}
                assert DAEMON_READ_TOOLS <= listed
                for name, args in [("memory_query", {"query": "x"}),
                                   ("memory_add_fact", {"subject": "s", "body": "b"}),
                                   ("events_stats", {})]:
                    refused = await session.call_tool(name, args)
                    assert refused.isError, name
                    assert "Authorization" in text_of(refused)
                try:
                    await session.get_prompt("car_context", {"query": "pangolin"})
                except McpError as e:
                    assert e.error.code == -32001
                else:
                    raise AssertionError("prompts/get without a token was answered")

        headers = {"Authorization": f"Bearer {daemon.token}"}
        async with streamablehttp_client(daemon.mcp_url, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                names = await exercise_core_tools(session, "http")
                assert DAEMON_READ_TOOLS <= names
                assert "workflow_run" not in names
                prompt = await session.get_prompt("car_context", {"query": "pangolin"})
                assert prompt.messages[0].role == "user"
                stats = await session.call_tool("events_stats", {})
                assert not stats.isError, text_of(stats)
                events = await session.call_tool("events_query", {"limit": 2})
                assert not events.isError, text_of(events)
                assert isinstance(events.structuredContent["events"], list)
                costs = await session.call_tool("events_cost_by_agent", {})
                assert not costs.isError, text_of(costs)
                assert isinstance(json.loads(text_of(costs)), list)

    anyio.run(run)


def test_stdio(daemon, car_mcp_bin):
    async def run():
        params = StdioServerParameters(command=car_mcp_bin, args=[], env=daemon.client_env())
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                names = await exercise_core_tools(session, "stdio")
                assert names == CORE_TOOLS

    anyio.run(run)
