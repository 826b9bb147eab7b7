// Benchmark: CarDaemonClient.daemonCall against a plain JSON-RPC client on the JDK's own
// java.net.http.WebSocket, same call, same daemon, same run (the two alternate in blocks so
// a shared machine's drift reaches both), plus the tools.execute callback round trip.
// It asserts nothing about speed.
//
// Callback RTT: one proposal of 20 sequential tool actions; the handler returns at once, so
// the time from one callback's start to the next one's is a full reverse round trip (result
// to the daemon, next action scheduled, tools.execute back, the binding reaching Kotlin).
//
// Run by scripts/bench (component `kotlin`) from the jar bindings-uniffi/test.sh builds:
// CAR_HOME names an empty scratch directory, CAR_SERVER_BIN the daemon; with CAR_BENCH_OUT
// the metrics go there as JSON, and CAR_BENCH_QUICK=1 asks for a reduced run.
package bench

import java.io.File
import java.net.URI
import java.net.http.HttpClient
import java.net.http.WebSocket
import java.util.concurrent.CompletableFuture
import java.util.concurrent.CompletionStage
import java.util.Locale
import java.util.concurrent.TimeUnit
import uniffi.car_runtime_uniffi.CarDaemonClient
import uniffi.car_runtime_uniffi.DaemonHandler

/** JSON-RPC over the JDK WebSocket: one call in flight at a time, which is all this needs. */
class JdkClient(url: String, token: String) {
    private var next = 0L
    @Volatile private var waiting: CompletableFuture<String>? = null
    private val ws: WebSocket

    init {
        val listener = object : WebSocket.Listener {
            private val text = StringBuilder()
            override fun onText(ws: WebSocket, data: CharSequence, last: Boolean): CompletionStage<*>? {
                text.append(data)
                if (last) {
                    waiting?.complete(text.toString())
                    text.setLength(0)
                }
                ws.request(1)
                return null
            }
        }
        ws = HttpClient.newHttpClient().newWebSocketBuilder()
            .buildAsync(URI.create(url), listener).get(30, TimeUnit.SECONDS)
        call("session.auth", """{"token":"$token"}""")
        call("server.handshake", """{"protocol_version":3,"client_version":"bench-jdk-ws",""" +
            """"required_capabilities":["infer.model-identity.v1","models.catalog-identity.v1"]}""")
    }

    /** The reply frame of `method(params)`; an error reply fails. */
    fun call(method: String, params: String): String {
        val id = ++next
        val reply = CompletableFuture<String>()
        waiting = reply
        ws.sendText("""{"jsonrpc":"2.0","id":$id,"method":"$method","params":$params}""", true)
        val frame = reply.get(30, TimeUnit.SECONDS)
        check(!frame.contains("\"error\"")) { "$method failed: $frame" }
        return frame
    }

    fun close() {
        ws.sendClose(WebSocket.NORMAL_CLOSURE, "").get(30, TimeUnit.SECONDS)
    }
}

/** Starts the daemon on `home`; its process and WebSocket URL once its ready file is written. */
fun startDaemon(bin: String, home: File): Pair<Process, String> {
    val ready = File(home, "ready.json")
    val pb = ProcessBuilder(bin, "--port", "0", "--ready-file", ready.path, "--mcp-bind", "disabled", "--no-dashboard")
        .redirectOutput(ProcessBuilder.Redirect.DISCARD)
        .redirectError(File(home, "daemon.log"))
    pb.environment()["CAR_HOME"] = home.path
    pb.environment()["CAR_LOG"] = "warn"
    val process = pb.start()
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
    while (System.nanoTime() < deadline) {
        val url = runCatching { Regex("\"ws_url\"\\s*:\\s*\"([^\"]+)\"").find(ready.readText())?.groupValues?.get(1) }.getOrNull()
        if (url != null) return process to url
        check(process.isAlive) { "car-server exited: ${File(home, "daemon.log").readText()}" }
        Thread.sleep(20)
    }
    process.destroyForcibly()
    error("car-server was not ready within 60 s")
}

fun measure(n: Int, once: () -> Unit): List<Double> {
    repeat(minOf(200, n)) { once() }
    return List(n) {
        val t = System.nanoTime()
        once()
        (System.nanoTime() - t) / 1000.0
    }
}

fun p(samples: List<Double>, q: Double): Double {
    val sorted = samples.sorted()
    return sorted[minOf(sorted.size - 1, (q * sorted.size).toInt())]
}

fun main() {
    val quick = System.getenv("CAR_BENCH_QUICK") == "1"
    val calls = if (quick) 400 else 6000
    val home = File(System.getenv("CAR_HOME") ?: error("CAR_HOME is not set"))
    val bin = System.getenv("CAR_SERVER_BIN") ?: error("CAR_SERVER_BIN is not set")
    val (daemon, wsUrl) = startDaemon(bin, home)
    try {
        val token = File(home, "ai.parslee.car/auth-token").readText().trim()
        val client = CarDaemonClient(wsUrl)
        client.daemonCall("state.set", """{"key":"bench","value":"x"}""")
        val jdk = JdkClient(wsUrl, token)
        val series = mapOf("binding" to mutableListOf<Double>(), "jdk" to mutableListOf())
        val run = mapOf(
            "binding" to { client.daemonCall("state.get", """{"key":"bench"}"""); Unit },
            "jdk" to { jdk.call("state.get", """{"key":"bench"}"""); Unit },
        )
        for (b in 0 until 4) {
            val order = if (b % 2 == 0) listOf("binding", "jdk") else listOf("jdk", "binding")
            for (side in order) series.getValue(side) += measure(calls / 4, run.getValue(side))
        }

        val marks = mutableListOf<Long>()
        client.registerDaemonHandler("tools.execute", object : DaemonHandler {
            override fun handle(paramsJson: String): String {
                synchronized(marks) { marks += System.nanoTime() }
                return "\"ok\""
            }
        })
        client.daemonCall("tools.register", """{"name":"echo"}""")
        val actions = (0 until 20).joinToString(",") { i ->
            val deps = if (i == 0) "[]" else "[\"a${i - 1}\"]"
            """{"id":"a$i","type":"tool_call","tool":"echo","parameters":{"i":$i},"dependencies":$deps}"""
        }
        val gaps = mutableListOf<Double>()
        for (r in 0..(if (quick) 2 else 15)) {
            synchronized(marks) { marks.clear() }
            client.daemonCall("proposal.submit", """{"proposal":{"actions":[$actions]}}""")
            val m = synchronized(marks) { marks.toList() }
            if (r > 0) for (i in 1 until m.size) gaps += (m[i] - m[i - 1]) / 1000.0
        }
        jdk.close()
        client.close()

        val call = p(series.getValue("binding"), 0.5)
        val plain = p(series.getValue("jdk"), 0.5)
        val cb = p(gaps, 0.5)
        println("CarDaemonClient.daemonCall state.get  p50 %.1f us  p99 %.1f us".format(call, p(series.getValue("binding"), 0.99)))
        println("JDK WebSocket client state.get        p50 %.1f us  p99 %.1f us".format(plain, p(series.getValue("jdk"), 0.99)))
        println("tools.execute callback round trip     p50 %.1f us".format(cb))
        println("ratio daemonCall / JDK client p50: %.2f; callback / call p50: %.2f".format(call / plain, cb / call))
        System.getenv("CAR_BENCH_OUT")?.let { out ->
            fun us(v: Double) = """{"value":${"%.1f".format(Locale.ROOT, v)},"unit":"µs"}"""
            fun ratio(v: Double) = """{"value":${"%.3f".format(Locale.ROOT, v)},"unit":"ratio"}"""
            File(out).writeText(
                """{"component":"kotlin","metrics":{"call_p50_us":${us(call)},""" +
                    """"call_p99_us":${us(p(series.getValue("binding"), 0.99))},"jdk_ws_p50_us":${us(plain)},""" +
                    """"call_p50_over_jdk_ws":${ratio(call / plain)},"callback_rtt_p50_us":${us(cb)},""" +
                    """"callback_over_call":${ratio(cb / call)}}}""",
            )
        }
    } finally {
        daemon.destroy()
        if (!daemon.waitFor(30, TimeUnit.SECONDS)) daemon.destroyForcibly()
    }
}
