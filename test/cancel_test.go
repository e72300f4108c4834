package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCancelTimeout pins DESIGN §7 "Cancellation" for an agent that ignores
// session/cancel: the cancel reaches the agent; after cancel_timeout (1 s)
// the router answers {"stopReason":"cancelled"} itself; the agent's late
// update and late response never reach the editor; the next prompt is held
// until the old turn really ended (no overlapping turns in the agent).
//
// Run it many times: go test -race -count=50 -run TestCancel ./test/
func TestCancelTimeout(t *testing.T) {
	skipShort(t, "measures the cancel timeout's window (0.7 to 2.5 s)")
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "agent.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("slowpoke", fakeOpts{LogFile: logFile}, "cancel_timeout: 1s")},
		"default: slowpoke",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	first := make(chan *Msg, 1)
	go func() {
		// nocancel comes first: a cancel that overtakes "start" must not
		// end the turn before the agent starts ignoring it.
		m, err := e.Prompt(waitTimeout, sid, "nocancel\nsay start\nsleep 3s\nsay late")
		if err != nil {
			t.Error(err)
		}
		first <- m
	}()
	e.WaitText(t, sid, "start")
	tCancel := time.Now()
	if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}

	m := <-first
	if m == nil {
		t.FailNow()
	}
	requireStop(t, m, "cancelled")
	if d := m.At.Sub(tCancel); d < 700*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("synthetic cancelled answer %v after session/cancel, want about cancel_timeout (1 s)", d)
	}
	waitAgentLog(t, logFile, 2*time.Second, "session/cancel", func(l string) bool { return l == "session/cancel" })

	// The next prompt, sent at once, must not start before the old turn ended.
	m2, err := e.Prompt(waitTimeout, sid, "say second")
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m2, "end_turn")
	second := e.WaitText(t, sid, "second")

	endLine := waitAgentLog(t, logFile, time.Second, "turn-end", func(l string) bool { return strings.HasPrefix(l, "turn-end ") })
	ns, err := strconv.ParseInt(endLine[strings.LastIndexByte(endLine, ' ')+1:], 10, 64)
	if err != nil {
		t.Fatalf("bad log line %q", endLine)
	}
	oldEnd := time.Unix(0, ns)
	if second.At.Before(oldEnd) {
		t.Errorf("the next prompt's first update arrived %v before the cancelled turn really ended", oldEnd.Sub(second.At))
	}
	for _, l := range agentLog(logFile) {
		if strings.HasPrefix(l, "overlap ") {
			t.Errorf("the agent got a prompt while the cancelled turn was still running: %q", l)
		}
	}
	for _, txt := range e.Texts(sid) {
		if txt == "late" {
			t.Errorf("the late update of the cancelled turn reached the editor")
		}
	}
	// A late response to the first prompt would be recorded by the editor
	// as a second response to the same id (checked in cleanup).
}

// TestCancelCooperative pins the ordinary case: an agent that honours
// session/cancel answers "cancelled" itself, promptly, and the session takes
// the next prompt at once.
func TestCancelCooperative(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("polite", fakeOpts{}, "cancel_timeout: 5s")},
		"default: polite",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	first := make(chan *Msg, 1)
	go func() {
		m, err := e.Prompt(waitTimeout, sid, "say start\nsleep 10s\nsay never")
		if err != nil {
			t.Error(err)
		}
		first <- m
	}()
	e.WaitText(t, sid, "start")
	tCancel := time.Now()
	_ = e.Notify("session/cancel", map[string]any{"sessionId": sid})
	m := <-first
	if m == nil {
		t.FailNow()
	}
	requireStop(t, m, "cancelled")
	if d := m.At.Sub(tCancel); d > 2*time.Second {
		t.Errorf("cancel took %v", d)
	}
	e.MustPrompt(t, sid, "say next", "end_turn")
	for _, txt := range e.Texts(sid) {
		if txt == "never" {
			t.Errorf("the cancelled turn went on")
		}
	}
}

// TestCancelRequest pins $/cancel_request (STYLE.md): the editor's is
// forwarded to the agent working on the request, with the agent's id, and
// the agent's answer relayed; the router answers -32800 itself for a
// request it holds (a prompt queued behind a turn), which the agent never
// sees; and the router withdraws its own pending requests to the editor at
// turn end and when the agent crashes.
func TestCancelRequest(t *testing.T) {
	t.Parallel()
	logA := filepath.Join(t.TempDir(), "alpha.log")
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{LogFile: logA})}))
	e := StartRouter(t, cfg, nil)
	var withdrawn sync.Map // editor-side request id → withdrawn
	e.Handle("session/request_permission", func(json.RawMessage) (any, *RPCError) {
		// Never answered by the user: only a withdrawal ends it.
		deadline := time.Now().Add(waitTimeout)
		for time.Now().Before(deadline) {
			n := 0
			withdrawn.Range(func(any, any) bool { n++; return true })
			if n > 0 {
				return nil, &RPCError{Code: -32800, Message: "request cancelled"}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil, &RPCError{Code: -32603, Message: "never withdrawn"}
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	ctx := context.Background()

	// Forwarded: the agent gets $/cancel_request and answers -32800.
	id1, wait1, err := e.Go("session/prompt", promptReq(sid, "sleep 20s"))
	if err != nil {
		t.Fatal(err)
	}
	waitAgentLog(t, logA, waitTimeout, "the prompt", func(l string) bool { return l == "session/prompt" })
	// Held: a second prompt waits behind the first.
	id2, wait2, err := e.Go("session/prompt", promptReq(sid, "say second"))
	if err != nil {
		t.Fatal(err)
	}
	e.Notify("$/cancel_request", map[string]any{"requestId": id2})
	m2, err := wait2(ctx)
	if err != nil || m2.Error == nil || m2.Error.Code != -32800 {
		t.Fatalf("queued prompt after $/cancel_request: %v %v, want -32800 from the router", m2, err)
	}
	e.Notify("$/cancel_request", map[string]any{"requestId": id1})
	m1, err := wait1(ctx)
	if err != nil || m1.Error == nil || m1.Error.Code != -32800 {
		t.Fatalf("running prompt after $/cancel_request: %v %v, want the agent's -32800", m1, err)
	}
	waitAgentLog(t, logA, waitTimeout, "$/cancel_request", func(l string) bool { return strings.HasPrefix(l, "$/cancel_request ") })
	if n := countLines(logA, "session/prompt"); n != 1 {
		t.Errorf("the agent got %d prompts, want 1: the cancelled queued prompt must never reach it", n)
	}

	// Withdrawn at turn end: the agent leaves a permission request pending.
	e.MustPrompt(t, sid, "permission-nowait\nsleep 100ms\nsay done", "end_turn")
	perm := e.Rec.WaitFor(t, waitTimeout, "the permission request", func(m *Msg) bool { return m.Method == "session/request_permission" })
	cancel := e.Rec.WaitFor(t, waitTimeout, "$/cancel_request from the router", func(m *Msg) bool { return m.Method == "$/cancel_request" })
	requireJSON(t, "withdrawn request id", jsonPath(cancel.Params, "requestId"), string(perm.ID))
	withdrawn.Store(string(perm.ID), true)
	waitAgentLog(t, logA, waitTimeout, "the editor's -32800 relayed to the agent", func(l string) bool { return strings.HasPrefix(l, "response ") })

	// Withdrawn when the agent crashes.
	if _, err := e.Prompt(waitTimeout, sid, "permission-nowait\nsleep 100ms\ncrash"); err != nil {
		t.Fatal(err)
	}
	perms := e.Rec.Filter(func(m *Msg) bool { return m.Method == "session/request_permission" })
	if len(perms) != 2 {
		t.Fatalf("%d permission requests, want 2", len(perms))
	}
	e.Rec.WaitFor(t, waitTimeout, "$/cancel_request after the crash", func(m *Msg) bool {
		return m.Method == "$/cancel_request" && jsonEqual(jsonPath(m.Params, "requestId"), perms[1].ID)
	})
}
