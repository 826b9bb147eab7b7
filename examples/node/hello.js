'use strict'
// Hello, car-runtime: state, a fact, verify, and a proposal whose tool runs in JavaScript.
//
// Run against a running daemon (`car-server`): `node examples/node/hello.js`
// (with the package built: `cd bindings-node && npm install && npm run build`).

const assert = require('node:assert/strict')
const { CarRuntime } = require('car-runtime')

/** The tool the daemon calls back: two-parameter form (tool name, params JSON). */
async function greet(tool, paramsJson) {
  const { name } = JSON.parse(paramsJson)
  return JSON.stringify({ greeting: `hello, ${name}` })
}

async function main() {
  const rt = new CarRuntime()
  try {
    await rt.stateSet('visitor', JSON.stringify('Ada'))
    console.log('state:', await rt.stateGet('visitor'))

    const count = await rt.addFact('car-runtime', 'the daemon calls tools back on the client', 'fact')
    console.log('facts:', count)

    const plan = {
      actions: [
        { id: 'greet', type: 'tool_call', tool: 'greet', parameters: { name: 'Ada' }, failure_behavior: 'abort' },
        { id: 'remember', type: 'state_write', key: 'greeted', value: true, dependencies: ['greet'] },
      ],
    }
    await rt.registerTool('greet')
    const verdict = JSON.parse(await rt.verifyProposal(JSON.stringify(plan)))
    console.log('valid:', verdict.valid, 'levels:', JSON.stringify(verdict.execution_levels))
    assert.ok(verdict.valid, JSON.stringify(verdict.issues))

    const result = JSON.parse(await rt.executeProposal(JSON.stringify(plan), greet))
    console.log('output:', result.outputs.greet)
    assert.deepEqual(result.outputs.greet, { greeting: 'hello, Ada' })
    assert.equal(await rt.stateGet('greeted'), 'true')
    console.log('done')
  } finally {
    rt.close()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
