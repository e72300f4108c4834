// Shared by agent.mjs and client.mjs: loads @agentclientprotocol/sdk 2.4.0
// (its /unstable entry point, the full v1 schema: plan_update with planId,
// systemPrompt, ...) from the install scripts/test.sh makes, wires stdio as an
// NDJSON stream, and logs every message each way to a JSONL file.
import { appendFileSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

// ACP_SDK24_DIR is the npm prefix holding node_modules/@agentclientprotocol/sdk
// (default: .peers/sdk24 in the repository). The package's own exports map
// resolves the entry point.
export const prefix = process.env.ACP_SDK24_DIR || path.resolve(here, '../../../.peers/sdk24');
const require = createRequire(path.join(prefix, 'package.json'));
export const acp = await import(pathToFileURL(require.resolve('@agentclientprotocol/sdk/unstable')).href);
export const sdkVersion = JSON.parse(readFileSync(path.join(prefix, 'node_modules/@agentclientprotocol/sdk/package.json'), 'utf8')).version;

// trace returns W3C trace context for one message: the same trace id for
// the whole run, a span id of its own, and the label in tracestate and
// baggage, so that the test can match what one side sent with what the other
// received.
const traceId = 'a5f0c0de' + '0'.repeat(16) + String(process.pid).padStart(8, '0').slice(-8);
let span = 0;
export function trace(side, label) {
  span++;
  return {
    traceparent: `00-${traceId}-${side === 'agent' ? 'a' : 'c'}${span.toString(16).padStart(15, '0')}-01`,
    tracestate: `sdk24=${side}:${label},vendor=x`,
    baggage: `peer=${side},label=${encodeURIComponent(label)}`,
  };
}

// big keeps the log readable: strings over 4 KiB are logged as their length.
const big = (_k, v) => (typeof v === 'string' && v.length > 4096 ? `<${v.length} chars>` : v);

// stdioStream is the NDJSON stream on this process's stdin and stdout.
// Every message is appended to logFile (when set) as {"dir":"recv"|"send",
// "msg":...}: what was received is logged before the SDK validates it.
export function stdioStream(logFile, onRecv) {
  return tapped(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)), logFile, onRecv);
}

export function tapped(stream, logFile, onRecv) {
  const log = (dir, msg) => { if (logFile) appendFileSync(logFile, JSON.stringify({ dir, msg }, big) + '\n'); };
  const recv = new TransformStream({ transform(msg, c) { log('recv', msg); onRecv?.(msg); c.enqueue(msg); } });
  const send = new TransformStream({ transform(msg, c) { log('send', msg); c.enqueue(msg); } });
  send.readable.pipeTo(stream.writable).catch(() => {});
  return { readable: stream.readable.pipeThrough(recv), writable: send.writable };
}
