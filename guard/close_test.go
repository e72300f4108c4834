package guard

import (
	"context"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/internal/leaktest"
)

// TestCloseStopsWatch: the policy watcher is the guard's: Close stops it
// and returns once it has, though the watcher's context never ends (the
// router's, after Serve returned on the editor's EOF); one started after
// Close does not run.
func TestCloseStopsWatch(t *testing.T) {
	g := newTestGuard(t, "", Options{})
	applied := make(chan struct{}, 1)
	opts := WatchOptions{Running: parseConfig(t, configYAML("")), Applied: func(map[string]string) {
		select {
		case applied <- struct{}{}:
		default:
		}
	}}
	g.StartWatch(context.Background(), opts) // a context that never ends
	<-applied                                // running
	if n := leaktest.Count("guard.(*Guard).watch("); n != 1 {
		t.Fatalf("%d watchers running, want 1", n)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n := leaktest.Count("guard.(*Guard).watch("); n != 0 {
		t.Errorf("%d watchers still run after Close returned", n)
	}
	g.StartWatch(context.Background(), opts)
	g.Watch(context.Background(), opts) // returns at once
	select {
	case <-applied:
		t.Error("a watcher started after Close ran")
	default:
	}
}

// TestCloseJoinsDecisions: a decision given up on (its timeout) goes on
// until the filesystem answers, on a goroutine of the guard's: Close
// waits for it, and what it counted (stuck) is back to zero then.
func TestCloseJoinsDecisions(t *testing.T) {
	fs := newBlockFS("/slow/")
	g := newTestGuard(t, "", Options{FS: fs, DecideTimeout: 50 * time.Millisecond})
	v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/slow/x")})
	if got, want := outcomeOf(v), (outcome{Deny, "builtin", RuleTimeout, "builtin"}); got != want {
		t.Fatalf("Decide = %+v, want %+v", got, want)
	}
	if n := leaktest.Count("guard.(*Guard).decideBounded"); n != 1 {
		t.Errorf("%d decisions running on the blocked resolver, want 1 (no waiter besides)", n)
	}
	time.AfterFunc(100*time.Millisecond, func() { close(fs.release) }) // within closeWait
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n := leaktest.Count("guard.(*Guard).decideBounded"); n != 0 {
		t.Errorf("%d decisions still run after Close returned", n)
	}
	if n := g.stuck.Load(); n != 0 {
		t.Errorf("stuck = %d after the decision ended", n)
	}
}
