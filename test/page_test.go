package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/internal/browser"
)

// The web page end to end (issue 31), in headless Chromium: a router an
// editor started that listens; the page opened at the listening address
// with alice's token sees the editor's session, watches a streamed reply
// (HTML and script as text), takes control, presses Allow on the agent's
// permission request; the agent proceeds, the editor is told alice
// answered and its copy withdrawn; the decisions view shows the answer
// with its rule and alice's name. Revoked, the token opens nothing but
// the sign-in error.
func TestPageEndToEnd(t *testing.T) {
	skipShort(t, "runs a router and a browser")
	b := browser.Start(t)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	r := newRemoteConfig(t, "listen: {address: '127.0.0.1:0'}\naudit: {file: "+yamlQuote(auditFile)+"}\n"+
		"permissions:\n  default: allow\n  rules:\n    - id: ask-edits\n      decision: ask\n      when: {kind: [edit]}\n")
	ed := StartRouter(t, r.cfg, nil)
	ed.Initialize(t, nil)
	sid := ed.NewSession(t, t.TempDir())
	base := strings.TrimSuffix(r.listening(t, 1)[0], "/acp")
	release := make(chan struct{})
	ed.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		<-release // the editor's user is away: the page answers
		return RejectFirst(p)
	})

	p := b.NewPage(390, 844)
	p.Navigate(base + "/?token=" + r.token)
	p.WaitFor(`document.querySelector('#session-list button[data-session="`+sid+`"]')`, waitTimeout)
	p.Click(`#session-list button[data-session="` + sid + `"]`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer'`, waitTimeout)
	p.Click(`#take`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'controller'`, waitTimeout)

	type result struct {
		m   *Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := ed.Prompt(waitTimeout, sid, "say <script>window.pwned=1</script><b>not bold</b> \u202Eevil\npermission\nsay after")
		done <- result{m, err}
	}()
	p.WaitFor(`document.querySelector('.ask button[data-option="allow"]')`, waitTimeout)
	// A second tab that has not opened the session sees it waiting (the
	// hub's _acp-router/sessions), opens it, takes control and is asked
	// too; both tabs then press Allow at once.
	tab2 := b.NewPage(1280, 900)
	tab2.Navigate(base + "/")
	tab2.WaitFor(`(() => { const b = document.querySelector('#session-list button[data-session="`+sid+`"] .state'); return b && b.textContent === 'waiting for you'; })()`, waitTimeout)
	tab2.Click(`#session-list button[data-session="` + sid + `"]`)
	tab2.WaitFor(`document.querySelector('#s-role').textContent === 'observer'`, waitTimeout)
	tab2.Click(`#take`)
	tab2.WaitFor(`document.querySelector('.ask button[data-option="allow"]')`, waitTimeout)
	text := p.String(`document.querySelector('#log').textContent`)
	var markup int
	p.Eval(`document.querySelectorAll('#log script, #log b').length`, &markup)
	if !strings.Contains(text, "<script>window.pwned=1</script><b>not bold</b>") || markup != 0 || strings.Contains(text, "\u202E") {
		t.Errorf("the agent's markup became markup (%d elements) or bidi stayed raw: %q", markup, text)
	}
	// Both tabs press Allow at once; whichever the hub takes first wins,
	// the other's copy is withdrawn or its late answer dropped.
	p.Front()
	press := `(() => { const b = document.querySelector('.ask button[data-option="allow"]'); if (b) b.click(); return !!b; })()`
	pressed := make(chan bool, 2)
	for _, tab := range []*browser.Page{p, tab2} {
		go func() {
			var ok bool
			tab.Eval(press, &ok)
			pressed <- ok
		}()
	}
	if a, b := <-pressed, <-pressed; !a && !b {
		t.Fatal("neither tab could press Allow")
	}
	res := <-done
	close(release)
	if res.err != nil {
		t.Fatal(res.err)
	}
	requireStop(t, res.m, "end_turn")
	resolved := ed.Rec.WaitFor(t, waitTimeout, "permission_resolved", func(m *Msg) bool { return m.Update() == "permission_resolved" })
	if !strings.Contains(string(resolved.Params), `"name":"alice"`) || !strings.Contains(string(resolved.Params), `"chosenOptionId":"allow"`) {
		t.Errorf("the editor was told %s", resolved.Params)
	}
	ed.Rec.WaitFor(t, waitTimeout, "the editor's copy withdrawn", func(m *Msg) bool { return m.Method == "$/cancel_request" })
	if got := ed.Texts(sid); len(got) < 2 || !strings.Contains(strings.Join(got, "|"), "allow") {
		t.Errorf("the agent heard %q, want the page's allow", got)
	}
	for _, tab := range []*browser.Page{p, tab2} {
		tab.Front()
		tab.WaitFor(`document.querySelector('#log').textContent.includes('after') && !document.querySelector('.ask')`, waitTimeout)
	}

	answered := 0
	rule := ""
	for _, rec := range audittest.ReadLines(t, auditFile) {
		if rec["answeredBy"] != nil {
			answered++
			rule, _ = rec["rule"].(string)
			if rec["answeredBy"] != "alice" || rec["userChoice"] != "allow_once" {
				t.Errorf("audit record of the answer: %v", rec)
			}
		}
	}
	if answered != 1 || rule == "" {
		t.Fatalf("%d audit records name who answered (rule %q), want 1", answered, rule)
	}
	p.Front()
	p.Click(`#tab-decisions`)
	p.WaitFor(`document.querySelector('#timeline li .answer')`, waitTimeout)
	view := p.String(`document.querySelector('#timeline').textContent`)
	if !strings.Contains(view, "rule "+rule+" at "+r.cfg+":") || !strings.Contains(view, "answered by alice: allow_once") {
		t.Errorf("decisions view %q, want rule %q answered by alice", view, rule)
	}
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors: %v", pr)
	}

	// Revoked: the same browser, its cookie still set, gets the sign-in
	// error only.
	if out, err := exec.Command(needRouter(t), "token", "revoke", "alice", "--config", r.cfg).CombinedOutput(); err != nil {
		t.Fatalf("token revoke: %v %s", err, out)
	}
	time.Sleep(100 * time.Millisecond)
	p.Navigate(base + "/")
	var page struct {
		Text    string
		Scripts int
	}
	p.Eval(`({Text: document.body.innerText, Scripts: document.scripts.length})`, &page)
	if !strings.Contains(page.Text, "Not signed in") || page.Scripts != 0 || strings.Contains(page.Text, sid) {
		t.Errorf("with a revoked token: %+v", page)
	}
}

// The URL acp-router serve prints at first use opens the page: connected,
// and the token leaves the address bar.
func TestPagePrintedURL(t *testing.T) {
	skipShort(t, "runs acp-router serve and a browser")
	b := browser.Start(t)
	state := t.TempDir()
	r := remoteRouter{cfg: writeConfig(t, "version: 1\nstate_dir: "+yamlQuote(state)+"\nagents:\n"+fakeAgentYAML("fake", fakeOpts{})), state: state}
	stderr := startServe(t, r, "--listen", "127.0.0.1:0")
	var url string
	deadline := time.Now().Add(waitTimeout)
	for url == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no page URL printed:\n%s", stderr.String())
		}
		_, rest, ok := strings.Cut(stderr.String(), "or open in a browser\n")
		if line, _, ok2 := strings.Cut(strings.TrimSpace(rest), "\n"); ok && ok2 {
			url = strings.TrimSpace(line)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasSuffix(strings.Split(url, "?")[0], "/") || !strings.Contains(url, "?token=") {
		t.Fatalf("printed page URL %q", url)
	}
	p := b.NewPage(390, 844)
	p.Navigate(url)
	p.WaitFor(`document.querySelector('#conn').textContent === 'connected' && !document.querySelector('#no-sessions').hidden`, waitTimeout)
	if s := p.String(`location.href`); strings.Contains(s, "token") {
		t.Errorf("the token stays in the address bar: %s", s)
	}
}

// The 10,000 updates a second, end to end in Chromium: on a
// router that listens (acp-router serve), a WebSocket client's prompt
// makes the agent stream 30,000 agent_message_chunk updates as fast as it
// can (more than 10,000 a second) while the page watches the session as
// an observer. The page and the client must each get every byte of the
// text in order, in one connection (never dropped as too slow), and the
// page stay responsive; the rates are logged. Before the hub coalesced
// streamed text for the page (_acp-router/watch chunkIntervalMs) the page
// took 50 s for what the agent sent in 10 s.
func TestPageChunkFlood(t *testing.T) {
	skipShort(t, "streams 30,000 updates to a browser")
	b := browser.Start(t)
	r := newRemoteConfig(t, "")
	stderr := startServe(t, r, "--listen", "127.0.0.1:0", "--log-level", "info")
	url := r.listening(t, 1)[0]
	base := strings.TrimSuffix(url, "/acp")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r.token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	send := func(v any) {
		b, _ := json.Marshal(v)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	// until reads until the response to id: its result, the text said
	// and how many messages carried it.
	until := func(id int) (json.RawMessage, string, int) {
		var text strings.Builder
		n := 0
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("the client's connection: %v (after %d bytes of text)", err, text.Len())
			}
			var m struct {
				ID     json.RawMessage
				Method string
				Params struct {
					Update struct {
						SessionUpdate string
						Content       struct{ Text string }
					}
				}
				Result json.RawMessage
			}
			json.Unmarshal(b, &m)
			switch {
			case m.Method == "session/update" && m.Params.Update.SessionUpdate == "agent_message_chunk":
				text.WriteString(m.Params.Update.Content.Text)
				n++
			case m.Method == "" && string(m.ID) == strconv.Itoa(id):
				return m.Result, text.String(), n
			}
		}
	}
	send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": 1}})
	until(1)
	send(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}})
	res, _, _ := until(2)
	var ns struct{ SessionID string }
	json.Unmarshal(res, &ns)
	sid := ns.SessionID

	p := b.NewPage(1280, 900)
	p.Navigate(base + "/?token=" + r.token)
	p.WaitFor(`document.querySelector('#session-list button[data-session="`+sid+`"]')`, waitTimeout)
	p.Click(`#session-list button[data-session="` + sid + `"]`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer'`, waitTimeout)
	// Every connection status the page shows from now on: a client
	// dropped as too slow reconnects, and its re-attach replays the whole
	// text, which would hide the drop.
	p.Eval(`window.statuses = []; new MutationObserver(() => window.statuses.push(document.querySelector('#conn').textContent)).observe(document.querySelector('#conn'), {childList: true, subtree: true, characterData: true}); 1`, nil)

	const n, size = 30000, 64
	var want strings.Builder
	for i := range n {
		head := fmt.Sprintf("#%06d ", i)
		want.WriteString(head + strings.Repeat("u", size-len(head)))
	}
	start := time.Now()
	send(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": fmt.Sprintf("updates %d %d", n, size)}}}})
	res, text, msgs := until(3)
	sent := time.Since(start)
	if !strings.Contains(string(res), "end_turn") {
		t.Fatalf("the prompt answered %s", res)
	}
	if text != want.String() {
		t.Errorf("the WebSocket client got %d bytes of text, want %d", len(text), want.Len())
	}
	last := fmt.Sprintf("#%06d ", n-1)
	p.WaitFor(`(() => { const e = document.querySelector('#log > li:last-child'); return !!e && e.textContent.includes(`+strconv.Quote(last)+`); })()`, 2*time.Minute)
	shown := time.Since(start)
	// Behind without bound, the page would fall further behind the
	// longer the agent streams (50 s for a 10 s stream, before).
	if lag := shown - sent; lag > 15*time.Second {
		t.Errorf("the page showed the end %v after the client had it", lag.Round(time.Millisecond))
	}
	worst := time.Duration(0)
	for range 3 {
		worst = max(worst, pageLatency(t, p))
	}
	got := p.String(`[...document.querySelectorAll('#log > li')].map(e => e.textContent).join('')`)
	if got != want.String() {
		i := 0
		for i < len(got) && i < want.Len() && got[i] == want.String()[i] {
			i++
		}
		t.Errorf("the page shows %d bytes of text, want %d; they differ from byte %d", len(got), want.Len(), i)
	}
	if s := p.String(`JSON.stringify(window.statuses)`); s != "[]" {
		t.Errorf("the page's connection changed during the stream: %s", s)
	}
	if strings.Contains(stderr.String(), "client dropped") {
		t.Errorf("the router dropped a client:\n%s", grepLines(stderr.String(), "client dropped"))
	}
	if worst > time.Second {
		t.Errorf("a frame takes %v after the stream", worst)
	}
	t.Logf("%d updates of %d bytes: the WebSocket client had them all after %v (%.0f updates/s, in %d messages), the page after %v (%.0f updates/s end to end); worst frame after %v",
		n, size, sent.Round(time.Millisecond), float64(n)/sent.Seconds(), msgs, shown.Round(time.Millisecond), float64(n)/shown.Seconds(), worst)
}

// pageLatency is one round trip of an evaluation that waits for a frame:
// what a user's input waits for while the page works.
func pageLatency(t *testing.T, p *browser.Page) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.Eval(`new Promise(r => requestAnimationFrame(() => r(1)))`, nil); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The session list is pushed, not polled: a page open before the editor
// starts a session sees it appear with its agent, and sees it wait for an
// answer and go idle again without opening it; the page asked for the
// stored sessions once, at connect, and never polled.
func TestPageSessionsPushed(t *testing.T) {
	skipShort(t, "runs a router and a browser")
	b := browser.Start(t)
	r := newRemoteConfig(t, "listen: {address: '127.0.0.1:0'}\npermissions:\n  default: allow\n  rules:\n    - id: ask-edits\n      decision: ask\n      when: {kind: [edit]}\n")
	ed := StartRouter(t, r.cfg, nil)
	ed.Initialize(t, nil)
	base := strings.TrimSuffix(r.listening(t, 1)[0], "/acp")
	p := b.NewPage(390, 844)
	p.Navigate(base + "/?token=" + r.token)
	p.WaitFor(`document.querySelector('#conn').textContent === 'connected' && !document.querySelector('#no-sessions').hidden`, waitTimeout)

	sid := ed.NewSession(t, t.TempDir())
	state := func(want string) string {
		return `(() => { const b = document.querySelector('#session-list button[data-session="` + sid + `"]'); return !!b && b.querySelector('.state').textContent === '` + want + `'; })()`
	}
	p.WaitFor(state("idle"), waitTimeout)
	if got := p.String(`document.querySelector('#session-list button[data-session="` + sid + `"] .agent').textContent`); got != "fake" {
		t.Errorf("the list shows the agent as %q, want fake", got)
	}
	release := make(chan struct{})
	ed.Handle("session/request_permission", func(params json.RawMessage) (any, *RPCError) {
		<-release
		return AllowFirst(params)
	})
	done := make(chan error, 1)
	go func() {
		m, err := ed.Prompt(waitTimeout, sid, "permission")
		if err == nil && m.Error != nil {
			err = fmt.Errorf("prompt: %s", m.Error.Message)
		}
		done <- err
	}()
	p.WaitFor(state("waiting for you"), waitTimeout)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.WaitFor(state("idle"), waitTimeout)
	lists, polls := 0, 0
	for _, f := range p.SentFrames() {
		if strings.Contains(f, `"method":"session/list"`) {
			lists++
		}
		if strings.Contains(f, `"method":"_acp-router/sessions"`) {
			polls++
		}
	}
	// One session/list at connect, one when the new session appeared
	// (for its title and directory).
	if lists > 2 || polls > 0 {
		t.Errorf("the page sent session/list %d times and _acp-router/sessions %d times", lists, polls)
	}
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors: %v", pr)
	}
}

// An observer token (token create --role observer) opens the page: it
// watches the editor's session, is not offered Take control (the hub
// would refuse its attach as a controller), and sees the agent's pending
// permission request read-only, waiting for a controller, until the
// editor answers it.
func TestPageObserverToken(t *testing.T) {
	skipShort(t, "runs a router and a browser")
	b := browser.Start(t)
	r := newRemoteConfig(t, "listen: {address: '127.0.0.1:0'}\n"+
		"permissions:\n  default: allow\n  rules:\n    - id: ask-edits\n      decision: ask\n      when: {kind: [edit]}\n")
	out, err := exec.Command(needRouter(t), "token", "create", "carol", "--role", "observer", "--config", r.cfg).Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	carol := strings.TrimSpace(string(out))
	ed := StartRouter(t, r.cfg, nil)
	ed.Initialize(t, nil)
	sid := ed.NewSession(t, t.TempDir())
	base := strings.TrimSuffix(r.listening(t, 1)[0], "/acp")
	release := make(chan struct{})
	ed.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		<-release
		return RejectFirst(p)
	})
	done := make(chan error, 1)
	go func() {
		_, err := ed.Prompt(waitTimeout, sid, "permission\nsay after")
		done <- err
	}()

	p := b.NewPage(390, 844)
	p.Navigate(base + "/?token=" + carol)
	p.WaitFor(`(() => { const b = document.querySelector('#session-list button[data-session="`+sid+`"] .state'); return b && b.textContent === 'waiting for you'; })()`, waitTimeout)
	p.Click(`#session-list button[data-session="` + sid + `"]`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer' && document.querySelector('#asks .waiting')`, waitTimeout)
	var v struct {
		Take bool
		Note string
		Asks int
		Me   string
	}
	p.Eval(`fetch('/api/me').then(r => r.json()).then(m => ({Take: getComputedStyle(document.querySelector('#take')).display !== 'none',
		Note: document.querySelector('#asks').textContent, Asks: document.querySelectorAll('.ask, button.option').length, Me: m.name + ' ' + m.role}))`, &v)
	if v.Take || !strings.Contains(v.Note, "waiting for a controller") || v.Asks != 0 || v.Me != "carol observer" {
		t.Errorf("an observer token's page: %+v", v)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.WaitFor(`!document.querySelector('#asks .waiting') && document.querySelector('#log').textContent.includes('after')`, waitTimeout)
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors: %v", pr)
	}
}
