'use strict'
// Lifetimes: a daemon killed mid-call, a restart on the same CAR_HOME, close() during a call
// (and the reconnect after it), and processes that exit by themselves once their work is
// done. No assertion times anything: each failure must be the right error class, and the
// calls that must fail last ten minutes, so only the event under test can end them.

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const { after, before, test } = require('node:test')

const { startDaemon, sleep } = require('./support/daemon.js')
const car = require('..')

let daemon

before(async () => {
  daemon = await startDaemon()
})

after(async () => {
  await daemon.dispose()
})

test('daemon killed mid-call → the Promise rejects as a transport error; after restart the same runtime works', async () => {
  const rt = new car.CarRuntime()
  assert.equal(await rt.stateGet('x'), 'null')
  const epoch = await rt.connectionEpoch()
  const pending = rt.daemonCall('debug.sleep', JSON.stringify({ ms: 600000 })).catch((err) => err)
  await sleep(200)
  await daemon.kill()
  const err = await pending
  assert.ok(err instanceof car.DaemonConnectionError, String(err))
  assert.equal(err.code, undefined)
  assert.equal(err.kind, 'transport')

  // While the daemon is down, calls fail as transport errors (no invented code).
  const down = await rt.stateGet('x').catch((e) => e)
  assert.ok(down instanceof car.DaemonConnectionError, String(down))
  assert.equal(down.code, undefined)

  await daemon.start() // same CAR_HOME: same socket path, a new token
  await rt.stateSet('after', '"restart"')
  assert.equal(await rt.stateGet('after'), '"restart"')
  assert.ok((await rt.connectionEpoch()) > epoch, 'a new daemon session')
  rt.close()
})

test('close() during a call rejects it as closed; the next call reconnects', async () => {
  const rt = new car.CarRuntime()
  const pending = rt.daemonCall('debug.sleep', JSON.stringify({ ms: 600000 })).catch((e) => e)
  await sleep(100)
  rt.close()
  const err = await pending
  assert.ok(err instanceof car.DaemonConnectionError, String(err))
  assert.equal(err.kind, 'closed')
  assert.deepEqual(JSON.parse(await rt.daemonCall('debug.echo', '{"back":true}')), { back: true })
  rt.close()
})

function runScript(mode) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'exit-script.js'), mode], {
      env: daemon.clientEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    // Only a guard against a hung script (which fails the test by its signal).
    const killer = setTimeout(() => child.kill('SIGKILL'), 60000)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, stdout, stderr, ms: performance.now() - started })
    })
  })
}

for (const mode of ['close', 'no-close', 'handlers-only']) {
  test(`a script that ${mode === 'close' ? 'closes its runtime' : mode === 'no-close' ? 'never closes its runtime' : 'only registers handlers'} exits by itself`, async () => {
    const r = await runScript(mode)
    assert.equal(r.signal, null, `the script had to be killed after ${r.ms.toFixed(0)} ms: ${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    if (mode === 'handlers-only') {
      assert.equal(r.stdout, 'registered\n')
    } else {
      assert.deepEqual(JSON.parse(r.stdout), { reply: { result: { pong: { n: 7 } } }, output: 'x' })
    }
  })
}

test('a pending call keeps the process alive until it settles', async () => {
  const script = `
    const car = require(${JSON.stringify(path.resolve(__dirname, '..'))})
    const rt = new car.CarRuntime()
    rt.daemonCall('debug.sleep', '{"ms":600}').then((out) => process.stdout.write('settled ' + out))
  `
  const started = performance.now()
  const out = await new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { env: daemon.clientEnv(), stdio: ['ignore', 'pipe', 'inherit'] })
    let stdout = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.on('error', reject)
    child.on('exit', (code) => resolve({ code, stdout }))
  })
  assert.equal(out.code, 0)
  assert.match(out.stdout, /^settled /)
  assert.ok(performance.now() - started >= 600)
})
