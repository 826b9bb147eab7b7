'use strict'
// Memory and skills members against a real daemon: facts, retrieval, context, persistence,
// namespaces, and procedural skills.

const assert = require('node:assert/strict')
const { after, before, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

let daemon
let rt

before(async () => {
  daemon = await startDaemon()
  rt = new car.CarRuntime({ memoryNamespace: 'node-tests' })
})

after(async () => {
  rt.close()
  await daemon.dispose()
})

test('facts: add, count, query, build context, consolidate', async () => {
  assert.equal(await rt.factCount(), 0)
  assert.equal(await rt.addFact('deploys', 'Production deploys happen on Tuesdays after the standup', 'fact'), 1)
  assert.equal(
    await rt.addFact('database', 'Never run migrations against the primary during business hours', 'constraint', 0.9, 'db-rule', ['ops', 'db'], 'runbook'),
    2,
  )
  assert.equal(await rt.addFact('editor', 'The team prefers tabs over spaces', 'preference'), 3)
  assert.equal(await rt.factCount(), 3)

  const rows = JSON.parse(await rt.queryFacts('when are production deploys', 2))
  assert.ok(Array.isArray(rows) && rows.length >= 1 && rows.length <= 2)
  assert.equal(rows[0].subject, 'deploys')
  for (const key of ['fact_id', 'subject', 'body', 'kind', 'confidence', 'tags', 'source']) assert.ok(key in rows[0], key)
  const rule = JSON.parse(await rt.queryFacts('database migrations primary'))
  const dbRule = rule.find((r) => r.fact_id === 'db-rule')
  assert.ok(dbRule, JSON.stringify(rule))
  assert.deepEqual(dbRule.tags, ['ops', 'db'])
  assert.equal(dbRule.source, 'runbook')
  assert.equal(dbRule.kind, 'constraint')

  const context = await rt.buildContext('deploy schedule', 4096)
  assert.equal(typeof context, 'string')
  assert.match(context, /Never run migrations/, 'constraints are always included')

  const consolidated = JSON.parse(await rt.consolidate())
  assert.equal(typeof consolidated, 'object')
})

test('persist and load round-trip; paths outside CAR_HOME/memory are refused', async () => {
  const count = await rt.factCount()
  assert.equal(await rt.persistMemory('node-backup.json'), count)
  await rt.addFact('extra', 'added after the backup', 'fact')
  assert.equal(await rt.factCount(), count + 1)
  assert.equal(await rt.loadMemory('node-backup.json'), count)
  assert.equal(await rt.factCount(), count)
  const err = await rt.persistMemory('../../escape.json').catch((e) => e)
  assert.ok(err instanceof car.DaemonRpcError, String(err))
  assert.equal(err.code, -32602)
  // memory.delete {id} → {id, deleted, kind, fact_count} (the JSON-string wrapper).
  await rt.addFact('temp', 'deleted again', 'fact', undefined, 'temp-id')
  const deleted = JSON.parse(await rt.memoryDelete(JSON.stringify({ id: 'temp-id' })))
  assert.deepEqual(deleted, { id: 'temp-id', deleted: true, kind: 'fact', fact_count: count })
  const again = JSON.parse(await rt.memoryDelete(JSON.stringify({ id: 'temp-id' })))
  assert.deepEqual(again, { id: 'temp-id', deleted: false, kind: null, fact_count: count })
})

test('namespaces isolate facts; setMemoryNamespace sets the default for new runtimes', async () => {
  const other = new car.CarRuntime({ memoryNamespace: 'node-tests-other' })
  assert.equal(await other.factCount(), 0)
  await other.addFact('only-here', 'visible in the other namespace only', 'fact')
  assert.equal(await other.factCount(), 1)
  other.close()

  assert.equal(car.getMemoryNamespace(), null)
  car.setMemoryNamespace('node-tests-other')
  const byDefault = new car.CarRuntime()
  car.setMemoryNamespace(null)
  assert.equal(await byDefault.factCount(), 1)
  byDefault.close()
  assert.ok((await rt.factCount()) >= 3)
})

test('skills: ingest, find, report, list', async () => {
  assert.deepEqual(JSON.parse(await rt.findSkill('shopper', 'https://shop.example/cart', 'checkout the cart')), [])
  const n = await rt.ingestSkill(
    'checkout',
    'click("#checkout")',
    'web',
    'shopper',
    'https://shop.example/*',
    ['checkout', 'cart', 'pay'],
    'Checks out the shopping cart',
  )
  assert.equal(n, 1)
  await rt.ingestSkill('search', 'type("#q", q)', 'web', 'shopper', 'https://shop.example/*', ['search', 'find'], 'Searches the catalogue')
  const found = JSON.parse(await rt.findSkill('shopper', 'https://shop.example/cart', 'checkout the cart', 5))
  assert.equal(found[0].name, 'checkout')
  assert.equal(found[0].code, 'click("#checkout")')
  assert.equal(typeof found[0].match_score, 'number')
  const report = JSON.parse(await rt.reportOutcome('checkout', 'success'))
  assert.deepEqual({ s: report.success_count, f: report.fail_count, d: report.degraded }, { s: 1, f: 0, d: false })
  const skills = JSON.parse(await rt.listSkills())
  assert.deepEqual(skills.map((s) => s.name).sort(), ['checkout', 'search'])
  // Any outcome but success is a failure (CAR's rule).
  const failed = JSON.parse(await rt.reportOutcome('checkout', 'meh'))
  assert.equal(failed.fail_count, 1)
  await assert.rejects(
    rt.ingestSkill('x', 'c', 'web', 'p', 'u', 'not-an-array', 'd'),
    (e) => e instanceof car.InvalidArgumentError && /^ingestSkill: taskKeywords must be a list of strings, got a string$/.test(e.message),
  )
})
