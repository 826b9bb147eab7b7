'use strict'
// Starts real `car-server` processes for the test suites: a fresh temporary CAR_HOME, an
// ephemeral port, the ready file for the address, stderr to a log file (never a pipe).

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const repoRoot = path.resolve(__dirname, '..', '..', '..')

function serverBinary() {
  if (process.env.CAR_SERVER_BIN) return process.env.CAR_SERVER_BIN
  const targetDir = process.env.CARGO_TARGET_DIR || path.join(repoRoot, 'target')
  return path.join(targetDir, 'debug', 'car-server')
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

class Daemon {
  /** `extraEnv` is added to the daemon's environment (e.g. `CAR_NO_APPROVALS`). */
  constructor({ debugMethods = true, extraEnv = {} } = {}) {
    this.home = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-home-'))
    this.debugMethods = debugMethods
    this.extraEnv = extraEnv
    this.child = null
    this.info = null
    this.starts = 0
  }

  /** Starts (or restarts, on the same CAR_HOME) and waits for the ready file. */
  async start() {
    this.starts += 1
    const readyFile = path.join(this.home, `ready-${this.starts}.json`)
    const log = fs.openSync(path.join(this.home, `daemon-${this.starts}.log`), 'w')
    const args = ['--port', '0', '--ready-file', readyFile]
    if (this.debugMethods) args.push('--debug-methods')
    this.child = spawn(serverBinary(), args, {
      env: { ...process.env, CAR_HOME: this.home, CAR_LOG: 'info', ...this.extraEnv },
      stdio: ['ignore', 'ignore', log],
    })
    fs.closeSync(log)
    const child = this.child
    let exited = null
    child.once('exit', (code, signal) => {
      exited = { code, signal }
    })
    const deadline = Date.now() + 30_000
    while (Date.now() < deadline) {
      if (exited) throw new Error(`car-server exited early (${JSON.stringify(exited)}); log: ${this.log()}`)
      try {
        this.info = JSON.parse(fs.readFileSync(readyFile, 'utf8'))
        return this.info
      } catch {
        await sleep(20)
      }
    }
    throw new Error(`car-server did not become ready within 30 s; log: ${this.log()}`)
  }

  log() {
    return fs
      .readdirSync(this.home)
      .filter((f) => f.startsWith('daemon-'))
      .map((f) => fs.readFileSync(path.join(this.home, f), 'utf8'))
      .join('\n')
      .slice(-4000)
  }

  get url() {
    return this.info.ws_url
  }

  get tokenFile() {
    return path.join(this.home, 'ai.parslee.car', 'auth-token')
  }

  get hostTokenFile() {
    return path.join(this.home, 'ai.parslee.car', 'host-token')
  }

  /**
   * One call on a raw host session: for what the daemon lets only a host do and no binding
   * member offers (`models.register` of a remote endpoint). Resolves to the result.
   */
  async hostCall(method, params) {
    const WebSocket = require('ws')
    const ws = new WebSocket(this.url)
    try {
      await new Promise((resolve, reject) => {
        ws.once('open', resolve)
        ws.once('error', reject)
      })
      const replies = new Map()
      let waiting = null
      ws.on('message', (data) => {
        const msg = JSON.parse(String(data))
        if (msg.id !== undefined) replies.set(msg.id, msg)
        if (waiting) waiting()
      })
      const call = async (id, m, p) => {
        ws.send(JSON.stringify({ jsonrpc: '2.0', id, method: m, params: p }))
        while (!replies.has(id)) await new Promise((resolve) => (waiting = resolve))
        const reply = replies.get(id)
        if (reply.error) throw new Error(`${m}: ${JSON.stringify(reply.error)}`)
        return reply.result
      }
      await call(1, 'session.auth', { host_token: fs.readFileSync(this.hostTokenFile, 'utf8').trim() })
      return await call(2, method, params)
    } finally {
      ws.close()
    }
  }

  /** The environment a client process uses to find this daemon (socket + token file). */
  clientEnv() {
    const env = { ...process.env, CAR_HOME: this.home }
    for (const name of ['CAR_DAEMON_URL', 'CAR_AUTH_TOKEN', 'CAR_MEMORY_NAMESPACE', 'CAR_SERVER_SOCKET']) delete env[name]
    return env
  }

  /** Points this process's discovery at the daemon (runtimes built afterwards use it). */
  useInThisProcess() {
    Object.assign(process.env, this.clientEnv())
    for (const name of ['CAR_DAEMON_URL', 'CAR_AUTH_TOKEN', 'CAR_MEMORY_NAMESPACE', 'CAR_SERVER_SOCKET']) delete process.env[name]
  }

  async #stop(signal) {
    const child = this.child
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const done = new Promise((resolve) => child.once('exit', resolve))
    child.kill(signal)
    await done
  }

  /** SIGKILL: the daemon dies without closing anything. */
  kill() {
    return this.#stop('SIGKILL')
  }

  /** SIGTERM: a clean shutdown. */
  stop() {
    return this.#stop('SIGTERM')
  }

  async dispose() {
    await this.stop()
    fs.rmSync(this.home, { recursive: true, force: true })
  }
}

/** A started daemon that this process's runtimes discover through CAR_HOME. */
async function startDaemon(options) {
  const daemon = new Daemon(options)
  await daemon.start()
  daemon.useInThisProcess()
  return daemon
}

module.exports = { Daemon, startDaemon, serverBinary, sleep, repoRoot }
