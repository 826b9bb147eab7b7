'use strict'
// JS handlers for daemon→client requests and notifications, driven through a real daemon
// with `debug.call_client` / `debug.notify_client`.

const assert = require('node:assert/strict')
const { after, before, test } = require('node:test')

const { startDaemon, sleep } = require('./support/daemon.js')
const car = require('..')

let daemon
let rt

before(async () => {
  daemon = await startDaemon()
  rt = new car.CarRuntime()
})

after(async () => {
  rt.close()
  await daemon.dispose()
})

async function reverse(method, params, timeoutMs = 5000) {
  return JSON.parse(await rt.daemonCall('debug.call_client', JSON.stringify({ method, params, timeout_ms: timeoutMs })))
}

test('sync and async handlers answer reverse calls; async ones are awaited', async () => {
  rt.registerDaemonHandler('app.sum', (paramsJson) => JSON.stringify(JSON.parse(paramsJson).xs.reduce((a, b) => a + b, 0)))
  rt.registerDaemonHandler('app.slow', async (paramsJson) => {
    await sleep(200)
    return JSON.stringify({ waited: JSON.parse(paramsJson).tag })
  })
  assert.deepEqual(await reverse('app.sum', { xs: [1, 2, 3] }), { result: 6 })
  const [slow, fast] = await Promise.all([reverse('app.slow', { tag: 's' }), reverse('app.sum', { xs: [5] })])
  assert.deepEqual(slow, { result: { waited: 's' } })
  assert.deepEqual(fast, { result: 5 })
})

test('a handler may call back into the same runtime', async () => {
  await rt.stateSet('inner', '41')
  rt.registerDaemonHandler('app.reentrant', async () => {
    const v = JSON.parse(await rt.stateGet('inner'))
    return JSON.stringify(v + 1)
  })
  assert.deepEqual(await reverse('app.reentrant', {}), { result: 42 })
})

test('throwing or rejecting handlers produce error replies, never a crash', async () => {
  rt.registerDaemonHandler('app.throws', () => {
    throw new Error('sync failure')
  })
  rt.registerDaemonHandler('app.rejects', async () => {
    throw Object.assign(new Error('custom failure'), { code: -32099, data: { why: 'because' } })
  })
  rt.registerDaemonHandler('app.terminal', () => {
    throw new car.TerminalToolError('cannot continue', { data: { path: '/journal' } })
  })
  rt.registerDaemonHandler('app.throws_string', () => {
    throw 'a bare string' // eslint-disable-line no-throw-literal
  })
  rt.registerDaemonHandler('app.not_string', () => 42)
  rt.registerDaemonHandler('app.bad_json', () => '{oops')
  rt.registerDaemonHandler('app.circular_data', () => {
    const data = {}
    data.self = data
    throw Object.assign(new Error('circular'), { data })
  })

  assert.deepEqual(await reverse('app.throws', {}), { error: { code: -32000, message: 'sync failure' } })
  assert.deepEqual(await reverse('app.rejects', {}), { error: { code: -32099, message: 'custom failure', data: { why: 'because' } } })
  assert.deepEqual(await reverse('app.terminal', {}), {
    error: { code: -32000, message: 'cannot continue', data: { path: '/journal', terminal: true } },
  })
  assert.deepEqual(await reverse('app.throws_string', {}), { error: { code: -32000, message: 'a bare string' } })
  const notString = await reverse('app.not_string', {})
  assert.match(notString.error.message, /handler for app.not_string must return a JSON string, got number/)
  assert.match((await reverse('app.bad_json', {})).error.message, /handler result is not valid JSON/)
  assert.match((await reverse('app.circular_data', {})).error.message, /circular \(error data was not JSON-serialisable\)/)
  // Still serving afterwards.
  assert.deepEqual(await reverse('app.sum', { xs: [1] }), { result: 1 })
})

test('unregistered methods answer -32601; handlers survive a reconnect', async () => {
  rt.unregisterDaemonHandler('app.sum')
  assert.equal((await reverse('app.sum', { xs: [1] })).error.code, -32601)
  rt.registerDaemonHandler('app.sum', (p) => JSON.stringify(JSON.parse(p).xs.length))
  rt.disconnect()
  assert.deepEqual(await reverse('app.sum', { xs: [1, 1] }), { result: 2 })
})

test('notification handlers run in arrival order; a throwing one does not stop later ones', async () => {
  const seen = []
  const warnings = []
  const onWarning = (w) => warnings.push(w)
  process.on('warning', onWarning)
  rt.registerDaemonNotificationHandler('app.tick', (paramsJson) => {
    const { n } = JSON.parse(paramsJson)
    seen.push(n)
    if (n === 3) throw new Error('listener failure')
  })
  const N = 200
  for (let n = 0; n < N; n++) {
    await rt.daemonCall('debug.notify_client', JSON.stringify({ method: 'app.tick', params: { n } }))
  }
  for (let i = 0; i < 250 && seen.length < N; i++) await sleep(20)
  assert.deepEqual(seen, Array.from({ length: N }, (_, i) => i))
  for (let i = 0; i < 50 && warnings.length === 0; i++) await sleep(10)
  process.off('warning', onWarning)
  assert.ok(warnings.some((w) => /notification handler for app.tick threw: Error: listener failure/.test(w.message)))

  rt.unregisterDaemonNotificationHandler('app.tick')
  await rt.daemonCall('debug.notify_client', JSON.stringify({ method: 'app.tick', params: { n: 999 } }))
  await sleep(100)
  assert.equal(seen.includes(999), false)
})

test('handlers survive close(): the next call reconnects and they still answer', async () => {
  const other = new car.CarRuntime()
  other.registerDaemonHandler('app.x', () => '1')
  const notes = []
  other.registerDaemonNotificationHandler('app.y', (p) => notes.push(JSON.parse(p).n))
  assert.equal(JSON.parse(await other.daemonCall('debug.call_client', JSON.stringify({ method: 'app.x' }))).result, 1)
  other.close()
  assert.equal(JSON.parse(await other.daemonCall('debug.call_client', JSON.stringify({ method: 'app.x' }))).result, 1)
  await other.daemonCall('debug.notify_client', JSON.stringify({ method: 'app.y', params: { n: 5 } }))
  for (let i = 0; i < 250 && notes.length === 0; i++) await sleep(20)
  assert.deepEqual(notes, [5])
  other.close()
})
