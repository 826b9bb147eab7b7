// Cross-site WebSocket hijacking: a page of another origin — a genuinely foreign host
// (evil.example, mapped to 127.0.0.1 inside Chromium) and another loopback port — must not
// open the daemon's WebSocket nor read the dashboard token. Proven three ways: what the
// page itself sees, what Chromium's network layer saw the daemon answer (403 before any
// JSON-RPC), and the same upgrade from Node with an explicit Origin.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';

import { launch, recordNetwork } from '../lib/browser.mjs';
import { startDaemon } from '../lib/daemon.mjs';
import { httpGet } from '../lib/http.mjs';
import { tryUpgrade } from '../lib/rpc.mjs';

const WAIT = { timeout: 60000 };

/** The attacker's page: tries the WebSocket and the token, records what happened. */
function attackerPage(wsUrl, tokenUrl) {
  return `<!doctype html><meta charset="utf-8"><title>attacker</title>
<script>
(async () => {
  const ws = await new Promise((resolve) => {
    const events = [];
    const socket = new WebSocket(${JSON.stringify(wsUrl)});
    socket.onopen = () => { events.push('open'); socket.send('{"jsonrpc":"2.0","id":1,"method":"runs.list"}'); };
    socket.onmessage = (m) => events.push('message ' + m.data);
    socket.onerror = () => events.push('error');
    socket.onclose = (e) => { events.push('close ' + e.code); resolve(events); };
  });
  let token;
  try {
    const response = await fetch(${JSON.stringify(tokenUrl)});
    token = { status: response.status, body: await response.text() };
  } catch (error) {
    token = { rejected: String(error) };
  }
  window.__result = { ws, token };
})();
</script>`;
}

async function attackerServer(html) {
  const server = createServer((req, res) => {
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(html);
  });
  await new Promise((resolveListen) => server.listen(0, '127.0.0.1', resolveListen));
  return server;
}

test('a foreign page cannot open the WebSocket or read the dashboard token', async (t) => {
  const { dir, daemon, closers } = await startDaemon(t, 'hijack');
  const { token } = await daemon.dashboardConfig();
  const wsUrl = `${daemon.wsUrl}/`;
  const tokenUrl = `${daemon.dashboardUrl}/auth-token`;
  const server = await attackerServer(attackerPage(wsUrl, tokenUrl));
  closers.push(() => new Promise((r) => server.close(r)));
  const port2 = server.address().port;

  const context = await launch(dir, ['--host-resolver-rules=MAP evil.example 127.0.0.1']);
  closers.push(() => context.close());

  for (const origin of [`http://evil.example:${port2}`, `http://127.0.0.1:${port2}`]) {
    const page = await context.newPage();
    const network = await recordNetwork(context, page);
    await page.goto(`${origin}/`);
    await page.waitForFunction(() => window.__result, null, WAIT);
    const result = await page.evaluate(() => window.__result);

    // What the page saw: no open socket, no message, no token.
    assert.ok(!result.ws.includes('open'), `${origin}: ${JSON.stringify(result.ws)}`);
    assert.ok(!result.ws.some((e) => e.startsWith('message')), `${origin}: ${JSON.stringify(result.ws)}`);
    assert.ok(result.token.rejected !== undefined || result.token.status !== 200,
      `${origin}: ${JSON.stringify(result.token)}`);
    assert.ok(!JSON.stringify(result).includes(token), `${origin}: the token leaked`);

    // What the daemon answered, as Chromium's network layer received it.
    const sockets = network.webSockets(wsUrl);
    assert.equal(sockets.length, 1, `${origin}: ${JSON.stringify(sockets)}`);
    assert.equal(sockets[0].opened, false);
    assert.ok(sockets[0].errors.some((e) => /\b403\b/.test(e)), `${origin}: ${JSON.stringify(sockets)}`);
    assert.deepEqual(network.httpStatuses(tokenUrl), [403], `${origin}: GET /auth-token`);
    await network.detach();
    await page.close();

    // The same requests from Node, with the Origin the page had.
    assert.deepEqual(await tryUpgrade(daemon.wsUrl, { origin }), { opened: false, status: 403 }, origin);
    const reply = await httpGet(tokenUrl, { Origin: origin, 'Sec-Fetch-Site': 'cross-site' });
    assert.equal(reply.status, 403, origin);
    assert.ok(!reply.body.includes(token));
    assert.equal(typeof JSON.parse(reply.body).error, 'string');
  }

  // Controls: the refusals are about the Origin, not every upgrade.
  assert.deepEqual(await tryUpgrade(daemon.wsUrl, {}), { opened: true }, 'no Origin: a native client');
  assert.deepEqual(await tryUpgrade(daemon.wsUrl, { origin: daemon.dashboardUrl }), { opened: true },
    "the dashboard's own origin");
  assert.deepEqual(await tryUpgrade(daemon.wsUrl, { origin: `http://localhost:${daemon.dashboardPort}` }),
    { opened: true }, "the dashboard's own origin by name");
  for (const origin of ['null', `http://127.0.0.1:${daemon.port}`, `http://127.0.0.1:${daemon.dashboardPort}/x`]) {
    assert.deepEqual(await tryUpgrade(daemon.wsUrl, { origin }), { opened: false, status: 403 }, origin);
  }
});

// The dashboard is plain http on 127.0.0.1 only, so an https origin, or another loopback
// address at the same port number (a page some other local process serves), is not it.
test('only the exact dashboard origin opens the WebSocket', async (t) => {
  const { daemon } = await startDaemon(t, 'exact-origin');
  const D = daemon.dashboardPort;
  for (const origin of [`https://127.0.0.1:${D}`, `http://127.0.0.2:${D}`, `http://[::1]:${D}`]) {
    assert.deepEqual(await tryUpgrade(daemon.wsUrl, { origin }), { opened: false, status: 403 }, origin);
    const reply = await httpGet(`${daemon.dashboardUrl}/auth-token`, { Origin: origin });
    assert.equal(reply.status, 403, `GET /auth-token, Origin ${origin}`);
  }
});
