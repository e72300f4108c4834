package test

import (
	"path/filepath"
	"strconv"
	"strings"
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
