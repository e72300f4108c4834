package test

import (
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// lifetimeBound is how long an agent and its children may outlive the
// router. It must stay below the 10 s after which the fake agent and its
// sleepers exit by themselves once orphaned (orphanWatchdog): a longer bound
// would let that hygiene hide a leak.
const lifetimeBound = 5 * time.Second

// TestLifetime pins DESIGN §7: however the router ends, no agent and no
// grandchild outlives it. The agent is busy in a turn: it has started two
// tools that ignore SIGTERM (one in its process group, one in a session of
// its own, as a daemonizing tool does), then stops reading stdin (it never
// sees EOF); it ignores SIGTERM itself, and SIGPIPE as Node.js does. Then the router ends each way an
// editor or a crash ends it.
//
// The router has no test-only panic trigger, so "abort" uses SIGQUIT: the Go
// runtime prints every goroutine and exits 2 without running deferred
// cleanup, as an unrecovered panic does.
func TestLifetime(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		// Elsewhere the router's watchdog has no subreaper: a tool that left
		// the agent's process group (child-setsid) is out of its reach.
		t.Skip("the agent's children outside its process group are only tracked on Linux (subreaper)")
	}
	signal := func(sig syscall.Signal, group bool) func(*testing.T, *Editor) {
		return func(t *testing.T, e *Editor) {
			pid := e.cmd.Process.Pid
			if group {
				pid = -pid
			}
			if err := syscall.Kill(pid, sig); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		end  func(*testing.T, *Editor)
	}{
		{"stdin-EOF", func(t *testing.T, e *Editor) { _ = e.CloseStdin() }},
		{"SIGTERM", signal(syscall.SIGTERM, false)},
		{"SIGKILL", signal(syscall.SIGKILL, false)},
		{"SIGKILL-group", signal(syscall.SIGKILL, true)},
		{"abort", signal(syscall.SIGQUIT, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := func(name string) string { return filepath.Join(dir, name+".pid") }
			no := false
			cfg := writeConfig(t, routerYAML(t, []string{
				fakeAgentYAML("busy", fakeOpts{PidFile: pidFile("agent"), ExitOnEOF: &no, IgnoreSIGTERM: true}),
			}))
			// Its own process group, so that the test can kill that group.
			e := StartRouter(t, cfg, nil, withOwnProcessGroup())
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, dir)
			go func() {
				_, _ = e.Prompt(waitTimeout, sid, "ignore-sigpipe\nchild "+pidFile("child")+"\nchild-setsid "+pidFile("daemon")+"\nsay busy\nhang")
			}()
			e.WaitText(t, sid, "busy")
			pids := map[string]int{}
			for _, name := range []string{"agent", "child", "daemon"} {
				pids[name] = readPidFile(t, pidFile(name))
			}
			t.Cleanup(func() { // leave nothing behind when the router did not
				for _, p := range pids {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
			for name, p := range pids {
				if !processAlive(p) {
					t.Fatalf("%s (pid %d) is not running before the router ends", name, p)
				}
			}

			tc.end(t, e)
			code, elapsed, ok := e.Wait(15 * time.Second)
			if !ok {
				t.Fatal("the router did not exit within 15 s")
			}
			t.Logf("router exited %d after %v", code, elapsed)
			deadline := time.Now().Add(lifetimeBound)
			for name, p := range pids {
				if !waitDead(p, time.Until(deadline)) {
					t.Errorf("%s (pid %d) is alive %v after the router exited", name, p, lifetimeBound)
				}
			}
		})
	}
}
