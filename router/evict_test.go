package router

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/store"
)

// envTestAgent makes the test binary run as testAgent, for the tests that
// need an agent process.
const envTestAgent = "ACP_ROUTER_TEST_AGENT"

// testAgent is a minimal ACP agent on stdin/stdout: initialize (with
// loadSession), session/new (ids t-1, t-2, ...), session/load,
// session/set_mode, and session/prompt, which sends one agent_message_chunk
// "echo: TEXT" and ends the turn (after a second when TEXT is "slow", 5 s
// when "slower").
// With envTestAgent "family" it also advertises and answers logout (a
// line in the file envTestAgentLog names) and auth/status.
func testAgent() int {
	var mu sync.Mutex
	write := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(append(b, '\n'))
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	sessions := 0
	family := os.Getenv(envTestAgent) == "family"
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" || m.ID == nil {
			continue
		}
		id := m.ID
		reply := func(res any) { write(map[string]any{"jsonrpc": "2.0", "id": id, "result": res}) }
		switch m.Method {
		case "initialize":
			if family {
				reply(json.RawMessage(`{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"auth":{"logout":{},"status":{}}}}`))
				break
			}
			reply(json.RawMessage(`{"protocolVersion":1,"agentCapabilities":{"loadSession":true}}`))
		case "logout":
			if f, err := os.OpenFile(os.Getenv(envTestAgentLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(f, "logout %d\n", os.Getpid())
				f.Close()
			}
			reply(map[string]any{})
		case "auth/status":
			// Signed out in a directory of that name (family_test.go).
			cwd, _ := os.Getwd()
			state := "authenticated"
			if filepath.Base(cwd) == "signed-out" {
				state = "unauthenticated"
			}
			reply(map[string]any{"state": state, "accounts": []any{map[string]string{"label": "the key"}}})
		case "session/new":
			sessions++
			reply(map[string]string{"sessionId": fmt.Sprintf("t-%d", sessions)})
		case "session/load", "session/set_mode":
			reply(map[string]any{})
		case "session/prompt":
			var p struct {
				SessionID string `json:"sessionId"`
				Prompt    []struct {
					Text string `json:"text"`
				} `json:"prompt"`
			}
			json.Unmarshal(m.Params, &p)
			text := p.Prompt[len(p.Prompt)-1].Text
			go func() {
				switch text {
				case "slow":
					time.Sleep(time.Second)
				case "slower":
					time.Sleep(5 * time.Second)
				}
				write(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": p.SessionID,
					"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": "echo: " + text}}}})
				reply(map[string]string{"stopReason": "end_turn"})
			}()
		default:
			write(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32601, "message": "Method not found"}})
		}
	}
	return 0
}

// testEditor is the editor side of a router served on pipes.
type testEditor struct {
	peer  *acp.Peer
	mu    sync.Mutex
	text  map[string][]string // agent_message_chunk texts by session
	marks int                 // SessionHistory's marks received (attach_test.go)
}

func (e *testEditor) Handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Method == markMethod {
		e.mu.Lock()
		e.marks++
		e.mu.Unlock()
		return
	}
	if req.Method != acp.MethodSessionUpdate || req.Params == nil {
		return
	}
	var p struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			Kind    string `json:"sessionUpdate"`
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	if json.Unmarshal(*req.Params, &p) == nil && p.Update.Kind == "agent_message_chunk" {
		e.mu.Lock()
		e.text[p.SessionID] = append(e.text[p.SessionID], p.Update.Content.Text)
		e.mu.Unlock()
	}
}

func (e *testEditor) texts(sid string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.text[sid]...)
}

func (e *testEditor) call(method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := e.peer.Call(ctx, method, params, nil, nil)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx)
}

func (e *testEditor) mustCall(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	res, err := e.call(method, params)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return res
}

func (e *testEditor) newSession(t *testing.T) string {
	t.Helper()
	var res struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(e.mustCall(t, acp.MethodSessionNew, map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}), &res)
	return res.SessionID
}

func prompt(sid, text string) map[string]any {
	return map[string]any{"sessionId": sid, "prompt": []any{map[string]string{"type": "text", "text": text}}}
}

// startRouter serves a router with one agent (testAgent) and a session
// store on pipes, and initializes it.
func startRouter(t *testing.T, opts Options) (*Router, *testEditor) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf("version: 1\nstate_dir: '%s'\nagents:\n  - name: a\n    command: '%s'\n    env: {%s: '1'}\nrouting: {default: a}\n", dir, bin, envTestAgent)
	return startRouterYAML(t, dir, yaml, opts)
}

// startRouterYAML is startRouter with the config yaml and the session
// store in dir.
func startRouterYAML(t *testing.T, dir, yaml string, opts Options) (*Router, *testEditor) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "sessions"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = st
	if opts.OpenDelay == 0 {
		opts.OpenDelay = time.Millisecond
	}
	opts.ShutdownGrace, opts.KillGrace = 100*time.Millisecond, 100*time.Millisecond
	r := New(cfg, opts)
	routerIn, editorOut := io.Pipe()
	editorIn, routerOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		r.Serve(ctx, routerIn, routerOut)
	}()
	e := &testEditor{text: map[string][]string{}}
	e.peer = acp.NewPeer(ctx, editorIn, editorOut, acp.StreamOptions{}, e)
	t.Cleanup(func() {
		editorOut.Close() // the editor quits
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("the router did not stop")
		}
		cancel()
		st.Close()
	})
	e.mustCall(t, acp.MethodInitialize, map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	return r, e
}

func (r *Router) live(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[id] != nil
}

func rpcCode(err error) int {
	var e *jsonrpc2.Error
	if errors.As(err, &e) {
		return int(e.Code)
	}
	return 0
}

// TestIdleSessionsEvicted: a session idle for EvictIdle leaves memory, one
// with a running turn does not; the next prompt (or another request)
// naming an evicted session brings it back from the store transparently,
// re-attached to the agent's own session; a session the editor closed, or
// one that never existed, is not brought back.
func TestIdleSessionsEvicted(t *testing.T) {
	t.Parallel()
	log, logs := testLogger(t)
	r, e := startRouter(t, Options{Logger: log, EvictIdle: 300 * time.Millisecond})
	idle, busy := e.newSession(t), e.newSession(t)

	slow := make(chan error, 1)
	go func() {
		_, err := e.call(acp.MethodSessionPrompt, prompt(busy, "slow"))
		slow <- err
	}()
	waitFor(t, func() bool { return !r.live(idle) })
	for done := false; !done; {
		if !r.live(busy) {
			t.Fatal("a session with a running turn was evicted")
		}
		select {
		case err := <-slow:
			if err != nil {
				t.Fatalf("the slow prompt: %v", err)
			}
			done = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	if logs.count("idle session evicted from memory") != 1 {
		t.Errorf("eviction not logged once:\n%s", logs)
	}

	// The evicted session's next prompt: transparent.
	res := e.mustCall(t, acp.MethodSessionPrompt, prompt(idle, "hello"))
	if !strings.Contains(string(res), "end_turn") {
		t.Errorf("prompt of an evicted session = %s", res)
	}
	if got := e.texts(idle); len(got) != 1 || got[0] != "echo: hello" {
		t.Errorf("chunks of the evicted session = %q", got)
	}
	if logs.count("session brought back from the store") != 1 || logs.count("agent reopened its session") != 1 {
		t.Errorf("not brought back through the agent's own load:\n%s", logs)
	}

	// Another request naming an evicted session: transparent too.
	waitFor(t, func() bool { return !r.live(busy) })
	if _, err := e.call(acp.MethodSetMode, map[string]any{"sessionId": busy, "modeId": "x"}); err != nil {
		t.Errorf("set_mode on an evicted session: %v", err)
	}

	// Closed by the editor: gone for prompts (session/load brings it back).
	e.mustCall(t, acp.MethodSessionClose, map[string]any{"sessionId": idle})
	if _, err := e.call(acp.MethodSessionPrompt, prompt(idle, "again")); rpcCode(err) != acp.CodeInvalidParams {
		t.Errorf("prompt after close: %v, want unknown session", err)
	}
	if _, err := e.call(acp.MethodSessionPrompt, prompt("never-was", "hi")); rpcCode(err) != acp.CodeInvalidParams || !strings.Contains(err.Error(), "unknown session") {
		t.Errorf("prompt of an unknown session: %v, want unknown session", err)
	}
}

// TestMaxSessionsEvicted: past MaxSessions, the least recently used idle
// sessions are evicted before EvictIdle.
func TestMaxSessionsEvicted(t *testing.T) {
	t.Parallel()
	r, e := startRouter(t, Options{EvictIdle: time.Hour, MaxSessions: 2})
	var ids []string
	for range 5 {
		ids = append(ids, e.newSession(t))
	}
	waitFor(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.sessions) <= 2
	})
	if !r.live(ids[4]) {
		t.Error("the newest session was evicted")
	}
	if r.live(ids[0]) {
		t.Error("the oldest session was kept")
	}
	e.mustCall(t, acp.MethodSessionPrompt, prompt(ids[0], "back"))
	if got := e.texts(ids[0]); len(got) != 1 || got[0] != "echo: back" {
		t.Errorf("chunks = %q", got)
	}
}

// TestSessionForFindsTheID: sessionFor reads params' sessionId as the
// agent and the editor's lane read it (the name exactly, escapes resolved),
// beside blocks it does not decode.
func TestSessionForFindsTheID(t *testing.T) {
	a := &Session{ID: "a"}
	r := &Router{sessionTable: sessionTable{sessions: map[string]*Session{"a": a}}}
	big := strings.Repeat(`{"type":"text","text":"x"},`, 10000)
	for _, tt := range []struct {
		params string
		want   *Session
		id     string
	}{
		{`{"sessionId":"a","prompt":[` + big + `{"type":"text","text":"y"}]}`, a, "a"},
		{`{"prompt":[],"sessionId":"\u0061"}`, a, "a"},
		{`{"SessionId":"a","prompt":[]}`, nil, ""},
		{`{"sessionId":7}`, nil, ""},
		{`{"sessionId":"b"}`, nil, "b"},
	} {
		if s, id := r.sessionFor(t.Context(), json.RawMessage(tt.params)); s != tt.want || id != tt.id {
			t.Errorf("sessionFor(%.60s) = %v, %q; want %v, %q", tt.params, s, id, tt.want, tt.id)
		}
	}
}

// TestPromptAfterFailedRevive: a prompt naming a session the router does
// not hold registers it to be brought back from the store (sessionFor);
// when that revive fails (the store has no such session) before the
// prompt takes the session's lock, the prompt is answered with the
// revive's error and starts no turn. It started one on a session with no
// agent, and the router panicked (found by TestExchanges/errors under
// load: a nil *upstream.Agent in ensureDownstream).
func TestPromptAfterFailedRevive(t *testing.T) {
	t.Parallel()
	r, _ := startRouter(t, Options{})
	p := json.RawMessage(`{"sessionId":"ghost","prompt":[{"type":"text","text":"say x"}]}`)
	s, _ := r.sessionFor(t.Context(), p)
	if s == nil || s.ready == nil {
		t.Fatal("sessionFor did not register the session to bring back")
	}
	select {
	case <-s.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the revive did not end")
	}
	req := &jsonrpc2.Request{Method: acp.MethodSessionPrompt, ID: jsonrpc2.ID{Num: 999}, Params: &p}
	r.promptOn(t.Context(), s, req)
	s.mu.Lock()
	started, err := s.turn != nil, s.reviveErr
	s.mu.Unlock()
	if started || rpcCode(err) != int(jsonrpc2.CodeInvalidParams) {
		t.Errorf("after a failed revive: turn started %v, revive error %v (want none started, unknown session)", started, err)
	}
}
