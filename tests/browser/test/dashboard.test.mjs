// The dashboard page against a real daemon: a run the test records (a model turn with a
// tool call, then the tool's result and a failed call, then the outcome) appears on the
// page, live, with the page logged in through the one-time login URL the daemon wrote and
// authenticated by the read-only token GET /auth-token served for it; that token really is
// read-only; and a page opened without the login URL gets no token.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';

import { launch } from '../lib/browser.mjs';
import { startDaemon } from '../lib/daemon.mjs';
import { httpGet } from '../lib/http.mjs';
import { RpcClient, RpcError } from '../lib/rpc.mjs';

const WAIT = { timeout: 60000 };

/** The protocol version the dashboard's page speaks (its <meta> tag). */
async function protocolVersion(daemon) {
  const page = await httpGet(`${daemon.dashboardUrl}/`);
  assert.equal(page.status, 200);
  const match = page.body.match(/<meta name="car-protocol-version" content="(\d+)">/);
  assert.ok(match, 'the page names its protocol version');
  return Number(match[1]);
}

/** A started daemon, a temp dir and cleanup registered on `t`. */
async function setUp(t, name) {
  const { dir, daemon, closers } = await startDaemon(t, name);
  const version = await protocolVersion(daemon);
  const client = await RpcClient.connect(daemon.wsUrl);
  closers.push(() => client.close());
  await client.authenticate(daemon.token, version);
  return { dir, daemon, client, version, closers };
}

test('the dashboard shows a run with its tool calls and results, live', async (t) => {
  const { dir, daemon, client, closers } = await setUp(t, 'dashboard');
  const config = await daemon.dashboardConfig();
  assert.equal(config.ws_url, daemon.wsUrl);
  assert.equal(typeof config.token, 'string');
  assert.notEqual(config.token, daemon.token, 'the dashboard token is not the daemon token');

  const run = await client.call('runs.start', { agent_name: 'dash-test', intent: 'check the weather' });
  const hostile = '<img src=x onerror="document.body.dataset.pwned=1">';
  const turn = await client.call('runs.record_model_turn', {
    run_id: run.run_id,
    model_id: 'test-model',
    assistant_text: `Looking it up. ${hostile}`,
    requested_tool_calls: [{ id: 'call-1', name: 'lookup_weather', arguments: { city: 'Oslo' } }],
    token_usage: { input_tokens: 12, output_tokens: 7 },
    duration_ms: 42,
  });
  assert.equal(turn.ok, true);

  const context = await launch(dir);
  closers.push(() => context.close());
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy|Refused to/i.test(message.text())) {
      problems.push(`CSP: ${message.text()}`);
    }
  });
  // The login URL the daemon wrote (dashboardConfig above spent the first one).
  const loginUrl = await daemon.loginUrl();
  assert.match(loginUrl, new RegExp(`^${daemon.dashboardUrl}/#login=[A-Za-z0-9_-]{43}$`));
  await page.goto(loginUrl);

  const runNode = `article[data-run-id="${run.run_id}"]`;
  const call = page.locator(`${runNode} .tool-call[data-kind="call"][data-tool-name="lookup_weather"]`);
  await call.waitFor(WAIT);
  assert.equal(await call.getAttribute('data-tool-call-id'), 'call-1');
  assert.match(await call.locator('pre.args').textContent(), /"city": "Oslo"/);
  assert.equal(await page.locator(runNode).getAttribute('data-agent-id'), 'name:dash-test');

  // Text from the daemon is text: the markup is shown, never parsed.
  const assistant = page.locator(`${runNode} li[data-record="model_turn"] .assistant`);
  assert.equal(await assistant.textContent(), `Looking it up. ${hostile}`);
  assert.equal(await page.locator(`${runNode} img`).count(), 0);

  // Recorded after the page synced the run: only runs.trace.event can bring these.
  await client.call('runs.record_turns', {
    run_id: run.run_id,
    turns: [
      { tool: 'lookup_weather', parameters: { city: 'Oslo' }, output: { temp_c: 3 }, status: 'succeeded' },
      { tool: 'lookup_weather', parameters: { city: 'Atlantis' }, error: 'no such city', status: 'failed' },
    ],
  });
  const results = page.locator(`${runNode} .tool-call[data-kind="result"][data-tool-name="lookup_weather"]`);
  await results.nth(1).waitFor(WAIT);
  assert.match(await results.nth(0).locator('[data-field="output"]').textContent(), /"temp_c": 3/);
  assert.equal(await results.nth(1).locator('[data-field="error"]').textContent(), 'no such city');
  assert.equal(await results.nth(1).getAttribute('data-turn-status'), 'failed');

  await client.call('runs.complete', { run_id: run.run_id, outcome: { status: 'success', summary: 'cold' } });
  await page.locator(`${runNode}[data-status="completed"] li[data-record="ended"]`).waitFor(WAIT);
  const kinds = await page.locator(`${runNode} ol.trace > li`).evaluateAll(
    (items) => items.map((li) => li.dataset.record));
  assert.deepEqual(kinds, ['started', 'model_turn', 'turn', 'turn', 'ended']);

  // The page's own session: authenticated with the token /auth-token served, as an observer.
  const auth = page.locator('#auth-state');
  await page.locator('#auth-state[data-state="authenticated"]').waitFor(WAIT);
  const fingerprint = createHash('sha256').update(config.token).digest('hex').slice(0, 16);
  assert.equal(await auth.getAttribute('data-token-fingerprint'), fingerprint);
  assert.equal(await auth.getAttribute('data-role'), 'observer');
  await page.locator('#connection[data-state="ready"]').waitFor(WAIT);
  // server.status lists the page's observer session beside the test's own.
  await page.locator('#sessions tr[data-role="observer"]').waitFor(WAIT);
  await page.locator('body[data-synced="true"]').waitFor(WAIT);

  const shot = join(dir, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  assert.ok((await stat(shot)).size > 0, 'the screenshot is not empty');
  const png = await readFile(shot);
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

  assert.equal(await page.evaluate(() => document.body.dataset.pwned), undefined);

  // The secret left the address bar, was spent, and a reload of this tab needs no new one.
  assert.equal(page.url(), `${daemon.dashboardUrl}/`);
  assert.notEqual(await daemon.loginUrl(), loginUrl, 'the daemon minted the next login');
  await page.reload();
  await page.locator('#auth-state[data-state="authenticated"]').waitFor(WAIT);

  // A fresh tab on the bare page, and one on the spent login URL: no token, no session.
  for (const url of [`${daemon.dashboardUrl}/`, loginUrl]) {
    const fresh = await context.newPage();
    await fresh.goto(url);
    await fresh.locator('#auth-state[data-state="login-required"]').waitFor(WAIT);
    assert.match(await fresh.locator('#last-error').textContent(), /login/);
    const stored = await fresh.evaluate(() => sessionStorage.length);
    assert.equal(stored, 0, `${url}: nothing stored`);
    await fresh.close();
  }
  assert.deepEqual(problems, []);
});

test('the dashboard token is a read-only observer of every run', async (t) => {
  const { daemon, client, version, closers } = await setUp(t, 'observer');
  const run = await client.call('runs.start', { agent_name: 'dash-test', intent: 'observed' });
  await client.call('runs.record_model_turn', {
    run_id: run.run_id, model_id: 'test-model', assistant_text: 'hi', requested_tool_calls: [],
  });

  const { token } = await daemon.dashboardConfig();
  const observer = await RpcClient.connect(daemon.wsUrl);
  closers.push(() => observer.close());
  const auth = await observer.authenticate(token, version);
  assert.equal(auth.role, 'observer');

  const listed = await observer.call('runs.list', {});
  assert.ok(listed.runs.some((r) => r.run_id === run.run_id), JSON.stringify(listed));
  const trace = await observer.call('runs.get_trace', { run_id: run.run_id });
  assert.deepEqual(trace.records.map((r) => r.record), ['started', 'model_turn']);
  await observer.call('host.subscribe', {});

  const mutations = [
    ['runs.start', { agent_name: 'intruder', intent: 'x' }],
    ['runs.record_model_turn', { run_id: run.run_id, assistant_text: 'forged' }],
    ['runs.complete', { run_id: run.run_id, outcome: 'failure' }],
    ['state.set', { key: 'k', value: 1 }],
    ['host.register_agent', { name: 'intruder', kind: 'cli' }],
    ['memory.add_fact', { subject: 's', body: 'b', kind: 'note' }],
  ];
  for (const [method, params] of mutations) {
    await assert.rejects(observer.call(method, params), RpcError, `${method} must be refused`);
  }
  // Nothing the observer tried landed.
  const after = await observer.call('runs.get_trace', { run_id: run.run_id });
  assert.deepEqual(after.records.map((r) => r.record), ['started', 'model_turn']);
});
