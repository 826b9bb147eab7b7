"""The exceptions `car_runtime` raises, one class per kind of failure.

- `DaemonRpcError`: the daemon answered and said no; carries its JSON-RPC `code`,
  `message` and decoded `data`.
- `DaemonConnectionError` (a `ConnectionError`): the connection could not be opened or
  broke; `HandshakeError` and `ClientClosedError` are kinds of it.
- `DaemonTimeoutError` (a `TimeoutError`): the client stopped waiting.
- `RefusedError` (a `ValueError`): the client refused the call before sending it.
- `InvalidArgumentError` (a `RefusedError` and a `TypeError`): an argument cannot be sent
  (JSON text that is not JSON, a typed member's argument of the wrong type).
- `UnexpectedResultError` (a `TypeError`): the daemon's answer is not what the typed
  member returns (`memory.add_fact returned a non-integer: null`).
- `InternalError`: a bug in the native module (a Rust panic), raised as an ordinary
  `Exception`.
- `TerminalToolError`: raised by a tool callback to tell the daemon a retry cannot help.

No client-side failure carries an invented JSON-RPC code. `_from_report` is what the
native module calls to build these, from the shared client's one structured error
report; the daemon's `data` (with `data.reason` on refusals) is passed through as decoded.
"""

from __future__ import annotations

import json
from typing import Any, Optional


class CarRuntimeError(Exception):
    """Base class of every exception `car_runtime` raises (except `TerminalToolError`)."""


class DaemonRpcError(CarRuntimeError):
    """The daemon rejected the call with a JSON-RPC error."""

    code: int
    message: str
    data: Any

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} (code {self.code})"


class DaemonConnectionError(CarRuntimeError, ConnectionError):
    """The connection to the daemon could not be opened or broke during the call."""


class HandshakeError(DaemonConnectionError):
    """`session.auth` or `server.handshake` failed, so the connection was not used.

    `code` and `data` are the daemon's JSON-RPC error when it answered with one.
    """

    code: Optional[int]
    data: Any

    def __init__(self, message: str, code: Optional[int] = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class ClientClosedError(DaemonConnectionError):
    """The runtime was closed (or disconnected while the call was pending)."""


class DaemonTimeoutError(CarRuntimeError, TimeoutError):
    """The client gave up waiting for the daemon's answer."""

    method: str
    after_ms: int

    def __init__(self, message: str, method: str, after_ms: int) -> None:
        super().__init__(message)
        self.method = method
        self.after_ms = after_ms


class RefusedError(CarRuntimeError, ValueError):
    """The client refused the call before sending anything (a usage error)."""


class InvalidArgumentError(RefusedError, TypeError):
    """An argument cannot be sent: JSON text that is not JSON, or a typed member's
    argument of the wrong type. Nothing was sent."""


class UnexpectedResultError(CarRuntimeError, TypeError):
    """The daemon answered, but not with what the typed member returns."""

    method: str

    def __init__(self, message: str, method: str) -> None:
        super().__init__(message)
        self.method = method


class InternalError(CarRuntimeError):
    """A defect inside the native module (a Rust panic), caught at the boundary."""


class TerminalToolError(Exception):
    """Raise from a tool callback to mark the failure terminal (`error.data.terminal`).

    The daemon then stops retrying the action, and halts the session as the execution
    engine specifies.
    """


def _decode(data_json: Optional[str]) -> Any:
    return None if data_json is None else json.loads(data_json)


def _from_report(
    kind: str,
    message: str,
    code: Optional[int],
    data_json: Optional[str],
    refusal_code: Optional[int],
    refusal_data_json: Optional[str],
    method: Optional[str],
    after_ms: Optional[int],
) -> CarRuntimeError:
    """The exception for one client error report (`car_daemon_client::ErrorReport`)."""
    if kind == "rpc" and code is not None:
        return DaemonRpcError(code, message, _decode(data_json))
    if kind == "closed":
        return ClientClosedError(message)
    if kind == "handshake":
        return HandshakeError(message, refusal_code, _decode(refusal_data_json))
    if kind == "timeout":
        return DaemonTimeoutError(message, method or "", after_ms or 0)
    if kind == "invalid_argument":
        return InvalidArgumentError(message)
    if kind == "refused":
        return RefusedError(message)
    if kind == "unexpected_result":
        return UnexpectedResultError(message, method or "")
    return DaemonConnectionError(message)


def _internal_error(message: str) -> InternalError:
    return InternalError(message)
