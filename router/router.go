// Package router is the editor-facing ACP agent: it owns router sessions,
// routes them to agents, translates ids that would collide, forwards every
// message in order in both directions and answers what no agent should see
// (DESIGN §5, §7).
//
// Concurrency follows STYLE.md: handlers run in a connection's read loop and
// never wait there. Requests are dispatched inline (so they keep their order
// on the wire) and their answers awaited in a goroutine; session updates
// are relayed in the agent's read path, so every update an agent sent
// before a response is queued for the editor before that response, in the
// same lane: the session's (the editor's queue has one per session). Writes
// to the editor never wait; the agents' read paths wait for room in their
// session's lane afterwards, holding no lock (waitEditor).
package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/internal/owner"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/sandbox"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/telemetry"
	"github.com/acp-router/acp-router/upstream"
)

// Options tune a Router; zero values take the defaults in brackets.
type Options struct {
	Logger  hclog.Logger
	Version string // reported in agentInfo
	// InitBudget bounds how long initialize waits for the routing default
	// agent [3s].
	InitBudget time.Duration
	// OpenDelay: session updates for a new session are held until this long
	// after the session/new response (Zed drops earlier ones) [50ms].
	OpenDelay time.Duration
	// DrainGrace: after a synthetic "cancelled", how long the agent may take
	// to really end the turn before it is restarted [30s].
	DrainGrace time.Duration
	// ForceAgent routes every new session to this agent (try --agent).
	ForceAgent string
	// MaxLine bounds one message from the editor [acp.DefaultMaxLine].
	MaxLine int
	// Store keeps sessions for session/list, load and resume (history.go);
	// nil: no history (those methods are not advertised).
	Store *store.Store
	// HistoryMetadataOnly: the store keeps no content (history.content:
	// metadata-only); reopened sessions rely on the agents' own load.
	HistoryMetadataOnly bool
	// Guard enforces the permission policy on agent requests and modes;
	// nil: no policy (every request goes to the editor).
	Guard *guard.Guard
	// Upstream timings, for tests; see upstream.Options.
	ShutdownGrace, KillGrace time.Duration
	// EvictIdle: a session with no activity for this long is evicted from
	// memory; it stays in the store and comes back on its next use
	// (evict.go). Only with a Store [30m].
	EvictIdle time.Duration
	// MaxSessions: past this many sessions in memory, idle ones are
	// evicted least recently used first, before EvictIdle [1024].
	MaxSessions int
	// Telemetry exports spans and metrics of turns, agent calls, switches
	// and agent processes; nil: off.
	Telemetry *telemetry.Telemetry
	// ModeResetTimeout bounds the agent's answer when the router sets it
	// back from a mode the policy denies; the call is then cancelled and
	// prompts refused until the agent answers or reports an allowed mode
	// (modes.go) [10s].
	ModeResetTimeout time.Duration
	// Confine is upstream.Options.Confine: the sandbox of each agent
	// process (issue 29); nil: unconfined.
	Confine func(config.Agent) (*sandbox.Plan, error)
	// Sandbox is what the router says on the wire about the sandbox
	// (sandbox.Confiner): agentCapabilities.sandbox and the acp.sandbox
	// option (issue 29 req. 8); nil: neither.
	Sandbox Sandbox
}

// Sandbox is the wire's view of the agents' sandbox (sandbox.Confiner).
type Sandbox interface {
	Capability() acp.SandboxCapability
	Require(acp.SandboxPolicy) error
}

// Router serves one editor connection.
type Router struct {
	cfg    *config.Config
	opts   Options
	log    hclog.Logger
	agents []*upstream.Agent
	byName map[string]*upstream.Agent
	editor *acp.Peer
	uopts  upstream.Options

	// role is how the router was initialized (successor.go); chain, set
	// with roleProxy before it is published, is its link to the successor.
	role  atomic.Int32
	chain *chain

	mu         sync.Mutex
	initParams json.RawMessage // the editor's initialize params, for agents
	clientCaps acp.ClientCapabilities
	sessions   map[string]*Session // by router session id
	downs      map[string]*Session // by downKey of each downstream session
	modeCache  map[string][]merge.Mode
	cmdCache   map[string][]string         // agents' own command names, as last seen
	auth       map[string]merge.AuthMethod // advertised auth method id → owner
	forwards   map[string]*forward         // editor request id → its forward to an agent
	watched    map[*upstream.Instance]bool // instances whose connection watchInstance waits on
	held       map[string]func()
	toEditor   map[string]*outgoing       // router requests to the editor, by editor-side id
	pending    map[*upstream.Instance]int // toEditor entries per agent instance
	// watchCalls starts watchEditorCalls once.
	watchCalls sync.Once
	terminals  map[string]terminal             // terminal id → owner
	elicits    *merge.IDTable                  // (agent, elicitationId) ↔ editor-side id
	parked     map[*upstream.Instance]*parking // updates for sessions not bound yet (bounds.go)
	tombs      tombstones                      // downstream sessions closed or evicted
	closedIDs  tombstones                      // router sessions closed (or deleted) recently: never brought back by a prompt
	calls      int                             // forwards other than prompts (maxForwards)
	msgNonce   string                          // in the router's own messageIds
	msgSeq     atomic.Uint64

	// Drops counted and logged once (bounds.go).
	closedDrops *drops // updates for closed or evicted sessions
	toolDrops   *drops // tool call ids retired before their tool call finished
	askDrops    *drops // tool call updates dropped while held for a permission request (asking.go)
	childDrops  *drops // subagent announcements past maxChildren
	seqWaits    *drops // agent reads held by a session's backlog behind a decision (order.go)

	// children are the subagent sessions, by the id the editor knows
	// (subagent.go); they are not in sessions: only session/cancel may
	// name one.
	children map[string]*Session

	// MCP over ACP (unstable.go): the ACP-transport MCP servers sessions
	// declared, by serverId, and the agents' mcp/message requests at the
	// editor, by serverId and requestId.
	mcpServers map[string]*Session
	mcpCalls   map[string]*mcpCall
	// statusUps relays auth status updates, coalesced (unstable.go).
	statusUps *statusUpdates

	sweep chan struct{} // wakes the evictor early (evict.go); capacity 1

	// editorReady is closed once Serve has set editor: the editor's
	// handler runs as soon as the peer reads, before NewPeer returns.
	editorReady chan struct{}
	editorSet   func()

	// owned are the router's goroutines: shutdown waits for them (bounded).
	owned owner.Group
}

// forward is an editor request in flight at an agent.
type forward struct {
	inst     *upstream.Instance
	editorID json.RawMessage // the request's id on the editor connection
	agentID  json.RawMessage // and on the agent connection
	session  string          // the router session it is about, or ""
	// A prompt's turn: end ends it (once: done, under Router.mu).
	end  func(json.RawMessage, error)
	done bool
}

// outgoing is an agent request in flight at the editor.
type outgoing struct {
	inst     *upstream.Instance
	agentID  json.RawMessage
	editorID json.RawMessage
	session  string // router session id, or ""
	// A request sent on the fast path (callEditorRaw): end relays its
	// answer (once: ended, under Router.mu), from the editor's read path
	// or, when the connection closes first, from watchEditorCalls.
	end   func(json.RawMessage, error)
	ended bool
}

type terminal struct {
	agent   string
	session string // router session id
}

// New builds a router for cfg. Agents start when the editor initializes.
func New(cfg *config.Config, opts Options) *Router {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.InitBudget == 0 {
		opts.InitBudget = 3 * time.Second
	}
	if opts.OpenDelay == 0 {
		opts.OpenDelay = 50 * time.Millisecond
	}
	if opts.DrainGrace == 0 {
		opts.DrainGrace = 30 * time.Second
	}
	if opts.EvictIdle == 0 {
		opts.EvictIdle = 30 * time.Minute
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = 1024
	}
	if opts.ModeResetTimeout == 0 {
		opts.ModeResetTimeout = 10 * time.Second
	}
	r := &Router{
		cfg:       cfg,
		opts:      opts,
		log:       opts.Logger,
		byName:    map[string]*upstream.Agent{},
		sessions:  map[string]*Session{},
		downs:     map[string]*Session{},
		modeCache: map[string][]merge.Mode{},
		cmdCache:  map[string][]string{},
		auth:      map[string]merge.AuthMethod{},
		forwards:  map[string]*forward{},
		watched:   map[*upstream.Instance]bool{},
		held:      map[string]func(){},
		toEditor:  map[string]*outgoing{},
		pending:   map[*upstream.Instance]int{},
		terminals: map[string]terminal{},
		elicits:   merge.NewIDTable(),
		parked:    map[*upstream.Instance]*parking{},
		msgNonce:  strconv.FormatInt(time.Now().UnixNano(), 36),
		sweep:     make(chan struct{}, 1),
	}
	r.editorReady = make(chan struct{})
	r.editorSet = sync.OnceFunc(func() { close(r.editorReady) })
	r.closedDrops = newDrops(r.log, hclog.Debug, "updates for closed sessions dropped")
	r.toolDrops = newDrops(r.log, hclog.Warn, "tool call ids retired before their tool call finished", "limit", maxToolIDs)
	r.askDrops = newDrops(r.log, hclog.Warn, "tool call updates dropped while the editor decides about the tool call", "maxHeld", maxAskHeld, "maxBytes", maxAskHeldBytes)
	r.seqWaits = newWaits(r.log, hclog.Info, "an agent's reading waits: a session's messages behind its pending decision are at their bound",
		"maxItems", maxSequenced, "maxBytes", maxSequencedBytes)
	r.childDrops = newDrops(r.log, hclog.Warn, "subagent sessions past the bound dropped; their requests fail closed", "limit", maxChildren)
	r.children = map[string]*Session{}
	r.mcpServers, r.mcpCalls = map[string]*Session{}, map[string]*mcpCall{}
	r.statusUps = newStatusUpdates(r)
	uopts := upstream.Options{
		Logger:        opts.Logger.Named("agent"),
		StateDir:      cfg.StateDir,
		Handler:       func(i *upstream.Instance) jsonrpc2.Handler { return agentHandler{r, i} },
		Intercept:     r.interceptAgent,
		Batch:         r.corkEditor,
		Prescan:       updatePrescan,
		InitParams:    r.agentInitParams,
		OnExit:        r.agentExited,
		Telemetry:     opts.Telemetry,
		Confine:       opts.Confine,
		ShutdownGrace: opts.ShutdownGrace,
		KillGrace:     opts.KillGrace,
	}
	r.uopts = uopts
	for _, ac := range cfg.Agents {
		a := upstream.New(ac, uopts)
		r.agents = append(r.agents, a)
		r.byName[ac.Name] = a
	}
	r.observeTelemetry()
	return r
}

// What waits to be written to the editor is memory. The editor's write
// queue has a lane per session; editorLaneBytes bounds one session's
// backlog: a flood of 1 MiB updates holds at most about 4 MiB (the bound,
// the last message its agent's read path wrote, the one being written).
// A smaller bound leaves the agent's reading and the writing too little
// slack to overlap (1 MiB: relay of 1 MiB updates 30% slower). The
// fairness does not depend on it. editorQueueBytes is the hard cap on all
// lanes together, reached only when several sessions flood at once (or one
// message is that large): then every agent waits.
const (
	editorLaneBytes  = 2 << 20
	editorQueueBytes = 16 << 20
)

// corkEditor is the agents' read loops' Batch: the editor's messages that
// the lines of one read of an agent produce (a turn's last update and the
// prompt's answer) are written together, with one system call.
func (r *Router) corkEditor() func() {
	select {
	case <-r.editorReady:
	default:
		return nil
	}
	st := r.editor.Stream()
	st.Cork()
	return st.Uncork
}

// Serve speaks ACP to the editor on in/out until the editor closes its
// input or ctx ends, then shuts every agent down. It returns nil when the
// editor closed its input or ctx ended, and the error otherwise: the
// editor's stream broke (a read error, or nothing can be written to it).
func (r *Router) Serve(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	writeFailed := make(chan error, 1)
	r.editor = acp.NewPeer(ctx, in, out, acp.StreamOptions{
		OnFail: func(err error) {
			select {
			case writeFailed <- err:
			default:
			}
		},
		MaxLine: r.opts.MaxLine,
		// Lanes: a write to the editor never waits, so that no lock and no
		// read loop (the editor's: session/cancel) waits for a slow
		// editor, and the writer takes the sessions in turn, so that one
		// session's flood does not delay another's answer. A slow editor
		// still slows the agents down (intended): their read paths wait
		// for room in their session's lane, holding no lock (waitEditor).
		LaneBytes:     editorLaneBytes,
		QueueBytes:    editorQueueBytes,
		AnswerInvalid: true,
		Logger:        r.log.Named("editor"),
	}, editorHandler{r})
	r.editorSet() // the handlers, already reading, may use r.editor from now on
	evictCtx, stopEvict := context.WithCancel(ctx)
	r.spawn(func() { r.evictIdle(evictCtx) })
	r.spawn(func() { r.watchPolicy(evictCtx) })
	var cause error
	select {
	case <-r.editor.Done():
		if err := r.editor.Stream().ReadErr(); err != nil {
			cause = fmt.Errorf("router: reading from the editor: %w", err)
			r.log.Error("the editor's stream broke", "error", err)
		} else {
			r.log.Info("editor closed the connection")
		}
	case err := <-writeFailed:
		cause = fmt.Errorf("router: writing to the editor: %w", err)
		r.log.Error("the editor's stream broke", "error", err)
	case <-ctx.Done():
		r.log.Info("shutting down", "reason", context.Cause(ctx))
	}
	stopEvict()
	r.shutdown()
	return cause
}

// shutdown stops every agent concurrently, then flushes what is queued for
// the editor.
func (r *Router) shutdown() {
	var wg sync.WaitGroup
	r.mu.Lock() // beginProxy may add the successor
	agents := r.agents
	r.mu.Unlock()
	for _, a := range agents {
		wg.Go(a.Stop)
	}
	wg.Wait()
	r.closedDrops.flush()
	r.toolDrops.flush()
	r.childDrops.flush()
	r.seqWaits.flush()
	r.statusUps.drops.flush()
	r.editor.Close()
	select {
	case <-r.editor.Stream().Done():
	case <-time.After(time.Second):
		// An editor that does not read what is left: dropped, so that
		// the stream's writer ends with the router.
		r.editor.Stream().Abort(errEditorNotReading)
	}
	if n := r.editor.Stream().Wait(shutdownWait); n > 0 {
		r.log.Warn("the editor stream's goroutines still run at shutdown", "count", n)
	}
	// Every agent is gone and the editor closed: what still runs waits on
	// one of them and ends now. A goroutine that does not is a bug: named
	// in the log, not waited for forever.
	if n := r.owned.Wait(shutdownWait); n > 0 {
		r.log.Warn("goroutines still running at shutdown", "count", n)
	}
}

// errEditorNotReading ends the editor's stream at shutdown when the
// editor has not read what was queued for it within a second.
var errEditorNotReading = errors.New("router: the editor did not read what was left at shutdown")

// shutdownWait bounds how long shutdown waits for the router's goroutines.
const shutdownWait = 2 * time.Second

// spawn runs f in a goroutine the router owns: shutdown waits for it.
func (r *Router) spawn(f func()) { r.owned.Go(f) }

// editorHandler handles the editor's requests and notifications, in the
// editor's read loop.
type editorHandler struct{ r *Router }

func (h editorHandler) Handle(ctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	r := h.r
	<-r.editorReady // Serve has set r.editor
	defer r.survive("editor", req)
	if !req.Notif && acp.NotificationOnly(req.Method, false) {
		r.log.Warn("a notification method sent as a request refused", "method", req.Method)
		r.replyTo(req)(nil, errNotificationAsRequest(req.Method))
		return
	}
	ctx = context.WithoutCancel(ctx)
	if req.Method != acp.MethodSessionPrompt { // the turn reads its own
		ctx = r.traceEditorRequest(ctx, req)
	}
	switch req.Method {
	case acp.MethodInitialize:
		if !r.role.CompareAndSwap(roleNone, roleAgent) && r.isProxy() {
			r.replyTo(req)(nil, acp.NewError(acp.CodeInvalidRequest, "acp-router: already initialized as a proxy (proxy/initialize)", nil))
			return
		}
		r.spawn(func() { r.replyTo(req)(r.initialize(ctx, req)) })
	case acp.MethodProxyInitialize:
		// Never passed to an agent (notes/acp-currency.md row 11).
		r.proxyInitialize(ctx, req)
	case acp.MethodProxySuccessor:
		r.fromSuccessor(req)
	case acp.MethodAuthenticate:
		r.spawn(func() { r.replyTo(req)(r.authenticate(ctx, req)) })
	case acp.MethodLogout:
		r.spawn(func() { r.replyTo(req)(r.logout(ctx, req)) })
	case acp.MethodSessionNew:
		r.newSession(ctx, req)
	case acp.MethodSessionPrompt:
		r.prompt(ctx, req)
	case acp.MethodSessionCancel:
		r.cancel(ctx, req)
	case acp.MethodCancelRequest:
		r.cancelRequest(ctx, req)
	case acp.MethodSessionClose:
		r.closeSession(ctx, req)
	case acp.MethodSetMode, acp.MethodSetConfigOption:
		r.sessionRequest(ctx, req)
	case acp.MethodSessionLoad, acp.MethodSessionResume, acp.MethodSessionList, acp.MethodSessionDelete:
		if r.opts.Store == nil {
			r.replyTo(req)(nil, acp.NewError(acp.CodeMethodNotFound, "acp-router: "+req.Method+" needs the session store (state_dir)", map[string]string{"method": req.Method}))
			return
		}
		switch req.Method {
		case acp.MethodSessionLoad, acp.MethodSessionResume:
			r.loadSession(ctx, req, req.Method == acp.MethodSessionLoad)
		case acp.MethodSessionList:
			r.listSessions(ctx, req)
		default:
			r.deleteSession(ctx, req)
		}
	case acp.MethodSessionFork:
		r.forkSession(ctx, req)
	case acp.MethodSessionSetTitle:
		r.setTitle(ctx, req)
	case acp.MethodSessionStatus:
		r.sessionStatus(ctx, req)
	case acp.MethodSessionArchive, acp.MethodSessionUnarchive:
		if r.opts.Store == nil {
			r.replyTo(req)(nil, acp.NewError(acp.CodeMethodNotFound, "acp-router: "+req.Method+" needs the session store (state_dir)", map[string]string{"method": req.Method}))
			return
		}
		r.archiveSession(ctx, req, req.Method == acp.MethodSessionArchive)
	case acp.MethodAuthStatus:
		r.spawn(func() { r.replyTo(req)(r.authStatus(ctx, req)) })
	case acp.MethodMcpMessage:
		r.editorMcpMessage(ctx, req)
	default:
		r.byTable(ctx, req)
	}
}

// Intercept is the editor's fast path (issue 16): session/prompt is taken
// in the stream's read path, before the jsonrpc2.Conn would decode its
// params into a map and encode them again, and handled as Handle would
// handle it, at the same point in the editor's message order (the Conn
// reads the next message only once Handle has returned). Its answer is
// written as raw bytes (replyRaw).
func (h editorHandler) Intercept(m *acp.Message) bool {
	if m.Kind != acp.KindRequest || m.Method != acp.MethodSessionPrompt {
		return false
	}
	req, ok := jsonrpcRequest(m)
	if !ok {
		return false // the Conn's decoder says what is wrong with it
	}
	r := h.r
	<-r.editorReady
	defer r.survive("editor", req)
	r.prompt(context.Background(), req)
	return true
}

// replyRaw answers req, taken on the fast path or not, with res (one line of
// valid JSON: an agent's raw result or one of the router's constants) as
// raw bytes; an error goes through replyTo.
func (r *Router) replyRaw(req *jsonrpc2.Request, res json.RawMessage, err error) {
	if err != nil || req.Notif || len(res) == 0 || bytes.IndexByte(res, '\n') >= 0 {
		r.replyTo(req)(res, err)
		return
	}
	if err := r.editor.ReplyRaw(acp.RawID(req.ID), res); err != nil {
		r.log.Debug("cannot answer the editor", "method", req.Method, "error", err)
	}
}

// byTable dispatches an editor method Handle has no case for by its
// treatment in the protocol table (acp.Methods: session/fork and proxy/*
// refused, session/set_model routed by its sessionId, ...). A method the
// table does not name (extensions, anything newer) is forwarded as
// unknown.
func (r *Router) byTable(ctx context.Context, req *jsonrpc2.Request) {
	m, ok := acp.LookupMethod(req.Method, false)
	if !ok {
		r.forwardUnknown(ctx, req)
		return
	}
	switch m.Treatment {
	case acp.RoutedBySession:
		r.sessionRequest(ctx, req)
	case acp.Unknown:
		r.forwardUnknown(ctx, req)
	case acp.Refused:
		r.replyTo(req)(nil, acp.NewError(m.Code, "acp-router does not support "+req.Method, map[string]string{"method": req.Method}))
	default:
		// A row says the router handles it, but Handle has no case: the
		// table and the code disagree (TestEditorDispatchFollowsTable).
		r.log.Error("no handler for a method the protocol table says the router handles", "method", req.Method)
		r.replyTo(req)(nil, acp.NewError(acp.CodeInternalError, "acp-router: no handler for "+req.Method, map[string]string{"method": req.Method}))
	}
}

// errNotificationAsRequest answers a request for a method the protocol sends
// only as a notification (acp.NotificationOnly), as an ACP peer answers it.
func errNotificationAsRequest(method string) error {
	return acp.NewError(acp.CodeMethodNotFound, "Method not found: "+method+" is a notification (sent without an id)", map[string]string{"method": method})
}

// replyTo returns a function answering req on the editor connection. A nil
// function is returned for notifications.
func (r *Router) replyTo(req *jsonrpc2.Request) func(json.RawMessage, error) {
	return func(res json.RawMessage, err error) {
		if req.Notif {
			return
		}
		if err := r.editor.Reply(context.Background(), req.ID, res, err); err != nil {
			r.log.Debug("cannot answer the editor", "method", req.Method, "error", err)
		}
	}
}

// params returns a request's params for re-sending: untyped nil when absent
// (a nil *json.RawMessage would send "params":null).
func params(req *jsonrpc2.Request) json.RawMessage {
	if req.Params == nil {
		return nil
	}
	return *req.Params
}

func paramsAny(p json.RawMessage) any {
	if p == nil {
		return nil
	}
	return p
}

// forwardCall sends req to an agent and relays the answer to the editor.
// It returns at once; the request can be
// withdrawn with $/cancel_request.
func (r *Router) forwardCall(ctx context.Context, req *jsonrpc2.Request, inst *upstream.Instance, p json.RawMessage, session string) {
	reply := r.replyTo(req)
	editorID := acp.RawID(req.ID)
	r.mu.Lock()
	full := r.calls >= maxForwards
	if !full {
		r.calls++
	}
	r.mu.Unlock()
	if full {
		reply(nil, acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: %d requests are waiting for agents already; try again later", maxForwards), map[string]string{"method": req.Method}))
		return
	}
	uncount := func() {
		r.mu.Lock()
		r.calls--
		r.mu.Unlock()
	}
	c, err := inst.Peer().Call(ctx, req.Method, paramsAny(p), editorID, nil)
	if err != nil {
		uncount()
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	key := acp.IDKey(editorID)
	r.mu.Lock()
	r.forwards[key] = &forward{inst: inst, editorID: editorID, agentID: c.ID, session: session}
	r.mu.Unlock()
	r.spawn(func() {
		res, err := c.Wait(ctx)
		r.mu.Lock()
		delete(r.forwards, key)
		r.calls--
		r.mu.Unlock()
		if err != nil {
			err = inst.Agent.Error(inst, err)
		}
		reply(res, err)
	})
}

// hold registers a request the router holds itself (waiting for an agent
// to start) so that $/cancel_request can end it: the returned context is
// cancelled then. release unregisters it.
func (r *Router) hold(ctx context.Context, req *jsonrpc2.Request) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	r.holdFunc(req, cancel)
	return ctx, func() {
		r.unhold(req)
		cancel()
	}
}

// holdFunc registers what $/cancel_request for req does while the router
// holds it.
func (r *Router) holdFunc(req *jsonrpc2.Request, cancel func()) {
	if req.Notif {
		return
	}
	r.mu.Lock()
	r.held[acp.IDKey(acp.RawID(req.ID))] = cancel
	r.mu.Unlock()
}

func (r *Router) unhold(req *jsonrpc2.Request) { r.unholdKey(acp.IDKey(acp.RawID(req.ID))) }

func (r *Router) unholdKey(key string) {
	r.mu.Lock()
	delete(r.held, key)
	r.mu.Unlock()
}

var errCancelled = acp.NewError(acp.CodeRequestCancelled, "request cancelled", nil)

// cancelRequest handles the editor's $/cancel_request: forwarded to the
// agent working on it (its answer is relayed), answered -32800 when the
// router holds the request itself (STYLE.md).
func (r *Router) cancelRequest(ctx context.Context, req *jsonrpc2.Request) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if req.Params == nil || json.Unmarshal(*req.Params, &p) != nil || p.RequestID == nil {
		return
	}
	if r.cancelSuccessorRequest(p.RequestID) {
		return
	}
	key := acp.IDKey(p.RequestID)
	r.mu.Lock()
	f := r.forwards[key]
	cancel := r.held[key]
	r.mu.Unlock()
	switch {
	case f != nil:
		msg, _ := acp.SetField(params(req), "requestId", f.agentID)
		if err := f.inst.Peer().Notify(ctx, acp.MethodCancelRequest, msg); err != nil {
			r.log.Debug("cannot forward $/cancel_request", "error", err)
		}
	case cancel != nil:
		r.unholdKey(key)
		cancel()
	}
}

// forwardUnknown sends a method the router does not know to the agent of
// the session it names, else to the routing default agent, and relays the
// answer (DESIGN §5). Only when no agent can take it does the router answer
// -32601 itself.
func (r *Router) forwardUnknown(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	if s, _ := r.sessionFor(ctx, p); s != nil {
		s.whenReady(func(err error) {
			if err == nil {
				s.touch()
				if d := s.activeDown(); d != nil {
					if inst, err := d.alive(); err == nil {
						r.forwardOrNotify(ctx, req, inst, rewriteSessionID(p, s.ID, d.id), s.ID)
						return
					}
				}
			}
			r.forwardToDefault(ctx, req, p)
		})
		return
	}
	r.forwardToDefault(ctx, req, p)
}

// forwardToDefault sends a method the router does not know to the routing
// default agent.
func (r *Router) forwardToDefault(ctx context.Context, req *jsonrpc2.Request, p json.RawMessage) {
	r.spawn(func() {
		held, release := r.hold(ctx, req)
		inst, err := r.byName[r.defaultAgent()].Ready(held)
		release()
		if err != nil {
			// No agent can take it; the editor learns why (the default
			// agent did not start), not only "method not found".
			r.log.Warn("no agent for method", "method", req.Method, "agent", r.defaultAgent(), "error", err)
			cause := r.startError(r.byName[r.defaultAgent()], err)
			msg := fmt.Sprintf("method not found: no agent can take %s: %s", req.Method, errorText(cause))
			r.replyTo(req)(nil, acp.NewError(acp.CodeMethodNotFound, msg, map[string]string{"method": req.Method, "agent": r.defaultAgent()}))
			return
		}
		r.forwardOrNotify(ctx, req, inst, p, "")
	})
}

// forwardOrNotify forwards req, about router session session (or ""), to
// inst.
func (r *Router) forwardOrNotify(ctx context.Context, req *jsonrpc2.Request, inst *upstream.Instance, p json.RawMessage, session string) {
	if req.Notif {
		if err := inst.Peer().Notify(ctx, req.Method, paramsAny(p)); err != nil {
			r.log.Debug("cannot forward notification", "method", req.Method, "error", err)
		}
		return
	}
	r.forwardCall(ctx, req, inst, p, session)
}

// defaultAgent is the agent of sessions no rule routes: the forced one
// (try --agent), else routingDefault.
func (r *Router) defaultAgent() string {
	if r.opts.ForceAgent != "" {
		return r.opts.ForceAgent
	}
	return r.routingDefault()
}

// routingDefault is routing.default; in a proxy chain, the successor unless
// routing.default is written in the config (successor.go).
func (r *Router) routingDefault() string {
	if r.isProxy() && !r.cfg.Routing.DefaultSet {
		return config.SuccessorName
	}
	return r.cfg.Routing.Default
}

// sessionOf finds the router session named by params.sessionId.
func (r *Router) sessionOf(p json.RawMessage) *Session {
	if p == nil {
		return nil
	}
	var ref acp.SessionRef
	if json.Unmarshal(p, &ref) != nil || ref.SessionID == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[ref.SessionID]
}

// sessionRequest handles the session-scoped choices: set_config_option and
// set_mode may switch agents (switch.go); set_model goes to the active
// agent.
func (r *Router) sessionRequest(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, id := r.sessionFor(ctx, p)
	if s == nil {
		r.replyTo(req)(nil, errUnknownSession(id))
		return
	}
	s.whenReady(func(err error) {
		if err != nil {
			r.replyTo(req)(nil, err)
			return
		}
		s.touch()
		s.openNow()
		switch req.Method {
		case acp.MethodSetConfigOption:
			r.setConfigOption(ctx, s, req)
		case acp.MethodSetMode:
			r.setModeRequest(ctx, s, req)
		default:
			d := s.activeDown()
			inst, err := d.alive()
			if err != nil {
				r.replyTo(req)(nil, err)
				return
			}
			r.forwardOrNotify(ctx, req, inst, rewriteSessionID(p, s.ID, d.id), s.ID)
		}
	})
}

// rewriteSessionID replaces params.sessionId when from and to differ.
func rewriteSessionID(p json.RawMessage, from, to string) json.RawMessage {
	if from == to || p == nil {
		return p
	}
	if out, ok := acp.ReplaceInValid(p, []acp.Replacement{{Path: sessionIDPath, Value: to}}); ok {
		return out // in one pass, not a validating scan of the whole prompt
	}
	out, err := acp.SetField(p, "sessionId", to)
	if err != nil {
		return p
	}
	return out
}

// errUnknownSession answers requests naming a session the router does not
// have, or none (no sessionId, or one that is not a string).
func errUnknownSession(id string) error {
	if id == "" {
		return errNoSessionID
	}
	return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: unknown session %q", id), map[string]string{"sessionId": id})
}

// errNoSessionID answers a request for one session whose params name none.
var errNoSessionID = acp.NewError(acp.CodeInvalidParams, "acp-router: params need a sessionId (a string)", nil)

// survive keeps a bug in handling one message from taking the router down
// (editors do not restart it, DESIGN §7): the panic is logged with its
// stack and the request, if any, answered with an internal error.
func (r *Router) survive(from string, req *jsonrpc2.Request) {
	p := recover()
	if p == nil {
		return
	}
	r.log.Error("internal error handling a message", "from", from, "panic", p, "stack", string(debug.Stack()))
	if req != nil && !req.Notif && from == "editor" {
		r.replyTo(req)(nil, acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: internal error: %v", p), nil))
	}
}

// jsonrpcRequest is a request taken on the fast path, as the handlers of
// the slow path receive it (its params are not copied); false when its id
// does not parse.
func jsonrpcRequest(m *acp.Message) (*jsonrpc2.Request, bool) {
	id, err := acp.ParseID(m.ID)
	if err != nil {
		return nil, false
	}
	req := &jsonrpc2.Request{Method: m.Method, ID: id}
	if m.Params != nil {
		p := m.Params
		req.Params = &p
	}
	return req, true
}
