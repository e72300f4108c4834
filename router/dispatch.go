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

// route is one row of the protocol table (acp.Methods) with the router's
// code for it: the dispatch of both paths, from the editor and from the
// agents, on the stream's fast path and the jsonrpc2.Conn's, reads it. A
// Handled row without its code, or code without its row, stops the
// program at its start (buildRoutes): the table cannot say one thing and
// the dispatch do another.
type route struct {
	acp.Method
	// editor is the router's code for a Handled method from the editor,
	// on either path.
	editor func(*Router, context.Context, *jsonrpc2.Request)
	// agent is the router's code for a Handled method from an agent, on
	// the Conn's path.
	agent func(*Router, context.Context, *upstream.Instance, *jsonrpc2.Request)
	// fast takes an agent's Fast method in the agent's read path; true
	// when it did.
	fast func(*Router, *upstream.Instance, *acp.Message) bool
}

// editorRoutes and agentRoutes are the protocol table as each side's
// dispatch reads it, by method name (buildRoutes).
var editorRoutes, agentRoutes map[string]*route

func init() {
	// Built in init, not in the variables' initializers: some handlers
	// reach the dispatch again (the successor's messages), which Go
	// would report as an initialization cycle.
	editorRoutes = buildRoutes(false, editorMethods, nil, nil)
	agentRoutes = buildRoutes(true, nil, agentMethods, agentFast)
}

// editorMethods is the router's code for the editor's methods the table
// says it handles itself.
var editorMethods = map[string]func(*Router, context.Context, *jsonrpc2.Request){
	acp.MethodInitialize:      (*Router).initializeRequest,
	acp.MethodProxyInitialize: (*Router).proxyInitialize,
	acp.MethodProxySuccessor:  func(r *Router, _ context.Context, req *jsonrpc2.Request) { r.fromSuccessor(req) },
	acp.MethodAuthenticate:    answered((*Router).authenticate),
	acp.MethodLogout:          answered((*Router).logout),
	acp.MethodAuthStatus:      answered((*Router).authStatus),
	acp.MethodSessionNew:      (*Router).newSession,
	acp.MethodSessionPrompt:   (*Router).prompt,
	acp.MethodSessionCancel:   (*Router).cancel,
	acp.MethodCancelRequest:   (*Router).cancelRequest,
	acp.MethodSessionClose:    (*Router).closeSession,
	acp.MethodSetMode:         (*Router).sessionRequest,
	acp.MethodSetConfigOption: (*Router).sessionRequest,
	acp.MethodSessionLoad: stored(func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		r.loadSession(ctx, req, true)
	}),
	acp.MethodSessionResume: stored(func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		r.loadSession(ctx, req, false)
	}),
	acp.MethodSessionList:     stored((*Router).listSessions),
	acp.MethodSessionDelete:   stored((*Router).deleteSession),
	acp.MethodSessionFork:     (*Router).forkSession,
	acp.MethodSessionSetTitle: (*Router).setTitle,
	acp.MethodSessionStatus:   (*Router).sessionStatus,
	acp.MethodSessionArchive: stored(func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		r.archiveSession(ctx, req, true)
	}),
	acp.MethodSessionUnarchive: stored(func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		r.archiveSession(ctx, req, false)
	}),
	acp.MethodMcpMessage: (*Router).editorMcpMessage,
}

// agentMethods is the router's code for the agents' methods the table says
// it handles itself; the Relayed ones go to agentRequest and
// agentNotification.
var agentMethods = map[string]func(*Router, context.Context, *upstream.Instance, *jsonrpc2.Request){
	// Taken on the fast path (agentFast); here only should the stream
	// not have classified it.
	acp.MethodSessionUpdate:       (*Router).agentNotification,
	acp.MethodElicitationComplete: (*Router).agentNotification,
	acp.MethodCancelRequest:       (*Router).agentCancelRequest,
	// Relayed, on a path of its own: decided first (permission.go).
	acp.MethodRequestPermission: (*Router).permissionRequest,
}

// agentFast is the fast path's code for the agents' Fast notifications;
// their Fast requests are agentCallback's.
var agentFast = map[string]func(*Router, *upstream.Instance, *acp.Message) bool{
	acp.MethodSessionUpdate: (*Router).interceptUpdate,
}

// buildRoutes joins the table's rows for one side (the editor's methods,
// or the agents' when fromAgent) with the router's code for them. It
// panics where they disagree: a Handled row with no code, code for a row
// that is not Handled or not there, a Fast row with no fast path.
func buildRoutes(fromAgent bool,
	editor map[string]func(*Router, context.Context, *jsonrpc2.Request),
	agent map[string]func(*Router, context.Context, *upstream.Instance, *jsonrpc2.Request),
	fast map[string]func(*Router, *upstream.Instance, *acp.Message) bool) map[string]*route {
	out := map[string]*route{}
	for _, m := range acp.Methods {
		if row, ok := acp.LookupMethod(m.Name, fromAgent); !ok || row.Side != m.Side {
			continue // the other side's row
		}
		rt := &route{Method: m, editor: editor[m.Name], agent: agent[m.Name], fast: fast[m.Name]}
		handled := rt.editor != nil || rt.agent != nil
		// The proxy chain's methods come from the conductor, on the
		// editor's connection: an agent's are passed on as any call. A
		// Relayed row that names its code has a path of its own.
		wantCode := m.Treatment == acp.Handled && !(fromAgent && m.Side == acp.SideProxy) ||
			m.Treatment == acp.Relayed && m.Handler != ""
		switch {
		case wantCode && !handled:
			panic("router: the protocol table says the router handles " + m.Name + " (" + m.Handler + "), but it has no code for it")
		case !wantCode && handled:
			panic("router: code for " + m.Name + ", which the protocol table says is " + m.Treatment.String())
		case m.Fast && fromAgent && m.Request && rt.fast == nil:
			rt.fast = (*Router).agentCallback
		case m.Fast && (fromAgent && rt.fast == nil || !fromAgent && (!m.Request || rt.editor == nil)):
			panic("router: the protocol table has " + m.Name + " on the fast path, but the router has no fast path for it")
		}
		out[m.Name] = rt
	}
	for name := range editor {
		if out[name] == nil {
			panic("router: code for " + name + ", which the protocol table has no row for")
		}
	}
	for name := range agent {
		if out[name] == nil {
			panic("router: code for " + name + ", which the protocol table has no row for")
		}
	}
	for name := range fast {
		if out[name] == nil || !out[name].Fast {
			panic("router: a fast path for " + name + ", which the protocol table does not mark fast")
		}
	}
	return out
}

// lookupRoute is the route of a method received from the editor (from an
// agent when fromAgent); false for a method the table does not name. The
// method families the table names by prefix (acp.LookupMethod) have no
// code of the router's.
func lookupRoute(name string, fromAgent bool) (*route, bool) {
	table := editorRoutes
	if fromAgent {
		table = agentRoutes
	}
	if rt := table[name]; rt != nil {
		return rt, true
	}
	m, ok := acp.LookupMethod(name, fromAgent)
	if !ok {
		return nil, false
	}
	return &route{Method: m}, true
}

// notificationOnly: the protocol sends the method only as a notification
// (acp.NotificationOnly); requestOnly: only as a request (acp.RequestOnly).
func (rt *route) notificationOnly() bool { return rt.Notification && !rt.Request }
func (rt *route) requestOnly() bool      { return rt.Request && !rt.Notification }

// answered runs a handler whose answer may wait (on agents starting) off
// the editor's read loop, and answers the editor with what it returns.
func answered(f func(*Router, context.Context, *jsonrpc2.Request) (json.RawMessage, error)) func(*Router, context.Context, *jsonrpc2.Request) {
	return func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		r.spawn(func() { r.replyTo(req)(f(r, ctx, req)) })
	}
}

// stored runs a handler of a method that needs the session store; without
// one, the method is not advertised and is answered -32601.
func stored(f func(*Router, context.Context, *jsonrpc2.Request)) func(*Router, context.Context, *jsonrpc2.Request) {
	return func(r *Router, ctx context.Context, req *jsonrpc2.Request) {
		if r.opts.Store == nil {
			r.replyTo(req)(nil, errNeedsStore(req.Method))
			return
		}
		f(r, ctx, req)
	}
}

// initializeRequest handles initialize: refused once the router is a
// proxy, answered off the read loop (the agents start).
func (r *Router) initializeRequest(ctx context.Context, req *jsonrpc2.Request) {
	if !r.role.CompareAndSwap(roleNone, roleAgent) && r.isProxy() {
		r.replyTo(req)(nil, fail(errNotNow, "acp-router: already initialized as a proxy (proxy/initialize)", nil))
		return
	}
	r.spawn(func() { r.replyTo(req)(r.initialize(ctx, req)) })
}

// editorHandler handles the editor's requests and notifications, in the
// editor's read loop.
type editorHandler struct{ r *Router }

// Handle dispatches an editor message by its row: the router's code for a
// Handled method, the session's agent for one RoutedBySession, an error
// for a Refused one, and what the table does not name (extensions,
// anything newer) is forwarded as unknown.
func (h editorHandler) Handle(ctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	r := h.r
	<-r.editorReady // Serve has set r.editor
	defer r.survive("editor", req)
	rt, known := lookupRoute(req.Method, false)
	if !req.Notif && known && rt.notificationOnly() {
		r.log.Warn("a notification method sent as a request refused", "method", req.Method)
		r.replyTo(req)(nil, errNotificationAsRequest(req.Method))
		return
	}
	ctx = context.WithoutCancel(ctx)
	if req.Method != acp.MethodSessionPrompt { // the turn reads its own
		ctx = r.traceEditorRequest(ctx, req)
	}
	if !known {
		r.forwardUnknown(ctx, req)
		return
	}
	switch rt.Treatment {
	case acp.Handled:
		rt.editor(r, ctx, req)
	case acp.RoutedBySession:
		r.sessionRequest(ctx, req)
	case acp.Refused:
		r.replyTo(req)(nil, errRefused(rt.Code, req.Method))
	default:
		r.forwardUnknown(ctx, req)
	}
}

// Intercept is the editor's fast path (issue 16): the table's Fast
// requests (session/prompt) are taken in the stream's read path, before
// the jsonrpc2.Conn would decode their params into a map and encode them
// again, and handled as Handle would handle them, at the same point in the
// editor's message order (the Conn reads the next message only once
// Handle has returned). Their answers are written as raw bytes (replyRaw).
func (h editorHandler) Intercept(m *acp.Message) bool {
	if m.Kind != acp.KindRequest {
		return false
	}
	rt := editorRoutes[m.Method]
	if rt == nil || !rt.Fast {
		return false
	}
	req, ok := jsonrpcRequest(m)
	if !ok {
		return false // the Conn's decoder says what is wrong with it
	}
	r := h.r
	<-r.editorReady
	defer r.survive("editor", req)
	rt.editor(r, context.Background(), req)
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
		r.replyTo(req)(nil, fail(errInternal, fmt.Sprintf("acp-router: internal error: %v", p), nil))
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
	rt, known := lookupRoute(req.Method, true)
	if !req.Notif && known && rt.notificationOnly() {
		h.r.log.Warn("a notification method sent as a request refused", "agent", h.inst.Agent.Name(), "method", req.Method)
		if err := h.inst.Peer().Reply(ctx, req.ID, nil, errNotificationAsRequest(req.Method)); err != nil {
			h.r.log.Debug("cannot answer the agent", "agent", h.inst.Agent.Name(), "method", req.Method, "error", err)
		}
		return
	}
	if req.Notif && known && rt.requestOnly() && req.Method != acp.MethodMcpMessage {
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
	case known && rt.agent != nil:
		rt.agent(h.r, ctx, h.inst, req)
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

// interceptAgent is the agents' fast path (issue 16): the table's Fast
// methods are taken in the agent's read path. session/update goes
// straight to the editor's write queue, as the agent's own bytes unless an
// id must be translated (interceptUpdate); the callbacks of a turn are
// handled as Handle would handle them (agentCallback).
func (r *Router) interceptAgent(inst *upstream.Instance, m *acp.Message) bool {
	rt := agentRoutes[m.Method]
	if rt == nil || !rt.Fast {
		return false
	}
	switch m.Kind {
	case acp.KindRequest:
		if !rt.Request {
			return false
		}
	case acp.KindNotification:
		if !rt.Notification {
			return false
		}
	default:
		return false
	}
	return rt.fast(r, inst, m)
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
	if rt := agentRoutes[m.Method]; rt.agent != nil {
		rt.agent(r, context.Background(), inst, req)
	} else {
		r.agentRequest(context.Background(), inst, req)
	}
	r.waitEditor(r.editorLane(inst, req))
	return true
}
