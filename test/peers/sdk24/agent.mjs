// A small ACP agent on @agentclientprotocol/sdk 2.4.0 (its app API; the SDK
// ships no example since 2.0), for test/sdk24_test.go. No model: each prompt
// runs a fixed turn in the shapes of ACP schema 1.26+ (see
// /work/shared/notes/acp-currency.md):
//
//   agent_message_chunk, notice, compaction_update (in_progress, then
//   completed with a summary), compaction_summary_chunk, plan_update with a
//   planId, tool_call with a name (read) + fs/read_text_file + its
//   tool_call_update, tool_call (edit) + session/request_permission + its
//   tool_call_update, plan_update again, a closing agent_message_chunk naming
//   what it received, stopReason end_turn.
//
// Every message it sends carries W3C trace context in _meta (traceparent,
// tracestate, baggage; on session/update both params._meta and update._meta).
// It advertises the new session capabilities (systemPrompt with override,
// title, additionalDirectories, close). A prompt containing MALFORMED sends a
// plan_update without its planId instead (the client's SDK must reject it).
//
// Environment: ACP_SDK24_LOG, a JSONL file of every message each way
// (peer.mjs); ACP_SDK24_DIR, the SDK install (default .peers/sdk24).
import { createHash } from 'node:crypto';
import path from 'node:path';
import { acp, sdkVersion, stdioStream, trace } from './peer.mjs';

const meta = (label) => trace('agent', label);
const sessions = new Map();
let nextSession = 0;

function describePrompt(sp) {
  if (!sp) return null;
  const text = sp.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
  return { mode: sp.mode, chars: text.length, sha256: createHash('sha256').update(text).digest('hex') };
}

async function update(client, sessionId, label, u) {
  await client.notify(acp.methods.client.session.update, {
    sessionId,
    update: { ...u, _meta: meta(label + '/update') },
    _meta: meta(label),
  });
}

const pause = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

async function turn({ params, client, signal }) {
  const s = sessions.get(params.sessionId);
  if (!s) throw acp.RequestError.sessionNotFound(params.sessionId);
  const text = params.prompt.map((b) => (b.type === 'text' ? b.text : '')).join(' ');
  const sid = params.sessionId;
  const cancelled = () => signal.aborted || s.cancelled;
  s.cancelled = false;
  if (text.includes('MALFORMED')) {
    // planId is required in every plan_update content (schema PlanItems).
    await update(client, sid, 'malformed-plan', {
      sessionUpdate: 'plan_update', plan: { type: 'items', entries: [{ content: 'x', priority: 'low', status: 'pending' }] },
    });
    return { stopReason: 'end_turn', _meta: meta('prompt-response') };
  }
  await update(client, sid, 'chunk-1', { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'sdk24 agent: starting.' } });
  await update(client, sid, 'notice', { sessionUpdate: 'notice', severity: 'info', title: 'sdk24 notice', description: 'a live notice' });
  await update(client, sid, 'compaction-start', { sessionUpdate: 'compaction_update', compactionId: 'cmp-1', status: 'in_progress' });
  await update(client, sid, 'compaction-chunk', { sessionUpdate: 'compaction_summary_chunk', compactionId: 'cmp-1', content: { type: 'text', text: 'summary so far' } });
  await update(client, sid, 'compaction-done', {
    sessionUpdate: 'compaction_update', compactionId: 'cmp-1', status: 'completed', summary: [{ type: 'text', text: 'the history, compacted' }],
  });
  const entries = (done) => [
    { content: 'read the input', priority: 'high', status: done ? 'completed' : 'in_progress' },
    { content: 'edit the config', priority: 'medium', status: done ? 'completed' : 'pending' },
  ];
  await update(client, sid, 'plan-1', { sessionUpdate: 'plan_update', plan: { type: 'items', planId: 'plan-1', entries: entries(false) } });
  if (cancelled()) return { stopReason: 'cancelled' };

  const input = path.join(s.cwd, 'input.txt');
  await update(client, sid, 'tool-read', {
    sessionUpdate: 'tool_call', toolCallId: 'call-1', title: 'Read input.txt', name: 'read_file', kind: 'read', status: 'pending',
    locations: [{ path: input }], rawInput: { path: input },
  });
  // A client that cannot read the file (no input.txt in its cwd: the Go
  // SDK's example client) gets a failed tool call, and the turn goes on.
  let read, readStatus = 'completed';
  try {
    read = await client.request(acp.methods.client.fs.readTextFile, { sessionId: sid, path: input, _meta: meta('fs-read') }, { signal });
  } catch (e) {
    read = { content: `error: ${e.message}` };
    readStatus = 'failed';
  }
  await update(client, sid, 'tool-read-done', {
    sessionUpdate: 'tool_call_update', toolCallId: 'call-1', name: 'read_file', status: readStatus,
    content: [{ type: 'content', content: { type: 'text', text: read.content } }],
  });

  await pause(Number(process.env.ACP_SDK24_PAUSE_MS || 0), signal);
  if (cancelled()) return { stopReason: 'cancelled' };
  const toolCall = {
    toolCallId: 'call-2', title: 'Edit config.json', name: 'write_file', kind: 'edit', status: 'pending',
    locations: [{ path: path.join(s.cwd, 'config.json') }], rawInput: { path: path.join(s.cwd, 'config.json'), content: '{}' },
  };
  await update(client, sid, 'tool-edit', { sessionUpdate: 'tool_call', ...toolCall });
  const perm = await client.request(acp.methods.client.session.requestPermission, {
    sessionId: sid, toolCall: { toolCallId: 'call-2', title: toolCall.title, name: toolCall.name, kind: 'edit' },
    options: [{ optionId: 'allow', name: 'Allow', kind: 'allow_once' }, { optionId: 'reject', name: 'Reject', kind: 'reject_once' }],
    _meta: meta('permission'),
  }, { signal });
  const choice = perm.outcome.outcome === 'selected' ? perm.outcome.optionId : perm.outcome.outcome;
  if (choice === 'cancelled' || cancelled()) return { stopReason: 'cancelled' };
  await update(client, sid, 'tool-edit-done', { sessionUpdate: 'tool_call_update', toolCallId: 'call-2', name: 'write_file', status: choice === 'allow' ? 'completed' : 'failed' });
  await update(client, sid, 'plan-2', { sessionUpdate: 'plan_update', plan: { type: 'items', planId: 'plan-1', entries: entries(true) } });
  const summary = { read: read.content, permission: choice, systemPrompt: s.systemPrompt, additionalDirectories: s.additionalDirectories };
  await update(client, sid, 'chunk-2', { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'sdk24 agent: ' + JSON.stringify(summary) } });
  return { stopReason: 'end_turn', _meta: meta('prompt-response') };
}

const app = acp.agent({ name: 'sdk24-agent' })
  .onRequest(acp.methods.agent.initialize, ({ params }) => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: {
      loadSession: false,
      promptCapabilities: { image: false, audio: false, embeddedContext: true },
      mcpCapabilities: { http: false, sse: false },
      sessionCapabilities: { systemPrompt: { mode: { override: {} } }, title: {}, additionalDirectories: {}, close: {} },
    },
    authMethods: [],
    agentInfo: { name: 'sdk24-agent', title: `ACP TypeScript SDK ${sdkVersion} test agent`, version: sdkVersion },
    _meta: { ...meta('initialize-response'), sdk24: { clientCapabilities: params.clientCapabilities ?? null } },
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `sdk24-${++nextSession}`;
    const s = {
      cwd: params.cwd, systemPrompt: describePrompt(params.systemPrompt), additionalDirectories: params.additionalDirectories ?? [],
      cancelled: false,
    };
    sessions.set(sessionId, s);
    return { sessionId, _meta: { ...meta('session-new-response'), sdk24: { systemPrompt: s.systemPrompt } } };
  })
  .onRequest(acp.methods.agent.session.setTitle, () => ({}))
  .onRequest(acp.methods.agent.session.close, ({ params }) => { sessions.delete(params.sessionId); return {}; })
  .onRequest(acp.methods.agent.session.prompt, turn)
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (s) s.cancelled = true;
  });

const conn = app.connect(stdioStream(process.env.ACP_SDK24_LOG));
await conn.closed;
