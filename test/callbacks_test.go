package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCallbacksMidPrompt pins that agent → editor requests in the middle of
// a prompt (permission, fs read/write, terminal) work on two sessions on two
// agents at once, with translated session and request ids (both agents
// number their own requests from 0, so their ids collide with each other and
// with ids the router chose; the editor reports two pending requests with
// the same id as a violation), and that an editor slow to answer on
// session A does not hold up session B: B's turn completes while A's
// permission request is still unanswered (no deadlock, no head-of-line
// blocking).
func TestCallbacksMidPrompt(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})},
		"default: alpha",
		"rules:",
		cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil)

	var (
		mu          sync.Mutex
		sidA        string
		known       = map[string]bool{}
		release     = make(chan struct{})
		releaseOnce sync.Once
	)
	releaseA := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseA)
	// Every callback must carry an editor-side session id.
	checkSession := func(method string, params json.RawMessage) {
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(params, &p)
		mu.Lock()
		defer mu.Unlock()
		if !known[p.SessionID] {
			e.violation("%s for session %q, which the editor does not know", method, p.SessionID)
		}
	}
	e.Handle("session/request_permission", func(params json.RawMessage) (any, *RPCError) {
		checkSession("session/request_permission", params)
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(params, &p)
		mu.Lock()
		slow := p.SessionID == sidA
		mu.Unlock()
		if slow {
			select {
			case <-release:
			case <-time.After(waitTimeout):
			}
		}
		return AllowFirst(params)
	})
	for _, method := range []string{"fs/read_text_file", "fs/write_text_file", "terminal/create"} {
		h := map[string]Handler{"fs/read_text_file": readTextFile, "fs/write_text_file": writeTextFile, "terminal/create": e.terms.create}[method]
		e.Handle(method, func(params json.RawMessage) (any, *RPCError) {
			checkSession(method, params)
			return h(params)
		})
	}

	e.Initialize(t, capsAll)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)
	warm := e.NewSession(t, filepath.Join(dirB, "warm-up"))
	mu.Lock()
	sidA = a
	known[a], known[b], known[warm] = true, true, true
	mu.Unlock()

	// Warm-up on beta: its callback ids now start at 1 while alpha's start
	// at 0, and the router has already sent the editor a request, so
	// agent ids and the router's own editor-side ids are out of step.
	if err := os.WriteFile(filepath.Join(dirB, "warm.txt"), []byte("warm"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.MustPrompt(t, warm, "read "+filepath.Join(dirB, "warm.txt"), "end_turn")
	if got := e.Texts(warm); len(got) != 1 || got[0] != "read: warm" {
		t.Fatalf("warm-up chunks %q", got)
	}

	script := func(dir, tag string) string {
		in := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(in, []byte("content of "+tag), 0o644); err != nil {
			t.Fatal(err)
		}
		return strings.Join([]string{
			"permission",
			"read " + in,
			"write " + filepath.Join(dir, "out.txt") + " written by " + tag,
			"terminal echo hi",
			"say done " + tag,
		}, "\n")
	}
	scriptA, scriptB := script(dirA, "A"), script(dirB, "B")

	doneA := make(chan *Msg, 1)
	go func() {
		m, err := e.Prompt(2*waitTimeout, a, scriptA)
		if err != nil {
			t.Error(err)
		}
		doneA <- m
	}()
	e.Rec.WaitFor(t, waitTimeout, "permission request for session A", func(m *Msg) bool {
		return m.IsRequest() && m.Method == "session/request_permission" && m.SessionID() == a
	})

	// B runs its whole turn, with the same callbacks, while A waits for the
	// editor.
	start := time.Now()
	mb, err := e.Prompt(10*time.Second, b, scriptB)
	if err != nil {
		t.Fatalf("session B did not complete while session A waited for the editor: %v", err)
	}
	requireStop(t, mb, "end_turn")
	checkTurn(t, e, b, dirB, "B")
	t.Logf("session B completed in %v while A waited", time.Since(start))
	select {
	case <-doneA:
		t.Fatal("session A completed before the editor answered its permission request")
	default:
	}

	releaseA()
	var ma *Msg
	select {
	case ma = <-doneA:
	case <-time.After(2 * waitTimeout):
		t.Fatal("session A did not complete after the editor answered")
	}
	if ma == nil {
		t.FailNow()
	}
	requireStop(t, ma, "end_turn")
	checkTurn(t, e, a, dirA, "A")
}

// checkTurn checks the chunks of the callbacks script for one session.
func checkTurn(t *testing.T, e *Editor, sid, dir, tag string) {
	t.Helper()
	texts := e.Texts(sid)
	if len(texts) != 5 {
		t.Fatalf("session %s: chunks %q, want 5", tag, texts)
	}
	perm, ok := strings.CutPrefix(texts[0], "permission: ")
	if !ok || !jsonEqual([]byte(perm), []byte(`{"outcome":"selected","optionId":"allow"}`)) {
		t.Errorf("session %s: permission chunk %q", tag, texts[0])
	}
	if want := "read: content of " + tag; texts[1] != want {
		t.Errorf("session %s: read chunk %q, want %q", tag, texts[1], want)
	}
	if texts[2] != "write: ok" {
		t.Errorf("session %s: write chunk %q", tag, texts[2])
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "written by "+tag {
		t.Errorf("session %s: written file %q", tag, b)
	}
	if texts[3] != "terminal: hi\n" {
		t.Errorf("session %s: terminal chunk %q", tag, texts[3])
	}
	if texts[4] != "done "+tag {
		t.Errorf("session %s: last chunk %q", tag, texts[4])
	}
}

// TestTerminalNotAdvertised pins DESIGN §8: an agent never uses a
// capability the editor did not advertise. The editor advertises fs only;
// the agent's terminal/create gets -32601 from the router and never reaches
// the editor.
func TestTerminalNotAdvertised(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsFSOnly)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "terminal echo hi\nsay done", "end_turn")
	texts := e.Texts(sid)
	if len(texts) != 2 || !strings.HasPrefix(texts[0], "terminal error: create: -32601 ") {
		t.Errorf("chunks %q, want a -32601 terminal error", texts)
	}
	if got := e.Rec.Filter(func(m *Msg) bool { return strings.HasPrefix(m.Method, "terminal/") }); len(got) > 0 {
		t.Errorf("the editor received %s although it did not advertise terminal", got[0])
	}
}

// startAlphaBeta is a router with two fake agents, alpha (the default)
// and beta (its session ids differ from the router's), an editor with
// every capability, and a session with each.
func startAlphaBeta(t *testing.T) (e *Editor, sidA, sidB string) {
	t.Helper()
	dirB := t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"})},
		"default: alpha", "rules:", cwdRule(dirB, "beta"),
	))
	e = StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	return e, e.NewSession(t, t.TempDir()), e.NewSession(t, dirB)
}

// TestTerminalOwnership pins DESIGN §7: an agent may only use terminals it
// created (another agent's terminal id is refused by the router), and the
// terminals of an agent that goes away are killed and released.
func TestTerminalOwnership(t *testing.T) {
	t.Parallel()
	e, sidA, sidB := startAlphaBeta(t)

	e.MustPrompt(t, sidA, "terminal-create echo hi", "end_turn")
	var termID string
	for _, text := range e.Texts(sidA) {
		if id, ok := strings.CutPrefix(text, "terminal-id: "); ok {
			termID = id
		}
	}
	if termID == "" {
		t.Fatalf("alpha got no terminal: %q", e.Texts(sidA))
	}
	e.MustPrompt(t, sidB, "terminal-output "+termID, "end_turn")
	if got := strings.Join(e.Texts(sidB), "\n"); !strings.Contains(got, "terminal error: -32602") {
		t.Errorf("beta used alpha's terminal: %q, want the router's -32602", got)
	}
	if n := len(e.Rec.Filter(func(m *Msg) bool { return m.Method == "terminal/output" })); n != 0 {
		t.Errorf("the editor saw %d terminal/output requests for a terminal the caller does not own", n)
	}
	e.MustPrompt(t, sidA, "terminal-output "+termID, "end_turn") // its owner may

	// alpha crashes: the router kills and releases its terminal.
	if _, err := e.Prompt(waitTimeout, sidA, "crash"); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"terminal/kill", "terminal/release"} {
		e.Rec.WaitFor(t, waitTimeout, method+" of the crashed agent's terminal", func(m *Msg) bool {
			return m.Method == method && jsonString(m.Params, "terminalId") == termID && jsonString(m.Params, "sessionId") == sidA
		})
	}
}

// TestRelativePathsRefused pins that the router answers an agent's file
// read or terminal with a relative path or working directory itself, with
// -32602 naming it (ACP: each must be absolute), also with no permission
// policy: the editor never sees the call, and would resolve it against a
// directory of its own choosing.
func TestRelativePathsRefused(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "read notes.txt\nterminal-cwd sub/dir ls\nterminal-cwd ../up ls", "end_turn")
	texts := e.Texts(sid)
	want := []string{
		`read error: -32602 acp-router: fs/read_text_file needs an absolute path, got "notes.txt"`,
		`terminal error: -32602 acp-router: terminal/create needs an absolute cwd, got "sub/dir"`,
		`terminal error: -32602 acp-router: terminal/create needs an absolute cwd, got "../up"`,
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("agent saw\n%s\nwant\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
	if got := e.Rec.Filter(func(m *Msg) bool { return m.Method == "fs/read_text_file" || m.Method == "terminal/create" }); len(got) > 0 {
		t.Errorf("the editor received %s", got[0])
	}
}
