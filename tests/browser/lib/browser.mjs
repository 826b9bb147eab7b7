// Debian's Chromium (never a downloaded browser build), headless, with a fresh user-data-dir
// per launch, through playwright-core.

import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

export const CHROMIUM_BIN = process.env.CHROMIUM_BIN || '/usr/bin/chromium';

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** Launches Chromium with `extraFlags`; resolves the browser context. */
export async function launch(dir, extraFlags = []) {
  const profile = await mkdtemp(join(dir, 'chromium-profile-'));
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_BIN,
    headless: true,
    chromiumSandbox: false,
    args: [...FLAGS, ...extraFlags],
    timeout: 60000,
  });
}

/**
 * Records what the network layer saw for `page` (Chrome DevTools Protocol `Network`
 * domain): the raw HTTP status of each response by URL — even one the page could not
 * read because CORS blocked it — and WebSocket handshake failures by URL. This is how a
 * test proves the *daemon* refused a request, not only that the browser hid the answer.
 */
export async function recordNetwork(context, page) {
  const cdp = await context.newCDPSession(page);
  const urls = new Map();
  const statuses = [];
  const webSockets = new Map();
  cdp.on('Network.requestWillBeSent', (e) => urls.set(e.requestId, e.request.url));
  cdp.on('Network.responseReceivedExtraInfo', (e) => statuses.push({ requestId: e.requestId, status: e.statusCode }));
  cdp.on('Network.webSocketCreated', (e) => webSockets.set(e.requestId, { url: e.url, errors: [], opened: false }));
  cdp.on('Network.webSocketHandshakeResponseReceived', (e) => {
    const ws = webSockets.get(e.requestId);
    if (ws) ws.opened = e.response.status === 101;
  });
  cdp.on('Network.webSocketFrameError', (e) => {
    const ws = webSockets.get(e.requestId);
    if (ws) ws.errors.push(e.errorMessage);
  });
  await cdp.send('Network.enable');
  return {
    /** Raw statuses of every response for `url` so far. */
    httpStatuses(url) {
      return statuses.filter((s) => urls.get(s.requestId) === url).map((s) => s.status);
    },
    /** Every WebSocket the page opened to `url`: `{opened, errors}`. */
    webSockets(url) {
      return Array.from(webSockets.values()).filter((ws) => ws.url === url);
    },
    detach() {
      return cdp.detach().catch(() => {});
    },
  };
}
