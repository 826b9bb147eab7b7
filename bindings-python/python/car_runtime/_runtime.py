"""`CarRuntime`: the daemon client a Python program holds, and the process-wide handlers.

Only what cannot be generated is written here: the bridge (`daemon_call`, handlers,
`connection_epoch`, `close`), the members that take callbacks (`submit_proposal`,
`execute_proposal`, `infer_stream`), the context manager and the process-wide tool and
chat handlers. Every typed member (`add_fact`, …) and JSON-string wrapper
(`memory_add_fact`, …) is generated from the daemon's method contract into
`_generated.py` and runs through the native client's `call_member`, which builds the
params and projects the result in the shared Rust client.

Structured results come back as JSON strings (decode them with `json.loads`), counts as
`int`, flags as `bool`. Calls block the calling thread with the GIL released, may be made
from any number of threads at once, and may be made from inside a callback. Callbacks run
on the worker threads of `_callbacks`, never on the native module's own threads;
`infer_stream`'s `on_event` runs on the thread that called `infer_stream`.
"""

from __future__ import annotations

import json
import os
import threading
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Type

from . import _callbacks, _native
from ._callbacks import ToolFn, adapt_tool_fn
from ._errors import InvalidArgumentError, RefusedError
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


_cancel_lock = threading.Lock()
_user_cancel: Optional[Callable[[str], None]] = None
# `request_id` (as `tools.cancel` names it) → the abort event of an agent-loop tool call.
_aborts: Dict[str, threading.Event] = {}


def _on_tool_cancel(request_id: str) -> None:
    # Every `tools.cancel` first sets the abort event of the agent-loop call it names, then
    # reaches the subscriber the program registered, if any.
    with _cancel_lock:
        event = _aborts.get(request_id)
        user = _user_cancel
    if event is not None:
        event.set()
    if user is not None:
        user(request_id)


def watch_abort(request_id: str) -> threading.Event:
    """An event set when the daemon sends `tools.cancel` for `request_id` (until
    `forget_abort`); the agent loop hands it to tools that take an `abort` keyword."""
    event = threading.Event()
    with _cancel_lock:
        _aborts[request_id] = event
    _callbacks.POOL.ensure_started()
    _native.set_tool_cancel_handler(_on_tool_cancel)
    return event


def forget_abort(request_id: str) -> None:
    with _cancel_lock:
        _aborts.pop(request_id, None)


def register_tool_cancel_handler(fn: Callable[[str], None]) -> None:
    """Sets the process-wide `tools.cancel` subscriber; it gets the cancelled call's
    `request_id`."""
    global _user_cancel
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _callbacks.POOL.ensure_started()
    with _cancel_lock:
        _user_cancel = fn
    _native.set_tool_cancel_handler(_on_tool_cancel)


def unregister_tool_cancel_handler() -> None:
    """Removes the process-wide `tools.cancel` subscriber."""
    global _user_cancel
    with _cancel_lock:
        _user_cancel = None


def register_chat_handler(handler: Callable[[str], None]) -> None:
    """Serves the daemon's `agent.chat` reverse calls (the agent side of `agents.chat`)
    with `handler`, for every `CarRuntime` of the process; replaces any earlier one.

    A runtime bound to an agent identity (`CAR_AGENT_ID` and `CAR_AGENT_TOKEN` in the
    environment when it is created) gets one `agent.chat` per host `agents.chat`. The
    client acks `{accepted: true}` first, then calls `handler(params_json)` with
    `{session_id, prompt, stream?, model?, attachments?, goal?, context?}` on a
    CAR-owned worker thread (never the native module's threads), one turn at a time. Run
    the turn inline: the handler may call any runtime method, and streams the reply with
    `runtime.chat_event(session_id, "token", delta)` on the runtime serving the turn (the
    client routes the turn's own events into it).

    The turn ends with exactly one terminal event, sent when the handler returns: the
    first `done` / `error` it emitted with `chat_event` (`delta` is the final text or the
    error; it wins over whatever the handler did after), else `error` with the exception
    when it raised, else `done` with an empty `text` (the reply is the streamed tokens). A
    turn the host cancelled ends with `done {finish_reason: "cancelled"}`.
    """
    if not callable(handler):
        raise TypeError(f"handler must be callable, got {type(handler).__name__}")
    _callbacks.POOL.ensure_started()
    _native.set_chat_handler(handler)


def unregister_chat_handler() -> None:
    """Removes the chat handler: later `agent.chat` calls are refused (`-32601`), so the
    daemon learns this agent no longer chats. A turn already running finishes."""
    _native.set_chat_handler(None)


class CarRuntime(GeneratedMethods):
    """A client of the local `car-server` daemon.

    `url` defaults to `CAR_DAEMON_URL`, else the daemon's local socket or
    `ws://127.0.0.1:9100`; `token` to `CAR_AUTH_TOKEN`, else the daemon's token file;
    `memory_namespace` to `set_memory_namespace()`, else `CAR_MEMORY_NAMESPACE`. The
    connection opens on the first call and reopens on the next call after it dropped or
    was closed.

    The typed members (`add_fact`, `list_tools`, …) and the JSON-string wrappers
    (`memory_add_fact(params_json)`, …) are generated from the daemon's method contract
    into `GeneratedMethods`; what is written here is the bridge and the members that take
    callbacks. The `host` methods are `HostClient(runtime)`'s (CAR's rule: they stay off
    `CarRuntime`), except `remove_model`, which CAR's `CarRuntime` has.
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
        from . import _multi

        _multi.attach(self)

    def __repr__(self) -> str:
        state = "connected" if self._native.connected else "not connected"
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

    def _call_member(self, method: str, member: str, args: List[Any]) -> Any:
        """What every generated typed member calls: the shared client checks `args`
        against the contract, builds the params, calls, and projects the result."""
        return self._native.call_member(method, member, args)

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

    def connection_epoch(self) -> int:
        """Connects if needed and returns the connection's epoch: a number that changes
        whenever a new daemon session is established (after `close()`, or after a
        reconnect following a daemon restart), when per-connection state (tools,
        policies, state) starts afresh."""
        return self._native.connection_epoch()

    def close(self) -> None:
        """Drops the connection (a pending call fails with `ClientClosedError`); a later
        call reconnects. Handlers registered on the runtime stay. Idempotent."""
        self._native.disconnect()

    def disconnect(self) -> None:
        """The same as `close()`."""
        self._native.disconnect()

    def __enter__(self) -> CarRuntime:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- members that take callbacks ------------------------------------------------

    def submit_proposal(self, proposal_json: str, session_id: Optional[str] = None) -> str:
        """Runs a proposal; its tool calls go to the process-wide tool handler. Raises
        `RefusedError` at once when none is registered."""
        if not _native.has_tool_handler():
            raise RefusedError(
                "no tool handler registered: call car_runtime.register_tool_handler "
                "first, or use execute_proposal"
            )
        params: Dict[str, Any] = {"proposal": _load("proposal_json", proposal_json)}
        if session_id is not None:
            params["session_id"] = session_id
        return self._native.call("proposal.submit", json.dumps(params), None)

    def execute_proposal(
        self, proposal_json: str, tool_fn: ToolFn, session_id: Optional[str] = None
    ) -> str:
        """Registers the proposal's tools and runs it, sending its tool calls to
        `tool_fn(call_json)` or `tool_fn(tool, params_json)`; returns the result JSON."""
        adapted = adapt_tool_fn(tool_fn)
        _callbacks.POOL.ensure_started()
        return self._native.execute_proposal(proposal_json, adapted, session_id)

    def infer_stream(
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

        params: Dict[str, Any] = {"prompt": prompt}
        if model is not None:
            params["model"] = model
        if max_tokens is not None:
            params["params"] = {"max_tokens": max_tokens}
        result = self._native.call_streaming("infer_stream", json.dumps(params), forward, None)
        on_event(json.dumps({"type": "done"}))
        return result


def _load(field: str, text: str) -> Any:
    """`text` decoded, or `InvalidArgumentError` naming `field` (nothing is sent)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{field} must be a JSON string, got {type(text).__name__}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"{field} is not valid JSON: {e}") from None
