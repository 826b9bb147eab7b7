'use strict'
// The Promises of `daemonCall` and the typed members, settled by the native completion
// function (src/calls.rs explains why: one threadsafe function per runtime instead of one
// per call).
//
// `start(native, begin)` makes the Promise, files its resolve/reject under a fresh id and
// calls `begin(id)`, which starts the native call; `settle(id, result, error)` is the
// completion function every runtime installs. The table is module-wide and holds only
// Promise callbacks, never a runtime, so a runtime that is no longer referenced can still
// be collected. While a call is pending a ref'd timer keeps the event loop alive (the
// native completion function is weak), as a pending socket read would.

const { fromErrorObject } = require('./errors.js')

const pending = new Map()
let nextId = 0
let keepAlive = null

function settle(id, result, error) {
  const waiter = pending.get(id)
  if (waiter === undefined) return
  pending.delete(id)
  if (pending.size === 0 && keepAlive !== null) {
    clearInterval(keepAlive)
    keepAlive = null
  }
  if (error !== null && error !== undefined) waiter.reject(fromErrorObject(error))
  else waiter.resolve(result === null ? undefined : result)
}

/** A Promise settled by the native call `begin(id)` starts. */
function start(begin) {
  // Ids wrap at 2^32 (the native side takes a u32); a wrapped id cannot still be pending.
  const id = (nextId = (nextId + 1) >>> 0)
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject })
    if (keepAlive === null) keepAlive = setInterval(() => {}, 0x7fffffff)
    try {
      begin(id)
    } catch (err) {
      settle(id, undefined, undefined)
      reject(err)
    }
  })
}

module.exports = { settle, start }
