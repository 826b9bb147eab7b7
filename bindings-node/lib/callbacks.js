'use strict'
// Wrapping user callbacks before they reach the native addon (src/callbacks.rs).
//
// A request handler (daemon handler, tool handler, execute-proposal tool function) is
// wrapped into an async function that never throws: it resolves to `"r" + resultJson`, or to
// `"e" + {message, code?, data?, terminal}` when the user function threw, rejected or
// returned something that is not a string. Rust awaits that Promise and answers the daemon,
// so an async handler is awaited and a throwing one produces an error reply, never a crash.
// A notification listener is wrapped so a throw (or a rejected Promise) is reported as a
// process warning instead of becoming an uncaught exception. The chat handler is wrapped
// by `wrapChatHandler` (its outcome ends the turn). A stream's event callback
// (`inferStream`'s `onEvent`) is wrapped by `streamSink`, which keeps its first failure for
// the stream's Promise to reject with.

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

/**
 * CAR's chat handler `fn(paramsJson)` (returning nothing, or a Promise) → the
 * envelope-returning async function the native chat bridge awaits: `"rnull"` once it
 * returned (or its Promise resolved), `"e" + {message: "<name>: <message>"}` when it threw
 * or rejected (also reported as a process warning): the turn's error.
 */
function wrapChatHandler(fn) {
  requireFunction(fn, 'chat handler')
  return async (paramsJson) => {
    try {
      await fn(paramsJson)
      return 'rnull'
    } catch (err) {
      reportListenerError('chat handler', err)
      const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err)
      return 'e' + JSON.stringify({ message, terminal: false })
    }
  }
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

/**
 * The JavaScript end of one streaming call (`src/client.rs` `callStreaming`).
 *
 * `forward(paramsJson)` is what the native layer calls, in order, with each of the call's
 * `inference.stream.event` params and finally `null` (the end-of-stream marker the native
 * call waits for before it settles); it never throws. Each notification's `event` object is
 * handed to `onEvent(eventJson)`; `deliver(event)` hands it a client-side event (`done`).
 * The first failure of `onEvent` (a throw, or a rejection of the Promise it returned) is
 * kept in `failure` and `onEvent` is not called again. `settled()` resolves once every
 * Promise `onEvent` returned has settled.
 */
function streamSink(onEvent, what) {
  requireFunction(onEvent, what)
  let failure = null
  const pending = []
  const fail = (error) => {
    if (failure === null) failure = { error }
  }
  const deliver = (event) => {
    if (failure !== null) return
    try {
      const out = onEvent(JSON.stringify(event))
      if (out && typeof out.then === 'function') pending.push(Promise.resolve(out).then(undefined, fail))
    } catch (err) {
      fail(err)
    }
  }
  return {
    forward(paramsJson) {
      if (paramsJson === null) return
      let event
      try {
        event = JSON.parse(paramsJson).event
      } catch (err) {
        fail(err)
        return
      }
      if (event !== undefined && event !== null) deliver(event)
    },
    deliver,
    async settled() {
      while (pending.length > 0) await Promise.all(pending.splice(0))
    },
    get failure() {
      return failure
    },
  }
}

module.exports = {
  describe,
  reportListenerError,
  requireFunction,
  streamSink,
  wrapChatHandler,
  wrapListener,
  wrapRequestHandler,
  wrapToolFunction,
}
