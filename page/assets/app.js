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

  // inline: `code`, **bold**, *italic*, [text](url); the rest text. A
  // link is text that shows its URL, never an anchor: nothing the agent
  // writes navigates the page (a javascript: URL included).
  function inline(parent, s) {
    const re = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\[([^\]]+)\]\(((?:[^()\s]|\([^()\s]*\))+)\)/g;
    let last = 0, m;
    while ((m = re.exec(s)) !== null) {
      if (m.index > last) text(parent, s.slice(last, m.index));
      if (m[1] != null) parent.appendChild(el('code', null, m[1]));
      else if (m[2] != null) parent.appendChild(el('strong', null, m[2]));
      else if (m[3] != null) parent.appendChild(el('em', null, m[3]));
      else {
        const l = el('span', 'link', m[4]);
        if (m[4] !== m[5]) l.appendChild(el('span', 'url', ' (' + m[5] + ')'));
        parent.appendChild(l);
      }
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
    if (cur) head();
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

  // ---- who this page is ----
  // me is the token's identity (/api/me). Until it is known the page
  // offers no control: the hub refuses an observer token's attach as a
  // controller, so "Take control" would only fail.
  let me = null;
  fetch('/api/me', { credentials: 'same-origin', cache: 'no-store' })
    .then((r) => (r.ok ? r.json() : null))
    .then((m) => { me = m; if (cur) head(); })
    .catch(() => {});
  function mayControl() { return !!me && me.role === 'controller'; }

  // head shows the open session's agent (when the list knows it) and
  // role, "Take control" only where it can succeed, and whether the
  // session waits for an answer; the list calls it at each change.
  function head() {
    const agent = (sessions.get(cur.id) || {}).agent || '';
    if ($('s-agent').textContent !== agent) { clear($('s-agent')); text($('s-agent'), agent); }
    const role = cur.attachedRole || cur.role;
    clear($('s-role')); text($('s-role'), role);
    $('take').hidden = role === 'controller' || !mayControl();
    waiting();
  }

  // waiting shows, read-only, that the session waits for a permission
  // answer the page is not sent (only controllers are, RFD #533): its
  // state comes from the session list.
  function waiting() {
    const s = cur && sessions.get(cur.id);
    const show = !!s && cur.role !== 'controller' && s.state === 'waiting';
    let n = $('asks').querySelector('.waiting');
    if (!show) { if (n) n.remove(); return; }
    if (n) return;
    n = el('div', 'waiting', mayControl()
      ? 'The agent waits for a permission answer: take control to answer it.'
      : 'The agent waits for a permission answer: waiting for a controller (this token may only watch).');
    n.setAttribute('role', 'status');
    $('asks').appendChild(n);
  }

  async function open(id, role) {
    if (cur && cur.id !== id) { call('session/detach', { sessionId: cur.id }).catch(() => {}); }
    cur = { id, role, entries: [], tools: new Map(), start: 0, asks: new Map(), dirty: new Set(), attached: false, spacer: 0 };
    clear($('log')); clear($('asks')); renderPlan([]); $('plan').open = false;
    $('log').style.paddingTop = '';
    earlier();
    $('session').hidden = false;
    $('view-sessions').classList.add('reading');
    const info = (sessions.get(id) || {}).info || {};
    clear($('s-title')); text($('s-title'), info.title || id);
    clear($('s-cwd')); text($('s-cwd'), info.cwd || '');
    head();
    renderList();
    try {
      const res = await call('session/attach', { sessionId: id, role, historyPolicy: 'full' });
      if (cur && cur.id === id) {
        cur.attached = true;
        cur.attachedRole = (res && res.role) || role;
        head();
      }
    } catch (e) {
      if (cur && cur.id === id) push({ type: 'note', text: 'cannot attach: ' + e.message });
    }
  }

  $('take').addEventListener('click', async () => {
    if (!cur || !mayControl()) return;
    const id = cur.id;
    try { await call('session/detach', { sessionId: id }); } catch (e) { /* not attached: attach anyway */ }
    cur = null;
    open(id, 'controller');
  });
  // "All sessions" (a narrow screen shows the list or a session) closes
  // the session and goes back to the list, focus on the session left.
  $('to-list').addEventListener('click', () => {
    if (!cur) return;
    const id = cur.id;
    call('session/detach', { sessionId: id }).catch(() => {});
    cur = null;
    $('session').hidden = true;
    $('view-sessions').classList.remove('reading');
    renderList();
    const b = [...$('session-list').querySelectorAll('button')].find((x) => x.dataset.session === id);
    if (b) b.focus();
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

  // endGap is how far the log's last entry ends below the top of the dock
  // (the permission requests, stuck to the bottom of the window): at most
  // a line means the reader is at the end.
  function endGap() {
    const last = $('log').lastElementChild;
    if (!last) return -Infinity;
    return last.getBoundingClientRect().bottom - $('dock').getBoundingClientRect().top;
  }
  const AT_END = 80;
  // follow scrolls the end of the log into view above the dock. Only a
  // reader already at the end is moved: one reading earlier entries keeps
  // them where they are (what arrives goes below them).
  function follow() {
    const g = endGap();
    if (g > 0) window.scrollBy(0, g);
  }

  function flush() {
    frame = 0;
    if (!cur) return;
    const log = $('log');
    const atEnd = endGap() <= AT_END;
    // While the reader follows the end, at most WINDOW entries are in the
    // DOM: the earlier ones leave it (and are never built when a long
    // history arrives at once); "Show earlier" brings them back.
    const n = cur.entries.length;
    const lo = atEnd ? Math.max(cur.start, n - WINDOW) : cur.start;
    if (lo > cur.start) drop(lo);
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
    earlier();
    if (atEnd) follow();
  }

  // drop takes the entries before lo out of the DOM. The log's top padding
  // grows by the height they took, so that the entries after them do not
  // move on the page (a layout shift, issue 31 point 6).
  function drop(lo) {
    const log = $('log');
    const gone = [];
    for (let i = cur.start; i < lo; i++) {
      const e = cur.entries[i];
      if (e.node && e.node.parentNode === log) gone.push(e.node);
    }
    if (gone.length === 0) return;
    const last = gone[gone.length - 1], next = last.nextElementSibling;
    const h = (next ? next.getBoundingClientRect().top : last.getBoundingClientRect().bottom) - gone[0].getBoundingClientRect().top;
    for (const g of gone) log.removeChild(g);
    cur.spacer += h;
    log.style.paddingTop = cur.spacer + 'px';
  }

  // earlier keeps its place whether or not there is anything earlier (it
  // says so), so that its appearing does not move the log.
  let earlierShown = null;
  function earlier() {
    const more = !!cur && cur.start > 0;
    if (more === earlierShown) return;
    earlierShown = more;
    const b = $('earlier');
    b.disabled = !more;
    clear(b); text(b, more ? 'Show earlier' : 'Beginning of the session');
  }
  $('earlier').addEventListener('click', () => {
    if (!cur || cur.start === 0) return;
    const log = $('log');
    const from = Math.max(0, cur.start - WINDOW);
    const first = log.firstElementChild;
    const y0 = first ? first.getBoundingClientRect().top : 0;
    const frag = document.createDocumentFragment();
    for (let i = from; i < cur.start; i++) {
      const e = cur.entries[i];
      if (!e.node) { e.node = el('li'); renderEntry(e, e.node); }
      frag.appendChild(e.node);
    }
    log.insertBefore(frag, first);
    cur.start = from;
    // The padding stood for entries that left; they are back.
    if (first && cur.spacer > 0) {
      cur.spacer = Math.max(0, cur.spacer - (first.getBoundingClientRect().top - y0));
      log.style.paddingTop = cur.spacer ? cur.spacer + 'px' : '';
    }
    earlier();
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

  // ---- tool calls: kind, title, status, command, output, diffs ----
  const STATUS = new Set(['pending', 'in_progress', 'completed', 'failed']);

  // shellQuote shows one argv word as a shell would need it.
  function shellQuote(s) {
    s = String(s);
    return /^[\w@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
  }
  // commandOf is a tool call's command line: rawInput.command (a string,
  // or an argv array as Codex sends), else an execute call's title (what
  // agents that send no rawInput put there).
  function commandOf(t) {
    const raw = t.rawInput && typeof t.rawInput === 'object' ? t.rawInput : {};
    const c = raw.command != null ? raw.command : raw.cmd;
    if (Array.isArray(c) && c.length) return c.map(shellQuote).join(' ');
    if (typeof c === 'string' && c) return c;
    return t.kind === 'execute' && t.title ? t.title : '';
  }

  function renderTool(t, li) {
    li.classList.add('tool');
    const head = el('div', 'head');
    head.appendChild(el('span', 'kind', t.kind || 'other'));
    head.appendChild(el('span', 'txt', t.title || t.toolCallId || ''));
    const st = STATUS.has(t.status) ? t.status : 'pending';
    head.appendChild(el('span', 'status ' + st, st.replace('_', ' ')));
    li.appendChild(head);
    toolBody(t, li);
  }

  // toolBody shows what a tool call runs and changes (a tool call entry
  // and a permission request both).
  function toolBody(t, parent) {
    const cmd = commandOf(t);
    if (cmd) parent.appendChild(el('pre', 'cmd', '$ ' + cmd));
    for (const c of Array.isArray(t.content) ? t.content : []) {
      if (!c) continue;
      if (c.type === 'diff') renderDiff(c, parent);
      else if (c.type === 'content') parent.appendChild(el('pre', t.kind === 'execute' ? 'out' : 'txt', contentText(c.content)));
      else if (c.type === 'terminal') {
        // Only the id: the output is in a terminal the editor runs.
        parent.appendChild(el('div', 'term muted', "output in the editor's terminal" + (c.terminalId ? ' (' + c.terminalId + ')' : '')));
      }
    }
  }

  // Diffs. Past DIFF_LINES lines, DIFF_CHARS characters or DIFF_EDITS
  // changed lines, the page shows the old and new text whole instead of
  // diffing them (Myers' algorithm is O((N+M)·D) in time and O(D²) here
  // in memory).
  const DIFF_LINES = 20000, DIFF_CHARS = 4 << 20, DIFF_EDITS = 2000, CONTEXT = 3;
  const diffs = new WeakMap(); // content -> hunks: a tool call is re-rendered on each update

  function splitLines(s) {
    if (!s) return [];
    const l = s.split('\n');
    if (l[l.length - 1] === '') l.pop();
    return l;
  }

  // myers returns the shortest edit script from a to b as [op, line]
  // pairs (op ' ', '-' or '+'), or null past dmax edits.
  function myers(a, b, dmax) {
    const N = a.length, M = b.length, off = dmax + 1;
    const V = new Int32Array(2 * dmax + 3);
    const trace = [];
    for (let d = 0; d <= dmax; d++) {
      // V before step d, for k in [-d-1, d+1]: what the way back reads.
      trace.push(V.slice(off - d - 1, off + d + 2));
      for (let k = -d; k <= d; k += 2) {
        let x = (k === -d || (k !== d && V[off + k - 1] < V[off + k + 1])) ? V[off + k + 1] : V[off + k - 1] + 1;
        let y = x - k;
        while (x < N && y < M && a[x] === b[y]) { x++; y++; }
        V[off + k] = x;
        if (x >= N && y >= M) return backtrack(a, b, trace, d);
      }
    }
    return null;
  }
  function backtrack(a, b, trace, D) {
    const ops = [];
    let x = a.length, y = b.length;
    for (let d = D; d > 0; d--) {
      const v = trace[d], at = (k) => v[k + d + 1];
      const k = x - y;
      const pk = (k === -d || (k !== d && at(k - 1) < at(k + 1))) ? k + 1 : k - 1;
      const px = at(pk), py = px - pk;
      while (x > px && y > py) { ops.push([' ', a[--x]]); y--; }
      if (x === px) ops.push(['+', b[--y]]); else ops.push(['-', a[--x]]);
    }
    while (x > 0) { ops.push([' ', a[--x]]); y--; }
    return ops.reverse();
  }

  // unified is the diff of two texts as unified-diff hunks (CONTEXT lines
  // around each change), [] when equal, null when too large to diff.
  function unified(oldText, newText) {
    if ((oldText || '').length + (newText || '').length > DIFF_CHARS) return null;
    const a = splitLines(oldText), b = splitLines(newText);
    if (a.length + b.length > DIFF_LINES) return null;
    let p = 0;
    while (p < a.length && p < b.length && a[p] === b[p]) p++;
    let s = 0;
    while (s < a.length - p && s < b.length - p && a[a.length - 1 - s] === b[b.length - 1 - s]) s++;
    const mid = myers(a.slice(p, a.length - s), b.slice(p, b.length - s), DIFF_EDITS);
    if (mid === null) return null;
    const ops = [];
    for (let i = 0; i < p; i++) ops.push([' ', a[i]]);
    for (const o of mid) ops.push(o);
    for (let i = a.length - s; i < a.length; i++) ops.push([' ', a[i]]);
    // Line numbers of each op in the old and the new text.
    const at = [];
    let oa = 1, ob = 1;
    for (const o of ops) { at.push([oa, ob]); if (o[0] !== '+') oa++; if (o[0] !== '-') ob++; }
    const hunks = [];
    let k = 0;
    while (k < ops.length) {
      while (k < ops.length && ops[k][0] === ' ') k++;
      if (k === ops.length) break;
      const start = Math.max(0, k - CONTEXT);
      let end = k;
      for (;;) {
        while (end < ops.length && ops[end][0] !== ' ') end++;
        let next = end;
        while (next < ops.length && ops[next][0] === ' ') next++;
        if (next < ops.length && next - end <= 2 * CONTEXT) { end = next; continue; }
        end = Math.min(ops.length, end + CONTEXT);
        break;
      }
      const lines = ops.slice(start, end);
      const on = lines.filter((o) => o[0] !== '+').length, nn = lines.filter((o) => o[0] !== '-').length;
      hunks.push({ head: '@@ -' + (on ? at[start][0] : at[start][0] - 1) + ',' + on + ' +' + (nn ? at[start][1] : at[start][1] - 1) + ',' + nn + ' @@', lines });
      k = end;
    }
    return hunks;
  }

  function renderDiff(c, parent) {
    const box = el('div', 'diff');
    const head = el('div', 'diff-path');
    // ACP: oldText null (or absent) is a new file.
    if (c.oldText == null) head.appendChild(el('span', 'tag', 'new file'));
    head.appendChild(el('span', 'txt', c.path || ''));
    box.appendChild(head);
    let h = diffs.get(c);
    if (h === undefined) { h = unified(c.oldText, c.newText); diffs.set(c, h); }
    if (h === null) {
      box.appendChild(el('div', 'muted', 'too large to compare here: the old and the new text whole'));
      if (c.oldText != null) box.appendChild(el('pre', 'whole old', c.oldText));
      box.appendChild(el('pre', 'whole new', c.newText || ''));
    } else if (h.length === 0) {
      box.appendChild(el('div', 'muted', 'no change'));
    } else {
      const pre = el('pre', 'hunks');
      for (const hk of h) {
        pre.appendChild(el('span', 'hunk', hk.head));
        for (const [op, l] of hk.lines) pre.appendChild(el('span', op === '+' ? 'ins' : op === '-' ? 'del' : 'ctx', op + ' ' + l));
      }
      box.appendChild(pre);
    }
    parent.appendChild(box);
  }

  function update(p) {
    if (!cur || p.sessionId !== cur.id) return;
    const u = p.update || {};
    const kind = u.sessionUpdate || u.type;
    // A controller knows its pending requests; an observer is not sent
    // them, so the list's "waiting" stands until the list says otherwise.
    const known = sessions.get(cur.id);
    if (kind !== 'permission_resolved' && (cur.role === 'controller' || !known || known.state !== 'waiting')) setState(cur.id, cur.asks.size ? 'waiting' : 'running');
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
      case 'plan': renderPlan(Array.isArray(u.entries) ? u.entries : []); break;
      case 'current_mode_update': clear($('s-mode')); text($('s-mode'), 'mode ' + (u.currentModeId || '')); break;
      case 'config_option_update': {
        // Agents that moved to config options (ACP 1.x) say their mode as
        // the option of category "mode": its current value's name.
        const m = (Array.isArray(u.configOptions) ? u.configOptions : []).find(o => o && (o.category === 'mode' || o.id === 'mode'));
        if (m) { clear($('s-mode')); text($('s-mode'), 'mode ' + optionName(m)); }
        break;
      }
      case 'session_info_update': if (u.title != null) { clear($('s-title')); text($('s-title'), u.title); } break;
      case 'permission_resolved': resolved(u); break;
    }
  }

  // optionName: a select option's current value by its name (options may
  // be flat or in groups), else the value itself.
  function optionName(o) {
    const flat = [];
    for (const x of Array.isArray(o.options) ? o.options : []) {
      if (x && Array.isArray(x.options)) flat.push(...x.options); else if (x) flat.push(x);
    }
    const v = flat.find(x => x.value === o.currentValue);
    return String((v && v.name) || o.currentValue || '');
  }

  // renderPlan: the plan is one line of the session's head, always there
  // (done/all and the step in progress), that opens over the log to the
  // whole list: a plan arriving or changing moves nothing.
  function renderPlan(entries) {
    const list = $('plan-list');
    clear(list);
    let done = 0, now = null;
    for (const p of entries) {
      const st = STATUS.has(p.status) ? p.status : '';
      list.appendChild(el('li', st, p.content || ''));
      if (st === 'completed') done++;
      else if (!now && st === 'in_progress') now = p;
    }
    now = now || entries.find((p) => p.status !== 'completed');
    clear($('plan-summary'));
    text($('plan-summary'), entries.length ? 'Plan ' + done + '/' + entries.length + (now ? ': ' + (now.content || '') : '') : 'No plan');
  }

  // ---- permission requests ----
  // A request is shown in the dock under the log, which it never moves.
  // It does not take the keyboard focus: an Enter meant for another
  // button must not answer "Allow". The dock is next in the tab order.
  function ask(id, p) {
    if (!cur || p.sessionId !== cur.id) {
      send({ jsonrpc: '2.0', id, error: { code: -32603, message: 'the page is not showing this session' } });
      return;
    }
    const t = p.toolCall || {};
    const atEnd = endGap() <= AT_END;
    const box = el('div', 'ask');
    box.dataset.toolCall = t.toolCallId || '';
    box.appendChild(el('div', 'head', 'The agent asks: ' + (t.title || t.toolCallId || 'permission')));
    toolBody(t, box);
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
    // The dock is stuck to the window's bottom and grows upwards over the
    // log, moving none of it; last in the dock, so that a request shown
    // already keeps its place in it.
    $('asks').appendChild(box);
    cur.asks.set(id, { box, toolCallId: t.toolCallId });
    setState(cur.id, 'waiting');
    if (atEnd) follow();
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
    // An observer learns here that the request it could not see is gone.
    if (cur.role !== 'controller' && !cur.asks.size) setState(cur.id, 'running');
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
