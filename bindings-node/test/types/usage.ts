// Type-checked by `npm run typecheck` (tsc --noEmit): uses every export of index.d.ts, so a
// missing or mistyped declaration fails the build. Never executed.
import * as car from '../..'
import {
  CarError,
  CarRuntime,
  DaemonConnectionError,
  DaemonRpcError,
  DaemonTimeoutError,
  GENERATED_METHODS,
  HOST_GENERATED_METHODS,
  HOST_TYPED_MEMBERS,
  HostClient,
  InvalidArgumentError,
  TYPED_MEMBERS,
  TerminalToolError,
  clientVersion,
  executeProposal,
  getMemoryNamespace,
  protocolVersion,
  runAgent,
  runMapReduce,
  runPipeline,
  runSubtask,
  runSupervisor,
  runSwarm,
  runTournament,
  runVote,
  registerAgentRunner,
  registerChatHandler,
  registerToolCancelHandler,
  registerToolHandler,
  setMemoryNamespace,
  unregisterAgentRunner,
  unregisterChatHandler,
  unregisterToolCancelHandler,
  unregisterToolHandler,
  version,
} from '../..'

async function everything(): Promise<void> {
  const v: number = protocolVersion()
  const c: string = clientVersion() + version
  const names: Record<string, string> = GENERATED_METHODS
  const typed: car.TypedMemberSpec | undefined = TYPED_MEMBERS['addFact']
  const kind: car.ArgKind | undefined = typed?.args[0]?.kind
  setMemoryNamespace('ns')
  const ns: string | null = getMemoryNamespace()
  setMemoryNamespace(null)

  const rt = new CarRuntime({ url: 'ws://127.0.0.1:9100', token: 't', memoryNamespace: 'n' })
  const rt2: car.CarRuntime = new car.CarRuntime()

  // Bridge
  const out: string = await rt.daemonCall('state.get', '{"key":"a"}', { timeoutMs: 100 })
  await rt.daemonCall('capabilities.list')
  await rt.daemonCallHostManagement('session.clear_halt', '{}')
  rt.registerDaemonHandler('app.x', async (paramsJson: string) => paramsJson)
  rt.registerDaemonHandler('app.y', (paramsJson) => paramsJson)
  rt.unregisterDaemonHandler('app.y')
  rt.registerDaemonNotificationHandler('app.z', (paramsJson: string) => {
    void paramsJson
  })
  rt.unregisterDaemonNotificationHandler('app.z')
  const flags: boolean = rt.isConnected
  const epoch: number = await rt.connectionEpoch()
  rt.disconnect()

  // Discovery and state
  const schema: string = await rt.serverSchema()
  const caps: string = await rt.capabilities()
  const nothing: void = await rt.stateSet('k', '1', 'tenant')
  const got: string = await rt.stateGet('k', null)
  const exists: boolean = await rt.stateExists('k')
  const keys: string[] = await rt.stateKeys()
  const snap: string = await rt.stateSnapshot()

  // Memory
  const count: number = await rt.addFact('s', 'b', 'fact', 0.5, 'id', ['t'], 'src')
  const n: number = await rt.factCount()
  const rows: string = await rt.queryFacts('q', 3)
  const ctx: string = await rt.buildContext('q', 4096)
  const cons: string = await rt.consolidate()
  const deleted: string = await rt.memoryDelete('{"id":"x"}')
  const persisted: number = await rt.persistMemory('p.json')
  const loaded: number = await rt.loadMemory('p.json')

  // Skills
  const skills: number = await rt.ingestSkill('n', 'c', 'web', 'p', 'u', ['k'], 'd', 'old')
  const found: string = await rt.findSkill('p', 'u', 't', 2)
  const report: string = await rt.reportOutcome('n', 'success')
  const listed: string = await rt.listSkills('web')

  // Tools and policies
  await rt.registerTool('t')
  await rt.registerToolSchema('{"name":"t"}')
  const tools: string = await rt.listTools()
  const removed: number = await rt.unregisterTool('t')
  await rt.registerPolicy('p', 'deny_tool', 't')
  await rt.registerPolicy('q', 'require_state', null, 'k', null, 'true', 'session')
  const unp: number = await rt.unregisterPolicy('p')
  const policies: string = await rt.listPolicies()

  // Proposals
  const verified: string = await rt.verifyProposal('{"actions":[]}')
  const submitted: string = await rt.submitProposal('{"actions":[]}', 's')
  const executed: string = await rt.executeProposal('{"actions":[]}', async (callJson: string) => {
    const call: car.ToolCallJson = JSON.parse(callJson)
    if (call.attempt > 1) throw new TerminalToolError('stop', { data: { why: 'x' } })
    return JSON.stringify(call.params)
  })
  const executed2: string = await executeProposal(rt2, '{"actions":[]}', (tool: string, paramsJson: string) => tool + paramsJson, 'sid')

  // The agent loop
  const agentConfig: car.AgentLoopConfig = {
    agentId: 'calc-1',
    agentName: 'calc',
    identity: 'You add.',
    toolSchemas: [{ name: 'add', description: 'add', parameters: { type: 'object' } }],
    tools: {
      add: (params: { a: number; b: number }) => ({ sum: params.a + params.b }),
      addAsync: async ({ a, b }) => a + b,
      withCall: (_params, call: car.ToolCallJson) => call.action_id,
      nothing: () => undefined,
    },
    policies: [{ name: 'p', rule: 'deny_tool', target: 'rm' }],
    defaultModel: null,
    maxTokens: 64,
    maxTurns: 4,
    targetOutcome: 'the sum',
    runtime: rt,
  }
  const outcome: car.AgentOutcome = await runAgent(agentConfig, 'add 2 and 3', 2)
  const again: car.AgentOutcome = await car.runAgent({ agentName: 'a', identity: 'i' }, 'goal')
  const metrics: car.AgentMetrics = outcome.metrics
  const runId: string | null = outcome.run_id
  const texts: string[] = [outcome.status, outcome.summary, outcome.timestamp, ...again.tools_called]
  const evidence: unknown[] = outcome.evidence
  const counts: number[] = [metrics.turns, metrics.tool_calls, metrics.actions_succeeded, metrics.actions_failed]
  const toolSchema: car.AgentToolSchema = { name: 'x' }
  const toolFn: car.AgentToolFunction = (params) => params

  // Events and runs
  const events: number = await rt.eventCount()
  const query: string = await rt.eventQuery('{"limit":1}')
  const run: string = await rt.runsStart('{"intent":"x"}')
  const done: string = await rt.runsComplete('{"run_id":"r","outcome":{"status":"success"}}')

  // Inference
  const text: string = await rt.infer('hi', 'model', 16)
  const tracked: string = await rt.inferTracked('hi', null, 16, 'ctx', '[]', '[]', 'auto', false)
  const requested: string = await rt.inferTrackedWithRequest('{"prompt":"hi"}')
  const registered: string = await rt.registerModel('{"id":"m","path":"/m.gguf"}')
  const streamed: string = await rt.inferStream('hi', (eventJson: string) => void eventJson, 'm', 8)
  const streamedAsync: string = await rt.inferStream('hi', async (eventJson: string) => {
    await Promise.resolve(eventJson)
  })
  const embedded: string = await rt.embed(['a'], 'm')
  const classified: string = await rt.classify('t', ['a', 'b'])
  const models: string = await rt.listModels()
  const tokens: string = await rt.tokenize('m', 'text')
  const detok: string = await rt.detokenize('m', [1, 2])

  // Generated wrappers (one per method-table row)
  const gen: string = await rt.memoryAddFact('{"subject":"s","body":"b"}')
  const gen2: string = await rt.capabilitiesList()
  const gen3: string = await rt.runsGetTrace('{"run_id":"r"}')
  // Host methods: HostClient's (CAR keeps them off CarRuntime), but CAR's removeModel.
  const host = new HostClient(rt)
  const owner: CarRuntime = host.runtime
  const gen4: string = await host.sessionClearHalt()
  const upserted: string = await host.agentsUpsert('{"id":"a","name":"A","command":"/bin/true"}')
  const activity: string = await host.diagnosticsSecretStoreActivity()
  const viaHost: string = await host.daemonCallHostManagement('models.remove', '{"id":"m"}')
  const modelRemoved: string = await rt.removeModel('m')
  const hostNames: Record<string, string> = { ...HOST_GENERATED_METHODS }
  const hostTyped: car.TypedMemberSpec | undefined = HOST_TYPED_MEMBERS['agentsUpsert']
  void [owner, upserted, activity, viaHost, modelRemoved, hostNames, hostTyped]
  // @ts-expect-error host methods are not CarRuntime's
  void rt.sessionClearHalt

  // The agent side of agents.chat
  registerChatHandler(async (paramsJson: string) => {
    const p = JSON.parse(paramsJson) as { session_id: string }
    await rt.chatEvent(p.session_id, 'token', 'hi')
    await rt.chatEvent(p.session_id, 'done')
  })
  registerChatHandler((paramsJson: string) => void paramsJson)
  unregisterChatHandler()

  // Multi-agent coordination
  await registerAgentRunner(async (specJson: string, task: string) => {
    const s = JSON.parse(specJson) as car.AgentSpec
    return JSON.stringify({ name: s.name, answer: task })
  })
  const runnerDone: Promise<void> = registerAgentRunner((specJson, task) => ({ name: specJson, answer: task, turns: 1 }))
  registerAgentRunner(() => 'plain text answer')
  // @ts-expect-error the runner is a function
  registerAgentRunner('x')
  void runnerDone
  const agents = JSON.stringify([{ name: 'a' }, { name: 'b', metadata: { model: 'm' } }] satisfies car.AgentSpec[])
  const budget: car.BudgetLimits = { max_agents: 2, max_total_tokens: null }
  const swarm: string = await runSwarm('parallel', agents, 'T')
  await runSwarm('sequential', agents, 'T', null, JSON.stringify(budget))
  await runSwarm('hybrid', agents, 'T', '{"name":"s"}')
  const pipeline: string = await runPipeline(agents, 'T', JSON.stringify(budget))
  const supervised: string = await runSupervisor(agents, '{"name":"boss"}', 'T', 3)
  await runSupervisor(agents, '{"name":"boss"}', 'T', 3, null)
  const reduced: string = await runMapReduce('{"name":"m"}', '{"name":"r"}', 'T', '["x","y"]', JSON.stringify(budget))
  const vote: string = await runVote(agents, 'T', undefined, JSON.stringify(budget))
  const tournament: string = await runTournament(agents, '{"name":"judge"}', 'T')
  const subtask: string = await runSubtask('{"name":"main","tools":["read_file"]}', 'T', null)
  const output = JSON.parse(swarm) as { outputs: car.AgentOutput[] }
  const err: string | null | undefined = output.outputs[0]?.error
  // @ts-expect-error maxRounds is required
  await runSupervisor(agents, '{"name":"boss"}', 'T')
  void [pipeline, supervised, reduced, vote, tournament, subtask, err]
  unregisterAgentRunner()

  // Process-wide handlers
  registerToolHandler(async (callJson: string) => callJson)
  registerToolHandler((tool: string, paramsJson: string) => tool + paramsJson)
  unregisterToolHandler()
  registerToolCancelHandler((requestId: string) => void requestId)
  unregisterToolCancelHandler()

  // Errors
  try {
    await rt.daemonCall('x')
  } catch (err) {
    if (err instanceof DaemonRpcError) {
      const code: number = err.code
      const data: unknown = err.data
      const message: string = err.message
      void [code, data, message]
    } else if (err instanceof DaemonConnectionError) {
      const kind: 'transport' | 'closed' | 'handshake' = err.kind
      void kind
    } else if (err instanceof DaemonTimeoutError) {
      const after: number = err.afterMs
      void after
    } else if (err instanceof CarError) {
      const kind: car.CarErrorKind = err.kind
      void kind
    } else if (err instanceof InvalidArgumentError) {
      const asType: TypeError = err
      void asType
    }
  }

  {
    await using disposable = new CarRuntime()
    await disposable.stateKeys()
  }
  rt.close()
  void [v, c, names, typed, kind, ns, out, flags, epoch, schema, caps, nothing, got, exists, keys, snap, count, n, rows, ctx, cons, deleted, persisted, loaded]
  void [skills, found, report, listed, tools, removed, unp, policies, verified, submitted, executed, executed2]
  void [runId, texts, evidence, counts, toolSchema, toolFn]
  void [events, query, run, done, text, tracked, requested, registered, streamed, streamedAsync, embedded, classified, models, tokens, detok, gen, gen2, gen3, gen4]
}

void everything
