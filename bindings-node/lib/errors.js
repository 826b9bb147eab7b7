'use strict'
// The error classes of `car-runtime` and the translation of the native layer's tagged
// errors into them. One taxonomy (DESIGN.md): the daemon said no → `DaemonRpcError` with
// `.code`, `.message`, `.data`; the connection broke, was closed or failed its handshake →
// `DaemonConnectionError` (no `.code`); the client stopped waiting → `DaemonTimeoutError`
// (no `.code`); a bad argument → `TypeError`. A JSON-RPC code is only ever attached when
// the daemon sent one.

/** Prefix of the structured messages the native addon rejects with (src/errors.rs). */
const ERROR_TAG = 'car-error:'

/** Base class of every error this package raises for a failed daemon interaction. */
class CarError extends Error {
  constructor(message, kind) {
    super(message)
    this.name = new.target.name
    /** `rpc`, `transport`, `closed`, `handshake`, `timeout` or `refused`. */
    this.kind = kind
  }
}

/** The daemon answered with a JSON-RPC error. */
class DaemonRpcError extends CarError {
  constructor(code, message, data) {
    super(message, 'rpc')
    this.code = code
    this.data = data === undefined ? null : data
  }
}

/** The connection could not be opened, broke mid-call, failed its handshake, or was closed. */
class DaemonConnectionError extends CarError {
  constructor(message, kind = 'transport', detail = undefined) {
    super(message, kind)
    if (detail !== undefined) this.detail = detail
  }
}

/** The client stopped waiting for an answer (a late answer is dropped). */
class DaemonTimeoutError extends CarError {
  constructor(message, method, afterMs) {
    super(message, 'timeout')
    this.method = method
    this.afterMs = afterMs
  }
}

/**
 * Throw it (or reject with it) from a tool handler to mark the failure terminal: the reply
 * carries `error.data.terminal = true`, the daemon stops retrying, rolls the proposal's
 * state writes back and halts the session.
 */
class TerminalToolError extends Error {
  constructor(message, options = undefined) {
    super(message, options)
    this.name = 'TerminalToolError'
    if (options && options.data !== undefined) this.data = options.data
  }
}

/** Maps an error from the native addon to the public classes; other errors pass through. */
function translateError(err) {
  if (!err || typeof err.message !== 'string' || !err.message.startsWith(ERROR_TAG)) return err
  let body
  try {
    body = JSON.parse(err.message.slice(ERROR_TAG.length))
  } catch {
    return err
  }
  switch (body.kind) {
    case 'rpc':
      return new DaemonRpcError(body.code, body.message, body.data)
    case 'transport':
    case 'closed':
      return new DaemonConnectionError(body.message, body.kind)
    case 'handshake':
      return new DaemonConnectionError(body.message, 'handshake', body.data && body.data.rpc)
    case 'timeout':
      return new DaemonTimeoutError(body.message, body.method, body.after_ms)
    case 'invalid_argument':
      return new TypeError(body.message)
    default:
      return new CarError(body.message, body.kind)
  }
}

module.exports = {
  CarError,
  DaemonConnectionError,
  DaemonRpcError,
  DaemonTimeoutError,
  TerminalToolError,
  translateError,
}
