// The test's own JSON-RPC client: one `ws` WebSocket, numbered requests, errors as
// RpcError {code, message, data}, notifications collected for tests that want them.

import WebSocket from 'ws';

export class RpcError extends Error {
  constructor({ code, message, data }) {
    super(`${code} ${message}`);
    this.code = code;
    this.data = data;
  }
}

export class RpcClient {
  /** Opens `url` (with ws options such as `headers` / `origin`) and resolves once open. */
  static async connect(url, options = {}) {
    const ws = new WebSocket(url, { handshakeTimeout: 30000, ...options });
    await new Promise((resolveOpen, reject) => {
      ws.once('open', resolveOpen);
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) =>
        reject(new Error(`upgrade answered ${res.statusCode}`)));
    });
    return new RpcClient(ws);
  }

  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.notifications = [];
    ws.on('message', (data) => {
      const message = JSON.parse(data.toString());
      if (message.method !== undefined) {
        if (message.id === undefined) this.notifications.push(message);
        return;
      }
      const waiter = this.pending.get(message.id);
      if (!waiter) return;
      this.pending.delete(message.id);
      if (message.error) waiter.reject(new RpcError(message.error));
      else waiter.resolve(message.result);
    });
    ws.on('close', () => {
      for (const waiter of this.pending.values()) waiter.reject(new Error('connection closed'));
      this.pending.clear();
    });
  }

  call(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolveCall, reject) => {
      this.pending.set(id, { resolve: resolveCall, reject });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  /** session.auth {token} then server.handshake at `protocolVersion`. */
  async authenticate(token, protocolVersion) {
    const auth = await this.call('session.auth', { token });
    await this.call('server.handshake', { protocol_version: protocolVersion, client_version: 'dashboard-browser-test' });
    return auth;
  }

  close() {
    this.ws.close();
  }
}

/**
 * Attempts a WebSocket upgrade and reports how it ended without speaking JSON-RPC:
 * `{opened: true}` or `{opened: false, status}` (the HTTP status of a refused upgrade).
 */
export function tryUpgrade(url, options = {}) {
  return new Promise((resolveTry) => {
    const ws = new WebSocket(url, { handshakeTimeout: 30000, ...options });
    ws.once('open', () => {
      ws.close();
      resolveTry({ opened: true });
    });
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      resolveTry({ opened: false, status: res.statusCode });
      ws.terminate();
    });
    ws.once('error', (error) => resolveTry({ opened: false, error: error.message }));
  });
}
