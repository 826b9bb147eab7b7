'use strict'
// Many calls in flight on one connection: each Promise resolves with its own result.

const assert = require('node:assert/strict')
const { after, before, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

let daemon

before(async () => {
  daemon = await startDaemon()
})

after(async () => {
  await daemon.dispose()
})

test('2,000 concurrent daemonCalls resolve with their own results', async () => {
  const rt = new car.CarRuntime()
  const N = 2000
  const calls = Array.from({ length: N }, (_, i) =>
    rt.daemonCall('debug.echo', JSON.stringify({ i, tag: `call-${i}`, pad: 'x'.repeat(i % 97) })),
  )
  const results = await Promise.all(calls)
  assert.equal(results.length, N)
  results.forEach((out, i) => {
    assert.deepEqual(JSON.parse(out), { i, tag: `call-${i}`, pad: 'x'.repeat(i % 97) })
  })
  rt.close()
})

test('concurrent typed calls, reverse calls and failures do not cross', async () => {
  const rt = new car.CarRuntime()
  rt.registerDaemonHandler('app.double', async (p) => JSON.stringify(JSON.parse(p).n * 2))
  const work = []
  // Reverse calls in flight stay below the daemon's per-connection handler cap (256): at
  // the cap the daemon stops reading the connection, including the replies those handlers
  // wait for (reported as a daemon issue).
  for (let i = 0; i < 200; i++) {
    work.push(rt.stateSet(`k${i}`, JSON.stringify(i)).then(() => rt.stateGet(`k${i}`)).then((v) => assert.equal(JSON.parse(v), i)))
    work.push(
      rt
        .daemonCall('debug.call_client', JSON.stringify({ method: 'app.double', params: { n: i } }))
        .then((v) => assert.deepEqual(JSON.parse(v), { result: i * 2 })),
    )
    work.push(rt.daemonCall('no.such', '{}').then(
      () => assert.fail('must reject'),
      (e) => assert.equal(e.code, -32601),
    ))
  }
  await Promise.all(work)
  assert.equal((await rt.stateKeys()).length, 200)
  rt.close()
})

test('a pending call keeps a program alive until it settles, and then lets it exit', async () => {
  // The completion function the native side settles calls through is weak (src/calls.rs):
  // without the keep-alive a program whose only work is a pending call would exit first.
  const { spawnSync } = require('node:child_process')
  const script = `
    const car = require(${JSON.stringify(require.resolve('..'))})
    const rt = new car.CarRuntime()
    rt.daemonCall('debug.sleep', JSON.stringify({ ms: 300 }))
      .then(() => rt.daemonCall('debug.echo', JSON.stringify({ done: true })))
      .then((out) => { process.stdout.write('settled ' + out); rt.close() })
  `
  const child = spawnSync(process.execPath, ['-e', script], { env: daemon.clientEnv(), encoding: 'utf8', timeout: 60_000 })
  assert.equal(child.status, 0, child.stderr)
  assert.equal(child.stdout, 'settled {"done":true}')
})

test('a call that fails before it is sent rejects with the package error class', async () => {
  const rt = new car.CarRuntime()
  await assert.rejects(rt.daemonCall('state.get', '{not json'), (e) => e instanceof car.InvalidArgumentError && /paramsJson/.test(e.message))
  await assert.rejects(rt.daemonCall('', '{}'), (e) => e instanceof car.InvalidArgumentError)
  await assert.rejects(rt.daemonCall('no.such.method', '{}'), (e) => e instanceof car.DaemonRpcError && e.code === -32601)
  await assert.rejects(rt.daemonCall('state.get', 7), (e) => e instanceof car.InvalidArgumentError)
  rt.close()
})
