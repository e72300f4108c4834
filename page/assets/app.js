// The acp-router page (package page's doc says the design). Everything an
// agent sends is text: nodes are built with createElement and
// createTextNode only; nothing here assigns innerHTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
  const WINDOW = 200;        // entries of a session kept in the DOM
  const MD_LIMIT = 64 << 10; // longer messages are plain text
  const CHUNK_MS = 16;       // streamed text at most once a frame (the hub coalesces the rest)

  // text appends s to parent as text, bidi controls replaced by a visible
  // escape (they would reorder what follows them on the page).
  function text(parent, s) {
    s = String(s == null ? '' : s);
    let last = 0;
    s.replace(BIDI, (c, i) => {
      if (i > last) parent.appendChild(document.createTextNode(s.slice(last, i)));
      const e = el('span', 'ctl');
      e.appendChild(document.createTextNode('\u27E6U+' + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0') + '\u27E7'));
      parent.appendChild(e);
      last = i + c.length;
      return c;
    });
    if (last < s.length) parent.appendChild(document.createTextNode(s.slice(last)));
    return parent;
  }
  function el(tag, cls, s) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (s != null) text(e, s);
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

  // inline: `code`, **bold**, *italic*; the rest text.
  function inline(parent, s) {
    const re = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*/g;
    let last = 0, m;
    while ((m = re.exec(s)) !== null) {
      if (m.index > last) text(parent, s.slice(last, m.index));
      if (m[1] != null) parent.appendChild(el('code', null, m[1]));
      else if (m[2] != null) parent.appendChild(el('strong', null, m[2]));
      else parent.appendChild(el('em', null, m[3]));
      last = re.lastIndex;
    }
    if (last < s.length) text(parent, s.slice(last));
  }

  // markdown renders the subset the doc names into parent, as nodes.
  function markdown(parent, src) {
    if (src.length > MD_LIMIT) { parent.appendChild(el('pre', 'txt', src)); return; }
    const lines = src.split('\n');
    let para = null, list = null;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (/^```/.test(line)) {
        const code = [];
        for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
        parent.appendChild(el('pre', null, code.join('\n')));
        para = list = null;
        continue;
      }
      let m;
      if ((m = /^(#{1,4})\s+(.*)$/.exec(line))) {
        const h = el('h' + (m[1].length + 2)); inline(h, m[2]); parent.appendChild(h);
        para = list = null;
      } else if ((m = /^\s*(?:[-*]|\d+\.)\s+(.*)$/.exec(line))) {
        if (!list) { list = el(/^\s*\d/.test(line) ? 'ol' : 'ul'); parent.appendChild(list); }
        const li = el('li'); inline(li, m[1]); list.appendChild(li);
        para = null;
      } else if (line.trim() === '') {
        para = list = null;
      } else {
        if (!para) { para = el('p'); parent.appendChild(para); } else para.appendChild(document.createTextNode('\n'));
        inline(para, line);
        list = null;
      }
    }
  }

  // ---- the ACP connection ----
  let ws = null, nextID = 1, backoff = 500;
  const calls = new Map();
  function send(obj) { if (ws && ws.readyState === 1) ws.send(JSON.stringify(obj)); }
  function call(method, params) {
    const id = nextID++;
    return new Promise((resolve, reject) => {
      calls.set(id, { resolve, reject });
      send({ jsonrpc: '2.0', id, method, params });
    });
  }
  function status(s) { clear($('conn')); text($('conn'), s); }

  function connect() {
    status('connecting…');
    ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/acp');
    ws.onmessage = (ev) => { let m; try { m = JSON.parse(ev.data); } catch (e) { return; } receive(m); };
    ws.onclose = (ev) => {
      for (const c of calls.values()) c.reject(new Error('connection closed'));
      calls.clear();
      status('disconnected' + (ev.reason ? ': ' + ev.reason : '') + '; reconnecting');
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 10000);
    };
    ws.onopen = async () => {
      try {
        await call('initialize', { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          clientInfo: { name: 'acp-router-page', version: '1' } });
        backoff = 500;
        status('connected');
        await listSessions();
        // After a reconnect: the open session again, from its full
        // history (the log is rebuilt, so nothing shows twice).
        if (cur) open(cur.id, cur.role);
      } catch (e) { status('error: ' + e.message); }
    };
  }

  function receive(m) {
    if (m.id != null && m.method == null) {
      const c = calls.get(m.id);
      if (!c) return;
      calls.delete(m.id);
      if (m.error) c.reject(new Error(m.error.message || 'error')); else c.resolve(m.result);
      return;
    }
    if (m.method === '_acp-router/sessions_changed') return liveChanged((m.params || {}).sessions || []);
    if (m.method === 'session/update') return update(m.params || {});
    if (m.method === 'session/request_permission' && m.id != null) return ask(m.id, m.params || {});
    if (m.method === '$/cancel_request') return withdraw((m.params || {}).requestId);
    if (m.id != null) send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'the page does not offer ' + m.method } });
  }

  // ---- sessions ----
  const sessions = new Map(); // id -> {info, state}
  let cur = null; // {id, role, entries, tools, start, asks, mode, dirty}

  // The list is pushed, not polled: at connect (and reconnect) the page
  // asks the hub to watch (_acp-router/watch: the live sessions now, then
  // _acp-router/sessions_changed at each change) and reads the stored
  // sessions once (session/list: titles, working directories, and the
  // sessions the router does not run, which show as such: attach would
  // fail). A live session the stored list does not know yet (just
  // started) has it read again, once.
  let stored = new Map(); // id -> session/list entry
  let live = [];          // the hub's entries
  async function listSessions() {
    let res = null, w = null;
    try { w = await call('_acp-router/watch', { sessions: true, chunkIntervalMs: CHUNK_MS }); } catch (e) { w = null; }
    try { res = await call('session/list', {}); } catch (e) { res = null; }
    stored = new Map();
    for (const s of (res && res.sessions) || []) stored.set(s.sessionId, s);
    if (w) live = w.sessions || [];
    mergeList();
  }
  let relisting = null;
  function liveChanged(entries) {
    live = entries;
    mergeList();
    if (!relisting && entries.some((l) => !stored.has(l.sessionId))) {
      relisting = call('session/list', {}).then((res) => {
        for (const s of (res && res.sessions) || []) stored.set(s.sessionId, s);
        mergeList();
      }).catch(() => {}).finally(() => { relisting = null; });
    }
  }
  function mergeList() {
    const next = new Map();
    for (const l of live) {
      const old = sessions.get(l.sessionId);
      next.set(l.sessionId, { info: stored.get(l.sessionId) || (old && old.info) || { sessionId: l.sessionId }, state: l.state,
        agent: l.agentTitle || l.agent || '' });
    }
    for (const [id, s] of stored) if (!next.has(id)) next.set(id, { info: s, state: 'stored', agent: '' });
    sessions.clear();
    for (const [id, s] of next) sessions.set(id, s);
    renderList();
  }

  let listShown = '';
  function renderList() {
    // Rebuilt only when something shown changed, so that a poll does not
    // take the keyboard focus away from a button.
    const sig = JSON.stringify([cur && cur.id, [...sessions].map(([id, s]) => [id, s.state, s.agent, s.info.title, s.info.cwd])]);
    if (sig === listShown) return;
    listShown = sig;
    const ul = $('session-list');
    clear(ul);
    $('no-sessions').hidden = sessions.size > 0;
    for (const [id, s] of sessions) {
      const li = el('li');
      const b = el('button');
      b.type = 'button';
      b.dataset.session = id;
      if (cur && cur.id === id) b.setAttribute('aria-current', 'true');
      const st = el('span', 'state ' + s.state, s.state === 'waiting' ? 'waiting for you' : s.state === 'stored' ? 'not running' : s.state);
      b.appendChild(st);
      b.appendChild(document.createTextNode(' '));
      b.appendChild(el('span', 'title', s.info.title || id));
      if (s.agent) { b.appendChild(document.createTextNode(' ')); b.appendChild(el('span', 'agent', s.agent)); }
      b.appendChild(el('div', 'cwd', s.info.cwd || ''));
      b.addEventListener('click', () => open(id, 'observer'));
      li.appendChild(b);
      ul.appendChild(li);
    }
  }

  function setState(id, state) {
    const s = sessions.get(id);
    if (s && s.state !== state) { s.state = state; renderList(); }
  }

  async function open(id, role) {
    if (cur && cur.id !== id) { call('session/detach', { sessionId: cur.id }).catch(() => {}); }
    cur = { id, role, entries: [], tools: new Map(), start: 0, asks: new Map(), dirty: new Set(), attached: false };
    clear($('log')); clear($('asks')); clear($('plan')); $('plan').hidden = true;
    $('session').hidden = false;
    const info = (sessions.get(id) || {}).info || {};
    clear($('s-title')); text($('s-title'), info.title || id);
    clear($('s-cwd')); text($('s-cwd'), info.cwd || '');
    clear($('s-role')); text($('s-role'), role);
    $('take').hidden = role === 'controller';
    renderList();
    try {
      const res = await call('session/attach', { sessionId: id, role, historyPolicy: 'full' });
      if (cur && cur.id === id) {
        cur.attached = true;
        clear($('s-role')); text($('s-role'), (res && res.role) || role);
      }
    } catch (e) {
      if (cur && cur.id === id) push({ type: 'note', text: 'cannot attach: ' + e.message });
    }
  }

  $('take').addEventListener('click', async () => {
    if (!cur) return;
    const id = cur.id;
    try { await call('session/detach', { sessionId: id }); } catch (e) { /* not attached: attach anyway */ }
    cur = null;
    open(id, 'controller');
  });

  // ---- one session's log, windowed ----
  function push(entry) {
    entry.i = cur.entries.length;
    cur.entries.push(entry);
    cur.dirty.add(entry);
    schedule();
    return entry;
  }
  let frame = 0;
  function schedule() { if (!frame) frame = requestAnimationFrame(flush); }
  function flush() {
    frame = 0;
    if (!cur) return;
    const log = $('log');
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    // While the reader follows the end, at most WINDOW entries are in the
    // DOM: the earlier ones leave it (and are never built when a long
    // history arrives at once); "Show earlier" brings them back.
    const n = cur.entries.length;
    const lo = atBottom ? Math.max(cur.start, n - WINDOW) : cur.start;
    for (let i = cur.start; i < lo; i++) {
      const e = cur.entries[i];
      if (e.node && e.node.parentNode) e.node.parentNode.removeChild(e.node);
    }
    cur.start = lo;
    for (const e of cur.dirty) {
      if (e.i < cur.start) { e.node = null; e.plain = null; continue; }
      if (e.node && e.plain) {
        // A long message grows by its new text only, not re-rendered.
        text(e.plain, e.text.slice(e.shown));
        e.shown = e.text.length;
        continue;
      }
      const fresh = !e.node;
      e.node = e.node || el('li');
      clear(e.node);
      renderEntry(e, e.node);
      if (fresh) log.appendChild(e.node);
    }
    cur.dirty.clear();
    $('earlier').hidden = cur.start === 0;
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }
  $('earlier').addEventListener('click', () => {
    if (!cur) return;
    const log = $('log');
    const from = Math.max(0, cur.start - WINDOW);
    const first = log.firstChild;
    for (let i = from; i < cur.start; i++) {
      const e = cur.entries[i];
      if (!e.node) { e.node = el('li'); renderEntry(e, e.node); }
      log.insertBefore(e.node, first);
    }
    cur.start = from;
    $('earlier').hidden = cur.start === 0;
  });

  function renderEntry(e, li) {
    li.className = e.type;
    switch (e.type) {
      case 'agent': case 'user': case 'thought': {
        if (e.text.length > MD_LIMIT) {
          e.plain = el('pre', 'txt', e.text);
          e.shown = e.text.length;
          li.appendChild(e.plain);
          break;
        }
        const box = el('div', 'md');
        if (e.type === 'agent') markdown(box, e.text); else text(box, e.text);
        li.appendChild(box);
        break;
      }
      case 'tool': renderTool(e.data, li); break;
      default: li.appendChild(el('div', 'txt', e.text));
    }
  }

  function contentText(c) {
    if (!c) return '';
    if (c.type === 'text') return c.text || '';
    if (c.type === 'resource_link') return '[' + (c.name || c.uri || 'link') + ']';
    if (c.type === 'resource') return '[' + ((c.resource && c.resource.uri) || 'resource') + ']';
    return '[' + (c.type || 'content') + ']';
  }

  function renderTool(t, li) {
    li.classList.add('tool');
    const head = el('div', 'head');
    head.appendChild(el('span', 'kind', t.kind || 'other'));
    head.appendChild(el('span', 'txt', t.title || t.toolCallId || ''));
    head.appendChild(el('span', 'state', t.status || 'pending'));
    li.appendChild(head);
    const raw = t.rawInput || {};
    const cmd = Array.isArray(raw.command) ? raw.command.join(' ') : raw.command;
    if (cmd) li.appendChild(el('pre', 'cmd', '$ ' + cmd));
    for (const c of t.content || []) {
      if (c.type === 'diff') {
        li.appendChild(el('div', 'cwd', c.path || ''));
        const pre = el('pre', 'diff');
        const oldL = (c.oldText || '').split('\n'), newL = (c.newText || '').split('\n');
        const oldS = new Set(oldL), newS = new Set(newL);
        for (const l of oldL) if (!newS.has(l) && c.oldText) pre.appendChild(el('div', 'del', '- ' + l));
        for (const l of newL) if (!oldS.has(l)) pre.appendChild(el('div', 'ins', '+ ' + l));
        li.appendChild(pre);
      } else if (c.type === 'content') {
        li.appendChild(el('pre', 'txt', contentText(c.content)));
      } else if (c.type === 'terminal') {
        li.appendChild(el('div', 'cwd', 'terminal ' + (c.terminalId || '')));
      }
    }
  }

  function update(p) {
    if (!cur || p.sessionId !== cur.id) return;
    const u = p.update || {};
    const kind = u.sessionUpdate || u.type;
    if (kind !== 'permission_resolved') setState(cur.id, cur.asks.size ? 'waiting' : 'running');
    switch (kind) {
      case 'agent_message_chunk': case 'user_message_chunk': case 'agent_thought_chunk': {
        const type = kind === 'agent_message_chunk' ? 'agent' : kind === 'user_message_chunk' ? 'user' : 'thought';
        const last = cur.entries[cur.entries.length - 1];
        const s = contentText(u.content);
        if (last && last.type === type) { last.text += s; cur.dirty.add(last); schedule(); } else push({ type, text: s });
        break;
      }
      case 'tool_call': case 'tool_call_update': {
        let e = cur.tools.get(u.toolCallId);
        if (!e) { e = push({ type: 'tool', data: {} }); cur.tools.set(u.toolCallId, e); }
        for (const k of Object.keys(u)) if (u[k] != null) e.data[k] = u[k];
        cur.dirty.add(e); schedule();
        break;
      }
      case 'plan': renderPlan(u.entries || []); break;
      case 'current_mode_update': clear($('s-mode')); text($('s-mode'), 'mode ' + (u.currentModeId || '')); break;
      case 'session_info_update': if (u.title != null) { clear($('s-title')); text($('s-title'), u.title); } break;
      case 'permission_resolved': resolved(u); break;
    }
  }

  function renderPlan(entries) {
    const box = $('plan');
    clear(box);
    box.hidden = entries.length === 0;
    box.appendChild(el('strong', null, 'Plan'));
    const ol = el('ol');
    for (const p of entries) ol.appendChild(el('li', p.status || '', p.content || ''));
    box.appendChild(ol);
  }

  // ---- permission requests ----
  function ask(id, p) {
    if (!cur || p.sessionId !== cur.id) {
      send({ jsonrpc: '2.0', id, error: { code: -32603, message: 'the page is not showing this session' } });
      return;
    }
    const t = p.toolCall || {};
    const box = el('div', 'ask');
    box.dataset.toolCall = t.toolCallId || '';
    box.appendChild(el('div', 'head', 'The agent asks: ' + (t.title || t.toolCallId || 'permission')));
    const raw = t.rawInput || {};
    const cmd = Array.isArray(raw.command) ? raw.command.join(' ') : raw.command;
    if (cmd) box.appendChild(el('pre', 'cmd', '$ ' + cmd));
    const opts = el('div', 'options');
    for (const o of p.options || []) {
      const b = el('button', 'option', o.name || o.optionId);
      b.type = 'button';
      b.dataset.option = o.optionId;
      b.dataset.kind = o.kind || '';
      b.addEventListener('click', () => {
        send({ jsonrpc: '2.0', id, result: { outcome: { outcome: 'selected', optionId: o.optionId } } });
        finish(id, 'answered: ' + (o.name || o.optionId));
      });
      opts.appendChild(b);
    }
    box.appendChild(opts);
    $('asks').appendChild(box);
    cur.asks.set(id, { box, toolCallId: t.toolCallId });
    setState(cur.id, 'waiting');
    const first = opts.querySelector('button');
    if (first) first.focus();
  }
  function finish(id, note) {
    const a = cur && cur.asks.get(id);
    if (!a) return;
    cur.asks.delete(id);
    a.box.remove();
    push({ type: 'resolved', text: note });
    setState(cur.id, cur.asks.size ? 'waiting' : 'running');
  }
  function withdraw(reqID) { if (cur && cur.asks.has(reqID)) finish(reqID, 'withdrawn: answered elsewhere'); }
  function resolved(u) {
    const by = (u.resolvedBy && u.resolvedBy.name) || 'someone';
    for (const [id, a] of cur.asks) if (a.toolCallId === u.toolCallId) { finish(id, 'answered by ' + by + ': ' + (u.chosenOptionId || u.outcome || '')); return; }
    push({ type: 'resolved', text: 'permission ' + (u.toolCallId || '') + ' answered by ' + by + ': ' + (u.chosenOptionId || u.outcome || '') });
  }

  // ---- decisions ----
  let older = 0;
  async function loadAudit(more) {
    const f = new FormData($('filter'));
    const q = new URLSearchParams();
    for (const [k, v] of f) if (v) q.set(k, v);
    if (more) q.set('before', String(older)); else clear($('timeline'));
    $('audit-error').hidden = true;
    let res;
    try {
      const r = await fetch('/api/audit?' + q.toString(), { credentials: 'same-origin', cache: 'no-store' });
      if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
      res = await r.json();
    } catch (e) {
      clear($('audit-error')); text($('audit-error'), 'cannot read the decisions: ' + e.message); $('audit-error').hidden = false;
      return;
    }
    const counts = $('counts');
    clear(counts);
    counts.appendChild(el('strong', null, 'Last day:'));
    for (const [rule, n] of Object.entries(res.counts || {}).sort((a, b) => b[1] - a[1])) counts.appendChild(el('span', 'count', (rule || 'no rule') + ' ' + n));
    for (const e of res.entries || []) $('timeline').appendChild(auditEntry(e.record || {}, res.where || {}));
    older = res.next || 0;
    $('older').hidden = !older;
  }
  function auditEntry(r, where) {
    const li = el('li', 'decision');
    const head = el('div');
    head.appendChild(el('span', 'effect ' + (r.decision || ''), r.decision || '?'));
    head.appendChild(document.createTextNode(' '));
    head.appendChild(el('span', 'rule', r.rule != null ? 'rule ' + r.rule : 'no rule (' + (r.source || '') + ')'));
    if (r.rule != null && Object.prototype.hasOwnProperty.call(where, r.rule)) head.appendChild(el('span', 'where', ' at ' + where[r.rule]));
    li.appendChild(head);
    li.appendChild(el('div', 'cwd', [r.time, r.agent, r.session, r.method].filter(Boolean).join(' · ')));
    if (r.answeredBy || r.userChoice) li.appendChild(el('div', 'answer', 'answered by ' + (r.answeredBy || '?') + (r.userChoice ? ': ' + r.userChoice : '')));
    if (r.answerRefused) li.appendChild(el('div', 'error', r.answerRefused));
    li.appendChild(el('pre', 'evidence', JSON.stringify(r.evidence, null, 1)));
    return li;
  }
  $('filter').addEventListener('submit', (ev) => { ev.preventDefault(); loadAudit(false); });
  $('older').addEventListener('click', () => loadAudit(true));

  function tab(which) {
    $('view-sessions').hidden = which !== 'sessions';
    $('view-decisions').hidden = which !== 'decisions';
    $('tab-sessions').setAttribute('aria-pressed', String(which === 'sessions'));
    $('tab-decisions').setAttribute('aria-pressed', String(which === 'decisions'));
    if (which === 'decisions') loadAudit(false);
  }
  $('tab-sessions').addEventListener('click', () => tab('sessions'));
  $('tab-decisions').addEventListener('click', () => tab('decisions'));

  // The token was in the URL once; the cookie carries it from now on.
  if (location.search) history.replaceState(null, '', location.pathname);
  connect();
})();
