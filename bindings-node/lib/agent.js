'use strict'
// `runAgent`'s config: CAR's `AgentLoopConfig` with the package's camelCase option names,
// checked and turned into the wire shape the shared Rust loop reads
// (`car_daemon_client::AgentConfig`, snake_case), and its `tools` map turned into the one
// tool function the native run calls (src/client.rs `runAgent`).
//
// The loop itself (tool registration with `finish`, `runs.start` / `runs.complete`, infer
// with tools, verify, execute, observe) is not here: it runs in car-daemon-client, the same
// code the Python binding runs.

const { InvalidArgumentError } = require('./errors.js')
const { describe, wrapRequestHandler } = require('./callbacks.js')

// camelCase option → CAR's field name, and the check its value must pass.
const FIELDS = {
  agentId: ['agent_id', 'string?'],
  agentName: ['agent_name', 'name'],
  identity: ['identity', 'string'],
  toolSchemas: ['tool_schemas', 'objects'],
  policies: ['policies', 'policies'],
  defaultModel: ['default_model', 'string?'],
  maxTokens: ['max_tokens', 'count'],
  maxTurns: ['max_turns', 'count'],
  targetOutcome: ['target_outcome', 'string?'],
  toolChoice: ['tool_choice', 'string?'],
  temperature: ['temperature', 'number?'],
  parallelToolCalls: ['parallel_tool_calls', 'boolean?'],
}
// Read by `runAgent` itself, never sent.
const LOCAL = new Set(['tools', 'runtime'])
const SNAKE = Object.fromEntries(Object.entries(FIELDS).map(([camel, [snake]]) => [snake, camel]))

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)

function checkValue(key, check, value) {
  const absent = value === undefined || value === null
  switch (check) {
    case 'name':
      if (typeof value !== 'string' || value.length === 0) {
        throw new InvalidArgumentError(`config.${key} must be a non-empty string, got ${describe(value)}`)
      }
      return value
    case 'string':
      if (typeof value !== 'string') throw new InvalidArgumentError(`config.${key} must be a string, got ${describe(value)}`)
      return value
    case 'string?':
      if (absent) return undefined
      if (typeof value !== 'string') throw new InvalidArgumentError(`config.${key} must be a string, got ${describe(value)}`)
      return value
    case 'boolean?':
      if (absent) return undefined
      if (typeof value !== 'boolean') throw new InvalidArgumentError(`config.${key} must be a boolean, got ${describe(value)}`)
      return value
    case 'number?':
      if (absent) return undefined
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        throw new InvalidArgumentError(`config.${key} must be a finite number, got ${describe(value)}`)
      }
      return value
    case 'policies':
      // CAR's Node shape: `[name, rule, target?, key?, pattern?, valueJson?]` tuples (the
      // arguments of `registerPolicy`); `PolicyDefinition` objects are taken as they are.
      if (absent) return undefined
      if (!Array.isArray(value)) throw new InvalidArgumentError(`config.${key} must be an array, got ${describe(value)}`)
      return value.map((p, i) => {
        if (isPlainObject(p)) return p
        if (!Array.isArray(p) || p.length < 2 || p.length > 6 || !p.every((x) => x === null || x === undefined || typeof x === 'string')) {
          throw new InvalidArgumentError(`config.${key}[${i}] must be a PolicyDefinition object or a [name, rule, target?, key?, pattern?, valueJson?] tuple of strings, got ${describe(p)}`)
        }
        const [name, rule, target, k, pattern, valueJson] = p
        const out = { name, rule }
        if (target != null) out.target = target
        if (k != null) out.key = k
        if (pattern != null) out.pattern = pattern
        if (valueJson != null) {
          try {
            out.value = JSON.parse(valueJson)
          } catch (err) {
            throw new InvalidArgumentError(`config.${key}[${i}][5] (valueJson) is not JSON: ${err.message}`)
          }
        }
        return out
      })
    case 'objects':
      if (absent) return undefined
      if (!Array.isArray(value) || !value.every(isPlainObject)) {
        throw new InvalidArgumentError(`config.${key} must be an array of objects, got ${describe(value)}`)
      }
      return value
    case 'count':
      if (absent) return undefined
      if (typeof value !== 'number' || !Number.isInteger(value)) {
        throw new InvalidArgumentError(`config.${key} must be an integer, got ${describe(value)}`)
      }
      if (value < 1 || value > 0xffffffff) throw new RangeError(`config.${key} must be between 1 and 2^32 - 1, got ${value}`)
      return value
    default:
      throw new Error(`unknown check ${check}`)
  }
}

/**
 * Checks `config` and returns `{wire, tools, runtime}`: the JSON object for the native run
 * (CAR's field names; absent optional fields left out so the loop's defaults apply), the
 * `tools` map (every value a function) and the `runtime` option as given.
 */
function agentConfig(config) {
  if (!isPlainObject(config)) throw new TypeError(`config must be an object, got ${describe(config)}`)
  const wire = {}
  for (const key of Object.keys(config)) {
    if (LOCAL.has(key)) continue
    const field = FIELDS[key]
    if (field === undefined) {
      const hint = SNAKE[key] ? `: runAgent's config keys are camelCase (${SNAKE[key]})` : ''
      throw new TypeError(`unknown config key ${key}${hint}; expected ${[...Object.keys(FIELDS), ...LOCAL].join(', ')}`)
    }
  }
  for (const [key, [snake, check]] of Object.entries(FIELDS)) {
    const value = checkValue(key, check, config[key])
    if (value !== undefined) wire[snake] = value
  }
  const tools = config.tools === undefined || config.tools === null ? {} : config.tools
  if (!isPlainObject(tools)) throw new TypeError(`config.tools must be an object mapping tool names to functions, got ${describe(tools)}`)
  for (const [name, fn] of Object.entries(tools)) {
    if (typeof fn !== 'function') throw new TypeError(`tools.${name} must be a function, got ${describe(fn)}`)
  }
  return { wire, tools, runtime: config.runtime }
}

/**
 * The native run's tool function (an envelope-returning async function, see
 * lib/callbacks.js): a call goes to `tools[call.tool]` with the call's parameters, or, when
 * the function declares two or more parameters, with the parameters and CAR's
 * `AgentToolContext` (`{signal, timeoutMs}`: an AbortSignal aborted when the daemon sends
 * `tools.cancel` for the call, and its budget) beside the call's own fields (`tool, params,
 * action_id, request_id, timeout_ms, session_id, attempt`). What it
 * returns (or its Promise resolves to), as JSON, is what the model observes (`undefined` is
 * `null`); a throw, a rejection, a value JSON cannot represent or a call for a tool with no
 * function fails that action, and the model observes the error.
 */
// `request_id` → the AbortController of a tool call in flight.
const inFlight = new Map()

/** Aborts the tool call the daemon cancelled (`tools.cancel`), if one is in flight. */
function abortToolCall(requestId) {
  const controller = inFlight.get(requestId)
  if (controller) controller.abort(new Error(`the daemon cancelled tool call ${requestId}`))
}

function toolDispatcher(tools) {
  const names = Object.keys(tools)
  return wrapRequestHandler(async (callJson) => {
    const call = JSON.parse(callJson)
    const name = call.tool
    if (!Object.hasOwn(tools, name)) {
      const known = names.length === 0 ? 'it has none' : `it has ${names.join(', ')}`
      throw new Error(`no function for tool ${JSON.stringify(name)} in config.tools (${known})`)
    }
    const fn = tools[name]
    const params = call.params === undefined || call.params === null ? {} : call.params
    let out
    if (fn.length >= 2) {
      // CAR's `AgentToolContext` (`signal`, `timeoutMs`) beside the call's own fields.
      const requestId = typeof call.request_id === 'string' ? call.request_id : JSON.stringify(call.request_id)
      const controller = new AbortController()
      inFlight.set(requestId, controller)
      const context = { ...call, signal: controller.signal, timeoutMs: call.timeout_ms ?? undefined }
      try {
        out = await fn(params, context)
      } finally {
        inFlight.delete(requestId)
      }
    } else {
      out = await fn(params)
    }
    if (out === undefined) return 'null'
    let text
    try {
      text = JSON.stringify(out)
    } catch (err) {
      throw new TypeError(`tools.${name} returned a value that is not JSON-serialisable: ${err.message}`)
    }
    if (text === undefined) throw new TypeError(`tools.${name} returned a ${typeof out}, which is not JSON-serialisable`)
    return text
  }, 'agent tool')
}

module.exports = { abortToolCall, agentConfig, toolDispatcher }
