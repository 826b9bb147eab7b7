'use strict'
// An agent on a local model, offline: SmolLM2-135M-Instruct (a GGUF file) answers a
// question with a real tool, through the agent loop every binding shares.
//
// Each turn the loop asks the model for one tool call (`toolChoice: 'required'`,
// `parallelToolCalls: false`; the daemon
// constrains decoding with a grammar built from the tool schemas, so every call parses and
// its arguments match the schema), runs it through this program's `multiply`, lets the
// model read the result, and ends when the model calls `finish`. Greedy decoding
// (`temperature: 0`) makes the run repeatable. A 135-million-parameter model is a small
// reasoner: what this shows is the mechanics, the tool doing the arithmetic.
//
// Run against a running daemon, with the model from `eval "$(scripts/fetch-models)"`:
// `node examples/node/local_agent.js [path/to/model.gguf]` (default: $CAR_TEST_GGUF).

const assert = require('node:assert/strict')
const fs = require('node:fs')
const { CarRuntime, runAgent } = require('car-runtime')

async function main() {
  const gguf = process.argv[2] || process.env.CAR_TEST_GGUF || ''
  if (!gguf || !fs.existsSync(gguf)) {
    console.error('give the GGUF path, or run `eval "$(scripts/fetch-models)"` first')
    process.exit(2)
  }
  const calls = []
  const rt = new CarRuntime()
  try {
    await rt.registerModel(JSON.stringify({ id: 'smollm2-local', path: gguf }))
    const outcome = await runAgent(
      {
        agentName: 'calculator',
        identity: 'You are a calculator. Use the multiply tool to compute products, then call finish with the result.',
        toolSchemas: [{
          name: 'multiply',
          description: 'Multiply two numbers a and b.',
          parameters: {
            type: 'object',
            properties: { a: { type: 'number' }, b: { type: 'number' } },
            required: ['a', 'b'],
          },
        }],
        tools: {
          multiply: ({ a, b }) => {
            calls.push({ a, b })
            // A result that says what comes next keeps a small model from calling again.
            return `The product is ${a * b}. Call finish with answer ${a * b}.`
          },
        },
        defaultModel: 'smollm2-local',
        maxTokens: 96,
        maxTurns: 4,
        toolChoice: 'required',
        parallelToolCalls: false,
        temperature: 0,
        runtime: rt,
      },
      'What is 17 times 23?',
    )
    console.log('tool calls:', JSON.stringify(calls))
    console.log('status:', outcome.status, '| tools called:', outcome.tools_called.join(', '))
    console.log('answer:', outcome.summary)
    assert.deepEqual(calls[0], { a: 17, b: 23 })
    assert.deepEqual(outcome.tools_called, ['multiply', 'finish'])
  } finally {
    rt.close()
  }
  console.log('done')
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
