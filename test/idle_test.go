package test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIdleAgent pins idle_timeout (issue 5 req. 7) end to end: a turn
// longer than the timeout completes on the same process (a running turn is
// activity); after it, the idle agent is stopped (its process is gone,
// logged at info, never as a failure); the next prompt in the same session
// starts a new process, which gets the session re-attached with the
// earlier turn in its brief.
func TestIdleAgent(t *testing.T) {
	skipShort(t, "waits out idle_timeout")
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "idler.pid")
	logFile := filepath.Join(dir, "idler.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("idler", fakeOpts{PidFile: pidFile, LogFile: logFile}, "idle_timeout: 1s")},
		"default: idler",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	pid1 := readPidFile(t, pidFile)

	e.MustPrompt(t, sid, "say first-turn-begins\nsleep 3s\nsay first-turn-ends", "end_turn")
	if got := e.Texts(sid); strings.Join(got, ",") != "first-turn-begins,first-turn-ends" {
		t.Errorf("chunks of the long turn: %q", got)
	}
	if !processAlive(pid1) {
		t.Fatalf("the agent (pid %d) was stopped during a turn longer than its idle_timeout; router log:\n%s", pid1, e.Stderr())
	}

	// Idle from here: 1 s, a tick, and the shutdown sequence (the fake
	// agent exits when its stdin closes).
	if !waitDead(pid1, waitTimeout) {
		t.Fatalf("the idle agent (pid %d) is still running %v after its turn; router log:\n%s", pid1, waitTimeout, e.Stderr())
	}
	waitRouterLog(t, e, "agent idle; stopped")
	if err := os.Remove(pidFile); err != nil {
		t.Fatal(err)
	}

	m, err := e.Prompt(waitTimeout, sid, "say second-turn\nprompt-text")
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	pid2 := readPidFile(t, pidFile)
	if pid2 == pid1 {
		t.Errorf("the second prompt ran on pid %d, the stopped process", pid2)
	}
	texts := e.Texts(sid)
	if len(texts) != 4 || texts[2] != "second-turn" {
		t.Fatalf("chunks: %q, want the second turn's two after the first's", texts)
	}
	if !strings.Contains(texts[3], "first-turn-ends") {
		t.Errorf("the restarted agent's prompt %q lacks the earlier turn: the session was not re-attached with its history", texts[3])
	}
	starts, news := 0, 0
	for _, l := range agentLog(logFile) {
		switch {
		case strings.HasPrefix(l, "start "):
			starts++
		case l == "session/new":
			news++
		}
	}
	if starts != 2 || news != 2 {
		t.Errorf("fake agent log: %d starts and %d session/new, want 2 of each:\n%s", starts, news, strings.Join(agentLog(logFile), "\n"))
	}
	for _, bad := range []string{"agent exited unexpectedly", "agent failed", "restarted too often", "[ERROR]"} {
		if strings.Contains(e.Stderr(), bad) {
			t.Errorf("the router log reports a failure (%q) for an idle stop:\n%s", bad, e.Stderr())
		}
	}
	if !processAlive(pid2) {
		t.Errorf("the restarted agent (pid %d) is gone right after its turn", pid2)
	}
}

// TestIdleCheck pins that `acp-router check` shows idle_timeout when set,
// and only then.
func TestIdleCheck(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("sleepy", fakeOpts{}, "idle_timeout: 90s"),
		fakeAgentYAML("awake", fakeOpts{}),
	}))
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	// sleepy is listed first, with its details on the line after its name.
	lines := strings.Split(out, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  sleepy ") })
	if i < 0 || i+1 >= len(lines) || !strings.Contains(lines[i+1], "idle_timeout=1m30s") || strings.Count(out, "idle_timeout=") != 1 {
		t.Errorf("check output: want idle_timeout=1m30s in sleepy's details only:\n%s", out)
	}
}

// waitRouterLog waits until the router's stderr contains s.
func waitRouterLog(t *testing.T, e *Editor, s string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(e.Stderr(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("router log: no %q within %v:\n%s", s, waitTimeout, e.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
