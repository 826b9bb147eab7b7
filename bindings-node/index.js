'use strict'
// `car-runtime` for Node.js: the idiomatic layer over the native addon (`native.js`, built
// by `npm run build` from src/). The addon owns the protocol (through car-daemon-client);
// this file owns the JavaScript surface: `CarRuntime` with lowerCamelCase members returning
// Promises, the generated wrappers (`generated.js`, from the method table), argument
// checks, error classes and callback wrapping. Structured results are JSON strings
// (bindings-api.md), so the native ABI stays stable as daemon shapes grow.

const native = require('./native.js')
const { GENERATED_METHODS, installGenerated } = require('./generated.js')
const errors = require('./lib/errors.js')
const {
  describe,
  reportListenerError,
  requireFunction,
  streamSink,
  wrapListener,
  wrapRequestHandler,
  wrapToolFunction,
} = require('./lib/callbacks.js')

const { CarError, TerminalToolError, translateError } = errors

let defaultMemoryNamespace = null

// ---- argument checks (bad input → a TypeError naming the argument) ----

function requireString(name, value) {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string, got ${describe(value)}`)
  }
  return value
}

function optionalString(name, value) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') throw new TypeError(`${name} must be a string, got ${describe(value)}`)
  return value
}

function optionalNumber(name, value, { integer = false, min = undefined } = {}) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'number' || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new TypeError(`${name} must be ${integer ? 'an integer' : 'a finite number'}, got ${describe(value)}`)
  }
  if (min !== undefined && value < min) throw new RangeError(`${name} must be at least ${min}, got ${value}`)
  return value
}

function stringArray(name, value, { optional = false } = {}) {
  if (optional && (value === undefined || value === null)) return undefined
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new TypeError(`${name} must be an array of strings, got ${describe(value)}`)
  }
  return value
}

function parseJsonArg(name, text, { optional = false } = {}) {
  if (optional && (text === undefined || text === null)) return undefined
  if (typeof text !== 'string') throw new TypeError(`${name} must be a JSON string, got ${describe(text)}`)
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new TypeError(`${name} is not valid JSON: ${err.message}`)
  }
}

/** Drops `undefined` fields so optional arguments are omitted from the params. */
function params(fields) {
  const out = {}
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v
  return JSON.stringify(out)
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

/** Registers the process-wide `tools.cancel` listener: `fn(requestId)`. */
function registerToolCancelHandler(fn) {
  native.setToolCancelHandler(wrapListener(fn, 'tool cancel handler'))
}

function unregisterToolCancelHandler() {
  native.clearToolCancelHandler()
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
    const url = optionalString('url', options.url)
    const token = optionalString('token', options.token)
    const ns = optionalString('memoryNamespace', options.memoryNamespace) ?? defaultMemoryNamespace
    try {
      this.#native = new native.NativeRuntime(url ?? null, token ?? null, ns ?? null)
    } catch (err) {
      throw translateError(err)
    }
  }

  // ---- bridge ----

  /** Calls any daemon method; resolves to the result JSON. `timeoutMs` overrides the wait. */
  async daemonCall(method, paramsJson = '{}', options = undefined) {
    requireString('method', method)
    if (typeof paramsJson !== 'string') throw new TypeError(`paramsJson must be a JSON string, got ${describe(paramsJson)}`)
    const timeoutMs = optionalNumber('timeoutMs', options && options.timeoutMs, { integer: true, min: 1 })
    try {
      return await this.#native.call(method, paramsJson, timeoutMs ?? null)
    } catch (err) {
      throw translateError(err)
    }
  }

  /** Calls a host-management method over the connection authenticated with the host token. */
  async daemonCallHostManagement(method, paramsJson = '{}') {
    requireString('method', method)
    if (typeof paramsJson !== 'string') throw new TypeError(`paramsJson must be a JSON string, got ${describe(paramsJson)}`)
    try {
      return await this.#native.callHostManagement(method, paramsJson)
    } catch (err) {
      throw translateError(err)
    }
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

  /** Drops the connection; the next call reconnects. Handlers stay registered. */
  disconnect() {
    this.#native.disconnect()
  }

  /** Closes for good (idempotent); releases every handler registered on this runtime. */
  close() {
    this.#native.close()
  }

  async [Symbol.asyncDispose]() {
    this.close()
  }

  get isClosed() {
    return this.#native.isClosed
  }

  get isConnected() {
    return this.#native.isConnected
  }

  // ---- discovery ----

  async serverSchema() {
    return this.daemonCall('server.schema')
  }

  async capabilities() {
    return this.daemonCall('capabilities.list')
  }

  // ---- state ----

  async stateSet(key, valueJson, tenant = undefined) {
    const value = parseJsonArg('valueJson', valueJson)
    await this.daemonCall('state.set', params({ key: requireString('key', key), value, tenant_id: optionalString('tenant', tenant) }))
  }

  async stateGet(key, tenant = undefined) {
    return this.daemonCall('state.get', params({ key: requireString('key', key), tenant_id: optionalString('tenant', tenant) }))
  }

  async stateExists(key, tenant = undefined) {
    const out = await this.daemonCall('state.exists', params({ key: requireString('key', key), tenant_id: optionalString('tenant', tenant) }))
    return JSON.parse(out) === true
  }

  async stateKeys(tenant = undefined) {
    return JSON.parse(await this.daemonCall('state.keys', params({ tenant_id: optionalString('tenant', tenant) })))
  }

  async stateSnapshot(tenant = undefined) {
    return this.daemonCall('state.snapshot', params({ tenant_id: optionalString('tenant', tenant) }))
  }

  // ---- memory ----

  async addFact(subject, body, kind = undefined, confidence = undefined, factId = undefined, tags = undefined, source = undefined) {
    const out = await this.daemonCall('memory.add_fact', params({
      subject: requireString('subject', subject),
      body: requireString('body', body),
      kind: optionalString('kind', kind),
      confidence: optionalNumber('confidence', confidence),
      fact_id: optionalString('factId', factId),
      tags: stringArray('tags', tags, { optional: true }),
      source: optionalString('source', source),
    }))
    return JSON.parse(out)
  }

  async factCount() {
    return JSON.parse(await this.daemonCall('memory.fact_count'))
  }

  async queryFacts(query, k = undefined) {
    return this.daemonCall('memory.query', params({ query: requireString('query', query), k: optionalNumber('k', k, { integer: true }) }))
  }

  async buildContext(query, modelContextWindow = undefined) {
    const out = await this.daemonCall('memory.build_context', params({
      query: requireString('query', query),
      model_context_window: optionalNumber('modelContextWindow', modelContextWindow, { integer: true }),
    }))
    return JSON.parse(out).context
  }

  async consolidate() {
    return this.daemonCall('memory.consolidate')
  }

  async persistMemory(path) {
    return JSON.parse(await this.daemonCall('memory.persist', params({ path: requireString('path', path) })))
  }

  async loadMemory(path) {
    return JSON.parse(await this.daemonCall('memory.load', params({ path: requireString('path', path) })))
  }

  // ---- skills ----

  async ingestSkill(name, code, platform, persona, urlPattern, taskKeywords, description, supersedes = undefined) {
    const out = await this.daemonCall('skill.ingest', params({
      name: requireString('name', name),
      code: requireString('code', code),
      platform: requireString('platform', platform),
      persona: requireString('persona', persona),
      url_pattern: requireString('urlPattern', urlPattern),
      task_keywords: stringArray('taskKeywords', taskKeywords),
      description: requireString('description', description),
      supersedes: optionalString('supersedes', supersedes),
    }))
    return JSON.parse(out)
  }

  /** Resolves to a JSON array of matches (best first), or `"null"` when nothing matches. */
  async findSkill(persona = undefined, url = undefined, task = undefined, maxResults = undefined) {
    const out = await this.daemonCall('skill.find', params({
      persona: optionalString('persona', persona),
      url: optionalString('url', url),
      task: optionalString('task', task),
      max_results: optionalNumber('maxResults', maxResults, { integer: true }),
    }))
    const rows = JSON.parse(out)
    return Array.isArray(rows) && rows.length === 0 ? 'null' : out
  }

  async reportOutcome(name, outcome) {
    return this.daemonCall('skill.report', params({ name: requireString('name', name), outcome: requireString('outcome', outcome) }))
  }

  async listSkills(domain = undefined) {
    return this.daemonCall('skills.list', params({ domain: optionalString('domain', domain) }))
  }

  // ---- tools and policies ----

  async registerTool(name) {
    await this.daemonCall('tools.register', params({ name: requireString('name', name) }))
  }

  /** Registers one descriptor `{name, description?, parameters?}` or an array of them. */
  async registerToolSchema(schemaJson) {
    const schema = parseJsonArg('schemaJson', schemaJson)
    await this.daemonCall('tools.register', JSON.stringify(schema))
  }

  async listTools() {
    return this.daemonCall('tools.list')
  }

  async unregisterTool(name) {
    return JSON.parse(await this.daemonCall('tools.unregister', params({ name: requireString('name', name) })))
  }

  /** `rule` is `deny_tool`, `deny_tool_param` or `require_state`. */
  async registerPolicy(name, rule, target = undefined, key = undefined, pattern = undefined, valueJson = undefined, sessionId = undefined) {
    await this.daemonCall('policy.register', params({
      name: requireString('name', name),
      rule: requireString('rule', rule),
      target: optionalString('target', target),
      key: optionalString('key', key),
      pattern: optionalString('pattern', pattern),
      value: parseJsonArg('valueJson', valueJson, { optional: true }),
      session_id: optionalString('sessionId', sessionId),
    }))
  }

  async unregisterPolicy(name) {
    return JSON.parse(await this.daemonCall('policy.unregister', params({ name: requireString('name', name) })))
  }

  async listPolicies() {
    return this.daemonCall('policy.list')
  }

  // ---- proposals ----

  async verifyProposal(proposalJson) {
    return this.daemonCall('verify', params({ proposal: parseJsonArg('proposalJson', proposalJson) }))
  }

  /** Submits a proposal whose tool calls go to the process-wide tool handler. */
  async submitProposal(proposalJson, sessionId = undefined) {
    const proposal = parseJsonArg('proposalJson', proposalJson)
    const session = optionalString('sessionId', sessionId)
    if (!native.hasToolHandler()) {
      throw new CarError('no tool handler registered: call registerToolHandler() before submitProposal()', 'refused')
    }
    return this.daemonCall('proposal.submit', params({ proposal, session_id: session }))
  }

  /**
   * Runs a proposal whose tool calls go to `toolFn(callJson)` (or `toolFn(tool, paramsJson)`),
   * which returns (a Promise of) the result JSON. The proposal's tools are registered first.
   */
  async executeProposal(proposalJson, toolFn, sessionId = undefined) {
    if (typeof proposalJson !== 'string') throw new TypeError(`proposalJson must be a JSON string, got ${describe(proposalJson)}`)
    const wrapped = wrapToolFunction(toolFn, 'toolFn')
    const session = optionalString('sessionId', sessionId)
    try {
      return await this.#native.executeProposal(proposalJson, session ?? null, wrapped)
    } catch (err) {
      throw translateError(err)
    }
  }

  // ---- events and runs ----

  async eventCount() {
    return JSON.parse(await this.daemonCall('events.count'))
  }

  async eventQuery(queryJson = '{}') {
    parseJsonArg('queryJson', queryJson)
    return this.daemonCall('events.query', queryJson)
  }

  async runsStart(paramsJson) {
    parseJsonArg('paramsJson', paramsJson)
    return this.daemonCall('runs.start', paramsJson)
  }

  async runsComplete(paramsJson) {
    parseJsonArg('paramsJson', paramsJson)
    return this.daemonCall('runs.complete', paramsJson)
  }

  // ---- inference ----

  async infer(prompt, model = undefined, maxTokens = undefined) {
    return JSON.parse(await this.inferTracked(prompt, model, maxTokens)).text
  }

  async inferTracked(prompt, model = undefined, maxTokens = undefined, context = undefined, toolsJson = undefined, messagesJson = undefined) {
    return this.daemonCall('infer', params({
      prompt: requireString('prompt', prompt),
      model: optionalString('model', model),
      max_tokens: optionalNumber('maxTokens', maxTokens, { integer: true, min: 1 }),
      context: optionalString('context', context),
      tools: parseJsonArg('toolsJson', toolsJson, { optional: true }),
      messages: parseJsonArg('messagesJson', messagesJson, { optional: true }),
    }))
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
      body = params({
        prompt: requireString('prompt', prompt),
        model: optionalString('model', model),
        max_tokens: optionalNumber('maxTokens', maxTokens, { integer: true, min: 1 }),
      })
    } catch (err) {
      return Promise.reject(err)
    }
    return this.#stream('infer_stream', body, sink)
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
      throw translateError(err)
    }
    await sink.settled()
    sink.deliver({ type: 'done' })
    await sink.settled()
    if (sink.failure !== null) throw sink.failure.error
    return result
  }

  async embed(texts, model = undefined) {
    return this.daemonCall('embed', params({ texts: stringArray('texts', texts), model: optionalString('model', model) }))
  }

  /** `[{label, score}]`, best first (the daemon's `scores`). */
  async classify(text, labels, model = undefined) {
    const reply = await this.daemonCall('classify', params({
      text: requireString('text', text),
      labels: stringArray('labels', labels),
      model: optionalString('model', model),
    }))
    return JSON.stringify(JSON.parse(reply).scores)
  }

  async listModels() {
    return this.daemonCall('models.list')
  }

  async tokenize(model, text) {
    return this.daemonCall('tokenize', params({ model: requireString('model', model), text: requireString('text', text) }))
  }

  async detokenize(model, tokensJson) {
    return this.daemonCall('detokenize', params({ model: requireString('model', model), tokens: parseJsonArg('tokensJson', tokensJson) }))
  }
}

// One wrapper per method-table row whose name is not hand-written above.
installGenerated(CarRuntime.prototype)

/** `rt.executeProposal(proposalJson, toolFn, sessionId)` as a function. */
function executeProposal(rt, proposalJson, toolFn, sessionId = undefined) {
  if (!(rt instanceof CarRuntime)) return Promise.reject(new TypeError(`rt must be a CarRuntime, got ${describe(rt)}`))
  return rt.executeProposal(proposalJson, toolFn, sessionId)
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
  CarError,
  DaemonRpcError: errors.DaemonRpcError,
  DaemonConnectionError: errors.DaemonConnectionError,
  DaemonTimeoutError: errors.DaemonTimeoutError,
  TerminalToolError,
  GENERATED_METHODS,
  protocolVersion,
  clientVersion,
  executeProposal,
  registerToolHandler,
  unregisterToolHandler,
  registerToolCancelHandler,
  unregisterToolCancelHandler,
  setMemoryNamespace,
  getMemoryNamespace,
}
