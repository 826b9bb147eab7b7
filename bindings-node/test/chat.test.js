'use strict'
// `HostClient` and `registerChatHandler` against a real daemon (approvals off): an agent is
// registered through `new HostClient(rt).agentsUpsert`, a runtime created with
// `CAR_AGENT_ID` / `CAR_AGENT_TOKEN` attaches as it and serves its chat turns with the
// process-wide handler, and a host runtime starts turns with `agentsChat` and receives the
// `agents.chat.event` notifications.

const assert = require('node:assert/strict')
const fs = require('node:fs')
const { after, afterEach, before, describe, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

const AGENT = 'node-chat-agent'
// Only bounds a hang: a turn takes milliseconds.
const WAIT_MS = 30_000

let daemon
let rt
let agent
const events = []
let wake = null

before(async () => {
  daemon = await startDaemon({ extraEnv: { CAR_NO_APPROVALS: '1' } })
  rt = new car.CarRuntime()
  rt.registerDaemonNotificationHandler('agents.chat.event', (paramsJson) => {
    events.push(JSON.parse(paramsJson))
    if (wake) wake()
  })
})

afterEach(() => car.unregisterChatHandler())

after(async () => {
  if (agent) agent.close()
  rt.close()
  await daemon.dispose()
})

/** `sessionId`'s events up to and including its terminal one. */
async function turn(sessionId) {
  const got = []
  const deadline = Date.now() + WAIT_MS
  for (;;) {
    while (events.length > 0) {
      const event = events.shift()
      assert.equal(event.session_id, sessionId, JSON.stringify(event))
      assert.equal(event.agent_id, AGENT)
      got.push(event)
      if (event.kind === 'done' || event.kind === 'error') return got
    }
    assert.ok(Date.now() < deadline, `no terminal event for ${sessionId}: ${JSON.stringify(got)}`)
    await new Promise((resolve) => {
      wake = resolve
      setTimeout(resolve, 100)
    })
  }
}

const chat = async (sessionId, prompt) =>
  JSON.parse(await rt.agentsChat(JSON.stringify({ agent_id: AGENT, prompt, session_id: sessionId })))

describe('HostClient', () => {
  test('agentsUpsert registers an agent; host methods work only through the host client', async () => {
    const host = new car.HostClient(rt)
    assert.equal(host.runtime, rt)
    const spec = { id: AGENT, name: 'Node Chat', command: process.execPath }
    const registered = JSON.parse(await host.agentsUpsert(JSON.stringify(spec)))
    assert.equal(registered.spec.id, AGENT)
    assert.ok(fs.readFileSync(registered.token_path, 'utf8').trim().length >= 32)
    const listed = JSON.parse(await rt.agentsList())
    assert.deepEqual(listed.map((a) => a.spec.id), [AGENT])
    // The runtime's own (operator) connection is refused host methods.
    for (const method of ['agents.upsert', 'diagnostics.secret_store_activity']) {
      const refused = await rt.daemonCall(method, JSON.stringify(spec)).catch((e) => e)
      assert.ok(refused instanceof car.DaemonRpcError, String(refused))
      assert.equal(refused.data.reason, 'host_required')
    }
    assert.equal(typeof JSON.parse(await host.diagnosticsSecretStoreActivity()), 'object')
    assert.deepEqual(JSON.parse(await host.sessionClearHalt()), { cleared: false })
    assert.equal(rt.agentsUpsert, undefined)
    assert.equal(rt.diagnosticsSecretStoreActivity, undefined)

    // The agent's runtime: its identity is read from the environment at construction.
    process.env.CAR_AGENT_ID = AGENT
    process.env.CAR_AGENT_TOKEN = fs.readFileSync(registered.token_path, 'utf8').trim()
    try {
      agent = new car.CarRuntime()
    } finally {
      delete process.env.CAR_AGENT_ID
      delete process.env.CAR_AGENT_TOKEN
    }
    await agent.connectionEpoch()
    const attached = JSON.parse(await rt.agentsList()).find((a) => a.spec.id === AGENT)
    assert.equal(attached.attached, true)
  })
})

describe('registerChatHandler', () => {
  test('a handler streams tokens and the turn ends with done', async () => {
    const seen = []
    car.registerChatHandler(async (paramsJson) => {
      const p = JSON.parse(paramsJson)
      seen.push(p)
      await agent.stateSet('turns', String(seen.length))
      for (const piece of ['Hel', 'lo', '!']) await agent.chatEvent(p.session_id, 'token', piece)
    })
    assert.deepEqual(await chat('n1', 'hi there'), { accepted: true, session_id: 'n1' })
    const got = await turn('n1')
    assert.deepEqual(got.map((e) => [e.kind, e.delta]), [['token', 'Hel'], ['token', 'lo'], ['token', '!'], ['done', undefined]])
    assert.equal(got[3].finish_reason, 'stop')
    // No `done` of its own: the client's `done` has no text (the reply is the tokens).
    assert.equal(got[3].text, '')
    assert.equal(seen[0].prompt, 'hi there')
    assert.equal(seen[0].session_id, 'n1')
    assert.equal(await agent.stateGet('turns'), '1')
  })

  test('a throwing handler ends the turn with error; its own done is the one terminal', async () => {
    const warned = new Promise((resolve) => process.once('warning', resolve))
    car.registerChatHandler(async (paramsJson) => {
      await agent.chatEvent(JSON.parse(paramsJson).session_id, 'token', 'partial')
      throw new RangeError('the model is on fire')
    })
    await chat('n-err', 'go')
    const got = await turn('n-err')
    assert.deepEqual(got.map((e) => e.kind), ['token', 'error'])
    assert.equal(got[1].error, 'RangeError: the model is on fire')
    assert.match(String((await warned).message), /chat handler threw/)

    car.registerChatHandler(async (paramsJson) => {
      const sid = JSON.parse(paramsJson).session_id
      await agent.chatEvent(sid, 'token', 'draft')
      await agent.chatEvent(sid, 'done', 'final answer')
      await agent.chatEvent(sid, 'token', 'late')
    })
    for (const prompt of ['one', 'two']) {
      await chat('n-done', prompt)
      const done = await turn('n-done')
      assert.deepEqual(done.map((e) => [e.kind, e.delta]), [['token', 'draft'], ['done', undefined]])
      assert.equal(done[1].text, 'final answer')
    }
  })

  test('unregisterChatHandler refuses later turns', async () => {
    car.registerChatHandler(() => {})
    await chat('n-u', 'go')
    assert.deepEqual((await turn('n-u')).map((e) => e.kind), ['done'])
    car.unregisterChatHandler()
    const refused = await chat('n-u2', 'go').catch((e) => e)
    assert.ok(refused instanceof car.DaemonRpcError, String(refused))
    assert.equal(refused.code, -32601)
    assert.throws(() => car.registerChatHandler('nope'), /chat handler must be a function, got string/)
  })
})
