package test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestShutdown pins DESIGN §7 shutdown: when the editor closes stdin, every
// agent gets stdin closed → 2 s → SIGTERM to its process group → 2 s →
// SIGKILL to the group (also when the agent itself already exited), and the
// router exits 0. One agent exits on EOF; one ignores both EOF and SIGTERM
// (so the router exits after about 4 s); one leaves a SIGTERM-ignoring
// grandchild in its group. Afterwards no process of theirs is alive.
func TestShutdown(t *testing.T) {
	skipShort(t, "waits out the shutdown's two 2 s graces")
	t.Parallel()
	dir := t.TempDir()
	pid := func(name string) string { return filepath.Join(dir, name+".pid") }
	no := false
	logf := func(name string) string { return filepath.Join(dir, name+".log") }
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("polite", fakeOpts{PidFile: pid("polite"), LogFile: logf("polite")}),
			fakeAgentYAML("stubborn", fakeOpts{PidFile: pid("stubborn"), LogFile: logf("stubborn"), ExitOnEOF: &no, IgnoreSIGTERM: true}),
			fakeAgentYAML("parent", fakeOpts{PidFile: pid("parent"), LogFile: logf("parent"), Grandchild: true, GrandchildPidFile: pid("grandchild")}),
		},
		"default: polite",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	// initialize is answered once the default agent is up: the others may
	// still be starting. Each must have answered its own before the
	// editor leaves, or an answer written after the router stopped reading
	// ends that agent (SIGPIPE) before the shutdown sequence does (seen on
	// a loaded machine: the stubborn agent gone at 2.4 s).
	for _, name := range []string{"polite", "stubborn", "parent"} {
		waitAgentLog(t, logf(name), waitTimeout, "initialize at "+name, func(l string) bool { return l == "initialize" })
	}
	time.Sleep(200 * time.Millisecond) // its answer follows the log line at once
	pids := map[string]int{}
	for _, name := range []string{"polite", "stubborn", "parent", "grandchild"} {
		pids[name] = readPidFile(t, pid(name))
	}
	t.Cleanup(func() { // leave nothing behind when the router did not
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	for name, p := range pids {
		if !processAlive(p) {
			t.Fatalf("%s (pid %d) is not running before shutdown", name, p)
		}
	}

	if err := e.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	code, elapsed, ok := e.Wait(10 * time.Second)
	if !ok {
		t.Fatal("the router did not exit within 10 s of stdin EOF")
	}
	t.Logf("router exited %d after %v", code, elapsed)
	if code != 0 {
		t.Errorf("router exit code %d, want 0", code)
	}
	if elapsed < 4*time.Second || elapsed > 5500*time.Millisecond {
		t.Errorf("router exited %v after stdin EOF, want 4 s to 5.5 s (2 s + 2 s grace, then SIGKILL)", elapsed)
	}
	for name, p := range pids {
		if !waitDead(p, time.Second) {
			t.Errorf("%s (pid %d) survived the router", name, p)
		}
	}
}

// TestShutdownLastWords: an agent that writes to stdout while it shuts down
// (after its stdin ends) is still read until it exits, so that it exits as
// it chose and is not killed by SIGPIPE at its first write. Before, the
// router closed the agent's stdout with its stdin: the agent died at once
// and never logged "exit clean".
func TestShutdownLastWords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logf := filepath.Join(dir, "talker.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("talker", fakeOpts{LogFile: logf, LingerOnEOF: "300ms"})},
		"default: talker",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	if err := e.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	code, elapsed, ok := e.Wait(10 * time.Second)
	if !ok {
		t.Fatal("the router did not exit within 10 s of stdin EOF")
	}
	if code != 0 {
		t.Errorf("router exit code %d, want 0", code)
	}
	if elapsed > 4*time.Second {
		// Past the 2 s grace the agent is sent SIGTERM (and would not
		// log "exit clean"); past 4 s, SIGKILL.
		t.Errorf("router exited %v after stdin EOF: the agent, gone in 300 ms, was waited for past its grace", elapsed)
	}
	waitAgentLog(t, logf, waitTimeout, "the agent's clean exit after its last words", func(l string) bool { return l == "exit clean" })
}
