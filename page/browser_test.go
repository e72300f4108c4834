package page

import (
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/internal/browser"
)

const wait = 15 * time.Second

// hostile is agent text the page must show as text: markup, a script, an
// event handler, bidi controls.
const hostile = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\"><b>not bold</b> \u202Egnp.exe\u202C and \u2067iso\u2069\n\n**bold** and `code`\n"

// The page in a real Chromium: it opens the session the hub has, shows
// the agent's stream with hostile text as text, takes control, answers a
// permission with the mouse, and shows the decisions; screenshots at 390
// and 1280 px are kept as artifacts.
func TestPageInBrowser(t *testing.T) {
	if os.Getenv("ACP_ARTIFACTS") != "" && browser.Find() == "" {
		// scripts/test.sh (CI) keeps the screenshots: a skip would lose
		// them unnoticed.
		t.Fatal("ACP_ARTIFACTS is set but there is no chromium to take the page's screenshots (apt-get install chromium)")
	}
	b := browser.Start(t)
	h := &hubFake{say: []string{"Hello ", "from the agent. ", hostile}, ask: true, answers: make(chan json.RawMessage, 1)}
	rule := "ask-go-test (policy.yaml:12)"
	audit := writeAudit(t, map[string]any{"time": time.Now().UTC(), "agent": "claude", "session": "s1", "method": "session/request_permission",
		"decision": "allow", "rule": rule, "source": "user", "userChoice": "allow", "answeredBy": "alice",
		"evidence": map[string]any{"commands": []string{"go test ./..."}, "note": "<script>window.pwned=3</script>"}})
	base := startPage(t, audit, h.serve)
	artifacts := artifactDir(t)

	p := b.NewPage(390, 844)
	p.Navigate(base + "/?token=" + secret)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	if s := p.String(`location.href`); strings.Contains(s, "token") {
		t.Errorf("the token stays in the address bar: %s", s)
	}
	p.Click(`#session-list button[data-session="s1"]`)
	p.WaitFor(`document.querySelector('#log').textContent.includes('gnp.exe')`, wait)
	checkText(t, p)
	if got := p.String(`document.querySelector('#s-role').textContent`); got != "observer" {
		t.Errorf("role %q, want observer before taking control", got)
	}
	if got := p.String(`document.querySelector('#plan').textContent + '|' + document.querySelector('#s-mode').textContent`); !strings.Contains(got, "run the tests") || !strings.Contains(got, "mode code") {
		t.Errorf("plan and mode: %q", got)
	}
	if got := p.String(`document.querySelector('#log li.tool').textContent`); !strings.Contains(got, "edit") || !strings.Contains(got, "Edit main.go") || !strings.Contains(got, "+ a := 2") {
		t.Errorf("tool call: %q", got)
	}
	if n := p.String(`String(document.querySelectorAll('.ask').length)`); n != "0" {
		t.Errorf("an observer is shown %s permission requests", n)
	}

	// Take control with the keyboard: focus the button, press Enter.
	p.Eval(`document.querySelector('#take').focus()`, nil)
	p.Key("Enter")
	p.WaitFor(`document.querySelector('.ask button[data-option="allow"]')`, wait)
	if got := p.String(`document.querySelector('#s-role').textContent`); got != "controller" {
		t.Errorf("role %q after taking control", got)
	}
	if got := p.String(`document.querySelector('#session-list .state').textContent`); got != "waiting for you" {
		t.Errorf("state %q while an ask is pending", got)
	}
	if got := p.String(`document.querySelector('#session-list .agent').textContent`); got != "Claude Code" {
		t.Errorf("the list shows the agent as %q, want Claude Code", got)
	}
	shot(t, p, artifacts, "session", 390)
	p.Resize(1280, 900)
	shot(t, p, artifacts, "session", 1280)
	p.Click(`.ask button[data-option="allow"]`)
	select {
	case res := <-h.answers:
		var r struct {
			Outcome struct{ Outcome, OptionID string }
		}
		json.Unmarshal(res, &r)
		if r.Outcome.Outcome != "selected" || r.Outcome.OptionID != "allow" {
			t.Errorf("answer %s", res)
		}
	case <-time.After(wait):
		t.Fatal("the page's answer never reached the hub")
	}
	p.WaitFor(`document.querySelector('#log').textContent.includes('tests pass')`, wait)
	if n := p.String(`String(document.querySelectorAll('.ask').length)`); n != "0" {
		t.Errorf("%s asks left after answering", n)
	}
	h.mu.Lock()
	roles := strings.Join(h.roles, ",")
	h.mu.Unlock()
	if roles != "observer,controller" {
		t.Errorf("attached as %s, want observer then controller", roles)
	}

	// Decisions.
	p.Click(`#tab-decisions`)
	p.WaitFor(`document.querySelector('#timeline li')`, wait)
	if d := p.String(`getComputedStyle(document.querySelector('#view-sessions')).display`); d != "none" {
		t.Errorf("the session view still shows (display %s) under Decisions", d)
	}
	got := p.String(`document.querySelector('#view-decisions').textContent`)
	for _, want := range []string{rule, "answered by alice", "allow", "<script>window.pwned=3</script>", rule + " 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("decisions view lacks %q: %q", want, got)
		}
	}
	shot(t, p, artifacts, "decisions", 1280)
	p.Resize(390, 844)
	shot(t, p, artifacts, "decisions", 390)
	checkText(t, p)

	// Layout shift over the whole visit (CLS's sum; 0.1 is "good"). The
	// browser leaves out shifts within 500 ms of an input, and this
	// visit's streams follow clicks: a weak check, not proof that
	// streaming never shifts the layout (TestPageNoLayoutShift is).
	var cls float64
	if err := p.Eval(`new Promise(res => { let sum = 0; const o = new PerformanceObserver(l => { for (const e of l.getEntries()) if (!e.hadRecentInput) sum += e.value; });
		o.observe({type: 'layout-shift', buffered: true}); setTimeout(() => { o.disconnect(); res(sum); }, 200); })`, &cls); err != nil {
		t.Fatal(err)
	}
	t.Logf("layout shift over the visit: %.4f", cls)
	if cls > 0.1 {
		t.Errorf("layout shift %.3f while streaming, want at most 0.1", cls)
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, base+"/") && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page asked another host: %s", u)
		}
	}
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors (a CSP violation is one): %v", pr)
	}
	t.Logf("screenshots in %s", artifacts)
}

// checkText fails when the agent's markup became markup: a script or img
// element in the page's content, a script that ran, raw bidi controls.
func checkText(t *testing.T, p *browser.Page) {
	t.Helper()
	var r struct {
		Markup  int
		Pwned   string
		Text    bool
		Bidi    bool
		Escaped bool
		Bold    bool
	}
	err := p.Eval(`(() => { const m = document.querySelector('main'); const t = m.textContent; return {
		Markup: m.querySelectorAll('script, img, iframe, object, #log b').length,
		Pwned: String(window.pwned),
		Text: t.includes('<script>window.pwned=1</script>') && t.includes('<b>not bold</b>'),
		Bidi: /[\u202A-\u202E\u2066-\u2069]/.test(t),
		Escaped: t.includes('\u27E6U+202E\u27E7'),
		Bold: !!m.querySelector('#log strong') && m.querySelector('#log strong').textContent === 'bold' }; })()`, &r)
	if err != nil {
		t.Fatal(err)
	}
	if r.Markup != 0 || r.Pwned != "undefined" || !r.Text || r.Bidi || !r.Escaped || !r.Bold {
		t.Errorf("agent text rendered as markup or unescaped: %+v", r)
	}
}

func shot(t *testing.T, p *browser.Page, dir, view string, width int) {
	t.Helper()
	// Let the layout settle at the new width.
	time.Sleep(100 * time.Millisecond)
	var overflow bool
	p.Eval(`document.documentElement.scrollWidth > document.documentElement.clientWidth`, &overflow)
	if overflow {
		t.Errorf("%s at %d px scrolls sideways", view, width)
	}
	file := filepath.Join(dir, fmt.Sprintf("%s-%d.png", view, width))
	p.Screenshot(file)
	checkPNG(t, file, width)
}

// checkPNG fails unless file is a PNG width pixels wide, at least a
// screen high, that shows something: a blank or one-colour capture is
// not a screenshot of the page.
func checkPNG(t *testing.T, file string, width int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	b := img.Bounds()
	colours := map[color.Color]bool{}
	for y := b.Min.Y; y < b.Max.Y && len(colours) < 16; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 5 {
			colours[img.At(x, y)] = true
		}
	}
	if b.Dx() != width || b.Dy() < 600 || len(colours) < 16 {
		t.Errorf("%s: %dx%d with %d colours, want %d px wide, a screen high, not blank", file, b.Dx(), b.Dy(), len(colours), width)
	}
}

// artifactDir is where the screenshots go: $ACP_ARTIFACTS/page when set
// (scripts/test.sh sets it, so that CI keeps them), else the test's
// artifact directory (kept with go test -artifacts).
func artifactDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("ACP_ARTIFACTS")
	if d == "" {
		return t.ArtifactDir()
	}
	d = filepath.Join(d, "page")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// Without a token, or with a revoked one, the page is only the sign-in
// error: no session, no script.
func TestSignInInBrowser(t *testing.T) {
	b := browser.Start(t)
	h := &hubFake{answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := b.NewPage(390, 844)
	for _, u := range []string{base + "/", base + "/?token=" + revoked} {
		p.Navigate(u)
		var r struct {
			Text    string
			Scripts int
			List    bool
		}
		p.Eval(`({Text: document.body.innerText, Scripts: document.scripts.length, List: !!document.querySelector('#session-list')})`, &r)
		if !strings.Contains(r.Text, "Not signed in") || r.Scripts != 0 || r.List {
			t.Errorf("%s: %+v", u, r)
		}
	}
}

// latency is one round trip of an evaluation in the page: what a user's
// input waits for while the page works.
func latency(t *testing.T, p *browser.Page) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.Eval(`new Promise(r => requestAnimationFrame(() => r(1)))`, nil); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// The bad input, in Chromium: a history of 50,000 entries, a
// burst of 10,000 updates and a message of 5 MiB arrive at once; the page
// keeps at most its window in the DOM, shows the 5 MiB message whole as
// text, answers within a frame after, and brings earlier entries back a
// page at a time.
func TestPageBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 60,000 updates to a browser")
	}
	b := browser.Start(t)
	h := &hubFake{history: 50000, burst: 10000, big: 5 << 20, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := b.NewPage(390, 844)
	p.Navigate(base + "/?token=" + secret)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	start := time.Now()
	p.Click(`#session-list button[data-session="s1"]`)
	// The hub's last update is the tool call t1, after the 5 MiB message.
	p.WaitFor(`document.querySelector('#log > li:last-child').textContent.includes('Edit main.go')`, 90*time.Second)
	loaded := time.Since(start)
	r := domEntries(t, p, "burst-9999")
	if r.Items > 250 || r.Items != r.Distinct || r.Last != 1 {
		t.Errorf("%d entries in the DOM, %d distinct, the last update %d times", r.Items, r.Distinct, r.Last)
	}
	var big int
	p.Eval(`[...document.querySelectorAll('#log > li')].filter(e => e.textContent.endsWith('big-end')).map(e => e.textContent.length)[0] || 0`, &big)
	if big != 5<<20 {
		t.Errorf("the 5 MiB message shows %d bytes", big)
	}
	worst := time.Duration(0)
	for range 5 {
		worst = max(worst, latency(t, p))
	}
	if worst > time.Second {
		t.Errorf("a frame takes %v with 60,000 entries loaded", worst)
	}
	// Earlier entries come back a page at a time: three pages of 200
	// reach back to the burst's 9,203rd update (60,003 entries in all).
	for range 3 {
		p.Click(`#earlier`)
	}
	r = domEntries(t, p, "readburst-9203completed")
	if r.Items != 800 || r.Items != r.Distinct || r.Last != 1 {
		t.Errorf("after three pages back: %d entries, %d distinct, burst-9203 %d times", r.Items, r.Distinct, r.Last)
	}
	t.Logf("50,000 history entries + 10,000 updates + 5 MiB: shown in %v (the transport's share included); worst frame after %v; DOM entries %d",
		loaded, worst, r.Items)
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors: %v", pr)
	}
}

// A dropped connection: the page reconnects, attaches again with the full
// history and shows every entry once.
func TestPageReconnect(t *testing.T) {
	b := browser.Start(t)
	h := &hubFake{history: 150, burst: 20, dropFirst: true, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := b.NewPage(1280, 900)
	p.Navigate(base + "/?token=" + secret)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	p.Click(`#session-list button[data-session="s1"]`)
	// The tool call t1 comes only on an attach the hub does not drop:
	// burst-19 alone may still be the first connection's.
	p.WaitFor(`document.querySelector('#conn').textContent === 'connected' && document.querySelector('#log').textContent.includes('burst-19') &&
		document.querySelector('#log').textContent.includes('Edit main.go')`, wait)
	h.mu.Lock()
	conns := h.conns
	h.mu.Unlock()
	if conns != 2 {
		t.Fatalf("the page attached %d times, want 2 (once, then after the drop)", conns)
	}
	r := domEntries(t, p, "burst-19")
	// 150 history entries (mode and plan are not log entries), the tool
	// call t1 and 20 burst tool calls: 171 entries, each once.
	if r.Items != 171 || r.Distinct != 171 || r.Last != 1 {
		t.Errorf("after the reconnect: %d entries, %d distinct, the last %d times; want 171 each once", r.Items, r.Distinct, r.Last)
	}
}

type entries struct{ Items, Distinct, Last int }

// domEntries counts the log's entries in the DOM, the distinct ones, and
// those holding last.
func domEntries(t *testing.T, p *browser.Page, last string) entries {
	t.Helper()
	var r entries
	q, _ := json.Marshal(last)
	if err := p.Eval(`(() => { const t = [...document.querySelectorAll('#log > li')].map(e => e.textContent);
		return {Items: t.length, Distinct: new Set(t).size, Last: t.filter(s => s.includes(`+string(q)+`)).length}; })()`, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPageChunkRate measures the browser's share of a stream: the scripted
// hub sends ACP_PAGE_BENCH_CHUNKS (default 10,000) agent_message_chunk
// updates of 64 bytes as fast as the WebSocket takes them, uncoalesced,
// to a page that watches the session, and the test logs how many a
// second the page parsed and showed (every byte checked). On the loaded
// 2-core machine of issue 31, 30,000 chunks: 650 to 1,200 a second (5,000:
// 2,800), slower as the message grows since each frame lays it out
// again; about 3,800 a second with the rendering taken out. The hub holds
// a page's chunks 16 ms (_acp-router/watch) for that reason. Run:
//
//	ACP_PAGE_BENCH=1 go test -run TestPageChunkRate -v ./page
func TestPageChunkRate(t *testing.T) {
	if os.Getenv("ACP_PAGE_BENCH") == "" {
		t.Skip("a measurement: ACP_PAGE_BENCH=1 runs it")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("ACP_PAGE_BENCH_CHUNKS")); err == nil && v > 0 {
		n = v
	}
	b := browser.Start(t)
	h := &hubFake{chunks: n, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := b.NewPage(1280, 900)
	p.Navigate(base + "/?token=" + secret)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	start := time.Now()
	p.Click(`#session-list button[data-session="s1"]`)
	last := fmt.Sprintf("#%06d ", n-1)
	// The chunks make one message, followed by the hub's tool call.
	p.WaitFor(`(() => { const e = document.querySelector('#log > li.agent'); return !!e && e.textContent.includes(`+strconv.Quote(last)+`); })()`, 5*time.Minute)
	took := time.Since(start)
	var want strings.Builder
	for i := range n {
		head := fmt.Sprintf("#%06d ", i)
		want.WriteString(head + strings.Repeat("u", 64-len(head)))
	}
	if got := p.String(`document.querySelector('#log > li.agent').textContent`); got != want.String() {
		t.Errorf("the page shows %d bytes, want %d", len(got), want.Len())
	}
	t.Logf("%d chunks of 64 bytes, one message each: shown in %v, %.0f a second", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
}
