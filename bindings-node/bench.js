'use strict'
// Round-trip benchmark: `CarRuntime.daemonCall` against a plain JS client built on the `ws`
// package sending the same JSON-RPC call to the same daemon in the same run. Prints p50/p99
// latencies of sequential calls, the throughput of concurrent calls, and the ratios
// (binding / plain ws); it asserts nothing about speed.
//
//   node bench.js [--iterations N] [--concurrency C]
// Starts its own car-server (CAR_SERVER_BIN or $CARGO_TARGET_DIR/debug/car-server).

const fs = require('node:fs')
const path = require('node:path')
const WebSocket = require('ws')

const { Daemon } = require('./test/support/daemon.js')
const car = require('.')

function arg(name, fallback) {
  const i = process.argv.indexOf(name)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}

const ITERATIONS = arg('--iterations', 5000)
const CONCURRENCY = arg('--concurrency', 64)
const WARMUP = Math.min(500, ITERATIONS)
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

async function sequential(call) {
  for (let i = 0; i < WARMUP; i++) await call()
  const samples = new Float64Array(ITERATIONS)
  for (let i = 0; i < ITERATIONS; i++) {
    const t0 = process.hrtime.bigint()
    await call()
    samples[i] = Number(process.hrtime.bigint() - t0) / 1000
  }
  samples.sort()
  return { p50: percentile(samples, 50), p99: percentile(samples, 99) }
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

    const results = {}
    // Alternate the order so neither side always runs on a warmer process.
    results.ws_seq = await sequential(raw)
    results.binding_seq = await sequential(binding)
    results.binding_tput = await concurrent(binding)
    results.ws_tput = await concurrent(raw)
    rt.close()
    plain.close()

    const fmt = (us) => `${us.toFixed(1)} µs`
    const lines = [
      `car-runtime (Node) daemonCall vs plain \`ws\` client — ${METHOD}, ${ITERATIONS} calls, same daemon, same run`,
      `  sequential p50: binding ${fmt(results.binding_seq.p50)}, ws ${fmt(results.ws_seq.p50)}, ratio ${(results.binding_seq.p50 / results.ws_seq.p50).toFixed(2)}`,
      `  sequential p99: binding ${fmt(results.binding_seq.p99)}, ws ${fmt(results.ws_seq.p99)}, ratio ${(results.binding_seq.p99 / results.ws_seq.p99).toFixed(2)}`,
      `  ${CONCURRENCY} in flight: binding ${results.binding_tput.toFixed(0)} calls/s, ws ${results.ws_tput.toFixed(0)} calls/s, ratio ${(results.binding_tput / results.ws_tput).toFixed(2)}`,
    ]
    process.stdout.write(lines.join('\n') + '\n')
    const out = process.env.CAR_BENCH_OUT
    if (out) fs.writeFileSync(path.resolve(out), JSON.stringify({ method: METHOD, iterations: ITERATIONS, concurrency: CONCURRENCY, ...results }, null, 2))
  } finally {
    await daemon.dispose()
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack}\n`)
  process.exit(1)
})
