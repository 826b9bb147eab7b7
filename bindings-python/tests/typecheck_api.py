"""Exercises the public API for `mypy --strict` (run by test.sh, never imported by
pytest): a wrong signature or return type in the package, its generated members or its
stubs fails the check."""

from __future__ import annotations

import json
from typing import Dict, List, Optional

import car_runtime
from car_runtime import (
    CarRuntime,
    ClientClosedError,
    DaemonConnectionError,
    DaemonRpcError,
    DaemonTimeoutError,
    InvalidArgumentError,
    TerminalToolError,
    UnexpectedResultError,
)


def tool_one(call_json: str) -> str:
    if not call_json:
        raise TerminalToolError("empty call")
    return call_json


def tool_two(tool: str, params_json: str) -> str:
    return json.dumps({"tool": tool, "params": json.loads(params_json)})


def exercise(rt: CarRuntime) -> None:
    version: str = car_runtime.__version__
    proto: int = car_runtime.protocol_version()
    client: str = car_runtime.client_version()
    car_runtime.set_memory_namespace("ns")
    ns: Optional[str] = car_runtime.get_memory_namespace()
    car_runtime.register_tool_handler(tool_one)
    car_runtime.register_tool_cancel_handler(lambda request_id: None)
    car_runtime.unregister_tool_handler()
    car_runtime.unregister_tool_cancel_handler()
    car_runtime.register_chat_handler(lambda params_json: None)
    car_runtime.unregister_chat_handler()

    raw: str = rt.daemon_call("state.keys", "{}", timeout=1.5)
    host: str = rt.daemon_call_host_management("session.clear_halt", "{}")
    rt.register_daemon_handler("host.ask", lambda p: p)
    rt.register_daemon_notification_handler("host.note", lambda p: None)
    epoch: int = rt.connection_epoch()
    schema: str = rt.server_schema()
    caps: str = rt.capabilities()

    rt.state_set("k", "1", tenant=None)
    got: str = rt.state_get("k")
    exists: bool = rt.state_exists("k", "tenant")
    keys: List[str] = rt.state_keys()
    snap: str = rt.state_snapshot()

    count: int = rt.add_fact("s", "b", "fact", 0.5, "id", ["t"], "src")
    facts: int = rt.fact_count()
    rows: str = rt.query_facts("q", k=3)
    ctx: str = rt.build_context("q", model_context_window=4096)
    merged: str = rt.consolidate()
    saved: int = rt.persist_memory("m.json")
    loaded: int = rt.load_memory("m.json")
    deleted: str = rt.memory_delete('{"id": "id"}')

    skills: int = rt.ingest_skill("n", "c", "web", "p", "u", ["k"], "d", supersedes=None)
    found: str = rt.find_skill("p", "u", "t", max_results=2)
    report: str = rt.report_outcome("n", "success")
    listed: str = rt.list_skills(domain=None)

    rt.register_tool("t")
    rt.register_tool_schema('{"name": "t2"}')
    tools: str = rt.list_tools()
    removed: int = rt.unregister_tool("t")
    rt.register_policy("p", "deny_tool", target="t", key=None, pattern=None,
                       value_json=None, session_id=None)
    dropped: int = rt.unregister_policy("p")
    policies: str = rt.list_policies()

    verdict: str = rt.verify_proposal("{}")
    submitted: str = rt.submit_proposal("{}", session_id="s")
    one: str = rt.execute_proposal("{}", tool_one)
    two: str = rt.execute_proposal("{}", tool_two, session_id="s")

    events: int = rt.event_count()
    queried: str = rt.event_query('{"limit": 1}')
    run: str = rt.runs_start('{"intent": "x"}')
    completed: str = rt.runs_complete('{"run_id": "r", "outcome": {"status": "success"}}')

    text: str = rt.infer("hi", model=None, max_tokens=8)
    tracked: str = rt.infer_tracked("hi", None, 8, "ctx", "[]", "[]", tool_choice="auto",
                                    parallel_tool_calls=False)
    requested: str = rt.infer_tracked_with_request('{"prompt": "hi"}')
    streamed: str = rt.infer_stream("hi", lambda event_json: None, max_tokens=8)
    vectors: str = rt.embed(["a"], model=None)
    labels: str = rt.classify("t", ["a", "b"])
    models: str = rt.list_models()
    registered: str = rt.register_model('{"id": "m", "path": "/m.gguf"}')
    tokens: str = rt.tokenize("m", "t")
    detok: str = rt.detokenize("m", [1])

    generated: str = rt.memory_add_fact('{"subject": "s", "body": "b"}')
    rt.chat_event("s1", "token", "hi")
    rt.chat_event("s1", "done")
    host_client = car_runtime.HostClient(rt)
    owner: CarRuntime = host_client.runtime
    cleared: str = host_client.session_clear_halt()
    upserted: str = host_client.agents_upsert('{"id": "a", "name": "A", "command": "/bin/true"}')
    agent_removed: str = host_client.agents_remove('{"id": "a"}')
    activity: str = host_client.diagnostics_secret_store_activity()
    via_host: str = host_client.daemon_call_host_management("models.remove", '{"id": "m"}')
    model_removed: str = rt.remove_model("m")
    mapping: str = car_runtime.GENERATED_METHODS["memory_delete"]
    typed: Dict[str, str] = car_runtime.TYPED_MEMBERS
    host_tables: Dict[str, str] = {
        **car_runtime.HOST_GENERATED_METHODS,
        **car_runtime.HOST_TYPED_MEMBERS,
    }
    rt.disconnect()
    rt.close()


def errors() -> None:
    try:
        with CarRuntime("ws://127.0.0.1:9100", token="t", memory_namespace=None) as rt:
            exercise(rt)
    except DaemonRpcError as e:
        code: int = e.code
        message: str = e.message
        print(code, message, e.data)
    except DaemonTimeoutError as e:
        after: int = e.after_ms
        print(after, e.method)
    except ClientClosedError:
        pass
    except DaemonConnectionError as e:
        as_connection: ConnectionError = e
        print(as_connection)
    except InvalidArgumentError as e:
        as_type: TypeError = e
        as_value: ValueError = e
        print(as_type, as_value)
    except UnexpectedResultError as e:
        method: str = e.method
        print(method)
