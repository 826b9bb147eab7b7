// A scripted OpenAI-compatible chat endpoint for the AgentLoop test: the Kotlin twin of
// tests/support/scripted_openai.py (a module the Python suites import, not a script this
// JVM could start). It streams one tool call per request: `add(2, 3)` first, then, once the
// request carries a `tool` message, `finish` with an answer built from that tool result
// (`the sum is <sum>`), so a passing test proves the tool's output reached the model. Where
// the Python server would fail on a result without `sum` (a tool error), this one answers
// `finish("the tool failed")`, so a run whose tool throws still ends.

import com.sun.net.httpserver.HttpServer
import java.net.InetSocketAddress
import java.util.concurrent.CopyOnWriteArrayList

class ScriptedModel : AutoCloseable {
    /** Every request body, parsed, in arrival order. */
    val requests = CopyOnWriteArrayList<Any?>()
    private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0)
    val url: String

    init {
        server.createContext("/") { exchange ->
            try {
                val body = Json.parse(exchange.requestBody.readBytes().decodeToString())
                requests.add(body)
                val (name, args) = reply(body)
                val function = """{"name":${quote(name)},"arguments":${quote(args)}}"""
                val call = """{"index":0,"id":"call_${requests.size}","type":"function","function":$function}"""
                exchange.responseHeaders.add("content-type", "text/event-stream")
                exchange.sendResponseHeaders(200, 0)
                exchange.responseBody.use { out ->
                    for (chunk in listOf(
                        """{"choices":[{"index":0,"delta":{"tool_calls":[$call]},"finish_reason":null}]}""",
                        """{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}""",
                    )) {
                        out.write("data: $chunk\n\n".toByteArray())
                    }
                    out.write("data: [DONE]\n\n".toByteArray())
                }
            } finally {
                exchange.close()
            }
        }
        server.start()
        url = "http://127.0.0.1:${server.address.port}/v1"
    }

    /** The tool call (name, arguments JSON) answering a request. */
    private fun reply(body: Any?): Pair<String, String> {
        val results = toolMessages(body)
        if (results.isEmpty()) return "add" to """{"a":2,"b":3}"""
        val sum = at(Json.parse(at(results.last(), "content") as String), "sum")
        val answer = if (sum != null) "the sum is $sum" else "the tool failed"
        return "finish" to """{"answer":${quote(answer)}}"""
    }

    override fun close() = server.stop(0)
}

/** The `tool` messages of a chat request body. */
fun toolMessages(body: Any?): List<Any?> =
    (at(body, "messages") as List<*>).filter { at(it, "role") == "tool" }
