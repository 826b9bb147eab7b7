'use strict'
// The public surface against a real daemon: exports, versions, the generated typed members
// (checked against the daemon's own contract) and wrappers, state, tools, policies, verify,
// events, runs, close/reconnect and the error taxonomy.

const assert = require('node:assert/strict')
const { after, before, describe, test } = require('node:test')

const { startDaemon, sleep } = require('./support/daemon.js')
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
      'registerChatHandler',
      'unregisterChatHandler',
      'HostClient',
    ]) {
      assert.equal(typeof car[name], 'function', name)
    }
    assert.equal(car.protocolVersion(), 3)
    assert.match(car.clientVersion(), /^\d+\.\d+\.\d+/)
    assert.equal(car.version, car.clientVersion())
    assert.ok(new car.TerminalToolError('x') instanceof Error)
  })

  test('CarRuntime has every hand-written member of the bindings-api list', () => {
    const handWritten = [
      'daemonCall', 'daemonCallHostManagement', 'registerDaemonHandler', 'unregisterDaemonHandler',
      'registerDaemonNotificationHandler', 'unregisterDaemonNotificationHandler', 'connectionEpoch', 'close',
      'disconnect', 'submitProposal', 'executeProposal', 'inferStream',
    ]
    for (const m of handWritten) {
      assert.equal(typeof car.CarRuntime.prototype[m], 'function', m)
      assert.ok(!(m in car.TYPED_MEMBERS) && !(m in car.GENERATED_METHODS), `${m} is also generated`)
    }
    assert.equal(typeof car.CarRuntime.prototype[Symbol.asyncDispose], 'function')
    assert.equal(typeof car.HostClient.prototype.daemonCallHostManagement, 'function')
    assert.throws(() => new car.HostClient({}), /runtime must be a CarRuntime, got an object/)
  })
})

describe('declarations', () => {
  const fs = require('node:fs')
  const path = require('node:path')
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
  const generatedDts = fs.readFileSync(path.join(__dirname, '..', 'generated.d.ts'), 'utf8')

  test('index.d.ts declares every runtime export, and nothing more', () => {
    const declared = new Set([...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]))
    for (const m of dts.matchAll(/^export \{ ([\w, ]+) \} from/gm)) for (const n of m[1].split(', ')) declared.add(n)
    // `export * from './generated'`: the package-level functions and their table.
    assert.ok(dts.includes("export * from './generated'"))
    for (const m of generatedDts.matchAll(/^export declare (?:const|function) (\w+)/gm)) declared.add(m[1])
    assert.deepEqual([...declared].sort(), Object.keys(car).sort())
  })

  test('index.d.ts declares every hand-written CarRuntime member; generated.d.ts every generated one', () => {
    const body = dts.slice(dts.indexOf('export declare class CarRuntime {'))
    const cls = body.slice(0, body.indexOf('\n}\n'))
    const declared = new Set([...cls.matchAll(/^  (?:readonly )?(\w+)[(:]/gm)].map((m) => m[1]))
    const generated = new Set([...Object.keys(car.GENERATED_METHODS), ...Object.keys(car.TYPED_MEMBERS)])
    const own = Object.getOwnPropertyNames(car.CarRuntime.prototype).filter((n) => n !== 'constructor')
    assert.deepEqual(own.filter((n) => !declared.has(n) && !generated.has(n)), [])
    assert.deepEqual([...declared].filter((n) => n !== 'constructor' && !own.includes(n)), [])
    const runtimeDts = generatedDts.slice(0, generatedDts.indexOf('export interface GeneratedHostMethods'))
    const inGenerated = new Set([...runtimeDts.matchAll(/^  (\w+)\(/gm)].map((m) => m[1]))
    assert.deepEqual([...generated].filter((n) => !inGenerated.has(n)), [])
    assert.deepEqual([...inGenerated].filter((n) => !generated.has(n) || !own.includes(n)), [])
  })

  test('HostClient: hand-written bridge in index.d.ts, the host methods in generated.d.ts', () => {
    const body = dts.slice(dts.indexOf('export declare class HostClient {'))
    const cls = body.slice(0, body.indexOf('\n}\n'))
    const declared = new Set([...cls.matchAll(/^  (?:readonly )?(\w+)[(:]/gm)].map((m) => m[1]))
    const own = Object.getOwnPropertyNames(car.HostClient.prototype).filter((n) => n !== 'constructor')
    const generated = new Set([...Object.keys(car.HOST_GENERATED_METHODS), ...Object.keys(car.HOST_TYPED_MEMBERS)])
    assert.deepEqual(own.filter((n) => !declared.has(n) && !generated.has(n)), [])
    assert.deepEqual([...declared].filter((n) => n !== 'constructor' && !own.includes(n)), [])
    const hostDts = generatedDts.slice(generatedDts.indexOf('export interface GeneratedHostMethods'))
    const inGenerated = new Set([...hostDts.matchAll(/^  (\w+)\(/gm)].map((m) => m[1]))
    assert.deepEqual([...generated].sort(), [...inGenerated].sort())
    // Host methods stay off CarRuntime (CAR's rule), but for the few CAR's CarRuntime has.
    for (const name of generated) {
      assert.equal(name in car.CarRuntime.prototype, RUNTIME_HOST_MEMBERS.map(camel).includes(name), name)
    }
  })
})

const camel = (snake) => snake.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase())
const wrapperName = (method) => camel(method.split(/[./]/).join('_'))
const TS_ARG = { str: 'string', int: 'number', float: 'number', bool: 'boolean', str_list: 'string[]', int_list: 'number[]', json: 'string' }
const TS_RETURN = { unit: 'void', json: 'string', text: 'string', int: 'number', bool: 'boolean', str_list: 'string[]' }
// Members of host methods that CAR's CarRuntime has besides its HostClient (the codegen's
// RUNTIME_HOST_MEMBERS): every host member is HostClient's, these are the runtime's too.
const RUNTIME_HOST_MEMBERS = ['remove_model', 'agent_permissions_list_grants', 'agent_permissions_revoke_grant']

describe('generated members', () => {
  test('typed members agree with the daemon\'s contract (server.schema members)', async () => {
    const fs = require('node:fs')
    const path = require('node:path')
    const generatedDts = fs.readFileSync(path.join(__dirname, '..', 'generated.d.ts'), 'utf8')
    const rows = JSON.parse(await rt.serverSchema()).schema.methods
    let checked = 0
    let modules = 0
    for (const row of rows) {
      for (const m of row.members || []) {
        const name = camel(m.name)
        if (m.module) {
          // A package-level function (CAR's `agentsStart(id)`, …), on neither class.
          assert.equal(car.MODULE_FUNCTIONS[name], row.name, name)
          const fn = car[name]
          assert.equal(typeof fn, 'function', name)
          assert.equal(fn.length, m.args.length, `${name} arity`)
          const ts = m.args.map((a) => (a.optional ? `${camel(a.name)}?: ${TS_ARG[a.kind]} | null` : `${camel(a.name)}: ${TS_ARG[a.kind]}`))
          assert.ok(generatedDts.includes(`export declare function ${name}(${ts.join(', ')}): Promise<${TS_RETURN[m.returns.kind]}>\n`), `${name} declaration`)
          modules += 1
          continue
        }
        // Host methods' members are HostClient's; only those CAR's CarRuntime has as well
        // are the runtime's too.
        const owners = []
        if (row.role === 'host') owners.push([car.HostClient, car.HOST_TYPED_MEMBERS])
        if (row.role !== 'host' || RUNTIME_HOST_MEMBERS.includes(m.name)) owners.push([car.CarRuntime, car.TYPED_MEMBERS])
        else assert.equal(car.CarRuntime.prototype[name], undefined, `${name} is on CarRuntime`)
        for (const [cls, table] of owners) {
          const spec = table[name]
          assert.ok(spec, `${name} (${row.name}) is not generated`)
          const args = m.args.map((a) => ({ name: camel(a.name), kind: a.kind, optional: a.optional }))
          assert.deepEqual(spec, { method: row.name, member: m.name, args, returns: m.returns }, name)
          // The function itself: its parameters are the contract's, in order.
          const fn = cls.prototype[name]
          assert.equal(typeof fn, 'function', name)
          assert.equal(fn.length, m.args.length, `${name} arity`)
          const params = fn.toString().slice(fn.toString().indexOf('(') + 1, fn.toString().indexOf(')')).split(',').map((p) => p.trim()).filter(Boolean)
          assert.deepEqual(params, args.map((a) => a.name), `${name} parameters`)
          // Its declaration: the same parameters with the declared types.
          const ts = args.map((a) => (a.optional ? `${a.name}?: ${TS_ARG[a.kind]} | null` : `${a.name}: ${TS_ARG[a.kind]}`))
          assert.ok(generatedDts.includes(`  ${name}(${ts.join(', ')}): Promise<${TS_RETURN[m.returns.kind]}>\n`), `${name} declaration`)
          checked += 1
        }
      }
    }
    assert.equal(checked, Object.keys(car.TYPED_MEMBERS).length + Object.keys(car.HOST_TYPED_MEMBERS).length)
    assert.ok(checked > 30)
    assert.equal(modules, Object.keys(car.MODULE_FUNCTIONS).length)
    assert.ok(modules > 20)
  })

  test('every served method has a member; the wrappers are exactly the rest', async () => {
    const table = native.methodTable()
    const rows = JSON.parse(await rt.serverSchema()).schema.methods
    assert.deepEqual(rows.filter((r) => !r.debug).map((r) => r.name).sort(), [...table].sort())
    const host = new Set(rows.filter((r) => r.role === 'host').map((r) => r.name))
    assert.ok(host.has('agents.upsert') && host.has('session.clear_halt'))
    const taken = new Set([...Object.keys(car.TYPED_MEMBERS), 'inferStream', 'submitProposal', 'executeProposal'])
    const onRuntime = (m) => !host.has(m) || RUNTIME_HOST_MEMBERS.map(camel).includes(wrapperName(m))
    const wrappers = Object.fromEntries(table.filter((m) => onRuntime(m) && !taken.has(wrapperName(m))).map((m) => [wrapperName(m), m]))
    assert.deepEqual(car.GENERATED_METHODS, wrappers, 'generated.js is stale: run `cargo xtask codegen`')
    for (const name of Object.keys(wrappers)) {
      assert.equal(typeof rt[name], 'function', name)
      assert.equal(rt[name].length, 0, `${name}(paramsJson = '{}')`)
    }
    const hostTaken = new Set(Object.keys(car.HOST_TYPED_MEMBERS))
    const hostWrappers = Object.fromEntries([...host].filter((m) => !hostTaken.has(wrapperName(m))).map((m) => [wrapperName(m), m]))
    assert.deepEqual(car.HOST_GENERATED_METHODS, hostWrappers)
    const hc = new car.HostClient(rt)
    for (const name of Object.keys(hostWrappers)) {
      assert.equal(typeof hc[name], 'function', name)
      assert.equal(hc[name].length, 0, `${name}(paramsJson = '{}')`)
      if (!RUNTIME_HOST_MEMBERS.map(camel).includes(name)) assert.equal(rt[name], undefined, `${name} is on CarRuntime`)
    }
    for (const name of ['runsStart', 'embed', 'infer', 'stateGet', 'inferTrackedWithRequest']) assert.ok(name in car.TYPED_MEMBERS, name)
  })

  test('wrappers call through daemonCall with default params; host methods over the host connection', async () => {
    const caps = JSON.parse(await rt.capabilitiesList())
    assert.equal(caps.caller_role, 'operator')
    assert.ok(caps.methods.some((m) => m.method === 'state.get'))
    assert.deepEqual(JSON.parse(await rt.toolsList()), { tools: [], count: 0 })
    assert.deepEqual(JSON.parse(await new car.HostClient(rt).sessionClearHalt()), { cleared: false })
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
    const tools = JSON.parse(await rt.listTools())
    assert.deepEqual(tools.map((t) => t.name), ['read_file', 'write_file'])
    const write = tools[1]
    assert.equal(write.description, 'writes')
    assert.deepEqual(write.parameters, { type: 'object' })
    assert.equal(write.source, 'user_defined')
    assert.equal(await rt.unregisterTool('write_file'), 1)
    assert.equal(await rt.unregisterTool('write_file'), 0)
    await rt.registerTool('scratch')
    assert.deepEqual(JSON.parse(await rt.toolsUnregister('{"name":"scratch"}')), { unregistered: 'scratch', removed: 1 })
  })

  test('policies register, list, unregister', async () => {
    await rt.registerPolicy('no-rm', 'deny_tool', 'rm')
    await rt.registerPolicy('no-etc', 'deny_tool_param', 'read_file', 'path', '^/etc/')
    await rt.registerPolicy('needs-ok', 'require_state', undefined, 'approved', undefined, 'true')
    const policies = JSON.parse(await rt.listPolicies())
    assert.deepEqual(policies.map((p) => p.name), ['no-rm', 'no-etc', 'needs-ok'], 'in registration order')
    for (const p of policies) assert.ok(typeof p.description === 'string' && p.description.length > 0, JSON.stringify(p))
    assert.deepEqual(JSON.parse(await rt.policyList()).scope, 'global')
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
    const start = { intent: 'api test', agent_id: 'node-agent', idempotency_key: 'k1' }
    const run = JSON.parse(await rt.runsStart(JSON.stringify(start)))
    assert.equal(typeof run.run_id, 'string')
    assert.equal(run.agent_id, 'node-agent')
    const again = JSON.parse(await rt.runsStart(JSON.stringify(start)))
    assert.equal(again.run_id, run.run_id, 'the idempotency key returns the same run')
    const done = JSON.parse(await rt.runsComplete(JSON.stringify({ run_id: run.run_id, outcome: { status: 'success', summary: 'done' } })))
    assert.equal(done.run_id, run.run_id)
    assert.equal(done.ok, true)
    assert.equal(done.outcome, 'success')
    assert.equal(done.summary, 'done')
    const twice = await rt.runsComplete(JSON.stringify({ run_id: run.run_id, outcome: 'success' })).catch((e) => e)
    assert.ok(twice instanceof car.DaemonRpcError && twice.code === -32602, String(twice))
    // runs.list is for the run's agent or a host session; data.reason says which refusal.
    const refused = await rt.runsList('{"agent_id":"node-agent"}').catch((e) => e)
    assert.ok(refused instanceof car.DaemonRpcError, String(refused))
    assert.deepEqual(refused.data, { reason: 'not_owner' })
    const runs = JSON.parse(await rt.daemonCallHostManagement('runs.list', '{"agent_id":"node-agent"}'))
    assert.equal(runs.runs.find((r) => r.run_id === run.run_id).status, 'completed', JSON.stringify(runs))
    await rt.registerTool('noop')
    await rt.executeProposal(JSON.stringify({ actions: [{ id: 'n', type: 'tool_call', tool: 'noop' }] }), () => '{}')
    assert.ok((await rt.eventCount()) > before, 'a proposal run logs events')
    const events = JSON.parse(await rt.eventQuery(JSON.stringify({ limit: 5 })))
    assert.ok(Array.isArray(events.events) && events.events.length >= 1 && events.events.length <= 5, JSON.stringify(events))
    assert.equal(events.count, events.events.length)
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

  test('bad arguments are InvalidArgumentErrors (TypeErrors) naming the argument, before anything is sent', async () => {
    const invalid = (re) => (e) => e instanceof car.InvalidArgumentError && e instanceof TypeError && e.code === undefined && re.test(e.message)
    await assert.rejects(rt.daemonCall('state.get', '{nope'), invalid(/^paramsJson is not valid JSON/))
    await assert.rejects(rt.daemonCall('state.get', { key: 'x' }), invalid(/paramsJson must be a JSON string, got an object/))
    await assert.rejects(rt.daemonCall('', '{}'), invalid(/method must be a non-empty string/))
    await assert.rejects(rt.stateSet('k', 'undefined'), invalid(/^stateSet: valueJson is not valid JSON/))
    await assert.rejects(rt.stateGet(42), invalid(/^stateGet: key must be a string, got an integer$/))
    await assert.rejects(rt.addFact('s', 'b', 'fact', 'high'), invalid(/^addFact: confidence must be a number, got a string$/))
    await assert.rejects(rt.addFact('s', 'b'), invalid(/^addFact: kind is required$/))
    await assert.rejects(rt.queryFacts('q', 1.5), invalid(/^queryFacts: k must be an integer, got a number$/))
    await assert.rejects(rt.daemonCall('debug.sleep', '{"ms":1}', { timeoutMs: 0 }), /timeoutMs must be at least 1/)
    assert.throws(() => new car.CarRuntime({ urll: 'ws://x' }), /unknown option urll/)
    assert.throws(() => new car.CarRuntime({ url: '' }), invalid(/url must be a non-empty string/))
    assert.throws(() => rt.registerDaemonHandler('x.y', 'nope'), /handler must be a function, got string/)
  })

  test('role refusals keep the daemon\'s data untouched; host wrappers use the host connection', async () => {
    const refused = await rt.daemonCall('models.remove', '{"id":"x"}').catch((e) => e)
    assert.ok(refused instanceof car.DaemonRpcError, String(refused))
    assert.equal(refused.data.reason, 'host_required')
    // HostClient's generated wrapper of a host method passes the role check: the daemon
    // answers about the model itself.
    const viaHost = await new car.HostClient(rt).modelsRemove('{"id":"x"}').catch((e) => e)
    assert.ok(viaHost instanceof car.DaemonRpcError, String(viaHost))
    assert.notEqual(viaHost.data && viaHost.data.reason, 'host_required', String(viaHost))
    assert.match(viaHost.message, /\bx\b/)
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
    assert.deepEqual(JSON.parse(await rt.daemonCallHostManagement('session.clear_halt', '{}')), { cleared: false })
  })

  test('close() fails pending calls as closed; a later call reconnects under a new epoch; handlers stay', async () => {
    const r = new car.CarRuntime()
    r.registerDaemonHandler('app.ping', () => '"pong"')
    assert.equal(await r.stateGet('a'), 'null')
    assert.equal(r.isConnected, true)
    const first = await r.connectionEpoch()
    assert.equal(await r.connectionEpoch(), first)
    await r.stateSet('a', '1')
    const pending = r.daemonCall('debug.sleep', JSON.stringify({ ms: 600000 })).catch((e) => e)
    await sleep(200) // the call is on the connection by then (close() cannot fail a call not yet sent)
    r.close()
    r.close()
    const err = await pending
    assert.ok(err instanceof car.DaemonConnectionError, String(err))
    assert.equal(err.kind, 'closed')
    assert.equal(r.isConnected, false)
    assert.equal(await r.stateGet('a'), 'null', 'a new session has fresh state')
    const second = await r.connectionEpoch()
    assert.ok(second > first, `${first} then ${second}`)
    assert.deepEqual(JSON.parse(await r.daemonCall('debug.call_client', '{"method":"app.ping"}')), { result: 'pong' })
    r.close()
  })

  test('Symbol.asyncDispose closes the connection; the runtime stays usable', async () => {
    const r = new car.CarRuntime()
    await r.stateKeys()
    const epoch = await r.connectionEpoch()
    await r[Symbol.asyncDispose]()
    assert.equal(r.isConnected, false)
    assert.deepEqual(await r.stateKeys(), [])
    assert.ok((await r.connectionEpoch()) > epoch)
    r.close()
  })

  test('explicit url connects over WebSocket', async () => {
    const r = new car.CarRuntime({ url: daemon.url })
    assert.equal(await r.stateGet('anything'), 'null')
    r.close()
  })
})
