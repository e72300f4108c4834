// Package hub multiplexes several ACP clients onto one router (issue 30,
// ACP RFD #533 "Multi-Client Session Attach"): it is the Router's one
// editor, on an in-process pipe pair, and serves N clients, each a Conn
// from whatever transport (the stdio editor, remote/'s HTTP and
// WebSocket).
//
// What the hub owns, so that the Router stays single-editor:
//   - ids: every client's request ids become the hub's own on the way to
//     the Router and are given back on the way out; the Router's requests
//     (the agents' permission, fs, terminal questions) get a new id per
//     client they are sent to;
//   - initialize: the Router is initialized once, with the first client's
//     params; every client gets that answer, with the attach capability
//     where the RFD puts it (agentCapabilities.sessionCapabilities.attach);
//   - sessions: which clients are attached to which session and as what
//     (controller or observer), session/attach (history from the store,
//     then live, with neither gap nor duplicate at the seam) and
//     session/detach, who may see which session (Identity.AllSessions, else
//     the sessions it started, remembered across restarts);
//   - permission fan-out: an agent's request_permission goes to every
//     controller allowed to answer it (the Router's
//     _meta["acp-router/answerers"]), the first answer wins and reaches
//     the Router with _meta["acp-router/answeredBy"], the others asked get
//     a $/cancel_request of their copy and every other client RFD #533's
//     permission_resolved; a request asked while no controller is
//     attached waits for the next one; fs and terminal requests go to one
//     controller (the editor while attached);
//   - one turn at a time per session: prompts from several controllers
//     reach the Router's own per-session queue, never interleaved;
//   - session/load of a session live here: the history is replayed to the
//     loading client alone (the Router gets session/resume);
//   - bounded per-client queues: a remote client that does not keep up is
//     dropped with a reason, and never delays the Router or another client;
//     the stdio editor is never dropped: the Router's stream waits for it
//     (waitEditor), as the Router waits for a slow editor without a hub.
//     Before dropping anyone, streamed text is coalesced in a remote
//     client's queue once it is behind, or at the interval it asked for
//     (coalesce.go): the same text in fewer messages, nothing reordered;
//   - what ACP does not carry, for the page of issue 31: the live sessions
//     a client may see, with their state and agent, asked
//     (_acp-router/sessions) or pushed to a client that watches
//     (_acp-router/watch, watch.go).
//
// Concurrency: one mutex (Hub.mu) guards the routing state; it is never
// held across a write that can wait (to the Router: its read loop never
// stops reading; to a client: its queue only enqueues). Each client has
// one writer goroutine, owned by Serve.
package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
)

// Conn is one client's message stream, whatever the transport.
type Conn interface {
	// Read returns the next JSON-RPC message the client sent (one JSON
	// value, no trailing newline); io.EOF when the client is gone.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one message to the client. It is called from one
	// goroutine per client; msg is read-only (the same bytes may go to
	// other clients).
	Write(ctx context.Context, msg []byte) error
	// Close ends the connection, telling the client why if the transport
	// can (WebSocket close reason, SSE final event).
	Close(reason error) error
}

// Identity is who a client is, as its transport authenticated it.
type Identity struct {
	Name        string // token name; "editor" for the stdio editor
	Role        string // "controller" | "observer": the most this client may be
	AllSessions bool   // may see/attach sessions other clients started (else only its own)
	Editor      bool   // the stdio editor
}

// Roles.
const (
	RoleController = "controller"
	RoleObserver   = "observer"
)

// History reads a session's stored history for an attach: router.Router
// implements it (its session/load reading). When the session is live in
// the Router, mark is written into the session's stream to the hub, in
// order, at the point the returned lines end (marked true): every update
// before it is in lines, every update after it is not. A session the
// Router does not hold in memory returns its stored lines, unmarked.
type History interface {
	SessionHistory(ctx context.Context, sessionID, mark string) (lines [][]byte, marked bool, err error)
}

// MarkMethod is the notification the Router writes for History's mark; the
// hub consumes it, no client sees it.
const MarkMethod = "_acp-router/mark"

// Options tune a Hub; zero values take the defaults in brackets.
type Options struct {
	Logger hclog.Logger
	// History serves session/attach's replay; nil: attach replays
	// nothing (historyPolicy full acts as none).
	History History
	// OwnersFile remembers which identity started which session, across
	// restarts (mode 0600); "": in memory only.
	OwnersFile string
	// CancelOnLastDetach cancels a session's running turn when its last
	// client goes (sessions.on_last_detach: cancel); else the turn
	// finishes.
	CancelOnLastDetach bool
	// QueueBytes and QueueMessages bound what waits for one client; past
	// either, that client is dropped [32 MiB, 16384].
	QueueBytes    int
	QueueMessages int
	// CoalesceAfter is how many messages a remote client's queue holds
	// before streamed text is coalesced in it (coalesce.go): a client
	// that keeps up gets every chunk as the agent sent it [1024, at most
	// a quarter of QueueMessages].
	CoalesceAfter int
	// MaxLine bounds one message from the Router [acp.DefaultMaxLine].
	MaxLine int
}

// Errors a client's connection is closed with.
var (
	// ErrSlowClient: the client's queue overflowed.
	ErrSlowClient = errors.New("hub: client too slow: its queue of messages overflowed")
	// ErrRouterGone: the router side closed.
	ErrRouterGone = errors.New("hub: the router stopped")
)

// Hub is the Router's one editor, serving many clients.
type Hub struct {
	opts Options
	log  hclog.Logger

	ready    chan struct{}   // closed once Run has the Router's pipes
	life     context.Context // ends with Run
	endLife  context.CancelFunc
	done     chan struct{} // closed when Run returns
	doneOnce sync.Once

	wmu sync.Mutex // serializes writes to the Router
	w   io.Writer

	mu       sync.Mutex
	clients  map[*client]struct{}
	sessions map[string]*session // by session id (children alias their root)
	calls    map[string]*call    // hub → Router requests in flight, by hub id
	asks     map[string]*ask     // Router → client requests, by the Router's id
	nextID   int64
	init     initState
	owners   *owners
	marks    map[string]*member // attach marks not seen yet
	idle     chan struct{}      // closed when the last client goes; nil while none came since
}

// New returns a Hub; Run connects it to the Router.
func New(opts Options) *Hub {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 32 << 20
	}
	if opts.QueueMessages <= 0 {
		opts.QueueMessages = 16384
	}
	if opts.CoalesceAfter <= 0 {
		opts.CoalesceAfter = 1024
	}
	opts.CoalesceAfter = max(1, min(opts.CoalesceAfter, opts.QueueMessages/4))
	if opts.MaxLine <= 0 {
		opts.MaxLine = acp.DefaultMaxLine
	}
	h := &Hub{opts: opts, log: opts.Logger.Named("hub"), ready: make(chan struct{}), done: make(chan struct{}),
		clients: map[*client]struct{}{}, sessions: map[string]*session{}, calls: map[string]*call{}, asks: map[string]*ask{},
		marks: map[string]*member{}}
	h.life, h.endLife = context.WithCancel(context.Background())
	h.owners = loadOwners(opts.OwnersFile, h.log)
	return h
}

// Run relays between the Router and the clients until ctx ends or the
// Router side closes; then every client is closed (ErrRouterGone).
func (h *Hub) Run(ctx context.Context, toRouter io.WriteCloser, fromRouter io.ReadCloser) error {
	h.w = toRouter
	close(h.ready)
	defer h.finish()
	stop := context.AfterFunc(ctx, func() {
		fromRouter.Close()
		toRouter.Close()
	})
	defer stop()
	defer toRouter.Close()
	br := bufio.NewReaderSize(fromRouter, 64<<10)
	for {
		line, err := readLine(br, h.opts.MaxLine)
		if len(line) > 0 {
			h.fromRouter(line)
			h.waitEditor(ctx)
		}
		if errors.Is(err, errLineTooLong) {
			h.log.Warn("message from the router over the line limit dropped", "limit", h.opts.MaxLine)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				return nil
			}
			return fmt.Errorf("hub: read from the router: %w", err)
		}
	}
}

// waitEditor holds the Router's stream, holding no lock, while the stdio
// editor's queue is past its bounds: the editor is never dropped, so a
// slow editor slows the agents down as it does without a hub (the
// router's waitEditor), and the remote clients with them.
func (h *Hub) waitEditor(ctx context.Context) {
	h.mu.Lock()
	var e *client
	for c := range h.clients {
		if c.id.Editor {
			e = c
			break
		}
	}
	h.mu.Unlock()
	for e != nil && e.over() {
		select {
		case <-e.drained:
		case <-ctx.Done():
			return
		}
	}
}

// finish closes every client once the Router is gone.
func (h *Hub) finish() {
	h.doneOnce.Do(func() { close(h.done) })
	h.endLife()
	h.mu.Lock()
	cs := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		cs = append(cs, c)
	}
	h.mu.Unlock()
	for _, c := range cs {
		c.fail(ErrRouterGone)
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one newline-terminated line (without it) of at most max
// bytes, in a buffer of its own (lines are queued for clients as they
// are). A longer line is skipped whole (errLineTooLong).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(frag) > max+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err == nil {
				err = errLineTooLong
			}
			return nil, err
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if len(bytes.TrimSpace(buf)) == 0 && err == nil {
			buf = nil
			continue
		}
		return buf, err
	}
}

// toRouter writes one line to the Router. Never called holding h.mu: the
// Router's read loop always reads on, but a pipe write waits for it.
func (h *Hub) toRouter(line []byte) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, err := h.w.Write(append(line, '\n')); err != nil {
		h.log.Debug("cannot write to the router", "error", err)
	}
}

// id returns a fresh hub id, as JSON.
func (h *Hub) idLocked() json.RawMessage {
	h.nextID++
	return json.RawMessage(strconv.FormatInt(h.nextID, 10))
}

// Serve serves one client until it goes (nil when it closed its end) or
// the Router stops.
func (h *Hub) Serve(ctx context.Context, c Conn, id Identity) error {
	if id.Role != RoleObserver {
		id.Role = RoleController
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		c.Close(ctx.Err())
		return ctx.Err()
	}
	cl := newClient(h, c, id)
	h.mu.Lock()
	select {
	case <-h.done:
		h.mu.Unlock()
		c.Close(ErrRouterGone)
		return ErrRouterGone
	default:
	}
	h.clients[cl] = struct{}{}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	h.mu.Unlock()
	h.log.Debug("client connected", "client", id.Name, "role", id.Role)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		cl.writeLoop(ctx)
	}()
	var err error
	for {
		var msg []byte
		msg, err = c.Read(ctx)
		if err != nil {
			break
		}
		h.fromClient(cl, msg)
	}
	reason := cl.failure()
	if reason == nil {
		reason = err
	}
	h.remove(cl)
	cl.fail(reason)
	cancel()
	<-wrote
	h.log.Debug("client gone", "client", id.Name, "reason", reason)
	// The hub's own reasons are the caller's to know; a client that went
	// (its end closed, or its transport failed) is the normal end.
	if errors.Is(reason, ErrSlowClient) || errors.Is(reason, ErrRouterGone) {
		return reason
	}
	return nil
}

// WaitIdle returns once no client is connected (at once when none is), or
// with ctx's error: a router an editor started lives on while remote
// clients are connected after the editor closed (issue 30).
func (h *Hub) WaitIdle(ctx context.Context) error {
	for {
		h.mu.Lock()
		if len(h.clients) == 0 {
			h.mu.Unlock()
			return nil
		}
		idle := h.idle
		h.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
