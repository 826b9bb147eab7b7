'use strict'
// The key under which `CarRuntime` exposes its typed-member path to `generated.js`.
//
// Every generated typed member is `async name(...args) { return this[CALL_MEMBER](method,
// member, args) }`: the runtime hands the call to the native addon, where
// `car_daemon_client::typed` checks the arguments against the contract, builds the params,
// calls (over the host-management connection for host methods) and projects the result, the
// same code the Python and UniFFI members run. Nothing per-method is written by hand.

const CALL_MEMBER = Symbol('car-runtime.callMember')

module.exports = { CALL_MEMBER }
