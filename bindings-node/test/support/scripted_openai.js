'use strict'
// A scripted OpenAI-compatible chat endpoint for the agent-loop tests: the JS twin of
// tests/support/scripted_openai.py (which the Python and interop suites import in-process;
// it has no script entry point, so it cannot be spawned from here). It streams one tool
// call per request as SSE `tool_calls` deltas with `finish_reason: "tool_calls"`: `add(2,
// 3)` first, then, once the request carries a `tool` message, `finish` with an answer built
// from that tool result (`the sum is <sum>`), so a passing test proves the tool's output
// reached the model. Call ids are `call_<n>` for the n-th request the server received.
//
// One addition, for results the Python twin cannot parse (it fails the request): when the
// last tool result has no `sum` (the tool failed, so it is `{"error": …}`), the answer is
// `the tool failed: <error>`, so a test can prove the model observed the error.

const http = require('node:http')

class ScriptedModel {
  /** Listens on an ephemeral loopback port; `url` is the `/v1` base URL once `start()` resolves. */
  constructor() {
    this.requests = []
    this.url = null
    this.server = http.createServer((req, res) => this.#serve(req, res))
  }

  async start() {
    await new Promise((resolve, reject) => {
      this.server.once('error', reject)
      this.server.listen(0, '127.0.0.1', resolve)
    })
    this.url = `http://127.0.0.1:${this.server.address().port}/v1`
    return this
  }

  #serve(req, res) {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      let body
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        res.writeHead(400).end()
        return
      }
      this.requests.push(body)
      const results = (body.messages || []).filter((m) => m.role === 'tool')
      let name
      let args
      if (results.length > 0) {
        const observed = JSON.parse(results[results.length - 1].content)
        const summed = observed !== null && typeof observed === 'object' && 'sum' in observed
        name = 'finish'
        args = { answer: summed ? `the sum is ${observed.sum}` : `the tool failed: ${observed?.error}` }
      } else {
        name = 'add'
        args = { a: 2, b: 3 }
      }
      const call = { index: 0, id: `call_${this.requests.length}`, type: 'function', function: { name, arguments: JSON.stringify(args) } }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      for (const chunk of [
        { choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: null }] },
        { choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
      ]) {
        res.write(`data: ${JSON.stringify(chunk)}\n\n`)
      }
      res.end('data: [DONE]\n\n')
    })
  }

  async close() {
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

/** A started scripted model. */
function startScriptedModel() {
  return new ScriptedModel().start()
}

module.exports = { ScriptedModel, startScriptedModel }
