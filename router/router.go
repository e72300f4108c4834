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
//
// /compare (compare.go) runs one prompt on several agents at once, each in
// a downstream session of its own; the editor gets their answers as
// sections, one agent's each, opened by a heading naming it under a
// messageId of its own, one agent streaming while the others' lines wait
// for its message to end. Labelling every chunk would break Markdown, and
// distinct messageIds alone keep agents apart only in editors that group by
// them (Zed), not in those that append every chunk to one text
// (CodeCompanion, agent-shell): headed sections read right in both, and
// something always streams.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// ClientMeta: a hub is in front of the router (issue 30) and it is the
	// hub that writes _meta["acp-router/answeredBy"] on an answer to a
	// permission request, having stripped any its clients wrote: the
	// router reads who answered from it (answerers.go). Without it the
	// editor is the one who answers, whatever its answer says.
	ClientMeta bool
}

// Sandbox is the wire's view of the agents' sandbox (sandbox.Confiner).
type Sandbox interface {
	Capability() acp.SandboxCapability
	Require(acp.SandboxPolicy) error
}

// Router serves one editor connection. It composes the owners of its
// concerns, each a type below with the discipline of its fields; their
// fields are promoted (r.sessions, r.forwards, ...).
type Router struct {
	cfg  *config.Config
	opts Options
	log  hclog.Logger

	// mu guards the fields of the concerns below that say so. One lock,
	// not one per concern: an agent's exit, a session's binding and a
	// turn's end each change several of them at once; it is never held
	// across a wait (STYLE.md) nor while a session's own mu is taken.
	mu sync.Mutex

	editorConn
	handshake
	upstreams
	sessionTable
	forwardTable
	editorCalls
	mcpRoutes
	dropCounts

	// owned are the router's goroutines: shutdown waits for them (bounded).
	owned owner.Group
}

// editorConn is the editor's connection. editor is set once by Serve,
// before editorReady is closed; the handlers, already reading, wait for
// editorReady before they use it.
type editorConn struct {
	editor      *acp.Peer
	editorReady chan struct{}
	editorSet   func()
}

// handshake is how the editor initialized the router (init.go,
// successor.go). role is atomic; chain, set with roleProxy before it is
// published, is its link to the successor; initParams and clientCaps are
// under Router.mu.
type handshake struct {
	role       atomic.Int32
	chain      *chain
	initParams json.RawMessage // the editor's initialize params, for agents
	clientCaps acp.ClientCapabilities
}

// upstreams are the agents and what they report about themselves.
// agents and byName are written by New and, under Router.mu, by
// beginProxy (the successor); uopts after New is read only; the caches
// and watched are under Router.mu; statusUps has its own lock.
type upstreams struct {
	agents    []*upstream.Agent
	byName    map[string]*upstream.Agent
	uopts     upstream.Options
	watched   map[*upstream.Instance]bool // instances whose connection watchInstance waits on
	modeCache map[string][]merge.Mode
	cmdCache  map[string][]string         // agents' own command names, as last seen
	auth      map[string]merge.AuthMethod // advertised auth method id → owner
	// statusUps relays auth status updates, coalesced (authstatus.go).
	statusUps *statusUpdates
}

// sessionTable is the router's sessions and the agents' sessions bound to
// them, under Router.mu; msgNonce is fixed at New and msgSeq atomic.
type sessionTable struct {
	sessions map[string]*Session // by router session id
	downs    map[string]*Session // by downKey of each downstream session
	// children are the subagent sessions, by the id the editor knows
	// (subagent.go); they are not in sessions: only session/cancel may
	// name one.
	children  map[string]*Session
	parked    map[*upstream.Instance]*parking // updates for sessions not bound yet (bounds.go)
	tombs     tombstones                      // downstream sessions closed or evicted
	closedIDs tombstones                      // router sessions closed (or deleted) recently: never brought back by a prompt
	sweep     chan struct{}                   // wakes the evictor early (evict.go); capacity 1
	msgNonce  string                          // in the router's own messageIds
	msgSeq    atomic.Uint64
}

// forwardTable is the editor's requests in flight at agents (forward.go),
// under Router.mu: each forward by the editor's id, the requests the
// router holds itself (waiting for an agent), and their count.
type forwardTable struct {
	forwards map[string]*forward // editor request id → its forward to an agent
	held     map[string]func()
	calls    int // forwards other than prompts (maxForwards)
}

// editorCalls is the agents' requests in flight at the editor
// (agentcalls.go), under Router.mu; watchCalls starts watchEditorCalls
// once.
type editorCalls struct {
	toEditor   map[string]*outgoing       // router requests to the editor, by editor-side id
	pending    map[*upstream.Instance]int // toEditor entries per agent instance
	watchCalls sync.Once
	terminals  map[string]terminal // terminal id → owner
	elicits    *merge.IDTable      // (agent, elicitationId) ↔ editor-side id
}

// mcpRoutes is MCP over ACP (mcp.go), under Router.mu: the ACP-transport
// MCP servers sessions declared, by serverId, and the agents' mcp/message
// requests at the editor, by serverId and requestId.
type mcpRoutes struct {
	mcpServers map[string]*Session
	mcpCalls   map[string]*mcpCall
}

// dropCounts are the drops counted and logged once (bounds.go); each has
// its own lock.
type dropCounts struct {
	closedDrops *drops // updates for closed or evicted sessions
	toolDrops   *drops // tool call ids retired before their tool call finished
	askDrops    *drops // tool call updates dropped while held for a permission request (asking.go)
	childDrops  *drops // subagent announcements past maxChildren
	seqWaits    *drops // agent reads held by a session's backlog behind a decision (order.go)
}

// outgoing is an agent request in flight at the editor.
type outgoing struct {
	inst     *upstream.Instance
	agentID  json.RawMessage
	editorID json.RawMessage
	session  string // router session id, or ""
	// key is editorID's in Router.toEditor, kept with it on the fast path
	// (as Peer.CallRaw keyed it: the answer ends it without reading the id
	// again).
	key string
	// A request sent on the fast path (callEditorRaw): end relays its
	// answer (once: ended, under Router.mu), from the editor's read path
	// or, when the connection closes first, from watchEditorCalls.
	end   func(json.RawMessage, error)
	ended bool
}

type terminal struct {
	// agent is the instance that created it (tableKey): an agent may run
	// one process per set of session roots (upstream.Agent.ForRoots), and
	// each process's terminals are its own.
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
		cfg:  cfg,
		opts: opts,
		log:  opts.Logger,
		upstreams: upstreams{
			byName:    map[string]*upstream.Agent{},
			watched:   map[*upstream.Instance]bool{},
			modeCache: map[string][]merge.Mode{},
			cmdCache:  map[string][]string{},
			auth:      map[string]merge.AuthMethod{},
		},
		sessionTable: sessionTable{
			sessions: map[string]*Session{},
			downs:    map[string]*Session{},
			children: map[string]*Session{},
			parked:   map[*upstream.Instance]*parking{},
			sweep:    make(chan struct{}, 1),
			msgNonce: strconv.FormatInt(time.Now().UnixNano(), 36),
		},
		forwardTable: forwardTable{forwards: map[string]*forward{}, held: map[string]func(){}},
		editorCalls: editorCalls{
			toEditor:  map[string]*outgoing{},
			pending:   map[*upstream.Instance]int{},
			terminals: map[string]terminal{},
			elicits:   merge.NewIDTable(),
		},
		mcpRoutes: mcpRoutes{mcpServers: map[string]*Session{}, mcpCalls: map[string]*mcpCall{}},
	}
	r.editorReady = make(chan struct{})
	r.editorSet = sync.OnceFunc(func() { close(r.editorReady) })
	r.closedDrops = newDrops(r.log, hclog.Debug, "updates for closed sessions dropped")
	r.toolDrops = newDrops(r.log, hclog.Warn, "tool call ids retired before their tool call finished", "limit", maxToolIDs)
	r.askDrops = newDrops(r.log, hclog.Warn, "tool call updates dropped while the editor decides about the tool call", "maxHeld", maxAskHeld, "maxBytes", maxAskHeldBytes)
	r.seqWaits = newWaits(r.log, hclog.Info, "an agent's reading waits: a session's messages behind its pending decision are at their bound",
		"maxItems", maxSequenced, "maxBytes", maxSequencedBytes)
	r.childDrops = newDrops(r.log, hclog.Warn, "subagent sessions past the bound dropped; their requests fail closed", "limit", maxChildren)
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
