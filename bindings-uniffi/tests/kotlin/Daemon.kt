// Starts and stops real car-server processes for the Kotlin test.
//
// The daemon shares this JVM's CAR_HOME (the test runner sets it), so a CarDaemonClient
// built with no url discovers the daemon's Unix socket and token file there, and finds
// both again after a restart on the same CAR_HOME (same socket path, new token).

import java.io.File
import java.util.concurrent.TimeUnit

class Daemon(private val bin: String, private val home: File, private val scratch: File) {
    private var process: Process? = null
    private var starts = 0
    var wsUrl: String = ""
        private set

    fun start(): Daemon {
        check(process == null) { "daemon already running" }
        starts++
        val ready = File(scratch, "ready-$starts.json")
        val stderr = File(scratch, "daemon-$starts.log")
        // --no-approvals: the HostClient test registers an agent without a host's approval.
        val args = listOf("--port", "0", "--ready-file", ready.path, "--debug-methods", "--no-approvals")
        val pb = ProcessBuilder(listOf(bin) + args)
            .redirectErrorStream(false)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .redirectError(stderr)
        pb.environment()["CAR_HOME"] = home.path
        pb.environment()["CAR_LOG"] = "info"
        val p = pb.start()
        process = p
        val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
        while (true) {
            if (ready.exists()) {
                val info = runCatching { Json.parse(ready.readText()) }.getOrNull()
                if (info != null) {
                    wsUrl = at(info, "ws_url") as String
                    return this
                }
            }
            if (!p.isAlive) error("car-server exited early (${p.exitValue()}):\n${stderr.readText()}")
            if (System.nanoTime() > deadline) {
                p.destroyForcibly()
                error("car-server was not ready within 60 s:\n${stderr.readText()}")
            }
            Thread.sleep(20)
        }
    }

    /** SIGKILL, returning once the process is reaped (its sockets are closed by then). */
    fun kill() {
        process?.let { it.destroyForcibly(); it.waitFor() }
        process = null
    }

    /** SIGTERM: a clean shutdown. */
    fun stop() {
        process?.let {
            it.destroy()
            if (!it.waitFor(30, TimeUnit.SECONDS)) it.destroyForcibly().waitFor()
        }
        process = null
    }
}
