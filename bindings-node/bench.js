'use strict'
// Round-trip benchmark: `CarRuntime.daemonCall` against a plain JS client built on the `ws`
// package sending the same JSON-RPC call to the same daemon in the same run. Prints p50/p99
// latencies of sequential calls (the two sides alternate in blocks, so a shared machine's
// drift reaches both), the throughput of concurrent calls, the `tools.execute` callback
// round trip, and the ratios; it asserts nothing about speed.
//
//   node bench.js [--iterations N] [--concurrency C]
// Starts its own car-server (CAR_SERVER_BIN or $CARGO_TARGET_DIR/debug/car-server).
//
// Callback RTT: `executeProposal` of 20 sequential tool actions; the tool returns at once,
// so the time from one callback's start to the next one's is a full reverse round trip
// (result to the daemon, next action scheduled, `tools.execute` back, the addon reaching
// JS). `scripts/bench` runs this as its `node` component: with CAR_BENCH_OUT it writes its
// metrics there as JSON; CAR_BENCH_QUICK=1 asks for a reduced run.

const fs = require('node:fs')
const path = require('node:path')
const WebSocket = require('ws')

const { Daemon } = require('./test/support/daemon.js')
const car = require('.')

function arg(name, fallback) {
  const i = process.argv.indexOf(name)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}

const QUICK = process.env.CAR_BENCH_QUICK === '1'
const ITERATIONS = arg('--iterations', QUICK ? 400 : 6000)
const CONCURRENCY = arg('--concurrency', 64)
const WARMUP = Math.min(200, ITERATIONS)
const BLOCKS = 4
const METHOD = 'state.get'
const PARAMS = { key: 'bench' }

/** A minimal JSON-RPC client over `ws`: auth, handshake, id-routed calls. */
class PlainClient {
  constructor(url) {
    this.url = url
    this.next = 1
    this.pending = new Map()
  }

  async open(token) {
    this.ws = new WebSocket(this.url)
    await new Promise((resolve, reject) => {
      this.ws.once('open', resolve)
      this.ws.once('error', reject)
    })
    this.ws.on('message', (data) => {
      const msg = JSON.parse(data)
      const waiter = this.pending.get(msg.id)
      if (!waiter) return
      this.pending.delete(msg.id)
      if (msg.error) waiter.reject(new Error(msg.error.message))
      else waiter.resolve(msg.result)
    })
    await this.call('session.auth', { token })
    await this.call('server.handshake', {
      protocol_version: 3,
      client_version: 'plain-ws-bench',
      required_capabilities: ['infer.model-identity.v1', 'models.catalog-identity.v1'],
      optional_capabilities: [],
    })
  }

  call(method, params) {
    const id = this.next++
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject })
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }))
    })
  }

  close() {
    this.ws.close()
  }
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

async function sequential(call, n) {
  for (let i = 0; i < WARMUP; i++) await call()
  const samples = []
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await call()
    samples.push(Number(process.hrtime.bigint() - t0) / 1000)
  }
  return samples
}

function stats(samples) {
  const sorted = Float64Array.from(samples).sort()
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) }
}

async function concurrent(call) {
  const t0 = process.hrtime.bigint()
  let issued = 0
  const worker = async () => {
    while (issued < ITERATIONS) {
      issued++
      await call()
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  return ITERATIONS / seconds
}

/** Gaps (µs) between consecutive tool callbacks of sequential 20-action proposals. */
async function callbackGaps(rt, reps) {
  const actions = Array.from({ length: 20 }, (_, i) => ({
    id: `a${i}`, type: 'tool_call', tool: 'echo', parameters: { i }, dependencies: i ? [`a${i - 1}`] : [],
  }))
  const plan = JSON.stringify({ actions })
  const gaps = []
  for (let r = 0; r <= reps; r++) {
    const marks = []
    await rt.executeProposal(plan, () => {
      marks.push(process.hrtime.bigint())
      return '"ok"'
    })
    if (r === 0) continue // warm-up
    for (let i = 1; i < marks.length; i++) gaps.push(Number(marks[i] - marks[i - 1]) / 1000)
  }
  return gaps
}

async function main() {
  const daemon = new Daemon({ debugMethods: false })
  await daemon.start()
  try {
    const token = fs.readFileSync(daemon.tokenFile, 'utf8').trim()
    const rt = new car.CarRuntime({ url: daemon.url, token })
    const plain = new PlainClient(daemon.url)
    await plain.open(token)
    const paramsJson = JSON.stringify(PARAMS)
    const binding = () => rt.daemonCall(METHOD, paramsJson).then(JSON.parse)
    const raw = () => plain.call(METHOD, PARAMS)
    await rt.stateSet('bench', '"x"')
    await plain.call('state.set', { key: 'bench', value: 'x' })

    const seq = { binding: [], ws: [] }
    for (let b = 0; b < BLOCKS; b++) {
      const order = b % 2 ? ['binding', 'ws'] : ['ws', 'binding']
      for (const side of order) seq[side].push(...(await sequential(side === 'ws' ? raw : binding, ITERATIONS / BLOCKS)))
    }
    const results = { binding_seq: stats(seq.binding), ws_seq: stats(seq.ws) }
    results.binding_tput = await concurrent(binding)
    results.ws_tput = await concurrent(raw)
    results.callback = stats(await callbackGaps(rt, QUICK ? 2 : 15))
    rt.close()
    plain.close()

    const fmt = (us) => `${us.toFixed(1)} µs`
    const callRatio = results.binding_seq.p50 / results.ws_seq.p50
    const callbackRatio = results.callback.p50 / results.binding_seq.p50
    const lines = [
      `car-runtime (Node) daemonCall vs plain \`ws\` client — ${METHOD}, ${ITERATIONS} calls, same daemon, same run`,
      `  sequential p50: binding ${fmt(results.binding_seq.p50)}, ws ${fmt(results.ws_seq.p50)}, ratio ${callRatio.toFixed(2)}`,
      `  sequential p99: binding ${fmt(results.binding_seq.p99)}, ws ${fmt(results.ws_seq.p99)}, ratio ${(results.binding_seq.p99 / results.ws_seq.p99).toFixed(2)}`,
      `  ${CONCURRENCY} in flight: binding ${results.binding_tput.toFixed(0)} calls/s, ws ${results.ws_tput.toFixed(0)} calls/s, ratio ${(results.binding_tput / results.ws_tput).toFixed(2)}`,
      `  tools.execute callback round trip p50 ${fmt(results.callback.p50)} (p99 ${fmt(results.callback.p99)}), / call p50 ${callbackRatio.toFixed(2)}`,
    ]
    process.stdout.write(lines.join('\n') + '\n')
    const out = process.env.CAR_BENCH_OUT
    if (out) {
      const us = (v) => ({ value: Math.round(v * 10) / 10, unit: 'µs' })
      const ratio = (v) => ({ value: Math.round(v * 1000) / 1000, unit: 'ratio' })
      const rate = (v) => ({ value: Math.round(v), unit: 'calls/s' })
      fs.writeFileSync(path.resolve(out), JSON.stringify({
        component: 'node',
        metrics: {
          call_p50_us: us(results.binding_seq.p50),
          call_p99_us: us(results.binding_seq.p99),
          ws_p50_us: us(results.ws_seq.p50),
          call_p50_over_ws: ratio(callRatio),
          call_calls_s: rate(results.binding_tput),
          ws_calls_s: rate(results.ws_tput),
          calls_s_over_ws: ratio(results.binding_tput / results.ws_tput),
          callback_rtt_p50_us: us(results.callback.p50),
          callback_over_call: ratio(callbackRatio),
        },
      }))
    }
  } finally {
    await daemon.dispose()
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack}\n`)
  process.exit(1)
})
