package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/store"
)

// envFakeAgent makes the test binary a scripted ACP agent (TestMain).
const envFakeAgent = "HUB_TEST_FAKE_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(envFakeAgent) != "" {
		os.Exit(fakeAgent())
	}
	os.Exit(m.Run())
}

// fakeAgent speaks ACP on stdin/stdout until EOF (stdlib only). Its
// sessions are "sess-N", with session/load. session/prompt runs the last
// text block as a script, one command a line, on its own goroutine:
//
//	say TEXT      an agent_message_chunk with TEXT
//	big N SIZE    N chunks of SIZE bytes ("big I xxx...")
//	permission ID a session/request_permission for tool call ID, waited
//	              for; then says "permission ID: OPTION" (or "cancelled")
//	sleep D       waits D (a Go duration), or until the turn is cancelled
//	read PATH     an fs/read_text_file, waited for; then says "read PATH:
//	              CONTENT" (or "error")
//
// A turn cancelled (session/cancel) ends with stopReason "cancelled".
func fakeAgent() int {
	var mu sync.Mutex
	send := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(append(b, '\n'))
	}
	var (
		pmu       sync.Mutex
		pending   = map[string]chan json.RawMessage{}
		cancelled = map[string]chan struct{}{}
		nextID    int
		nextSes   int
	)
	run := func(id json.RawMessage, sid, script string, cancel chan struct{}) {
		say := func(text string) {
			send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid,
				"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": text}}}})
		}
		stop := "end_turn"
	script:
		for _, line := range strings.Split(script, "\n") {
			cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
			select {
			case <-cancel:
				stop = "cancelled"
				break script
			default:
			}
			switch cmd {
			case "say":
				say(arg)
			case "big":
				var n, size int
				fmt.Sscan(arg, &n, &size)
				for i := range n {
					text := fmt.Sprintf("big %d ", i)
					say(text + strings.Repeat("x", max(0, size-len(text))))
				}
			case "sleep":
				d, _ := time.ParseDuration(arg)
				select {
				case <-time.After(d):
				case <-cancel:
				}
			case "read":
				ch := make(chan json.RawMessage, 1)
				pmu.Lock()
				nextID++
				rid := fmt.Sprintf(`"read-%d"`, nextID)
				pending[rid] = ch
				pmu.Unlock()
				send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(rid), "method": "fs/read_text_file", "params": map[string]any{"sessionId": sid, "path": arg}})
				res := <-ch
				var r struct{ Content string }
				if json.Unmarshal(res, &r) == nil && r.Content != "" {
					say("read " + arg + ": " + r.Content)
				} else {
					say("read " + arg + ": error")
				}
			case "permission":
				ch := make(chan json.RawMessage, 1)
				pmu.Lock()
				nextID++
				rid := fmt.Sprintf(`"perm-%d"`, nextID)
				pending[rid] = ch
				pmu.Unlock()
				send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(rid), "method": "session/request_permission", "params": map[string]any{
					"sessionId": sid,
					"toolCall":  map[string]any{"toolCallId": arg, "title": "run " + arg, "kind": "execute"},
					"options": []map[string]string{{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
						{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}})
				var res json.RawMessage
				select {
				case res = <-ch:
				case <-cancel:
					res = <-ch // the client must still answer (cancelled)
				}
				var r struct {
					Outcome struct{ Outcome, OptionID string }
				}
				json.Unmarshal(res, &r)
				if r.Outcome.OptionID != "" {
					say("permission " + arg + ": " + r.Outcome.OptionID)
				} else {
					say("permission " + arg + ": " + r.Outcome.Outcome)
				}
			}
		}
		select {
		case <-cancel:
			stop = "cancelled"
		default:
		}
		pmu.Lock()
		delete(cancelled, sid)
		pmu.Unlock()
		send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]string{"stopReason": stop}})
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		reply := func(result any) { send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result}) }
		var p struct {
			SessionID string `json:"sessionId"`
			Prompt    []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"prompt"`
		}
		json.Unmarshal(m.Params, &p)
		switch {
		case m.Method == "" && len(m.ID) > 0:
			pmu.Lock()
			ch := pending[string(m.ID)]
			delete(pending, string(m.ID))
			pmu.Unlock()
			if ch != nil {
				if m.Error != nil {
					ch <- nil
				} else {
					ch <- m.Result
				}
			}
		case m.Method == "initialize":
			reply(map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": true}})
		case m.Method == "session/new":
			nextSes++
			reply(map[string]any{"sessionId": fmt.Sprintf("sess-%d-%d", os.Getpid(), nextSes)})
		case m.Method == "session/load":
			reply(map[string]any{})
		case m.Method == "session/prompt":
			script := ""
			for _, b := range p.Prompt {
				if b.Type == "text" {
					script = b.Text
				}
			}
			ch := make(chan struct{})
			pmu.Lock()
			cancelled[p.SessionID] = ch
			pmu.Unlock()
			go run(m.ID, p.SessionID, script, ch)
		case m.Method == "session/cancel":
			pmu.Lock()
			if ch := cancelled[p.SessionID]; ch != nil {
				close(ch)
				delete(cancelled, p.SessionID)
			}
			pmu.Unlock()
		case m.Method != "" && len(m.ID) > 0:
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
	return 0
}

// env is a Router with the fake agent and a store, behind a Hub, all in
// process on pipes.
type env struct {
	t   testing.TB
	hub *Hub
	dir string
	tap *tap // what the hub wrote to the Router
}

// tap records the lines written through it.
type tap struct {
	io.WriteCloser
	mu    sync.Mutex
	lines []string
}

func (t *tap) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.lines = append(t.lines, string(p))
	t.mu.Unlock()
	return t.WriteCloser.Write(p)
}

// sentWith returns the lines written to the Router that contain s.
func (t *tap) sentWith(s string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, l := range t.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// startHub serves a Router (one fake agent, a session store) and a Hub
// with opts in front of it.
func startHub(t testing.TB, opts Options) *env {
	t.Helper()
	return startHubSlow(t, opts, 0)
}

// slowReader sleeps before each read: the Router's queue to the hub then
// holds a backlog, as with a busy machine.
type slowReader struct {
	io.ReadCloser
	d time.Duration
}

func (r slowReader) Read(p []byte) (int, error) {
	time.Sleep(r.d)
	return r.ReadCloser.Read(p[:min(len(p), 4096)])
}

// startHubSlow is startHub with the hub reading the Router's stream
// slowly (a pause of slow before each read of at most 4 KiB).
func startHubSlow(t testing.TB, opts Options, slow time.Duration) *env {
	t.Helper()
	return startHubAgents(t, opts, slow, nil)
}

// startHubAgents is startHubSlow with more agents (the fake agent too,
// started lazily) after the default one, "fake".
func startHubAgents(t testing.TB, opts Options, slow time.Duration, more []string) *env {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	agent := "  - name: %s\n    title: %s agent\n    command: '%s'\n    env: {%s: '1', GORACE: 'atexit_sleep_ms=0'}\n"
	yaml := fmt.Sprintf("version: 1\nstate_dir: '%s'\nagents:\n"+agent, dir, "fake", "Fake", exe, envFakeAgent)
	for _, name := range more {
		yaml += fmt.Sprintf(agent+"    lazy: true\n", name, name, exe, envFakeAgent)
	}
	yaml += "routing: {default: fake}\n"
	cfg, err := config.Parse("test.yaml", []byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "sessions"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
	r := router.New(cfg, router.Options{Store: st, OpenDelay: time.Millisecond, ShutdownGrace: 100 * time.Millisecond, KillGrace: 100 * time.Millisecond, Logger: logger})
	if opts.History == nil {
		opts.History = r
	}
	if opts.Logger == nil {
		opts.Logger = logger
	}
	h := New(opts)
	routerIn, hubOut := io.Pipe()
	hubIn, routerOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served, ran := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		r.Serve(ctx, routerIn, routerOut)
		routerOut.Close()
	}()
	tp := &tap{WriteCloser: hubOut}
	var from io.ReadCloser = hubIn
	if slow > 0 {
		from = slowReader{hubIn, slow}
	}
	go func() {
		defer close(ran)
		h.Run(ctx, tp, from)
	}()
	t.Cleanup(func() {
		hubOut.Close() // the editor side quits: the Router stops
		for _, ch := range []chan struct{}{served, ran} {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Error("the router or the hub did not stop")
			}
		}
		cancel()
		st.Close()
	})
	return &env{t: t, hub: h, dir: dir, tap: tp}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pipeConn is a Conn in memory: the test writes what the client sends to
// in, and reads what it gets from out.
type pipeConn struct {
	in     chan []byte
	out    chan []byte
	block  chan struct{} // non-nil: Write waits on it (a client that stopped reading)
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	reason error
}

func newPipeConn() *pipeConn { return newPipeConnCap(1 << 16) }

// newPipeConnCap is a pipeConn whose out channel holds n messages.
func newPipeConnCap(n int) *pipeConn {
	return &pipeConn{in: make(chan []byte, 4), out: make(chan []byte, n), closed: make(chan struct{})}
}

func (c *pipeConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *pipeConn) Write(ctx context.Context, msg []byte) error {
	if c.block != nil {
		select {
		case <-c.block:
		case <-c.closed:
			return io.ErrClosedPipe
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case c.out <- msg:
		return nil
	case <-c.closed:
		return io.ErrClosedPipe
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *pipeConn) Close(reason error) error {
	c.once.Do(func() {
		c.mu.Lock()
		c.reason = reason
		c.mu.Unlock()
		close(c.closed)
	})
	return nil
}

func (c *pipeConn) closeReason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// msg is one message a test client got.
type msg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	raw []byte
}

// tclient is a test client on a pipeConn: it reads everything the hub
// sends it in order (all), answers waiting calls, and hands requests to
// reqs.
type tclient struct {
	t      testing.TB
	conn   *pipeConn
	served chan error
	mu     sync.Mutex
	nextID int
	calls  map[string]chan msg
	all    []msg // every message, in order
	reqs   chan msg
	seen   chan struct{} // capacity 1: something arrived
	done   chan struct{}
}

func (e *env) connect(id Identity) *tclient {
	return e.connectConn(newPipeConn(), id)
}

func (e *env) connectConn(conn *pipeConn, id Identity) *tclient {
	e.t.Helper()
	c := &tclient{t: e.t, conn: conn, served: make(chan error, 1), calls: map[string]chan msg{}, reqs: make(chan msg, 100),
		seen: make(chan struct{}, 1), done: make(chan struct{})}
	go func() { c.served <- e.hub.Serve(context.Background(), conn, id) }()
	go c.read()
	e.t.Cleanup(func() {
		conn.Close(nil)
		select {
		case <-c.served:
		case <-time.After(5 * time.Second):
			e.t.Error("Serve did not return")
		}
		<-c.done
	})
	return c
}

func (c *tclient) read() {
	defer close(c.done)
	for {
		select {
		case raw := <-c.conn.out:
			var m msg
			if err := json.Unmarshal(raw, &m); err != nil {
				c.t.Errorf("client got a line that does not decode: %s", raw)
				continue
			}
			m.raw = raw
			c.mu.Lock()
			c.all = append(c.all, m)
			var ch chan msg
			if m.Method == "" {
				ch = c.calls[string(m.ID)]
				delete(c.calls, string(m.ID))
			}
			c.mu.Unlock()
			signal(c.seen)
			switch {
			case ch != nil:
				ch <- m
			case m.Method != "" && m.ID != nil:
				c.reqs <- m
			}
		case <-c.conn.closed:
			return
		}
	}
}

func (c *tclient) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	select {
	case c.conn.in <- b:
	case <-c.conn.closed:
	}
}

// start sends a request; the answer comes on the channel.
func (c *tclient) start(method string, params any) <-chan msg {
	c.mu.Lock()
	c.nextID++
	id := fmt.Sprintf(`"c-%d"`, c.nextID)
	ch := make(chan msg, 1)
	c.calls[id] = ch
	c.mu.Unlock()
	c.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	return ch
}

func (c *tclient) call(method string, params any) msg {
	c.t.Helper()
	select {
	case m := <-c.start(method, params):
		return m
	case <-time.After(20 * time.Second):
		c.t.Fatalf("%s: no answer", method)
	}
	return msg{}
}

func (c *tclient) mustCall(method string, params any) json.RawMessage {
	c.t.Helper()
	m := c.call(method, params)
	if m.Error != nil {
		c.t.Fatalf("%s: error %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m.Result
}

func (c *tclient) initialize() json.RawMessage {
	c.t.Helper()
	return c.mustCall("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": true}}})
}

func (c *tclient) newSession() string {
	c.t.Helper()
	var r struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(c.mustCall("session/new", map[string]any{"cwd": c.t.TempDir(), "mcpServers": []any{}}), &r)
	if r.SessionID == "" {
		c.t.Fatal("session/new gave no session id")
	}
	return r.SessionID
}

func promptParams(sid, script string) map[string]any {
	return map[string]any{"sessionId": sid, "prompt": []any{map[string]string{"type": "text", "text": script}}}
}

// request waits for the next request the hub sends the client.
func (c *tclient) request() msg {
	c.t.Helper()
	select {
	case m := <-c.reqs:
		return m
	case <-time.After(20 * time.Second):
		c.t.Fatal("no request came")
	}
	return msg{}
}

func (c *tclient) answer(id json.RawMessage, result any) {
	c.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func allow(option string) map[string]any {
	return map[string]any{"outcome": map[string]string{"outcome": "selected", "optionId": option}}
}

// texts are the agent_message_chunk texts client got for sid, in order.
func (c *tclient) texts(sid string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.all {
		if t, ok := chunkText(m, sid); ok {
			out = append(out, t)
		}
	}
	return out
}

func chunkText(m msg, sid string) (string, bool) {
	if m.Method != "session/update" {
		return "", false
	}
	var p struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	json.Unmarshal(m.Params, &p)
	if p.SessionID != sid || p.Update.SessionUpdate != "agent_message_chunk" {
		return "", false
	}
	return p.Update.Content.Text, true
}

// updates are the session/update params client got for sid with the given
// sessionUpdate kind ("": all).
func (c *tclient) updates(sid, kind string) []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []json.RawMessage
	for _, m := range c.all {
		if m.Method != "session/update" {
			continue
		}
		var p struct {
			SessionID string `json:"sessionId"`
			Update    struct {
				SessionUpdate string `json:"sessionUpdate"`
			} `json:"update"`
		}
		json.Unmarshal(m.Params, &p)
		if p.SessionID == sid && (kind == "" || p.Update.SessionUpdate == kind) {
			out = append(out, m.Params)
		}
	}
	return out
}

// waitFor polls cond for up to 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
