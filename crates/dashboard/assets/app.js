// car-server dashboard: a read-only observer of the daemon, in plain browser JavaScript.
//
// Flow: the one-time login — the page is opened at the URL the daemon wrote to its
// dashboard-login file and logged (`/#login=<secret>`); it strips the secret from the
// address bar and exchanges it once at GET /auth-token (header X-Car-Login) for the
// daemon's read-only dashboard token and its WebSocket URL, kept in sessionStorage (this
// origin, this tab) so reloads and reconnects need no new login → WebSocket →
// session.auth {token} (skipped when auth is off) → server.handshake →
// host.subscribe. After that the page polls what has no push channel (server.status,
// runs.list, agents.list, models.list, events.query) every POLL_MS, and applies the
// pushes: host.event (agents, approvals, host events) and runs.trace.event (one
// runs.subscribe per running run). A run's trace records are kept by their `seq`, so a
// record seen both in runs.get_trace and as a live event is shown once, in order.
//
// Safety: every value from the daemon reaches the DOM as text (textContent, attributes via
// dataset); this file never parses markup. Elements carry stable ids and data attributes
// (data-run-id, data-tool-name, data-state, …) so tests can wait on them.
'use strict';

const PROTOCOL_VERSION = Number(
  document.querySelector('meta[name="car-protocol-version"]').content);
const POLL_MS = 2000;
const CALL_TIMEOUT_MS = 30000;
const MAX_RUNS = 50;
const MAX_HOST_EVENTS = 100;
const EVENT_LOG_LIMIT = 20;
const METHOD_NOT_FOUND = -32601;
const CREDENTIALS_KEY = 'car-dashboard-credentials';

// The login secret, taken from the URL fragment once, before anything else runs.
const loginSecret = (() => {
  const match = /^#login=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (location.hash.startsWith('#login=')) {
    history.replaceState(null, '', location.pathname + location.search);
  }
  return match ? match[1] : null;
})();

// ---- DOM helpers -------------------------------------------------------------------

/** Builds an element; `attrs.data` becomes data-* attributes, children are text or nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === 'data') {
      for (const [name, v] of Object.entries(value)) {
        if (v !== undefined && v !== null) node.dataset[name] = String(v);
      }
    } else if (key === 'class') {
      node.className = value;
    } else {
      node.setAttribute(key, String(value));
    }
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const byId = (id) => document.getElementById(id);

function pill(id, state, text) {
  const node = byId(id);
  node.dataset.state = state;
  node.textContent = text;
}

function json(value) {
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

function when(ms) {
  return typeof ms === 'number' ? new Date(ms).toLocaleTimeString() : String(ms ?? '');
}

/** Shows (or clears) one panel's error line. */
function panelError(panelId, error) {
  const panel = byId(panelId);
  let line = panel.querySelector(':scope > .panel-error');
  if (!error) {
    if (line) line.remove();
    delete panel.dataset.error;
    return;
  }
  if (!line) {
    line = el('p', { class: 'panel-error error' });
    panel.querySelector('h2').after(line);
  }
  panel.dataset.error = 'true';
  line.textContent = errorText(error);
}

function errorText(error) {
  return error && error.code !== undefined ? `${error.code} ${error.message}` : String(error);
}

function showError(error) {
  const node = byId('last-error');
  node.hidden = !error;
  node.textContent = error ? errorText(error) : '';
}

// ---- JSON-RPC over one WebSocket ---------------------------------------------------

class RpcError extends Error {
  constructor({ code, message, data }) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

class Rpc {
  constructor(url, onNotification, onClose) {
    this.nextId = 1;
    this.pending = new Map();
    this.ws = new WebSocket(url);
    this.opened = new Promise((resolve, reject) => {
      this.ws.onopen = resolve;
      this.rejectOpen = reject;
    });
    this.ws.onmessage = (event) => this.receive(event.data, onNotification);
    this.ws.onclose = (event) => {
      const error = new Error(`connection closed (${event.code}${event.reason ? ' ' + event.reason : ''})`);
      this.rejectOpen(error);
      for (const { reject, timer } of this.pending.values()) {
        clearTimeout(timer);
        reject(error);
      }
      this.pending.clear();
      onClose(event);
    };
  }

  call(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method} timed out`));
      }, CALL_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params: params || {} }));
    });
  }

  receive(text, onNotification) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (message.method !== undefined) {
      if (message.id !== undefined && message.id !== null) {
        // A reverse call: an observer serves none.
        this.ws.send(JSON.stringify({ jsonrpc: '2.0', id: message.id,
          error: { code: METHOD_NOT_FOUND, message: `method not found: ${message.method}` } }));
      } else {
        onNotification(message.method, message.params || {});
      }
      return;
    }
    const waiter = this.pending.get(message.id);
    if (!waiter) return;
    this.pending.delete(message.id);
    clearTimeout(waiter.timer);
    if (message.error) waiter.reject(new RpcError(message.error));
    else waiter.resolve(message.result);
  }

  close() {
    this.ws.close();
  }
}

// ---- state and rendering -----------------------------------------------------------

/** run_id → {run, records: Map(seq → record), node, synced} */
const runs = new Map();
const hostEventSeqs = new Set();
let rpc = null;
let generation = 0;
let statusAvailable = true;

/** The login was refused or is missing: the page needs a fresh login URL. */
class LoginError extends Error {}

/** The dashboard token and WebSocket URL: kept from an earlier exchange in this tab, or
 * obtained by exchanging the login secret (once; a refused secret is not retried). */
let pendingLogin = loginSecret;
async function credentials() {
  const kept = sessionStorage.getItem(CREDENTIALS_KEY);
  if (kept) return JSON.parse(kept);
  const headers = pendingLogin ? { 'X-Car-Login': pendingLogin } : {};
  pendingLogin = null;
  const response = await fetch('/auth-token', { cache: 'no-store', headers });
  if (response.status === 401) {
    const body = await response.json().catch(() => ({}));
    throw new LoginError(body.error || 'login required');
  }
  if (!response.ok) throw new Error(`GET /auth-token answered ${response.status}`);
  const config = await response.json();
  if (config.token !== null) sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify(config));
  return config;
}

async function tokenFingerprint(token) {
  if (!globalThis.crypto || !crypto.subtle) return null;
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(token));
  return Array.from(new Uint8Array(digest).slice(0, 8), (b) => b.toString(16).padStart(2, '0')).join('');
}

function renderStatus(status) {
  const panel = byId('status-panel');
  panel.dataset.state = 'available';
  const admission = status.admission || {};
  byId('admission').replaceChildren(
    ...[['version', status.car_version ?? status.version], ['uptime', `${Math.round((status.uptime_ms || 0) / 1000)} s`],
      ['running', admission.running], ['queued', admission.queued], ['capacity', admission.capacity]]
      .flatMap(([k, v]) => [el('dt', {}, k), el('dd', { data: { fact: k } }, v ?? '')]));
  byId('sessions').tBodies[0].replaceChildren(...(status.sessions || []).map((s) =>
    el('tr', { data: { sessionId: s.id, role: s.role } },
      el('td', {}, s.id), el('td', {}, s.transport), el('td', {}, s.role),
      el('td', {}, s.agent_id ?? ''), el('td', {}, s.client_version ?? ''),
      el('td', {}, when(s.connected_at_ms ?? s.connected_at)))));
}

function statusUnavailable() {
  statusAvailable = false;
  byId('status-panel').dataset.state = 'unavailable';
  byId('status-unavailable').hidden = false;
}

function renderHostAgents(agents) {
  byId('host-agents').replaceChildren(...agents.map((a) =>
    el('li', { data: { agentId: a.id, status: a.status } },
      el('strong', {}, a.name || a.id), ' ', el('span', { class: 'tag' }, a.kind),
      ' ', el('span', { class: `status status-${a.status}` }, a.status),
      a.current_task ? el('span', { class: 'muted' }, ` — ${a.current_task}`) : null)));
  if (agents.length === 0) byId('host-agents').append(el('li', { class: 'muted' }, 'none'));
}

function renderManagedAgents(agents) {
  byId('managed-agents').replaceChildren(...agents.map((a) => a.kind === 'declarative'
    ? el('li', { data: { agentId: a.id, status: a.enabled ? 'enabled' : 'disabled' } },
      el('strong', {}, a.name || a.id), ' ', el('span', { class: 'tag' }, 'declarative'),
      ' ', el('span', { class: 'status' }, a.enabled ? 'enabled' : 'disabled'))
    : el('li', { data: { agentId: a.spec.id, status: a.status, attached: a.attached } },
      el('strong', {}, a.spec.name || a.spec.id), ' ',
      el('span', { class: `status status-${a.status}` }, a.status),
      a.attached ? el('span', { class: 'tag' }, 'attached') : null,
      a.pid ? el('span', { class: 'muted' }, ` pid ${a.pid}`) : null,
      a.restart_count ? el('span', { class: 'muted' }, ` restarts ${a.restart_count}`) : null,
      a.reason ? el('span', { class: 'error' }, ` ${a.reason}`) : null)));
  if (agents.length === 0) byId('managed-agents').append(el('li', { class: 'muted' }, 'none'));
}

function renderApprovals(approvals) {
  const pending = approvals.filter((a) => a.status === 'pending');
  byId('approvals').replaceChildren(...pending.map((a) =>
    el('li', { data: { approvalId: a.id, status: a.status } },
      el('strong', {}, a.action), a.agent_id ? el('span', { class: 'tag' }, a.agent_id) : null,
      a.description ? el('div', {}, a.description) : null,
      el('div', { class: 'muted' }, `${a.created_at} · options: ${(a.options || []).join(', ')}`))));
  if (pending.length === 0) byId('approvals').append(el('li', { class: 'muted' }, 'none'));
}

function renderModels(models) {
  byId('models').replaceChildren(...models.map((m) => {
    const identity = m.identity || {};
    return el('li', { data: { modelId: m.id, loaded: Boolean(m.loaded), kind: m.kind } },
      el('strong', {}, m.id), ' ', el('span', { class: 'tag' }, m.kind),
      ' ', el('span', { class: m.loaded ? 'status status-running' : 'status' }, m.loaded ? 'loaded' : 'not loaded'),
      el('div', { class: 'muted mono' },
        identity.sha256 ? `sha256 ${identity.sha256.slice(0, 16)}… · ${identity.size} bytes` : 'remote'));
  }));
  if (models.length === 0) byId('models').append(el('li', { class: 'muted' }, 'none registered'));
}

function addHostEvent(event) {
  if (hostEventSeqs.has(event.seq)) return;
  hostEventSeqs.add(event.seq);
  const list = byId('host-events');
  const node = el('li', { data: { seq: event.seq, kind: event.kind } },
    el('span', { class: 'muted' }, `#${event.seq} ${event.timestamp} `), el('strong', {}, event.kind),
    event.agent_id ? el('span', { class: 'tag' }, event.agent_id) : null,
    event.message ? ` ${event.message}` : null);
  const after = Array.from(list.children).find((li) => Number(li.dataset.seq) < event.seq);
  list.insertBefore(node, after || null);
  while (list.children.length > MAX_HOST_EVENTS) list.lastElementChild.remove();
}

function renderEventLog(events) {
  byId('event-log').replaceChildren(...events.map((e) =>
    el('li', { data: { eventId: e.id, kind: e.kind } },
      el('span', { class: 'muted' }, `${e.timestamp} `), el('strong', {}, e.kind),
      e.session_id ? el('span', { class: 'tag' }, e.session_id) : null,
      e.data && e.data.tool ? el('span', { class: 'tag' }, e.data.tool) : null)));
  if (events.length === 0) byId('event-log').append(el('li', { class: 'muted' }, 'no events'));
}

// ---- runs and traces ---------------------------------------------------------------

/** The run record's status vocabulary for a live (runs.trace.event) status. */
function runStatus(live) {
  return live === 'in_progress' ? 'running' : live;
}

function runEntry(runId) {
  let entry = runs.get(runId);
  if (!entry) {
    const trace = el('ol', { class: 'trace' });
    const head = el('div', { class: 'run-head' });
    const node = el('article', { class: 'run', data: { runId } }, head, trace);
    entry = { run: { run_id: runId }, records: new Map(), node, head, trace, synced: false };
    runs.set(runId, entry);
  }
  return entry;
}

function renderRunHead(entry) {
  const run = entry.run;
  entry.node.dataset.status = run.status || 'unknown';
  entry.node.dataset.agentId = run.agent_id || '';
  entry.head.replaceChildren(
    el('strong', { class: 'mono' }, run.run_id), ' ',
    el('span', { class: `status status-${run.status}` }, run.status || '?'), ' ',
    el('span', { class: 'tag' }, run.agent_id || 'no agent'),
    run.intent ? el('div', {}, run.intent) : null,
    el('div', { class: 'muted' }, run.started_ms ? `started ${when(run.started_ms)}` : '',
      run.completed_ms ? ` · ended ${when(run.completed_ms)}` : ''));
}

function orderRuns() {
  const sorted = Array.from(runs.values())
    .sort((a, b) => (b.run.started_ms || 0) - (a.run.started_ms || 0));
  byId('runs').replaceChildren(...sorted.map((e) => e.node));
}

function toolCall(call) {
  return el('div', { class: 'tool-call', data: { kind: 'call', toolName: call.name, toolCallId: call.id } },
    el('span', { class: 'label' }, 'tool call '), el('strong', { class: 'tool-name' }, call.name),
    call.id ? el('span', { class: 'muted mono' }, ` ${call.id}`) : null,
    el('pre', { class: 'args' }, json(call.arguments ?? {})));
}

function toolResult(turn) {
  const failed = (turn.error !== undefined && turn.error !== null) || Boolean(turn.policy_rejected)
    || ['failed', 'rejected', 'error', 'skipped'].includes(turn.status);
  return el('div', { class: `tool-call ${failed ? 'failed' : ''}`,
    data: { kind: 'result', toolName: turn.tool, toolCallId: turn.tool_call_id, turnStatus: turn.status } },
    el('span', { class: 'label' }, 'tool '), el('strong', { class: 'tool-name' }, turn.tool),
    turn.status ? el('span', { class: 'tag' }, turn.status) : null,
    turn.policy_rejected ? el('span', { class: 'tag error' }, 'policy rejected') : null,
    turn.parameters !== undefined ? el('div', { class: 'field-label' }, 'arguments') : null,
    turn.parameters !== undefined ? el('pre', { class: 'args' }, json(turn.parameters)) : null,
    turn.output !== undefined && turn.output !== null ? el('div', { class: 'field-label' }, 'result') : null,
    turn.output !== undefined && turn.output !== null
      ? el('pre', { class: 'output', data: { field: 'output' } }, json(turn.output)) : null,
    turn.error !== undefined && turn.error !== null ? el('div', { class: 'field-label error' }, 'error') : null,
    turn.error !== undefined && turn.error !== null
      ? el('pre', { class: 'output error', data: { field: 'error' } }, json(turn.error)) : null);
}

function recordBody(r) {
  switch (r.record) {
    case 'started':
      return [el('span', { class: 'label' }, 'started '), r.intent || '',
        r.outcome_description ? el('div', { class: 'muted' }, `outcome: ${r.outcome_description}`) : null];
    case 'model_turn':
      return [el('span', { class: 'label' }, `model turn ${r.index ?? ''} `),
        r.model_id ? el('span', { class: 'tag' }, r.model_id) : null,
        r.duration_ms !== undefined && r.duration_ms !== null ? el('span', { class: 'muted' }, ` ${r.duration_ms} ms`) : null,
        r.assistant_text ? el('p', { class: 'assistant' }, r.assistant_text) : null,
        ...(Array.isArray(r.requested_tool_calls) ? r.requested_tool_calls.map(toolCall) : []),
        r.token_usage ? el('div', { class: 'muted mono' }, `tokens ${JSON.stringify(r.token_usage)}`) : null];
    case 'turn':
      return [el('span', { class: 'label' }, `turn ${r.index ?? ''} `),
        r.prompt ? el('p', { class: 'assistant' }, r.prompt) : null,
        r.tool ? toolResult(r) : el('pre', {}, json(r))];
    case 'cancellation_requested':
      return [el('span', { class: 'label' }, 'cancellation requested '), el('span', { class: 'mono' }, r.reason_digest || '')];
    case 'ended': {
      const outcome = r.outcome || {};
      return [el('span', { class: 'label' }, `ended: ${r.termination} `),
        outcome.status ? el('span', { class: 'tag' }, outcome.status) : null,
        outcome.summary ? ` ${outcome.summary}` : null, r.reason ? ` ${r.reason}` : null];
    }
    default:
      return [el('span', { class: 'label' }, `${r.record} `), el('pre', {}, json(r))];
  }
}

function addRecord(entry, record) {
  if (typeof record.seq !== 'number' || entry.records.has(record.seq)) return;
  entry.records.set(record.seq, record);
  const node = el('li', { class: `record record-${record.record}`, data: { seq: record.seq, record: record.record } },
    el('span', { class: 'muted mono' }, `${when(record.ts_ms)} `), ...recordBody(record));
  const after = Array.from(entry.trace.children).find((li) => Number(li.dataset.seq) > record.seq);
  entry.trace.insertBefore(node, after || null);
}

/** Brings one run's trace up to date: subscribe while it runs, then read the trace. */
async function syncRun(client, entry) {
  const runId = entry.run.run_id;
  if (entry.run.status === 'running') {
    const snapshot = await client.call('runs.subscribe', { run_id: runId });
    for (const turn of snapshot.turns_so_far || []) addRecord(entry, turn);
  }
  const trace = await client.call('runs.get_trace', { run_id: runId });
  if (trace.not_found) return;
  if (trace.run) entry.run = { ...entry.run, ...trace.run };
  for (const record of trace.records || []) addRecord(entry, record);
  renderRunHead(entry);
  entry.synced = true;
}

async function refreshRuns(client) {
  const listed = await client.call('runs.list', { limit: MAX_RUNS });
  const work = [];
  for (const run of listed.runs || []) {
    const entry = runEntry(run.run_id);
    entry.run = { ...entry.run, ...run };
    renderRunHead(entry);
    // Once synced, a run's subscription brings the rest (a finished run has no rest).
    if (!entry.synced) work.push(syncRun(client, entry));
  }
  orderRuns();
  byId('runs-panel').dataset.count = String(runs.size);
  await Promise.all(work);
}

function onTraceEvent(params) {
  const entry = runEntry(params.run_id);
  if (params.agent_id) entry.run.agent_id = params.agent_id;
  if (params.status) entry.run.status = runStatus(params.status);
  addRecord(entry, params.record || {});
  renderRunHead(entry);
  if (!entry.node.isConnected) orderRuns();
}

// ---- connection lifecycle ----------------------------------------------------------

async function refreshHostAgents(client) {
  renderHostAgents(await client.call('host.agents', {}));
}

async function refreshApprovals(client) {
  renderApprovals((await client.call('host.approvals', {})).approvals || []);
}

function onNotification(client, method, params) {
  if (method === 'runs.trace.event') {
    onTraceEvent(params);
  } else if (method === 'host.event') {
    addHostEvent(params);
    const refresh = params.kind.startsWith('agent.') ? refreshHostAgents
      : params.kind.startsWith('approval.') ? refreshApprovals : null;
    if (refresh) refresh(client).catch((e) => showError(e));
  }
}

/** One poll step: each panel refreshes on its own, so one failure shows only there. */
async function pollOnce(client) {
  const tasks = [
    ['runs-panel', () => refreshRuns(client)],
    ['agents-panel', async () => renderManagedAgents(await client.call('agents.list', {}))],
    ['models-panel', async () => renderModels(await client.call('models.list', {}))],
    ['events-panel', async () =>
      renderEventLog((await client.call('events.query', { limit: EVENT_LOG_LIMIT })).events || [])],
  ];
  if (statusAvailable) {
    tasks.push(['status-panel', async () => {
      try {
        renderStatus(await client.call('server.status', {}));
      } catch (e) {
        if (e.code === METHOD_NOT_FOUND) statusUnavailable();
        else throw e;
      }
    }]);
  }
  await Promise.all(tasks.map(([panel, task]) =>
    task().then(() => panelError(panel, null), (e) => panelError(panel, e))));
}

async function pollLoop(client, gen) {
  while (gen === generation) {
    await pollOnce(client);
    if (gen === generation) document.body.dataset.synced = 'true';
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

let reconnectDelay = 1000;

function scheduleReconnect() {
  const delay = reconnectDelay;
  reconnectDelay = Math.min(reconnectDelay * 2, 10000);
  setTimeout(connect, delay);
}

async function connect() {
  const gen = ++generation;
  pill('connection', 'connecting', 'connecting');
  pill('auth-state', 'pending', 'not authenticated');
  let client;
  try {
    const config = await credentials();
    client = new Rpc(config.ws_url, (m, p) => onNotification(client, m, p), (event) => {
      if (gen !== generation) return;
      generation++;
      pill('connection', 'closed', `disconnected (${event.code})`);
      for (const entry of runs.values()) entry.synced = false;
      scheduleReconnect();
    });
    rpc = client;
    await client.opened;
    pill('connection', 'open', 'connected');
    if (config.token === null) {
      pill('auth-state', 'auth-off', 'auth off');
    } else {
      const auth = await client.call('session.auth', { token: config.token });
      pill('auth-state', 'authenticated', `authenticated${auth.role ? ' as ' + auth.role : ''}`);
      const node = byId('auth-state');
      node.dataset.role = auth.role || '';
      const fingerprint = await tokenFingerprint(config.token);
      if (fingerprint) node.dataset.tokenFingerprint = fingerprint;
    }
    const hello = await client.call('server.handshake',
      { protocol_version: PROTOCOL_VERSION, client_version: 'car-dashboard' });
    byId('server-version').textContent = `v${hello.server_version} · protocol ${hello.protocol_version}`;
    const snapshot = await client.call('host.subscribe', {});
    renderHostAgents(snapshot.agents || []);
    renderApprovals(snapshot.approvals || []);
    const recent = await client.call('host.events', { limit: MAX_HOST_EVENTS });
    for (const event of [...(snapshot.events || []), ...(recent.events || [])]) addHostEvent(event);
    pill('connection', 'ready', 'live');
    showError(null);
    reconnectDelay = 1000;
    await pollLoop(client, gen);
  } catch (error) {
    if (gen !== generation) return;
    showError(error);
    if (error instanceof LoginError) {
      // Nothing to retry: only a fresh login URL helps.
      pill('connection', 'closed', 'not connected');
      pill('auth-state', 'login-required', 'login required');
    } else if (error instanceof RpcError && rpc === client) {
      if (byId('auth-state').dataset.state === 'pending') {
        pill('auth-state', 'failed', 'auth failed');
        // A kept token the daemon no longer accepts (it restarted): forget it.
        sessionStorage.removeItem(CREDENTIALS_KEY);
      }
      client.close();
    } else {
      generation++;
      pill('connection', 'closed', 'disconnected');
      scheduleReconnect();
    }
  }
}

connect();
