// DNS rebinding: a page of evil.example whose name has been made to resolve to 127.0.0.1
// reaches the daemon with `Host: evil.example…` and an Origin that matches it. The daemon's
// WebSocket upgrade and every dashboard request must refuse such a Host with 403.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launch } from '../lib/browser.mjs';
import { startDaemon } from '../lib/daemon.mjs';
import { httpGet } from '../lib/http.mjs';
import { tryUpgrade } from '../lib/rpc.mjs';

test('a rebound host name is refused by the WebSocket and the dashboard', async (t) => {
  const { dir, daemon, closers } = await startDaemon(t, 'rebinding');
  const P = daemon.port;
  const { token } = await daemon.dashboardConfig();

  // The WebSocket upgrade, Host and Origin both evil.example.
  for (const host of ['evil.example', `evil.example:${P}`]) {
    const outcome = await tryUpgrade(daemon.wsUrl, { headers: { Host: host }, origin: `http://evil.example:${P}` });
    assert.deepEqual(outcome, { opened: false, status: 403 }, `Host ${host}`);
  }
  // A rebound Host without any Origin (a page's no-cors request is not an upgrade, but a
  // native client behind a rebound name is no better).
  assert.deepEqual(await tryUpgrade(daemon.wsUrl, { headers: { Host: `evil.example:${P}` } }),
    { opened: false, status: 403 });

  // The dashboard, Host and Origin both evil.example.
  const rebound = `evil.example:${daemon.dashboardPort}`;
  for (const path of ['/auth-token', '/', '/app.js']) {
    const reply = await httpGet(`${daemon.dashboardUrl}${path}`, { Host: rebound, Origin: `http://${rebound}` });
    assert.equal(reply.status, 403, path);
    assert.ok(!reply.body.includes(token), path);
    assert.match(JSON.parse(reply.body).error, /evil\.example/);
  }
  // Controls: loopback names pass.
  assert.equal((await httpGet(`${daemon.dashboardUrl}/auth-token`,
    { Host: `localhost:${daemon.dashboardPort}`, 'X-Car-Login': await daemon.loginSecret() })).status, 200);
  assert.deepEqual(await tryUpgrade(daemon.wsUrl, { headers: { Host: `localhost:${P}` } }), { opened: true });

  // The same attack in a browser: evil.example resolves to 127.0.0.1, so the attacker's
  // page would be served from the dashboard's port under the attacker's name, same-origin
  // with /auth-token. It gets a 403, and so does its same-origin token request. (The
  // browser-side WebSocket from evil.example is in hijack.test.mjs.)
  const context = await launch(dir, ['--host-resolver-rules=MAP evil.example 127.0.0.1']);
  closers.push(() => context.close());
  const page = await context.newPage();
  const response = await page.goto(`http://${rebound}/`);
  assert.equal(response.status(), 403);
  assert.equal(await page.locator('#runs').count(), 0, 'the dashboard page is not served');
  const token403 = await page.evaluate(async (url) => {
    const r = await fetch(url);
    return { status: r.status, body: await r.text() };
  }, `http://${rebound}/auth-token`);
  assert.equal(token403.status, 403);
  assert.ok(!token403.body.includes(token));
});
