//go:build unix

package upstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/leaktest"
)

// startShell starts an agent running an sh script under the watchdog (this
// test binary, hooked in TestMain) and returns its instance once spawned;
// exits receives what OnExit reported.
func startShell(t *testing.T, script string) (*Agent, *Instance, chan error) {
	t.Helper()
	if !watchdogHooked.Load() {
		t.Fatal("TestMain did not call RunWatchdogIfRequested")
	}
	exits := make(chan error, 1)
	a := New(config.Agent{Name: "sh", Command: "sh", Args: []string{"-c", script}, StartupTimeout: waitTimeout, StallTimeout: waitTimeout,
		// The watchdog is this race-enabled binary: it would sleep 1 s at exit.
		Env: map[string]string{"GORACE": "atexit_sleep_ms=0"}},
		Options{KillGrace: 500 * time.Millisecond, OnExit: func(_ *Instance, err error) { exits <- err }})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	inst := a.inst
	a.mu.Unlock()
	t.Cleanup(func() {
		a.Stop()
		<-inst.Exited()
	})
	return a, inst, exits
}

// spawned waits until inst's process exists and returns the agent's pid.
func spawned(t *testing.T, inst *Instance) int {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		inst.mu.Lock()
		pid, cmd := inst.pgid, inst.cmd
		inst.mu.Unlock()
		if cmd != nil {
			if inst.wd == nil || pid == cmd.Process.Pid {
				t.Fatalf("agent pid %d, watchdog %v: want the agent under a watchdog", pid, inst.wd)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent was not spawned")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchdogReportsAgentExit pins that the watchdog changes nothing in how
// an agent's end is reported: the error is the one the agent's own status
// gives when it is a direct child (os.ProcessState), and a start failure
// reads as a direct start's.
func TestWatchdogReportsAgentExit(t *testing.T) {
	t.Parallel()
	direct := func(script string) string {
		err := exec.Command("sh", "-c", script).Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "exited: " + exit.ProcessState.String()
		}
		return "exited with status 0"
	}
	for _, script := range []string{"exit 0", "exit 3", "kill -KILL $$", "kill -TERM $$", "kill -SEGV $$"} {
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			_, inst, exits := startShell(t, script)
			spawned(t, inst)
			select {
			case err := <-exits:
				if want := direct(script); err.Error() != want {
					t.Errorf("OnExit: %q, want %q", err, want)
				}
			case <-time.After(waitTimeout):
				t.Fatal("no exit reported")
			}
		})
	}
	t.Run("not executable", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "agent")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("start %q: %v", path, exec.Command(path).Start())
		a := New(config.Agent{Name: "x", Command: path, StartupTimeout: waitTimeout}, Options{})
		err := a.spawn(&Instance{Agent: a})
		if err == nil || err.Error() != want {
			t.Errorf("spawn: %v, want %s", err, want)
		}
	})
}

// TestWatchdogRouterGone pins what the watchdog does when its lifeline
// closes, as when the router is killed: the agent (which ignores SIGTERM) and
// its child die within KillGrace; on Linux a child that left the agent's
// process group dies too (the watchdog is its subreaper).
func TestWatchdogRouterGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	child, daemon := filepath.Join(dir, "child"), filepath.Join(dir, "daemon")
	script := fmt.Sprintf(`trap "" TERM; sleep 300 & echo $! > %s.tmp; mv %s.tmp %s;`, child, child, child)
	if runtime.GOOS == "linux" {
		script += fmt.Sprintf(` setsid sh -c 'echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 300' &`, daemon, daemon, daemon)
	}
	script += " while :; do sleep 1; done"
	_, inst, exits := startShell(t, script)
	pids := map[string]int{"agent": spawned(t, inst), "child": readPid(t, child)}
	if runtime.GOOS == "linux" {
		pids["daemon"] = readPid(t, daemon)
		if pg, _ := syscall.Getpgid(pids["daemon"]); pg == pids["agent"] {
			t.Fatal("the daemon is in the agent's process group")
		}
	}
	t.Cleanup(func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})

	inst.wd.lifeline.Close() // what the kernel does when the router ends
	select {
	case err := <-exits:
		if want := "exited: signal: killed"; err.Error() != want {
			t.Errorf("OnExit: %q, want %q", err, want)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the watchdog did not end the agent")
	}
	for name, p := range pids {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) && !zombie(p) {
			t.Errorf("%s (pid %d) is alive after the watchdog exited", name, p)
		}
	}
}

// TestWatchdogForwardsSIGTERM pins that a SIGTERM sent to the watchdog alone
// reaches the agent's group, and that SIGHUP and SIGINT do not end it while
// the router lives. The watchdog reports each signal once it handled it: the
// test waits for that report, not for time to pass.
func TestWatchdogForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	a, inst, exits := startShell(t, "while :; do sleep 1; done")
	pid := spawned(t, inst)
	wd := inst.cmd.Process.Pid
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		syscall.Kill(wd, sig)
		if got, want := watchdogReport(t, a, sig), "ignored while the router lives"; got != want {
			t.Fatalf("the watchdog on %v: %q, want %q", sig, got, want)
		}
		if err := syscall.Kill(pid, 0); err != nil || zombie(pid) {
			t.Fatalf("the agent is gone after %v to the watchdog (kill 0: %v)", sig, err)
		}
		select {
		case err := <-exits:
			t.Fatalf("%v ended the agent: %v", sig, err)
		default:
		}
	}
	syscall.Kill(wd, syscall.SIGTERM)
	if got, want := watchdogReport(t, a, syscall.SIGTERM), "forwarded to the agent's process group"; got != want {
		t.Errorf("the watchdog on SIGTERM: %q, want %q", got, want)
	}
	select {
	case err := <-exits:
		if want := "exited: signal: terminated"; err.Error() != want {
			t.Errorf("OnExit: %q, want %q", err, want)
		}
	case <-time.After(waitTimeout):
		t.Fatal("SIGTERM to the watchdog did not end the agent")
	}
}

// watchdogReport waits for the watchdog's report of sig in a's stderr and
// returns what it says it did.
func watchdogReport(t *testing.T, a *Agent, sig syscall.Signal) string {
	t.Helper()
	prefix := "acp-router: agent watchdog: " + sig.String() + ": "
	deadline := time.Now().Add(waitTimeout)
	for {
		for line := range strings.SplitSeq(a.StderrTail(), "\n") {
			if what, ok := strings.CutPrefix(line, prefix); ok {
				return what
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog did not report %v; stderr:\n%s", sig, a.StderrTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// zombie: pid has exited and waits to be reaped by a parent outside the
// test (init in a container may never do it).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// TestWatchdogAbandonedReaped: a watchdog that did not report the agent in
// time is given up on, and what reaps it belongs to the agent: Stop does
// not return while it runs (the watchdog ends the agent it started late,
// which takes up to KillGrace for one that ignores SIGTERM).
func TestWatchdogAbandonedReaped(t *testing.T) {
	t.Parallel()
	if !watchdogHooked.Load() {
		t.Fatal("TestMain did not call RunWatchdogIfRequested")
	}
	a := New(config.Agent{Name: "late", Command: "sh", Args: []string{"-c", `trap "" TERM; sleep 30`},
		// Past before the watchdog can report: the start is abandoned.
		StartupTimeout: time.Nanosecond, StallTimeout: waitTimeout,
		Env: map[string]string{"GORACE": "atexit_sleep_ms=0"}},
		// StopWait: the watchdog, a -race binary started on a loaded
		// machine, may take seconds to see its lifeline closed; Stop must
		// wait for its reaper, whatever that takes.
		Options{KillGrace: 500 * time.Millisecond, StopWait: waitTimeout})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	a.Wait(ctx)
	if st, err := a.Status(); st != Failed || err == nil || !strings.Contains(err.Error(), "did not report") {
		t.Fatalf("agent %v (%v), want failed: the watchdog did not report", st, err)
	}
	a.Stop()
	// A reaper that has told its owner it is done may not have exited
	// yet (it is still in its deferred call): 100 ms for that, far below
	// the KillGrace (500 ms) a reaper Stop did not wait for still has to
	// run, so the test still fails when Stop does not wait.
	deadline := time.Now().Add(100 * time.Millisecond)
	n := leaktest.Count("(*watchdog).abandon")
	for n != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		n = leaktest.Count("(*watchdog).abandon")
	}
	if n != 0 {
		t.Errorf("%d goroutines reaping an abandoned watchdog still run after Stop returned", n)
	}
}
