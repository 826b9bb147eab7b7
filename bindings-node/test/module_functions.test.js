'use strict'
// CAR's package-level functions (`agentsList`, `createTask`, `renderOsSchedule`,
// `scheduleTask`, `verifyWorkflow`, `runWorkflow` / `resumeWorkflow`, …), generated from the
// contract, against a real daemon; and `runTask` with the registered agent runner.

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { after, afterEach, before, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

let daemon

before(async () => {
  daemon = await startDaemon()
})

afterEach(() => car.unregisterAgentRunner())

after(async () => {
  await daemon.dispose()
})

test('every generated package-level function is exported', () => {
  const names = Object.keys(car.MODULE_FUNCTIONS)
  assert.ok(names.length > 20)
  for (const name of names) assert.equal(typeof car[name], 'function', name)
  for (const name of ['agentsStart', 'scheduleTask', 'verifyWorkflow', 'createTask', 'resumeWorkflow']) {
    assert.ok(names.includes(name), name)
  }
})

test('tasks, OS renderings and command tasks on daemon timers', async () => {
  const task = JSON.parse(await car.createTask('nightly', 'summarise', 'interval', '3600'))
  assert.equal(task.trigger, 'interval')
  const rendered = JSON.parse(await car.renderOsSchedule(JSON.stringify(task), '/usr/bin/car', '["run"]'))
  assert.ok(rendered.crontab_line.startsWith('0 * * * * /usr/bin/car run'), rendered.crontab_line)
  await assert.rejects(car.createTask('bad', 'p', 'cron', 'nonsense'), (e) => e.code === -32602 && /schedule/.test(e.message))

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-task-'))
  const out = path.join(dir, 'ticks')
  const script = path.join(dir, 'tick.sh')
  fs.writeFileSync(script, `#!/bin/sh\necho tick >> ${out}\n`, { mode: 0o755 })
  const scheduled = JSON.parse(
    await car.scheduleTask(JSON.stringify({ name: 'ticker', program: script, cadence: { interval_secs: 1 }, durable: false })),
  )
  assert.equal(scheduled.backend, 'daemon')
  const listed = JSON.parse(await car.listScheduledTasks())
  assert.ok(listed.some((t) => t.id === scheduled.id))
  const deadline = Date.now() + 30_000
  while (!fs.existsSync(out)) {
    assert.ok(Date.now() < deadline, 'the task ran')
    await new Promise((r) => setTimeout(r, 50))
  }
  const gone = JSON.parse(await car.unscheduleTask(scheduled.id))
  assert.equal(gone.deleted, true)
  fs.rmSync(dir, { recursive: true, force: true })
})

test('runTask serves the task agent with the registered runner', async () => {
  const task = await car.createTask('manual', 'say hi')
  const prompts = []
  await car.registerAgentRunner((specJson, prompt) => {
    prompts.push(prompt)
    return JSON.stringify({ name: JSON.parse(specJson).name, answer: 'hi!' })
  })
  const execution = JSON.parse(await car.runTask(task))
  assert.deepEqual([execution.status, execution.answer], ['completed', 'hi!'])
  assert.deepEqual(prompts, ['say hi'])
})

test('workflows by CAR signature, and agents', async () => {
  const wf = {
    id: 'w', name: 'gate', start: 'gate',
    stages: [{ id: 'gate', name: 'Gate', step: { type: 'approval', prompt: 'go?', fields: [{ name: 'go', required: true }], output_key: 'a' } }],
    edges: [],
  }
  assert.equal(JSON.parse(await car.verifyWorkflow(JSON.stringify(wf))).valid, true)
  const paused = JSON.parse(await car.runWorkflow(JSON.stringify(wf)))
  assert.equal(paused.status, 'paused')
  const done = JSON.parse(await car.resumeWorkflow(JSON.stringify(paused.paused), '{"go": "y"}'))
  assert.equal(done.status, 'completed')
  assert.equal(done.final_state['a.go'], 'y')
  assert.deepEqual(JSON.parse(await car.agentsList()), [])
  await assert.rejects(car.agentsStart('ghost'), (e) => e.code === -32602 && /no registered agent/.test(e.message))
})
