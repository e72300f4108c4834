package router

import (
	"bytes"
	"context"
	"testing"
)

// TestSessionHistory: hub's attach history (issue 30): the stored updates
// of a live session up to a mark written into the editor's stream at the
// same point, marks of earlier attaches left out; a session/load replays
// no mark; an unknown session is an error.
func TestSessionHistory(t *testing.T) {
	r, e := startRouter(t, Options{})
	sid := e.newSession(t)
	e.mustCall(t, "session/prompt", prompt(sid, "hello"))
	ctx := context.Background()
	count := func(lines [][]byte, s string) int {
		n := 0
		for _, l := range lines {
			if bytes.Contains(l, []byte(s)) {
				n++
			}
		}
		return n
	}
	marks := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.marks
	}
	lines, marked, err := r.SessionHistory(ctx, sid, "m1")
	if err != nil || !marked {
		t.Fatalf("SessionHistory = %v, %v", marked, err)
	}
	if count(lines, "echo: hello") != 1 || count(lines, markMethod) != 0 {
		t.Errorf("first history: %q", lines)
	}
	waitFor(t, func() bool { return marks() == 1 })
	e.mustCall(t, "session/prompt", prompt(sid, "again"))
	lines, _, _ = r.SessionHistory(ctx, sid, "m2")
	if count(lines, "echo: hello") != 1 || count(lines, "echo: again") != 1 || count(lines, markMethod) != 0 {
		t.Errorf("second history: %q", lines)
	}
	waitFor(t, func() bool { return marks() == 2 })
	e.mustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": t.TempDir(), "mcpServers": []any{}})
	waitFor(t, func() bool { return len(e.texts(sid)) == 4 })
	if n := marks(); n != 2 {
		t.Errorf("session/load replayed %d marks", n-2)
	}
	if _, marked, err := r.SessionHistory(ctx, "no-such", "m3"); err == nil || marked {
		t.Errorf("unknown session: marked %v, %v", marked, err)
	}
}
