// An ACP client on @agentclientprotocol/sdk 2.4.0's remote transports
// (experimental/ws-client and experimental/http-client), for the tests of
// remote/ and `acp-router serve` (issue 30).
//
//   node remote.mjs --profile ws|http|stdio --url URL [--cwd DIR] [--timeout MS]
//        [--bench N] [--updates N]
//
// The token, when needed, is ACP_ROUTER_TOKEN: sent as a bearer header over
// HTTP, and over WebSocket as ?token= (Node's WebSocket takes no headers).
//
// Without --bench it runs: initialize, session/new, a prompt, a prompt the
// agent answers with session/request_permission (answered allow_once), a
// prompt cancelled with session/cancel, then on a second connection
// initialize and session/load of the same session. It prints one JSON line
// (the summary) and exits 0 when every step did what it should.
//
// With --bench N it runs N prompts ("hello") and one prompt asking for
// --updates updates ("flood N"), timing each, and prints the timings.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { Readable, Writable } from 'node:stream';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { acp, prefix, sdkVersion } from './peer.mjs';

const require = createRequire(path.join(prefix, 'package.json'));
const load = (p) => import(pathToFileURL(require.resolve(p)).href);
const { createHttpStream } = await load('@agentclientprotocol/sdk/experimental/http-client');
const { createWebSocketStream } = await load('@agentclientprotocol/sdk/experimental/ws-client');

const argv = process.argv.slice(2);
const opt = (name, def) => { const i = argv.lastIndexOf(name); return i >= 0 ? argv[i + 1] : def; };
const profile = opt('--profile', 'ws');
const url = opt('--url');
const cwd = path.resolve(opt('--cwd', process.cwd()));
const token = process.env.ACP_ROUTER_TOKEN || '';
// --agent fake: remote/'s test agent; router: the router with test/'s
// scripted fake agent behind it. The prompts and what each must produce.
const script = opt('--agent', 'fake') === 'router'
  ? { hello: 'say hello', helloText: 'hello', ask: 'permission', askText: (t) => t.startsWith('permission:') && t.includes('allow'),
      wait: 'say waiting\nsleep 30s', history: (h) => h.includes('hello'), flood: (n) => `updates ${n} 200` }
  : { hello: 'hello', helloText: 'echo: hello', ask: 'ask', askText: (t) => t === 'permission: allow',
      wait: 'wait', history: (h, sid) => h[0] === `history of ${sid}`, flood: (n) => `flood ${n}` };

const summary = { sdk: sdkVersion, profile, errors: [], steps: {} };
let done = false;
function finish(err) {
  if (done) return;
  done = true;
  if (err) summary.errors.push(String(err));
  process.stdout.write(JSON.stringify(summary) + '\n');
  process.exit(summary.errors.length ? 1 : 0);
}
setTimeout(() => finish(`timed out after ${opt('--timeout', '60000')} ms`), Number(opt('--timeout', '60000'))).unref();

// Node 22 has WebSocket; Node 20 with --experimental-websocket. Its
// constructor takes (url, protocols): the SDK passes headers as a third
// argument, which it ignores, so the token goes in the URL.
function stream() {
  if (profile === 'stdio') {
    // The same client over stdio, for comparison: --url is then the
    // command line of the router, space-separated.
    const [cmd, ...args] = url.split(' ');
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
    process.on('exit', () => child.kill());
    return acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  }
  if (profile === 'http') {
    return createHttpStream(url, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  }
  const u = new URL(url.replace(/^http/, 'ws'));
  if (token) u.searchParams.set('token', token);
  return createWebSocketStream(u.toString());
}

// connect opens one connection; onUpdate sees every session/update.
function connect(onUpdate) {
  const app = acp.client({ name: 'sdk24-remote' })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      summary.permissions = (summary.permissions ?? 0) + 1;
      const allow = params.options.find((o) => o.kind === 'allow_once');
      return { outcome: { outcome: 'selected', optionId: allow.optionId } };
    })
    .onNotification(acp.methods.client.session.update, ({ params }) => onUpdate(params));
  return app.connect(stream());
}

const init = (agent) => agent.request(acp.methods.agent.initialize, {
  protocolVersion: acp.PROTOCOL_VERSION,
  clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  clientInfo: { name: 'sdk24-remote', version: sdkVersion },
});

const texts = [];
let onChunk = () => {};
const onUpdate = (p) => {
  const u = p.update;
  if (u.content?.type === 'text') { texts.push(u.content.text); onChunk(u, p.sessionId); }
};
const prompt = (agent, sessionId, text) => agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text }] });

try {
  const conn = connect(onUpdate);
  const agent = conn.agent;
  const t0 = performance.now();
  const ini = await init(agent);
  summary.steps.initialize = { protocolVersion: ini.protocolVersion, ms: performance.now() - t0 };
  const ns = await agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
  summary.steps.new = { sessionId: ns.sessionId };
  if (opt('--bench')) {
    const n = Number(opt('--bench'));
    await prompt(agent, ns.sessionId, script.hello); // warm up
    const rt = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await prompt(agent, ns.sessionId, script.hello);
      rt.push(performance.now() - t);
    }
    rt.sort((a, b) => a - b);
    const updates = Number(opt('--updates', '10000'));
    let got = 0;
    onChunk = () => { got++; };
    const t = performance.now();
    await prompt(agent, ns.sessionId, script.flood(updates));
    const ms = performance.now() - t;
    summary.bench = { prompts: n, p50ms: rt[Math.floor(n / 2)], p90ms: rt[Math.floor(n * 0.9)], updates, received: got, updatesPerSec: Math.round(updates / (ms / 1000)) };
    conn.close();
    finish(got === updates ? null : `received ${got} of ${updates} chunks`);
  }
  const p1 = await prompt(agent, ns.sessionId, script.hello);
  summary.steps.prompt = { stopReason: p1.stopReason, text: texts.at(-1) };
  if (p1.stopReason !== 'end_turn' || texts.at(-1) !== script.helloText) throw new Error('prompt: ' + JSON.stringify(summary.steps.prompt));
  const p2 = await prompt(agent, ns.sessionId, script.ask);
  summary.steps.permission = { stopReason: p2.stopReason, text: texts.at(-1), asked: summary.permissions };
  if (p2.stopReason !== 'end_turn' || !script.askText(texts.at(-1)) || summary.permissions !== 1) throw new Error('permission: ' + JSON.stringify(summary.steps.permission));
  // Cancel once the agent has started the turn.
  const started = new Promise((r) => { onChunk = (u) => { if (u.content.text === 'waiting') r(); }; });
  const p3 = prompt(agent, ns.sessionId, script.wait);
  await started;
  await agent.notify(acp.methods.agent.session.cancel, { sessionId: ns.sessionId });
  summary.steps.cancel = { stopReason: (await p3).stopReason };
  if (summary.steps.cancel.stopReason !== 'cancelled') throw new Error('cancel: ' + JSON.stringify(summary.steps.cancel));
  conn.close();
  await conn.closed.catch(() => {});

  // A second connection picks the session up.
  const history = [];
  const conn2 = connect((p) => { if (p.update.content?.type === 'text') history.push(p.update.content.text); });
  await init(conn2.agent);
  await conn2.agent.request(acp.methods.agent.session.load, { sessionId: ns.sessionId, cwd, mcpServers: [] });
  // The replay comes on the session's stream, the response on the
  // connection's (HTTP): let the stream catch up.
  for (let i = 0; i < 50 && !script.history(history, ns.sessionId); i++) await new Promise((r) => setTimeout(r, 20));
  summary.steps.load = { history };
  if (!script.history(history, ns.sessionId)) throw new Error('load: ' + JSON.stringify(summary.steps.load));
  conn2.close();
  await conn2.closed.catch(() => {});
  finish(null);
} catch (e) {
  finish(e instanceof acp.RequestError ? `${e.code} ${e.message} ${JSON.stringify(e.data ?? null)}` : e.stack ?? e);
}
