// A minimal Kotlin program using the car-runtime UniFFI library: store and read state
// through the typed members generated from the daemon's contract, then run a one-action
// proposal whose tool is served by this program.
//
// Build and run (see bindings-uniffi/test.sh, which does exactly this against a daemon):
//   uniffi-bindgen generate --library libcar_runtime_uniffi.so --language kotlin --out-dir gen
//   kotlinc gen examples/kotlin/Main.kt -cp jna.jar -include-runtime -d example.jar
//   java -Djna.library.path=<dir of the .so> -cp example.jar:jna.jar example.MainKt
// The daemon is found through CAR_HOME (its Unix socket and token file) or CAR_DAEMON_URL.

package example

import uniffi.car_runtime_uniffi.CarDaemonClient
import uniffi.car_runtime_uniffi.CarException
import uniffi.car_runtime_uniffi.DaemonHandler
import uniffi.car_runtime_uniffi.protocolVersion

fun main() {
    CarDaemonClient().use { car ->
        println("protocol ${protocolVersion()}")

        println("connection epoch ${car.connectionEpoch()}")
        car.stateSet("city", "\"Lisbon\"")
        println("stateGet city -> ${car.stateGet("city")}, keys ${car.stateKeys()}")
        println("facts after addFact: ${car.addFact("kotlin", "the example adds a fact", "fact", tags = listOf("example"))}")

        // The daemon calls this back for every tool action of the proposal.
        car.registerDaemonHandler("tools.execute", object : DaemonHandler {
            override fun handle(paramsJson: String): String {
                if (!paramsJson.contains("\"tool\":\"shout\"")) {
                    throw CarException.Handler("unknown tool in $paramsJson", true)
                }
                return """{"text":"HELLO FROM KOTLIN"}"""
            }
        })
        car.registerTool("shout")
        val result = car.daemonCall(
            "proposal.submit",
            """{"proposal":{"actions":[{"id":"greet","type":"tool_call","tool":"shout","parameters":{}}]}}""",
        )
        println("proposal.submit -> $result")

        try {
            car.daemonCall("no.such.method", "{}")
        } catch (e: CarException.DaemonRpc) {
            println("no.such.method -> code ${e.code}: ${e.detail}")
        }
        car.closeClient()
    }
}
