package page

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/internal/browser"
)

// openSession opens the page with token at width and the session s1,
// and waits for the role the page shows.
func openSession(t *testing.T, b *browser.Browser, base, token string, width int, role string) *browser.Page {
	t.Helper()
	p := b.NewPage(width, map[int]int{390: 844, 1280: 900}[width])
	p.Navigate(base + "/?token=" + token)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	p.Click(`#session-list button[data-session="s1"]`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer' && document.querySelector('#log').textContent.includes('Edit main.go')`, wait)
	if role == "controller" {
		p.WaitFor(`!document.querySelector('#take').hidden`, wait)
		p.Click(`#take`)
		p.WaitFor(`document.querySelector('#s-role').textContent === 'controller'`, wait)
	}
	return p
}

func toolCall(id, kind, title, status string, rawInput any, content ...any) map[string]any {
	u := map[string]any{"sessionUpdate": "tool_call", "toolCallId": id, "kind": kind, "title": title, "status": status, "content": content}
	if rawInput != nil {
		u["rawInput"] = rawInput
	}
	return u
}

// lines returns the text of each element matching selector inside the
// log entry of tool call title.
func lines(t *testing.T, p *browser.Page, title, selector string) []string {
	t.Helper()
	var out []string
	q, _ := json.Marshal(title)
	s, _ := json.Marshal(selector)
	if err := p.Eval(`(() => { const li = [...document.querySelectorAll('#log li.tool')].find(l => l.querySelector('.head').textContent.includes(`+string(q)+`));
		return li ? [...li.querySelectorAll(`+string(s)+`)].map(e => e.textContent) : null; })()`, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Tool calls as issue 31 asks: kind, title, status, a diff as a unified
// diff (hunks with context, - and + lines, the path; a new file; too
// large a diff as both texts whole), the command line (a string, an argv
// array, an execute call's title) and its output, or where the output is
// when the editor's terminal has it.
func TestPageToolCalls(t *testing.T) {
	b := browser.Start(t)
	var big1, big2 strings.Builder
	for i := range 15000 {
		fmt.Fprintf(&big1, "line %d\n", i)
		fmt.Fprintf(&big2, "line %d changed\n", i)
	}
	h := &hubFake{answers: make(chan json.RawMessage, 1), updates: []map[string]any{
		toolCall("e1", "edit", "Edit util.go", "in_progress", nil, map[string]any{"type": "diff", "path": "/work/project/util.go",
			"oldText": "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n",
			"newText": "one\ntwo\nthree\nfour\nFIVE\nsix\nseven\neight\nten\n"}),
		toolCall("e2", "edit", "Create new.go", "completed", nil, map[string]any{"type": "diff", "path": "/work/project/new.go",
			"oldText": nil, "newText": "package p\n\nfunc F() {}\n"}),
		// The same line twice, once removed: a diff by sets of lines sees
		// no change.
		toolCall("e3", "edit", "Dedupe", "completed", nil, map[string]any{"type": "diff", "path": "/work/project/x.txt",
			"oldText": "x\nx\ny\n", "newText": "x\ny\n"}),
		toolCall("e4", "edit", "Rewrite big.txt", "completed", nil, map[string]any{"type": "diff", "path": "/work/project/big.txt",
			"oldText": big1.String(), "newText": big2.String()}),
		toolCall("x1", "execute", "Run the tests", "completed", map[string]any{"command": []string{"bash", "-lc", "go test ./... && echo 'ok'"}},
			map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": "ok  \tpkg\t0.1s\n<b>PASS</b>"}}),
		toolCall("x2", "execute", "Build", "failed", map[string]any{"command": "make build"},
			map[string]any{"type": "terminal", "terminalId": "term-7"}),
		toolCall("x3", "execute", "ls -la", "pending", nil),
		// The mode as agents with config options say it (grouped options).
		{"sessionUpdate": "config_option_update", "configOptions": []any{
			map[string]any{"id": "model", "category": "model", "type": "select", "currentValue": "m1", "options": []any{map[string]any{"value": "m1", "name": "Model One"}}},
			map[string]any{"id": "mode", "category": "mode", "type": "select", "currentValue": "plan", "options": []any{
				map[string]any{"group": "g", "name": "Modes", "options": []any{map[string]any{"value": "default", "name": "Default"}, map[string]any{"value": "plan", "name": "Plan Mode"}}}}},
		}},
	}}
	base := startPage(t, "", h.serve)
	p := openSession(t, b, base, secret, 1280, "observer")
	p.WaitFor(`document.querySelector('#log').textContent.includes('ls -la')`, wait)

	want := []string{"@@ -2,9 +2,8 @@", "  two", "  three", "  four", "- five", "+ FIVE", "  six", "  seven", "  eight", "- nine", "  ten"}
	if got := lines(t, p, "Edit util.go", ".hunks > span"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("diff of util.go:\n got %q\nwant %q", got, want)
	}
	if got := lines(t, p, "Edit util.go", ".hunks > .del, .hunks > .ins"); strings.Join(got, "|") != "- five|+ FIVE|- nine" {
		t.Errorf("styled lines %q", got)
	}
	if got := lines(t, p, "Edit util.go", ".diff-path"); len(got) != 1 || got[0] != "/work/project/util.go" {
		t.Errorf("diff header %q", got)
	}
	if got := lines(t, p, "Edit util.go", ".head .status"); len(got) != 1 || got[0] != "in progress" {
		t.Errorf("status %q", got)
	}
	if got := lines(t, p, "Create new.go", ".diff-path, .hunks > span"); strings.Join(got, "|") != "new file/work/project/new.go|@@ -0,0 +1,3 @@|+ package p|+ |+ func F() {}" {
		t.Errorf("new file %q", got)
	}
	if got := lines(t, p, "Dedupe", ".hunks > span"); strings.Join(got, "|") != "@@ -1,3 +1,2 @@|  x|- x|  y" {
		t.Errorf("a repeated line removed: %q", got)
	}
	if got := lines(t, p, "Rewrite big.txt", ".whole"); len(got) != 2 || got[0] != big1.String() || got[1] != big2.String() ||
		len(lines(t, p, "Rewrite big.txt", ".hunks")) != 0 {
		t.Errorf("a 30,000-line diff: %d whole texts, want old and new whole", len(got))
	}
	if got := lines(t, p, "Run the tests", ".cmd, .out"); strings.Join(got, "|") != `$ bash -lc 'go test ./... && echo '\''ok'\'''|`+"ok  \tpkg\t0.1s\n<b>PASS</b>" {
		t.Errorf("argv command and output %q", got)
	}
	if got := lines(t, p, "Build", ".cmd, .term, .status"); strings.Join(got, "|") != "failed|$ make build|output in the editor's terminal (term-7)" {
		t.Errorf("command and terminal %q", got)
	}
	if got := lines(t, p, "ls -la", ".cmd"); len(got) != 1 || got[0] != "$ ls -la" {
		t.Errorf("execute without rawInput: %q", got)
	}
	if got := p.String(`document.querySelector('#s-mode').textContent`); got != "mode Plan Mode" {
		t.Errorf("the mode from a config_option_update: %q, want \"mode Plan Mode\"", got)
	}
	var markup int
	p.Eval(`document.querySelectorAll('#log b').length`, &markup)
	if markup != 0 {
		t.Errorf("tool output became markup")
	}
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page errors: %v", pr)
	}
}

// A token that may only observe is not offered "Take control" (the hub
// would refuse it), and a pending permission request shows read-only,
// waiting for a controller; a token that may control is offered both.
func TestPageObserverToken(t *testing.T) {
	b := browser.Start(t)
	h := &hubFake{waiting: true, script: make(chan any, 8), answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := openSession(t, b, base, watcher, 390, "observer")
	var r struct {
		Take    bool
		Note    string
		Options int
		Me      string
	}
	view := `(() => ({Take: getComputedStyle(document.querySelector('#take')).display !== 'none',
		Note: document.querySelector('#asks').textContent, Options: document.querySelectorAll('#session button.option, .ask').length}))()`
	if err := p.Eval(view, &r); err != nil {
		t.Fatal(err)
	}
	if r.Take {
		t.Errorf("an observer token is offered Take control")
	}
	p.WaitFor(`document.querySelector('#asks .waiting')`, wait)
	if err := p.Eval(view, &r); err != nil {
		t.Fatal(err)
	}
	if r.Take || !strings.Contains(r.Note, "waiting for a controller") || r.Options != 0 {
		t.Errorf("an observer token: %+v, want no Take control, the request read-only", r)
	}
	if err := p.Eval(`fetch('/api/me').then(r => r.json()).then(m => m.name + ' ' + m.role)`, &r.Me); err != nil || r.Me != "carol observer" {
		t.Errorf("/api/me: %q %v", r.Me, err)
	}
	// Answered elsewhere: the note goes.
	h.mu.Lock()
	h.waiting = false
	h.mu.Unlock()
	h.script <- map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1", "update": map[string]any{
		"sessionUpdate": "permission_resolved", "toolCallId": "t2", "outcome": "selected", "chosenOptionId": "allow", "resolvedBy": map[string]any{"name": "alice"}}}}
	p.WaitFor(`!document.querySelector('#asks .waiting') && document.querySelector('#log').textContent.includes('answered by alice')`, wait)
	h.mu.Lock()
	roles := strings.Join(h.roles, ",")
	h.mu.Unlock()
	if roles != "observer" {
		t.Errorf("attached as %s", roles)
	}

	// alice may control: Take control is there, and the note says so.
	h.mu.Lock()
	h.waiting = true
	h.mu.Unlock()
	p2 := openSession(t, b, base, secret, 1280, "observer")
	p2.WaitFor(`document.querySelector('#asks .waiting')`, wait)
	if err := p2.Eval(view, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Take || !strings.Contains(r.Note, "take control to answer") {
		t.Errorf("a controller token watching: %+v", r)
	}
}

// shiftObserver collects every layout-shift entry from now on, those
// within 500 ms of an input too (CLS leaves them out; here they count).
const shiftObserver = `(() => { window.shifts = []; new PerformanceObserver(l => { for (const e of l.getEntries())
	window.shifts.push({Value: e.value, Input: e.hadRecentInput, Phase: window.phase || '', Sources: e.sources.map(s => s.node ? (s.node.id || s.node.className || s.node.nodeName) : '?').join(',')}); })
	.observe({type: 'layout-shift'}); return true; })()`

type shift struct {
	Phase   string
	Value   float64
	Input   bool
	Sources string
}

// No layout shift while a reply streams and a permission request
// arrives and is answered (issue 31 point 6), measured by the browser's
// Layout Instability API at 390 and 1280 px: every entry counts, those
// after an input too. A reader scrolled up is not moved by what arrives.
func TestPageNoLayoutShift(t *testing.T) {
	b := browser.Start(t)
	for _, width := range []int{390, 1280} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			h := &hubFake{script: make(chan any, 512), answers: make(chan json.RawMessage, 1)}
			base := startPage(t, "", h.serve)
			p := openSession(t, b, base, secret, width, "controller")
			p.WaitFor(`document.querySelector('#plan').textContent.includes('run the tests')`, wait)
			time.Sleep(300 * time.Millisecond) // the attach's frames
			if err := p.Eval(shiftObserver, nil); err != nil {
				t.Fatal(err)
			}
			update := func(u map[string]any) {
				h.script <- map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1", "update": u}}
			}
			stream := func(tag string, n int) {
				p.Eval(`window.phase = `+fmt.Sprintf("%q", tag), nil)
				for i := range n {
					s := fmt.Sprintf("%s word %d of a reply that streams, **bold** and `code` ", tag, i)
					if i%7 == 6 {
						s += "\n\n- a list item\n- another\n\n"
					}
					update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": s}})
					time.Sleep(15 * time.Millisecond)
				}
			}
			// A short log first: the request arrives while the log does not
			// fill the window, then the reply grows under it, past the
			// window's end, and the plan changes.
			update(map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": "go on"}})
			stream("first", 3)
			h.script <- map[string]any{"jsonrpc": "2.0", "id": "ask-2", "method": "session/request_permission", "params": map[string]any{
				"sessionId": "s1", "toolCall": map[string]any{"toolCallId": "t9", "title": "Edit lib.go", "kind": "edit"},
				"options": []any{map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
					map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}}
			p.Eval(`window.phase = 'ask'`, nil)
			p.WaitFor(`document.querySelector('.ask button[data-option="allow"]')`, wait)
			stream("while asked", 60)
			update(map[string]any{"sessionUpdate": "plan", "entries": []any{
				map[string]any{"content": "run the tests", "status": "completed", "priority": "high"},
				map[string]any{"content": "fix lib.go", "status": "in_progress", "priority": "high"},
				map[string]any{"content": "run the tests again", "status": "pending", "priority": "high"}}})
			update(toolCall("t9", "edit", "Edit lib.go", "pending", nil, map[string]any{"type": "diff", "path": "/work/project/lib.go", "oldText": "a\nb\nc\n", "newText": "a\nB\nc\n"}))
			stream("still asked", 20)
			time.Sleep(200 * time.Millisecond)
			p.Eval(`window.phase = 'answer'`, nil)
			p.Click(`.ask button[data-option="allow"]`)
			select {
			case <-h.answers:
			case <-time.After(wait):
				t.Fatal("no answer")
			}
			update(map[string]any{"sessionUpdate": "permission_resolved", "toolCallId": "t9", "outcome": "selected", "chosenOptionId": "allow", "resolvedBy": map[string]any{"name": "alice"}})
			update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "t9", "status": "completed"})
			stream("after", 30)
			p.WaitFor(`document.querySelector('#log').textContent.includes('after word 29') && !document.querySelector('.ask')`, wait)
			// Past the window of 200 entries: the earliest leave the DOM as
			// new ones come, and leave their height.
			p.Eval(`window.phase = 'window'`, nil)
			for i := range 230 {
				update(toolCall(fmt.Sprintf("w%d", i), "read", fmt.Sprintf("Read file-%d.go", i), "completed", nil))
				time.Sleep(3 * time.Millisecond)
			}
			p.WaitFor(`document.querySelector('#log').textContent.includes('Read file-229.go')`, wait)
			if r := domEntries(t, p, "Read file-229.go"); r.Items > 250 || r.Last != 1 {
				t.Errorf("%d entries in the DOM after 230 more, the last %d times", r.Items, r.Last)
			}

			// A reader scrolled up: what arrives does not move what they read.
			var before, after struct{ Y, Top float64 }
			where := `(() => { const e = [...document.querySelectorAll('#log > li')][3]; return {Y: window.scrollY, Top: e.getBoundingClientRect().top}; })()`
			p.Eval(`(() => { const e = [...document.querySelectorAll('#log > li')][3]; window.scrollTo(0, e.offsetTop - 100); return true; })()`, nil)
			time.Sleep(100 * time.Millisecond)
			p.Eval(where, &before)
			stream("unread", 30)
			p.WaitFor(`document.querySelector('#log').textContent.includes('unread word 29')`, wait)
			time.Sleep(200 * time.Millisecond)
			p.Eval(where, &after)
			if before != after {
				t.Errorf("a reader scrolled up was moved: %+v then %+v", before, after)
			}

			var shifts []shift
			if err := p.Eval(`new Promise(r => setTimeout(() => r(window.shifts), 300))`, &shifts); err != nil {
				t.Fatal(err)
			}
			var sum, noInput float64
			for _, s := range shifts {
				sum += s.Value
				if !s.Input {
					noInput += s.Value
				}
			}
			t.Logf("%d px: layout shift %.4f (%.4f without recent input) over %d entries: %+v", width, sum, noInput, len(shifts), shifts)
			if sum != 0 {
				t.Errorf("%d px: layout shift %.4f while streaming and answering, want 0", width, sum)
			}
			// After the measure: a full-page capture resizes the view.
			shot(t, p, artifactDir(t), "streamed", width)
		})
	}
}

// The Markdown subset renders as nodes (headings, lists, code, bold,
// italics), a link is text that shows its URL and never an anchor (a
// javascript: URL included), and an agent's HTML, script and bidi
// controls stay text.
func TestPageMarkdown(t *testing.T) {
	b := browser.Start(t)
	md := "# Title\n## Sub\nSome *italic* and **bold** and `x < y`.\n\n- one\n- two\n\n1. first\n2. second\n\n```go\nfmt.Println(\"<b>x</b>\")\n```\n\n" +
		"See [the docs](https://example.com/docs) and [click me](javascript:alert(document.cookie)) and <a href=\"javascript:alert(2)\">a</a>.\n\n" + hostile
	h := &hubFake{say: []string{md}, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := openSession(t, b, base, secret, 390, "observer")
	p.WaitFor(`document.querySelector('#log').textContent.includes('gnp.exe')`, wait)
	checkText(t, p)
	var r struct {
		H3, H4, Em, Strong, Code, Pre, Text string
		UL, OL, Anchors, Clickable          int
	}
	if err := p.Eval(`(() => { const m = document.querySelector('#log li.agent .md'); const q = s => (m.querySelector(s) || {}).textContent; return {
		H3: q('h3'), H4: q('h4'), Em: q('em'), Strong: q('strong'), Code: q('p code'), Pre: q('pre'), Text: m.textContent,
		UL: m.querySelectorAll('ul > li').length, OL: m.querySelectorAll('ol > li').length,
		Anchors: document.querySelectorAll('main a, main [href], main [onclick]').length,
		Clickable: [...m.querySelectorAll('*')].filter(e => e.tabIndex >= 0 || getComputedStyle(e).cursor === 'pointer').length }; })()`, &r); err != nil {
		t.Fatal(err)
	}
	if r.H3 != "Title" || r.H4 != "Sub" || r.Em != "italic" || r.Strong != "bold" || r.Code != "x < y" || r.Pre != `fmt.Println("<b>x</b>")` || r.UL != 2 || r.OL != 2 {
		t.Errorf("the Markdown subset: %+v", r)
	}
	for _, want := range []string{"the docs (https://example.com/docs)", "click me (javascript:alert(document.cookie))", `<a href="javascript:alert(2)">a</a>`} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("the message lacks %q as text: %q", want, r.Text)
		}
	}
	if r.Anchors != 0 || r.Clickable != 0 {
		t.Errorf("%d anchors and %d clickable elements in the agent's text", r.Anchors, r.Clickable)
	}
}

// focused describes the focused element and whether it shows a focus
// ring: :focus-visible with an outline at least 2 px wide whose colour
// has a contrast of 3:1 or more with what is behind it (WCAG 2.2's
// focus appearance).
const focused = `(() => { const e = document.activeElement; if (!e || e === document.body) return {Name: ''};
	const s = getComputedStyle(e);
	const rgb = c => c.match(/[\d.]+/g).map(Number);
	const lum = c => { const v = rgb(c).slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
		return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
	let bg = 'rgb(255, 255, 255)';
	for (let a = e.parentElement; a; a = a.parentElement) { const c = getComputedStyle(a).backgroundColor; const v = rgb(c); if (v.length < 4 || v[3] > 0) { bg = c; break; } }
	const l1 = lum(s.outlineColor), l2 = lum(bg), contrast = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
	return {Name: e.id || (e.dataset && (e.dataset.option || e.dataset.session)) || e.name || e.textContent.trim().slice(0, 20) || e.tagName,
		Ring: e.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2 && contrast >= 3, Contrast: contrast}; })()`

// controls are the names of the page's visible, enabled controls.
const controls = `[...document.querySelectorAll('button, input, select, summary, a[href], [tabindex]')]
	.filter(e => !e.disabled && e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
	.map(e => e.id || (e.dataset && (e.dataset.option || e.dataset.session)) || e.name || e.textContent.trim().slice(0, 20) || e.tagName)`

type focus struct {
	Name     string
	Ring     bool
	Contrast float64
}

// tabTo presses Tab until the focused control is name (at most max
// presses), failing on a focused control without a visible focus ring.
func tabTo(t *testing.T, p *browser.Page, name string, max int) {
	t.Helper()
	var seen []string
	for range max {
		p.Key("Tab")
		var f focus
		if err := p.Eval(focused, &f); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, f.Name)
		if f.Name != "" && !f.Ring {
			t.Errorf("%s has the focus and no visible focus ring (contrast %.1f)", f.Name, f.Contrast)
		}
		if f.Name == name {
			return
		}
	}
	t.Fatalf("%d Tabs never reached %s: %q", max, name, seen)
}

// cycle tabs through the whole page and fails unless every visible
// control was reached, each with a focus ring.
func cycle(t *testing.T, p *browser.Page) {
	t.Helper()
	var all []string
	if err := p.Eval(controls, &all); err != nil {
		t.Fatal(err)
	}
	reached := map[string]bool{}
	for range 2*len(all) + 2 {
		p.Key("Tab")
		var f focus
		p.Eval(focused, &f)
		if f.Name != "" && !f.Ring {
			t.Errorf("%s has the focus and no visible focus ring (contrast %.1f)", f.Name, f.Contrast)
		}
		reached[f.Name] = true
	}
	for _, c := range all {
		if !reached[c] {
			t.Errorf("%s is not reachable with Tab (reached %v)", c, reached)
		}
	}
}

// The page with the keyboard alone: every control is reached by Tab with
// a visible focus ring; Enter opens a session, Space takes control, Tab
// reaches Allow and Enter answers the agent.
func TestPageKeyboard(t *testing.T) {
	b := browser.Start(t)
	h := &hubFake{say: []string{"Hello"}, ask: true, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, writeAudit(t, map[string]any{"time": time.Now().UTC(), "decision": "allow", "rule": "r1"}), h.serve)
	p := b.NewPage(1280, 900)
	p.Navigate(base + "/?token=" + secret)
	p.WaitFor(`document.querySelector('#session-list button[data-session="s1"]')`, wait)
	tabTo(t, p, "s1", 10)
	p.Key("Enter")
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer' && !document.querySelector('#take').hidden`, wait)
	tabTo(t, p, "take", 10)
	p.Key(" ")
	p.WaitFor(`document.querySelector('.ask button[data-option="allow"]')`, wait)
	cycle(t, p)
	tabTo(t, p, "allow", 20)
	p.Key("Enter")
	select {
	case res := <-h.answers:
		if !strings.Contains(string(res), `"optionId":"allow"`) {
			t.Errorf("answer %s", res)
		}
	case <-time.After(wait):
		t.Fatal("Enter on Allow never answered")
	}
	p.WaitFor(`!document.querySelector('.ask') && document.querySelector('#log').textContent.includes('tests pass')`, wait)

	// The plan opens with the keyboard; the decisions view is usable too.
	tabTo(t, p, "plan-summary", 20)
	p.Key("Enter")
	p.WaitFor(`document.querySelector('#plan').open`, wait)
	tabTo(t, p, "tab-decisions", 20)
	p.Key(" ")
	p.WaitFor(`document.querySelector('#timeline li')`, wait)
	cycle(t, p)
}

// On a 390 px screen an open session has the screen to itself, so that
// the list's changes never move it; "All sessions" closes it (detached)
// and goes back to the list, the focus on the session left. At 1280 px
// both show and the button does not.
func TestPageNarrow(t *testing.T) {
	b := browser.Start(t)
	h := &hubFake{say: []string{"Hello"}, answers: make(chan json.RawMessage, 1)}
	base := startPage(t, "", h.serve)
	p := openSession(t, b, base, secret, 390, "observer")
	shown := func(sel string) bool {
		var v bool
		p.Eval(`getComputedStyle(document.querySelector('`+sel+`')).display !== 'none' && !!document.querySelector('`+sel+`').getClientRects().length`, &v)
		return v
	}
	if shown("#sessions") || !shown("#to-list") {
		t.Errorf("390 px with a session open: list shown %v, All sessions shown %v", shown("#sessions"), shown("#to-list"))
	}
	p.Eval(`document.querySelector('#to-list').focus()`, nil)
	p.Key("Enter")
	p.WaitFor(`document.querySelector('#session').hidden && document.activeElement && document.activeElement.dataset.session === 's1'`, wait)
	if !shown("#sessions") {
		t.Errorf("All sessions did not bring the list back")
	}
	h.mu.Lock()
	detached := h.detached
	h.mu.Unlock()
	if detached != 1 {
		t.Errorf("%d detaches, want the session left detached", detached)
	}
	p.Resize(1280, 900)
	p.Click(`#session-list button[data-session="s1"]`)
	p.WaitFor(`document.querySelector('#s-role').textContent === 'observer'`, wait)
	if !shown("#sessions") || shown("#to-list") {
		t.Errorf("1280 px: list shown %v, All sessions shown %v", shown("#sessions"), shown("#to-list"))
	}
}
