'use strict'
// The error classes of `car-runtime`, and the factory the native addon calls to build them.
//
// One taxonomy (docs/protocol-choices.md, "Bindings"): the daemon said no → `DaemonRpcError` with `.code`, `.message`
// and `.data` exactly as the daemon sent them (role refusals carry `data.reason`); the
// connection broke, was closed or failed its handshake → `DaemonConnectionError` (no
// `.code`); the client stopped waiting → `DaemonTimeoutError` (no `.code`); an argument
// that cannot be sent → `InvalidArgumentError` (a `TypeError`); a client-side refusal or
// a result a typed member cannot project → `CarError` with `kind` `refused` /
// `unexpected_result`. The native addon hands every client failure to `fromErrorObject`
// as a structured object (src/error.rs) and rejects with the instance it returns, so no
// message text is ever parsed. A JSON-RPC code is only attached when the daemon sent one.

/** Base class of every error this package raises for a failed daemon interaction. */
class CarError extends Error {
  constructor(message, kind) {
    super(message)
    this.name = new.target.name
    /** `rpc`, `transport`, `closed`, `handshake`, `timeout`, `refused` or `unexpected_result`. */
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

/** An argument cannot be sent (nothing was sent): JSON text that is not JSON, a wrong type. */
class InvalidArgumentError extends TypeError {
  constructor(message) {
    super(message)
    this.name = 'InvalidArgumentError'
    this.kind = 'invalid_argument'
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

/** The error for one client error object `{kind, message, code?, data?, refusal?, method?, afterMs?}`. */
function fromErrorObject(e) {
  switch (e.kind) {
    case 'rpc':
      return new DaemonRpcError(e.code, e.message, e.data)
    case 'transport':
    case 'closed':
      return new DaemonConnectionError(e.message, e.kind)
    case 'handshake':
      return new DaemonConnectionError(e.message, 'handshake', e.refusal === undefined ? null : e.refusal)
    case 'timeout':
      return new DaemonTimeoutError(e.message, e.method, e.afterMs)
    case 'invalid_argument':
      return new InvalidArgumentError(e.message)
    case 'unexpected_result': {
      const err = new CarError(e.message, 'unexpected_result')
      err.method = e.method
      return err
    }
    default:
      return new CarError(e.message, e.kind)
  }
}

module.exports = {
  CarError,
  DaemonConnectionError,
  DaemonRpcError,
  DaemonTimeoutError,
  InvalidArgumentError,
  TerminalToolError,
  fromErrorObject,
}
