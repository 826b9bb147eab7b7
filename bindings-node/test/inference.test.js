'use strict'
// inferStream against a real daemon and the real test model (SmolLM2-135M, `CAR_TEST_GGUF`
// from `eval "$(scripts/fetch-models)"`): concurrent streams on one runtime, the ordering of
// events against the Promise, a throwing onEvent, and a process that exits by itself after a
// stream.

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { after, before, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

const MAX_TOKENS = 16

let daemon
let rt
let model

before(async () => {
  const gguf = process.env.CAR_TEST_GGUF
  if (!gguf) {
    throw new Error('CAR_TEST_GGUF is not set: run `eval "$(scripts/fetch-models)"` from the repository root first')
  }
  if (!fs.existsSync(gguf)) throw new Error(`CAR_TEST_GGUF names a missing file: ${gguf}`)
  daemon = await startDaemon()
  rt = new car.CarRuntime()
  model = JSON.parse(await rt.daemonCall('models.register', JSON.stringify({ path: gguf }))).id
  assert.equal(typeof model, 'string')
})

after(async () => {
  if (rt) rt.close()
  if (daemon) await daemon.dispose()
})

/** Blocks the JS thread, so events pile up in the native queue meanwhile. */
function busy(ms) {
  const until = performance.now() + ms
  while (performance.now() < until);
}

/**
 * Starts one stream and records its events, and any event seen after it settled. With
 * `slowMs`, each event holds the JS thread that long: the daemon's answer then arrives while
 * events are still queued, which must not make the Promise settle before they ran.
 */
function recordStream(runtime, prompt, { maxTokens = MAX_TOKENS, slowMs = 0 } = {}) {
  const rec = { events: [], late: [], settled: false }
  rec.promise = runtime
    .inferStream(
      prompt,
      (eventJson) => {
        const event = JSON.parse(eventJson)
        if (rec.settled) rec.late.push(event)
        rec.events.push(event)
        if (slowMs > 0) busy(slowMs)
      },
      model,
      maxTokens,
    )
    .finally(() => {
      rec.settled = true
    })
  return rec
}

const textOf = (events) =>
  events
    .filter((e) => e.type === 'text')
    .map((e) => e.data)
    .join('')

test('two concurrent inferStream calls on one runtime each get only their own events, done last', async () => {
  const a = recordStream(rt, 'Count from one to five in words.')
  const b = recordStream(rt, 'Name three colours of the rainbow.', { slowMs: 40 })
  const [outA, outB] = await Promise.all([a.promise, b.promise])
  for (const [rec, out] of [
    [a, JSON.parse(outA)],
    [b, JSON.parse(outB)],
  ]) {
    const types = rec.events.map((e) => e.type)
    assert.deepEqual(rec.late, [], 'no event after the Promise settled')
    // Sampling is random (inferStream takes no temperature or seed), and the model may end a
    // reply after its first piece, so one text event is all a stream is sure to get.
    assert.ok(types.filter((t) => t === 'text').length >= 1, `a text event: ${types}`)
    assert.equal(textOf(rec.events), out.text, 'the text events concatenate to this stream\'s own result')
    assert.equal(types.filter((t) => t === 'done').length, 1, `done exactly once: ${types}`)
    assert.equal(types.at(-1), 'done', `done is last: ${types}`)
    // One generation's tail: exactly one usage and one stop_reason, matching this result.
    const usage = rec.events.filter((e) => e.type === 'usage')
    const stop = rec.events.filter((e) => e.type === 'stop_reason')
    assert.equal(usage.length, 1, `one usage event: ${types}`)
    assert.equal(stop.length, 1, `one stop_reason event: ${types}`)
    assert.equal(usage[0].completion_tokens, out.usage.completion_tokens)
    assert.equal(stop[0].data, out.stop_reason)
    assert.deepEqual(types.slice(-3), ['usage', 'stop_reason', 'done'])
  }
  assert.notEqual(JSON.parse(outA).text, JSON.parse(outB).text, 'different prompts, different texts')
})

test('an onEvent that throws is not called again; inferStream rejects with that error and nothing is uncaught', async () => {
  const uncaught = []
  const warnings = []
  const onUncaught = (err) => uncaught.push(err)
  const onWarning = (w) => warnings.push(w)
  process.on('uncaughtException', onUncaught)
  process.on('warning', onWarning)
  try {
    const boom = new Error('onEvent failed')
    const seen = []
    const err = await rt
      .inferStream(
        'Count from one to five in words.',
        (eventJson) => {
          seen.push(JSON.parse(eventJson))
          throw boom
        },
        model,
        8,
      )
      .then(
        () => assert.fail('inferStream must reject'),
        (e) => e,
      )
    assert.equal(err, boom, 'rejects with the very error onEvent threw')
    assert.equal(seen.length, 1, 'onEvent is not called after it threw')
    assert.equal(seen[0].type, 'text')

    // The same for a Promise that rejects: no `done` after the failure, same error.
    const rejection = new Error('async onEvent failed')
    const seenAsync = []
    const errAsync = await rt
      .inferStream(
        'Name three colours of the rainbow.',
        async (eventJson) => {
          seenAsync.push(JSON.parse(eventJson).type)
          throw rejection
        },
        model,
        8,
      )
      .catch((e) => e)
    assert.equal(errAsync, rejection)
    assert.ok(seenAsync.length >= 1 && !seenAsync.includes('done'), `${seenAsync}`)

    // The generations ran to their end and the runtime is healthy: the next stream works.
    const next = recordStream(rt, 'Say hello.', { maxTokens: 8 })
    const out = JSON.parse(await next.promise)
    assert.equal(textOf(next.events), out.text)
    assert.equal(next.events.at(-1).type, 'done')

    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(uncaught, [])
    assert.deepEqual(
      warnings.filter((w) => w.code === 'CAR_RUNTIME_HANDLER').map((w) => w.message),
      [],
      'the error went to the rejection, not to a warning',
    )
  } finally {
    process.off('uncaughtException', onUncaught)
    process.off('warning', onWarning)
  }
})

test('a failing stream call rejects with the daemon error after delivering nothing', async () => {
  const seen = []
  const err = await rt.inferStream('hi', (e) => seen.push(e), 'no-such-model', 8).catch((e) => e)
  assert.ok(err instanceof car.DaemonRpcError, String(err))
  assert.deepEqual(seen, [])
})

test('a script whose only work is one stream exits by itself once it settled', async () => {
  // No close(): the pending stream keeps the process alive, and nothing else does after.
  const script = `
    const car = require(${JSON.stringify(path.resolve(__dirname, '..'))})
    const rt = new car.CarRuntime()
    const types = []
    rt.inferStream('Say hello.', (e) => { types.push(JSON.parse(e).type) }, process.argv[1], 8)
      .then((out) => process.stdout.write(JSON.stringify({ types, text: JSON.parse(out).text }) + '\\n'))
  `
  const r = await new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script, model], { env: daemon.clientEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let printedAt = null
    child.stdout.on('data', (d) => {
      stdout += d
      printedAt ??= performance.now()
    })
    child.stderr.on('data', (d) => (stderr += d))
    const killer = setTimeout(() => child.kill('SIGKILL'), 60_000)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, stdout, stderr, afterOutputMs: performance.now() - (printedAt ?? performance.now()) })
    })
  })
  assert.equal(r.signal, null, `the script had to be killed: ${r.stderr}`)
  assert.equal(r.code, 0, r.stderr)
  const { types, text } = JSON.parse(r.stdout)
  assert.equal(types.at(-1), 'done')
  assert.ok(types.filter((t) => t === 'text').length >= 1, `${types}`)
  assert.equal(typeof text, 'string')
  assert.ok(r.afterOutputMs < 3000, `exited ${r.afterOutputMs.toFixed(0)} ms after its stream settled`)
})
