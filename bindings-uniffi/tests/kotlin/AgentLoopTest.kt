// The AgentLoop part of the Kotlin test: CAR's agent loop (the shared Rust loop) driven
// through the generated bindings against the suite's real car-server, with a scripted
// OpenAI-compatible model (ScriptedModel) registered as a model. Run from
// CarDaemonClientTest's main, in the same JVM.

import uniffi.car_runtime_uniffi.*
import java.util.concurrent.LinkedBlockingQueue

fun agentTool(f: (params: Any?, call: Any?) -> String) = object : AgentTool {
    override fun call(paramsJson: String, callJson: String, abort: ToolAbort): String =
        f(Json.parse(paramsJson), Json.parse(callJson))
}

class AgentLoopTests(private val client: CarDaemonClient, private val wsUrl: String) {
    private fun config(model: String) = AgentLoopConfig(
        agentName = "calc",
        identity = "You are a calculator.",
        toolSchemasJson = """[{"name":"add","description":"add two numbers","parameters":""" +
            """{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}]""",
        defaultModel = model,
        maxTokens = 64u,
        maxTurns = 4u,
        targetOutcome = "the sum",
    )

    /** A fresh scripted model registered under `id` (by a host session: see HostCall.kt). */
    private fun model(id: String): ScriptedModel {
        val m = ScriptedModel()
        val reply = hostCall(wsUrl, "models.register", """{"id":${quote(id)},"base_url":${quote(m.url)},"model":"m"}""")
        eq(at(reply, "registered"), true, "models.register")
        return m
    }

    fun runsAToolObservesItAndFinishes() {
        model("scripted").use { model ->
            val seen = LinkedBlockingQueue<Any?>()
            val calls = LinkedBlockingQueue<Any?>()
            val add = agentTool { params, call ->
                seen.add(params)
                calls.add(call)
                val sum = (at(params, "a") as Long) + (at(params, "b") as Long)
                // A tool may call back into the daemon while the run waits on it.
                client.stateSet("last_sum", "$sum")
                """{"sum":$sum}"""
            }
            AgentLoop(client, mapOf("add" to add)).use { agent ->
                val outcome = agent.run(config("scripted"), "add 2 and 3")
                eq(outcome.status, "success", "status of $outcome")
                eq(outcome.summary, "the sum is 5", "summary")
                eq(outcome.toolsCalled, listOf("add", "finish"), "toolsCalled")
                eq(outcome.metrics, AgentMetrics(2u, 2u, 2u, 0u), "metrics")
                eq(at(Json.parse(outcome.evidenceJson), 0, "data", "answer"), "the sum is 5", "evidence")
                eq(seen.toList(), listOf<Any?>(mapOf("a" to 2L, "b" to 3L)), "the tool's params")
                eq(at(calls.peek(), "tool"), "add", "call_json.tool")
                eq(at(calls.peek(), "action_id"), "call_1", "call_json.action_id")
                eq(client.stateGet("last_sum"), "5", "the tool's own daemon call")
                // The model's second request carried the tool's output, linked to its call.
                val observed = toolMessages(model.requests[1]).single()
                eq(at(observed, "tool_call_id"), "call_1", "tool_call_id")
                eq(Json.parse(at(observed, "content") as String), mapOf("sum" to 5L), "observed content")

                // The run is visible in its trace, which a host session may read (the operator
                // session may not: CAR's rule), with its turns in order and the outcome.
                val runId = outcome.runId ?: throw Failure("no run id in $outcome")
                val trace = Json.parse(client.daemonCallHostManagement("runs.get_trace", """{"run_id":${quote(runId)}}"""))
                val kinds = (at(trace, "records") as List<*>).map { at(it, "record") }
                eq(kinds, listOf("started", "model_turn", "turn", "model_turn", "ended"), "trace kinds in $trace")
                eq(at(trace, "records", 4, "outcome", "summary"), "the sum is 5", "recorded outcome")
                val refused = expectThrows<CarException.DaemonRpc> { client.runsGetTrace("""{"run_id":${quote(runId)}}""") }
                eq(at(Json.parse(refused.dataJson), "reason"), "not_owner", "operator refusal")

                // The same loop runs again: a new run, the model's third call id.
                val again = agent.run(config("scripted"), "add 2 and 3", 3u)
                eq(again.status, "success", "second status of $again")
                check(again.runId != null && again.runId != runId) { "second run id ${again.runId} after $runId" }
                eq(at(calls.toList().getOrNull(1), "action_id"), "call_3", "second run's call_json.action_id")
            }
        }
    }

    fun aToolThatThrowsIsObservedAndTheRunEnds() {
        model("scripted-broken").use { model ->
            val broken = agentTool { _, _ -> throw IllegalStateException("the adder is broken") }
            AgentLoop(client, mapOf("add" to broken)).use { agent ->
                val outcome = agent.run(config("scripted-broken"), "add 2 and 3")
                eq(outcome.status, "success", "status of $outcome")
                eq(outcome.summary, "the tool failed", "summary")
                eq(outcome.toolsCalled, listOf("add", "finish"), "toolsCalled")
                eq(outcome.metrics.actionsFailed, 1u, "actionsFailed")
                // The model observed the exception as the call's error.
                val observed = Json.parse(at(toolMessages(model.requests[1]).single(), "content") as String)
                val error = at(observed, "error") as? String ?: ""
                check(error.contains("java.lang.IllegalStateException: the adder is broken")) { "observed $observed" }

                // Out of turns while the tool keeps failing: give_up, not an exception.
                val short = agent.run(config("scripted-broken"), "add 2 and 3", 1u)
                eq(short.status, "give_up", "status of $short")
                eq(short.metrics.actionsFailed, 1u, "actionsFailed of the short run")
            }
        }
        // A config that cannot be sent is refused before anything is sent.
        AgentLoop(client, emptyMap()).use { agent ->
            val bad = expectThrows<CarException.InvalidArgument> {
                agent.run(config("scripted").copy(toolSchemasJson = "{\"name\":\"add\"}"), "x")
            }
            check(bad.detail.startsWith("AgentLoopConfig: toolSchemasJson must be a JSON array")) { bad.detail }
        }
    }

    fun theDaemonsCancelSetsTheToolsAbortSignal() {
        model("scripted-slow").use { model ->
            val seen = LinkedBlockingQueue<Boolean>()
            val slow = object : AgentTool {
                override fun call(paramsJson: String, callJson: String, abort: ToolAbort): String {
                    // The daemon gives up after the schema's 300 ms; the bound only keeps a
                    // broken build from hanging the suite.
                    seen.add(abort.wait(60_000u))
                    seen.add(abort.isAborted())
                    return """{"sum":5}"""
                }
            }
            val schemas = """[{"name":"add","timeoutMs":300,"parameters":""" +
                """{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}]"""
            AgentLoop(client, mapOf("add" to slow)).use { agent ->
                val outcome = agent.run(config("scripted-slow").copy(toolSchemasJson = schemas), "add 2 and 3")
                eq(seen.toList(), listOf(true, true), "abort.wait and abort.isAborted")
                eq(outcome.metrics.actionsFailed, 1u, "actionsFailed of $outcome")
                val observed = at(toolMessages(model.requests[1]).single(), "content") as String
                check(observed.contains("exceeded its timeout_ms (300ms)")) { "observed $observed" }
            }
        }
    }
}
