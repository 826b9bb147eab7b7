'use strict'
// Multi-agent coordination from Node: the process-wide agent runner and CAR's module-level
// `runSwarm` … `runSubtask` (the same design as bindings-python's `_multi.py`).
//
// The daemon runs every coordination (`multi.*`) and sends each agent to the calling
// connection as a `multi.run_agent {spec, task}` reverse call. `registerAgentRunner(fn)`
// serves those calls on every `CarRuntime` of the process, existing and future, with
// `fn(specJson, task)`, which returns (a Promise of) an `AgentOutput` JSON string (`{name,
// answer, turns, tool_calls, duration_ms, error?, tokens?}`), or any other JSON value (it
// is `JSON.stringify`d; a string that is not JSON is the answer itself). A throw or a
// rejection makes that agent's output an error (the daemon records `agent '<name>' failed:
// <message>`); the run goes on. With no runner registered the client answers `-32601` and
// the daemon runs the agents itself on its own models.
//
// The `run*` functions open a short-lived `CarRuntime` (which serves the registered runner,
// if any), call the pattern's JSON wrapper (`multiSwarm`, …) and resolve to the result JSON.

const { InvalidArgumentError } = require('./errors.js')
const { describe, requireFunction } = require('./callbacks.js')

const RUN_AGENT = 'multi.run_agent'

// The registered runner as a daemon handler (`paramsJson` → result JSON), or null.
let handler = null
// Every live `CarRuntime` of the process, held weakly (a runtime is not kept alive by it).
const runtimes = new Set()
const forget = new FinalizationRegistry((ref) => runtimes.delete(ref))

function isJson(text) {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/** `agentFn(specJson, task)` → the `multi.run_agent` handler serving it. */
function runAgentHandler(agentFn) {
  return async (paramsJson) => {
    const params = JSON.parse(paramsJson)
    const spec = params.spec ?? {}
    const out = await agentFn(JSON.stringify(spec), typeof params.task === 'string' ? params.task : '')
    if (typeof out === 'string') return isJson(out) ? out : JSON.stringify(out)
    if (out === undefined) {
      throw new TypeError(`the agent runner returned undefined for agent '${spec.name}': return an AgentOutput JSON string or object`)
    }
    return JSON.stringify(out)
  }
}

function serve(rt) {
  if (handler === null) rt.unregisterDaemonHandler(RUN_AGENT)
  else rt.registerDaemonHandler(RUN_AGENT, handler)
}

function live() {
  const out = []
  for (const ref of runtimes) {
    const rt = ref.deref()
    if (rt === undefined) runtimes.delete(ref)
    else out.push(rt)
  }
  return out
}

/** Called by every new `CarRuntime`: it serves the registered runner, if any. */
function attachRuntime(rt) {
  const ref = new WeakRef(rt)
  runtimes.add(ref)
  forget.register(rt, ref)
  if (handler !== null) serve(rt)
}

/**
 * Serves `multi.run_agent` on every `CarRuntime` of the process (existing and future) with
 * `agentFn(specJson, task)`; replaces any earlier runner. Throws a `TypeError` at once when
 * `agentFn` is not a function; the Promise (CAR's signature) is already resolved.
 */
function registerAgentRunner(agentFn) {
  requireFunction(agentFn, 'agentFn')
  handler = runAgentHandler(agentFn)
  for (const rt of live()) serve(rt)
  return Promise.resolve()
}

/** Removes the runner: the daemon runs the agents itself again. Idempotent. */
function unregisterAgentRunner() {
  handler = null
  for (const rt of live()) serve(rt)
}

// ---- arguments (a rejection naming the argument; nothing is sent) ----

function jsonArg(name, text) {
  if (typeof text !== 'string') throw new InvalidArgumentError(`${name} must be a JSON string, got ${describe(text)}`)
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new InvalidArgumentError(`${name} is not valid JSON: ${err.message}`)
  }
}

function optionalJsonArg(name, text) {
  return text === undefined || text === null ? undefined : jsonArg(name, text)
}

function stringArg(name, value) {
  if (typeof value !== 'string') throw new InvalidArgumentError(`${name} must be a string, got ${describe(value)}`)
  return value
}

/** CAR's module-level `run*` functions, running on short-lived `CarRuntime`s. */
function multiRunners(CarRuntime) {
  async function run(member, params, budgetSpec) {
    const budget = optionalJsonArg('budgetSpec', budgetSpec)
    if (budget !== undefined) params.budget = budget
    const rt = new CarRuntime()
    try {
      return await rt[member](JSON.stringify(params))
    } finally {
      rt.close()
    }
  }

  function withSynthesizer(params, synthesizerSpec) {
    const synthesizer = optionalJsonArg('synthesizerSpec', synthesizerSpec)
    if (synthesizer !== undefined) params.synthesizer = synthesizer
    return params
  }

  /** `multi.swarm`: `mode` `parallel`, `sequential` or `hybrid` (CAR's `debate`). */
  async function runSwarm(mode, agents, task, synthesizerSpec = undefined, budgetSpec = undefined) {
    const params = { mode: stringArg('mode', mode), agents: jsonArg('agents', agents), task: stringArg('task', task) }
    return run('multiSwarm', withSynthesizer(params, synthesizerSpec), budgetSpec)
  }

  /** `multi.pipeline`: each stage reads the earlier stages' answers. */
  async function runPipeline(stages, task, budgetSpec = undefined) {
    return run('multiPipeline', { stages: jsonArg('stages', stages), task: stringArg('task', task) }, budgetSpec)
  }

  /** `multi.supervisor`: workers in rounds until the supervisor approves (or `maxRounds`). */
  async function runSupervisor(workers, supervisor, task, maxRounds, budgetSpec = undefined) {
    if (!Number.isInteger(maxRounds) || maxRounds < 1) {
      throw new InvalidArgumentError(`maxRounds must be a positive integer, got ${typeof maxRounds === 'number' ? maxRounds : describe(maxRounds)}`)
    }
    const params = { workers: jsonArg('workers', workers), supervisor: jsonArg('supervisor', supervisor), task: stringArg('task', task), max_rounds: maxRounds }
    return run('multiSupervisor', params, budgetSpec)
  }

  /** `multi.map_reduce`: `mapper` on every item of `items` (a JSON string array), then `reducer`. */
  async function runMapReduce(mapper, reducer, task, items, budgetSpec = undefined) {
    const params = { mapper: jsonArg('mapper', mapper), reducer: jsonArg('reducer', reducer), task: stringArg('task', task), items: jsonArg('items', items) }
    return run('multiMapReduce', params, budgetSpec)
  }

  /** `multi.vote`: independent answers, the majority (or the synthesizer's pick) wins. */
  async function runVote(agents, task, synthesizerSpec = undefined, budgetSpec = undefined) {
    const params = { agents: jsonArg('agents', agents), task: stringArg('task', task) }
    return run('multiVote', withSynthesizer(params, synthesizerSpec), budgetSpec)
  }

  /** `multi.tournament`: single-elimination pairwise judging of `competitors` by `judge`. */
  async function runTournament(competitors, judge, task, budgetSpec = undefined) {
    const params = { competitors: jsonArg('competitors', competitors), judge: jsonArg('judge', judge), task: stringArg('task', task) }
    return run('multiTournament', params, budgetSpec)
  }

  /** `multi.subtask`: `mainAgent` may hand subsets of its tools to sub-agents. */
  async function runSubtask(mainAgent, task, budgetSpec = undefined) {
    return run('multiSubtask', { main: jsonArg('mainAgent', mainAgent), task: stringArg('task', task) }, budgetSpec)
  }

  /** `scheduler.run`: a prompt task's due occurrence, its agent served by the registered runner. */
  async function runTask(taskJson) {
    return run('schedulerRun', { task: jsonArg('taskJson', taskJson) }, undefined)
  }

  /** `scheduler.run_loop`: up to `maxIterations` occurrences on the task's cadence. */
  async function runTaskLoop(taskJson, maxIterations = undefined) {
    const params = { task: jsonArg('taskJson', taskJson) }
    if (maxIterations !== undefined && maxIterations !== null) {
      if (!Number.isInteger(maxIterations) || maxIterations < 1) {
        throw new InvalidArgumentError(`maxIterations must be a positive integer, got ${describe(maxIterations)}`)
      }
      params.max_iterations = maxIterations
    }
    return run('schedulerRunLoop', params, undefined)
  }

  return { runSwarm, runPipeline, runSupervisor, runMapReduce, runVote, runTournament, runSubtask, runTask, runTaskLoop }
}

module.exports = { RUN_AGENT, attachRuntime, registerAgentRunner, unregisterAgentRunner, multiRunners }
