"""The Python-owned threads that run every callback the daemon triggers.

Tool handlers, `execute_proposal` tool functions, daemon handlers and notification
handlers never run on the native module's tokio threads. The native side queues each
callback as a job; the worker threads here wait for jobs with the GIL released
(`_native.next_callback`) and run them. The pool keeps one idle worker ready: a worker
that takes a job starts a replacement first when none is idle, so callbacks run
concurrently (parallel tool calls, a callback that waits on another callback) up to
`MAX_WORKERS`. Idle workers beyond the first retire after `IDLE_SECONDS`.

After `os.fork()` the child has none of the parent's threads; the pool forgets them and
starts afresh on first use.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from typing import Callable, Union

from . import _native

MAX_WORKERS = 64
IDLE_SECONDS = 30.0

ToolFn = Union[Callable[[str], str], Callable[[str, str], str]]


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0
        self._idle = 0
        self._serial = 0

    def ensure_started(self) -> None:
        with self._lock:
            if self._total == 0:
                self._spawn_locked()

    def _spawn_locked(self) -> None:
        self._total += 1
        self._idle += 1
        self._serial += 1
        t = threading.Thread(
            target=self._work, name=f"car-runtime-callback-{self._serial}", daemon=True
        )
        try:
            t.start()
        except BaseException:
            self._total -= 1
            self._idle -= 1
            raise

    def _work(self) -> None:
        while True:
            job = _native.next_callback(IDLE_SECONDS)
            with self._lock:
                if job is None:
                    if self._total > 1:
                        self._total -= 1
                        self._idle -= 1
                        return
                    continue
                self._idle -= 1
                if self._idle == 0 and self._total < MAX_WORKERS:
                    self._spawn_locked()
            try:
                job.run()
            finally:
                with self._lock:
                    self._idle += 1

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._total = 0
        self._idle = 0

    def counts(self) -> tuple[int, int]:
        """(workers, idle workers), for tests."""
        with self._lock:
            return self._total, self._idle


POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL._after_fork_in_child)


def _positional_arity(fn: Callable[..., object]) -> int:
    """How many positional arguments `fn` requires (2 when it takes *args)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    required = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return max(required, 1)
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            required += 1
    return required


def adapt_tool_fn(tool_fn: ToolFn) -> Callable[[str], str]:
    """A `call_json -> result_json` function from a one-argument (`call_json`) or
    two-argument (`tool, params_json`) tool function."""
    if not callable(tool_fn):
        raise TypeError(f"tool_fn must be callable, got {type(tool_fn).__name__}")
    arity = _positional_arity(tool_fn)
    if arity == 2:
        two: Callable[[str, str], str] = tool_fn  # type: ignore[assignment]

        def call_two(call_json: str) -> str:
            call = json.loads(call_json)
            return two(call["tool"], json.dumps(call["params"]))

        return call_two
    if arity == 1:
        return tool_fn  # type: ignore[return-value]
    raise TypeError(
        "tool_fn must take one argument (call_json) or two (tool, params_json), "
        f"it takes {arity}"
    )
