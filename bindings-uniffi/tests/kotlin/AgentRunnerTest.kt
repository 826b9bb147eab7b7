// The agent-runner part of the Kotlin test: the daemon's multi.swarm sends each agent back
// to the calling client as multi.run_agent, served by a Kotlin AgentRunner registered with
// registerAgentRunner. Run from CarDaemonClientTest's main, in the same JVM, against the
// suite's real car-server.

import uniffi.car_runtime_uniffi.*
import java.util.concurrent.ConcurrentLinkedQueue

class AgentRunnerTests {
    fun aKotlinRunnerRunsASwarmsAgents() {
        CarDaemonClient().use { c ->
            val tasks = ConcurrentLinkedQueue<Pair<Any?, String>>()
            c.registerAgentRunner(object : AgentRunner {
                override fun run(specJson: String, task: String): String {
                    val spec = Json.parse(specJson)
                    tasks.add(at(spec, "name") to task)
                    return when (at(spec, "name")) {
                        "a" -> """{"name":"a","answer":${quote("A on $task")},"turns":2}"""
                        "b" -> "B on $task"                          // plain text: the answer
                        "c" -> throw CarException.Handler("c is broken", false)
                        else -> throw IllegalStateException("no such agent")  // undeclared
                    }
                }
            })
            val params = """{"mode":"parallel","task":"the plan","agents":""" +
                """[{"name":"a","role":"optimist"},{"name":"b"},{"name":"c"},{"name":"d"}]}"""
            val out = Json.parse(c.multiSwarm(params))
            eq(at(out, "final_summary"), "## a\nA on the plan\n\n## b\nB on the plan", "final_summary of $out")
            eq(at(out, "outputs", 0, "turns"), 2L, "a's turns")
            eq(at(out, "outputs", 1, "answer"), "B on the plan", "b's answer")
            eq(at(out, "outputs", 2, "error"), "agent 'c' failed: c is broken", "c's error")
            eq(
                at(out, "outputs", 3, "error"),
                "agent 'd' failed: handler threw an undeclared exception: java.lang.IllegalStateException: no such agent",
                "d's error",
            )
            eq(tasks.map { it.first }.toSet(), setOf("a", "b", "c", "d"), "agents the runner ran")
            check(tasks.all { it.second == "the plan" }) { "tasks: $tasks" }

            // Unregistered: the client answers -32601, which `runner: "caller"` makes the
            // agent's error instead of the daemon's fallback.
            c.unregisterAgentRunner()
            val pipeline = Json.parse(c.multiPipeline("""{"stages":[{"name":"solo"}],"task":"t","runner":"caller"}"""))
            eq(at(pipeline, "stages", 0, "error"), "agent 'solo' failed: unknown method: multi.run_agent", "stage error")
            eq(tasks.size, 4, "runner calls after unregistering")
            c.closeClient()
        }
    }
}
