// An agent on a local model, offline, from Kotlin: SmolLM2-135M-Instruct (a GGUF file)
// answers a question with a real tool, through the agent loop every binding shares.
//
// Each turn the loop asks the model for one tool call (toolChoice "required",
// parallelToolCalls false; the daemon
// constrains decoding with a grammar built from the tool schemas, so every call parses and
// its arguments match the schema), runs it through this program's `multiply`, lets the
// model read the result, and ends when the model calls `finish`. Greedy decoding
// (temperature 0) makes the run repeatable. A 135-million-parameter model is a small
// reasoner: what this shows is the mechanics, the tool doing the arithmetic.
//
// Built with Main.kt (see bindings-uniffi/test.sh); run against a daemon with the model
// from `eval "$(scripts/fetch-models)"`:
//   java -Djna.library.path=<dir of the .so> -cp example.jar:jna.jar example.LocalAgentKt [model.gguf]
// (default: $CAR_TEST_GGUF).

package example

import java.io.File
import kotlin.system.exitProcess
import uniffi.car_runtime_uniffi.AgentLoop
import uniffi.car_runtime_uniffi.AgentLoopConfig
import uniffi.car_runtime_uniffi.AgentTool
import uniffi.car_runtime_uniffi.CarDaemonClient
import uniffi.car_runtime_uniffi.ToolAbort

private val NUMBER = Regex("\"(a|b)\"\\s*:\\s*(-?[0-9.]+)")

fun main(args: Array<String>) {
    val gguf = args.firstOrNull() ?: System.getenv("CAR_TEST_GGUF") ?: ""
    if (gguf.isEmpty() || !File(gguf).exists()) {
        System.err.println("give the GGUF path, or run `eval \"\$(scripts/fetch-models)\"` first")
        exitProcess(2)
    }
    val calls = mutableListOf<Pair<Double, Double>>()
    // The tool gets the call's arguments as JSON text and answers with JSON text.
    val multiply = object : AgentTool {
        override fun call(paramsJson: String, callJson: String, abort: ToolAbort): String {
            val n = NUMBER.findAll(paramsJson).associate { it.groupValues[1] to it.groupValues[2].toDouble() }
            val a = n.getValue("a")
            val b = n.getValue("b")
            synchronized(calls) { calls.add(a to b) }
            // A result that says what comes next keeps a small model from calling again.
            return "\"The product is ${fmt(a * b)}. Call finish with answer ${fmt(a * b)}.\""
        }
    }
    CarDaemonClient().use { car ->
        car.registerModel("""{"id":"smollm2-local","path":${quoteJson(gguf)}}""")
        val config = AgentLoopConfig(
            agentName = "calculator",
            identity = "You are a calculator. Use the multiply tool to compute products, then call finish with the result.",
            toolSchemasJson = """[{"name":"multiply","description":"Multiply two numbers a and b.",""" +
                """"parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}]""",
            defaultModel = "smollm2-local",
            maxTokens = 96u,
            maxTurns = 4u,
            toolChoice = "required",
            parallelToolCalls = false,
            temperature = 0f,
        )
        AgentLoop(car, mapOf("multiply" to multiply)).use { agent ->
            val outcome = agent.run(config, "What is 17 times 23?")
            println("tool calls: $calls")
            println("status: ${outcome.status} | tools called: ${outcome.toolsCalled}")
            println("answer: ${outcome.summary}")
            check(calls.firstOrNull() == (17.0 to 23.0)) { "multiply was not called with 17 and 23: $calls" }
            check(outcome.toolsCalled == listOf("multiply", "finish")) { "tools called: ${outcome.toolsCalled}" }
        }
    }
    println("local agent done")
}

private fun fmt(x: Double): String = if (x == Math.floor(x)) x.toLong().toString() else x.toString()

private fun quoteJson(s: String): String =
    "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""
