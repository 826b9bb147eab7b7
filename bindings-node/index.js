'use strict'
// `car-runtime` for Node.js: the idiomatic layer over the native addon (`native.js`, built
// by `npm run build` from src/). The addon owns the protocol (through car-daemon-client);
// this file owns what cannot be generated: `CarRuntime`'s bridge (`daemonCall`, handlers,
// `connectionEpoch`, `close`), the members that take callbacks (`submitProposal`,
// `executeProposal`, `inferStream`), `Symbol.asyncDispose`, the process-wide handlers
// (tools, tool cancels; chat in lib/chat.js; the multi-agent runner and CAR's `run*`
// functions in lib/multi.js), `HostClient` (lib/host.js), and `runAgent` (CAR's agent loop,
// which runs in the shared Rust client; lib/agent.js adapts its config).
// Every typed member (`addFact`, …) and JSON-string wrapper (`memoryAddFact`, …) is
// generated from the daemon's method contract into `generated.js`; a typed member calls
// the native `callMember`, which builds the params and projects the result in the shared
// Rust client. Structured results are JSON strings (docs/protocol-choices.md, "Bindings"), so the native ABI
// stays stable as daemon shapes grow.

const native = require('./native.js')
const errors = require('./lib/errors.js')
const calls = require('./lib/calls.js')
const { CALL_MEMBER } = require('./lib/typed.js')
const { registerChatHandler, unregisterChatHandler } = require('./lib/chat.js')
const { hostClientOf } = require('./lib/host.js')
const { attachRuntime, registerAgentRunner, unregisterAgentRunner, multiRunners } = require('./lib/multi.js')
const { abortToolCall, agentConfig, toolDispatcher } = require('./lib/agent.js')
const {
  GENERATED_METHODS,
  TYPED_MEMBERS,
  HOST_GENERATED_METHODS,
  HOST_TYPED_MEMBERS,
  MODULE_FUNCTIONS,
  installGenerated,
  moduleFunctions,
} = require('./generated.js')
const {
  describe,
  reportListenerError,
  requireFunction,
  streamSink,
  wrapListener,
  wrapRequestHandler,
  wrapToolFunction,
} = require('./lib/callbacks.js')

const { CarError, InvalidArgumentError, TerminalToolError } = errors

// Every client failure the addon reports becomes one of the classes above.
native.setErrorFactory(errors.fromErrorObject)

let defaultMemoryNamespace = null

// The key of `CarRuntime`'s native agent run, which `runAgent` calls (not public API).
const RUN_AGENT = Symbol('car-runtime.runAgent')

// ---- argument checks of the hand-written members (a TypeError naming the argument) ----

function requireString(name, value) {
  if (typeof value !== 'string' || value.length === 0) {
    throw new InvalidArgumentError(`${name} must be a non-empty string, got ${describe(value)}`)
  }
  return value
}

function optionalString(name, value) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') throw new InvalidArgumentError(`${name} must be a string, got ${describe(value)}`)
  return value
}

function optionalInteger(name, value, min) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new InvalidArgumentError(`${name} must be an integer, got ${describe(value)}`)
  }
  if (value < min) throw new RangeError(`${name} must be at least ${min}, got ${value}`)
  return value
}

function parseJsonArg(name, text) {
  if (typeof text !== 'string') throw new InvalidArgumentError(`${name} must be a JSON string, got ${describe(text)}`)
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new InvalidArgumentError(`${name} is not valid JSON: ${err.message}`)
  }
}

// ---- process-wide handlers ----

/**
 * Registers the process-wide `tools.execute` handler used by `submitProposal` and by any
 * tool call not made by an `executeProposal` run: `fn(callJson)` or `fn(tool, paramsJson)`
 * returning (a Promise of) the result JSON.
 */
function registerToolHandler(fn) {
  native.setToolHandler(wrapToolFunction(fn, 'tool handler'))
}

function unregisterToolHandler() {
  native.clearToolHandler()
}

// `tools.cancel` reaches one native listener: it aborts the `runAgent` tool call it names
// (lib/agent.js watches them) and then calls the program's own listener, if any.
let userCancelListener = null
function onToolCancel(requestId) {
  abortToolCall(requestId)
  if (userCancelListener) userCancelListener(requestId)
}
function installCancelListener() {
  native.setToolCancelHandler(onToolCancel)
}

/** Registers the process-wide `tools.cancel` listener: `fn(requestId)`. */
function registerToolCancelHandler(fn) {
  userCancelListener = wrapListener(fn, 'tool cancel handler')
  installCancelListener()
}

function unregisterToolCancelHandler() {
  userCancelListener = null
}

/** The memory namespace given to runtimes constructed later without their own. */
function setMemoryNamespace(ns) {
  defaultMemoryNamespace = ns === null || ns === undefined ? null : requireString('ns', ns)
}

function getMemoryNamespace() {
  return defaultMemoryNamespace
}

class CarRuntime {
  #native

  /**
   * @param {{url?: string, token?: string, memoryNamespace?: string}} [options]
   *   Explicit settings win over `CAR_DAEMON_URL`, `CAR_AUTH_TOKEN` / the token file and
   *   `CAR_MEMORY_NAMESPACE`. Nothing connects until the first call.
   */
  constructor(options = {}) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new TypeError(`options must be an object, got ${describe(options)}`)
    }
    const known = new Set(['url', 'token', 'memoryNamespace'])
    for (const key of Object.keys(options)) {
      if (!known.has(key)) throw new TypeError(`unknown option ${key}: expected url, token or memoryNamespace`)
    }
    const given = (name) => (options[name] === undefined || options[name] === null ? undefined : requireString(name, options[name]))
    const url = given('url')
    const token = given('token')
    const ns = given('memoryNamespace') ?? defaultMemoryNamespace
    this.#native = new native.NativeRuntime(url ?? null, token ?? null, ns ?? null)
    this.#native.setCompletion(calls.settle)
    attachRuntime(this)
  }

  // ---- bridge ----

  /** Calls any daemon method; resolves to the result JSON. `timeoutMs` overrides the wait. */
  daemonCall(method, paramsJson = '{}', options = undefined) {
    // Not `async`: the native call's Promise is returned as is (an async wrapper would add
    // a Promise and its ticks to every call); bad arguments still reject, never throw.
    let timeoutMs
    try {
      requireString('method', method)
      if (typeof paramsJson !== 'string') throw new InvalidArgumentError(`paramsJson must be a JSON string, got ${describe(paramsJson)}`)
      timeoutMs = optionalInteger('timeoutMs', options && options.timeoutMs, 1)
    } catch (err) {
      return Promise.reject(err)
    }
    const rt = this.#native
    return calls.start((id) => rt.startCall(id, method, paramsJson, timeoutMs ?? null))
  }

  /** Calls a host-management method over the connection authenticated with the host token. */
  async daemonCallHostManagement(method, paramsJson = '{}') {
    requireString('method', method)
    if (typeof paramsJson !== 'string') throw new InvalidArgumentError(`paramsJson must be a JSON string, got ${describe(paramsJson)}`)
    return this.#native.callHostManagement(method, paramsJson)
  }

  /**
   * What every generated typed member calls: the arguments in declaration order
   * (`undefined` for an absent optional one); the shared client checks them against the
   * contract, builds the params, calls, and projects the result.
   */
  async [CALL_MEMBER](method, member, args) {
    const rt = this.#native
    const given = args.map((a) => (a === undefined ? null : a))
    return calls.start((id) => rt.startMember(id, method, member, given))
  }

  /** Serves daemon→client requests named `method`: `fn(paramsJson)` → (a Promise of) result JSON. */
  registerDaemonHandler(method, fn) {
    requireString('method', method)
    requireFunction(fn, 'handler')
    this.#native.registerHandler(method, wrapRequestHandler(fn, `handler for ${method}`))
  }

  unregisterDaemonHandler(method) {
    this.#native.unregisterHandler(requireString('method', method))
  }

  /** Receives notifications named `method`, one at a time in arrival order: `fn(paramsJson)`. */
  registerDaemonNotificationHandler(method, fn) {
    requireString('method', method)
    this.#native.registerNotificationHandler(method, wrapListener(fn, `notification handler for ${method}`))
  }

  unregisterDaemonNotificationHandler(method) {
    this.#native.unregisterNotificationHandler(requireString('method', method))
  }

  /**
   * Connects if needed and resolves to the connection's epoch: a number that changes
   * whenever a new daemon session is established (after `close()`, or after a reconnect
   * following a daemon restart), when per-connection state (tools, policies, state) starts
   * afresh.
   */
  async connectionEpoch() {
    return this.#native.connectionEpoch()
  }

  /**
   * Drops the connection (pending calls reject as closed); a later call reconnects.
   * Handlers registered on the runtime stay. Idempotent.
   */
  close() {
    this.#native.disconnect()
  }

  /** The same as `close()`. */
  disconnect() {
    this.#native.disconnect()
  }

  async [Symbol.asyncDispose]() {
    this.close()
  }

  get isConnected() {
    return this.#native.isConnected
  }

  // ---- members that take callbacks ----

  /** Submits a proposal whose tool calls go to the process-wide tool handler. */
  async submitProposal(proposalJson, sessionId = undefined) {
    const proposal = parseJsonArg('proposalJson', proposalJson)
    const session = optionalString('sessionId', sessionId)
    if (!native.hasToolHandler()) {
      throw new CarError('no tool handler registered: call registerToolHandler() before submitProposal()', 'refused')
    }
    const params = session === undefined ? { proposal } : { proposal, session_id: session }
    return this.daemonCall('proposal.submit', JSON.stringify(params))
  }

  /**
   * Runs a proposal whose tool calls go to `toolFn(callJson)` (or `toolFn(tool, paramsJson)`),
   * which returns (a Promise of) the result JSON. The proposal's tools are registered first.
   */
  async executeProposal(proposalJson, toolFn, sessionId = undefined) {
    if (typeof proposalJson !== 'string') throw new InvalidArgumentError(`proposalJson must be a JSON string, got ${describe(proposalJson)}`)
    const wrapped = wrapToolFunction(toolFn, 'toolFn')
    const session = optionalString('sessionId', sessionId)
    return this.#native.executeProposal(proposalJson, session ?? null, wrapped)
  }

  /**
   * Streams a generation: `onEvent(eventJson)` gets `{type:"text",data}`, `{type:"usage",…}`,
   * `{type:"stop_reason",data}` and finally `{type:"done"}`; resolves to the result JSON.
   * Every `onEvent` call has run (and any Promise it returned has settled) before the
   * Promise settles. Concurrent streams on one runtime each get only their own events.
   * If `onEvent` throws (or its Promise rejects), it is not called again (no `done`), the
   * generation still runs to its end, and the Promise rejects with that error.
   */
  inferStream(prompt, onEvent, model = undefined, maxTokens = undefined) {
    let body
    let sink
    try {
      sink = streamSink(onEvent, 'onEvent')
      const request = { prompt: requireString('prompt', prompt) }
      const m = optionalString('model', model)
      if (m !== undefined) request.model = m
      const max = optionalInteger('maxTokens', maxTokens, 1)
      if (max !== undefined) request.params = { max_tokens: max }
      body = JSON.stringify(request)
    } catch (err) {
      return Promise.reject(err)
    }
    return this.#stream('infer_stream', body, sink)
  }

  /** `runAgent`'s native run: `configJson` in CAR's wire shape, `toolFn` from `toolDispatcher`. */
  async [RUN_AGENT](configJson, goal, maxTurns, toolFn) {
    return this.#native.runAgent(configJson, goal, maxTurns ?? null, toolFn)
  }

  /** Runs one streaming call whose events go to `sink` (see `streamSink`). */
  async #stream(method, body, sink) {
    let result
    try {
      // Settles only after `sink.forward` has run for every event of this call.
      result = await this.#native.callStreaming(method, body, sink.forward)
    } catch (err) {
      await sink.settled()
      if (sink.failure !== null) reportListenerError('onEvent', sink.failure.error)
      throw err
    }
    await sink.settled()
    sink.deliver({ type: 'done' })
    await sink.settled()
    if (sink.failure !== null) throw sink.failure.error
    return result
  }
}

// Every typed member and JSON-string wrapper of the contract whose name is not hand-written
// above (the `host` methods' are HostClient's).
installGenerated(CarRuntime.prototype)

const HostClient = hostClientOf(CarRuntime)
const multi = multiRunners(CarRuntime)

/** `rt.executeProposal(proposalJson, toolFn, sessionId)` as a function. */
function executeProposal(rt, proposalJson, toolFn, sessionId = undefined) {
  if (!(rt instanceof CarRuntime)) return Promise.reject(new TypeError(`rt must be a CarRuntime, got ${describe(rt)}`))
  return rt.executeProposal(proposalJson, toolFn, sessionId)
}

/**
 * Runs CAR's agent loop on `goal` and resolves to CAR's `AgentOutcome` (`{run_id, status,
 * summary, evidence, metrics: {turns, tool_calls, actions_succeeded, actions_failed},
 * tools_called, timestamp}`). `config` is CAR's `AgentLoopConfig` with camelCase keys
 * (`agentId`, `agentName`, `identity`, `toolSchemas`, `policies`, `defaultModel`,
 * `maxTokens`, `maxTurns`, `targetOutcome`), plus `tools` (tool name → `fn(params)` or
 * `fn(params, call)`, chosen by `fn.length`, returning (a Promise of) the JSON value the
 * model observes; a throw fails that action) and `runtime` (a `CarRuntime` to run on;
 * without it one is created and closed around the run). `maxTurns` overrides
 * `config.maxTurns`. The loop itself runs in the shared Rust client (see lib/agent.js).
 */
async function runAgent(config, goal, maxTurns = undefined) {
  const { wire, tools, runtime } = agentConfig(config)
  requireString('goal', goal)
  const turns = optionalInteger('maxTurns', maxTurns, 1)
  if (turns !== undefined && turns > 0xffffffff) throw new RangeError(`maxTurns must be at most 2^32 - 1, got ${turns}`)
  if (runtime !== undefined && runtime !== null && !(runtime instanceof CarRuntime)) {
    throw new TypeError(`config.runtime must be a CarRuntime, got ${describe(runtime)}`)
  }
  const owned = runtime === undefined || runtime === null
  const rt = owned ? new CarRuntime() : runtime
  try {
    installCancelListener()
    return JSON.parse(await rt[RUN_AGENT](JSON.stringify(wire), goal, turns, toolDispatcher(tools)))
  } finally {
    if (owned) rt.close()
  }
}

function protocolVersion() {
  return native.protocolVersion()
}

function clientVersion() {
  return native.clientVersion()
}

module.exports = {
  version: native.clientVersion(),
  CarRuntime,
  HostClient,
  CarError,
  DaemonRpcError: errors.DaemonRpcError,
  DaemonConnectionError: errors.DaemonConnectionError,
  DaemonTimeoutError: errors.DaemonTimeoutError,
  InvalidArgumentError,
  TerminalToolError,
  GENERATED_METHODS,
  TYPED_MEMBERS,
  HOST_GENERATED_METHODS,
  HOST_TYPED_MEMBERS,
  protocolVersion,
  clientVersion,
  executeProposal,
  runAgent,
  registerToolHandler,
  unregisterToolHandler,
  registerToolCancelHandler,
  unregisterToolCancelHandler,
  registerChatHandler,
  unregisterChatHandler,
  registerAgentRunner,
  unregisterAgentRunner,
  ...multi,
  // CAR's package-level functions (`agentsStart(id)`, `scheduleTask(specJson)`, …), each on
  // a short-lived runtime; generated from the contract.
  MODULE_FUNCTIONS,
  ...moduleFunctions(() => new CarRuntime()),
  setMemoryNamespace,
  getMemoryNamespace,
}
