'use strict'
// Memory and skills: facts, ranked recall, a context block for a prompt, persistence, and
// procedural skills with outcome tracking.
//
// Run against a running daemon: `node examples/node/memory_skills.js`.

const assert = require('node:assert/strict')
const { CarRuntime } = require('car-runtime')

async function main() {
  const rt = new CarRuntime({ memoryNamespace: 'examples-memory-node' })
  try {
    await rt.addFact('deploys', 'never deploy on Fridays', 'constraint')
    await rt.addFact('editor', 'the team prefers tabs over spaces', 'preference')
    await rt.addFact('ci', 'the CI machine has two cores', 'fact', 0.9, undefined, ['ci'])
    console.log('facts:', await rt.factCount())

    for (const row of JSON.parse(await rt.queryFacts('how many cores does CI have', 2))) {
      console.log(`  ${row.confidence.toFixed(2)} ${row.subject}: ${row.body}`)
    }

    const context = await rt.buildContext('can we deploy today?', 2048)
    console.log('context:\n' + context)
    assert.match(context, /Fridays/)

    console.log('persisted:', await rt.persistMemory('examples-memory-node-backup.json'))

    await rt.ingestSkill(
      'open_login',
      "page.click('#login')",
      'web',
      'tester',
      'https://app.example/*',
      ['login', 'sign in'],
      'open the login form',
    )
    const found = await rt.findSkill('tester', 'https://app.example/home', 'sign in')
    const best = JSON.parse(found)[0]
    console.log('skill:', best.name, 'score', best.match_score.toFixed(2))
    console.log('report:', await rt.reportOutcome(best.name, 'success'))
    console.log('skills:', JSON.parse(await rt.listSkills()).map((s) => s.name))
    console.log('done')
  } finally {
    rt.close()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
