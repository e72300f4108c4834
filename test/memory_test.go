package test

// Bounded memory (DESIGN §7: nothing an agent or the editor sends can make
// memory grow without bound), measured on the real router process: its
// resident set before and after a load that used to leave something behind
// for every message. The bound is far below what the unbounded code kept
// (see each test) and far above what the router needs to run.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func init() {
	// unknown-flood N SIZE: N agent_message_chunk updates of SIZE bytes of
	// text, each for a session id nobody ever created (an agent gone
	// wrong, or one announcing sessions it never answers for).
	fakeScriptExt["unknown-flood"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var n, size int
		fmt.Sscanf(rest, "%d %d", &n, &size)
		text := strings.Repeat("g", size)
		var salt [8]byte
		rand.Read(salt[:])
		prefix := "ghost-" + hex.EncodeToString(salt[:]) + "-"
		for i := 0; i < n; i++ {
			a.update(prefix+strconv.Itoa(i), map[string]any{
				"sessionUpdate": "agent_message_chunk",
				"content":       map[string]any{"type": "text", "text": text},
			})
		}
	}
}

// memoryGrowthBound is the growth of the router's resident set the tests
// allow: the router's own bounds (parked updates: 8 MiB per agent instance;
// the editor's write queue: 4 MiB) plus the Go runtime's slack (a heap grows
// to twice what is live before it is collected).
const memoryGrowthBound = 64 << 20

// procMemory reads a process's resident set and its high-water mark, in
// bytes, from /proc/PID/status.
func procMemory(t testing.TB, pid int) (rss, hwm int64) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("cannot measure the router's memory: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status: %s: %v", pid, sc.Text(), err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS", pid)
	}
	return rss, hwm
}

// checkGrowth fails the test when the router's resident set grew by more
// than memoryGrowthBound since before, and logs the figures either way.
func checkGrowth(t *testing.T, e *Editor, what string, before int64) {
	t.Helper()
	after, hwm := procMemory(t, e.cmd.Process.Pid)
	t.Logf("%s: router RSS %.1f MiB before, %.1f MiB after (growth %.1f MiB, peak %.1f MiB; bound %d MiB)",
		what, mib(before), mib(after), mib(after-before), mib(hwm), memoryGrowthBound>>20)
	if after-before > memoryGrowthBound {
		t.Errorf("%s: the router's RSS grew by %.1f MiB (%.1f → %.1f MiB), more than %d MiB: something an agent or the editor sent is kept",
			what, mib(after-before), mib(before), mib(after), memoryGrowthBound>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// memoryRouter starts a router with one fake agent and initializes it.
// Its state directory is in memory (/dev/shm) when the machine has one:
// what is measured is the router, not how fast the disk takes the session
// store's writes (the relay waits for a store behind the disk once its
// queue holds store.DefaultRoomBytes, unless a commit stalls: then the
// queue holds up to store.DefaultMaxQueueBytes in memory).
func memoryRouter(t *testing.T) *Editor {
	t.Helper()
	yaml := routerYAML(t, []string{fakeAgentYAML("mem", fakeOpts{})}, "default: mem")
	if dir, err := os.MkdirTemp("/dev/shm", "acp-router-memory-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		yaml = regexp.MustCompile(`(?m)^state_dir: .*$`).ReplaceAllString(yaml, "state_dir: "+yamlQuote(dir))
	}
	cfg := writeConfig(t, yaml)
	// Info, not debug: a debug line per message would be most of the run.
	e := StartRouter(t, cfg, []string{"--log-level", "info"})
	e.Initialize(t, capsAll)
	return e
}

// TestMemoryClosedSessions opens, prompts and closes 10,000 sessions (8 at
// a time); the agent goes on sending 16 KB of updates for each after it was
// closed (it ignores the cancel the close sends). The unbounded router
// parked them as "updates for a session not bound yet" until the agent
// exited: its RSS grew by 115 MiB. Closed sessions' updates are now dropped
// at once: 3 MiB.
func TestMemoryClosedSessions(t *testing.T) {
	skipShort(t, "measures the router's memory over thousands of sessions")
	e := memoryRouter(t)
	cwd := t.TempDir()
	const script = "nocancel\nsleep 5ms\nupdates 8 2000"
	cycle := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		res, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
		if rerr != nil {
			return fmt.Errorf("session/new: %v", rerr)
		}
		sid := jsonString(res, "sessionId")
		_, promptDone, err := e.Go("session/prompt", promptReq(sid, script))
		if err != nil {
			return err
		}
		if _, rerr := e.Call(ctx, "session/close", map[string]any{"sessionId": sid}); rerr != nil {
			return fmt.Errorf("session/close: %v", rerr)
		}
		m, err := promptDone(ctx)
		if err != nil {
			return err
		}
		if m.Error != nil {
			return fmt.Errorf("session/prompt: %v", m.Error)
		}
		return nil
	}
	run := func(n, workers int) {
		t.Helper()
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if err := cycle(); err != nil {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			t.Fatal(first)
		}
	}
	run(200, 8) // warm up: the runtime, the store, the buffers
	before, _ := procMemory(t, e.cmd.Process.Pid)
	start := time.Now()
	const sessions = 10000
	run(sessions, 8)
	// Every update the agent sent has been read once the last turn's
	// answer was relayed; the agent's queue is empty.
	t.Logf("%d sessions in %v", sessions, time.Since(start).Round(time.Millisecond))
	checkGrowth(t, e, fmt.Sprintf("%d sessions opened, prompted and closed", sessions), before)
}

// TestMemoryUnknownSessions: an agent sends 100,000 updates of 1 KB, each
// for a session id it never announced. The unbounded router parked them
// all: its RSS grew by 170 MiB. Now at most 64 ids and 8 MiB are parked per
// agent instance, the rest dropped, counted and logged once: 3 MiB.
func TestMemoryUnknownSessions(t *testing.T) {
	skipShort(t, "measures the router's memory over thousands of sessions")
	e := memoryRouter(t)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "unknown-flood 1000 1000\nsay warm", "end_turn")
	before, _ := procMemory(t, e.cmd.Process.Pid)
	start := time.Now()
	const updates = 100000
	m, err := e.Prompt(60*time.Second, sid, fmt.Sprintf("unknown-flood %d 1000\nsay flood-done", updates))
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	// The chunk after the flood was relayed: every update of the flood was
	// read before it.
	e.WaitText(t, sid, "flood-done")
	t.Logf("%d updates in %v", updates, time.Since(start).Round(time.Millisecond))
	checkGrowth(t, e, fmt.Sprintf("%d updates for unknown sessions", updates), before)
	if e.LogCount("updates for unknown sessions dropped", 1) == 0 {
		t.Errorf("the router did not log the dropped updates; its log:\n%s", truncate(e.Stderr(), 4000))
	}
}
