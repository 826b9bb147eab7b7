'use strict'
// Proposals through JS tool functions: executeProposal with policies and state, one- and
// two-parameter tool functions, async tools, ordinary and terminal failures, the
// process-wide tool handler with submitProposal, and tools.cancel delivery.

const assert = require('node:assert/strict')
const { after, before, test } = require('node:test')

const { startDaemon, sleep } = require('./support/daemon.js')
const car = require('..')

let daemon

before(async () => {
  daemon = await startDaemon()
})

after(async () => {
  car.unregisterToolHandler()
  car.unregisterToolCancelHandler()
  await daemon.dispose()
})

const resultOf = (r, id) => r.results.find((x) => x.action_id === id)

test('executeProposal runs a multi-action proposal with policies; a TerminalToolError halts the session', async () => {
  const rt = new car.CarRuntime()
  await rt.registerPolicy('no-secrets', 'deny_tool_param', 'read', 'path', '^/secret')
  await rt.registerPolicy('no-rm', 'deny_tool', 'rm')
  const calls = []
  const proposal = {
    actions: [
      { id: 'r1', type: 'tool_call', tool: 'read', parameters: { path: '/docs/a' } },
      { id: 'r2', type: 'tool_call', tool: 'read', parameters: { path: '/docs/b' } },
      { id: 'up', type: 'tool_call', tool: 'upper', parameters: { text: 'hello' }, dependencies: ['r1', 'r2'] },
      { id: 'save', type: 'state_write', key: 'summary', value: 'done', dependencies: ['up'] },
      { id: 'deny', type: 'tool_call', tool: 'read', parameters: { path: '/secret/key' }, failure_behavior: 'skip' },
    ],
  }
  const out = JSON.parse(
    await car.executeProposal(rt, JSON.stringify(proposal), async (callJson) => {
      const call = JSON.parse(callJson)
      calls.push(call)
      await sleep(5) // an async tool: the Promise is awaited
      if (call.tool === 'read') return JSON.stringify({ content: `contents of ${call.params.path}` })
      return JSON.stringify(call.params.text.toUpperCase())
    }),
  )
  assert.equal(resultOf(out, 'r1').status, 'succeeded')
  assert.deepEqual(out.outputs.r2, { content: 'contents of /docs/b' })
  assert.equal(out.outputs.up, 'HELLO')
  assert.equal(resultOf(out, 'deny').status, 'rejected')
  assert.deepEqual(out.final_state, { summary: 'done' })
  assert.deepEqual(calls.map((c) => c.action_id).sort(), ['r1', 'r2', 'up'])
  const first = calls.find((c) => c.action_id === 'up')
  for (const key of ['tool', 'params', 'action_id', 'request_id', 'timeout_ms', 'session_id', 'attempt']) {
    assert.ok(key in first, `call_json has ${key}`)
  }
  assert.equal(first.attempt, 1)
  assert.match(first.session_id, /^exec-/)

  // A terminal failure: no retry, state writes rolled back, the session halted.
  await rt.stateSet('kept', '"before"')
  let attempts = 0
  const halt = JSON.parse(
    await rt.executeProposal(
      JSON.stringify({
        actions: [
          { id: 'w', type: 'state_write', key: 'kept', value: 'overwritten' },
          { id: 't', type: 'tool_call', tool: 'journal', dependencies: ['w'], failure_behavior: 'retry', max_retries: 5 },
        ],
      }),
      async () => {
        attempts += 1
        throw new car.TerminalToolError('receipt journal unavailable', { data: { path: '/j' } })
      },
    ),
  )
  const t = resultOf(halt, 't')
  assert.equal(t.terminal, true)
  assert.equal(t.attempts, 1)
  assert.equal(attempts, 1)
  assert.match(t.error, /receipt journal unavailable/)
  assert.equal(resultOf(halt, 'w').rolled_back, true)
  assert.equal(await rt.stateGet('kept'), '"before"')

  let called = false
  const after = JSON.parse(
    await rt.executeProposal(JSON.stringify({ actions: [{ id: 'x', type: 'tool_call', tool: 'journal' }] }), () => {
      called = true
      return '1'
    }),
  )
  assert.equal(resultOf(after, 'x').status, 'rejected')
  assert.match(resultOf(after, 'x').error, /halted/)
  assert.equal(called, false)
  const halts = JSON.parse(await rt.eventQuery(JSON.stringify({ kinds: ['session.halted'] })))
  assert.equal(halts.count, 1)
  assert.equal(halts.events[0].kind, 'session.halted')

  // The halt is per connection: a reconnect starts unhalted.
  rt.disconnect()
  const fresh = JSON.parse(await rt.executeProposal(JSON.stringify({ actions: [{ id: 'y', type: 'tool_call', tool: 'journal' }] }), () => '"ok"'))
  assert.equal(resultOf(fresh, 'y').status, 'succeeded')
  rt.close()
})

test('two-parameter tool functions get (tool, paramsJson); ordinary errors fail only their action', async () => {
  const rt = new car.CarRuntime()
  const proposal = {
    actions: [
      { id: 'good', type: 'tool_call', tool: 'add', parameters: { a: 2, b: 3 } },
      { id: 'bad', type: 'tool_call', tool: 'explode', failure_behavior: 'skip' },
      { id: 'sync-throw', type: 'tool_call', tool: 'throw_sync', failure_behavior: 'skip' },
      { id: 'not-json', type: 'tool_call', tool: 'not_json', failure_behavior: 'skip' },
      { id: 'obj', type: 'tool_call', tool: 'returns_object', failure_behavior: 'skip' },
    ],
  }
  const out = JSON.parse(
    await rt.executeProposal(JSON.stringify(proposal), (tool, paramsJson) => {
      const p = JSON.parse(paramsJson)
      if (tool === 'add') return Promise.resolve(JSON.stringify(p.a + p.b))
      if (tool === 'explode') return Promise.reject(new Error('tool exploded'))
      if (tool === 'throw_sync') throw Object.assign(new Error('bad argument'), { code: -32602, data: { field: 'x' } })
      if (tool === 'not_json') return 'definitely not json'
      return { not: 'a string' }
    }),
  )
  assert.equal(out.outputs.good, 5)
  assert.equal(resultOf(out, 'good').status, 'succeeded')
  assert.equal(resultOf(out, 'bad').status, 'failed')
  assert.match(resultOf(out, 'bad').error, /tool exploded/)
  assert.equal(resultOf(out, 'bad').terminal, false)
  assert.match(resultOf(out, 'sync-throw').error, /bad argument/)
  assert.match(resultOf(out, 'not-json').error, /handler result is not valid JSON/)
  assert.match(resultOf(out, 'obj').error, /toolFn must return a JSON string, got an object/)
  // Not halted: ordinary failures only fail their action.
  const again = JSON.parse(await rt.executeProposal(JSON.stringify({ actions: [{ id: 'z', type: 'tool_call', tool: 'add', parameters: { a: 1, b: 1 } }] }), (tool, p) => JSON.stringify(JSON.parse(p).a + JSON.parse(p).b)))
  assert.equal(again.outputs.z, 2)
  rt.close()
})

test('concurrent executeProposal runs each see only their own tool calls', async () => {
  const rt = new car.CarRuntime()
  const runs = Array.from({ length: 8 }, (_, i) =>
    rt.executeProposal(
      JSON.stringify({ actions: [{ id: 'a', type: 'tool_call', tool: 'tag', parameters: { i } }] }),
      async (callJson) => {
        await sleep(10)
        const call = JSON.parse(callJson)
        assert.equal(call.params.i, i)
        return JSON.stringify({ run: i })
      },
    ),
  )
  const outs = (await Promise.all(runs)).map((o) => JSON.parse(o).outputs.a.run)
  assert.deepEqual(outs, [0, 1, 2, 3, 4, 5, 6, 7])
  rt.close()
})

test('submitProposal uses the process-wide tool handler and rejects at once without one', async () => {
  const rt = new car.CarRuntime()
  car.unregisterToolHandler()
  const proposal = JSON.stringify({ actions: [{ id: 'p', type: 'tool_call', tool: 'ping' }] })
  const err = await rt.submitProposal(proposal).catch((e) => e)
  assert.ok(err instanceof car.CarError)
  assert.equal(err.kind, 'refused')
  assert.match(err.message, /no tool handler registered/)

  const seen = []
  car.registerToolHandler(async (callJson) => {
    seen.push(JSON.parse(callJson))
    return JSON.stringify({ pong: true })
  })
  await rt.registerTool('ping')
  const out = JSON.parse(await rt.submitProposal(proposal, 'my-session'))
  assert.deepEqual(out.outputs.p, { pong: true })
  assert.equal(seen[0].session_id, 'my-session')
  assert.equal(seen[0].tool, 'ping')

  // The process-wide handler also serves runtimes created before it was registered, and
  // a terminal error thrown from it sets data.terminal.
  car.registerToolHandler((tool) => {
    throw new car.TerminalToolError(`no ${tool} today`)
  })
  const halted = JSON.parse(await rt.submitProposal(proposal))
  assert.equal(resultOf(halted, 'p').terminal, true)
  car.unregisterToolHandler()
  rt.close()
})

test('tools.cancel reaches the process-wide cancel handler with the request id', async () => {
  const rt = new car.CarRuntime()
  const cancelled = []
  car.registerToolCancelHandler((requestId) => cancelled.push(requestId))
  let requestId
  const out = JSON.parse(
    await rt.executeProposal(
      JSON.stringify({ actions: [{ id: 'slow', type: 'tool_call', tool: 'slow', timeout_ms: 200, failure_behavior: 'skip' }] }),
      async (callJson) => {
        requestId = JSON.parse(callJson).request_id
        await sleep(1500)
        return '"late"'
      },
    ),
  )
  assert.equal(resultOf(out, 'slow').status, 'failed')
  for (let i = 0; i < 100 && cancelled.length === 0; i++) await sleep(20)
  assert.deepEqual(cancelled, [requestId])
  car.unregisterToolCancelHandler()
  rt.close()
})

test('bad proposal arguments are precise errors', async () => {
  const rt = new car.CarRuntime()
  await assert.rejects(rt.executeProposal('{', () => '1'), (e) => e instanceof car.InvalidArgumentError && /^proposalJson is not valid JSON/.test(e.message))
  await assert.rejects(rt.executeProposal('[]', () => '1'), (e) => e instanceof car.InvalidArgumentError && /proposalJson must be a JSON object/.test(e.message))
  await assert.rejects(rt.executeProposal('{}', 'nope'), /toolFn must be a function, got string/)
  await assert.rejects(car.executeProposal({}, '{}', () => '1'), /rt must be a CarRuntime/)
  const err = await rt.executeProposal(JSON.stringify({ actions: [{ id: 'a', type: 'warp' }] }), () => '1').catch((e) => e)
  assert.ok(err instanceof car.DaemonRpcError, String(err))
  assert.equal(err.code, -32602)
  rt.close()
})
