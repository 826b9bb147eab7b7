// The Kotlin test of the UniFFI library (issue 8): drives real car-server processes through
// the generated Kotlin bindings on the JVM with JNA (AgentLoop's tests: AgentLoopTest.kt;
// the agent runner's: AgentRunnerTest.kt).
//
// Run by bindings-uniffi/test.sh with CAR_HOME set to a fresh directory and CAR_SERVER_BIN
// naming the daemon. Prints one line per test and exits non-zero when any test fails; the
// last line, printed only after every test ran in this same JVM, proves that no handler
// error or closed-client call brought the process down.

import uniffi.car_runtime_uniffi.*
import java.io.File
import java.nio.file.Files
import java.util.concurrent.CompletableFuture
import java.util.concurrent.CountDownLatch
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

class Failure(message: String) : Exception(message)

fun check(cond: Boolean, what: () -> String) {
    if (!cond) throw Failure(what())
}

fun <T> eq(actual: T, expected: T, what: String = "value") =
    check(actual == expected) { "$what: expected <$expected>, got <$actual>" }

/** Runs `block`, which must throw `E`; returns the exception. */
inline fun <reified E : Throwable> expectThrows(block: () -> Unit): E {
    try {
        block()
    } catch (e: Throwable) {
        if (e is E) return e
        throw Failure("expected ${E::class.simpleName}, got $e")
    }
    throw Failure("expected ${E::class.simpleName}, nothing was thrown")
}

fun handler(f: (String) -> String) = object : DaemonHandler {
    override fun handle(paramsJson: String): String = f(paramsJson)
}

class Suite(val daemon: Daemon) {
    /** The client most tests share; a fresh one where a test closes or halts its own. */
    val client = CarDaemonClient()

    fun call(c: CarDaemonClient, method: String, params: String = "{}"): Any? =
        Json.parse(c.daemonCall(method, params))

    /** Calls `method` back on `c` through the daemon and returns `{result}` or `{error}`. */
    fun viaDaemon(c: CarDaemonClient, method: String, params: String = "{}"): Any? =
        call(c, "debug.call_client", """{"method":${quote(method)},"params":$params,"timeout_ms":10000}""")

    fun versions() {
        eq(protocolVersion(), 3u, "protocolVersion")
        check(clientVersion().isNotEmpty()) { "clientVersion is empty" }
    }

    fun daemonCallReturnsResults() {
        eq(call(client, "state.set", """{"key":"greeting","value":{"text":"hi"}}"""), "ok")
        eq(call(client, "state.get", """{"key":"greeting"}"""), mapOf("text" to "hi"))
        // A generated typed member goes through the shared client's typed path.
        eq(client.stateExists("greeting"), true, "stateExists")
        eq(client.stateKeys(), listOf("greeting"), "stateKeys")
        val caps = client.capabilities()
        check(caps.contains("\"state.get\"")) { "capabilities.list lacks state.get: $caps" }
        // A generated JSON-string wrapper through the bridge.
        eq(Json.parse(client.toolsList("{}")), mapOf("tools" to emptyList<Any?>(), "count" to 0L), "toolsList")
    }

    fun generatedTypedMembers() {
        CarDaemonClient().use { c ->
            eq(c.addFact("kotlin", "the JVM test adds this fact", "fact", tags = listOf("jvm")), 1L, "fact count after add")
            eq(c.factCount(), 1L, "factCount")
            val hits = Json.parse(c.queryFacts("kotlin jvm fact", 3L)) as List<*>
            eq(at(hits, 0, "subject"), "kotlin", "queryFacts top hit")
            eq(at(hits, 0, "tags"), listOf("jvm"), "queryFacts tags")
            val context = c.buildContext("kotlin")
            check(context.contains("the JVM test adds this fact")) { "context: $context" }
            eq(
                c.ingestSkill("login", "click('#login')", "web", "tester", "example.com/*", listOf("login", "sign in"), "log in"),
                1L, "skill count after ingest",
            )
            val found = Json.parse(c.findSkill("tester", "https://example.com/", "login")) as List<*>
            eq(at(found, 0, "name"), "login", "findSkill top hit in $found")
            val report = Json.parse(c.reportOutcome("login", "success"))
            eq(at(report, "success_count"), 1L, "reportOutcome success_count in $report")
            c.registerTool("lookup")
            eq(at(Json.parse(c.listTools()), 0, "name"), "lookup", "listTools projects tools")
            eq(c.unregisterTool("lookup"), 1L, "unregisterTool projects removed")
            val bad = expectThrows<CarException.InvalidArgument> { c.stateSet("k", "not json") }
            check(bad.detail.startsWith("stateSet: valueJson is not valid JSON")) { bad.detail }
            c.closeClient()
        }
    }

    fun unknownMethodIsDaemonRpc32601() {
        val e = expectThrows<CarException.DaemonRpc> { client.daemonCall("no.such.method", "{}") }
        eq(e.code, -32601L, "code")
        eq(e.dataJson, "null", "dataJson")
        check(e.detail.isNotEmpty()) { "empty detail" }
    }

    fun badArgumentsAreRefusedPrecisely() {
        // The caller's bad JSON is a client-side error, never a JSON-RPC code.
        val e = expectThrows<CarException.InvalidArgument> { client.daemonCall("state.get", "{key") }
        check(e.detail.startsWith("params_json is not valid JSON")) { e.detail }
        val missing = expectThrows<CarException.DaemonRpc> { client.daemonCall("state.get", "{}") }
        eq(missing.code, -32602L, "daemon's code for a missing key")
        val url = expectThrows<CarException.Refused> { CarDaemonClient("http://127.0.0.1:1") }
        check(url.detail.contains("ws://")) { url.detail }
        val host = expectThrows<CarException.Refused> { client.daemonCallHostManagement("state.get", "{}") }
        check(host.detail.contains("state.get is not a host-management method")) { host.detail }
    }

    fun explicitUrlAndHostManagement() {
        CarDaemonClient(daemon.wsUrl).use { c ->
            eq(call(c, "debug.echo", """{"over":"tcp"}"""), mapOf("over" to "tcp"))
        }
        eq(Json.parse(client.daemonCallHostManagement("session.clear_halt", "{}")), mapOf("cleared" to false))
        // HostClient's generated wrapper of a host method goes over the host connection...
        HostClient(client).use { host ->
            eq(Json.parse(host.sessionClearHalt("{}")), mapOf("cleared" to false))
        }
        // ...and over the operator connection the daemon refuses it, with data.reason.
        val refused = expectThrows<CarException.DaemonRpc> { client.daemonCall("session.clear_halt", "{}") }
        eq(at(Json.parse(refused.dataJson), "reason"), "host_required", "refusal data")
    }

    fun hostClientServesTheHostMethods() {
        // The suite's daemon runs with --no-approvals, so agents.upsert is not held.
        val command = ProcessHandle.current().info().command().orElse("/bin/sh")
        val spec = """{"id":"kt-agent","name":"Kt Agent","command":${quote(command)}}"""
        HostClient(client).use { host ->
            val agent = Json.parse(host.agentsUpsert(spec))
            eq(at(agent, "spec", "id"), "kt-agent", "upserted id")
            check(File(at(agent, "token_path") as String).readText().trim().length >= 32) { "agent token" }
            val listed = (Json.parse(client.agentsList("{}")) as List<*>).map { at(it, "spec", "id") }
            check("kt-agent" in listed) { "agentsList: $listed" }
            for (method in listOf("agents.upsert", "diagnostics.secret_store_activity")) {
                val refused = expectThrows<CarException.DaemonRpc> { client.daemonCall(method, spec) }
                eq(at(Json.parse(refused.dataJson), "reason"), "host_required", "$method refusal")
            }
            eq(Json.parse(host.agentsRemove("""{"id":"kt-agent"}""")), mapOf("removed" to true))
            check(Json.parse(host.diagnosticsSecretStoreActivity("{}")) is Map<*, *>) { "activity" }
            eq(Json.parse(host.daemonCallHostManagement("session.clear_halt", "{}")), mapOf("cleared" to false))
            // removeModel stays the client's (CAR's CarRuntime has it), over the host connection.
            val missing = expectThrows<CarException.DaemonRpc> { client.removeModel("no-such-model") }
            check(at(Json.parse(missing.dataJson), "reason") != "host_required") { missing.dataJson }
        }
    }

    fun handlerServesToolsExecuteForAProposal() {
        val seen = LinkedBlockingQueue<Any?>()
        client.registerDaemonHandler("tools.execute", handler { callJson ->
            val call = Json.parse(callJson)
            seen.add(call)
            val x = at(call, "params", "x") as Long
            """{"doubled":${x * 2}}"""
        })
        call(client, "tools.register", """{"name":"double"}""")
        val proposal = """{"actions":[{"id":"a1","type":"tool_call","tool":"double","parameters":{"x":21}}]}"""
        val out = call(client, "proposal.submit", """{"proposal":$proposal}""")
        eq(at(out, "results", 0, "status"), "succeeded", "status in $out")
        eq(at(out, "results", 0, "output"), mapOf("doubled" to 42L), "output in $out")
        val c = seen.poll(5, TimeUnit.SECONDS)
        eq(at(c, "tool"), "double", "call_json.tool")
        eq(at(c, "action_id"), "a1", "call_json.action_id")
        eq(at(c, "params"), mapOf("x" to 21L), "call_json.params")
        eq(at(c, "attempt"), 1L, "call_json.attempt")
    }

    fun handlerErrorsReachTheDaemon() {
        client.registerDaemonHandler("t.fail", handler { throw CarException.Handler("disk full", false) })
        client.registerDaemonHandler("t.terminal", handler { throw CarException.Handler("journal gone", true) })
        client.registerDaemonHandler("t.code", handler {
            throw CarException.DaemonRpc(-32010L, "custom", """{"why":"because"}""")
        })
        client.registerDaemonHandler("t.undeclared", handler { throw IllegalStateException("kaboom") })
        client.registerDaemonHandler("t.garbage", handler { "not json" })
        eq(viaDaemon(client, "t.fail"), mapOf("error" to mapOf("code" to -32000L, "message" to "disk full")))
        eq(
            viaDaemon(client, "t.terminal"),
            mapOf("error" to mapOf("code" to -32000L, "message" to "journal gone", "data" to mapOf("terminal" to true))),
        )
        eq(
            viaDaemon(client, "t.code"),
            mapOf("error" to mapOf("code" to -32010L, "message" to "custom", "data" to mapOf("why" to "because"))),
        )
        val undeclared = viaDaemon(client, "t.undeclared")
        eq(at(undeclared, "error", "code"), -32000L, "undeclared code")
        eq(
            at(undeclared, "error", "message"),
            "handler threw an undeclared exception: java.lang.IllegalStateException: kaboom",
            "undeclared message",
        )
        eq(at(viaDaemon(client, "t.garbage"), "error", "code"), -32603L, "non-JSON result")
        // The connection and this JVM are still fine.
        eq(call(client, "debug.echo", """{"after":"errors"}"""), mapOf("after" to "errors"))
    }

    fun terminalToolFailureStopsRetries() {
        // A terminal failure halts the connection, so it gets a client of its own.
        CarDaemonClient().use { c ->
            val attempts = AtomicInteger()
            c.registerDaemonHandler("tools.execute", handler {
                attempts.incrementAndGet()
                throw CarException.Handler("receipt journal is unavailable", true)
            })
            // A read-only tool name: the daemon's permission gate holds `pay`-like tools for a human.
            call(c, "tools.register", """{"name":"receipt_lookup"}""")
            val proposal = """{"actions":[{"id":"p","type":"tool_call","tool":"receipt_lookup","failure_behavior":"retry","max_retries":3}]}"""
            val out = call(c, "proposal.submit", """{"proposal":$proposal}""")
            eq(at(out, "results", 0, "status"), "failed", "status in $out")
            eq(at(out, "results", 0, "terminal"), true, "terminal in $out")
            eq(at(out, "results", 0, "attempts"), 1L, "attempts in $out")
            eq(attempts.get(), 1, "handler calls")
            c.closeClient()
        }
    }

    fun handlerCallsBackIntoTheDaemon() {
        val other = CarDaemonClient()
        client.registerDaemonHandler("t.nested", handler { other.daemonCall("debug.echo", """{"inner":true}""") })
        eq(viaDaemon(client, "t.nested"), mapOf("result" to mapOf("inner" to true)))
        other.close()
    }

    fun notificationsArriveInOrder() {
        val got = LinkedBlockingQueue<String>()
        client.registerDaemonNotificationHandler("t.note", object : DaemonNotificationHandler {
            override fun notify(paramsJson: String) {
                if (paramsJson.contains("\"boom\"")) throw RuntimeException("notification handler failed")
                got.add(paramsJson)
            }
        })
        call(client, "debug.notify_client", """{"method":"t.note","params":{"n":1}}""")
        call(client, "debug.notify_client", """{"method":"t.note","params":{"n":"boom"}}""")
        call(client, "debug.notify_client", """{"method":"t.note","params":{"n":2}}""")
        eq(Json.parse(got.poll(10, TimeUnit.SECONDS) ?: "null"), mapOf("n" to 1L), "first notification")
        eq(Json.parse(got.poll(10, TimeUnit.SECONDS) ?: "null"), mapOf("n" to 2L), "notification after a throwing one")
    }

    fun closeFailsPendingCallsAndTheNextCallReconnects() {
        val c = CarDaemonClient()
        c.registerDaemonHandler("t.ping", handler { "\"pong\"" })
        call(c, "state.set", """{"key":"k","value":1}""")
        val first = c.connectionEpoch()
        eq(c.connectionEpoch(), first, "same connection, same epoch")
        val pending = CompletableFuture.supplyAsync {
            runCatching { c.daemonCall("debug.sleep", """{"ms":600000}""") }
        }
        Thread.sleep(300)
        c.closeClient()
        // Only the close can end a ten-minute sleep; the bound only guards against a hang.
        val outcome = pending.get(60, TimeUnit.SECONDS)
        check(outcome.exceptionOrNull() is CarException.Closed) { "pending call: $outcome" }
        c.closeClient()
        // A later call reconnects: a new daemon session (fresh state, a new epoch), and the
        // handler registered before the close still answers.
        eq(call(c, "state.get", """{"key":"k"}"""), null, "state after reconnect")
        check(c.connectionEpoch() > first) { "epoch did not change" }
        eq(viaDaemon(c, "t.ping"), mapOf("result" to "pong"), "handler after close")
        c.closeClient()
        // AutoCloseable.close() frees the native object; using it afterwards is a Kotlin
        // exception, not a crash.
        c.close()
        expectThrows<IllegalStateException> { c.daemonCall("debug.echo", "{}") }
    }

    fun daemonKilledMidCallThenRestart() {
        client.registerDaemonHandler("t.alive", handler { "\"still here\"" })
        call(client, "debug.echo")
        val started = CountDownLatch(1)
        val pending = CompletableFuture.supplyAsync {
            started.countDown()
            runCatching { client.daemonCall("debug.sleep", """{"ms":600000}""") }
        }
        started.await()
        Thread.sleep(300)
        // The sleep was written before this echo's answer came back (one FIFO writer).
        call(client, "debug.echo")
        val epoch = client.connectionEpoch()
        daemon.kill()
        // Only the dead connection can end a ten-minute sleep; the bound only guards
        // against a hang.
        val outcome = pending.get(60, TimeUnit.SECONDS)
        val err = outcome.exceptionOrNull()
        check(err is CarException.Transport) { "pending call after the kill: $outcome" }
        daemon.start()
        eq(call(client, "debug.echo", """{"back":true}"""), mapOf("back" to true), "first call after restart")
        eq(viaDaemon(client, "t.alive"), mapOf("result" to "still here"), "handler after reconnect")
        check(client.connectionEpoch() > epoch) { "epoch did not change after the restart" }
    }
}

fun main() {
    val bin = System.getenv("CAR_SERVER_BIN") ?: error("CAR_SERVER_BIN is not set")
    val home = File(System.getenv("CAR_HOME") ?: error("CAR_HOME is not set"))
    val scratch = Files.createTempDirectory("car-uniffi-kt").toFile()
    val daemon = Daemon(bin, home, scratch).start()
    val suite = Suite(daemon)
    val agents = AgentLoopTests(suite.client, daemon.wsUrl)
    val runners = AgentRunnerTests()
    val tests: List<Pair<String, () -> Unit>> = listOf(
        "versions" to suite::versions,
        "daemonCall returns results" to suite::daemonCallReturnsResults,
        "unknown method is DaemonRpc -32601" to suite::unknownMethodIsDaemonRpc32601,
        "generated typed members" to suite::generatedTypedMembers,
        "bad arguments are refused precisely" to suite::badArgumentsAreRefusedPrecisely,
        "explicit url and host management" to suite::explicitUrlAndHostManagement,
        "HostClient serves the host methods" to suite::hostClientServesTheHostMethods,
        "handler serves tools.execute for a proposal" to suite::handlerServesToolsExecuteForAProposal,
        "handler errors reach the daemon" to suite::handlerErrorsReachTheDaemon,
        "terminal tool failure stops retries" to suite::terminalToolFailureStopsRetries,
        "handler calls back into the daemon" to suite::handlerCallsBackIntoTheDaemon,
        "notifications arrive in order" to suite::notificationsArriveInOrder,
        "AgentLoop runs a tool, observes it and finishes" to agents::runsAToolObservesItAndFinishes,
        "AgentLoop: a tool that throws is observed and the run ends" to agents::aToolThatThrowsIsObservedAndTheRunEnds,
        "AgentLoop: the daemon's cancel sets the tool's abort signal" to agents::theDaemonsCancelSetsTheToolsAbortSignal,
        "a Kotlin AgentRunner runs a swarm's agents" to runners::aKotlinRunnerRunsASwarmsAgents,
        "close fails pending calls; the next call reconnects" to suite::closeFailsPendingCallsAndTheNextCallReconnects,
        "daemon killed mid-call, then restart" to suite::daemonKilledMidCallThenRestart,
    )
    var failed = 0
    for ((name, test) in tests) {
        val t0 = System.nanoTime()
        try {
            test()
            println("ok   $name (${(System.nanoTime() - t0) / 1_000_000} ms)")
        } catch (e: Throwable) {
            failed++
            println("FAIL $name: $e")
            e.printStackTrace()
        }
    }
    suite.client.closeClient()
    daemon.stop()
    scratch.deleteRecursively()
    if (failed > 0) {
        println("$failed of ${tests.size} Kotlin tests failed")
        System.exit(1)
    }
    println("all ${tests.size} Kotlin tests passed; the JVM survived every error path")
}
