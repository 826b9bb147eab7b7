'use strict'
// Multi-agent coordination against a real daemon: CAR's module-level `runSwarm` …
// `runSubtask` and the generated `multi*` wrappers, with the process-wide
// `registerAgentRunner` serving the daemon's `multi.run_agent` reverse calls (and without
// one, the daemon running the agents itself).

const assert = require('node:assert/strict')
const { after, afterEach, before, describe, test } = require('node:test')

const { startDaemon } = require('./support/daemon.js')
const car = require('..')

let daemon
// Created before any runner is registered: registering one serves existing runtimes too.
let rt

before(async () => {
  daemon = await startDaemon()
  rt = new car.CarRuntime()
})

afterEach(() => car.unregisterAgentRunner())

after(async () => {
  rt.close()
  await daemon.dispose()
})

const spec = (name, extra = {}) => ({ name, system_prompt: '', tools: [], max_turns: 1, metadata: {}, ...extra })
const specs = (...names) => JSON.stringify(names.map((n) => spec(n)))

/** A runner answering `<name>: <task>`, recording every call. */
function echoRunner(calls = []) {
  const fn = (specJson, task) => {
    const s = JSON.parse(specJson)
    calls.push({ spec: s, task })
    return JSON.stringify({ name: s.name, answer: `${s.name}: ${task}`, turns: 1, tool_calls: 0, duration_ms: 1 })
  }
  fn.calls = calls
  return fn
}

describe('registerAgentRunner', () => {
  test('a parallel swarm runs every agent through the runner', async () => {
    const runner = echoRunner()
    const registered = car.registerAgentRunner(runner)
    assert.ok(registered instanceof Promise)
    assert.equal(await registered, undefined)
    const agents = JSON.stringify([spec('a', { role: 'critic' }), spec('b')])
    const r = JSON.parse(await car.runSwarm('parallel', agents, 'T'))
    assert.equal(r.task, 'T')
    assert.deepEqual(r.outputs.map((o) => [o.name, o.answer, o.error]), [['a', 'a: T', null], ['b', 'b: T', null]])
    assert.equal(r.final_summary, '## a\na: T\n\n## b\nb: T')
    assert.deepEqual(runner.calls.map((c) => c.spec.name).sort(), ['a', 'b'])
    assert.deepEqual(runner.calls.map((c) => c.task), ['T', 'T'])
    // Keys beyond CAR's reach the runner as given.
    assert.equal(runner.calls.find((c) => c.spec.name === 'a').spec.role, 'critic')
  })

  test('a pipeline stage reads the earlier stages\' answers', async () => {
    const runner = echoRunner()
    await car.registerAgentRunner(runner)
    const r = JSON.parse(await car.runPipeline(specs('one', 'two'), 'Build'))
    assert.deepEqual(r.stages.map((s) => s.name), ['one', 'two'])
    assert.deepEqual(runner.calls.map((c) => c.spec.name), ['one', 'two'])
    assert.equal(runner.calls[0].task, 'Build')
    assert.match(runner.calls[1].task, /^Build\n/)
    assert.ok(runner.calls[1].task.includes('- one: one: Build'), runner.calls[1].task)
    assert.ok(r.final_answer.startsWith('two: Build'), r.final_answer)
  })

  test('a tournament takes the judge\'s JSON verdict', async () => {
    const judged = []
    await car.registerAgentRunner((specJson, task) => {
      const { name } = JSON.parse(specJson)
      // The daemon derives each match's judge from `judge` (its name starts with it).
      if (name.startsWith('judge')) {
        judged.push(task)
        return JSON.stringify({ name, answer: '{"winner": "B", "rationale": "later is better"}' })
      }
      return JSON.stringify({ name, answer: `${name}: ${task}` })
    })
    const r = JSON.parse(await car.runTournament(specs('a', 'b'), JSON.stringify(spec('judge')), 'T'))
    assert.equal(r.winner_name, 'b')
    assert.equal(r.winner_answer, 'b: T')
    assert.deepEqual(r.ranking, ['b', 'a'])
    assert.deepEqual(r.matches.map((m) => [m.a, m.b, m.winner, m.rationale]), [['a', 'b', 'b', 'later is better']])
    assert.equal(judged.length, 1)
    assert.ok(judged[0].includes('a: T') && judged[0].includes('b: T'), judged[0])
  })

  test('a budget caps the agents started', async () => {
    const runner = echoRunner()
    await car.registerAgentRunner(runner)
    const r = JSON.parse(await car.runSwarm('sequential', specs('a', 'b', 'c'), 'T', null, JSON.stringify({ max_agents: 2 })))
    assert.deepEqual(r.outputs.map((o) => o.name), ['a', 'b', 'c'])
    assert.equal(r.outputs[0].error, null)
    assert.equal(r.outputs[2].error, 'coordination budget agent cap reached: 2 of 2 agents already started')
    assert.equal(r.outputs[2].outcome.status, 'give_up')
    assert.deepEqual(runner.calls.map((c) => c.spec.name), ['a', 'b'])
  })

  test('a runner that throws or rejects fails only that agent; other returns are stringified', async () => {
    await car.registerAgentRunner(async (specJson, task) => {
      const { name } = JSON.parse(specJson)
      if (name === 'broken') throw new Error('no model')
      if (name === 'rejects') return Promise.reject(new RangeError('out of tokens'))
      if (name === 'object') return { name, answer: `object for ${task}`, turns: 2 }
      if (name === 'text') return 'just text'
      return undefined
    })
    const r = JSON.parse(await car.runSwarm('parallel', specs('broken', 'rejects', 'object', 'text', 'nothing'), 'T'))
    const by = Object.fromEntries(r.outputs.map((o) => [o.name, o]))
    assert.equal(by.broken.error, "agent 'broken' failed: no model")
    assert.equal(by.rejects.error, "agent 'rejects' failed: out of tokens")
    assert.deepEqual([by.object.answer, by.object.turns, by.object.error], ['object for T', 2, null])
    assert.deepEqual([by.text.answer, by.text.error], ['just text', null])
    assert.match(by.nothing.error, /^agent 'nothing' failed: the agent runner returned undefined/)
    assert.equal(r.final_summary, '## object\nobject for T\n\n## text\njust text')
  })

  test('the runner serves runtimes created before and after it, and the generated wrappers', async () => {
    const runner = echoRunner()
    await car.registerAgentRunner(runner)
    const v = JSON.parse(await rt.multiVote(JSON.stringify({ agents: [spec('x'), spec('y')], task: 'Q' })))
    assert.deepEqual(v.votes.map((o) => o.answer), ['x: Q', 'y: Q'])
    const later = new car.CarRuntime()
    try {
      const m = JSON.parse(await later.multiMapReduce(JSON.stringify({ mapper: spec('m'), reducer: spec('r'), items: ['p', 'q'], task: 'Sum' })))
      assert.equal(m.map_outputs.length, 2)
      assert.ok(m.reduced_answer.startsWith('r: '), m.reduced_answer)
    } finally {
      later.close()
    }
    // The mapper runs once per item, as `<mapper>_<index>`.
    assert.deepEqual(runner.calls.map((c) => c.spec.name).sort(), ['m_0', 'm_1', 'r', 'x', 'y'])
  })

  test('runMapReduce, runSupervisor and runVote', async () => {
    const runner = echoRunner()
    await car.registerAgentRunner((specJson, task) => {
      const { name } = JSON.parse(specJson)
      if (name === 'boss') return JSON.stringify({ name, answer: 'APPROVED: ship it' })
      return runner(specJson, task)
    })
    const m = JSON.parse(await car.runMapReduce(JSON.stringify(spec('m')), JSON.stringify(spec('r')), 'Sum', '["p", "q"]'))
    assert.deepEqual(m.map_outputs.map((o) => o.name), ['m_0', 'm_1'])
    const mapped = runner.calls.filter((c) => c.spec.name.startsWith('m_')).map((c) => c.task)
    assert.ok(mapped.some((t) => t.includes('p')) && mapped.some((t) => t.includes('q')), JSON.stringify(mapped))
    const s = JSON.parse(await car.runSupervisor(specs('w'), JSON.stringify(spec('boss')), 'Do', 3))
    assert.equal(s.approved, true)
    assert.equal(s.rounds.length, 1)
    const v = JSON.parse(await car.runVote(specs('x', 'y'), 'Q'))
    assert.equal(v.votes.length, 2)
  })

  test('runSubtask: the main agent spawns a sub-agent with a subset of its tools', async () => {
    const tasks = []
    await car.registerAgentRunner(async (specJson, task) => {
      const { name, tools } = JSON.parse(specJson)
      tasks.push([name, task])
      if (name === 'main' && !task.startsWith('Original task:')) {
        return { name, answer: JSON.stringify({ spawn_subtask: [{ name: 'reader', task: 'read it', tools: ['read_file'] }] }) }
      }
      return { name, answer: `${name} done with ${tools.join(',')}` }
    })
    const main = JSON.stringify(spec('main', { tools: ['read_file', 'write_file'] }))
    const r = JSON.parse(await car.runSubtask(main, 'Plan'))
    assert.deepEqual(r.subtasks.map((t) => [t.name, t.tools, t.output.answer]), [['reader', ['read_file'], 'reader done with read_file']])
    assert.equal(r.final_answer, 'main done with read_file,write_file')
    assert.deepEqual(tasks.map(([n]) => n), ['main', 'reader', 'main'])
    assert.ok(tasks[2][1].includes('- reader: reader done with read_file'), tasks[2][1])
  })

  test('unregistered, the daemon runs the agents itself', async () => {
    const runner = echoRunner()
    await car.registerAgentRunner(runner)
    car.unregisterAgentRunner()
    car.unregisterAgentRunner()
    // This daemon has no model: the agent fails on the daemon's side, not in the runner.
    const r = JSON.parse(await car.runSwarm('parallel', specs('a'), 'T'))
    assert.equal(r.outputs[0].name, 'a')
    assert.match(r.outputs[0].error, /^agent 'a' failed: /)
    assert.deepEqual(runner.calls, [])
  })
})

describe('bad input', () => {
  test('the daemon\'s -32602 names the field', async () => {
    await car.registerAgentRunner(echoRunner())
    const err = await car.runSwarm('parallel', '[]', 'T').then(
      () => assert.fail('resolved'),
      (e) => e,
    )
    assert.ok(err instanceof car.DaemonRpcError, String(err))
    assert.equal(err.code, -32602)
    assert.match(err.message, /agents/)
  })

  test('arguments are checked before anything is sent', async () => {
    assert.throws(() => car.registerAgentRunner('x'), TypeError)
    assert.throws(() => car.registerAgentRunner(), /agentFn must be a function, got undefined/)
    await assert.rejects(car.runSwarm('parallel', 'not json', 'T'), (e) => e instanceof car.InvalidArgumentError && /agents is not valid JSON/.test(e.message))
    await assert.rejects(car.runSwarm('parallel', specs('a'), 7), /task must be a string, got number/)
    await assert.rejects(car.runPipeline(specs('a'), 'T', '{'), /budgetSpec is not valid JSON/)
    await assert.rejects(car.runSupervisor(specs('a'), JSON.stringify(spec('s')), 'T', 0), /maxRounds must be a positive integer, got 0/)
    await assert.rejects(car.runMapReduce(JSON.stringify(spec('m')), JSON.stringify(spec('r')), 'T', ['x']), /items must be a JSON string, got an array/)
  })
})
