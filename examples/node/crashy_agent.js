'use strict'
// The agent `supervised_agent.js` runs under the daemon's supervisor (not run on its own).
// It connects as the agent the supervisor started (`CAR_AGENT_ID` / `CAR_AGENT_TOKEN` come
// from the supervisor), makes one call, and prints a line. On its first run (no marker file
// in its working directory yet) it then crashes, exiting with status 1 after ~300 ms; the
// restarted run finds the marker and stays up until the supervisor stops it (SIGTERM), or
// exits on its own after ten minutes.

const fs = require('node:fs')
const path = require('node:path')
const { CarRuntime } = require('car-runtime')

async function main() {
  if (!process.env.CAR_AGENT_ID || !process.env.CAR_AGENT_TOKEN) {
    console.error('crashy_agent.js is started by the daemon for supervised_agent.js: run that instead')
    process.exit(2)
  }
  const rt = new CarRuntime()
  const caps = JSON.parse(await rt.capabilitiesList())
  const marker = path.join(process.cwd(), 'crashed-once')
  const first = !fs.existsSync(marker)
  console.log(
    `agent ${process.env.CAR_AGENT_ID} (pid ${process.pid}) connected as ${caps.caller_role}: ` +
      (first ? 'first run, crashing in 300 ms' : 'restarted, staying up'),
  )
  if (first) {
    fs.writeFileSync(marker, `${process.pid}\n`)
    setTimeout(() => process.exit(1), 300)
    return
  }
  // Stays up until stopped; a bound in case nothing ever stops it (exit 0: no restart).
  const keepAlive = setTimeout(() => process.exit(0), 10 * 60_000)
  process.once('SIGTERM', () => {
    console.log(`agent ${process.env.CAR_AGENT_ID} (pid ${process.pid}) stopping on SIGTERM`)
    clearTimeout(keepAlive)
    rt.close()
    process.exit(0)
  })
}

main().catch((err) => {
  console.error(err)
  process.exit(3)
})
