// A small ACP client on @agentclientprotocol/sdk 2.4.0 (its app API; the SDK
// ships no example since 2.0), for test/sdk24_test.go.
//
//   node client.mjs [--cwd DIR] [--prompt TEXT] [--choice allow|reject]
//        [--system-prompt TEXT | --system-prompt-chars N] [--add-dir DIR]
//        [--log FILE] [--timeout MS] -- AGENT_COMMAND...
//
// It starts AGENT_COMMAND (the router, or agent.mjs), runs initialize (with the
// notices, compaction and plan capabilities), session/new with a systemPrompt,
// and one session/prompt. It answers session/request_permission with
// --choice and fs/read_text_file with the file's content (inside the cwd
// only). Every request and response it sends carries W3C trace context in
// _meta. What it receives is validated by the SDK's own schema (the full v1
// schema of its /unstable entry point): a session/update the SDK rejects is
// counted, never silently lost.
//
// It prints one JSON line (the summary) and exits 0 when the turn ended and
// nothing was rejected, 1 otherwise.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { acp, sdkVersion, tapped, trace } from './peer.mjs';

const argv = process.argv.slice(2);
const dd = argv.indexOf('--');
if (dd < 0 || dd === argv.length - 1) {
  console.error('usage: client.mjs [options] -- AGENT_COMMAND...');
  process.exit(2);
}
const opts = argv.slice(0, dd), cmd = argv.slice(dd + 1);
const opt = (name, def) => { const i = opts.lastIndexOf(name); return i >= 0 ? opts[i + 1] : def; };
const cwd = path.resolve(opt('--cwd', process.cwd()));
const choice = opt('--choice', 'allow');
const systemPrompt = opts.includes('--system-prompt-chars')
  ? 's'.repeat(Number(opt('--system-prompt-chars')))
  : opt('--system-prompt', 'You are the sdk24 test agent. Answer briefly.');
const meta = (label) => trace('client', label);

const summary = { sdk: sdkVersion, errors: [], rejected: [], updates: [], texts: [], permissions: 0, reads: 0 };
// The SDK reports a notification that fails its schema on console.error
// ("Error handling notification") and drops it: catch that.
const consoleError = console.error;
console.error = (...args) => { summary.rejected.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ')); consoleError(...args); };

let rawUpdates = 0;
const child = spawn(cmd[0], cmd.slice(1), { cwd, stdio: ['pipe', 'pipe', 'inherit'] });
child.on('error', (e) => finish(`start ${cmd[0]}: ${e.message}`));
const stream = tapped(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)), opt('--log'), (m) => {
  if (m.method === 'session/update') rawUpdates++;
});

const app = acp.client({ name: 'sdk24-client' })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    summary.permissions++;
    if (!params.options.some((o) => o.optionId === choice)) throw acp.RequestError.invalidParams({ choice }, 'no such option');
    return { outcome: { outcome: 'selected', optionId: choice }, _meta: meta('permission-response') };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    summary.reads++;
    const rel = path.relative(cwd, params.path);
    if (!path.isAbsolute(params.path) || rel.startsWith('..')) throw acp.RequestError.invalidParams({ path: params.path }, 'outside the cwd');
    return { content: readFileSync(params.path, 'utf8'), _meta: meta('fs-read-response') };
  })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    const u = params.update;
    summary.updates.push(u.sessionUpdate);
    if (u.sessionUpdate === 'agent_message_chunk' && u.content.type === 'text') summary.texts.push(u.content.text);
  });

let done = false;
function finish(err) {
  if (done) return;
  done = true;
  if (err) summary.errors.push(String(err));
  if (rawUpdates !== summary.updates.length) {
    summary.errors.push(`${rawUpdates - summary.updates.length} of ${rawUpdates} session/update notifications rejected by the SDK's schema`);
  }
  process.stdout.write(JSON.stringify(summary) + '\n');
  const code = summary.errors.length || summary.rejected.length ? 1 : 0;
  try { child.stdin.end(); } catch {}
  setTimeout(() => { child.kill('SIGTERM'); process.exit(code); }, 200).unref();
  child.on('exit', () => process.exit(code));
}
setTimeout(() => finish(`timed out after ${opt('--timeout', '60000')} ms`), Number(opt('--timeout', '60000'))).unref();

try {
  const conn = app.connect(stream);
  const agent = conn.agent;
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: false }, terminal: false, session: { notices: {}, compaction: {} }, plan: {} },
    clientInfo: { name: 'sdk24-client', title: `ACP TypeScript SDK ${sdkVersion} test client`, version: sdkVersion },
    _meta: meta('initialize'),
  });
  summary.protocolVersion = init.protocolVersion;
  summary.sessionCapabilities = init.agentCapabilities?.sessionCapabilities ?? null;
  const newReq = {
    cwd, mcpServers: [], systemPrompt: { mode: 'append', content: [{ type: 'text', text: systemPrompt }] }, _meta: meta('session-new'),
  };
  if (opt('--add-dir')) newReq.additionalDirectories = [path.resolve(opt('--add-dir'))];
  const ns = await agent.request(acp.methods.agent.session.new, newReq);
  summary.sessionId = ns.sessionId;
  summary.newSessionMeta = ns._meta ?? null;
  const pr = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: ns.sessionId, prompt: [{ type: 'text', text: opt('--prompt', 'Hello') }], _meta: meta('prompt'),
  });
  summary.stopReason = pr.stopReason;
  summary.promptMeta = pr._meta ?? null;
  // Notification handlers run after their parse, asynchronously: let the
  // last ones finish before counting.
  await new Promise((r) => setTimeout(r, 100));
  finish(pr.stopReason === 'end_turn' ? null : `stopReason ${pr.stopReason}`);
} catch (e) {
  finish(e instanceof acp.RequestError ? `${e.code} ${e.message} ${JSON.stringify(e.data ?? null)}` : e.stack ?? e);
}
