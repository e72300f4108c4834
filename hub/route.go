package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/acp-router/acp-router/acp"
)

// Methods the hub answers itself (RFD #533).
const (
	MethodAttach = "session/attach"
	MethodDetach = "session/detach"
	// MethodSessions is the hub's own extension (the page of issue 31):
	// the live sessions a client may see, each with its state, which ACP
	// does not carry.
	MethodSessions = "_acp-router/sessions"
)

// Error codes of RFD #533's attach errors; the hub also answers the other
// refusals of a client's role or visibility with codeNotAuthorised.
const (
	codeNotFound      = -32001 // session not found or already terminated
	codeNotAuthorised = -32002 // not authorised (role, visibility)
)

// member phases: how the Router's lines for a session reach one member.
const (
	phaseLive      = iota // sent
	phaseWaitMark         // attaching: the lines are in the replay, dropped
	phaseAfterMark        // attaching, after the mark: held until the replay is sent
)

// session is a session as the hub knows it: its clients, its turn and
// queue, the Router's requests waiting for an answer. Under Hub.mu.
type session struct {
	id       string
	members  []*member // in attach order: the first controller is the fallback for fs and terminal requests
	running  int       // prompts at the Router (running or queued there)
	asks     []*ask    // the Router's permission requests not answered yet
	children []string  // subagent session ids aliasing this one in Hub.sessions
	// agent is the agent the session is on now (the router's "agent"
	// option in its last configOptions), agentTitle its display name.
	agent, agentTitle string
}

// member is one client attached to one session.
type member struct {
	c     *client
	s     *session
	role  string
	phase int
	buf   []queued // phaseAfterMark's held lines (streamed text coalesced past CoalesceAfter)
	bufN  int
	mark  string
	// replayed: the attach's replay and answer are queued; the mark, when
	// it comes, makes the member live at once.
	replayed bool
}

// call is a request of a client (or of the hub: c nil) at the Router.
type call struct {
	c      *client
	id     json.RawMessage // the client's id
	method string
	sid    string
	added  *member // attached for this call (session/load, resume): undone if it fails
	// loaded: a session/load of a session live here, sent to the Router
	// as session/resume after the history was replayed to this member
	// (liveLoadLocked).
	loaded *member
}

// ask is one request of the Router (an agent's question) to clients.
type ask struct {
	rid        json.RawMessage // the Router's id
	sid        string
	method     string
	params     json.RawMessage
	permission bool
	answerers  []string           // _meta["acp-router/answerers"]; nil: any controller
	targets    map[*client]string // the clients asked, with the id each was given
	resolved   bool
}

// fromRouter routes one line from the Router.
func (h *Hub) fromRouter(line []byte) {
	m, err := acp.Classify(line)
	if err != nil {
		h.log.Warn("unreadable message from the router dropped", "error", err)
		return
	}
	switch m.Kind {
	case acp.KindResponse:
		h.routerAnswer(m)
	case acp.KindRequest:
		h.routerAsk(m)
	case acp.KindNotification:
		h.routerNotify(m)
	}
}

// sessionIDOf reads params.sessionId ("" when absent or not a string).
func sessionIDOf(params json.RawMessage) string {
	return stringMember(params, "sessionId")
}

func stringMember(obj json.RawMessage, name string) string {
	if len(obj) == 0 || obj[0] != '{' {
		return ""
	}
	var out [1]json.RawMessage
	if acp.Members(obj, []string{name}, out[:]) != nil || out[0] == nil {
		return ""
	}
	var s string
	if json.Unmarshal(out[0], &s) != nil {
		return ""
	}
	return s
}

// routerNotify sends a notification to the clients of its session, or to
// every client when it names none.
func (h *Hub) routerNotify(m *acp.Message) {
	switch m.Method {
	case MarkMethod:
		h.seeMark(stringMember(m.Params, "mark"))
		return
	case "$/cancel_request":
		h.cancelAsk(m)
		return
	}
	sid := sessionIDOf(m.Params)
	h.mu.Lock()
	if sid == "" {
		cs := make([]*client, 0, len(h.clients))
		for c := range h.clients {
			cs = append(cs, c)
		}
		h.mu.Unlock()
		for _, c := range cs {
			c.enqueue(m.Raw)
		}
		return
	}
	s := h.sessions[sid]
	if s == nil {
		h.mu.Unlock()
		h.log.Debug("notification for a session no client holds dropped", "session", sid, "method", m.Method)
		return
	}
	var ch *chunk
	if m.Method == acp.MethodSessionUpdate {
		kind, ok := acp.UpdateKindOfValid(m.Raw)
		if ok && string(kind) == "subagent_update" {
			if child := stringMember(updateOf(m.Params), "sessionId"); child != "" && h.sessions[child] == nil {
				h.sessions[child] = s
				s.children = append(s.children, child)
			}
		}
		if (!ok || string(kind) == "agent_message_chunk" || string(kind) == "agent_thought_chunk") && s.remoteMembers() {
			ch = chunkOf(m.Raw)
		}
		if !ok || string(kind) == "config_option_update" {
			var out [1]json.RawMessage
			if acp.Members(updateOf(m.Params), []string{"configOptions"}, out[:]) == nil && out[0] != nil {
				h.seeAgentLocked(s.id, out[0])
				h.changedLocked()
			}
		}
	}
	h.deliverLocked(s, m.Raw, ch)
	h.mu.Unlock()
}

// configOptionsOf reads a result's configOptions (nil when absent).
func configOptionsOf(result json.RawMessage) json.RawMessage {
	var out [1]json.RawMessage
	if acp.Members(result, []string{"configOptions"}, out[:]) != nil {
		return nil
	}
	return out[0]
}

func updateOf(params json.RawMessage) json.RawMessage {
	var out [1]json.RawMessage
	if acp.Members(params, []string{"update"}, out[:]) != nil {
		return nil
	}
	return out[0]
}

// remoteMembers says whether a client other than the stdio editor is
// attached (only their queues coalesce chunks).
func (s *session) remoteMembers() bool {
	for _, mb := range s.members {
		if !mb.c.id.Editor {
			return true
		}
	}
	return false
}

// deliverLocked sends a line of session s to its members, as each
// member's phase says; ch is its streamed text, if it is some.
func (h *Hub) deliverLocked(s *session, line []byte, ch *chunk) {
	for _, mb := range s.members {
		switch mb.phase {
		case phaseLive:
			mb.c.enqueueChunk(line, ch)
		case phaseAfterMark:
			if n := len(mb.buf); ch != nil && !mb.c.id.Editor && n >= h.opts.CoalesceAfter && mb.buf[n-1].join(ch) {
				mb.bufN += len(ch.body)
				break
			}
			mb.buf = append(mb.buf, queued{line: line, ch: ch, size: len(line)})
			mb.bufN += len(line)
			if !mb.c.id.Editor && (mb.bufN > h.opts.QueueBytes || len(mb.buf) > h.opts.QueueMessages) {
				mb.buf, mb.bufN = nil, 0
				go h.drop(mb.c, ErrSlowClient)
			}
		}
	}
}

// routerAnswer gives the Router's answer to the client that asked.
func (h *Hub) routerAnswer(m *acp.Message) {
	h.mu.Lock()
	cl := h.calls[string(m.ID)]
	delete(h.calls, string(m.ID))
	if cl == nil {
		h.mu.Unlock()
		h.log.Debug("answer to no request of the hub dropped", "id", string(m.ID))
		return
	}
	if cl.c == nil { // the hub's own initialize
		h.initAnswerLocked(m)
		return
	}
	ok := m.Error == nil || string(m.Error) == "null"
	result := m.Result
	var toRouter [][]byte
	switch cl.method {
	case acp.MethodSessionNew, acp.MethodSessionFork:
		if sid := stringMember(result, "sessionId"); ok && sid != "" {
			s := h.sessionLocked(sid)
			if !cl.c.gone {
				h.addMemberLocked(s, cl.c, RoleController)
			}
			h.owners.set(sid, cl.c.id.Name)
			h.seeAgentLocked(sid, configOptionsOf(result))
		}
	case acp.MethodSessionLoad, acp.MethodSessionResume:
		if ok {
			h.seeAgentLocked(cl.sid, configOptionsOf(result))
		}
		if cl.loaded != nil {
			if h.loadAnsweredLocked(cl, ok, result, m.Error) {
				c := cl.c
				delete(c.calls, string(cl.id))
				h.changedLocked()
				h.mu.Unlock()
				return
			}
		}
		if !ok && cl.added != nil {
			toRouter = h.detachLocked(cl.added)
		}
	case acp.MethodSessionClose, acp.MethodSessionDelete:
		if ok {
			h.forgetLocked(cl.sid)
			if cl.method == acp.MethodSessionDelete {
				h.owners.remove(cl.sid)
			}
		}
	case acp.MethodSessionList:
		if ok {
			result = h.visibleList(cl.c.id, result)
		}
	case acp.MethodSessionPrompt:
		if s := h.sessions[cl.sid]; s != nil && s.running > 0 {
			s.running--
		}
	case acp.MethodSetConfigOption:
		if ok {
			h.seeAgentLocked(cl.sid, configOptionsOf(result))
		}
	}
	delete(cl.c.calls, string(cl.id))
	c := cl.c
	h.changedLocked()
	h.mu.Unlock()
	for _, l := range toRouter {
		h.toRouter(l)
	}
	if ok {
		c.enqueue(acp.AppendResponse(nil, cl.id, result))
	} else {
		c.enqueue(errorResponse(cl.id, m.Error))
	}
	h.saveOwners()
}

func errorResponse(id, e json.RawMessage) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	b = append(b, `,"error":`...)
	b = append(b, e...)
	return append(b, '}')
}

// errorLine is an error response to id.
func errorLine(id json.RawMessage, code int, msg string, data any) []byte {
	e := map[string]any{"code": code, "message": msg}
	if data != nil {
		e["data"] = data
	}
	b, _ := json.Marshal(e)
	return errorResponse(id, b)
}

// sessionLocked returns the hub's session id, new if need be.
func (h *Hub) sessionLocked(id string) *session {
	s := h.sessions[id]
	if s == nil {
		s = &session{id: id}
		h.sessions[id] = s
	}
	return s
}

// forgetLocked drops a session a client closed or deleted: it is no longer
// live (attach answers not found; session/load brings it back).
func (h *Hub) forgetLocked(sid string) {
	s := h.sessions[sid]
	if s == nil || s.id != sid {
		return
	}
	for _, mb := range s.members {
		delete(mb.c.sessions, sid)
		if mb.mark != "" {
			delete(h.marks, mb.mark)
		}
	}
	for _, child := range s.children {
		delete(h.sessions, child)
	}
	delete(h.sessions, sid)
}

// addMemberLocked attaches c to s live, as role (a client already attached
// keeps its membership).
func (h *Hub) addMemberLocked(s *session, c *client, role string) *member {
	if mb := c.sessions[s.id]; mb != nil {
		return mb
	}
	mb := &member{c: c, s: s, role: role}
	s.members = append(s.members, mb)
	c.sessions[s.id] = mb
	return mb
}

// detachLocked removes a member; what then has to go to the Router (the
// cancel of a turn nobody watches, by config) is returned.
func (h *Hub) detachLocked(mb *member) [][]byte {
	s := mb.s
	s.members = slices.DeleteFunc(s.members, func(x *member) bool { return x == mb })
	delete(mb.c.sessions, s.id)
	if mb.mark != "" {
		delete(h.marks, mb.mark)
	}
	mb.buf = nil
	// Its questions of this session: a permission request stays with the
	// other controllers asked, or pending for the next that attaches;
	// anything else was asked of it alone and fails.
	var toRouter [][]byte
	for id, a := range mb.c.asks {
		if a.sid != s.id && h.sessions[a.sid] != s {
			continue
		}
		delete(mb.c.asks, id)
		delete(a.targets, mb.c)
		if !a.permission && !a.resolved && len(a.targets) == 0 {
			a.resolved = true
			delete(h.asks, string(a.rid))
			toRouter = append(toRouter, errorLine(a.rid, acp.CodeInternalError, "acp-router: the client that was asked left the session", map[string]string{"sessionId": a.sid}))
		}
	}
	if len(s.members) == 0 && s.running > 0 && h.opts.CancelOnLastDetach {
		h.log.Info("last client of the session gone: its turn is cancelled", "session", s.id)
		toRouter = append(toRouter, notification(acp.MethodSessionCancel, map[string]string{"sessionId": s.id}))
	}
	return toRouter
}

func notification(method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return b
}

// remove takes a client that is gone out of everything.
func (h *Hub) remove(c *client) {
	h.mu.Lock()
	if c.gone {
		h.mu.Unlock()
		return
	}
	c.gone = true
	delete(h.clients, c)
	if len(h.clients) == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
	var toRouter [][]byte
	for _, mb := range c.sessions {
		toRouter = append(toRouter, h.detachLocked(mb)...)
	}
	// Its other questions (no session, or one it was not attached to
	// any more) fail: nobody else was asked.
	for id, a := range c.asks {
		delete(c.asks, id)
		delete(a.targets, c)
		if !a.resolved && len(a.targets) == 0 && !a.permission {
			a.resolved = true
			delete(h.asks, string(a.rid))
			toRouter = append(toRouter, errorLine(a.rid, acp.CodeInternalError, "acp-router: the client that was asked is gone", nil))
		}
	}
	h.changedLocked()
	h.mu.Unlock()
	for _, l := range toRouter {
		h.toRouter(l)
	}
}

// fromClient routes one message a client sent.
func (h *Hub) fromClient(c *client, msg []byte) {
	m, err := acp.Classify(msg)
	if err != nil {
		if m != nil && m.HasID() {
			code := acp.CodeInvalidRequest
			if err == acp.ErrParse {
				code = acp.CodeParseError
			}
			c.enqueue(errorLine(m.ID, code, err.Error(), nil))
		}
		return
	}
	if bytes.Contains(msg, []byte(metaPrefix)) {
		// A client never speaks for the router: whatever acp-router/*
		// _meta it sends is dropped (answerers, answeredBy).
		if stripped, changed := stripRouterMeta(msg); changed {
			if m, err = acp.Classify(stripped); err != nil {
				return
			}
		}
	}
	switch m.Kind {
	case acp.KindResponse:
		h.clientAnswer(c, m)
	case acp.KindRequest, acp.KindNotification:
		h.clientCall(c, m)
	}
}

// refuse answers a client's request with an error (a notification gets
// nothing).
func refuse(c *client, m *acp.Message, code int, msg string, data any) {
	if m.Kind == acp.KindRequest {
		c.enqueue(errorLine(m.ID, code, msg, data))
	}
}

// visible reports whether id may see session sid. Under Hub.mu.
func (h *Hub) visible(id Identity, sid string) bool {
	return id.AllSessions || h.owners.get(sid) == id.Name
}

// clientCall routes a client's request or notification.
func (h *Hub) clientCall(c *client, m *acp.Message) {
	switch m.Method {
	case acp.MethodInitialize:
		h.initialize(c, m)
		return
	case MethodAttach:
		h.attach(c, m)
		return
	case MethodDetach:
		h.detach(c, m)
		return
	case MethodSessions:
		h.liveSessions(c, m)
		return
	case MethodWatch:
		h.watch(c, m)
		return
	}
	sid := sessionIDOf(m.Params)
	h.mu.Lock()
	cl := &call{c: c, id: m.ID, method: m.Method, sid: sid}
	switch m.Method {
	case acp.MethodSessionNew, acp.MethodSessionFork, acp.MethodSessionLoad, acp.MethodSessionResume:
		if c.id.Role == RoleObserver {
			h.mu.Unlock()
			refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: an observer cannot %s (session/attach as observer instead)", m.Method), nil)
			return
		}
		if m.Method != acp.MethodSessionNew && !h.visible(c.id, sid) {
			h.mu.Unlock()
			refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: not authorised for session %q", sid), map[string]string{"sessionId": sid})
			return
		}
		if s := h.sessions[sid]; m.Method == acp.MethodSessionLoad && s != nil && s.id == sid && h.opts.History != nil {
			// Live here: the Router would replay the history to every
			// client of the session; this client alone gets it, as an
			// attach does, and the Router a session/resume (no replay).
			h.liveLoadLocked(c, s, cl, m)
			return
		}
		if m.Method == acp.MethodSessionLoad || m.Method == acp.MethodSessionResume {
			// Attached before the Router answers: its replay comes
			// first.
			if c.sessions[sid] == nil {
				cl.added = h.addMemberLocked(h.sessionLocked(sid), c, RoleController)
			}
		}
	case acp.MethodSessionList:
	case acp.MethodSessionDelete:
		if c.id.Role == RoleObserver || !h.visible(c.id, sid) {
			h.mu.Unlock()
			refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: not authorised to delete session %q", sid), map[string]string{"sessionId": sid})
			return
		}
	default:
		if sid == "" {
			break
		}
		mb := c.sessions[sid]
		if mb == nil || h.sessions[sid] == nil {
			h.mu.Unlock()
			refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: %s: this client is not attached to session %q (session/attach or session/load it first)", m.Method, sid), map[string]string{"sessionId": sid})
			return
		}
		if mb.role != RoleController {
			h.mu.Unlock()
			refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: %s: an observer of session %q cannot act on it", m.Method, sid), map[string]string{"sessionId": sid})
			return
		}
		if m.Method == acp.MethodSessionPrompt {
			// The Router runs one turn at a time per session and queues
			// the others (FIFO, bounded, withdrawn by $/cancel_request):
			// prompts from several controllers never interleave. The hub
			// only counts them, for on_last_detach.
			h.sessions[sid].running++
			h.changedLocked()
		}
	}
	if m.Method == "$/cancel_request" {
		// Names one of the client's own requests: the Router knows it by
		// the hub's id.
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		json.Unmarshal(m.Params, &p)
		hid, ok := c.calls[string(p.RequestID)]
		h.mu.Unlock()
		if ok {
			h.toRouter(notification("$/cancel_request", map[string]json.RawMessage{"requestId": json.RawMessage(hid)}))
		}
		return
	}
	if cl.added != nil {
		h.changedLocked()
	}
	if m.Kind == acp.KindNotification {
		h.mu.Unlock()
		h.toRouter(m.Raw)
		return
	}
	hid := h.idLocked()
	h.calls[string(hid)] = cl
	c.calls[string(m.ID)] = string(hid)
	h.mu.Unlock()
	h.toRouter(acp.AppendRequest(nil, hid, m.Method, m.Params))
}
