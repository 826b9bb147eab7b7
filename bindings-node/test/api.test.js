'use strict'
// The public surface against a real daemon: exports, versions, generated wrappers, state,
// tools, policies, verify, events, runs, and the error taxonomy.

const assert = require('node:assert/strict')
const { after, before, describe, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')
const native = require('../native.js')

let daemon
let rt

before(async () => {
  daemon = await startDaemon()
  rt = new car.CarRuntime()
})

after(async () => {
  rt.close()
  await daemon.dispose()
})

describe('exports', () => {
  test('every bindings-api Node export exists', () => {
    for (const name of [
      'CarRuntime',
      'TerminalToolError',
      'protocolVersion',
      'clientVersion',
      'executeProposal',
      'registerToolHandler',
      'unregisterToolHandler',
      'registerToolCancelHandler',
      'unregisterToolCancelHandler',
    ]) {
      assert.equal(typeof car[name], 'function', name)
    }
    assert.equal(car.protocolVersion(), 3)
    assert.match(car.clientVersion(), /^\d+\.\d+\.\d+/)
    assert.equal(car.version, car.clientVersion())
    assert.ok(new car.TerminalToolError('x') instanceof Error)
  })

  test('CarRuntime has every member of the bindings-api list', () => {
    const members = [
      'daemonCall', 'daemonCallHostManagement', 'registerDaemonHandler', 'registerDaemonNotificationHandler',
      'close', 'disconnect', 'serverSchema', 'capabilities', 'stateSet', 'stateGet', 'stateExists', 'stateKeys',
      'stateSnapshot', 'addFact', 'factCount', 'queryFacts', 'buildContext', 'consolidate', 'persistMemory',
      'loadMemory', 'ingestSkill', 'findSkill', 'reportOutcome', 'listSkills', 'registerTool', 'registerToolSchema',
      'listTools', 'unregisterTool', 'registerPolicy', 'unregisterPolicy', 'listPolicies', 'verifyProposal',
      'submitProposal', 'executeProposal', 'eventCount', 'eventQuery', 'runsStart', 'runsComplete', 'infer',
      'inferTracked', 'inferStream', 'embed', 'classify', 'listModels', 'tokenize', 'detokenize',
    ]
    for (const m of members) assert.equal(typeof car.CarRuntime.prototype[m], 'function', m)
    assert.equal(typeof car.CarRuntime.prototype[Symbol.asyncDispose], 'function')
  })
})

describe('declarations', () => {
  const fs = require('node:fs')
  const path = require('node:path')
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')

  test('index.d.ts declares every runtime export, and nothing more', () => {
    const declared = new Set([...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]))
    for (const m of dts.matchAll(/^export \{ (\w+) \} from/gm)) declared.add(m[1])
    assert.deepEqual([...declared].sort(), Object.keys(car).sort())
  })

  test('index.d.ts declares every hand-written CarRuntime member', () => {
    const body = dts.slice(dts.indexOf('export declare class CarRuntime {'))
    const cls = body.slice(0, body.indexOf('\n}\n'))
    const declared = new Set([...cls.matchAll(/^  (?:readonly )?(\w+)[(:]/gm)].map((m) => m[1]))
    const generated = new Set(Object.keys(car.GENERATED_METHODS))
    const own = Object.getOwnPropertyNames(car.CarRuntime.prototype).filter(
      (n) => n !== 'constructor' && !(generated.has(n) && !declared.has(n)),
    )
    assert.deepEqual(own.filter((n) => !declared.has(n)), [])
    assert.deepEqual([...declared].filter((n) => n !== 'constructor' && !own.includes(n)), [])
    const handWritten = dts.slice(dts.indexOf('export type HandWrittenMember'), dts.indexOf('export interface CarRuntime extends'))
    const omitted = new Set([...handWritten.matchAll(/'(\w+)'/g)].map((m) => m[1]))
    const methods = own.filter((n) => typeof Object.getOwnPropertyDescriptor(car.CarRuntime.prototype, n).value === 'function')
    assert.deepEqual(methods.filter((n) => !omitted.has(n)), [], 'HandWrittenMember lists every hand-written method')
  })
})

describe('generated wrappers', () => {
  const camel = (method) =>
    method
      .split(/[./]/)
      .map((seg, i) => {
        const parts = seg.split('_')
        return parts.map((p, j) => (i === 0 && j === 0 ? p : p.charAt(0).toUpperCase() + p.slice(1))).join('')
      })
      .join('')

  test('cover 100% of the compiled-in method table, named by the camelCase rule', () => {
    const table = native.methodTable()
    assert.ok(table.length > 20)
    const generated = new Map(Object.entries(car.GENERATED_METHODS).map(([name, method]) => [method, name]))
    const missing = table.filter((m) => !generated.has(m))
    assert.deepEqual(missing, [], 'generated.js is stale: run `cargo run -p xtask -- codegen`')
    const extra = [...generated.keys()].filter((m) => !table.includes(m))
    assert.deepEqual(extra, [], 'generated.js lists methods the table does not have')
    for (const method of table) {
      const name = generated.get(method)
      assert.equal(name, camel(method))
      assert.equal(typeof rt[name], 'function', name)
    }
  })

  test('cover every method the daemon serves (server.schema)', async () => {
    const schema = JSON.parse(await rt.serverSchema())
    const text = JSON.stringify(schema.schema)
    const served = [...new Set([...text.matchAll(/"name":"([a-z_.\/]+)"/g)].map((m) => m[1]))]
    const covered = new Set(Object.values(car.GENERATED_METHODS))
    const debug = served.filter((m) => m.startsWith('debug.'))
    const uncovered = served.filter((m) => !covered.has(m) && !debug.includes(m))
    assert.ok(served.length >= covered.size - 1, `schema lists ${served.length} methods`)
    assert.deepEqual(uncovered, [])
  })

  test('call through daemonCall with default params', async () => {
    const caps = JSON.parse(await rt.capabilitiesList())
    assert.equal(caps.caller_role, 'operator')
    assert.ok(caps.methods.some((m) => m.method === 'state.get'))
    assert.equal(typeof JSON.parse(await rt.eventsCount()), 'number')
    await rt.stateSet('gen', '1')
    assert.equal(await rt.stateGet('gen'), '1')
    assert.equal(await rt.stateExists('gen'), true)
  })
})

describe('state', () => {
  test('set, get, exists, keys, snapshot, tenants', async () => {
    await rt.stateSet('b', JSON.stringify({ n: 2 }))
    await rt.stateSet('a', '"one"')
    await rt.stateSet('a', '"tenant-one"', 'acme')
    assert.equal(await rt.stateGet('a'), '"one"')
    assert.equal(await rt.stateGet('a', 'acme'), '"tenant-one"')
    assert.equal(await rt.stateGet('missing'), 'null')
    assert.equal(await rt.stateExists('b'), true)
    assert.equal(await rt.stateExists('missing'), false)
    const keys = await rt.stateKeys()
    assert.ok(Array.isArray(keys))
    assert.deepEqual(keys.filter((k) => k === 'a' || k === 'b'), ['a', 'b'])
    assert.deepEqual(await rt.stateKeys('acme'), ['a'])
    assert.deepEqual(JSON.parse(await rt.stateSnapshot('acme')), { a: 'tenant-one' })
    assert.deepEqual(JSON.parse(await rt.stateSnapshot()).b, { n: 2 })
  })
})

describe('tools, policies, verify, events, runs', () => {
  test('tools register, list, unregister', async () => {
    await rt.registerTool('read_file')
    await rt.registerToolSchema(JSON.stringify([{ name: 'write_file', description: 'writes', parameters: { type: 'object' } }]))
    const names = JSON.parse(await rt.listTools()).map((t) => t.name)
    assert.ok(names.includes('read_file') && names.includes('write_file'))
    assert.equal(await rt.unregisterTool('write_file'), 1)
    assert.equal(await rt.unregisterTool('write_file'), 0)
  })

  test('policies register, list, unregister', async () => {
    await rt.registerPolicy('no-rm', 'deny_tool', 'rm')
    await rt.registerPolicy('no-etc', 'deny_tool_param', 'read_file', 'path', '^/etc/')
    await rt.registerPolicy('needs-ok', 'require_state', undefined, 'approved', undefined, 'true')
    const names = JSON.parse(await rt.listPolicies()).map((p) => p.name)
    assert.deepEqual(names, ['needs-ok', 'no-etc', 'no-rm'])
    assert.equal(await rt.unregisterPolicy('needs-ok'), 1)
    assert.equal(await rt.unregisterPolicy('needs-ok'), 0)
  })

  test('verifyProposal reports issues and levels', async () => {
    const ok = JSON.parse(
      await rt.verifyProposal(JSON.stringify({
        actions: [
          { id: 'w', type: 'state_write', key: 'k', value: 1 },
          { id: 'r', type: 'tool_call', tool: 'read_file', parameters: { path: '/tmp/x' }, dependencies: ['w'] },
        ],
      })),
    )
    assert.equal(ok.valid, true)
    assert.deepEqual(ok.execution_levels, [['w'], ['r']])
    const bad = JSON.parse(
      await rt.verifyProposal(JSON.stringify({ actions: [{ id: 'x', type: 'tool_call', tool: 'rm', dependencies: ['ghost'] }] })),
    )
    assert.equal(bad.valid, false)
    assert.ok(bad.issues.length >= 1)
  })

  test('events and runs', async () => {
    const before = await rt.eventCount()
    assert.equal(typeof before, 'number')
    const run = JSON.parse(await rt.runsStart(JSON.stringify({ intent: 'api test', idempotency_key: 'k1' })))
    assert.ok(run.run_id)
    const again = JSON.parse(await rt.runsStart(JSON.stringify({ intent: 'api test', idempotency_key: 'k1' })))
    assert.equal(again.run_id, run.run_id)
    await rt.runsComplete(JSON.stringify({ run_id: run.run_id, outcome: 'success', summary: 'done' }))
    const runs = JSON.parse(await rt.runsList())
    assert.ok(runs.some((r) => r.run_id === run.run_id) || JSON.stringify(runs).includes(run.run_id))
    const events = JSON.parse(await rt.eventQuery(JSON.stringify({ limit: 5 })))
    assert.ok(Array.isArray(events) || typeof events === 'object')
  })
})

describe('errors', () => {
  test('an unknown method rejects with DaemonRpcError -32601', async () => {
    const err = await rt.daemonCall('no.such_method', '{}').catch((e) => e)
    assert.ok(err instanceof car.DaemonRpcError, String(err))
    assert.ok(err instanceof Error)
    assert.equal(err.code, -32601)
    assert.match(err.message, /no\.such_method/)
    assert.equal(err.kind, 'rpc')
  })

  test('bad params reject with -32602 naming the field, and .data', async () => {
    const err = await rt.daemonCall('state.get', '{}').catch((e) => e)
    assert.ok(err instanceof car.DaemonRpcError)
    assert.equal(err.code, -32602)
    assert.match(err.message, /key/)
    assert.ok('data' in err)
  })

  test('bad arguments are TypeErrors naming the argument, before anything is sent', async () => {
    await assert.rejects(rt.daemonCall('state.get', '{nope'), (e) => e instanceof TypeError && /paramsJson is not valid JSON/.test(e.message))
    await assert.rejects(rt.daemonCall('state.get', { key: 'x' }), /paramsJson must be a JSON string, got an object/)
    await assert.rejects(rt.daemonCall('', '{}'), /method must be a non-empty string/)
    await assert.rejects(rt.stateSet('k', 'undefined'), /valueJson is not valid JSON/)
    await assert.rejects(rt.stateGet(42), /key must be a non-empty string, got number/)
    await assert.rejects(rt.addFact('s', 'b', 'fact', 'high'), /confidence must be a finite number, got string/)
    await assert.rejects(rt.daemonCall('debug.sleep', '{"ms":1}', { timeoutMs: 0 }), /timeoutMs must be at least 1/)
    assert.throws(() => new car.CarRuntime({ urll: 'ws://x' }), /unknown option urll/)
    assert.throws(() => rt.registerDaemonHandler('x.y', 'nope'), /handler must be a function, got string/)
  })

  test('a client-side timeout is a DaemonTimeoutError without .code', async () => {
    const err = await rt.daemonCall('debug.sleep', '{"ms":2000}', { timeoutMs: 100 }).catch((e) => e)
    assert.ok(err instanceof car.DaemonTimeoutError, String(err))
    assert.equal(err.code, undefined)
    assert.equal(err.method, 'debug.sleep')
    assert.equal(err.afterMs, 100)
  })

  test('an unreachable daemon is a DaemonConnectionError without .code', async () => {
    const dead = new car.CarRuntime({ url: 'ws://127.0.0.1:9', token: 't' })
    const err = await dead.daemonCall('state.keys').catch((e) => e)
    dead.close()
    assert.ok(err instanceof car.DaemonConnectionError, String(err))
    assert.equal(err.code, undefined)
    assert.equal(err.kind, 'transport')
    assert.match(err.message, /transport error/)
  })

  test('a wrong token fails the handshake closed, without .code', async () => {
    const wrong = new car.CarRuntime({ url: daemon.url, token: 'not-the-token' })
    const err = await wrong.daemonCall('state.keys').catch((e) => e)
    wrong.close()
    assert.ok(err instanceof car.DaemonConnectionError, String(err))
    assert.equal(err.kind, 'handshake')
    assert.equal(err.code, undefined)
    assert.equal(err.detail.code, -32603)
  })

  test('host-management calls refuse non-host methods client-side; host methods work', async () => {
    const err = await rt.daemonCallHostManagement('state.get', '{"key":"a"}').catch((e) => e)
    assert.ok(err instanceof car.CarError)
    assert.equal(err.kind, 'refused')
    assert.equal(err.code, undefined)
    const out = JSON.parse(await rt.daemonCallHostManagement('session.clear_halt', '{}'))
    assert.ok(out !== undefined)
  })

  test('after close() calls reject as closed; close is idempotent', async () => {
    const r = new car.CarRuntime()
    assert.equal(await r.stateGet('a'), 'null')
    assert.equal(r.isConnected, true)
    r.close()
    r.close()
    assert.equal(r.isClosed, true)
    const err = await r.stateGet('a').catch((e) => e)
    assert.ok(err instanceof car.DaemonConnectionError)
    assert.equal(err.kind, 'closed')
  })

  test('Symbol.asyncDispose closes the runtime', async () => {
    const r = new car.CarRuntime()
    await r.stateKeys()
    await r[Symbol.asyncDispose]()
    assert.equal(r.isClosed, true)
    await assert.rejects(r.stateKeys(), (e) => e instanceof car.DaemonConnectionError && e.kind === 'closed')
  })

  test('explicit url connects over WebSocket', async () => {
    const r = new car.CarRuntime({ url: daemon.url })
    assert.equal(await r.stateGet('anything'), 'null')
    r.close()
  })
})
