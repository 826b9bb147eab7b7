"""`CarRuntime`: the daemon client a Python program holds, and the process-wide handlers.

Every member is a thin call through the native client: structured results come back as
JSON strings (decode them with `json.loads`), counts as `int`, flags as `bool`. Calls
block the calling thread with the GIL released, may be made from any number of threads
at once, and may be made from inside a callback. Callbacks run on the worker threads of
`_callbacks`, never on the native module's own threads; `infer_stream`'s `on_event` runs
on the thread that called `infer_stream`.
"""

from __future__ import annotations

import json
import os
import threading
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Type

from . import _callbacks, _native
from ._callbacks import ToolFn, adapt_tool_fn
from ._errors import RefusedError
from ._generated import GeneratedMethods

_namespace_lock = threading.Lock()
_memory_namespace: Optional[str] = None


def set_memory_namespace(ns: Optional[str]) -> None:
    """Sets the memory namespace for runtimes created afterwards (`None`: back to
    `CAR_MEMORY_NAMESPACE`, else the shared graph)."""
    global _memory_namespace
    if ns is not None and not isinstance(ns, str):
        raise TypeError(f"ns must be a str or None, got {type(ns).__name__}")
    with _namespace_lock:
        _memory_namespace = ns or None


def get_memory_namespace() -> Optional[str]:
    """The namespace new runtimes use: the one set here, else `CAR_MEMORY_NAMESPACE`."""
    with _namespace_lock:
        ns = _memory_namespace
    return ns if ns is not None else (os.environ.get("CAR_MEMORY_NAMESPACE") or None)


def register_tool_handler(fn: Callable[[str], str]) -> None:
    """Sets the process-wide `tools.execute` handler used by every `CarRuntime`
    (`submit_proposal`). It gets `call_json` (`{tool, params, action_id, request_id,
    timeout_ms, session_id, attempt}`) and returns the result JSON; raising
    `TerminalToolError` marks the failure terminal."""
    adapted = adapt_tool_fn(fn)
    _callbacks.POOL.ensure_started()
    _native.set_tool_handler(adapted)


def unregister_tool_handler() -> None:
    """Removes the process-wide tool handler."""
    _native.set_tool_handler(None)


def register_tool_cancel_handler(fn: Callable[[str], None]) -> None:
    """Sets the process-wide `tools.cancel` subscriber; it gets the cancelled call's
    `request_id`."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _callbacks.POOL.ensure_started()
    _native.set_tool_cancel_handler(fn)


def unregister_tool_cancel_handler() -> None:
    """Removes the process-wide `tools.cancel` subscriber."""
    _native.set_tool_cancel_handler(None)


def _load(field: str, text: str) -> Any:
    if not isinstance(text, str):
        raise TypeError(f"{field} must be a JSON string, got {type(text).__name__}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{field} is not valid JSON: {e}") from None


def _int(method: str, text: str) -> int:
    value = json.loads(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{method} returned {text}, expected an integer")
    return value


class CarRuntime(GeneratedMethods):
    """A client of the local `car-server` daemon.

    `url` defaults to `CAR_DAEMON_URL`, else the daemon's local socket or
    `ws://127.0.0.1:9100`; `token` to `CAR_AUTH_TOKEN`, else the daemon's token file;
    `memory_namespace` to `set_memory_namespace()`, else `CAR_MEMORY_NAMESPACE`. The
    connection opens on the first call and reopens on the next call after it dropped.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        memory_namespace: Optional[str] = None,
    ) -> None:
        ns = memory_namespace if memory_namespace is not None else get_memory_namespace()
        _callbacks.POOL.ensure_started()
        self._native = _native.NativeClient(url, token, ns)

    def __repr__(self) -> str:
        state = "closed" if self._native.closed else "open"
        return f"<CarRuntime {state}>"

    # -- bridge -------------------------------------------------------------------

    def daemon_call(
        self, method: str, params_json: str = "{}", *, timeout: Optional[float] = None
    ) -> str:
        """Calls any daemon method; returns the result JSON. `timeout` (seconds)
        replaces the method's default wait."""
        return self._native.call(method, params_json, timeout)

    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str:
        """Calls a host-management method with the host token (refused client-side for
        any other method)."""
        return self._native.call_host_management(method, params_json)

    def register_daemon_handler(self, method: str, fn: Callable[[str], str]) -> None:
        """Serves daemon→client requests named `method`: `fn(params_json)` returns the
        result JSON; an exception becomes the JSON-RPC error."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self._native.register_handler(method, fn)

    def unregister_daemon_handler(self, method: str) -> None:
        self._native.unregister_handler(method)

    def register_daemon_notification_handler(
        self, method: str, fn: Callable[[str], None]
    ) -> None:
        """Delivers notifications named `method` to `fn(params_json)`, one at a time in
        arrival order; an exception goes to `sys.unraisablehook`."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self._native.register_notification_handler(method, fn)

    def unregister_daemon_notification_handler(self, method: str) -> None:
        self._native.unregister_notification_handler(method)

    def disconnect(self) -> None:
        """Drops the connection; the next call reconnects. Handlers stay registered."""
        self._native.disconnect()

    def close(self) -> None:
        """Closes the runtime for good (idempotent); later calls raise
        `ClientClosedError`."""
        self._native.close()

    def __enter__(self) -> CarRuntime:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _call(self, method: str, params: Dict[str, Any]) -> str:
        sent = {k: v for k, v in params.items() if v is not None}
        return self._native.call(method, json.dumps(sent), None)

    # -- discovery ----------------------------------------------------------------

    def capabilities(self) -> str:
        """`capabilities.list`: the methods this session may call, with their roles."""
        return self._call("capabilities.list", {})

    # -- state --------------------------------------------------------------------

    def state_set(  # type: ignore[override]
        self, key: str, value_json: str, tenant: Optional[str] = None
    ) -> None:
        self._call(
            "state.set",
            {"key": key, "value": _load("value_json", value_json), "tenant_id": tenant},
        )

    def state_get(self, key: str, tenant: Optional[str] = None) -> str:  # type: ignore[override]
        """The value's JSON, `"null"` when the key is absent."""
        return self._call("state.get", {"key": key, "tenant_id": tenant})

    def state_exists(self, key: str, tenant: Optional[str] = None) -> bool:  # type: ignore[override]
        return bool(json.loads(self._call("state.exists", {"key": key, "tenant_id": tenant})))

    def state_keys(self, tenant: Optional[str] = None) -> List[str]:  # type: ignore[override]
        keys = json.loads(self._call("state.keys", {"tenant_id": tenant}))
        return [str(k) for k in keys]

    def state_snapshot(self, tenant: Optional[str] = None) -> str:
        return self._call("state.snapshot", {"tenant_id": tenant})

    # -- memory -------------------------------------------------------------------

    def add_fact(
        self,
        subject: str,
        body: str,
        kind: str,
        confidence: Optional[float] = None,
        fact_id: Optional[str] = None,
        tags: Optional[List[str]] = None,
        source: Optional[str] = None,
    ) -> int:
        """Adds a fact; returns the new fact count."""
        params = {
            "subject": subject,
            "body": body,
            "kind": kind,
            "confidence": confidence,
            "fact_id": fact_id,
            "tags": tags,
            "source": source,
        }
        return _int("memory.add_fact", self._call("memory.add_fact", params))

    def fact_count(self) -> int:
        return _int("memory.fact_count", self._call("memory.fact_count", {}))

    def query_facts(self, query: str, k: Optional[int] = None) -> str:
        """`[{fact_id, subject, body, kind, confidence, tags, source}]`, best first."""
        return self._call("memory.query", {"query": query, "k": k})

    def build_context(self, query: str, model_context_window: Optional[int] = None) -> str:
        """The context text assembled from memory for `query`."""
        reply = json.loads(
            self._call(
                "memory.build_context",
                {"query": query, "model_context_window": model_context_window},
            )
        )
        return str(reply["context"]) if isinstance(reply, dict) else str(reply)

    def consolidate(self) -> str:
        return self._call("memory.consolidate", {})

    def persist_memory(self, path: str) -> int:
        return _int("memory.persist", self._call("memory.persist", {"path": path}))

    def load_memory(self, path: str) -> int:
        return _int("memory.load", self._call("memory.load", {"path": path}))

    # -- skills -------------------------------------------------------------------

    def ingest_skill(
        self,
        name: str,
        code: str,
        platform: str,
        persona: str,
        url_pattern: str,
        task_keywords: List[str],
        description: str,
        supersedes: Optional[str] = None,
    ) -> int:
        params = {
            "name": name,
            "code": code,
            "platform": platform,
            "persona": persona,
            "url_pattern": url_pattern,
            "task_keywords": list(task_keywords),
            "description": description,
            "supersedes": supersedes,
        }
        return _int("skill.ingest", self._call("skill.ingest", params))

    def find_skill(
        self, persona: str, url: str, task: str, max_results: Optional[int] = None
    ) -> str:
        """Matching skills as a JSON array (rows carry `name`, `code`, `match_score`),
        or `"null"` when none match."""
        params = {"persona": persona, "url": url, "task": task, "max_results": max_results}
        found = self._call("skill.find", params)
        return "null" if json.loads(found) in (None, []) else found

    def report_outcome(self, name: str, outcome: str) -> str:
        """`outcome` is `"success"` or `"fail"`; returns `{success_count, fail_count,
        degraded}`."""
        return self._call("skill.report", {"name": name, "outcome": outcome})

    def list_skills(self, domain: Optional[str] = None) -> str:
        return self._call("skills.list", {"domain": domain})

    # -- tools and policies -------------------------------------------------------

    def register_tool(self, name: str) -> None:
        self._call("tools.register", {"name": name})

    def register_tool_schema(self, schema_json: str) -> None:
        """Registers one descriptor `{name, description?, parameters?}` or an array."""
        schema = _load("schema_json", schema_json)
        self._native.call("tools.register", json.dumps(schema), None)

    def list_tools(self) -> str:
        return self._call("tools.list", {})

    def unregister_tool(self, name: str) -> int:
        return _int("tools.unregister", self._call("tools.unregister", {"name": name}))

    def register_policy(
        self,
        name: str,
        rule: str,
        target: Optional[str] = None,
        key: Optional[str] = None,
        pattern: Optional[str] = None,
        value_json: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> None:
        """`rule` is `deny_tool`, `deny_tool_param` or `require_state`."""
        value = None if value_json is None else _load("value_json", value_json)
        params = {
            "name": name,
            "rule": rule,
            "target": target,
            "key": key,
            "pattern": pattern,
            "value": value,
            "session_id": session_id,
        }
        self._call("policy.register", params)

    def unregister_policy(self, name: str) -> int:
        return _int("policy.unregister", self._call("policy.unregister", {"name": name}))

    def list_policies(self) -> str:
        return self._call("policy.list", {})

    # -- proposals ----------------------------------------------------------------

    def verify_proposal(self, proposal_json: str) -> str:
        """`{valid, issues, execution_levels, conflicts}` without running anything."""
        return self._call("verify", {"proposal": _load("proposal_json", proposal_json)})

    def submit_proposal(self, proposal_json: str, session_id: Optional[str] = None) -> str:
        """Runs a proposal; its tool calls go to the process-wide tool handler."""
        if not _native.has_tool_handler():
            raise RefusedError(
                "no tool handler registered: call car_runtime.register_tool_handler "
                "first, or use execute_proposal"
            )
        proposal = _load("proposal_json", proposal_json)
        return self._call("proposal.submit", {"proposal": proposal, "session_id": session_id})

    def execute_proposal(
        self, proposal_json: str, tool_fn: ToolFn, session_id: Optional[str] = None
    ) -> str:
        """Registers the proposal's tools and runs it, sending its tool calls to
        `tool_fn(call_json)` or `tool_fn(tool, params_json)`; returns the result JSON."""
        adapted = adapt_tool_fn(tool_fn)
        _callbacks.POOL.ensure_started()
        return self._native.execute_proposal(proposal_json, adapted, session_id)

    # -- events and runs ----------------------------------------------------------

    def event_count(self) -> int:
        return _int("events.count", self._call("events.count", {}))

    def event_query(self, query_json: str = "{}") -> str:
        """Events newest first; `query_json` may hold `kinds`, `action_id`,
        `proposal_id`, `session_id`, `since`, `until`, `limit`."""
        return self.daemon_call("events.query", query_json)

    # -- inference ----------------------------------------------------------------

    def infer(  # type: ignore[override,unused-ignore]
        self, prompt: str, model: Optional[str] = None, max_tokens: Optional[int] = None
    ) -> str:
        """The generated text."""
        reply = json.loads(self.infer_tracked(prompt, model, max_tokens))
        return str(reply["text"])

    def infer_tracked(
        self,
        prompt: str,
        model: Optional[str] = None,
        max_tokens: Optional[int] = None,
        context: Optional[str] = None,
        tools_json: Optional[str] = None,
        messages_json: Optional[str] = None,
    ) -> str:
        """`{text, tool_calls, usage, model_used, model_identity, latency_ms,
        time_to_first_token_ms, stop_reason}`."""
        params = {
            "prompt": prompt,
            "model": model,
            "max_tokens": max_tokens,
            "context": context,
            "tools": None if tools_json is None else _load("tools_json", tools_json),
            "messages": None if messages_json is None else _load("messages_json", messages_json),
        }
        return self._call("infer", params)

    def infer_stream(  # type: ignore[override,unused-ignore]
        self,
        prompt: str,
        on_event: Callable[[str], None],
        model: Optional[str] = None,
        max_tokens: Optional[int] = None,
    ) -> str:
        """Generates like `infer_tracked`, streaming this call's events to
        `on_event(event_json)` as they arrive: `{type: "text", data}` pieces, then
        `{type: "usage", …}` and `{type: "stop_reason", data}`, then a final
        `{type: "done"}`; returns the final result JSON.

        `on_event` runs on the calling thread, one event at a time in order, all before
        this returns. Any number of streams may run at once on one runtime (from several
        threads); each gets only its own events.

        If `on_event` raises an `Exception`, it gets no further events (nor `done`), the
        generation still runs to completion, and then the exception is raised from here
        in place of the result. `KeyboardInterrupt` (or another `BaseException` that is
        not an `Exception`) abandons the call at once and is raised, as Ctrl-C during
        the wait does.
        """
        if not callable(on_event):
            raise TypeError(f"on_event must be callable, got {type(on_event).__name__}")

        def forward(params_json: str) -> None:
            event = json.loads(params_json).get("event")
            if event is not None:
                on_event(json.dumps(event))

        params = {"prompt": prompt, "model": model, "max_tokens": max_tokens}
        sent = {k: v for k, v in params.items() if v is not None}
        result = self._native.call_streaming("infer_stream", json.dumps(sent), forward, None)
        on_event(json.dumps({"type": "done"}))
        return result

    def embed(  # type: ignore[override,unused-ignore]
        self, texts: List[str], model: Optional[str] = None
    ) -> str:
        """`{embeddings}`."""
        return self._call("embed", {"texts": list(texts), "model": model})

    def classify(  # type: ignore[override,unused-ignore]
        self, text: str, labels: List[str], model: Optional[str] = None
    ) -> str:
        """`[{label, score}]`, best first (the daemon's `scores`)."""
        reply = json.loads(
            self._call("classify", {"text": text, "labels": list(labels), "model": model})
        )
        return json.dumps(reply["scores"])

    def list_models(self) -> str:
        return self._call("models.list", {})

    def tokenize(self, model: str, text: str) -> str:  # type: ignore[override,unused-ignore]
        return self._call("tokenize", {"model": model, "text": text})

    def detokenize(  # type: ignore[override,unused-ignore]
        self, model: str, tokens_json: str
    ) -> str:
        return self._call("detokenize", {"model": model, "tokens": _load("tokens_json", tokens_json)})
