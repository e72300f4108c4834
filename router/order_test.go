package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/telemetry"
)

// slowFS is the policy's filesystem with a slow disk under prefix: Resolve
// of a path there blocks until release is closed (entered gets the path);
// every other path answers at once, as itself.
type slowFS struct {
	prefix  string
	release chan struct{}
	entered chan string
}

func (f *slowFS) Resolve(p string) (string, error) {
	if strings.HasPrefix(p, f.prefix) {
		select {
		case f.entered <- p:
		default:
		}
		<-f.release
	}
	return path.Clean(p), nil
}

func (f *slowFS) Stat(string) (exists, dir bool) { return false, false }
func (f *slowFS) Glob(string) ([]string, error)  { return nil, nil }

// edMsg is one message the test editor received, in arrival order.
type edMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// orderEditor is the editor's end of a router served in-process over
// pipes: it records what it receives, answers fs/read_text_file with
// "content of PATH", and matches responses to its calls.
type orderEditor struct {
	t   *testing.T
	r   *Router
	wmu sync.Mutex
	w   io.WriteCloser

	mu      sync.Mutex
	msgs    []*edMsg
	changed chan struct{} // closed at each message
	calls   map[string]chan *edMsg
	nextID  int
	// perm, when set, answers each session/request_permission the
	// editor gets: the result given its params.
	perm func(params json.RawMessage) any
}

func (e *orderEditor) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.w.Write(append(b, '\n'))
}

// call sends a request; its response arrives on the channel.
func (e *orderEditor) call(method string, params any) (string, <-chan *edMsg) {
	e.mu.Lock()
	e.nextID++
	id := fmt.Sprint(e.nextID)
	ch := make(chan *edMsg, 1)
	e.calls[id] = ch
	e.mu.Unlock()
	e.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	return id, ch
}

// mustCall calls and waits for a successful result.
func (e *orderEditor) mustCall(method string, params any) json.RawMessage {
	e.t.Helper()
	_, ch := e.call(method, params)
	return e.await(method, ch)
}

// await waits for the successful result of a call made with call.
func (e *orderEditor) await(method string, ch <-chan *edMsg) json.RawMessage {
	e.t.Helper()
	select {
	case m := <-ch:
		if m.Error != nil {
			e.t.Fatalf("%s: %s", method, m.Error)
		}
		return m.Result
	case <-time.After(20 * time.Second):
		e.t.Fatalf("%s: no answer", method)
	}
	return nil
}

func (e *orderEditor) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		m := new(edMsg)
		if json.Unmarshal(sc.Bytes(), m) != nil {
			continue
		}
		e.mu.Lock()
		e.msgs = append(e.msgs, m)
		close(e.changed)
		e.changed = make(chan struct{})
		var ch chan *edMsg
		if m.Method == "" {
			ch = e.calls[string(m.ID)]
			delete(e.calls, string(m.ID))
		}
		perm := e.perm
		e.mu.Unlock()
		if perm != nil && m.Method == "session/request_permission" && len(m.ID) > 0 {
			e.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": perm(m.Params)})
		}
		if ch != nil {
			ch <- m
		}
		if m.Method == "fs/read_text_file" && len(m.ID) > 0 {
			var p struct{ Path string }
			json.Unmarshal(m.Params, &p)
			e.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]string{"content": "content of " + p.Path}})
		}
	}
}

// waitFor waits until a received message satisfies pred.
func (e *orderEditor) waitFor(what string, timeout time.Duration, pred func(*edMsg) bool) {
	e.t.Helper()
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		found := slices.ContainsFunc(e.msgs, pred)
		changed := e.changed
		e.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			e.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// transcript is what session sid showed the editor so far, in order:
// the text of each message chunk, "request PATH" for each
// fs/read_text_file, and "end" for the response to the prompt endID.
func (e *orderEditor) transcript(sid, endID string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, m := range e.msgs {
		var p struct {
			SessionID string `json:"sessionId"`
			Path      string `json:"path"`
			Update    struct {
				Kind    string `json:"sessionUpdate"`
				Content struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"update"`
		}
		json.Unmarshal(m.Params, &p)
		switch {
		case m.Method == "" && string(m.ID) == endID:
			out = append(out, "end")
		case p.SessionID != sid:
		case m.Method == "session/update" && p.Update.Kind == "agent_message_chunk":
			out = append(out, p.Update.Content.Text)
		case m.Method == "fs/read_text_file":
			out = append(out, "request "+p.Path)
		}
	}
	return out
}

// newOrderRouter serves a router in-process with one agent, the fake agent
// (a real process, so a real read loop), and a guard on fs whose policy
// allows reads in the session's cwd; it returns the editor's end.
func newOrderRouter(t *testing.T, fs *slowFS, decideTimeout time.Duration) *orderEditor {
	t.Helper()
	return newOrderRouterTel(t, fs, decideTimeout, nil)
}

// newOrderRouterTel is newOrderRouter with telemetry tel (nil: off).
func newOrderRouterTel(t *testing.T, fs *slowFS, decideTimeout time.Duration, tel *telemetry.Telemetry) *orderEditor {
	t.Helper()
	return newPolicyRouter(t, `  default: ask
  rules:
    - {id: reads-in-project, decision: allow, when: {kind: [read], paths: ["${cwd}/**"]}}
`, guard.Options{FS: fs, DecideTimeout: decideTimeout, Telemetry: tel}, Options{OpenDelay: time.Millisecond, Telemetry: tel})
}

// newPolicyRouter serves a router in-process with opts and one agent, the
// fake agent, under a guard with gopts enforcing permissions (the lines
// under permissions:, indented); it returns the editor's end.
func newPolicyRouter(t *testing.T, permissions string, gopts guard.Options, opts Options) *orderEditor {
	t.Helper()
	e, _ := newPolicyRouterOf(t, []string{"fake"}, "", permissions, gopts, opts)
	return e
}

// newPolicyRouterOf is newPolicyRouter with the fake agents named agents
// (the first the routing default), the config's extra top-level lines,
// and the audit log's file, which it returns.
func newPolicyRouterOf(t *testing.T, agents []string, extra, permissions string, gopts guard.Options, opts Options) (*orderEditor, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	yaml := "version: 1\nagents:\n"
	for _, a := range agents {
		yaml += fmt.Sprintf("  - name: %s\n    command: '%s'\n    env: {%s: \"1\", GORACE: \"atexit_sleep_ms=0\"}\n", a, exe, envFakeAgent)
	}
	yaml += fmt.Sprintf(`state_dir: '%s'
audit: {file: '%s'}
%spermissions:
%s`, filepath.Join(dir, "state"), filepath.Join(dir, "audit.jsonl"), extra, permissions)
	cfg, err := config.Parse("order.yaml", []byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := guard.LoadPolicy(filepath.Join(dir, "policy.d"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	gopts.AuditFile = cfg.Audit.File
	g, err := guard.New(lp.Policy, gopts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Guard = g
	r := New(cfg, opts)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	e := &orderEditor{t: t, r: r, w: inW, changed: make(chan struct{}), calls: map[string]chan *edMsg{}}
	// Wired as Serve wires it, but from this goroutine, which then writes
	// the editor's first message: Serve assigns r.editor after the peer's
	// read loop started, a race with a handler that answers at once
	// (reported separately; not what this test is about).
	r.editor = acp.NewPeer(context.Background(), inR, outW, acp.StreamOptions{LaneBytes: editorLaneBytes, QueueBytes: editorQueueBytes, AnswerInvalid: true}, editorHandler{r})
	r.editorSet()
	read := make(chan struct{})
	go func() {
		defer close(read)
		e.read(outR)
	}()
	t.Cleanup(func() {
		inW.Close() // the editor leaves: the router stops its agent, as Serve does
		select {
		case <-r.editor.Done():
		case <-time.After(30 * time.Second):
			t.Error("the editor connection did not close")
		}
		r.shutdown()
		outR.Close()
		<-read
		g.Close()
	})
	e.mustCall("initialize", map[string]any{"protocolVersion": 1,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": true, "writeTextFile": true}}})
	return e, cfg.Audit.File
}

// TestDecisionBlocksOnlyItsSession (DESIGN §2, order.go): a decision that
// waits on the filesystem for one session's paths delays neither another
// session on the same agent instance (so the agent's read loop goes on)
// nor anything else, while what the agent sends later for the waiting
// session is held and then delivered after the decided request, in order,
// once the resolver answers or the decision times out.
func TestDecisionBlocksOnlyItsSession(t *testing.T) {
	tests := []struct {
		name          string
		decideTimeout time.Duration
		release       bool     // the resolver answers (else the decision times out)
		wantA         []string // session A's transcript at the end; "PREFIX*" matches a prefix
	}{
		{name: "the resolver answers", decideTimeout: time.Minute, release: true,
			wantA: []string{"a0", "request /a/x", "a1", "a2", "read /a/x: ok content of /a/x", "a3", "end"}},
		{name: "the decision times out", decideTimeout: 2 * time.Second,
			wantA: []string{"a0", "a1", "a2", "read /a/x: error acp-router: denied by " + guard.RuleTimeout + "*", "a3", "end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &slowFS{prefix: "/a/", release: make(chan struct{}), entered: make(chan string, 16)}
			var once sync.Once
			release := func() { once.Do(func() { close(fs.release) }) }
			t.Cleanup(release) // before the router's cleanup (LIFO): nothing stays blocked
			e := newOrderRouter(t, fs, tt.decideTimeout)
			var sid [2]string
			for i, cwd := range []string{"/a", "/b"} {
				var res struct{ SessionID string }
				json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}), &res)
				sid[i] = res.SessionID
			}
			prompt := func(sid, script string) (string, <-chan *edMsg) {
				return e.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []map[string]string{{"type": "text", "text": script}}})
			}

			// Session A: a read whose decision blocks on the filesystem,
			// then more updates sent without waiting for it.
			endA, doneA := prompt(sid[0], "say a0\nread /a/x\nsay a1\nsay a2\nwait\nsay a3")
			select {
			case <-fs.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the decision never reached the filesystem")
			}
			e.waitFor("a0", 20*time.Second, func(m *edMsg) bool { return strings.Contains(string(m.Params), `"a0"`) })

			// Session B, same agent instance, meanwhile: its updates and
			// its own decided read go through at once.
			start := time.Now()
			endB, doneB := prompt(sid[1], "say b0\nread /b/y\nsay b1\nwait\nsay b2")
			select {
			case m := <-doneB:
				if m.Error != nil {
					t.Fatalf("B's prompt: %s", m.Error)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("B's turn did not end while A's decision waited; A: %q", e.transcript(sid[0], endA))
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("B's turn took %v while A's decision waited; want well under 1s", d)
			}
			if got, want := e.transcript(sid[1], endB), []string{"b0", "request /b/y", "b1", "read /b/y: ok content of /b/y", "b2", "end"}; !slices.Equal(got, want) {
				t.Errorf("B's transcript %q, want %q", got, want)
			}
			// Nothing A sent after the blocked request has reached the
			// editor.
			if got := e.transcript(sid[0], endA); !slices.Equal(got, []string{"a0"}) {
				t.Errorf("A's transcript while its decision waits: %q, want only a0", got)
			}

			e.mu.Lock()
			releasedAt := len(e.msgs)
			e.mu.Unlock()
			if tt.release {
				release()
			}
			select {
			case m := <-doneA:
				if m.Error != nil {
					t.Fatalf("A's prompt: %s", m.Error)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("A's turn did not end; A: %q", e.transcript(sid[0], endA))
			}
			got := e.transcript(sid[0], endA)
			if !matchTranscript(got, tt.wantA) {
				t.Errorf("A's transcript %q, want %q", got, tt.wantA)
			}
			e.mu.Lock()
			for i, m := range e.msgs[:releasedAt] {
				if strings.Contains(string(m.Params), `"a1"`) || strings.Contains(string(m.Params), `"/a/x"`) {
					t.Errorf("message #%d of A's came before its decision: %s", i, m.Params)
				}
			}
			e.mu.Unlock()
		})
	}
}

// TestDecisionBacklogBytes (issue 27): what an agent sends for a session
// while one of its decisions waits is bounded in bytes, not only in
// count: a flood of 1 MiB updates behind a decision blocked on the
// filesystem makes the agent's read path wait once the session's backlog
// holds maxSequencedBytes, so the heap stays bounded (by count alone, 4096
// items, the whole flood was held: 454 MiB for 400), the wait is logged,
// and once the decision is made every update reaches the editor, in order,
// after the decided request.
func TestDecisionBacklogBytes(t *testing.T) {
	const updates, size = 32, 1 << 20
	fs := &slowFS{prefix: "/a/", release: make(chan struct{}), entered: make(chan string, 16)}
	var once sync.Once
	release := func() { once.Do(func() { close(fs.release) }) }
	t.Cleanup(release)
	e := newOrderRouter(t, fs, time.Minute)
	var res struct{ SessionID string }
	json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": "/a", "mcpServers": []any{}}), &res)
	sid := res.SessionID
	runtime.GC()
	before := liveHeap()
	end, done := e.call("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []map[string]string{{"type": "text", "text": fmt.Sprintf("read /a/x\nbig %d %d\nwait\nsay after", updates, size)}}})
	select {
	case <-fs.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the decision never reached the filesystem")
	}
	// The agent sends the flood at once: wait until the router either
	// holds it all (the bound by count) or has its read path waiting for
	// room (the bound by bytes).
	e.r.mu.Lock()
	s := e.r.sessions[sid]
	e.r.mu.Unlock()
	if s == nil {
		t.Fatal("no router session")
	}
	q := s.order()
	deadline := time.Now().Add(60 * time.Second)
	for {
		q.mu.Lock()
		queued, bytes := len(q.queue), q.bytes
		q.mu.Unlock()
		if queued >= updates || e.r.seqWaits.count() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s %d items (%d bytes) queued behind the decision and no read waits", queued, bytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	runtime.GC()
	grown := float64(liveHeap()-before) / (1 << 20)
	q.mu.Lock()
	queued, bytes := len(q.queue), q.bytes
	q.mu.Unlock()
	t.Logf("while the decision waits: %d items, %d bytes queued; live heap %.1f MiB above the start", queued, bytes, grown)
	if bytes > maxSequencedBytes+size {
		t.Errorf("%d bytes queued behind the decision; want at most %d (and one message)", bytes, maxSequencedBytes)
	}
	if limit := float64(maxSequencedBytes)/(1<<20) + 8*size/(1<<20); grown > limit {
		t.Errorf("the live heap grew by %.1f MiB while %d × 1 MiB updates waited behind a decision; want at most %.0f MiB", grown, updates, limit)
	}
	if e.r.seqWaits.count() == 0 {
		t.Error("the agent's read path never waited, and the wait was not counted")
	}
	release()
	select {
	case m := <-done:
		if m.Error != nil {
			t.Fatalf("prompt: %s", m.Error)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the turn did not end once the decision was made; %d messages of it reached the editor", len(e.transcript(sid, end)))
	}
	got := e.transcript(sid, end)
	var want []string
	want = append(want, "request /a/x")
	for i := range updates {
		want = append(want, fmt.Sprintf("big %d", i))
	}
	want = append(want, "read /a/x: ok content of /a/x", "after", "end")
	for i, g := range got {
		if strings.HasPrefix(g, "big ") {
			got[i] = strings.TrimRight(g, "x ")
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("transcript %q, want %q", got, want)
	}
}

// count is how many d counted.
func (d *drops) count() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// liveHeap is the bytes of live heap objects (after a GC, the live heap).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// matchTranscript compares a transcript with want, where an entry ending
// in "*" matches by prefix.
func matchTranscript(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if p, ok := strings.CutSuffix(w, "*"); ok {
			if !strings.HasPrefix(got[i], p) {
				return false
			}
		} else if got[i] != w {
			return false
		}
	}
	return true
}
