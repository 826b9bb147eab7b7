// A real car-server for one test: a temp CAR_HOME and XDG_RUNTIME_DIR, a WebSocket port P
// picked so that P and P + 1 (the dashboard) are both free, and the daemon's own token read
// from the token file it writes (CAR_HOME/ai.parslee.car/auth-token, docs/daemon.md).
//
// Readiness is a condition, never a sleep: the --ready-file exists, the token file exists,
// the dashboard login file exists (CAR_HOME/ai.parslee.car/dashboard-login, the one-time
// login URL) and the dashboard answers GET /auth-token (401 without the login secret).

import { spawn } from 'node:child_process';
import { mkdtemp, mkdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { httpGet } from './http.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const CAR_SERVER_BIN = process.env.CAR_SERVER_BIN
  || resolve(here, '../../../target/debug/car-server');

/** Waits for `check()` to return a truthy value (or resolve to one), polling. */
export async function waitFor(what, check, { timeoutMs = 60000, everyMs = 50 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${lastError ? `: ${lastError.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function canListen(port) {
  return new Promise((resolveListen) => {
    const server = createServer();
    server.once('error', () => resolveListen(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolveListen(true)));
  });
}

/** A port P (from the OS) such that P and P + 1 are both free on 127.0.0.1. */
export async function freePortPair() {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = await new Promise((resolvePort, reject) => {
      const server = createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const { port: p } = server.address();
        server.close(() => resolvePort(p));
      });
    });
    if (port < 65535 && (await canListen(port + 1))) return port;
  }
  throw new Error('no free port pair found');
}

/** A fresh temp directory for one test. */
export async function tempDir(prefix) {
  return mkdtemp(join(tmpdir(), `car-browser-${prefix}-`));
}

export class Daemon {
  /** Starts car-server and waits until its WebSocket and dashboard are both up. */
  static async start(dir, extraArgs = []) {
    let lastError;
    // The port pair can be taken between picking and binding; try another pair then.
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePortPair();
      const daemon = new Daemon(dir, port, attempt);
      try {
        await daemon.launch(extraArgs);
        return daemon;
      } catch (error) {
        lastError = error;
        await daemon.stop();
      }
    }
    throw lastError;
  }

  constructor(dir, port, attempt) {
    this.dir = join(dir, `daemon-${attempt}`);
    this.port = port;
    this.dashboardPort = port + 1;
    this.carHome = join(this.dir, 'home');
    this.runtimeDir = join(this.dir, 'xdg');
    this.readyFile = join(this.dir, 'ready.json');
    this.stderr = '';
    this.exited = null;
  }

  get wsUrl() { return `ws://127.0.0.1:${this.port}`; }
  get dashboardUrl() { return `http://127.0.0.1:${this.dashboardPort}`; }

  async launch(extraArgs) {
    await mkdir(this.carHome, { recursive: true });
    await mkdir(this.runtimeDir, { recursive: true, mode: 0o700 });
    const args = ['--port', String(this.port), '--dashboard-port', String(this.dashboardPort),
      '--ready-file', this.readyFile, ...extraArgs];
    this.child = spawn(CAR_SERVER_BIN, args, {
      env: { ...process.env, CAR_HOME: this.carHome, XDG_RUNTIME_DIR: this.runtimeDir,
        CAR_LOG: process.env.CAR_LOG || 'info' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-20000);
    });
    this.exitedPromise = new Promise((resolveExit) => {
      this.child.once('exit', (code, signal) => {
        this.exited = { code, signal };
        resolveExit(this.exited);
      });
      this.child.once('error', (error) => {
        this.exited = { error };
        resolveExit(this.exited);
      });
    });
    const alive = () => {
      if (this.exited) {
        throw new Error(`car-server exited ${JSON.stringify(this.exited)}: ${this.stderr}`);
      }
    };
    await waitFor('the ready file', async () => {
      alive();
      return JSON.parse(await readFile(this.readyFile, 'utf8'));
    });
    this.token = await waitFor('the token file', async () => {
      alive();
      return (await readFile(join(this.carHome, 'ai.parslee.car', 'auth-token'), 'utf8')).trim();
    });
    await waitFor('the dashboard login file', async () => {
      alive();
      return this.loginUrl();
    });
    await waitFor('the dashboard', async () => {
      alive();
      const reply = await httpGet(`${this.dashboardUrl}/auth-token`);
      return reply.status === 401;
    });
  }

  /** The dashboard's current one-time login URL, as the daemon wrote it. */
  async loginUrl() {
    return (await readFile(join(this.carHome, 'ai.parslee.car', 'dashboard-login'), 'utf8')).trim();
  }

  /** The current login secret (the login URL's fragment). */
  async loginSecret() {
    return (await this.loginUrl()).split('#login=')[1];
  }

  /** What GET /auth-token serves a native client that exchanges the current login secret
   * (which spends it: the file then holds the next one). */
  async dashboardConfig() {
    const reply = await httpGet(`${this.dashboardUrl}/auth-token`,
      { 'X-Car-Login': await this.loginSecret() });
    if (reply.status !== 200) throw new Error(`GET /auth-token answered ${reply.status}`);
    return JSON.parse(reply.body);
  }

  async stop() {
    if (!this.child || this.exited) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 15000);
    await this.exitedPromise;
    clearTimeout(timer);
  }
}

/** Removes a test's temp directory unless CAR_BROWSER_KEEP is set (then it says where). */
export async function cleanup(dir) {
  if (process.env.CAR_BROWSER_KEEP) {
    process.stderr.write(`kept ${dir}\n`);
    return;
  }
  await rm(dir, { recursive: true, force: true });
}

/**
 * A daemon started in a fresh temp dir for test `t`, with `closers` (run in reverse order)
 * then the daemon's stop and the dir's removal registered on `t.after`.
 */
export async function startDaemon(t, name) {
  const dir = await tempDir(name);
  const daemon = await Daemon.start(dir);
  const closers = [];
  t.after(async () => {
    for (const close of closers.reverse()) await close();
    await daemon.stop();
    await cleanup(dir);
  });
  return { dir, daemon, closers };
}
