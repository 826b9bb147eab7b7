'use strict'
// An agent with real file tools, guarded by daemon policies.
//
// The tools read, write and list files inside a sandbox directory. Policies registered on
// the daemon deny deleting files outright and deny writes of shell scripts; the daemon
// rejects those actions before the tool is ever called.
//
// Run against a running daemon: `node examples/node/file_agent.js [sandbox-dir]`.

const assert = require('node:assert/strict')
const fs = require('node:fs/promises')
const os = require('node:os')
const path = require('node:path')
const { CarRuntime, TerminalToolError, executeProposal } = require('car-runtime')

class FileTools {
  constructor(root) {
    this.root = path.resolve(root)
  }

  resolve(rel) {
    const full = path.resolve(this.root, rel)
    if (full !== this.root && !full.startsWith(this.root + path.sep)) {
      // Escaping the sandbox is never going to work on a retry.
      throw new TerminalToolError(`path escapes the sandbox: ${rel}`)
    }
    return full
  }

  /** One-parameter form: gets the whole call (`tool`, `params`, `action_id`, …). */
  async call(callJson) {
    const { tool, params } = JSON.parse(callJson)
    switch (tool) {
      case 'write_file': {
        const file = this.resolve(params.path)
        await fs.mkdir(path.dirname(file), { recursive: true })
        await fs.writeFile(file, params.content)
        return JSON.stringify({ written: params.content.length })
      }
      case 'read_file':
        return JSON.stringify({ content: await fs.readFile(this.resolve(params.path), 'utf8') })
      case 'list_dir':
        return JSON.stringify({ entries: (await fs.readdir(this.resolve(params.path ?? '.'))).sort() })
      case 'delete_file':
        await fs.unlink(this.resolve(params.path))
        return JSON.stringify({ deleted: true })
      default:
        throw new Error(`unknown tool ${tool}`)
    }
  }
}

async function main() {
  const root = process.argv[2] ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'car-agent-')))
  const tools = new FileTools(root)
  const toolFn = (callJson) => tools.call(callJson)
  const rt = new CarRuntime()
  try {
    for (const name of ['write_file', 'read_file', 'list_dir', 'delete_file']) await rt.registerTool(name)
    await rt.registerPolicy('no-deletes', 'deny_tool', 'delete_file')
    await rt.registerPolicy('no-scripts', 'deny_tool_param', 'write_file', 'path', '\\.(sh|py)$')

    const plan = {
      actions: [
        { id: 'note', type: 'tool_call', tool: 'write_file', parameters: { path: 'notes/todo.txt', content: 'ship the node binding' } },
        { id: 'list', type: 'tool_call', tool: 'list_dir', parameters: { path: 'notes' }, dependencies: ['note'] },
        { id: 'read', type: 'tool_call', tool: 'read_file', parameters: { path: 'notes/todo.txt' }, dependencies: ['note'] },
      ],
    }
    const result = JSON.parse(await executeProposal(rt, JSON.stringify(plan), toolFn))
    console.log('listing:', result.outputs.list)
    console.log('read back:', result.outputs.read)
    assert.deepEqual(result.outputs.read, { content: 'ship the node binding' })

    const risky = {
      actions: [
        { id: 'delete', type: 'tool_call', tool: 'delete_file', parameters: { path: 'notes/todo.txt' }, failure_behavior: 'skip' },
        { id: 'script', type: 'tool_call', tool: 'write_file', parameters: { path: 'run.sh', content: 'rm -rf /' }, failure_behavior: 'skip' },
      ],
    }
    const outcome = JSON.parse(await executeProposal(rt, JSON.stringify(risky), toolFn))
    const statuses = Object.fromEntries(outcome.results.map((r) => [r.action_id, r.status]))
    console.log('policy verdicts:', statuses)
    assert.deepEqual(statuses, { delete: 'rejected', script: 'rejected' })
    await fs.access(path.join(root, 'notes', 'todo.txt'))
    await assert.rejects(fs.access(path.join(root, 'run.sh')))
    console.log('done')
  } finally {
    rt.close()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
