package test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHungAgent pins DESIGN §7 and STYLE "stall_timeout": an agent that stops
// reading its stdin fails only its own sessions. While agent "hangy" is hung
// and the router's 1 MiB write to it is stuck, a prompt on agent "steady"
// still completes; hangy's pending prompts fail with an error naming it
// within stall_timeout (2 s), and hangy is killed.
func TestHungAgent(t *testing.T) {
	skipShort(t, "waits out stall_timeout and measures it")
	t.Parallel()
	dirS := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "hangy.pid")
	logFile := filepath.Join(t.TempDir(), "hangy.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("hangy", fakeOpts{PidFile: pidFile, LogFile: logFile}, "stall_timeout: 2s"),
			fakeAgentYAML("steady", fakeOpts{}),
		},
		"default: hangy",
		"rules:",
		cwdRule(dirS, "steady"),
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	h1 := e.NewSession(t, t.TempDir())
	h2 := e.NewSession(t, t.TempDir())
	s1 := e.NewSession(t, dirS)
	hangyPid := readPidFile(t, pidFile)

	type result struct {
		m   *Msg
		err error
		at  time.Time
	}
	prompt := func(sid, script string, extra ...string) chan result {
		ch := make(chan result, 1)
		go func() {
			m, err := e.Prompt(15*time.Second, sid, script, extra...)
			ch <- result{m, err, time.Now()}
		}()
		return ch
	}
	r1 := prompt(h1, "say hanging\nhang")
	e.WaitText(t, h1, "hanging")
	waitAgentLog(t, logFile, waitTimeout, "hung", func(l string) bool { return l == "hung" })

	// hangy no longer reads: this write stalls.
	t0 := time.Now()
	r2 := prompt(h2, "say never", strings.Repeat("p", 1<<20))

	ms, err := e.Prompt(5*time.Second, s1, "say still here")
	if err != nil {
		t.Fatalf("prompt on steady while hangy is hung: %v", err)
	}
	requireStop(t, ms, "end_turn")

	for name, ch := range map[string]chan result{"the 1 MiB prompt": r2, "the hanging prompt": r1} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s on hangy: %v", name, r.err)
		}
		requireAgentError(t, name+" on hangy", r.m.Error, "hangy")
		if d := r.at.Sub(t0); d < 1500*time.Millisecond || d > 6*time.Second {
			t.Errorf("%s failed %v after the stalled write, want about stall_timeout (2 s)", name, d)
		}
	}
	if !waitDead(hangyPid, 5*time.Second) {
		t.Errorf("hung agent (pid %d) is still running", hangyPid)
	}
	// The router is still fine.
	e.MustPrompt(t, s1, "say again", "end_turn")
}

// TestCrashMidPrompt pins DESIGN §7 for an agent that exits during a turn:
// the pending prompt fails with -32603 naming the agent, with its stderr tail
// (secrets redacted) in data.stderrTail; the next session/new restarts the
// agent and works.
func TestCrashMidPrompt(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "crashy.pid")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("crashy", fakeOpts{PidFile: pidFile, StderrLines: []string{"crashy is starting"}})},
		"default: crashy",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	pid1 := readPidFile(t, pidFile)

	start := time.Now()
	m, err := e.Prompt(waitTimeout, sid, "say before\ncrash")
	if err != nil {
		t.Fatal(err)
	}
	requireAgentError(t, "prompt on a crashing agent", m.Error, "crashy")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("crash reported after %v", d)
	}
	tail := stderrTail(m.Error)
	if !strings.Contains(tail, "fatal: boom") {
		t.Errorf("data.stderrTail = %q, want the agent's last stderr lines (with %q)", tail, "fatal: boom")
	}
	for _, msg := range e.Rec.All() {
		if strings.Contains(string(msg.Raw), crashSecret) {
			t.Errorf("the secret reached the editor: %s", msg)
		}
	}

	sid2 := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid2, "say alive", "end_turn")
	if got := e.Texts(sid2); len(got) != 1 || got[0] != "alive" {
		t.Errorf("chunks after restart: %q", got)
	}
	if pid2 := readPidFile(t, pidFile); pid2 == pid1 {
		t.Errorf("agent pid %d did not change: not restarted?", pid2)
	}
}

// TestCrashLoop pins DESIGN §7 "at most 5 restarts a minute": an agent that
// crashes on every session/new is restarted on use, but at most 5 times a
// minute; every session/new gets an error naming it, and once the limit is
// reached the error says so instead of starting it again.
func TestCrashLoop(t *testing.T) {
	skipShort(t, "crashes an agent until the restart limit")
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "loopy.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("loopy", fakeOpts{CrashOnSessionNew: true, LogFile: logFile})},
		"default: loopy",
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)

	const attempts = 9
	var last *RPCError
	start := time.Now()
	for i := range attempts {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		_, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
		cancel()
		requireAgentError(t, fmt.Sprintf("session/new #%d", i+1), rerr, "loopy")
		if strings.Contains(stderrTail(rerr), crashSecret) || strings.Contains(rerr.Message, crashSecret) {
			t.Errorf("session/new #%d: the secret is not redacted: %v", i+1, rerr)
		}
		last = rerr
	}
	elapsed := time.Since(start)
	starts := 0
	for _, l := range agentLog(logFile) {
		if strings.HasPrefix(l, "start ") {
			starts++
		}
	}
	t.Logf("%d session/new calls in %v; loopy started %d times; last error: %v", attempts, elapsed, starts, last)
	if elapsed < time.Minute && starts > 6 {
		t.Errorf("loopy started %d times in %v: more than 5 restarts a minute", starts, elapsed)
	}
	if starts < 2 {
		t.Errorf("loopy started %d times: it was never restarted", starts)
	}
	if !regexp.MustCompile(`(?i)restart|crash|too many|limit|giving up|gave up`).MatchString(last.Message) {
		t.Errorf("error after the restart limit does not say why: %q", last.Message)
	}
}

// TestFallback pins DESIGN §7: a session routed to an agent that failed to
// start goes to routing.fallback; without a fallback it gets -32603 naming
// the agent, why it failed and what to do.
func TestFallback(t *testing.T) {
	t.Parallel()
	broken := "  - name: broken\n    command: /bin/false\n    startup_timeout: 5s\n"
	for _, tc := range []struct {
		name    string
		routing []string
	}{
		{"with fallback", []string{"default: broken", "fallback: good"}},
		{"without fallback", []string{"default: broken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, routerYAML(t, []string{broken, fakeAgentYAML("good", fakeOpts{})}, tc.routing...))
			e := StartRouter(t, cfg, nil)
			e.Initialize(t, capsAll)
			res, rerr := e.Call(context.Background(), "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
			if len(tc.routing) == 2 {
				if rerr != nil {
					t.Fatalf("session/new with a fallback: %v", rerr)
				}
				sid := jsonString(res, "sessionId")
				e.MustPrompt(t, sid, "whoami", "end_turn")
				if got := e.Texts(sid); len(got) != 1 || got[0] != "good" {
					t.Errorf("session answered by %q, want the fallback agent", got)
				}
				return
			}
			requireAgentError(t, "session/new without a fallback", rerr, "broken")
			for _, want := range []string{"exited", cfg, "/bin/false"} {
				if !strings.Contains(rerr.Message, want) {
					t.Errorf("message %q does not say %q", rerr.Message, want)
				}
			}
		})
	}
}

// TestInitializeBudgetAndCache pins DESIGN §7: initialize is answered once
// the routing default agent is up or after 3 s, whichever is first; an agent
// still starting contributes its cached initialize result from the last run
// (state_dir), so a slow agent's capabilities and sign-in methods are
// advertised from the second run on.
func TestInitializeBudgetAndCache(t *testing.T) {
	skipShort(t, "waits out the 3 s initialize budget twice and measures it")
	t.Parallel()
	slowInit := json.RawMessage(`{"protocolVersion":1,"agentCapabilities":{"promptCapabilities":{"image":true}},"authMethods":[{"id":"slow-key","name":"Slow key"}]}`)
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("slow", fakeOpts{InitDelay: "4s", InitResult: slowInit}, "startup_timeout: 20s")}))
	for run := 1; run <= 2; run++ {
		e := StartRouter(t, cfg, nil)
		start := time.Now()
		res := e.Initialize(t, capsAll)
		if d := time.Since(start); d < 2500*time.Millisecond || d > 3900*time.Millisecond {
			t.Errorf("run %d: initialize took %v, want the 3 s budget", run, d)
		}
		image := string(jsonPath(res, "agentCapabilities", "promptCapabilities", "image")) == "true"
		auth := string(jsonPath(res, "authMethods"))
		if cached := run == 2; image != cached || strings.Contains(auth, "slow-key") != cached {
			t.Errorf("run %d: image=%v authMethods=%s; want the slow agent's capabilities only from its cached result (run 2)", run, image, auth)
		}
		e.NewSession(t, t.TempDir()) // waits for the agent; its result is cached by now
		e.CloseStdin()
		if _, _, ok := e.Wait(10 * time.Second); !ok {
			t.Fatalf("run %d: router did not exit", run)
		}
	}
}

// TestCrashThreadContinues pins that after an agent crash the user just
// continues the thread: the next prompt in the same session restarts the
// agent, opens a new session on it, and gives it a brief of the turns its
// previous process had seen.
func TestCrashThreadContinues(t *testing.T) {
	t.Parallel()
	logA := filepath.Join(t.TempDir(), "a.log")
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{LogFile: logA})}))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say before the crash", "end_turn")
	if _, err := e.Prompt(waitTimeout, sid, "crash"); err != nil {
		t.Fatal(err)
	}
	m, err := e.Prompt(waitTimeout, sid, "prompt-text")
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	got := lastText(e, sid)
	if !strings.HasPrefix(got, "[acp-router handoff]") || !strings.Contains(got, "User: say before the crash") {
		t.Errorf("the restarted agent got %q; want a brief of the thread so far", got)
	}
	if n := countLines(logA, "initialize"); n != 2 {
		t.Errorf("alpha initialized %d times, want 2", n)
	}
}
