package test

// Self-tests of the harness: the scripted editor connected directly to the
// fake agent, no router. They pin what the router tests rely on, so that a
// failure there points at the router and not at the harness.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startFake(t *testing.T, opts fakeOpts, eopts ...EditorOption) *Editor {
	t.Helper()
	return StartEditor(t, []string{testBin}, append(eopts, withEnv(fakeAgentEnv(opts)))...)
}

// TestFakeAgentDirect pins the fake agent's protocol behaviour: default
// initialize result, session ids, updateWithNew in one line pair, every
// script command, callbacks with numeric ids from 0, extension methods.
func TestFakeAgentDirect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logFile := filepath.Join(dir, "agent.log")
	e := startFake(t, fakeOpts{Name: "direct", UpdateWithNew: true, LogFile: logFile}, withSlowRead(100*time.Microsecond))

	requireJSON(t, "initialize result", e.Initialize(t, capsAll), defaultInitResult)

	sid := e.NewSession(t, dir)
	if sid != "sess-1" {
		t.Fatalf("first session id = %q, want sess-1", sid)
	}
	resp := e.Rec.WaitFor(t, waitTimeout, "session/new response", func(m *Msg) bool {
		return m.IsResponse() && strings.Contains(string(m.Result), `"sess-1"`)
	})
	upd := e.Rec.WaitFor(t, waitTimeout, "available_commands_update", func(m *Msg) bool {
		return m.Update() == "available_commands_update" && m.SessionID() == sid
	})
	if upd.Seq != resp.Seq+1 {
		t.Fatalf("available_commands_update at #%d, session/new response at #%d: want the very next line", upd.Seq, resp.Seq)
	}
	if sid2 := e.NewSession(t, dir); sid2 != "sess-2" {
		t.Fatalf("second session id = %q, want sess-2", sid2)
	}

	in := filepath.Join(dir, "in.txt")
	out := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(in, []byte("hello file"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"whoami",
		"say hi there",
		"updates 5 100",
		"big 1000",
		"permission",
		"read " + in,
		"read " + filepath.Join(dir, "missing.txt"),
		"write " + out + " written by agent",
		"terminal echo hi",
		"echo-size",
		"stop max_tokens",
	}, "\n")
	m := e.MustPrompt(t, sid, script, "max_tokens")
	texts := e.Texts(sid)
	var seqs []string
	for _, txt := range texts {
		if strings.HasPrefix(txt, "#") {
			if len(txt) != 100 {
				t.Errorf("updates chunk is %d bytes, want 100", len(txt))
			}
			seqs = append(seqs, txt[:7])
		}
	}
	if got := strings.Join(seqs, ","); got != "#000000,#000001,#000002,#000003,#000004" {
		t.Errorf("updates sequence = %s", got)
	}
	want := []string{"direct", "hi there"}
	if len(texts) < 2 || texts[0] != want[0] || texts[1] != want[1] {
		t.Errorf("first chunks = %q, want %q", texts[:min(2, len(texts))], want)
	}
	if big := texts[7]; big != strings.Repeat("b", 1000) {
		t.Errorf("big chunk = %q", truncate(big, 50))
	}
	rest := texts[8:]
	perm := strings.TrimPrefix(rest[0], "permission: ")
	requireJSON(t, "permission outcome", []byte(perm), `{"outcome":"selected","optionId":"allow"}`)
	if rest[1] != "read: hello file" {
		t.Errorf("read chunk = %q", rest[1])
	}
	if !strings.HasPrefix(rest[2], "read error: -32002 ") {
		t.Errorf("read of a missing file = %q", rest[2])
	}
	if rest[3] != "write: ok" {
		t.Errorf("write chunk = %q", rest[3])
	}
	if b, _ := os.ReadFile(out); string(b) != "written by agent" {
		t.Errorf("written file = %q", b)
	}
	if rest[4] != "terminal: hi\n" {
		t.Errorf("terminal chunk = %q", rest[4])
	}
	if !strings.HasPrefix(rest[5], "size: ") {
		t.Errorf("echo-size chunk = %q", rest[5])
	}
	if m.Seq <= e.Rec.Filter(func(x *Msg) bool { _, ok := x.ChunkText(sid); return ok })[len(texts)-1].Seq {
		t.Errorf("prompt response before its updates")
	}

	// The agent's own requests use numeric ids from 0.
	reqs := e.Rec.Filter((*Msg).IsRequest)
	if len(reqs) != 1+2+1+4 || string(reqs[0].ID) != "0" || string(reqs[len(reqs)-1].ID) != "7" {
		t.Errorf("agent requests: %d, first id %s", len(reqs), reqs[0].ID)
	}

	// Extension and config methods.
	requireJSON(t, "_fake/echo", e.MustCall(t, "_fake/echo", map[string]any{"a": []int{1, 2}}), `{"a":[1,2]}`)
	res := e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "m2"})
	if got := jsonString(res, "configOptions"); got != "" || !strings.Contains(string(res), `"currentValue":"m2"`) {
		t.Errorf("set_config_option = %s", res)
	}
	requireJSON(t, "session/set_mode", e.MustCall(t, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "x"}), `{}`)
	_, rerr := e.Call(context.Background(), "no/such_method", map[string]any{})
	if rerr == nil || rerr.Code != -32601 || jsonString(rerr.Data, "method") != "no/such_method" {
		t.Errorf("unknown method: %v", rerr)
	}

	waitAgentLog(t, logFile, waitTimeout, "log of a response to id 0", func(l string) bool { return l == "response 0" })
	if lines := agentLog(logFile); !strings.HasPrefix(lines[0], "start ") || lines[1] != "initialize" {
		t.Errorf("agent log starts with %q", lines[:2])
	}
}

// TestFakeAgentCancel pins the fake agent's cancellation: a cooperative turn
// answers "cancelled" at the next command; nocancel runs to the end; a
// second prompt while a turn runs is refused and logged as an overlap.
func TestFakeAgentCancel(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "agent.log")
	e := startFake(t, fakeOpts{LogFile: logFile})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	done := make(chan *Msg, 1)
	go func() { m, _ := e.Prompt(waitTimeout, sid, "say start\nsleep 10s\nsay never"); done <- m }()
	e.WaitText(t, sid, "start")
	start := time.Now()
	if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	m := <-done
	requireStop(t, m, "cancelled")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cooperative cancel took %v", d)
	}

	go func() { m, _ := e.Prompt(waitTimeout, sid, "nocancel\nsay start2\nsleep 1s\nsay late"); done <- m }()
	e.WaitText(t, sid, "start2")
	_ = e.Notify("session/cancel", map[string]any{"sessionId": sid})
	m2, err := e.Prompt(waitTimeout, sid, "say overlapping")
	if err != nil || m2.Error == nil {
		t.Fatalf("prompt during a turn: %v %v, want an overlap error", m2, err)
	}
	requireStop(t, <-done, "end_turn")
	e.WaitText(t, sid, "late")
	waitAgentLog(t, logFile, time.Second, "overlap line", func(l string) bool { return l == "overlap "+sid })
	waitAgentLog(t, logFile, time.Second, "turn-end line", func(l string) bool { return strings.HasPrefix(l, "turn-end "+sid+" ") })
}

// TestFakeAgentFailures pins crash, hang, idless errors, initDelay and
// failSessionNew.
func TestFakeAgentFailures(t *testing.T) {
	t.Parallel()
	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		e := startFake(t, fakeOpts{StderrLines: []string{"hello from stderr"}})
		e.Initialize(t, capsAll)
		sid := e.NewSession(t, t.TempDir())
		m, err := e.Prompt(waitTimeout, sid, "say before\ncrash")
		if err == nil {
			t.Fatalf("prompt answered %s, want no answer", m)
		}
		code, _, ok := e.Wait(waitTimeout)
		if !ok || code != 3 {
			t.Fatalf("exit code %d (exited %v), want 3", code, ok)
		}
		if s := e.Stderr(); !strings.Contains(s, crashLine) || !strings.Contains(s, "hello from stderr") {
			t.Fatalf("stderr = %q", s)
		}
	})
	t.Run("hang", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		logFile := filepath.Join(t.TempDir(), "log")
		e := startFake(t, fakeOpts{PidFile: pidFile, LogFile: logFile})
		e.Initialize(t, capsAll)
		sid := e.NewSession(t, t.TempDir())
		go func() { _, _ = e.Prompt(waitTimeout, sid, "say hanging\nhang") }()
		e.WaitText(t, sid, "hanging")
		waitAgentLog(t, logFile, waitTimeout, "hung", func(l string) bool { return l == "hung" })
		wrote := make(chan error, 1)
		go func() { _, err := e.Prompt(waitTimeout, sid, "say x", strings.Repeat("p", 1<<20)); wrote <- err }()
		select {
		case err := <-wrote:
			t.Fatalf("a 1 MiB prompt to a hung agent completed: %v", err)
		case <-time.After(time.Second):
		}
		pid := readPidFile(t, pidFile)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	})
	t.Run("idless-error", func(t *testing.T) {
		t.Parallel()
		e := startFake(t, fakeOpts{IdlessErrorAfterNotification: true})
		e.Initialize(t, capsAll)
		sid := e.NewSession(t, t.TempDir())
		_ = e.Notify("session/cancel", map[string]any{"sessionId": sid})
		m := e.Rec.WaitFor(t, waitTimeout, "id-less error", func(m *Msg) bool { return m.IsResponse() && m.Error != nil })
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(m.Raw, &obj)
		if _, has := obj["id"]; has {
			t.Fatalf("error has an id member: %s", m.Raw)
		}
	})
	t.Run("init-delay", func(t *testing.T) {
		t.Parallel()
		e := startFake(t, fakeOpts{InitDelay: "500ms"})
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		initDone := make(chan *RPCError, 1)
		start := time.Now()
		go func() {
			_, rerr := e.Call(ctx, "initialize", map[string]any{"protocolVersion": 1})
			initDone <- rerr
		}()
		time.Sleep(100 * time.Millisecond)
		if _, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": "/", "mcpServers": []any{}}); rerr == nil {
			t.Fatalf("session/new before initialize was answered succeeded")
		}
		if rerr := <-initDone; rerr != nil {
			t.Fatal(rerr)
		}
		if d := time.Since(start); d < 500*time.Millisecond {
			t.Fatalf("initialize answered after %v", d)
		}
	})
	t.Run("fail-session-new", func(t *testing.T) {
		t.Parallel()
		e := startFake(t, fakeOpts{FailSessionNew: json.RawMessage(`{"code":-32000,"message":"Authentication required"}`)})
		e.Initialize(t, capsAll)
		_, rerr := e.Call(context.Background(), "session/new", map[string]any{"cwd": "/", "mcpServers": []any{}})
		if rerr == nil || rerr.Code != -32000 {
			t.Fatalf("session/new: %v", rerr)
		}
	})
	t.Run("prefix-and-init-result", func(t *testing.T) {
		t.Parallel()
		initRes := `{"protocolVersion":1,"agentCapabilities":{"loadSession":true},"authMethods":[],"agentInfo":{"name":"custom","version":"9"}}`
		e := startFake(t, fakeOpts{SessionPrefix: "x-", InitResult: json.RawMessage(initRes)})
		requireJSON(t, "initialize result", e.Initialize(t, capsAll), initRes)
		if sid := e.NewSession(t, "/"); sid != "x-1" {
			t.Fatalf("session id %q, want x-1", sid)
		}
	})
	t.Run("grandchild", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		gpid := filepath.Join(dir, "gpid")
		e := startFake(t, fakeOpts{Grandchild: true, GrandchildPidFile: gpid})
		e.Initialize(t, capsAll)
		pid := readPidFile(t, gpid)
		if !processAlive(pid) {
			t.Fatal("grandchild is not running")
		}
		// It ignores SIGTERM; only SIGKILL ends it. An ignored signal is
		// discarded when sent: what the kernel has as ignored is what a
		// SIGTERM will do, now and later.
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if ign, err := sigIgnored(pid, syscall.SIGTERM); err != nil || !ign {
			t.Fatalf("grandchild does not ignore SIGTERM (%v)", err)
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !processAlive(pid) {
			t.Fatal("grandchild died of SIGTERM")
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitDead(pid, 2*time.Second) {
			t.Fatal("grandchild survived SIGKILL")
		}
	})
}

// TestEditorHarness pins the editor's own checks: garbage on stdout and
// responses to unknown ids are reported as protocol violations.
func TestEditorHarness(t *testing.T) {
	t.Parallel()
	e := StartEditor(t, []string{"sh", "-c", `read line; echo 'not json'; echo '{"jsonrpc":"2.0","id":"nope","result":{}}'; sleep 0.2`})
	_ = e.SendLine("{}")
	if _, _, ok := e.Wait(waitTimeout); !ok {
		t.Fatal("sh did not exit")
	}
	e.mu.Lock()
	got := fmt.Sprint(e.violations)
	e.violations = nil
	e.mu.Unlock()
	if !strings.Contains(got, "non-JSON-RPC line") || !strings.Contains(got, "never used") {
		t.Fatalf("violations = %s", got)
	}
}
