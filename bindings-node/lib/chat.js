'use strict'
// The agent side of `agents.chat`: one process-wide chat handler the native addon serves
// `agent.chat` reverse calls with (the turn itself runs in the shared Rust client).

const native = require('../native.js')
const { wrapChatHandler } = require('./callbacks.js')

/**
 * Serves the daemon's `agent.chat` reverse calls (the agent side of `agents.chat`) with
 * `handlerFn`, for every `CarRuntime` of the process; replaces any earlier one. A runtime
 * bound to an agent identity (`CAR_AGENT_ID` and `CAR_AGENT_TOKEN` in the environment
 * when it is created) gets one `agent.chat` per host `agents.chat`: the client acks
 * `{accepted: true}`, then calls `handlerFn(paramsJson)` with `{session_id, prompt,
 * stream?, model?, attachments?, goal?, context?}`. Stream the reply with
 * `rt.chatEvent(sessionId, 'token', delta)` on the runtime serving the turn (the client
 * routes the turn's own events into it); the turn lasts until `handlerFn` returns (or the
 * Promise it returns settles), then ends with exactly one terminal event: the first `done`
 * / `error` it emitted (whatever it did after), else `error` when it threw or rejected,
 * else `done` with an empty `text` (the reply is the streamed tokens).
 */
function registerChatHandler(handlerFn) {
  native.setChatHandler(wrapChatHandler(handlerFn))
}

/** Removes the chat handler: later `agent.chat` calls are refused (`-32601`). */
function unregisterChatHandler() {
  native.clearChatHandler()
}

module.exports = { registerChatHandler, unregisterChatHandler }
