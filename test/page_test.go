package test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
