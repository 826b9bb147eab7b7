// One call on a raw host session over java.net.http.WebSocket, for what the daemon lets
// only a host do and no binding member offers: registering a remote model endpoint (the
// daemon sends an endpoint's API key to its URL, so only a host chooses one).

import java.io.File
import java.net.URI
import java.net.http.HttpClient
import java.net.http.WebSocket
import java.util.concurrent.CompletionStage
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/** The host token of the daemon over this JVM's CAR_HOME. */
fun hostToken(): String {
    val home = System.getenv("CAR_HOME") ?: error("CAR_HOME is not set")
    return File(home, "ai.parslee.car/host-token").readText().trim()
}

/** `method(paramsJson)` on a fresh host session of the daemon at `wsUrl`; its result. */
fun hostCall(wsUrl: String, method: String, paramsJson: String): Any? {
    val frames = LinkedBlockingQueue<String>()
    val listener = object : WebSocket.Listener {
        private val text = StringBuilder()
        override fun onText(ws: WebSocket, data: CharSequence, last: Boolean): CompletionStage<*>? {
            text.append(data)
            if (last) {
                frames.add(text.toString())
                text.setLength(0)
            }
            ws.request(1)
            return null
        }
    }
    val ws = HttpClient.newHttpClient().newWebSocketBuilder()
        .buildAsync(URI.create(wsUrl), listener)
        .get(30, TimeUnit.SECONDS)
    try {
        fun call(id: Long, m: String, params: String): Any? {
            ws.sendText("""{"jsonrpc":"2.0","id":$id,"method":${quote(m)},"params":$params}""", true)
                .get(30, TimeUnit.SECONDS)
            while (true) {
                val msg = Json.parse(frames.poll(30, TimeUnit.SECONDS) ?: error("no reply to $m"))
                if (at(msg, "id") != id) continue
                (msg as Map<*, *>)["error"]?.let { error("$m failed: $it") }
                return msg["result"]
            }
        }
        call(1, "session.auth", """{"host_token":${quote(hostToken())}}""")
        return call(2, method, paramsJson)
    } finally {
        ws.sendClose(WebSocket.NORMAL_CLOSURE, "").get(30, TimeUnit.SECONDS)
    }
}
