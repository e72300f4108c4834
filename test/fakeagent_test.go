package test

// The fake agent: this test binary re-executed with ACP_FAKE_AGENT set. It
// speaks ACP on stdin/stdout like a real agent (stdlib only, so that it shares
// no code with the router) and logs on stderr. Its behaviour is scripted by
// fakeOpts and by the text of each prompt (see runScript).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fakeOpts configures one fake agent. It travels as JSON in ACP_FAKE_AGENT.
type fakeOpts struct {
	Name          string `json:"name,omitempty"`
	SessionPrefix string `json:"sessionPrefix,omitempty"` // default "sess-"
	// InitDelay is a Go duration waited before answering initialize.
	InitDelay string `json:"initDelay,omitempty"`
	// InitResult replaces the default initialize result.
	InitResult json.RawMessage `json:"initResult,omitempty"`
	// ExitOnEOF (default true): exit when stdin reaches EOF.
	ExitOnEOF     *bool `json:"exitOnEOF,omitempty"`
	IgnoreSIGTERM bool  `json:"ignoreSIGTERM,omitempty"`
	// LingerOnEOF (a Go duration): at stdin's end, write a notification to
	// stdout every 10 ms for that long, log "exit clean", then exit 0 (an
	// agent that says its last words as it shuts down).
	LingerOnEOF string `json:"lingerOnEOF,omitempty"`
	// Grandchild spawns a SIGTERM-ignoring sleeper in the agent's process
	// group and writes its pid to GrandchildPidFile.
	Grandchild        bool   `json:"grandchild,omitempty"`
	GrandchildPidFile string `json:"grandchildPidFile,omitempty"`
	PidFile           string `json:"pidFile,omitempty"`
	// IdlessErrorAfterNotification answers every notification with an
	// error response that has no id member, as Codex does.
	IdlessErrorAfterNotification bool `json:"idlessErrorAfterNotification,omitempty"`
	// IdlessErrorBeforeInit writes such an error just before the
	// initialize response, while the client's initialize is pending (a
	// naive jsonrpc2 client resolves its call 0 with it).
	IdlessErrorBeforeInit bool `json:"idlessErrorBeforeInit,omitempty"`
	// UpdateWithNew writes the session/new response and an
	// available_commands_update for the new session in one write.
	UpdateWithNew bool     `json:"updateWithNew,omitempty"`
	StderrLines   []string `json:"stderrLines,omitempty"`
	// LogFile gets one line per received message (its method, or
	// "response ID") plus "start PID", "turn-end SESSION UNIXNANO",
	// "overlap SESSION" and "hung" lines.
	LogFile string `json:"logFile,omitempty"`
	// FailSessionNew answers session/new with this JSON-RPC error object.
	FailSessionNew json.RawMessage `json:"failSessionNew,omitempty"`
	// SessionResult is merged into every session/new result (modes,
	// models, configOptions, _meta).
	SessionResult json.RawMessage `json:"sessionResult,omitempty"`
	// UniqueSessionIDs puts the process id in session ids, as real agents
	// (UUIDs) never hand out an id twice across restarts.
	UniqueSessionIDs bool `json:"uniqueSessionIds,omitempty"`
	// CrashOnSessionNew prints the secret-bearing fatal line to stderr and
	// exits 3 on every session/new (a crash loop).
	CrashOnSessionNew bool `json:"crashOnSessionNew,omitempty"`
	// ReplayAfterAnswer sends part of a session/load replay after the
	// answer, as Gemini CLI does (it streams its history without waiting).
	ReplayAfterAnswer bool `json:"replayAfterAnswer,omitempty"`
	// Schema is the ACP schema every message from the router is checked
	// against (set by fakeAgentYAML when it is installed); a message that
	// does not conform is reported on stderr as a SCHEMA VIOLATION, which
	// fails the test (Editor.cleanup).
	Schema string `json:"schema,omitempty"`
	// NoSchema: not checked (a test that has the router pass on what the
	// editor sent as it is).
	NoSchema bool `json:"noSchema,omitempty"`
	// ReplayLinesAfterAnswer is how many lines of it (1 when 0), each its
	// own write.
	ReplayLinesAfterAnswer int `json:"replayLinesAfterAnswer,omitempty"`
	// LogRecvTimes adds a "recv METHOD UNIXNANO" line to the log for every
	// request and notification, stamped when its line was read (stdin is
	// read by its own goroutine, never by one that writes stdout).
	LogRecvTimes bool `json:"logRecvTimes,omitempty"`
	// EchoUnknown answers a request for a method the fake agent does not
	// know with {"agent", "method", "params"} instead of -32601.
	EchoUnknown bool `json:"echoUnknown,omitempty"`
	// AuthState is what auth/status answers (unstable_test.go).
	AuthState string `json:"authState,omitempty"`
}

const defaultInitResult = `{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false},"mcpCapabilities":{"http":false,"sse":false},"sessionCapabilities":{}},"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`

// crashLine is what the fake agent prints to stderr before it crashes. The
// router must redact the secret in the stderr tail it shows the editor.
const (
	crashLine   = "fatal: boom OPENAI_API_KEY=sk-secret123"
	crashSecret = "sk-secret123"
)

// Permission options the fake agent offers.
const (
	fakeAllowOption  = "allow"
	fakeRejectOption = "reject"
)

type wireMsg struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

type fakeAgent struct {
	opts   fakeOpts
	prefix string

	wmu  sync.Mutex // serializes stdout writes
	hung atomic.Bool
	// writeFailed: a write to stdout failed (the router is gone).
	writeFailed atomic.Bool

	logMu sync.Mutex
	logF  *os.File

	initialized atomic.Bool
	initParams  atomic.Value // json.RawMessage: the last initialize params, for script commands

	mu      sync.Mutex
	nextID  int64 // own request ids start at 0, like real agents
	pending map[int64]chan wireMsg
	methods map[int64]string // of the pending calls
	// checks are the lines from the router still to check against the
	// schema (opts.Schema; nil: not checked), on a goroutine of their own:
	// compiling the schema takes 30 ms (130 ms under -race), which the
	// agent's first answer must not wait for.
	checks     chan checkLine
	checksDone chan struct{}
	schema     *acpSchema
	sessions   map[string]*fakeSession
	children   map[string]*fakeSession // subagent sessions a script ran commands as ("as")
	nSess      int
	nSent      int // mcp-send requests
}

type fakeSession struct {
	id  string
	cwd string
	// newParams: the session/new params, as received (script new-params).
	newParams json.RawMessage
	turn      *fakeTurn // the running prompt turn, nil when idle
	calls     int       // tool call counter
	// async are the answers to come of requests sent without waiting
	// (permission-async), under fakeAgent.mu.
	async []<-chan wireMsg
}

type fakeTurn struct {
	reqID     json.RawMessage // the session/prompt request's id, as received
	texts     []string        // the prompt's text blocks
	aborted   bool            // $/cancel_request named the prompt: answer -32800
	cancelled chan struct{}
	once      sync.Once
	nocancel  bool
	seq       int // next "updates" sequence number
}

func (tr *fakeTurn) cancel() { tr.once.Do(func() { close(tr.cancelled) }) }

func (tr *fakeTurn) isCancelled() bool {
	if tr.nocancel {
		return false
	}
	select {
	case <-tr.cancelled:
		return true
	default:
		return false
	}
}

func runFakeAgent(optsJSON string) int {
	var opts fakeOpts
	if err := json.Unmarshal([]byte(optsJSON), &opts); err != nil {
		fmt.Fprintln(os.Stderr, "fake agent: bad options:", err)
		return 2
	}
	a := &fakeAgent{
		opts:     opts,
		prefix:   opts.SessionPrefix,
		pending:  map[int64]chan wireMsg{},
		methods:  map[int64]string{},
		sessions: map[string]*fakeSession{},
	}
	if opts.Schema != "" {
		a.checks, a.checksDone = make(chan checkLine, 1<<16), make(chan struct{})
		go a.checkLoop(opts.Schema)
		defer a.endChecks()
	}
	if a.prefix == "" {
		a.prefix = "sess-"
	}
	if opts.UniqueSessionIDs {
		a.prefix += strconv.Itoa(os.Getpid()) + "-"
	}
	if opts.IgnoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
	}
	orphanWatchdog()
	if opts.LogFile != "" {
		f, err := os.OpenFile(opts.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake agent:", err)
			return 2
		}
		a.logF = f
	}
	a.logf("start %d", os.Getpid())
	if opts.PidFile != "" {
		writeFileAtomic(opts.PidFile, strconv.Itoa(os.Getpid()))
	}
	if opts.Grandchild {
		if err := a.spawnGrandchild(); err != nil {
			fmt.Fprintln(os.Stderr, "fake agent: grandchild:", err)
			return 2
		}
	}
	for _, l := range opts.StderrLines {
		fmt.Fprintln(os.Stderr, l)
	}
	fmt.Fprintf(os.Stderr, "fake agent %q: started, pid %d\n", opts.Name, os.Getpid())

	sc := bufio.NewScanner(hangReader{a: a, r: os.Stdin})
	sc.Buffer(make([]byte, 64*1024), 64<<20+4096)
	for sc.Scan() {
		line := sc.Bytes()
		at := time.Now()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var m wireMsg
		if err := json.Unmarshal(line, &m); err != nil {
			fmt.Fprintf(os.Stderr, "fake agent: dropping malformed line (%d bytes): %v\n", len(line), err)
			continue
		}
		if opts.LogRecvTimes && m.Method != "" {
			a.logf("recv %s %d", m.Method, at.UnixNano())
		}
		if a.checks != nil {
			select {
			case a.checks <- checkLine{line: slices.Clone(line), m: m}:
			default: // a flood: not all checked
			}
		}
		a.dispatch(m)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "fake agent: reading stdin:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "fake agent: stdin closed")
	if opts.LingerOnEOF != "" {
		d, err := time.ParseDuration(opts.LingerOnEOF)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake agent: bad lingerOnEOF:", err)
			return 2
		}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			a.logf("goodbye")
			// A write to a stdout nobody reads any more kills the process
			// (SIGPIPE), before "exit clean" is logged.
			if _, err := os.Stdout.WriteString(`{"jsonrpc":"2.0","method":"_fake/goodbye","params":{}}` + "\n"); err != nil {
				a.logf("write: %v", err)
				return 1
			}
		}
		a.logf("exit clean")
	}
	if opts.ExitOnEOF != nil && !*opts.ExitOnEOF {
		for {
			time.Sleep(time.Hour)
		}
	}
	return 0
}

// checkLine is a line from the router, to check against the schema.
type checkLine struct {
	line []byte
	m    wireMsg
}

// checkLoop checks the lines from the router as they come (checkSchema).
func (a *fakeAgent) checkLoop(path string) {
	defer close(a.checksDone)
	s, err := readSchema(path, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent: SCHEMA VIOLATION: cannot read the schema:", err)
		for range a.checks {
		}
		return
	}
	a.schema = s
	for c := range a.checks {
		a.checkSchema(c.line, c.m)
	}
}

// endChecks waits (boundedly) for the lines read so far to be checked.
func (a *fakeAgent) endChecks() {
	close(a.checks)
	select {
	case <-a.checksDone:
	case <-time.After(5 * time.Second):
	}
}

// checkSchema checks a message from the router against the ACP schema:
// the params of a request or notification by method, the result of an
// answer to the agent's own call by that call's method, an error as an
// error. What does not conform goes to stderr as a SCHEMA VIOLATION.
func (a *fakeAgent) checkSchema(line []byte, m wireMsg) {
	if a.schema == nil {
		return
	}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	v, what := "", m.Method
	switch {
	case m.Method != "":
		v = a.schema.checkMessage(m.Method, hasID, m.Params)
	case m.Error != nil:
		var raw struct {
			Error json.RawMessage `json:"error"`
		}
		json.Unmarshal(line, &raw)
		v, what = check(a.schema.def("Error"), raw.Error), "an error"
	default:
		var id int64
		if json.Unmarshal(m.ID, &id) != nil {
			return
		}
		a.mu.Lock()
		method := a.methods[id]
		delete(a.methods, id)
		a.mu.Unlock()
		v, what = check(a.schema.forMethod("response", method), m.Result), "the result of "+method
	}
	if v != "" {
		fmt.Fprintf(os.Stderr, "fake agent: SCHEMA VIOLATION: %s: %s: %s\n", what, v, truncate(string(line), 400))
	}
}

// hangReader stops reading stdin for good once the agent runs "hang", so the
// router's writes to it stall.
type hangReader struct {
	a *fakeAgent
	r io.Reader
}

func (h hangReader) Read(p []byte) (int, error) {
	if h.a.hung.Load() {
		blockForever()
	}
	return h.r.Read(p)
}

func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func writeFileAtomic(path, content string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err == nil {
		_ = os.Rename(tmp, path)
	}
}

func (a *fakeAgent) spawnGrandchild() error {
	return spawnSleeper(a.opts.GrandchildPidFile, false)
}

// spawnSleeper starts a SIGTERM-ignoring sleeper that writes its pid to
// pidFile. By default it stays in the agent's process group (no Setpgid):
// only a group kill reaches it. With setsid it gets a session and group of
// its own, as a tool that daemonizes does: no signal to the agent's group
// reaches it. It keeps the agent's stderr open, like a tool subprocess.
func spawnSleeper(pidFile string, setsid bool) error {
	cmd := exec.Command(os.Args[0])
	// The sleeper writes its pid itself, once it ignores SIGTERM.
	cmd.Env = append(withoutEnv(os.Environ(), envFakeAgent), envFakeSleeper+"="+pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func (a *fakeAgent) logf(format string, args ...any) {
	if a.logF == nil {
		return
	}
	a.logMu.Lock()
	defer a.logMu.Unlock()
	fmt.Fprintf(a.logF, format+"\n", args...)
}

// writeRaw writes whole lines in one write syscall.
func (a *fakeAgent) writeRaw(b []byte) {
	if a.hung.Load() {
		blockForever()
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.hung.Load() {
		blockForever()
	}
	if _, err := os.Stdout.Write(b); err != nil && !a.writeFailed.Swap(true) {
		fmt.Fprintln(os.Stderr, "fake agent: write stdout:", err)
	}
}

func mustLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func (a *fakeAgent) reply(id json.RawMessage, result any) {
	a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "id": id, "result": result}))
}

func (a *fakeAgent) replyErr(id json.RawMessage, e *RPCError) {
	a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "id": id, "error": e}))
}

func (a *fakeAgent) notify(method string, params any) {
	a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "method": method, "params": params}))
}

func (a *fakeAgent) update(sid string, update any) {
	a.notify("session/update", map[string]any{"sessionId": sid, "update": update})
}

func (a *fakeAgent) say(sid, text string) {
	a.update(sid, map[string]any{
		"sessionUpdate": "agent_message_chunk",
		"content":       map[string]any{"type": "text", "text": text},
	})
}

// call sends a request to the client and waits for its answer.
func (a *fakeAgent) call(method string, params any) (json.RawMessage, *RPCError) {
	return a.await(method, a.send(method, params))
}

// callNoWait sends a request to the client before it returns (so the
// request is on the wire ahead of whatever the script writes next, e.g.
// the turn's end) and drops the answer when it comes. A goroutine around
// call would let the request land after the next line, even in the next
// turn, a few runs in a hundred.
func (a *fakeAgent) callNoWait(method string, params any) {
	ch := a.send(method, params)
	go a.await(method, ch)
}

// send registers a request's id, then writes it.
func (a *fakeAgent) send(method string, params any) <-chan wireMsg {
	a.mu.Lock()
	id := a.nextID
	a.nextID++
	ch := make(chan wireMsg, 1)
	a.pending[id] = ch
	a.methods[id] = method
	a.mu.Unlock()
	a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
	return ch
}

// await waits for the answer to a request send wrote.
func (a *fakeAgent) await(method string, ch <-chan wireMsg) (json.RawMessage, *RPCError) {
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-time.After(60 * time.Second):
		return nil, &RPCError{Code: -32603, Message: "fake agent: no answer to " + method}
	}
}

func (a *fakeAgent) dispatch(m wireMsg) {
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	switch {
	case m.Method != "" && hasID:
		a.logf("%s", m.Method)
		a.handleRequest(m)
	case m.Method != "":
		a.logf("%s", m.Method)
		a.handleNotification(m)
	default:
		a.logf("response %s", m.ID)
		var id int64
		if err := json.Unmarshal(m.ID, &id); err != nil {
			fmt.Fprintf(os.Stderr, "fake agent: response with a foreign id %s\n", m.ID)
			return
		}
		a.mu.Lock()
		ch := a.pending[id]
		delete(a.pending, id)
		a.mu.Unlock()
		if ch == nil {
			fmt.Fprintf(os.Stderr, "fake agent: response to unknown id %s\n", m.ID)
			return
		}
		ch <- m
	}
}

const idlessError = `{"jsonrpc":"2.0","error":{"code":-32600,"message":"notifications not supported"}}` + "\n"

func (a *fakeAgent) handleNotification(m wireMsg) {
	if a.opts.IdlessErrorAfterNotification {
		a.writeRaw([]byte(idlessError))
	}
	if m.Method == "$/cancel_request" {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.logf("$/cancel_request %s", p.RequestID)
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, s := range a.sessions {
			if s.turn != nil && string(s.turn.reqID) == string(p.RequestID) {
				s.turn.aborted = true
				s.turn.cancel()
			}
		}
		return
	}
	if m.Method != "session/cancel" {
		return
	}
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.logf("cancel %s", p.SessionID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[p.SessionID]; s != nil && s.turn != nil {
		s.turn.cancel()
	}
}

func (a *fakeAgent) handleRequest(m wireMsg) {
	switch m.Method {
	case "initialize":
		a.initParams.Store(m.Params)
		go func() {
			if d, err := time.ParseDuration(a.opts.InitDelay); err == nil {
				time.Sleep(d)
			}
			res := json.RawMessage(defaultInitResult)
			if len(a.opts.InitResult) > 0 {
				res = a.opts.InitResult
			}
			if a.opts.IdlessErrorBeforeInit {
				a.writeRaw([]byte(idlessError))
			}
			a.initialized.Store(true)
			a.reply(m.ID, res)
		}()
	case "session/new":
		a.sessionNew(m)
	case "session/prompt":
		a.prompt(m)
	case "authenticate":
		var p struct {
			MethodID string `json:"methodId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.logf("authenticate %s", p.MethodID)
		a.reply(m.ID, map[string]any{})
	case "logout":
		a.reply(m.ID, map[string]any{})
	case "session/load", "session/resume":
		// The agent keeps its sessions "on disk": a session of an earlier
		// process is known. Load replays its history first.
		var p struct {
			SessionID string `json:"sessionId"`
			Cwd       string `json:"cwd"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.mu.Lock()
		if a.sessions[p.SessionID] == nil {
			a.sessions[p.SessionID] = &fakeSession{id: p.SessionID, cwd: p.Cwd}
		}
		a.mu.Unlock()
		if m.Method == "session/load" {
			a.say(p.SessionID, "replayed "+p.SessionID)
		}
		result := map[string]any{}
		_ = json.Unmarshal(a.opts.SessionResult, &result)
		a.reply(m.ID, result)
		if m.Method == "session/load" && a.opts.ReplayAfterAnswer {
			for i := range max(a.opts.ReplayLinesAfterAnswer, 1) {
				a.say(p.SessionID, fmt.Sprintf("replayed late %d %s", i, p.SessionID))
			}
		}
	case "session/delete":
		// Which process the router reached: one that knows the session
		// (test/sandbox_terminal_test.go, a process per set of roots).
		var p struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(m.Params, &p)
		a.mu.Lock()
		_, known := a.sessions[p.SessionID]
		a.mu.Unlock()
		a.logf("delete %s known=%v", p.SessionID, known)
		a.reply(m.ID, map[string]any{})
	case "session/set_mode", "session/close", "session/set_model":
		if !a.knownSession(m) {
			return
		}
		a.reply(m.ID, map[string]any{})
	case "session/set_config_option":
		if !a.knownSession(m) {
			return
		}
		var p struct {
			ConfigID string          `json:"configId"`
			Value    json.RawMessage `json:"value"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.reply(m.ID, map[string]any{"configOptions": []any{map[string]any{
			"id": p.ConfigID, "name": p.ConfigID, "type": "select", "currentValue": p.Value,
			"options": []any{map[string]any{"value": p.Value, "name": string(p.Value)}},
		}}})
	case "_fake/echo":
		params := m.Params
		if len(params) == 0 {
			params = json.RawMessage("null")
		}
		a.reply(m.ID, params)
	default:
		if a.opts.EchoUnknown {
			a.reply(m.ID, map[string]any{"agent": a.opts.Name, "method": m.Method, "params": m.Params})
			return
		}
		if h := fakeMethodExt[m.Method]; h != nil {
			h(a, m)
			return
		}
		a.replyErr(m.ID, &RPCError{Code: -32601, Message: "Method not found",
			Data: mustJSON(map[string]string{"method": m.Method})})
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (a *fakeAgent) sessionNew(m wireMsg) {
	if a.opts.CrashOnSessionNew {
		fmt.Fprintln(os.Stderr, crashLine)
		os.Exit(3)
	}
	if len(a.opts.FailSessionNew) > 0 {
		var e RPCError
		_ = json.Unmarshal(a.opts.FailSessionNew, &e)
		a.replyErr(m.ID, &e)
		return
	}
	if !a.initialized.Load() {
		// Real agents misbehave on session/new before initialize; make it
		// visible.
		a.replyErr(m.ID, &RPCError{Code: -32603, Message: "fake agent: session/new before initialize was answered"})
		return
	}
	var p struct {
		Cwd string `json:"cwd"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	a.nSess++
	sid := a.prefix + strconv.Itoa(a.nSess)
	a.sessions[sid] = &fakeSession{id: sid, cwd: p.Cwd, newParams: m.Params}
	a.mu.Unlock()
	result := map[string]any{}
	_ = json.Unmarshal(a.opts.SessionResult, &result)
	result["sessionId"] = sid
	resp := mustLine(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
	if a.opts.UpdateWithNew {
		// Real agents send the first update for a new session on the very
		// next line, often in the same write as the response.
		upd := mustLine(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": sid,
			"update": map[string]any{
				"sessionUpdate":     "available_commands_update",
				"availableCommands": []any{map[string]any{"name": "fake-cmd", "description": "a command of the fake agent"}},
			},
		}})
		resp = append(resp, upd...)
	}
	a.writeRaw(resp)
}

type promptParams struct {
	SessionID string `json:"sessionId"`
	Prompt    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"prompt"`
}

// knownSession answers -32602 when m names a session this agent does not
// have: it catches ids the router failed to translate back.
func (a *fakeAgent) knownSession(m wireMsg) bool {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	a.mu.Unlock()
	if s == nil {
		a.replyErr(m.ID, &RPCError{Code: -32602, Message: "fake agent: unknown session " + p.SessionID})
		return false
	}
	if m.Method == "session/close" {
		a.mu.Lock()
		delete(a.sessions, p.SessionID)
		a.mu.Unlock()
	}
	return true
}

func (a *fakeAgent) prompt(m wireMsg) {
	var p promptParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		a.replyErr(m.ID, &RPCError{Code: -32602, Message: err.Error()})
		return
	}
	if tp := jsonString(m.Params, "_meta", "traceparent"); tp != "" {
		a.logf("prompt-traceparent %s", tp) // test/otel_test.go
	}
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	if s == nil {
		a.mu.Unlock()
		a.replyErr(m.ID, &RPCError{Code: -32603, Message: "fake agent: unknown session " + p.SessionID})
		return
	}
	if s.turn != nil {
		a.mu.Unlock()
		a.logf("overlap %s", p.SessionID)
		a.replyErr(m.ID, &RPCError{Code: -32603, Message: "fake agent: a turn is already running in " + p.SessionID})
		return
	}
	tr := &fakeTurn{reqID: m.ID, cancelled: make(chan struct{})}
	s.turn = tr // registered before the next line is read, so a cancel finds it
	a.mu.Unlock()

	script := ""
	for _, b := range p.Prompt {
		if b.Type == "text" {
			tr.texts = append(tr.texts, b.Text)
		}
	}
	// The script is the first text block that is not the router's (its
	// brief, its note naming the session's directories).
	for _, text := range tr.texts {
		if !strings.HasPrefix(text, "[acp-router") {
			script = text
			break
		}
	}
	size := len(m.Params)
	go func() {
		result, rerr := a.runScript(s, tr, script, size)
		a.mu.Lock()
		s.turn = nil
		if tr.aborted { // the spec: a cancelled request is still answered
			rerr = &RPCError{Code: -32800, Message: "request cancelled"}
		}
		a.mu.Unlock()
		a.logf("turn-end %s %d", s.id, time.Now().UnixNano())
		if rerr != nil {
			a.replyErr(m.ID, rerr)
			return
		}
		a.reply(m.ID, result)
	}()
}

// fakeScriptExt holds script commands that other test files add (in an
// init function, so that the re-executed fake agent has them too): name →
// what it does with the rest of the line.
var fakeScriptExt = map[string]func(a *fakeAgent, s *fakeSession, rest string){}

// fakeMethodExt holds request methods that other test files add (in an
// init function, like fakeScriptExt): what the fake agent answers.
var fakeMethodExt = map[string]func(a *fakeAgent, m wireMsg){}

// runScript runs a prompt's script, one command per line:
//
//	as SID CMD...            run CMD under session id SID (a subagent session's)
//	say TEXT                 agent_message_chunk
//	whoami                   say the agent's name
//	updates N SIZE           N chunks of exactly SIZE bytes, "#%06d " + padding
//	                         (the number continues across commands of a turn)
//	big N                    one chunk of N bytes
//	flood SIZE               chunks of exactly SIZE bytes, numbered as by updates, without
//	                         pause until session/cancel (even after nocancel) or until
//	                         stdout fails; the turn then ends "cancelled"
//	permission               tool_call + session/request_permission; say "permission: OUTCOME"
//	read PATH                fs/read_text_file; say "read: CONTENT" or "read error: CODE MESSAGE"
//	write PATH CONTENT       fs/write_text_file; say "write: ok" or "write error: CODE MESSAGE"
//	terminal CMD ARGS...     create, wait_for_exit, output, release; say "terminal: OUTPUT"
//	sleep DUR                (interrupted by session/cancel unless nocancel)
//	crash                    print crashLine to stderr, exit 3
//	hang                     never read stdin or write stdout again
//	nocancel                 ignore session/cancel for the rest of the turn
//	echo-size                say "size: N", N = byte length of the prompt's params
//	stop REASON              end the turn with that stopReason
//	update JSON              a session/update with that update object
//	usage IN OUT             the prompt response carries usage {inputTokens, outputTokens, totalTokens}
//	prompt-text              say the prompt's text blocks, joined by " | "
//	ext-request              request _fake/ask {sessionId}; say "ext: RESULT" or the error
//	ext-notify               notification _fake/note {sessionId, n: 1}
//	new-params               say the session/new params the session was made with
//	elicit-url ID            URL elicitation ID (session scope); say "elicit: RESULT" or the error
//	elicit-complete ID       notification elicitation/complete ID
//	elicit-request           form elicitation scoped to this prompt's request id
//	permission-nowait        session/request_permission without waiting for the answer
//	permission-tool JSON     tool_call update with the JSON's fields (kind, title, locations,
//	                         rawInput, content), then session/request_permission naming only its
//	                         id, with one option of each kind (ids allow, allow-always, reject,
//	                         reject-always); say "permission: OUTCOME"
//	ext-flood N [K]          N concurrent _fake/ask requests; say "flood: refused=R" (R answered -32603); with K, "flood: K refused" at the K-th refusal
//	terminal-create CMD...   terminal/create only; say "terminal-id: ID" or the error
//	terminal-output ID       terminal/output for ID; say "terminal-output: OUTPUT" or the error
//	terminal-cwd DIR CMD...  terminal/create with cwd DIR; say "terminal-id: ID" or the error
//	child PIDFILE            start a tool of its own: a SIGTERM-ignoring sleeper in the agent's
//	                         process group that writes its pid to PIDFILE
//	child-setsid PIDFILE     the same in a session of its own (a daemonizing tool)
//	on NAME COMMAND          COMMAND, run only by the agent named NAME (fakeOpts.Name)
//	ignore-sigpipe           keep running when stdout or stderr lose their reader, as Node.js
//	                         agents do (a Go program dies of SIGPIPE on fd 1 or 2)
//
// A session/cancel (unless nocancel) ends the turn at the next command with
// stopReason "cancelled".
// askPermission sends session/request_permission and says
// "permission: OUTCOME" or the error.
func (a *fakeAgent) askPermission(sid string, toolCall map[string]any, options ...any) {
	res, rerr := a.call("session/request_permission", map[string]any{"sessionId": sid, "toolCall": toolCall, "options": options})
	if rerr != nil {
		a.say(sid, fmt.Sprintf("permission error: %d %s", rerr.Code, rerr.Message))
		return
	}
	var out struct {
		Outcome json.RawMessage `json:"outcome"`
	}
	_ = json.Unmarshal(res, &out)
	a.say(sid, "permission: "+string(out.Outcome))
}

func (a *fakeAgent) runScript(s *fakeSession, tr *fakeTurn, script string, paramsSize int) (any, *RPCError) {
	stop := "end_turn"
	var usage map[string]int
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if tr.isCancelled() {
			return map[string]any{"stopReason": "cancelled"}, nil
		}
		if who, only, ok := strings.Cut(line, " "); ok && who == "on" {
			// "on NAME COMMAND": this agent only (one prompt, several agents: /compare).
			name, cmdline, _ := strings.Cut(only, " ")
			if name != a.opts.Name {
				continue
			}
			line = cmdline
		}
		cmd, rest, _ := strings.Cut(line, " ")
		args := strings.Fields(rest)
		switch cmd {
		case "as":
			sid, sub, _ := strings.Cut(rest, " ")
			a.mu.Lock()
			child := a.children[sid]
			if child == nil {
				if a.children == nil {
					a.children = map[string]*fakeSession{}
				}
				child = &fakeSession{id: sid, cwd: s.cwd}
				a.children[sid] = child
			}
			a.mu.Unlock()
			if _, rerr := a.runScript(child, tr, sub, paramsSize); rerr != nil {
				return nil, rerr
			}
		case "say":
			a.say(s.id, rest)
		case "whoami":
			a.say(s.id, a.opts.Name)
		case "updates":
			var n, size int
			if _, err := fmt.Sscanf(rest, "%d %d", &n, &size); err != nil || size < 8 {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad updates command: " + line}
			}
			for i := 0; i < n; i++ {
				head := fmt.Sprintf("#%06d ", tr.seq)
				tr.seq++
				a.say(s.id, head+strings.Repeat("u", size-len(head)))
			}
		case "flood":
			size, err := strconv.Atoi(rest)
			if err != nil || size < 16 {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad flood command: " + line}
			}
			pad := strings.Repeat("f", size)
			for !a.writeFailed.Load() {
				select {
				case <-tr.cancelled:
					return map[string]any{"stopReason": "cancelled"}, nil
				default:
				}
				head := fmt.Sprintf("#%06d ", tr.seq)
				tr.seq++
				a.say(s.id, head+pad[len(head):])
			}
		case "big":
			n, err := strconv.Atoi(rest)
			if err != nil {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad big command: " + line}
			}
			a.say(s.id, strings.Repeat("b", n))
		case "permission":
			s.calls++
			callID := fmt.Sprintf("call-%d", s.calls)
			a.update(s.id, map[string]any{
				"sessionUpdate": "tool_call", "toolCallId": callID, "title": "Edit a file",
				"kind": "edit", "status": "pending",
			})
			a.askPermission(s.id, map[string]any{"toolCallId": callID, "title": "Edit a file", "kind": "edit"},
				map[string]any{"optionId": fakeAllowOption, "name": "Allow", "kind": "allow_once"},
				map[string]any{"optionId": fakeRejectOption, "name": "Reject", "kind": "reject_once"})
		case "read":
			res, rerr := a.call("fs/read_text_file", map[string]any{"sessionId": s.id, "path": rest})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("read error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			var out struct {
				Content string `json:"content"`
			}
			_ = json.Unmarshal(res, &out)
			a.say(s.id, "read: "+out.Content)
		case "write":
			path, content, _ := strings.Cut(rest, " ")
			_, rerr := a.call("fs/write_text_file", map[string]any{"sessionId": s.id, "path": path, "content": content})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("write error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "write: ok")
		case "terminal":
			a.say(s.id, a.runTerminal(s, args))
		case "sleep":
			d, err := time.ParseDuration(rest)
			if err != nil {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad sleep command: " + line}
			}
			if tr.nocancel {
				time.Sleep(d)
			} else {
				select {
				case <-time.After(d):
				case <-tr.cancelled:
				}
			}
		case "crash":
			fmt.Fprintln(os.Stderr, crashLine)
			os.Exit(3)
		case "hang":
			a.hung.Store(true)
			a.logf("hung") // tests wait for this line: nothing is written any more
			blockForever()
		case "nocancel":
			tr.nocancel = true
		case "echo-size":
			a.say(s.id, fmt.Sprintf("size: %d", paramsSize))
		case "stop":
			stop = rest
		case "usage":
			var in, out int
			if _, err := fmt.Sscanf(rest, "%d %d", &in, &out); err != nil {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad usage command: " + line}
			}
			usage = map[string]int{"inputTokens": in, "outputTokens": out, "totalTokens": in + out}
		case "update":
			var u map[string]any
			if err := json.Unmarshal([]byte(rest), &u); err != nil {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad update command: " + line}
			}
			a.update(s.id, u)
		case "prompt-text":
			a.say(s.id, strings.Join(tr.texts, " | "))
		case "new-params":
			a.mu.Lock()
			np := s.newParams
			a.mu.Unlock()
			a.say(s.id, string(np))
		case "ext-request":
			res, rerr := a.call("_fake/ask", map[string]any{"sessionId": s.id, "q": "?"})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("ext error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "ext: "+string(res))
		case "ext-notify":
			a.notify("_fake/note", map[string]any{"sessionId": s.id, "n": 1})
		case "elicit-url", "elicit-request":
			params := map[string]any{"mode": "url", "sessionId": s.id, "elicitationId": rest,
				"url": "https://example.invalid/auth", "message": "Sign in"}
			if cmd == "elicit-request" {
				params = map[string]any{"mode": "form", "requestId": tr.reqID, "message": "Name?",
					"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{}}}
			}
			res, rerr := a.call("elicitation/create", params)
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("elicit error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "elicit: "+string(res))
		case "ext-flood":
			// ext-flood N [K]: N _fake/ask requests at once; with K, say
			// "flood: K refused" as soon as K were refused, while the
			// others still wait.
			nArg, kArg, _ := strings.Cut(rest, " ")
			n, _ := strconv.Atoi(nArg)
			k, _ := strconv.Atoi(kArg)
			var wg sync.WaitGroup
			var refused atomic.Int64
			for i := 0; i < n; i++ {
				wg.Go(func() {
					if _, rerr := a.call("_fake/ask", map[string]any{"sessionId": s.id, "i": i}); rerr != nil && rerr.Code == -32603 {
						if refused.Add(1) == int64(k) {
							a.say(s.id, fmt.Sprintf("flood: %d refused", k))
						}
					}
				})
			}
			wg.Wait()
			a.say(s.id, fmt.Sprintf("flood: refused=%d", refused.Load()))
		case "permission-tool":
			var fields map[string]any
			if err := json.Unmarshal([]byte(rest), &fields); err != nil {
				return nil, &RPCError{Code: -32602, Message: "fake agent: bad permission-tool command: " + line}
			}
			s.calls++
			callID := fmt.Sprintf("call-%d", s.calls)
			fields["sessionUpdate"], fields["toolCallId"], fields["status"] = "tool_call", callID, "pending"
			a.update(s.id, fields)
			a.askPermission(s.id, map[string]any{"toolCallId": callID},
				map[string]any{"optionId": fakeAllowOption, "name": "Allow", "kind": "allow_once"},
				map[string]any{"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
				map[string]any{"optionId": fakeRejectOption, "name": "Reject", "kind": "reject_once"},
				map[string]any{"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"})
		case "permission-nowait":
			a.callNoWait("session/request_permission", map[string]any{
				"sessionId": s.id,
				"toolCall":  map[string]any{"toolCallId": "call-nowait", "title": "Run a command", "kind": "execute"},
				"options":   []any{map[string]any{"optionId": fakeAllowOption, "name": "Allow", "kind": "allow_once"}},
			})
		case "terminal-create":
			res, rerr := a.call("terminal/create", map[string]any{"sessionId": s.id, "command": args[0], "args": args[1:]})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("terminal error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "terminal-id: "+jsonString(res, "terminalId"))
		case "terminal-cwd":
			dir, cmdline, _ := strings.Cut(rest, " ")
			words := strings.Fields(cmdline)
			if len(words) == 0 {
				return nil, &RPCError{Code: -32602, Message: "fake agent: terminal-cwd DIR CMD..."}
			}
			res, rerr := a.call("terminal/create", map[string]any{"sessionId": s.id, "command": words[0], "args": words[1:], "cwd": dir})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("terminal error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "terminal-id: "+jsonString(res, "terminalId"))
		case "terminal-output":
			res, rerr := a.call("terminal/output", map[string]any{"sessionId": s.id, "terminalId": rest})
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("terminal error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			a.say(s.id, "terminal-output: "+jsonString(res, "output"))
		case "elicit-complete":
			a.notify("elicitation/complete", map[string]any{"elicitationId": rest})
		case "ignore-sigpipe":
			signal.Ignore(syscall.SIGPIPE)
		case "child", "child-setsid":
			if err := spawnSleeper(rest, cmd == "child-setsid"); err != nil {
				return nil, &RPCError{Code: -32603, Message: "fake agent: " + line + ": " + err.Error()}
			}
		default:
			if ext := fakeScriptExt[cmd]; ext != nil {
				ext(a, s, rest)
				continue
			}
			return nil, &RPCError{Code: -32602, Message: "fake agent: unknown script command: " + line}
		}
	}
	if tr.isCancelled() {
		return map[string]any{"stopReason": "cancelled"}, nil
	}
	if usage != nil {
		return map[string]any{"stopReason": stop, "usage": usage}, nil
	}
	return map[string]any{"stopReason": stop}, nil
}

func (a *fakeAgent) runTerminal(s *fakeSession, args []string) string {
	if len(args) == 0 {
		return "terminal error: no command"
	}
	fail := func(step string, e *RPCError) string {
		return fmt.Sprintf("terminal error: %s: %d %s", step, e.Code, e.Message)
	}
	res, rerr := a.call("terminal/create", map[string]any{"sessionId": s.id, "command": args[0], "args": args[1:]})
	if rerr != nil {
		return fail("create", rerr)
	}
	var created struct {
		TerminalID string `json:"terminalId"`
	}
	if err := json.Unmarshal(res, &created); err != nil || created.TerminalID == "" {
		return "terminal error: create returned " + string(res)
	}
	ref := map[string]any{"sessionId": s.id, "terminalId": created.TerminalID}
	if _, rerr := a.call("terminal/wait_for_exit", ref); rerr != nil {
		return fail("wait_for_exit", rerr)
	}
	res, rerr = a.call("terminal/output", ref)
	if rerr != nil {
		return fail("output", rerr)
	}
	var out struct {
		Output string `json:"output"`
	}
	_ = json.Unmarshal(res, &out)
	if _, rerr := a.call("terminal/release", ref); rerr != nil {
		return fail("release", rerr)
	}
	return "terminal: " + out.Output
}
