'use strict'
// `HostClient`: the host-authority view of a `CarRuntime` (CAR's class). Its members are
// the contract's `host` methods, generated into `generated.js`; this file is only the
// bridge to the runtime's native client.

const { installGeneratedHost } = require('../generated.js')
const { describe } = require('./callbacks.js')
const { CALL_MEMBER } = require('./typed.js')

/** The `HostClient` class over `CarRuntime` (passed in: index.js defines it). */
function hostClientOf(CarRuntime) {
  /**
   * Host-authority daemon client; host methods stay off CarRuntime autocomplete (CAR's
   * rule). It shares `runtime`'s native client (connections, handlers, reconnects); the
   * `host` methods' generated members go over that client's host-management connection,
   * which authenticates with the `host-token` file, read only when a host method is called.
   */
  class HostClient {
    #runtime

    /** @param {CarRuntime} runtime */
    constructor(runtime) {
      if (!(runtime instanceof CarRuntime)) throw new TypeError(`runtime must be a CarRuntime, got ${describe(runtime)}`)
      this.#runtime = runtime
    }

    /** The runtime whose client this one uses. */
    get runtime() {
      return this.#runtime
    }

    /** Calls a host-management method (`host` or `owner` role) with the host token. */
    async daemonCallHostManagement(method, paramsJson = '{}') {
      return this.#runtime.daemonCallHostManagement(method, paramsJson)
    }

    /** What the generated typed members call (see `CarRuntime`). */
    async [CALL_MEMBER](method, member, args) {
      return this.#runtime[CALL_MEMBER](method, member, args)
    }
  }

  installGeneratedHost(HostClient.prototype)
  return HostClient
}

module.exports = { hostClientOf }
