'use strict'
// `runAgent` (CAR's agent loop, run by the shared Rust client) against a real daemon, with
// a scripted OpenAI-compatible server as the model (test/support/scripted_openai.js): one-
// and two-parameter and async tool functions, the tool's output observed by the model,
// CAR's `AgentOutcome`, the run's trace, failing and missing tools observed as errors,
// `maxTurns`, a runtime created and closed around the run, and configs refused up front.

const assert = require('node:assert/strict')
const { after, before, test } = require('node:test')

const { startDaemon, sleep } = require('./support/daemon.js')
const { startScriptedModel } = require('./support/scripted_openai.js')
const car = require('..')

let daemon
let model
let rt

before(async () => {
  daemon = await startDaemon()
  model = await startScriptedModel()
  rt = new car.CarRuntime()
  // A remote endpoint is registered by a host session (the daemon sends an endpoint's key
  // to its URL, so only a host picks one).
  const registered = await daemon.hostCall('models.register', { id: 'scripted', base_url: model.url, model: 'm' })
  assert.equal(registered.registered, true)
})

after(async () => {
  rt.close()
  await model.close()
  await daemon.dispose()
})

const ADD_SCHEMA = {
  name: 'add',
  description: 'add two numbers',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
}

function config(tools, extra = {}) {
  return {
    agentName: 'calc',
    identity: 'You are a calculator.',
    toolSchemas: [ADD_SCHEMA],
    tools,
    defaultModel: 'scripted',
    maxTokens: 64,
    maxTurns: 4,
    runtime: rt,
    ...extra,
  }
}

/** The id the scripted model gives the call of its next request. */
const nextCallId = () => `call_${model.requests.length + 1}`

/** The requests the model received since `from` (an index into `model.requests`). */
const requestsSince = (from) => model.requests.slice(from)

test('runAgent runs the shared loop: the tool runs with the model\'s arguments, the model observes its output, finish ends the run', async () => {
  const from = model.requests.length
  const firstId = nextCallId()
  const seen = []
  const outcome = await car.runAgent(
    config(
      {
        add(params) {
          seen.push(params)
          return { sum: params.a + params.b }
        },
      },
      { agentId: 'node-calc', targetOutcome: 'the sum' },
    ),
    'add 2 and 3',
  )
  assert.equal(outcome.status, 'success', JSON.stringify(outcome))
  assert.equal(outcome.summary, 'the sum is 5')
  assert.deepEqual(outcome.tools_called, ['add', 'finish'])
  assert.deepEqual(seen, [{ a: 2, b: 3 }])
  assert.deepEqual(outcome.metrics, { turns: 2, tool_calls: 2, actions_succeeded: 2, actions_failed: 0 })
  assert.match(outcome.run_id, /^run-/)
  assert.match(outcome.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  assert.deepEqual(outcome.evidence, [{ kind: 'tool_result', description: 'finish called', data: { answer: 'the sum is 5' } }])

  // The config reached the model in CAR's request: identity as the system prompt, the
  // tool schemas plus `finish`, maxTokens; the tool's output linked to its call.
  const [first, second, ...rest] = requestsSince(from)
  assert.deepEqual(rest, [])
  assert.match(first.messages[0].content, /^You are a calculator\./)
  assert.deepEqual(first.messages[1], { role: 'user', content: 'add 2 and 3' })
  assert.deepEqual(first.tools.map((t) => t.function.name), ['add', 'finish'])
  assert.deepEqual(first.tools[0].function.parameters, ADD_SCHEMA.parameters)
  assert.equal(first.max_tokens, 64)
  const observed = second.messages.filter((m) => m.role === 'tool')
  assert.equal(observed.length, 1)
  assert.equal(observed[0].tool_call_id, firstId)
  assert.deepEqual(JSON.parse(observed[0].content), { sum: 5 })

  // The run is recorded: its trace (read by a host session; CAR's rule lets only a host
  // session or one bound to the run's agent read it, so this unbound session is refused).
  const refused = await rt.runsGetTrace(JSON.stringify({ run_id: outcome.run_id })).catch((e) => e)
  assert.ok(refused instanceof car.DaemonRpcError, String(refused))
  assert.deepEqual(refused.data, { reason: 'not_owner' })
  const trace = JSON.parse(await rt.daemonCallHostManagement('runs.get_trace', JSON.stringify({ run_id: outcome.run_id })))
  assert.equal(trace.run.agent_id, 'node-calc')
  assert.equal(trace.run.agent_name, 'calc')
  assert.equal(trace.run.status, 'completed')
  assert.deepEqual(
    trace.records.map((r) => r.record),
    ['started', 'model_turn', 'turn', 'model_turn', 'ended'],
    JSON.stringify(trace),
  )
  const [started, addTurn, toolTurn, finishTurn, completed] = trace.records
  assert.deepEqual([started.intent, started.outcome_description], ['add 2 and 3', 'the sum'])
  assert.equal(addTurn.model_id, 'scripted')
  assert.deepEqual(addTurn.requested_tool_calls, [{ id: firstId, name: 'add', arguments: { a: 2, b: 3 } }])
  assert.deepEqual([toolTurn.tool, toolTurn.status, toolTurn.output], ['add', 'succeeded', { sum: 5 }])
  assert.equal(finishTurn.requested_tool_calls[0].name, 'finish')
  const { run_id: _runId, ...recorded } = outcome
  assert.deepEqual(completed.outcome, recorded)
})

test('a two-parameter tool gets the call; an async tool is awaited; maxTurns overrides the config', async () => {
  const calls = []
  const callId = nextCallId()
  const withCall = await car.runAgent(
    config({
      add(params, call) {
        calls.push(call)
        return { sum: params.a + params.b }
      },
    }),
    'add 2 and 3',
  )
  assert.equal(withCall.status, 'success', JSON.stringify(withCall))
  assert.equal(withCall.summary, 'the sum is 5')
  assert.equal(calls.length, 1)
  const [call] = calls
  assert.equal(call.tool, 'add')
  assert.deepEqual(call.params, { a: 2, b: 3 })
  assert.equal(call.action_id, callId)
  assert.equal(call.attempt, 1)
  assert.equal(typeof call.session_id, 'string')
  assert.ok(call.request_id !== null && call.request_id !== undefined)

  let settled = false
  const asyncRun = await car.runAgent(
    config({
      add: async ({ a, b }) => {
        await sleep(30)
        settled = true
        return { sum: a + b }
      },
    }),
    'add 2 and 3',
  )
  assert.equal(settled, true)
  assert.equal(asyncRun.status, 'success', JSON.stringify(asyncRun))
  assert.equal(asyncRun.summary, 'the sum is 5', 'the awaited value is what the model observed')
  assert.notEqual(asyncRun.run_id, withCall.run_id)

  // One turn (the config says four): the model's add call runs, then the turns are out.
  let ran = 0
  const counted = ({ a, b }) => {
    ran += 1
    return { sum: a + b }
  }
  const short = await car.runAgent(config({ add: counted }), 'add 2 and 3', 1)
  assert.equal(short.status, 'give_up', JSON.stringify(short))
  assert.equal(short.summary, '')
  assert.equal(short.metrics.turns, 1)
  assert.deepEqual(short.tools_called, ['add'])
  assert.equal(ran, 1)
})

test('a two-parameter tool gets CAR\'s context: the schema\'s timeoutMs, and a signal the daemon\'s tools.cancel aborts; policy tuples are registered', async () => {
  const seen = {}
  const heard = []
  car.registerToolCancelHandler((id) => heard.push(id))
  try {
    const outcome = await car.runAgent(
      config(
        {
          add: async (params, ctx) => {
            seen.timeoutMs = ctx.timeoutMs
            seen.tool = ctx.tool
            // The daemon gives up after 300 ms and sends tools.cancel; the guard only keeps
            // a broken build from hanging the suite.
            seen.aborted = await new Promise((resolve) => {
              const guard = setTimeout(() => resolve(false), 60000)
              ctx.signal.addEventListener('abort', () => {
                clearTimeout(guard)
                resolve(true)
              })
            })
            return { sum: params.a + params.b }
          },
        },
        { toolSchemas: [{ ...ADD_SCHEMA, timeoutMs: 300 }], policies: [['no-shell', 'deny_tool', 'shell']] },
      ),
      'add 2 and 3',
    )
    assert.deepEqual(seen, { timeoutMs: 300, tool: 'add', aborted: true })
    assert.equal(outcome.status, 'success', JSON.stringify(outcome))
    assert.match(outcome.summary, /^the tool failed: .*exceeded its timeout_ms \(300ms\)/)
    assert.equal(heard.length, 1, 'the program\'s own tools.cancel listener heard it too')
  } finally {
    car.unregisterToolCancelHandler()
  }
  const policies = JSON.parse(await rt.daemonCall('policy.list', '{}'))
  assert.ok(policies.policies.some((p) => p.name === 'no-shell'), JSON.stringify(policies))
  await assert.rejects(
    car.runAgent(config({}, { policies: [['only-a-name']] }), 'x'),
    /config\.policies\[0\] must be a PolicyDefinition object or a \[name, rule/,
  )
})

test('a tool that throws, a tool with no function and a result JSON cannot hold fail that action; the model observes the error and the run ends', async () => {
  let attempts = 0
  const broken = await car.runAgent(
    config({
      add() {
        attempts += 1
        throw new Error('the adder is broken')
      },
    }),
    'add 2 and 3',
  )
  assert.equal(broken.status, 'success', JSON.stringify(broken))
  assert.equal(broken.summary, 'the tool failed: the adder is broken')
  assert.deepEqual(broken.tools_called, ['add', 'finish'])
  assert.deepEqual(broken.metrics, { turns: 2, tool_calls: 2, actions_succeeded: 1, actions_failed: 1 })
  assert.equal(attempts, 1)
  const observed = JSON.parse(model.requests.at(-1).messages.find((m) => m.role === 'tool').content)
  assert.deepEqual(observed, { error: 'the adder is broken', status: 'failed' })

  const rejected = await car.runAgent(config({ add: async () => Promise.reject(new Error('async adder broken')) }), 'add 2 and 3')
  assert.equal(rejected.summary, 'the tool failed: async adder broken')

  const missing = await car.runAgent(config({ mul: () => 0 }), 'add 2 and 3')
  assert.equal(missing.status, 'success', JSON.stringify(missing))
  assert.equal(missing.summary, 'the tool failed: no function for tool "add" in config.tools (it has mul)')
  assert.equal(missing.metrics.actions_failed, 1)
  const none = await car.runAgent(config(undefined), 'add 2 and 3')
  assert.equal(none.summary, 'the tool failed: no function for tool "add" in config.tools (it has none)')

  const unserialisable = await car.runAgent(config({ add: () => ({ sum: 5n }) }), 'add 2 and 3')
  assert.match(unserialisable.summary, /^the tool failed: tools\.add returned a value that is not JSON-serialisable/)
})

test('without config.runtime, runAgent creates a runtime and closes it after the run, also after a failed one', async () => {
  // This process's discovery points at the daemon (startDaemon), where the model is
  // registered for every session. `close` is watched to see which runtimes it closed.
  const closed = []
  const close = car.CarRuntime.prototype.close
  car.CarRuntime.prototype.close = function watchedClose() {
    closed.push(this)
    return close.call(this)
  }
  try {
    const owned = await car.runAgent(config({ add: ({ a, b }) => ({ sum: a + b }) }, { runtime: undefined }), 'add 2 and 3')
    assert.equal(owned.status, 'success', JSON.stringify(owned))
    assert.equal(owned.summary, 'the sum is 5')
    assert.equal(closed.length, 1)
    assert.ok(closed[0] !== rt && closed[0] instanceof car.CarRuntime)
    assert.equal(closed[0].isConnected, false)
    const trace = JSON.parse(await rt.daemonCallHostManagement('runs.get_trace', JSON.stringify({ run_id: owned.run_id })))
    assert.equal(trace.run.status, 'completed')

    // A run that fails (a model the daemon does not have) rejects, and its runtime is closed.
    const failed = car.runAgent(config({}, { runtime: null, defaultModel: 'no-such-model' }), 'add 2 and 3')
    await assert.rejects(failed, (err) => err instanceof car.DaemonRpcError && err.code === -32602 && /model not found: no-such-model/.test(err.message))
    assert.equal(closed.length, 2)
    assert.ok(closed[1] !== rt && closed[1] !== closed[0])

    // A given runtime is the caller's: used, not closed.
    await car.runAgent(config({ add: ({ a, b }) => ({ sum: a + b }) }), 'add 2 and 3')
    assert.equal(closed.length, 2)
    assert.equal(rt.isConnected, true)
  } finally {
    car.CarRuntime.prototype.close = close
  }
})

test('bad configs and arguments are refused before anything is sent', async () => {
  const from = model.requests.length
  const add = ({ a, b }) => ({ sum: a + b })
  const refusals = [
    [() => car.runAgent(config({ add: 'not a function' }), 'x'), TypeError, /^tools\.add must be a function, got string$/],
    [() => car.runAgent(config({ add, sub: null }), 'x'), TypeError, /^tools\.sub must be a function, got null$/],
    [() => car.runAgent(config([add]), 'x'), TypeError, /^config\.tools must be an object mapping tool names to functions, got an array$/],
    [() => car.runAgent(null, 'x'), TypeError, /^config must be an object, got null$/],
    [() => car.runAgent({ ...config({ add }), agent_name: 'calc' }, 'x'), TypeError, /^unknown config key agent_name: runAgent's config keys are camelCase \(agentName\)/],
    [() => car.runAgent({ ...config({ add }), topK: 1 }, 'x'), TypeError, /^unknown config key topK; expected agentId, agentName, identity/],
    [() => car.runAgent(config({ add }, { temperature: 'hot' }), 'x'), car.InvalidArgumentError, /^config\.temperature must be a finite number, got string$/],
    [() => car.runAgent({ ...config({ add }), agentName: undefined }, 'x'), car.InvalidArgumentError, /^config\.agentName must be a non-empty string, got undefined$/],
    [() => car.runAgent({ ...config({ add }), identity: 7 }, 'x'), car.InvalidArgumentError, /^config\.identity must be a string, got number$/],
    [() => car.runAgent(config({ add }, { maxTurns: 'many' }), 'x'), car.InvalidArgumentError, /^config\.maxTurns must be an integer, got string$/],
    [() => car.runAgent(config({ add }, { maxTokens: 0 }), 'x'), RangeError, /^config\.maxTokens must be between 1 and/],
    [() => car.runAgent(config({ add }, { toolSchemas: ['add'] }), 'x'), car.InvalidArgumentError, /^config\.toolSchemas must be an array of objects/],
    [() => car.runAgent(config({ add }, { runtime: {} }), 'x'), TypeError, /^config\.runtime must be a CarRuntime, got an object$/],
    [() => car.runAgent(config({ add }), ''), car.InvalidArgumentError, /^goal must be a non-empty string/],
    [() => car.runAgent(config({ add }), 'x', 0), RangeError, /^maxTurns must be at least 1, got 0$/],
    [() => car.runAgent(config({ add }), 'x', 1.5), car.InvalidArgumentError, /^maxTurns must be an integer/],
  ]
  for (const [run, cls, message] of refusals) {
    const promise = run()
    assert.ok(promise instanceof Promise, 'runAgent always returns a Promise')
    await assert.rejects(promise, (err) => err instanceof cls && message.test(err.message), String(message))
  }
  assert.equal(model.requests.length, from, 'no refused run reached the model')
})
