package test

// The scripted editor: starts a command that speaks ACP as an agent on
// stdin/stdout (the router, or a fake agent directly), sends requests with
// UUID-like string ids as Zed does, answers the agent's requests with
// pluggable handlers, and records every message it receives, in order.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitTimeout bounds every wait of the harness, so that a hang fails the test
// instead of hanging CI.
const waitTimeout = 20 * time.Second

// codeNoResponse is the code of the RPCError Call returns when no response
// came (timeout, or the process exited). It is not a JSON-RPC code.
const codeNoResponse = -1

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	if len(e.Data) > 0 {
		return fmt.Sprintf("%d %s (data %s)", e.Code, e.Message, truncate(string(e.Data), 2000))
	}
	return fmt.Sprintf("%d %s", e.Code, e.Message)
}

// Msg is one message the editor received.
type Msg struct {
	Seq    int       // position in the Recorder
	At     time.Time // when it was read
	Raw    []byte    // the line as received
	ID     json.RawMessage
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *RPCError

	upd *updateInfo // for session/update
}

func hasID(id json.RawMessage) bool { return len(id) > 0 && string(id) != "null" }

// IsRequest, IsNotification and IsResponse classify the message.
func (m *Msg) IsRequest() bool      { return m.Method != "" && hasID(m.ID) }
func (m *Msg) IsNotification() bool { return m.Method != "" && !hasID(m.ID) }
func (m *Msg) IsResponse() bool     { return m.Method == "" }

// updateInfo is what the tests read from a session/update, decoded once
// when the message arrives (updates can be megabytes long).
type updateInfo struct {
	SessionID string `json:"sessionId"`
	Update    struct {
		Kind    string       `json:"sessionUpdate"`
		Content chunkContent `json:"content"`
	} `json:"update"`
}

// chunkContent is the content of a message chunk. Other updates carry other
// shapes there (tool_call and tool_call_update: an array of ToolCallContent),
// which are left empty.
type chunkContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (c *chunkContent) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return nil
	}
	type plain chunkContent
	return json.Unmarshal(b, (*plain)(c))
}

// SessionID is params.sessionId of a request or notification.
func (m *Msg) SessionID() string {
	if m.upd != nil {
		return m.upd.SessionID
	}
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.SessionID
}

// Update returns the sessionUpdate kind of a session/update ("" otherwise).
func (m *Msg) Update() string {
	if m.upd == nil {
		return ""
	}
	return m.upd.Update.Kind
}

// ChunkText returns the text of an agent_message_chunk for session sid.
func (m *Msg) ChunkText(sid string) (string, bool) {
	u := m.upd
	if u == nil || u.SessionID != sid || u.Update.Kind != "agent_message_chunk" || u.Update.Content.Type != "text" {
		return "", false
	}
	return u.Update.Content.Text, true
}

func (m *Msg) String() string {
	return fmt.Sprintf("#%d %s", m.Seq, truncate(string(m.Raw), 300))
}

// Recorder holds every message received, in order.
type Recorder struct {
	mu      sync.Mutex
	msgs    []*Msg
	changed chan struct{} // closed and replaced on every append
	closed  bool          // the stream ended
}

func newRecorder() *Recorder { return &Recorder{changed: make(chan struct{})} }

func (r *Recorder) add(m *Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m.Seq = len(r.msgs)
	r.msgs = append(r.msgs, m)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	close(r.changed)
	r.changed = make(chan struct{})
}

// All returns the messages received so far.
func (r *Recorder) All() []*Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Msg(nil), r.msgs...)
}

// Filter returns the messages received so far that match pred.
func (r *Recorder) Filter(pred func(*Msg) bool) []*Msg {
	var out []*Msg
	for _, m := range r.All() {
		if pred(m) {
			out = append(out, m)
		}
	}
	return out
}

// Await waits up to timeout for a message matching pred (already received or
// not) and returns the first one.
func (r *Recorder) Await(timeout time.Duration, pred func(*Msg) bool) (*Msg, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	next := 0
	for {
		r.mu.Lock()
		msgs, changed, closed := r.msgs[next:], r.changed, r.closed
		r.mu.Unlock()
		for _, m := range msgs {
			if pred(m) {
				return m, true
			}
		}
		next += len(msgs)
		if closed {
			return nil, false
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, false
		}
	}
}

// WaitFor is Await that fails the test on timeout.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, pred func(*Msg) bool) *Msg {
	t.Helper()
	m, ok := r.Await(timeout, pred)
	if !ok {
		t.Fatalf("no %s within %v", what, timeout)
	}
	return m
}

// Handler answers a request from the agent side.
type Handler func(params json.RawMessage) (any, *RPCError)

// Editor is a scripted ACP client connected to one agent process.
type Editor struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wmu   sync.Mutex
	Rec   *Recorder

	slowRead time.Duration

	mu         sync.Mutex
	pending    map[string]chan *Msg // our requests by canonical id
	methods    map[string]string    // the method of each of our requests
	schema     *acpSchema           // what every message received is checked against; nil: not checked
	noResults  bool                 // editorConfig.noResultSchema
	answered   map[string]bool
	handlers   map[string]Handler
	inflight   map[string]bool // the peer's requests we are answering
	violations []string

	stderr *tailBuffer
	terms  *editorTerminals

	start         time.Time
	stdinClosedAt atomic.Pointer[time.Time]
	exited        chan struct{}
	exitAt        time.Time
	exitCode      int
}

type editorConfig struct {
	slowRead time.Duration
	env      []string
	setpgid  bool
	stdout   func(io.Reader) io.Reader
	// noResultSchema: the results of the editor's requests are not checked
	// against the ACP schema (agents that echo what they were sent).
	noResultSchema bool
}

// EditorOption configures StartEditor.
type EditorOption func(*editorConfig)

// withSlowRead makes the editor sleep d after reading each line, so that the
// peer's writes back up.
func withSlowRead(d time.Duration) EditorOption { return func(c *editorConfig) { c.slowRead = d } }

// withOwnProcessGroup starts the process in a process group of its own, so
// that a test can signal that group without signalling itself.
func withOwnProcessGroup() EditorOption { return func(c *editorConfig) { c.setpgid = true } }

// withStdout puts wrap between the process's stdout and the editor's
// reader (to pause or throttle the editor's reading).
func withStdout(wrap func(io.Reader) io.Reader) EditorOption {
	return func(c *editorConfig) { c.stdout = wrap }
}

// withoutResultSchema leaves the results of the editor's requests
// unchecked against the ACP schema, for agents that answer with an echo of
// the request (fakeOpts.EchoUnknown); everything else is still checked.
func withoutResultSchema() EditorOption { return func(c *editorConfig) { c.noResultSchema = true } }

// withEnv adds environment variables to the started process.
func withEnv(kv ...string) EditorOption {
	return func(c *editorConfig) { c.env = append(c.env, kv...) }
}

// StartRouter starts the router binary as an editor would.
func StartRouter(t testing.TB, cfgPath string, extraArgs []string, opts ...EditorOption) *Editor {
	t.Helper()
	bin := needRouter(t)
	argv := append([]string{bin, "--config", cfgPath, "--log-level", "debug"}, extraArgs...)
	return StartEditor(t, argv, opts...)
}

// StartEditor starts argv and connects the editor to its stdin/stdout. The
// process is stopped in t.Cleanup.
func StartEditor(t testing.TB, argv []string, opts ...EditorOption) *Editor {
	t.Helper()
	var cfg editorConfig
	for _, o := range opts {
		o(&cfg)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: cfg.setpgid}
	cmd.Env = append(withoutEnv(withoutEnv(os.Environ(), envFakeAgent), envFakeSleeper), cfg.env...)
	// Race-enabled fake agents would otherwise sleep 1 s at exit.
	cmd.Env = append(withoutEnv(cmd.Env, "GORACE"), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	e := &Editor{
		t:         t,
		cmd:       cmd,
		Rec:       newRecorder(),
		slowRead:  cfg.slowRead,
		pending:   map[string]chan *Msg{},
		methods:   map[string]string{},
		schema:    loadSchema(t),
		noResults: cfg.noResultSchema,
		answered:  map[string]bool{},
		handlers:  map[string]Handler{},
		inflight:  map[string]bool{},
		stderr:    &tailBuffer{max: 1 << 20},
		terms:     &editorTerminals{m: map[string]*editorTerm{}},
		exited:    make(chan struct{}),
	}
	e.handlers["session/request_permission"] = AllowFirst
	e.handlers["fs/read_text_file"] = readTextFile
	e.handlers["fs/write_text_file"] = writeTextFile
	e.terms.install(e.handlers)

	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e.stdin = stdin
	var out io.Reader = stdout
	if cfg.stdout != nil {
		out = cfg.stdout(stdout)
	}
	cmd.Stderr = e.stderr
	// Children of the process may keep stderr open; do not wait for them.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	e.start = time.Now()

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		e.readLoop(out)
	}()
	go func() {
		err := cmd.Wait()
		e.exitAt = time.Now()
		e.exitCode = cmd.ProcessState.ExitCode()
		if err != nil && e.exitCode == 0 {
			e.exitCode = -1
		}
		<-readDone
		close(e.exited)
	}()
	t.Cleanup(e.cleanup)
	return e
}

func (e *Editor) cleanup() {
	t := e.t
	_ = e.CloseStdin()
	select {
	case <-e.exited:
	case <-time.After(time.Second):
		// Graceful shutdown is TestShutdown's business; here only speed matters.
		_ = e.cmd.Process.Kill()
		select {
		case <-e.exited:
		case <-time.After(5 * time.Second):
			t.Errorf("%s did not exit after SIGKILL", e.cmd.Path)
		}
	}
	e.terms.killAll()
	// Every goroutine of the router has an owner and ends at shutdown
	// (issue 12, point 7): the router names those that did not.
	if strings.Contains(e.stderr.String(), "goroutines still running") {
		t.Errorf("the router left goroutines running at shutdown")
	}
	for _, line := range strings.Split(e.stderr.String(), "\n") {
		if _, v, ok := strings.Cut(line, "SCHEMA VIOLATION: "); ok {
			e.violation("the router sent an agent a message that does not conform to the ACP schema: %s", v)
		}
	}
	e.mu.Lock()
	for _, v := range e.violations {
		t.Errorf("protocol violation seen by the editor: %s", v)
	}
	e.mu.Unlock()
	if t.Failed() {
		t.Logf("stderr of %s (last %d bytes):\n%s", filepath.Base(e.cmd.Path), e.stderr.max, e.stderr.String())
	}
}

func (e *Editor) violation(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.violations = append(e.violations, fmt.Sprintf(format, args...))
}

// canonicalID renders an id so that equal JSON values give equal keys.
func canonicalID(id json.RawMessage) string {
	var v any
	if err := json.Unmarshal(id, &v); err != nil {
		return string(id)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (e *Editor) readLoop(stdout io.Reader) {
	defer e.Rec.close()
	br := bufio.NewReaderSize(stdout, 64*1024)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			e.receive(bytes.TrimRight(line, "\r\n"))
			if e.slowRead > 0 {
				time.Sleep(e.slowRead)
			}
		}
		if err != nil {
			return
		}
	}
}

func (e *Editor) receive(line []byte) {
	m := &Msg{At: time.Now(), Raw: line}
	var w wireMsg
	if err := json.Unmarshal(line, &w); err != nil || w.JSONRPC != "2.0" {
		// Nothing but protocol messages may ever be written to stdout.
		e.violation("non-JSON-RPC line on stdout: %q", truncate(string(line), 200))
		return
	}
	m.ID, m.Method, m.Params, m.Result, m.Error = w.ID, w.Method, w.Params, w.Result, w.Error
	if m.Method == "session/update" {
		m.upd = &updateInfo{}
		if err := json.Unmarshal(m.Params, m.upd); err != nil {
			e.violation("malformed session/update: %v: %s", err, truncate(string(line), 200))
		}
	}
	if m.Method == "" && len(m.Result) == 0 && m.Error == nil {
		e.violation("response without result or error: %s", truncate(string(line), 200))
	}
	e.Rec.add(m)
	// RFD #533's permission_resolved (a draft: not in the schema yet) is
	// the one session update the hub adds.
	if e.schema != nil && m.Method != "" && m.Update() != "permission_resolved" {
		if v := e.schema.checkMessage(m.Method, m.IsRequest(), m.Params); v != "" {
			e.violation("%s params do not conform to the ACP schema: %s: %s", m.Method, v, truncate(string(line), 400))
		}
	}
	if e.schema != nil && m.Error != nil {
		var raw struct {
			Error json.RawMessage `json:"error"`
		}
		json.Unmarshal(line, &raw)
		if v := check(e.schema.def("Error"), raw.Error); v != "" {
			e.violation("an error does not conform to the ACP schema: %s: %s", v, truncate(string(line), 400))
		}
	}
	switch {
	case m.IsResponse():
		if !hasID(m.ID) {
			return // tests that expect null-id errors look for them in Rec
		}
		key := canonicalID(m.ID)
		e.mu.Lock()
		ch := e.pending[key]
		delete(e.pending, key)
		method := e.methods[key]
		delete(e.methods, key)
		if e.schema != nil && !e.noResults && ch != nil && m.Error == nil {
			if v := check(e.schema.forMethod("response", method), m.Result); v != "" {
				e.violations = append(e.violations, fmt.Sprintf("the result of %s does not conform to the ACP schema: %s: %s", method, v, truncate(string(line), 400)))
			}
		}
		switch {
		case ch != nil:
			e.answered[key] = true
		case e.answered[key]:
			e.violations = append(e.violations, "second response to our request "+key)
		default:
			e.violations = append(e.violations, "response to an id we never used: "+key)
		}
		e.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.IsRequest():
		key := canonicalID(m.ID)
		e.mu.Lock()
		if e.inflight[key] {
			e.violations = append(e.violations, fmt.Sprintf("request %s %s while our answer to an earlier request with the same id is pending", m.Method, key))
		}
		e.inflight[key] = true
		h := e.handlers[m.Method]
		e.mu.Unlock()
		go e.answer(m, key, h)
	}
}

func (e *Editor) answer(m *Msg, key string, h Handler) {
	var (
		res  any
		rerr *RPCError
	)
	if h == nil {
		rerr = &RPCError{Code: -32601, Message: "Method not found", Data: mustJSON(map[string]string{"method": m.Method})}
	} else {
		res, rerr = h(m.Params)
	}
	e.mu.Lock()
	delete(e.inflight, key) // before replying: the peer may reuse the id at once
	e.mu.Unlock()
	out := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	if rerr != nil {
		out["error"] = rerr
	} else {
		if res == nil {
			res = map[string]any{}
		}
		out["result"] = res
	}
	_ = e.send(out)
}

// Handle installs the handler for requests of method from the agent side.
func (e *Editor) Handle(method string, h Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers[method] = h
}

func (e *Editor) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.writeLine(b)
}

func (e *Editor) writeLine(b []byte) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	_, err := e.stdin.Write(append(b, '\n'))
	return err
}

// SendLine writes raw followed by a newline, as is.
func (e *Editor) SendLine(raw string) error { return e.writeLine([]byte(raw)) }

// newID returns a UUID-like request id, as Zed uses.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var errExited = errors.New("the process exited before answering")

// Request sends a request and waits for the response message. params nil
// omits params.
func (e *Editor) Request(ctx context.Context, method string, params any) (*Msg, error) {
	_, wait, err := e.Go(method, params)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// Go sends a request and returns its id and a function that waits for the
// response, for tests that act on a request while it is pending.
func (e *Editor) Go(method string, params any) (json.RawMessage, func(context.Context) (*Msg, error), error) {
	id := newID()
	raw := mustJSON(id)
	key := canonicalID(raw)
	ch := make(chan *Msg, 1)
	e.mu.Lock()
	e.pending[key] = ch
	e.methods[key] = method
	e.mu.Unlock()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if err := e.send(msg); err != nil {
		return nil, nil, fmt.Errorf("send %s: %w", method, err)
	}
	wait := func(ctx context.Context) (*Msg, error) {
		select {
		case m := <-ch:
			return m, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: no response: %w", method, ctx.Err())
		case <-e.exited:
			select {
			case m := <-ch:
				return m, nil
			default:
				return nil, fmt.Errorf("%s: %w", method, errExited)
			}
		}
	}
	return raw, wait, nil
}

// Call sends a request and returns its result or error. A missing response
// comes back as an RPCError with code codeNoResponse.
func (e *Editor) Call(ctx context.Context, method string, params any) (json.RawMessage, *RPCError) {
	m, err := e.Request(ctx, method, params)
	if err != nil {
		return nil, &RPCError{Code: codeNoResponse, Message: err.Error()}
	}
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

// MustCall is Call with waitTimeout that fails the test on any error.
func (e *Editor) MustCall(t testing.TB, method string, params any) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, rerr := e.Call(ctx, method, params)
	if rerr != nil {
		t.Fatalf("%s: %v", method, rerr)
	}
	return res
}

// Notify sends a notification.
func (e *Editor) Notify(method string, params any) error {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	return e.send(msg)
}

// CloseStdin closes the process's stdin (the editor quits).
func (e *Editor) CloseStdin() error {
	now := time.Now()
	e.stdinClosedAt.CompareAndSwap(nil, &now)
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.stdin.Close()
}

// Wait waits up to timeout for the process to exit and returns its exit code
// and the time from CloseStdin (or start) to its exit.
func (e *Editor) Wait(timeout time.Duration) (code int, elapsed time.Duration, ok bool) {
	select {
	case <-e.exited:
	case <-time.After(timeout):
		return 0, 0, false
	}
	from := e.start
	if p := e.stdinClosedAt.Load(); p != nil {
		from = *p
	}
	return e.exitCode, e.exitAt.Sub(from), true
}

// Stderr returns the tail of the process's stderr.
func (e *Editor) Stderr() string { return e.stderr.String() }

// LogCount returns how many times what is in the router's log once it is
// there at least n times, or at waitTimeout. The log is read from its own
// pipe: a line the router wrote before an answer may reach the test after
// the answer.
func (e *Editor) LogCount(what string, n int) int {
	deadline := time.Now().Add(waitTimeout)
	for {
		c := strings.Count(e.Stderr(), what)
		if c >= n || time.Now().After(deadline) {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Capabilities the editor advertises in initialize.
var (
	capsAll    = map[string]any{"fs": map[string]any{"readTextFile": true, "writeTextFile": true}, "terminal": true}
	capsFSOnly = map[string]any{"fs": map[string]any{"readTextFile": true, "writeTextFile": true}, "terminal": false}
)

// Initialize sends initialize with the given client capabilities.
func (e *Editor) Initialize(t testing.TB, caps any) json.RawMessage {
	t.Helper()
	return e.MustCall(t, "initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": caps,
		"clientInfo":         map[string]any{"name": "e2e-editor", "version": "1"},
	})
}

// NewSession creates a session with the given cwd and returns its id.
func (e *Editor) NewSession(t testing.TB, cwd string) string {
	t.Helper()
	res := e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	var r struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.SessionID == "" {
		t.Fatalf("session/new result %s: no sessionId", truncate(string(res), 500))
	}
	return r.SessionID
}

// promptParams builds session/prompt params: the script as the first text
// block, then extra text blocks.
func promptReq(sid, script string, extra ...string) map[string]any {
	blocks := []any{map[string]any{"type": "text", "text": script}}
	for _, x := range extra {
		blocks = append(blocks, map[string]any{"type": "text", "text": x})
	}
	return map[string]any{"sessionId": sid, "prompt": blocks}
}

// Prompt sends a prompt and waits (up to timeout) for its response message.
func (e *Editor) Prompt(timeout time.Duration, sid, script string, extra ...string) (*Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return e.Request(ctx, "session/prompt", promptReq(sid, script, extra...))
}

// MustPrompt sends a prompt and requires a successful response with the
// given stopReason.
func (e *Editor) MustPrompt(t testing.TB, sid, script, wantStop string) *Msg {
	t.Helper()
	m, err := e.Prompt(waitTimeout, sid, script)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, wantStop)
	return m
}

func requireStop(t testing.TB, m *Msg, want string) {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("session/prompt failed: %v", m.Error)
	}
	requireJSON(t, "session/prompt result", m.Result, `{"stopReason":"`+want+`"}`)
}

// Texts returns the agent_message_chunk texts for sid received so far.
func (e *Editor) Texts(sid string) []string {
	var out []string
	for _, m := range e.Rec.All() {
		if txt, ok := m.ChunkText(sid); ok {
			out = append(out, txt)
		}
	}
	return out
}

// WaitText waits for an agent_message_chunk for sid with exactly text.
func (e *Editor) WaitText(t testing.TB, sid, text string) *Msg {
	t.Helper()
	return e.Rec.WaitFor(t, waitTimeout, fmt.Sprintf("chunk %q for %s", text, sid), func(m *Msg) bool {
		got, ok := m.ChunkText(sid)
		return ok && got == text
	})
}

// Default handlers for agent → client requests.

// AllowFirst answers session/request_permission with the first allow_once option.
func AllowFirst(params json.RawMessage) (any, *RPCError) {
	return choosePermission(params, "allow_once")
}

// RejectFirst answers with the first reject_once option.
func RejectFirst(params json.RawMessage) (any, *RPCError) {
	return choosePermission(params, "reject_once")
}

func choosePermission(params json.RawMessage, kind string) (any, *RPCError) {
	var p struct {
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &RPCError{Code: -32602, Message: err.Error()}
	}
	for _, o := range p.Options {
		if o.Kind == kind {
			return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": o.OptionID}}, nil
		}
	}
	return map[string]any{"outcome": map[string]any{"outcome": "cancelled"}}, nil
}

func readTextFile(params json.RawMessage) (any, *RPCError) {
	var p struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(params, &p); err != nil || !filepath.IsAbs(p.Path) {
		return nil, &RPCError{Code: -32602, Message: "path must be absolute"}
	}
	b, err := os.ReadFile(p.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &RPCError{Code: -32002, Message: "Resource not found: " + p.Path}
	}
	if err != nil {
		return nil, &RPCError{Code: -32603, Message: err.Error()}
	}
	return map[string]any{"content": string(b)}, nil
}

func writeTextFile(params json.RawMessage) (any, *RPCError) {
	var p struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(params, &p); err != nil || !filepath.IsAbs(p.Path) {
		return nil, &RPCError{Code: -32602, Message: "path must be absolute"}
	}
	if err := os.MkdirAll(filepath.Dir(p.Path), 0o755); err != nil {
		return nil, &RPCError{Code: -32603, Message: err.Error()}
	}
	if err := os.WriteFile(p.Path, []byte(p.Content), 0o644); err != nil {
		return nil, &RPCError{Code: -32603, Message: err.Error()}
	}
	return map[string]any{}, nil
}

// editorTerminals implements the terminal/* methods with real processes.
type editorTerminals struct {
	mu sync.Mutex
	n  int
	m  map[string]*editorTerm
}

type editorTerm struct {
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
}

func (ts *editorTerminals) install(h map[string]Handler) {
	h["terminal/create"] = ts.create
	h["terminal/output"] = ts.output
	h["terminal/wait_for_exit"] = ts.waitForExit
	h["terminal/kill"] = ts.kill
	h["terminal/release"] = ts.release
}

type termRef struct {
	SessionID  string `json:"sessionId"`
	TerminalID string `json:"terminalId"`
}

func (ts *editorTerminals) create(params json.RawMessage) (any, *RPCError) {
	var p struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Cwd     string   `json:"cwd"`
		Env     []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"env"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Command == "" {
		return nil, &RPCError{Code: -32602, Message: "terminal/create: bad params"}
	}
	cmd := exec.Command(p.Command, p.Args...)
	cmd.Dir = p.Cwd
	cmd.Env = os.Environ()
	for _, kv := range p.Env {
		cmd.Env = append(cmd.Env, kv.Name+"="+kv.Value)
	}
	term := &editorTerm{cmd: cmd, out: &tailBuffer{max: 1 << 20}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = term.out, term.out
	if err := cmd.Start(); err != nil {
		return nil, &RPCError{Code: -32603, Message: err.Error()}
	}
	go func() { _ = cmd.Wait(); close(term.done) }()
	ts.mu.Lock()
	ts.n++
	id := "term-" + strconv.Itoa(ts.n) + "-" + newID()[:8]
	ts.m[id] = term
	ts.mu.Unlock()
	return map[string]any{"terminalId": id}, nil
}

func (ts *editorTerminals) get(params json.RawMessage) (*editorTerm, *RPCError) {
	var p termRef
	_ = json.Unmarshal(params, &p)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	term := ts.m[p.TerminalID]
	if term == nil {
		return nil, &RPCError{Code: -32602, Message: "unknown terminal " + p.TerminalID}
	}
	return term, nil
}

func exitStatus(term *editorTerm) map[string]any {
	st := term.cmd.ProcessState
	if st == nil {
		return nil
	}
	return map[string]any{"exitCode": st.ExitCode(), "signal": nil}
}

func (ts *editorTerminals) output(params json.RawMessage) (any, *RPCError) {
	term, rerr := ts.get(params)
	if rerr != nil {
		return nil, rerr
	}
	res := map[string]any{"output": term.out.String(), "truncated": false}
	select {
	case <-term.done:
		res["exitStatus"] = exitStatus(term)
	default:
	}
	return res, nil
}

func (ts *editorTerminals) waitForExit(params json.RawMessage) (any, *RPCError) {
	term, rerr := ts.get(params)
	if rerr != nil {
		return nil, rerr
	}
	select {
	case <-term.done:
		return exitStatus(term), nil
	case <-time.After(waitTimeout):
		return nil, &RPCError{Code: -32603, Message: "terminal did not exit"}
	}
}

func (ts *editorTerminals) kill(params json.RawMessage) (any, *RPCError) {
	term, rerr := ts.get(params)
	if rerr != nil {
		return nil, rerr
	}
	_ = term.cmd.Process.Kill()
	return map[string]any{}, nil
}

func (ts *editorTerminals) release(params json.RawMessage) (any, *RPCError) {
	term, rerr := ts.get(params)
	if rerr != nil {
		return nil, rerr
	}
	_ = term.cmd.Process.Kill()
	var p termRef
	_ = json.Unmarshal(params, &p)
	ts.mu.Lock()
	delete(ts.m, p.TerminalID)
	ts.mu.Unlock()
	return map[string]any{}, nil
}

func (ts *editorTerminals) killAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, term := range ts.m {
		_ = term.cmd.Process.Kill()
	}
}

// tailBuffer is a concurrency-safe writer that keeps the last max bytes.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
