'use strict'
// A supervised agent that restarts after a crash. As the host (`HostClient`, which uses the
// `host-token` file), register an agent whose command is this Node with `crashy_agent.js`,
// restart policy `on_failure`; start it under the daemon's supervisor, watch it crash once
// and come back, read its log, and stop it.
//
// Run against a running daemon: `node examples/node/supervised_agent.js` (the host's own
// calls are not held by the approval gate).

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { CarRuntime, HostClient } = require('car-runtime')

const ID = 'crashy-node-agent'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `agentsList` until `ready(agent)`; resolves to that agent's row. */
async function watch(rt, what, ready, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    last = JSON.parse(await rt.agentsList()).find((a) => a.spec.id === ID)
    if (last && ready(last)) return last
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms: ${JSON.stringify(last)}`)
    await sleep(100)
  }
}

async function main() {
  const rt = new CarRuntime()
  const host = new HostClient(rt)
  // The agent's working directory: a fresh one, so its first run has no marker and crashes.
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-crashy-agent-'))
  try {
    await host.agentsUpsert(
      JSON.stringify({
        id: ID,
        name: 'Crashy Node agent',
        command: process.execPath,
        args: [path.join(__dirname, 'crashy_agent.js')],
        cwd: workdir,
        restart: 'on_failure',
        backoff_secs: 0,
        max_restarts: 3,
      }),
    )
    console.log(`registered ${ID}: ${process.execPath} crashy_agent.js (restart on_failure, max 3)`)

    const started = JSON.parse(await rt.agentsStart(JSON.stringify({ id: ID })))
    console.log(`started: status ${started.status}`)
    const running = JSON.parse(await rt.agentsWait(JSON.stringify({ id: ID, targets: ['running'], timeout_secs: 60 })))
    console.log(`running: pid ${running.pid}`)

    const back = await watch(rt, 'a restart after the crash', (a) => a.restart_count >= 1 && a.status === 'running' && a.pid !== running.pid)
    console.log(
      `crashed (exit code ${back.last_exit_code}) and restarted: status ${back.status}, ` +
        `pid ${back.pid}, restart_count ${back.restart_count}`,
    )
    assert.equal(back.last_exit_code, 1)

    // Both runs' lines are in the agent's stdout log (the second once it has connected).
    let log
    const deadline = Date.now() + 30_000
    do {
      log = JSON.parse(await rt.agentsTailLog(JSON.stringify({ id: ID, n: 20 })))
      if (log.stdout.some((l) => l.includes('staying up'))) break
      await sleep(100)
    } while (Date.now() < deadline)
    console.log(`log tail (${log.stdout_path}):`)
    for (const line of log.stdout) console.log(`  | ${line}`)
    assert.ok(log.stdout.some((l) => l.includes('crashing in 300 ms')), JSON.stringify(log))
    assert.ok(log.stdout.some((l) => l.includes('staying up')), JSON.stringify(log))

    const stopped = JSON.parse(await rt.agentsStop(JSON.stringify({ id: ID })))
    console.log(`stopped: status ${stopped.status}`)
    assert.equal(stopped.status, 'stopped')
    const tail = JSON.parse(await rt.agentsTailLog(JSON.stringify({ id: ID, n: 1 })))
    console.log(`last log line: ${tail.stdout.at(-1)}`)
    console.log('done')
  } finally {
    // Whatever happened: no agent process is left running, and the registration goes.
    await rt.agentsStop(JSON.stringify({ id: ID })).catch(() => {})
    await host.agentsRemove(JSON.stringify({ id: ID })).catch(() => {})
    rt.close()
    fs.rmSync(workdir, { recursive: true, force: true })
  }
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
