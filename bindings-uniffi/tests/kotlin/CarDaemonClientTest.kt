// The Kotlin test of the UniFFI library (issue 8): drives real car-server processes through
// the generated Kotlin bindings on the JVM with JNA.
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
        eq(call(client, "state.set", """{"key":"greeting","value":{"text":"hi"}}"""), mapOf("ok" to true))
        eq(call(client, "state.get", """{"key":"greeting"}"""), mapOf("text" to "hi"))
        // A generated typed wrapper goes through the same bridge.
        eq(Json.parse(client.stateExists("""{"key":"greeting"}""")), true, "stateExists")
        val caps = client.capabilitiesList("{}")
        check(caps.contains("\"state.get\"")) { "capabilities.list lacks state.get: $caps" }
    }

    fun generatedMemoryAndSkillWrappers() {
        CarDaemonClient().use { c ->
            eq(Json.parse(c.memoryAddFact("""{"subject":"kotlin","body":"the JVM test adds this fact","kind":"fact","tags":["jvm"]}""")), 1L, "fact count after add")
            eq(Json.parse(c.memoryFactCount("{}")), 1L, "memoryFactCount")
            val hits = Json.parse(c.memoryQuery("""{"query":"kotlin jvm fact","k":3}""")) as List<*>
            eq(at(hits, 0, "subject"), "kotlin", "memoryQuery top hit")
            eq(at(hits, 0, "tags"), listOf("jvm"), "memoryQuery tags")
            val context = Json.parse(c.memoryBuildContext("""{"query":"kotlin"}"""))
            check((at(context, "context") as String).contains("the JVM test adds this fact")) { "context: $context" }
            eq(
                Json.parse(c.skillIngest("""{"name":"login","code":"click('#login')","platform":"web","persona":"tester",
                    "url_pattern":"example.com/*","task_keywords":["login","sign in"],"description":"log in"}""")),
                1L, "skill count after ingest",
            )
            val found = Json.parse(c.skillFind("""{"task":"login","url":"https://example.com/"}""")) as List<*>
            eq(at(found, 0, "name"), "login", "skillFind top hit in $found")
            val report = Json.parse(c.skillReport("""{"name":"login","outcome":"success"}"""))
            eq(at(report, "success_count"), 1L, "skillReport success_count in $report")
            val bad = expectThrows<CarException.DaemonRpc> { c.skillReport("""{"name":"login","outcome":"maybe"}""") }
            eq(bad.code, -32602L, "bad outcome code")
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
        val e = expectThrows<CarException.DaemonRpc> { client.daemonCall("state.get", "{key") }
        eq(e.code, -32602L, "code")
        check(e.detail.startsWith("params_json is not valid JSON")) { e.detail }
        val missing = expectThrows<CarException.DaemonRpc> { client.daemonCall("state.get", "{}") }
        eq(missing.code, -32602L, "daemon's code for a missing key")
        val url = expectThrows<CarException.Transport> { CarDaemonClient("http://127.0.0.1:1") }
        check(url.detail.startsWith("url: ")) { url.detail }
        val host = expectThrows<CarException.Transport> { client.daemonCallHostManagement("state.get", "{}") }
        check(host.detail.contains("state.get is not a host-management method")) { host.detail }
    }

    fun explicitUrlAndHostManagement() {
        CarDaemonClient(daemon.wsUrl).use { c ->
            eq(call(c, "debug.echo", """{"over":"tcp"}"""), mapOf("over" to "tcp"))
        }
        val reply = client.daemonCallHostManagement("host.subscribe", "{}")
        Json.parse(reply)
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
            call(c, "tools.register", """{"name":"pay"}""")
            val proposal = """{"actions":[{"id":"p","type":"tool_call","tool":"pay","failure_behavior":"retry","max_retries":3}]}"""
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

    fun closedClientCallsThrowClosed() {
        val c = CarDaemonClient()
        call(c, "debug.echo")
        val pending = CompletableFuture.supplyAsync {
            runCatching { c.daemonCall("debug.sleep", """{"ms":600000}""") }
        }
        Thread.sleep(300)
        c.closeClient()
        val outcome = pending.get(5, TimeUnit.SECONDS)
        check(outcome.exceptionOrNull() is CarException.Closed) { "pending call: $outcome" }
        expectThrows<CarException.Closed> { c.daemonCall("debug.echo", "{}") }
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
            val r = runCatching { client.daemonCall("debug.sleep", """{"ms":600000}""") }
            Pair(r, System.nanoTime())
        }
        started.await()
        Thread.sleep(300)
        // The sleep was written before this echo's answer came back (one FIFO writer).
        call(client, "debug.echo")
        daemon.kill()
        val killedAt = System.nanoTime()
        val (outcome, failedAt) = pending.get(10, TimeUnit.SECONDS)
        val err = outcome.exceptionOrNull()
        check(err is CarException.Transport || err is CarException.Closed) { "pending call after the kill: $outcome" }
        val lateMs = (failedAt - killedAt) / 1_000_000
        check(lateMs < 1000) { "the pending call failed ${lateMs} ms after the kill" }
        daemon.start()
        eq(call(client, "debug.echo", """{"back":true}"""), mapOf("back" to true), "first call after restart")
        eq(viaDaemon(client, "t.alive"), mapOf("result" to "still here"), "handler after reconnect")
    }
}

fun main() {
    val bin = System.getenv("CAR_SERVER_BIN") ?: error("CAR_SERVER_BIN is not set")
    val home = File(System.getenv("CAR_HOME") ?: error("CAR_HOME is not set"))
    val scratch = Files.createTempDirectory("car-uniffi-kt").toFile()
    val daemon = Daemon(bin, home, scratch).start()
    val suite = Suite(daemon)
    val tests: List<Pair<String, () -> Unit>> = listOf(
        "versions" to suite::versions,
        "daemonCall returns results" to suite::daemonCallReturnsResults,
        "unknown method is DaemonRpc -32601" to suite::unknownMethodIsDaemonRpc32601,
        "generated memory and skill wrappers" to suite::generatedMemoryAndSkillWrappers,
        "bad arguments are refused precisely" to suite::badArgumentsAreRefusedPrecisely,
        "explicit url and host management" to suite::explicitUrlAndHostManagement,
        "handler serves tools.execute for a proposal" to suite::handlerServesToolsExecuteForAProposal,
        "handler errors reach the daemon" to suite::handlerErrorsReachTheDaemon,
        "terminal tool failure stops retries" to suite::terminalToolFailureStopsRetries,
        "handler calls back into the daemon" to suite::handlerCallsBackIntoTheDaemon,
        "notifications arrive in order" to suite::notificationsArriveInOrder,
        "closed client calls throw Closed" to suite::closedClientCallsThrowClosed,
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
