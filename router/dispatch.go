package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/upstream"
)

// Dispatch: what the router does with each message it reads, from the
// editor (editorHandler) and from each agent (agentHandler), on the
// stream's fast path (Intercept, interceptAgent) and the jsonrpc2 path.

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

// agentHandler handles one agent instance's requests and notifications, in
// that agent's read loop.
type agentHandler struct {
	r    *Router
	inst *upstream.Instance
}

func (h agentHandler) Handle(ctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	defer h.r.survive(h.inst.Agent.Name(), nil)
	ctx = context.WithoutCancel(ctx)
	if !req.Notif && acp.NotificationOnly(req.Method, true) {
		h.r.log.Warn("a notification method sent as a request refused", "agent", h.inst.Agent.Name(), "method", req.Method)
		if err := h.inst.Peer().Reply(ctx, req.ID, nil, errNotificationAsRequest(req.Method)); err != nil {
			h.r.log.Debug("cannot answer the agent", "agent", h.inst.Agent.Name(), "method", req.Method, "error", err)
		}
		return
	}
	if req.Notif && acp.RequestOnly(req.Method, true) && req.Method != acp.MethodMcpMessage {
		// fs/*, terminal/*, session/request_permission, elicitation/create
		// without an id: nothing to decide, audit or answer, and an editor
		// must never get it undecided (agentNotification decides which
		// mcp/message notifications pass).
		h.r.log.Warn("a request method sent as a notification dropped", "agent", h.inst.Agent.Name(), "method", req.Method)
		return
	}
	if req.Notif && isStatusUpdate(req.Method) {
		// Coalesced, never waited for: a flood of them must not hold up
		// the agent's sessions (authstatus.go).
		h.r.agentNotification(ctx, h.inst, req)
		return
	}
	switch {
	case req.Method == acp.MethodCancelRequest:
		h.r.agentCancelRequest(ctx, h.inst, req)
	case req.Notif:
		h.r.agentNotification(ctx, h.inst, req)
	default:
		h.r.agentRequest(ctx, h.inst, req)
	}
	// As in the relay: the agent's next message waits for room in the
	// lane of what this one became for the editor.
	h.r.waitEditor(h.r.editorLane(h.inst, req))
}

// editorLane is the lane of the editor's write queue that what the router
// writes for an agent's request or notification goes in: its router
// session (as toEditorSession translates it), else its sessionId as it is
// (extension methods pass it unchanged), else the shared lane.
func (r *Router) editorLane(inst *upstream.Instance, req *jsonrpc2.Request) string {
	id := acp.SessionID(params(req))
	if id == "" {
		return ""
	}
	r.mu.Lock()
	s := r.downLocked(inst, id)
	r.mu.Unlock()
	if s != nil {
		return s.ID
	}
	return id
}

// interceptAgent is the relay's hot path: session/update notifications go
// from the agent's read path straight to the editor's write queue, as the
// agent's own bytes unless an id must be translated.
func (r *Router) interceptAgent(inst *upstream.Instance, m *acp.Message) bool {
	if m.Kind == acp.KindRequest && fastCallback(m.Method) {
		return r.agentCallback(inst, m)
	}
	if m.Kind != acp.KindNotification || m.Method != acp.MethodSessionUpdate {
		return false
	}
	defer r.survive(inst.Agent.Name(), nil)
	var u updateParams // on the stack unless the update waits (below)
	if err := u.decodeMessage(m); err != nil || u.SessionID == "" {
		r.log.Warn("malformed session/update dropped", "agent", inst.Agent.Name(), "error", err)
		return true
	}
	r.mu.Lock()
	s := r.downLocked(inst, u.SessionID)
	if s == nil {
		if r.tombs.has(downKey(inst, u.SessionID)) { // closed or evicted: the rest of its turn
			r.mu.Unlock()
			r.closedDrops.add(1, "agent", inst.Agent.Name(), "session", u.SessionID)
			return true
		}
		// Maybe a session the agent announces before answering
		// session/new (STYLE.md): parked until bind, within bounds.
		p := r.parkingLocked(inst)
		dropped := p.park(u.SessionID, m)
		r.mu.Unlock()
		p.drops.add(dropped, "session", u.SessionID)
		return true
	}
	r.mu.Unlock()
	s.mu.Lock()
	d := s.down[inst.Agent.Name()]
	s.mu.Unlock()
	if d != nil && d.inst == inst {
		if s.order().busy() {
			later := u
			s.order().do(r, len(m.Raw), func() { r.relayUpdate(s, d, m, &later) })
		} else {
			r.relayUpdate(s, d, m, &u)
		}
		// Backpressure from a slow editor, only from this session's
		// backlog, and holding no lock: the editor's read loop
		// (session/cancel) takes s.mu. Then from a disk slower than the
		// agents: the store's queue holds the updates not yet written.
		r.waitEditor(s.ID)
		if st := r.opts.Store; st != nil && st.Full() {
			// What the editor is owed (Cork) must not wait for the disk.
			r.editor.Stream().Flush()
			st.WaitRoom()
		}
	}
	return true
}

// fastCallback: the agent's requests taken on the fast path (issue 16):
// the callbacks of a turn.
func fastCallback(method string) bool {
	switch method {
	case acp.MethodRequestPermission, acp.MethodReadTextFile, acp.MethodWriteTextFile,
		acp.MethodTerminalCreate, acp.MethodTerminalOutput, acp.MethodTerminalWaitForExit,
		acp.MethodTerminalKill, acp.MethodTerminalRelease:
		return true
	}
	return false
}

// agentCallback handles an agent's request in the agent's read path, before
// the jsonrpc2.Conn would decode its params into a map and encode them
// again, exactly as agentHandler.Handle would at the same point of the
// agent's message order (the Conn reads the next message only once Handle
// has returned): the same checks, the same policy decision on the
// session's sequencer.
func (r *Router) agentCallback(inst *upstream.Instance, m *acp.Message) bool {
	req, ok := jsonrpcRequest(m)
	if !ok {
		return false // the Conn's decoder says what is wrong with it
	}
	defer r.survive(inst.Agent.Name(), nil)
	r.agentRequest(context.Background(), inst, req)
	r.waitEditor(r.editorLane(inst, req))
	return true
}
