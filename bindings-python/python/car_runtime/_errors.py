"""The exceptions `car_runtime` raises, one class per kind of failure.

- `DaemonRpcError`: the daemon answered and said no; carries its JSON-RPC `code`,
  `message` and decoded `data`.
- `DaemonConnectionError` (a `ConnectionError`): the connection could not be opened or
  broke; `HandshakeError` and `ClientClosedError` are kinds of it.
- `DaemonTimeoutError` (a `TimeoutError`): the client stopped waiting.
- `RefusedError` (a `ValueError`): the client refused the call before sending it.
- `InternalError`: a bug in the native module (a Rust panic), raised as an ordinary
  `Exception`.
- `TerminalToolError`: raised by a tool callback to tell the daemon a retry cannot help.

No client-side failure carries an invented JSON-RPC code. The `_…` factories are what
the native module calls to build these.
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


class InternalError(CarRuntimeError):
    """A defect inside the native module (a Rust panic), caught at the boundary."""


class TerminalToolError(Exception):
    """Raise from a tool callback to mark the failure terminal (`error.data.terminal`).

    The daemon then stops retrying the action, and halts the session as the execution
    engine specifies.
    """


def _decode(data_json: Optional[str]) -> Any:
    return None if data_json is None else json.loads(data_json)


def _rpc_error(code: int, message: str, data_json: Optional[str]) -> DaemonRpcError:
    return DaemonRpcError(code, message, _decode(data_json))


def _connection_error(message: str) -> DaemonConnectionError:
    return DaemonConnectionError(message)


def _closed_error(message: str) -> ClientClosedError:
    return ClientClosedError(message)


def _handshake_error(message: str, code: Optional[int], data_json: Optional[str]) -> HandshakeError:
    return HandshakeError(message, code, _decode(data_json))


def _timeout_error(message: str, method: str, after_ms: int) -> DaemonTimeoutError:
    return DaemonTimeoutError(message, method, after_ms)


def _refused_error(message: str) -> RefusedError:
    return RefusedError(message)


def _internal_error(message: str) -> InternalError:
    return InternalError(message)
