'use strict'
// The examples in examples/node run to completion against a fresh daemon with the approval
// gate on (a host's own calls, such as `HostClient.agentsUpsert`, are not held by it).

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { after, before, test } = require('node:test')

const { startDaemon, repoRoot } = require('./support/daemon.js')

const examplesDir = path.join(repoRoot, 'examples', 'node')
// Started by another example, never on its own.
const HELPERS = new Set(['crashy_agent.js'])
let daemon

before(async () => {
  assert.ok(
    fs.existsSync(path.join(examplesDir, 'node_modules', 'car-runtime')),
    'examples/node is not installed: run `npm install` there (bindings-node/test.sh does)',
  )
  daemon = await startDaemon()
})

after(async () => {
  await daemon.dispose()
})

function run(script, args = [], against = daemon) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(examplesDir, script), ...args], {
      cwd: examplesDir,
      env: against.clientEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    const killer = setTimeout(() => child.kill('SIGKILL'), 60000)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, stdout, stderr })
    })
  })
}

for (const script of fs.readdirSync(examplesDir).filter((f) => f.endsWith('.js') && !HELPERS.has(f)).sort()) {
  test(`examples/node/${script} runs to completion`, async () => {
    const r = await run(script, [], daemon)
    assert.equal(r.signal, null, `killed: ${r.stderr}`)
    assert.equal(r.code, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`)
    assert.match(r.stdout, /\ndone\n$/)
  })
}
