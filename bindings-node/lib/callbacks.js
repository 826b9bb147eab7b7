'use strict'
// Wrapping user callbacks before they reach the native addon (src/callbacks.rs).
//
// A request handler (daemon handler, tool handler, execute-proposal tool function) is
// wrapped into an async function that never throws: it resolves to `"r" + resultJson`, or to
// `"e" + {message, code?, data?, terminal}` when the user function threw, rejected or
// returned something that is not a string. Rust awaits that Promise and answers the daemon,
// so an async handler is awaited and a throwing one produces an error reply, never a crash.
// A notification listener is wrapped so a throw (or a rejected Promise) is reported as a
// process warning instead of becoming an uncaught exception.

const { TerminalToolError } = require('./errors.js')

function describe(value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'object' ? 'an object' : typeof value
}

function encodeFailure(err) {
  const failure = {
    message: err instanceof Error ? err.message : String(err),
    terminal: err instanceof TerminalToolError,
  }
  // A handler may choose its JSON-RPC code (an integer `.code`); Node's string codes such
  // as `ENOENT` are not JSON-RPC codes and stay in the message only.
  if (err && Number.isInteger(err.code)) failure.code = err.code
  if (err && err.data !== undefined) failure.data = err.data
  try {
    return 'e' + JSON.stringify(failure)
  } catch {
    delete failure.data
    failure.message += ' (error data was not JSON-serialisable)'
    return 'e' + JSON.stringify(failure)
  }
}

function requireFunction(fn, name) {
  if (typeof fn !== 'function') throw new TypeError(`${name} must be a function, got ${describe(fn)}`)
}

/** `fn(argJson) => string | Promise<string>` → the envelope-returning async function. */
function wrapRequestHandler(fn, what) {
  return async (argJson) => {
    try {
      const out = await fn(argJson)
      if (typeof out !== 'string') {
        return encodeFailure(new TypeError(`${what} must return a JSON string, got ${describe(out)}`))
      }
      return 'r' + out
    } catch (err) {
      return encodeFailure(err)
    }
  }
}

/**
 * A tool function gets `callJson` (`{tool, params, action_id, request_id, timeout_ms,
 * session_id, attempt}`); one declared with two parameters gets `(tool, paramsJson)`.
 */
function wrapToolFunction(fn, what) {
  requireFunction(fn, what)
  if (fn.length >= 2) {
    return wrapRequestHandler((callJson) => {
      const call = JSON.parse(callJson)
      return fn(call.tool, JSON.stringify(call.params))
    }, what)
  }
  return wrapRequestHandler(fn, what)
}

function reportListenerError(what, err) {
  const detail = err instanceof Error ? err.stack || err.message : String(err)
  process.emitWarning(`${what} threw: ${detail}`, { code: 'CAR_RUNTIME_HANDLER' })
}

/** `fn(paramsJson)` → a listener that never throws into the native layer. */
function wrapListener(fn, what) {
  requireFunction(fn, what)
  return (paramsJson) => {
    try {
      const out = fn(paramsJson)
      if (out && typeof out.then === 'function') out.then(undefined, (e) => reportListenerError(what, e))
    } catch (err) {
      reportListenerError(what, err)
    }
  }
}

module.exports = { describe, requireFunction, wrapListener, wrapRequestHandler, wrapToolFunction }
