package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/slowtest"
	"github.com/acp-router/acp-router/sandbox"
)

// envFakeAgent makes the test binary a minimal ACP agent (TestMain);
// envIgnoreEOF makes it stay when its stdin is closed (until SIGTERM).
const (
	envFakeAgent = "UPSTREAM_TEST_FAKE_AGENT"
	envIgnoreEOF = "UPSTREAM_TEST_IGNORE_EOF"
)

// waitTimeout bounds every wait: a hang fails the test instead.
const waitTimeout = 10 * time.Second

func TestMain(m *testing.M) {
	// The test binary is the "router": agents run under it as a watchdog.
	RunWatchdogIfRequested()
	sandbox.RunIfRequested()
	if os.Getenv(envProbeAgent) != "" {
		os.Exit(probeAgent())
	}
	if os.Getenv(envFakeRouter) == "1" {
		os.Exit(fakeRouter())
	}
	if os.Getenv(envFakeAgent) != "" {
		os.Exit(fakeAgent())
	}
	// TestIdleTimeout's cases wait out idle timeouts and shutdown graces
	// (10 s of them, 1 s of CPU): two at a time, they held one of go
	// test's package slots for most of this package's 8 s.
	slowtest.ShortParallel(4)
	os.Exit(m.Run())
}

// fakeAgent speaks just enough ACP on stdin/stdout until EOF:
//
//	initialize           answered at once
//	_test/sleep {"ms":N} answered {} after N ms
//	_test/ask            (notification) requests _test/question from the
//	                     client; once answered, notifies _test/answered
//	other requests       -32601; other notifications are ignored
//
// At EOF it exits, unless envIgnoreEOF is set.
func fakeAgent() int {
	var mu sync.Mutex
	send := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(append(b, '\n'))
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		reply := func(result any) { send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result}) }
		switch {
		case m.Method == "initialize":
			reply(map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}})
		case m.Method == "_test/sleep":
			var p struct{ MS int }
			json.Unmarshal(m.Params, &p)
			go func() {
				time.Sleep(time.Duration(p.MS) * time.Millisecond)
				reply(map[string]any{})
			}()
		case m.Method == "_test/ask":
			send(map[string]any{"jsonrpc": "2.0", "id": "q", "method": "_test/question"})
		case m.Method == "" && string(m.ID) == `"q"`:
			send(map[string]any{"jsonrpc": "2.0", "method": "_test/answered"})
		case m.Method != "" && len(m.ID) > 0:
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
	if os.Getenv(envIgnoreEOF) != "" {
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock
	}
	return 0
}

// logBuffer collects an agent's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// idleAgent is an agent running the fake agent, with its log and the
// errors OnExit reported.
type idleAgent struct {
	*Agent
	log *logBuffer

	mu    sync.Mutex
	exits []error
	// questions receives the agent's _test/question requests; the test
	// answers them.
	questions chan *jsonrpc2.Request
	// watches counts the idle watches started; ticks, when not nil, is
	// their clock (the test sends each check's time) instead of a ticker.
	watches atomic.Int32
	ticks   chan time.Time
}

func newIdleAgent(t *testing.T, idle time.Duration, restartLimit int, ignoreEOF bool) *idleAgent {
	t.Helper()
	return newIdleAgentTicks(t, idle, restartLimit, ignoreEOF, nil)
}

// newIdleAgentTicks is newIdleAgent whose idle checks run when the test
// sends their time on ticks (unbuffered), when ticks is not nil.
func newIdleAgentTicks(t *testing.T, idle time.Duration, restartLimit int, ignoreEOF bool, ticks chan time.Time) *idleAgent {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ia := &idleAgent{log: &logBuffer{}, questions: make(chan *jsonrpc2.Request, 1), ticks: ticks}
	cfg := config.Agent{
		Name:    "idler",
		Command: exe,
		// Race-enabled binaries sleep 1 s at exit otherwise.
		Env:            map[string]string{envFakeAgent: "1", "GORACE": "atexit_sleep_ms=0"},
		EnvInherit:     config.EnvInheritAll,
		StartupTimeout: waitTimeout,
		StallTimeout:   waitTimeout,
		CancelTimeout:  waitTimeout,
		IdleTimeout:    idle,
	}
	if ignoreEOF {
		cfg.Env[envIgnoreEOF] = "1"
	}
	ia.Agent = New(cfg, Options{
		Logger: hclog.New(&hclog.LoggerOptions{Output: ia.log, Level: hclog.Debug}),
		Handler: func(*Instance) jsonrpc2.Handler {
			return handlerFunc(func(_ context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
				if r.Method == "_test/question" {
					ia.questions <- r
				}
			})
		},
		OnExit: func(_ *Instance, err error) {
			ia.mu.Lock()
			ia.exits = append(ia.exits, err)
			ia.mu.Unlock()
		},
		ShutdownGrace: 2 * time.Second,
		KillGrace:     time.Second,
		RestartLimit:  restartLimit,
		idleTicks: func(tick time.Duration) (<-chan time.Time, func()) {
			ia.watches.Add(1)
			if ia.ticks != nil {
				return ia.ticks, func() {}
			}
			tk := time.NewTicker(tick)
			return tk.C, tk.Stop
		},
	})
	t.Cleanup(ia.Stop)
	return ia
}

// check runs an idle check of inst at the time at and returns once it was
// decided: the watch takes the next tick only after deciding on this one.
// It fails the test if the check stopped the agent.
func (ia *idleAgent) check(t *testing.T, inst *Instance, at time.Time) {
	t.Helper()
	for range 2 {
		select {
		case ia.ticks <- at:
		case <-inst.Exited():
			t.Fatalf("the idle check at +%v stopped the agent; log:\n%s", time.Until(at).Round(time.Millisecond), ia.log)
		case <-time.After(waitTimeout):
			t.Fatalf("the idle watch took no check within %v (status %s)", waitTimeout, ia.stateString())
		}
	}
}

// tickUntilStopped runs idle checks, from the time from on and one idle
// timeout apart, until inst has exited.
func (ia *idleAgent) tickUntilStopped(t *testing.T, inst *Instance, from time.Time, idle time.Duration) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for at := from; ; at = at.Add(idle) {
		select {
		case ia.ticks <- at:
		case <-inst.Exited():
			return
		case <-deadline:
			t.Fatalf("not stopped when idle within %v (%s); log:\n%s", waitTimeout, ia.stateString(), ia.log)
		}
	}
}

type handlerFunc func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)

func (f handlerFunc) Handle(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
	f(ctx, c, r)
}

func (ia *idleAgent) ready(t *testing.T) (*Instance, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	inst, err := ia.Ready(ctx)
	if err != nil {
		t.Fatalf("Ready: %v", err)
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst, inst.pgid // the agent (its watchdog is cmd)
}

// waitIdleStop waits until inst was stopped for being idle and its process
// is gone.
func (ia *idleAgent) waitIdleStop(t *testing.T, inst *Instance, pid int) {
	t.Helper()
	select {
	case <-inst.Exited():
	case <-time.After(waitTimeout):
		t.Fatalf("the agent was not stopped within %v; log:\n%s", waitTimeout, ia.log)
	}
	if st, err := ia.Status(); st != Stopped || !errors.Is(err, ErrIdle) {
		t.Fatalf("Status = %v, %v; want stopped, %v", st, err, ErrIdle)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still exists after the idle stop (kill 0: %v)", pid, err)
	}
	if cur := ia.Current(); cur != nil {
		t.Errorf("Current = instance %d after the idle stop, want nil", cur.Gen)
	}
}

// waitStopped waits until the agent was found idle (its process may still
// be going away).
func (ia *idleAgent) waitStopped(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if st, err := ia.Status(); st == Stopped && errors.Is(err, ErrIdle) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not stopped when idle within %v (%s); log:\n%s", waitTimeout, ia.stateString(), ia.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkLog requires the idle stop at info level and no failure logged.
func (ia *idleAgent) checkLog(t *testing.T) {
	t.Helper()
	log := ia.log.String()
	if !strings.Contains(log, "[INFO]  idler: agent idle; stopped: idle_for=") {
		t.Errorf("no info line about the idle stop in the log:\n%s", log)
	}
	for _, bad := range []string{"[ERROR]", "[WARN]", "exited unexpectedly", "agent failed"} {
		if strings.Contains(log, bad) {
			t.Errorf("the log reports a failure (%q):\n%s", bad, log)
		}
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	for _, err := range ia.exits {
		if !errors.Is(err, ErrIdle) {
			t.Errorf("OnExit got %v, want %v", err, ErrIdle)
		}
	}
}

// requireRunning fails unless inst is still the running instance.
func (ia *idleAgent) requireRunning(t *testing.T, inst *Instance, when string) {
	t.Helper()
	select {
	case <-inst.Exited():
		t.Fatalf("%s: the agent was stopped; log:\n%s", when, ia.log)
	default:
	}
	if cur := ia.Current(); cur != inst {
		t.Fatalf("%s: the agent's instance is no longer running (status %v)", when, ia.stateString())
	}
}

func (ia *idleAgent) stateString() string {
	st, err := ia.Status()
	return fmt.Sprintf("%v: %v", st, err)
}

// TestIdleTimeout pins idle_timeout (issue 5 req. 7) in upstream: an agent
// with no traffic and nothing outstanding for the timeout is stopped with
// the shutdown sequence, logged at info and never as a failure; the next
// Ready starts it again outside the restart budget. A call in flight, a
// request of the agent awaiting the router's answer, or steady traffic keep
// it running; without idle_timeout it keeps running.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond

	t.Run("stopped when idle and restarted outside the budget", func(t *testing.T) {
		t.Parallel()
		// One restart a minute: the idle restarts must not count.
		ia := newIdleAgent(t, idle, 1, false)
		gen := 0
		for cycle := range 3 {
			start := time.Now()
			inst, pid := ia.ready(t)
			if inst.Gen <= gen {
				t.Fatalf("cycle %d: instance %d is not a new one (last %d)", cycle, inst.Gen, gen)
			}
			if inst.Restart {
				t.Errorf("cycle %d: a start after an idle stop is marked a restart (telemetry counts it)", cycle)
			}
			gen = inst.Gen
			ia.waitIdleStop(t, inst, pid)
			if d := time.Since(start); d < idle {
				t.Errorf("cycle %d: stopped after %v, before the idle timeout %v", cycle, d, idle)
			}
		}
		ia.mu.Lock()
		restarts := len(ia.restarts)
		ia.mu.Unlock()
		if restarts != 0 {
			t.Errorf("%d restarts counted against the budget, want 0", restarts)
		}
		// Stop on an agent stopped when idle returns at once.
		done := make(chan struct{})
		go func() { ia.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Fatal("Stop on an idle-stopped agent hangs")
		}
		ia.checkLog(t)
	})

	t.Run("a call in flight keeps it", func(t *testing.T) {
		t.Parallel()
		ia := newIdleAgent(t, idle, 5, false)
		inst, pid := ia.ready(t)
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		c, err := inst.Peer().Call(ctx, "_test/sleep", map[string]int{"ms": 1500}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx); err != nil {
			t.Fatalf("the call failed: %v; log:\n%s", err, ia.log)
		}
		ia.requireRunning(t, inst, "when the call was answered")
		ia.waitIdleStop(t, inst, pid)
		ia.checkLog(t)
	})

	t.Run("a request of the agent awaiting an answer keeps it", func(t *testing.T) {
		t.Parallel()
		ia := newIdleAgentTicks(t, idle, 5, false, make(chan time.Time))
		inst, pid := ia.ready(t)
		if err := inst.Peer().Notify(t.Context(), "_test/ask", nil); err != nil {
			t.Fatal(err)
		}
		var q *jsonrpc2.Request
		select {
		case q = <-ia.questions:
		case <-time.After(waitTimeout):
			t.Fatal("the agent did not ask")
		}
		// The first check sees the question's traffic; the second, 5 idle
		// timeouts later, sees nothing new but the request outstanding.
		now := time.Now()
		ia.check(t, inst, now)
		ia.check(t, inst, now.Add(5*idle))
		ia.requireRunning(t, inst, "while its request waited")
		if err := inst.Peer().Reply(t.Context(), q.ID, json.RawMessage(`"yes"`), nil); err != nil {
			t.Fatal(err)
		}
		ia.tickUntilStopped(t, inst, now.Add(6*idle), idle)
		ia.waitIdleStop(t, inst, pid)
		ia.checkLog(t)
		if n := ia.watches.Load(); n != 1 {
			t.Errorf("%d idle watches started, want 1", n)
		}
	})

	t.Run("traffic keeps it", func(t *testing.T) {
		t.Parallel()
		ia := newIdleAgent(t, idle, 5, false)
		inst, pid := ia.ready(t)
		for range 15 {
			if err := inst.Peer().Notify(t.Context(), "_test/ping", nil); err != nil {
				t.Fatalf("notify: %v (status %s)", err, ia.stateString())
			}
			time.Sleep(idle / 3)
		}
		ia.requireRunning(t, inst, "after steady traffic")
		ia.waitIdleStop(t, inst, pid)
		ia.checkLog(t)
	})

	t.Run("slow to exit", func(t *testing.T) {
		t.Parallel()
		// It ignores its closed stdin: the shutdown sequence goes on to
		// SIGTERM after the grace period. The next process starts only
		// once this one is gone, and Stop waits for it too.
		ia := newIdleAgent(t, idle, 5, true)
		inst, pid := ia.ready(t)
		ia.waitStopped(t)
		select {
		case <-inst.Exited():
			t.Fatal("the agent exited at once although it ignores EOF: the test proves nothing")
		default:
		}
		inst2, _ := ia.ready(t)
		select {
		case <-inst.Exited():
		default:
			t.Fatal("a new process started before the idle one was gone")
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the idle stop (kill 0: %v)", pid, err)
		}
		ia.waitStopped(t)
		ia.Stop()
		select {
		case <-inst2.Exited():
		default:
			t.Fatal("Stop returned before the process stopped when idle was gone")
		}
		if log := ia.log.String(); !strings.Contains(log, "sending SIGTERM") {
			t.Errorf("no SIGTERM after the grace period in the log:\n%s", log)
		}
		ia.checkLog(t)
	})

	t.Run("no idle_timeout", func(t *testing.T) {
		t.Parallel()
		// An idle watch is started before the instance is ready: none
		// was, none will be.
		ia := newIdleAgentTicks(t, 0, 5, false, make(chan time.Time))
		inst, _ := ia.ready(t)
		if n := ia.watches.Load(); n != 0 {
			t.Errorf("%d idle watches started without idle_timeout, want 0", n)
		}
		ia.requireRunning(t, inst, "without idle_timeout")
	})
}

// TestIdleStopCallError: calls with growing gaps between them, until one
// comes after the agent was found idle. Near the boundary a call races the
// stop: it either keeps the agent (it came first) or fails. The failure the
// editor would get names the idle stop, never a crash.
func TestIdleStopCallError(t *testing.T) {
	t.Parallel()
	const idle = 50 * time.Millisecond
	ia := newIdleAgent(t, idle, 5, false)
	inst, _ := ia.ready(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	// The agent was quiet at most from when the last call that went
	// through was sent: measured, not the gap asked for, since the test
	// may sleep longer than asked on a loaded machine.
	prev := time.Now()
	for gap := time.Millisecond; ; gap += gap / 4 {
		if gap > waitTimeout {
			t.Fatalf("no call failed; log:\n%s", ia.log)
		}
		sent := time.Now()
		c, err := inst.Peer().Call(ctx, "_test/sleep", map[string]int{"ms": 0}, nil, nil)
		if err == nil {
			_, err = c.Wait(ctx)
		}
		if err != nil {
			if !errors.Is(err, jsonrpc2.ErrClosed) {
				t.Fatalf("a call to the stopping agent failed with %v, want jsonrpc2.ErrClosed", err)
			}
			if e := ia.Error(inst, err); !strings.Contains(e.Message, ErrIdle.Error()) {
				t.Fatalf("a call to the stopping agent failed with %q, want the idle stop named", e.Message)
			}
			if quiet := time.Since(prev); quiet < idle*3/4 {
				t.Errorf("the agent was stopped at most %v after the last call was sent (gap %v), short of the idle timeout %v", quiet, gap, idle)
			}
			break
		}
		prev = sent
		time.Sleep(gap)
	}
	<-inst.Exited()
	ia.checkLog(t)
}

// TestRestartLeavesIdleStopped: Restart of an agent stopped idle ends
// nothing: no failure is logged or reported, and it stays stopped idle
// until its next use. /agent restart relies on it: it restarts an agent
// whose own process is stopped idle when its processes of other session
// roots run.
func TestRestartLeavesIdleStopped(t *testing.T) {
	ticks := make(chan time.Time)
	ia := newIdleAgentTicks(t, time.Minute, 3, false, ticks)
	inst, pid := ia.ready(t)
	ia.tickUntilStopped(t, inst, time.Now(), time.Minute)
	ia.waitIdleStop(t, inst, pid)
	ia.Restart(errors.New("restarted by the user"))
	if st, err := ia.Status(); st != Stopped || !errors.Is(err, ErrIdle) {
		t.Errorf("Status after Restart = %v, %v; want stopped, %v", st, err, ErrIdle)
	}
	ia.checkLog(t)
}
