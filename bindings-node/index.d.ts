// Type declarations for `car-runtime` (hand-written for the hand-written members;
// `generated.d.ts` holds the generated typed members and JSON-string wrappers). Structured
// results are JSON strings: parse them with `JSON.parse`.

import type { GeneratedHostMethods, GeneratedMethods } from './generated'

export { GENERATED_METHODS, HOST_GENERATED_METHODS, HOST_TYPED_MEMBERS, TYPED_MEMBERS } from './generated'
// CAR's package-level functions (`agentsStart(id)`, `scheduleTask(specJson)`, …) and their table.
export * from './generated'
export type { ArgKind, ReturnKind, TypedMemberSpec } from './generated'

/** The package version (same as `clientVersion()`). */
export declare const version: string

/** The daemon protocol version this package speaks (3). */
export declare function protocolVersion(): number
/** The version of this package and the client it wraps. */
export declare function clientVersion(): string

/** Which failure a `CarError` is. */
export type CarErrorKind = 'rpc' | 'transport' | 'closed' | 'handshake' | 'timeout' | 'refused' | 'unexpected_result'

/** Base class of every error raised for a failed daemon interaction. */
export declare class CarError extends Error {
  readonly kind: CarErrorKind
  /** For `unexpected_result`: the method whose result a typed member could not project. */
  readonly method?: string
  constructor(message: string, kind: CarErrorKind)
}

/** The daemon answered with a JSON-RPC error. */
export declare class DaemonRpcError extends CarError {
  readonly kind: 'rpc'
  /** The JSON-RPC error code (e.g. -32601 unknown method, -32602 bad params). */
  readonly code: number
  /** The error's `data` exactly as the daemon sent it (refusals carry `data.reason`), or `null`. */
  readonly data: unknown
  constructor(code: number, message: string, data?: unknown)
}

/** The connection could not be opened, broke mid-call, failed its handshake, or was closed. Has no `.code`. */
export declare class DaemonConnectionError extends CarError {
  readonly kind: 'transport' | 'closed' | 'handshake'
  /** For a handshake the daemon refused: its error object. */
  readonly detail?: { code: number; message: string; data?: unknown } | null
  readonly code?: undefined
  constructor(message: string, kind?: 'transport' | 'closed' | 'handshake', detail?: unknown)
}

/** The client stopped waiting for an answer. Has no `.code`. */
export declare class DaemonTimeoutError extends CarError {
  readonly kind: 'timeout'
  readonly method: string
  readonly afterMs: number
  readonly code?: undefined
  constructor(message: string, method: string, afterMs: number)
}

/** An argument cannot be sent (nothing was sent): JSON text that is not JSON, or a wrong type. */
export declare class InvalidArgumentError extends TypeError {
  readonly kind: 'invalid_argument'
  constructor(message: string)
}

/** Throw (or reject with) it from a tool handler: the failure is terminal (`error.data.terminal = true`). */
export declare class TerminalToolError extends Error {
  readonly data?: unknown
  constructor(message?: string, options?: { cause?: unknown; data?: unknown })
}

/**
 * The JSON handed to a tool function:
 * `{tool, params, action_id, request_id, timeout_ms, session_id, attempt}` (as a string).
 */
export interface ToolCallJson {
  tool: string
  params: unknown
  action_id: string
  request_id: string | number
  timeout_ms: number | null
  session_id: string | null
  attempt: number
}

/** A tool function: gets `callJson` (see `ToolCallJson`), returns the result JSON. */
export type ToolFunction =
  | ((callJson: string) => string | Promise<string>)
  | ((tool: string, paramsJson: string) => string | Promise<string>)

/** A daemon→client request handler: gets the params JSON, returns the result JSON. */
export type DaemonHandler = (paramsJson: string) => string | Promise<string>
/** A notification handler: gets the params JSON. */
export type DaemonNotificationHandler = (paramsJson: string) => void | Promise<void>

export interface CarRuntimeOptions {
  /** Daemon address; default `CAR_DAEMON_URL`, else `ws://127.0.0.1:9100` (or the local socket). */
  url?: string
  /** Daemon token; default `CAR_AUTH_TOKEN`, else the token file. */
  token?: string
  /** Memory namespace sent with `session.auth`; default `setMemoryNamespace()` / `CAR_MEMORY_NAMESPACE`. */
  memoryNamespace?: string
}

export interface CallOptions {
  /** Give up after this many milliseconds (rejects with `DaemonTimeoutError`). */
  timeoutMs?: number
}

/** CAR's typed members and the JSON-string wrappers, generated from the daemon's method contract. */
export interface CarRuntime extends GeneratedMethods {}

/** A client of the local `car-server` daemon. Connects lazily; reconnects after a drop or `close()`. */
export declare class CarRuntime {
  constructor(options?: CarRuntimeOptions)

  // Bridge
  daemonCall(method: string, paramsJson?: string, options?: CallOptions): Promise<string>
  daemonCallHostManagement(method: string, paramsJson?: string): Promise<string>
  registerDaemonHandler(method: string, handler: DaemonHandler): void
  unregisterDaemonHandler(method: string): void
  registerDaemonNotificationHandler(method: string, handler: DaemonNotificationHandler): void
  unregisterDaemonNotificationHandler(method: string): void
  /** Connects if needed; a number that changes whenever a new daemon session is established. */
  connectionEpoch(): Promise<number>
  /** Drops the connection (pending calls reject as closed); a later call reconnects. Handlers stay. */
  close(): void
  /** The same as `close()`. */
  disconnect(): void
  [Symbol.asyncDispose](): Promise<void>
  readonly isConnected: boolean

  // Members that take callbacks
  /** Runs a proposal with the process-wide tool handler; rejects at once when none is registered. */
  submitProposal(proposalJson: string, sessionId?: string | null): Promise<string>
  executeProposal(proposalJson: string, toolFn: ToolFunction, sessionId?: string | null): Promise<string>
  /**
   * Streams a generation. `onEvent` gets each event as JSON, in order: `{type:"text",data}`,
   * `{type:"usage",prompt_tokens,completion_tokens}`, `{type:"stop_reason",data}`, then the
   * client-side `{type:"done"}` last; resolves to the result JSON (as `inferTracked`).
   * Every `onEvent` call has run (and any Promise it returned has settled) before the
   * Promise settles. Concurrent streams on one runtime each get only their own events.
   * If `onEvent` throws (or its Promise rejects), it is not called again (no `done`), the
   * generation still runs to its end, and the Promise rejects with that error.
   */
  inferStream(
    prompt: string,
    onEvent: (eventJson: string) => void | Promise<void>,
    model?: string | null,
    maxTokens?: number | null,
  ): Promise<string>
}

/** The `host` methods' generated members (typed members and JSON-string wrappers). */
export interface HostClient extends GeneratedHostMethods {}

/**
 * Host-authority daemon client; host methods stay off CarRuntime autocomplete. Shares
 * `runtime`'s client; host methods go over its host-management connection (the
 * `host-token` file is read only for them).
 */
export declare class HostClient {
  constructor(runtime: CarRuntime)
  /** The runtime whose client this one uses. */
  readonly runtime: CarRuntime
  daemonCallHostManagement(method: string, paramsJson?: string): Promise<string>
}

/** `rt.executeProposal(proposalJson, toolFn, sessionId)` as a function. */
export declare function executeProposal(
  rt: CarRuntime,
  proposalJson: string,
  toolFn: ToolFunction,
  sessionId?: string | null,
): Promise<string>

/** A tool schema of an agent's config (CAR's `ToolSchema`, sent as given). */
export interface AgentToolSchema {
  name: string
  description?: string
  /** The JSON Schema of the tool's arguments. */
  parameters?: Record<string, unknown>
  /** The call's budget (the action's `timeout_ms`); the daemon's default without it. */
  timeoutMs?: number
}

/** CAR's `AgentToolContext`, beside the call's own fields. */
export interface AgentToolContext extends ToolCallJson {
  /** Aborted when the daemon cancels the call (`tools.cancel`: its budget ran out). */
  signal: AbortSignal
  timeoutMs?: number
}

/**
 * A tool of `runAgent`'s `config.tools`: gets the call's arguments (the parsed JSON object
 * the model produced) and, when it declares two or more parameters (`fn.length >= 2`), CAR's
 * context: an AbortSignal the daemon's `tools.cancel` aborts, the budget, and the call's
 * fields. Returns (a Promise of) any JSON value, which is what the model observes
 * (`undefined` is `null`); throwing (or rejecting) fails that action and the model observes
 * the error (`TerminalToolError` also halts the session).
 */
export type AgentToolFunction = (params: any, context: AgentToolContext) => unknown

/**
 * CAR's `AgentLoopConfig` with camelCase keys (as every option object of this package);
 * `toolSchemas` are CAR's objects, sent as given; `policies` CAR's `registerPolicy` tuples
 * or `PolicyDefinition` objects. Unknown keys are refused.
 */
export interface AgentLoopConfig {
  /** The run's agent id; default `agentName`. */
  agentId?: string | null
  agentName: string
  /** The system prompt. */
  identity: string
  toolSchemas?: AgentToolSchema[]
  /** Tool name → function; a call for a tool with no function fails that action. */
  tools?: Record<string, AgentToolFunction>
  /** CAR's `PolicyDefinition`s, registered with the tools. */
  policies?: Array<[string, string, (string | null)?, (string | null)?, (string | null)?, (string | null)?] | Record<string, unknown>>
  /** The model every turn asks; default the daemon's default. */
  defaultModel?: string | null
  /** Per turn; default 1024. */
  maxTokens?: number
  /** Default 8. */
  maxTurns?: number
  /** Recorded with the run as its outcome description. */
  targetOutcome?: string
  /** Not in CAR's config: every turn's `tool_choice` (default `'auto'`); small local models want `'required'`. */
  toolChoice?: 'auto' | 'required' | 'none' | (string & {})
  /** Not in CAR's config: every turn's sampling temperature (default the model's); `0` makes a local run repeatable. */
  temperature?: number
  /** Not in CAR's config: whether the model may ask for several calls in one turn (default the model's). */
  parallelToolCalls?: boolean
  /** The runtime to run on; default a new `CarRuntime`, closed when the run ends. */
  runtime?: CarRuntime | null
}

/** CAR's `AgentMetrics`. */
export interface AgentMetrics {
  turns: number
  tool_calls: number
  actions_succeeded: number
  actions_failed: number
}

/** CAR's `AgentOutcome` (CAR's field names, as the daemon records it). */
export interface AgentOutcome {
  run_id: string | null
  /**
   * `success` (the model called `finish`, or the status `finish` named), `done` (a turn
   * without a tool call), `give_up` (out of turns), or `partial_success`, `timeout`,
   * `failure`.
   */
  status: string
  summary: string
  evidence: unknown[]
  metrics: AgentMetrics
  /** Every tool the model called, in order, `finish` included. */
  tools_called: string[]
  /** RFC 3339, UTC. */
  timestamp: string
}

/**
 * Runs CAR's agent loop (propose → verify → execute → observe, until the model calls
 * `finish` or the turns run out) on `goal`, in the shared Rust client; `maxTurns` overrides
 * `config.maxTurns`. Rejects with a `TypeError` for a bad config (naming the key, e.g.
 * `tools.add`), and with the client's errors when the daemon or the model fails.
 */
export declare function runAgent(config: AgentLoopConfig, goal: string, maxTurns?: number | null): Promise<AgentOutcome>

/** The process-wide `tools.execute` handler (for `submitProposal` and unscoped tool calls). */
export declare function registerToolHandler(fn: ToolFunction): void
export declare function unregisterToolHandler(): void
/** The process-wide `tools.cancel` listener; gets the cancelled call's `request_id`. */
export declare function registerToolCancelHandler(fn: (requestId: string) => void): void
export declare function unregisterToolCancelHandler(): void

/**
 * Serves the daemon's `agent.chat` turns (the agent side of `agents.chat`) with
 * `handlerFn(paramsJson)` for every runtime of the process; `paramsJson` is `{session_id,
 * prompt, stream?, model?, attachments?, goal?, context?}`. Stream the reply with
 * `rt.chatEvent(sessionId, 'token', delta)` on the runtime serving the turn; the turn
 * ends, when the handler returns (or its Promise settles), with one terminal event: the
 * first `done` / `error` it emitted (whatever it did after), else `error` when it threw or
 * rejected, else `done` with an empty `text` (the reply is the streamed tokens).
 */
export declare function registerChatHandler(handlerFn: (paramsJson: string) => void | Promise<void>): void
/** Removes the chat handler: later `agent.chat` calls are refused. */
export declare function unregisterChatHandler(): void

// ---- Multi-agent coordination (the daemon runs the pattern; each agent is a
// `multi.run_agent` reverse call to the calling connection) ----

/** CAR's `AgentSpec` of a `multi.*` run (only `name` is required; other keys reach the runner as given). */
export interface AgentSpec {
  name: string
  system_prompt?: string
  tools?: string[]
  /** Default 10. */
  max_turns?: number
  /** `model`, `max_tokens`, `temperature`, `seed` are read when the daemon runs the agent itself. */
  metadata?: Record<string, unknown>
  cache_control?: boolean
  [key: string]: unknown
}

/** CAR's `AgentOutput`: what an agent runner returns for one agent. */
export interface AgentOutput {
  name: string
  answer: string
  turns?: number
  tool_calls?: number
  duration_ms?: number
  error?: string | null
  tokens?: { input_tokens: number; output_tokens: number; cost_usd?: number }
  [key: string]: unknown
}

/**
 * CAR's coordination budget, passed to the `run*` functions as a JSON string (snake_case
 * keys; an omitted field is unbounded). Agents past a limit are not started: their output
 * is an error (`coordination budget agent cap reached: 2 of 2 agents already started`).
 */
export interface BudgetLimits {
  max_input_tokens?: number | null
  max_output_tokens?: number | null
  max_total_tokens?: number | null
  max_cost_usd?: number | null
  max_agents?: number | null
}

/**
 * An agent runner: gets the agent's `AgentSpec` as JSON and its task, returns (a Promise of)
 * the `AgentOutput` JSON string, an `AgentOutput` object (`JSON.stringify`d), or plain text
 * (the answer). A throw or rejection makes that agent's output an error
 * (`agent '<name>' failed: <message>`); the run goes on.
 */
export type AgentRunner = (specJson: string, task: string) => string | AgentOutput | Promise<string | AgentOutput>

/**
 * Serves the daemon's `multi.run_agent` calls with `agentFn` on every runtime of the process
 * (existing and future); replaces any earlier runner. Throws a `TypeError` at once when
 * `agentFn` is not a function. Without a runner the daemon runs agents on its own models.
 */
export declare function registerAgentRunner(agentFn: AgentRunner): Promise<void>
/** Removes the runner: the daemon runs the agents itself again. */
export declare function unregisterAgentRunner(): void

/**
 * Runs a swarm (`mode`: `parallel`, `sequential`, or `hybrid` / `debate`) of `agents`
 * (AgentSpec[] JSON) on `task`, on a short-lived runtime served by the registered runner.
 * Resolves to `{task, outputs, final_summary}` JSON. `budgetSpec` is {@link BudgetLimits} JSON.
 */
export declare function runSwarm(
  mode: string,
  agents: string,
  task: string,
  synthesizerSpec?: string | null,
  budgetSpec?: string | null,
): Promise<string>
/** Runs `stages` (AgentSpec[] JSON) in sequence; resolves to `{task, stages, final_answer}` JSON. */
export declare function runPipeline(stages: string, task: string, budgetSpec?: string | null): Promise<string>
/** Workers in rounds until `supervisor` approves; resolves to `{task, rounds, supervisor_feedback, final_answer, approved}` JSON. */
export declare function runSupervisor(
  workers: string,
  supervisor: string,
  task: string,
  maxRounds: number,
  budgetSpec?: string | null,
): Promise<string>
/** `mapper` per item of `items` (string[] JSON), then `reducer`; resolves to `{task, map_outputs, reduced_answer}` JSON. */
export declare function runMapReduce(
  mapper: string,
  reducer: string,
  task: string,
  items: string,
  budgetSpec?: string | null,
): Promise<string>
/** Independent answers, majority (or the synthesizer's pick); resolves to `{task, votes, winner, agreement_ratio}` JSON. */
export declare function runVote(
  agents: string,
  task: string,
  synthesizerSpec?: string | null,
  budgetSpec?: string | null,
): Promise<string>
/** Single-elimination pairwise judging; resolves to `{task, candidates, matches, winner_name, winner_answer, ranking}` JSON. */
export declare function runTournament(competitors: string, judge: string, task: string, budgetSpec?: string | null): Promise<string>
/** `mainAgent` (AgentSpec JSON) may spawn tool-constrained sub-agents; resolves to the SpawnSubtaskResult JSON. */
export declare function runSubtask(mainAgent: string, task: string, budgetSpec?: string | null): Promise<string>
/** `scheduler.run`: a prompt task's due occurrence (its agent on the registered runner, else the daemon's). */
export declare function runTask(taskJson: string): Promise<string>
/** `scheduler.run_loop`: up to `maxIterations` occurrences on the task's cadence. */
export declare function runTaskLoop(taskJson: string, maxIterations?: number | null): Promise<string>

/** The memory namespace for runtimes constructed later without their own. */
export declare function setMemoryNamespace(ns: string | null): void
export declare function getMemoryNamespace(): string | null
