package router

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/upstream"
)

// maxPending bounds one agent instance's requests waiting for the editor's
// answer (the other bounds: bounds.go).
const maxPending = 1024

// parkingLocked returns inst's parking place, made on first use. Those of
// instances whose connection is gone are dropped then, in case an update
// was parked after agentExited ran.
func (r *Router) parkingLocked(inst *upstream.Instance) *parking {
	if p := r.parked[inst]; p != nil {
		return p
	}
	for other := range r.parked {
		if pe := other.Peer(); pe != nil {
			select {
			case <-pe.Done():
				delete(r.parked, other)
			default:
			}
		}
	}
	p := &parking{ids: map[string][]*acp.Message{}, drops: newDrops(r.log, hclog.Warn, "updates for unknown sessions dropped",
		"agent", inst.Agent.Name(), "maxIDs", maxUnboundIDs, "maxPerID", maxUnbound, "maxBytes", maxUnboundBytes)}
	r.parked[inst] = p
	return p
}

// agentRequest forwards an agent's request to the editor with its session
// id translated, unless the editor lacks the capability it needs, it names
// a terminal the agent did not create, or it breaks ACP's rules on paths.
// The requests the permission policy decides go through it first
// (enforce.go). The answer is relayed back with the agent's id.
func (r *Router) agentRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	ctx, reply := r.traceAgentCall(ctx, inst, req, r.agentReply(inst, req))
	p := params(req)
	if err := r.checkAgentCall(inst, req.Method, p); err != nil {
		reply(nil, err)
		return
	}
	if req.Method == acp.MethodMcpMessage {
		r.agentMcpMessage(ctx, inst, req, reply)
		return
	}
	if r.opts.Guard.Decides(req.Method) {
		r.enforce(ctx, inst, req, p, reply)
		return
	}
	if s := r.agentSession(inst, p); s != nil && s.order().busy() {
		s.order().do(r, len(p), func() { r.relayRequest(ctx, inst, req, p, reply, nil) })
		return
	}
	r.relayRequest(ctx, inst, req, p, reply, nil)
}

// agentReply returns the function answering an agent's request req.
func (r *Router) agentReply(inst *upstream.Instance, req *jsonrpc2.Request) func(json.RawMessage, error) {
	return func(res json.RawMessage, err error) {
		if err == nil && len(res) > 0 && bytes.IndexByte(res, '\n') < 0 {
			// The editor's raw result, or one of the router's, one line.
			err = inst.Peer().ReplyRaw(acp.RawID(req.ID), res)
		} else {
			err = inst.Peer().Reply(context.Background(), req.ID, res, err)
		}
		if err != nil {
			r.log.Debug("cannot answer the agent", "agent", inst.Agent.Name(), "method", req.Method, "error", err)
		}
	}
}

// agentSession is the router session of an agent's message by its
// params.sessionId, nil if none.
func (r *Router) agentSession(inst *upstream.Instance, p json.RawMessage) *Session {
	return r.sessionOfAgent(inst, acp.SessionID(p))
}

// sessionOfAgent is the router session of agent session id of inst's, nil
// if none.
func (r *Router) sessionOfAgent(inst *upstream.Instance, id string) *Session {
	if id == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.downLocked(inst, id)
}

// relayRequest sends an agent's request to the editor and answers the agent
// with the editor's answer, passed through answer when it is not nil.
// session/request_permission has a path of its own (relayPermission).
func (r *Router) relayRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage,
	reply func(json.RawMessage, error), answer func(json.RawMessage, error) (json.RawMessage, error)) {
	sid, p, err := r.toEditorSession(inst, req.Method, p)
	if err != nil {
		reply(nil, err)
		return
	}
	if req.Method == acp.MethodTerminalCreate {
		if p, err = confineTerminal(inst, p); err != nil {
			reply(nil, err)
			return
		}
	}
	if req.Method == acp.MethodElicitationCreate {
		if p, err = r.translateElicitation(inst, p); err != nil {
			reply(nil, err)
			return
		}
	}
	if req.Method == acp.MethodTerminalCreate || req.Method == acp.MethodTerminalRelease {
		inner := reply
		reply = func(res json.RawMessage, err error) {
			if err == nil {
				r.trackTerminal(inst, req.Method, sid, p, res)
			}
			inner(res, err)
		}
	}
	r.sendToEditor(inst, acp.RawID(req.ID), req.Method, sid, p, nil, reply, answer)
}

// sendToEditor sends an agent's request (agentID, method), its params p
// with reps written in them (the ids and options the editor is to see),
// for the editor (router session sid), and answers the agent with the
// editor's answer, passed through answer when it is not nil. The answer is
// relayed from the editor's read path, no goroutine waits for it; answer,
// which may write the audit log, runs on a goroutine of its own.
func (r *Router) sendToEditor(inst *upstream.Instance, agentID json.RawMessage, method, sid string, p json.RawMessage, reps []acp.Replacement,
	reply func(json.RawMessage, error), answer func(json.RawMessage, error) (json.RawMessage, error)) {
	err := r.callEditorRaw(inst, agentID, sid, method, p, reps, func(res json.RawMessage, err error) {
		if answer == nil {
			reply(res, err)
			return
		}
		r.spawn(func() { reply(answer(res, err)) })
	})
	if err != nil {
		reply(nil, err)
	}
}

// callEditor sends a request on behalf of agent instance inst (its request
// agentID, in router session sid) to the editor, counted against the
// agent's bound on pending requests and registered for withdrawal. done
// must be called once the answer arrived.
func (r *Router) callEditor(ctx context.Context, inst *upstream.Instance, agentID json.RawMessage, sid, method string, p json.RawMessage) (*acp.Call, func(), error) {
	r.mu.Lock()
	full := r.pending[inst] >= maxPending
	if !full {
		r.pending[inst]++
	}
	r.mu.Unlock()
	if full {
		return nil, nil, errTooManyPending(inst.Agent.Name())
	}
	c, err := r.editor.Call(ctx, method, paramsAny(p), agentID, nil)
	if err != nil {
		r.mu.Lock()
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
		return nil, nil, errEditorClosed
	}
	o := &outgoing{inst: inst, agentID: agentID, editorID: c.ID, session: sid}
	r.mu.Lock()
	r.toEditor[acp.IDKey(c.ID)] = o
	r.mu.Unlock()
	done := func() {
		r.mu.Lock()
		delete(r.toEditor, acp.IDKey(c.ID))
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
	}
	return c, done, nil
}

// callEditorRaw is callEditor on the fast path: p (valid JSON, or nil)
// is sent as it is but for reps (acp.Peer.Send), and end gets the
// editor's answer in the editor's read path, or errEditorClosed when the
// connection closes first. end is not called when it returns an error.
func (r *Router) callEditorRaw(inst *upstream.Instance, agentID json.RawMessage, sid, method string, p json.RawMessage, reps []acp.Replacement, end func(json.RawMessage, error)) error {
	r.mu.Lock()
	full := r.pending[inst] >= maxPending
	if !full {
		r.pending[inst]++
	}
	r.mu.Unlock()
	if full {
		return errTooManyPending(inst.Agent.Name())
	}
	r.watchCalls.Do(func() { r.spawn(r.watchEditorCalls) })
	o := &outgoing{inst: inst, agentID: agentID, session: sid, end: end}
	sent, err := r.sendEditor(acp.Outgoing{Method: method, Params: p, Replace: reps, Prefer: agentID, OnResponse: func(m *acp.Message) {
		var res json.RawMessage
		var err error
		if m.Error != nil {
			rpcErr := new(jsonrpc2.Error)
			if json.Unmarshal(m.Error, rpcErr) != nil {
				rpcErr = fail(errInternal, "acp-router: the editor answered with a malformed error", nil)
			}
			err = rpcErr
		} else {
			res = m.Result
		}
		r.endOutgoing(o, res, err)
	}})
	if sent.Unreplaced != nil {
		r.log.Debug("an agent's request whose ids or options cannot all be rewritten relayed with the others", "agent", inst.Agent.Name(), "method", method, "error", sent.Unreplaced)
	}
	id, key := sent.ID, sent.Key
	r.mu.Lock()
	if err != nil {
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
		return errEditorClosed
	}
	if !o.ended { // else answered already
		o.editorID, o.key = id, key
		r.toEditor[o.key] = o
	}
	r.mu.Unlock()
	select {
	case <-r.editor.Done(): // closed before o was there to be failed
		r.endOutgoing(o, nil, errEditorClosed)
	default:
	}
	return nil
}

// endOutgoing relays the answer of a fast-path request to the editor, once.
func (r *Router) endOutgoing(o *outgoing, res json.RawMessage, err error) {
	r.mu.Lock()
	if o.ended {
		r.mu.Unlock()
		return
	}
	o.ended = true
	if o.editorID != nil && r.toEditor[o.key] == o {
		delete(r.toEditor, o.key)
	}
	if r.pending[o.inst]--; r.pending[o.inst] == 0 {
		delete(r.pending, o.inst)
	}
	r.mu.Unlock()
	o.end(res, err)
}

// watchEditorCalls fails the fast-path requests still waiting for the
// editor when its connection closes (callEditor's waiters get
// jsonrpc2.ErrClosed from the Conn).
func (r *Router) watchEditorCalls() {
	<-r.editor.Done()
	r.mu.Lock()
	var ends []*outgoing
	for _, o := range r.toEditor {
		if o.end != nil && !o.ended {
			ends = append(ends, o)
		}
	}
	r.mu.Unlock()
	for _, o := range ends {
		r.endOutgoing(o, nil, errEditorClosed)
	}
}

// exactString reads the string member name of params (a validated line's)
// by its exact name, as the editor reads it: encoding/json would match
// "PATH" or "Cwd" too, the last of them winning, so that {"cwd": "sub",
// "Cwd": "/abs"} would pass for absolute while the editor runs in sub.
// ok is false when it is absent, null or not a string.
func exactString(params json.RawMessage, name string) (string, bool) {
	var v [1]json.RawMessage
	var s string
	if acp.MembersOfValid(params, []string{name}, v[:]) != nil || len(v[0]) == 0 || v[0][0] != '"' || rawString(v[0], &s) != nil {
		return "", false
	}
	return s, true
}

// checkAgentCall refuses what the editor did not advertise (the router
// answers; the editor never sees it), terminals the agent does not own, and
// relative paths.
func (r *Router) checkAgentCall(inst *upstream.Instance, method string, p json.RawMessage) error {
	caps := r.caps()
	missing := func(cap string) error {
		return fail(errNoMethod, fmt.Sprintf("acp-router: the editor does not support %s (clientCapabilities.%s)", method, cap), map[string]string{"method": method})
	}
	switch method {
	case acp.MethodReadTextFile, acp.MethodWriteTextFile:
		if method == acp.MethodReadTextFile && !caps.FS.ReadTextFile {
			return missing("fs.readTextFile")
		}
		if method == acp.MethodWriteTextFile && !caps.FS.WriteTextFile {
			return missing("fs.writeTextFile")
		}
		path, ok := exactString(p, "path")
		if !ok || !filepath.IsAbs(path) {
			return fail(errParams, fmt.Sprintf("acp-router: %s needs an absolute path, got %q", method, path), nil)
		}
	case acp.MethodTerminalCreate:
		if !caps.Terminal {
			return missing("terminal")
		}
		if cwd, ok := exactString(p, "cwd"); ok && cwd != "" && !filepath.IsAbs(cwd) {
			return fail(errParams, fmt.Sprintf("acp-router: %s needs an absolute cwd, got %q", method, cwd), nil)
		}
		r.mu.Lock()
		open := 0
		for _, t := range r.terminals {
			if t.agent == tableKey(inst) {
				open++
			}
		}
		r.mu.Unlock()
		if open >= maxTerminals {
			return fail(errInternal, fmt.Sprintf("acp-router: agent %q has %d terminals open already; release some first", inst.Agent.Name(), open), nil)
		}
	case acp.MethodTerminalOutput, acp.MethodTerminalWaitForExit, acp.MethodTerminalKill, acp.MethodTerminalRelease:
		if !caps.Terminal {
			return missing("terminal")
		}
		if err := ambiguousParams(method, p); err != nil {
			return err
		}
		id, _ := exactString(p, "terminalId")
		r.mu.Lock()
		t, ok := r.terminals[id]
		r.mu.Unlock()
		if !ok || t.agent != tableKey(inst) {
			return fail(errParams, fmt.Sprintf("acp-router: unknown terminal %q", id), nil)
		}
	case acp.MethodElicitationCreate:
		if caps.Elicitation == nil {
			return missing("elicitation")
		}
		if err := ambiguousParams(method, p); err != nil {
			return err
		}
		var ep struct {
			Mode string `json:"mode"`
		}
		if err := decodeParams(p, &ep); err != nil {
			return errMalformed(method, err)
		}
		if (ep.Mode == "url" && !acp.Supported(caps.Elicitation.URL)) || (ep.Mode != "url" && !acp.Supported(caps.Elicitation.Form)) {
			return fail(errParams, fmt.Sprintf("acp-router: the editor does not support %q elicitation", ep.Mode), nil)
		}
	}
	return nil
}

// ambiguousParams refuses the params of a request the router reads ids
// from (the session, the terminal, the elicitation's request) but the
// policy does not decide, when encoding/json and the editor could read
// them differently: two members that name one field ("terminalId" twice,
// or "terminalId" and "TerminalId": a JavaScript editor takes the last,
// serde refuses, encoding/json takes the last of any case), so that the
// terminal whose owner the router checked, or the session it translated,
// would not be the one the editor uses.
func ambiguousParams(method string, p json.RawMessage) error {
	if a, b, ok := acp.AmbiguousMember(p); ok {
		return fail(errParams, fmt.Sprintf("acp-router: %s params with members %q and %q, which name one field to some readers", method, a, b), nil)
	}
	return nil
}

// toEditorSession translates params.sessionId from the agent's id to the
// router's. A standard session-scoped call for a session the router does
// not know is refused; extension calls pass unchanged.
func (r *Router) toEditorSession(inst *upstream.Instance, method string, p json.RawMessage) (string, json.RawMessage, error) {
	// By its exact name, as the editor reads it (and rewriteSessionID
	// writes it).
	ref := acp.SessionRef{SessionID: acp.SessionID(p)}
	if ref.SessionID == "" {
		return "", p, nil
	}
	r.mu.Lock()
	s := r.downLocked(inst, ref.SessionID)
	r.mu.Unlock()
	if s == nil {
		if acp.IsExtension(method) {
			return "", p, nil
		}
		return "", nil, errUnknownSession(ref.SessionID)
	}
	// A tool call id in the request is translated like the updates'.
	var tc toolCallRef
	if err := json.Unmarshal(p, &tc); err != nil {
		// Relayed as it is: what the editor makes of it is its answer.
		r.log.Debug("an agent's request whose params do not decode: no tool call id translated", "agent", inst.Agent.Name(), "method", method, "error", err)
	}
	return r.toEditorSessionOf(inst, s, method, ref.SessionID, p, tc)
}

// toolCallRef is the tool call an agent's request names: a permission
// request's, or (elicitation scope) the one it is about.
type toolCallRef struct {
	ToolCall struct {
		ToolCallID string `json:"toolCallId"`
	} `json:"toolCall"`
	ToolCallID string `json:"toolCallId"`
}

// toEditorSessionOf translates the ids of an agent's request of router
// session s, read already: its session id (agentSID) and tool call. A
// permission request shows (creates) its tool call in the editor, so later
// updates for it may be forwarded.
func (r *Router) toEditorSessionOf(inst *upstream.Instance, s *Session, method, agentSID string, p json.RawMessage, tc toolCallRef) (string, json.RawMessage, error) {
	p = rewriteSessionID(p, agentSID, s.ID)
	agent := inst.Agent.Name()
	var edit *idEdit
	retired := 0
	s.mu.Lock()
	s.lastUse = time.Now()
	switch {
	case method == acp.MethodRequestPermission && tc.ToolCall.ToolCallID != "":
		if id := s.toolIDs.Out(agent, tc.ToolCall.ToolCallID); id != tc.ToolCall.ToolCallID {
			edit = &idEdit{[]string{"toolCall", "toolCallId"}, id}
		}
		retired = s.toolIDs.Trim(maxToolIDs)
	case tc.ToolCallID != "":
		if id, ok := s.toolIDs.Lookup(agent, tc.ToolCallID); ok && id != tc.ToolCallID {
			edit = &idEdit{[]string{"toolCallId"}, id}
		}
	}
	s.mu.Unlock()
	if retired > 0 {
		r.toolDrops.add(retired, "session", s.ID, "agent", agent)
	}
	if edit != nil {
		if out, err := acp.SetPath(p, edit.path, edit.id); err == nil {
			p = out
		} else {
			r.log.Debug("an agent's request whose tool call id cannot be rewritten relayed as it is", "agent", agent, "method", method, "error", err)
		}
	}
	return s.ID, p, nil

}

// translateElicitation maps a request-scoped elicitation onto the editor's
// id for that request, and keeps URL elicitation ids of different agents
// apart.
func (r *Router) translateElicitation(inst *upstream.Instance, p json.RawMessage) (json.RawMessage, error) {
	var ep struct {
		RequestID     json.RawMessage `json:"requestId"`
		ElicitationID *string         `json:"elicitationId"`
	}
	if err := decodeParams(p, &ep); err != nil {
		return nil, errMalformed(acp.MethodElicitationCreate, err)
	}
	var err error
	if ep.RequestID != nil {
		editorID := r.editorRequestFor(inst, ep.RequestID)
		if editorID == nil {
			return nil, fail(errParams, "acp-router: elicitation for an unknown request", nil)
		}
		if p, err = acp.SetField(p, "requestId", editorID); err != nil {
			return nil, err
		}
	}
	if ep.ElicitationID != nil {
		r.mu.Lock()
		id := r.elicits.Out(inst.Agent.Name(), *ep.ElicitationID)
		r.elicits.Trim(maxElicits) // never completed: the editor gave up on them long ago
		r.mu.Unlock()
		if id != *ep.ElicitationID {
			if p, err = acp.SetField(p, "elicitationId", id); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// editorRequestFor finds the editor's id of a request the router forwarded
// to inst as agentID.
func (r *Router) editorRequestFor(inst *upstream.Instance, agentID json.RawMessage) json.RawMessage {
	want := acp.IDKey(agentID)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.forwards {
		if f.inst == inst && acp.IDKey(f.agentID) == want {
			return f.editorID
		}
	}
	return nil
}

// trackTerminal records which agent created a terminal, so that only it
// may use it and it is released when that agent goes away.
func (r *Router) trackTerminal(inst *upstream.Instance, method, sid string, p, res json.RawMessage) {
	var t struct {
		TerminalID string `json:"terminalId"`
	}
	switch method {
	case acp.MethodTerminalCreate:
		if json.Unmarshal(res, &t) == nil && t.TerminalID != "" {
			r.mu.Lock()
			r.terminals[t.TerminalID] = terminal{agent: tableKey(inst), session: sid}
			r.mu.Unlock()
		}
	case acp.MethodTerminalRelease:
		if id, ok := exactString(p, "terminalId"); ok {
			r.mu.Lock()
			delete(r.terminals, id)
			r.mu.Unlock()
		}
	}
}

// agentNotification forwards an agent's notification (other than
// session/update, which the relay handles) with ids translated.
func (r *Router) agentNotification(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	p := params(req)
	if req.Method == acp.MethodElicitationComplete {
		caps := r.caps()
		if caps.Elicitation == nil || !acp.Supported(caps.Elicitation.URL) {
			return
		}
		var ep struct {
			ElicitationID string `json:"elicitationId"`
		}
		if err := decodeParams(p, &ep); err != nil {
			r.dropMalformed(inst.Agent.Name(), req.Method, err)
			return
		}
		r.mu.Lock()
		id, ok := r.elicits.Lookup(inst.Agent.Name(), ep.ElicitationID)
		if ok {
			r.elicits.Remove(id)
		}
		r.mu.Unlock()
		if !ok {
			return
		}
		var err error
		if p, err = acp.SetField(p, "elicitationId", id); err != nil {
			r.dropMalformed(inst.Agent.Name(), req.Method, err)
			return
		}
	} else {
		sid, translated, err := r.toEditorSession(inst, req.Method, p)
		if err != nil {
			r.log.Debug("notification for an unknown session dropped", "agent", inst.Agent.Name(), "method", req.Method)
			return
		}
		p = translated
		if sid == "" {
			// It names no session of the router's (Claude's
			// _auth/status_update, auth/status_update, an
			// extension's): on the editor's one connection it would
			// pass for the router's, or any agent's. It says whose it
			// is (issue 13, part 4).
			if p, err = attribute(p, inst.Agent.Name()); err != nil {
				r.log.Warn("notification dropped: its params cannot say which agent sent it", "agent", inst.Agent.Name(), "method", req.Method, "error", err)
				return
			}
		}
	}
	switch {
	case isStatusUpdate(req.Method):
		r.statusUps.add(inst.Agent.Name(), req.Method, p)
		return
	case req.Method == acp.MethodMcpMessage:
		if serverID, _ := mcpParams(p); r.mcpSession(inst, serverID) == nil {
			r.log.Warn("mcp/message for an ACP MCP server none of the agent's sessions declared dropped", "agent", inst.Agent.Name(), "server", serverID)
			return
		} else if r.opts.Guard.DecidesMcp(p) {
			// A method that acts (tools/call, resources/read, any but
			// those that only list or follow up) sent as a notification:
			// nothing to answer with a refusal or to wait on a question
			// for, and the policy decides what acts (agentMcpMessage).
			r.log.Warn("mcp/message notification the policy would have to decide dropped", "agent", inst.Agent.Name(), "server", serverID)
			return
		}
	}
	if err := r.editor.Notify(ctx, req.Method, paramsAny(p)); err != nil {
		r.log.Debug("cannot forward notification", "method", req.Method, "error", err)
	}
}

// metaKey is the router's key in the _meta of what it forwards:
// {"acp-router": {"agent": NAME}} names the agent a notification that
// belongs to no session came from.
const metaKey = "acp-router"

// attribute returns notification params p with _meta[metaKey].agent set to
// agent, replacing whatever the agent put there (an agent cannot pass for
// another). Params that are not an object (or absent) cannot carry it.
func attribute(p json.RawMessage, agent string) (json.RawMessage, error) {
	tag := map[string]map[string]string{metaKey: {"agent": agent}}
	if len(p) == 0 || string(p) == "null" {
		return mustJSON(map[string]any{"_meta": tag}), nil
	}
	var top [1]json.RawMessage
	if err := acp.Members(p, []string{"_meta"}, top[:]); err != nil {
		return nil, err
	}
	meta := json.RawMessage(mustJSON(tag))
	if top[0] != nil && string(top[0]) != "null" {
		if m, err := acp.SetField(top[0], metaKey, tag[metaKey]); err == nil {
			meta = m
		}
	}
	return acp.SetField(p, "_meta", meta)
}

// agentCancelRequest forwards an agent's $/cancel_request for one of its
// requests the editor still has.
func (r *Router) agentCancelRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	var cp struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if err := decodeParams(params(req), &cp); err != nil || cp.RequestID == nil {
		r.dropMalformed(inst.Agent.Name(), req.Method, cmp.Or(err, errNoRequestID))
		return
	}
	want := acp.IDKey(cp.RequestID)
	r.withdraw(func(o *outgoing) bool { return o.inst == inst && acp.IDKey(o.agentID) == want })
}

// withdraw sends the editor $/cancel_request for the router's pending
// requests that match; the editor's answers are relayed as usual.
func (r *Router) withdraw(match func(*outgoing) bool) {
	r.mu.Lock()
	var ids []json.RawMessage
	for _, o := range r.toEditor {
		if match(o) {
			ids = append(ids, o.editorID)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		msg, _ := json.Marshal(map[string]json.RawMessage{"requestId": id})
		if err := r.editor.Notify(context.Background(), acp.MethodCancelRequest, json.RawMessage(msg)); err != nil {
			r.log.Debug("cannot withdraw request", "error", err)
		}
	}
}

// agentExited cleans up after an agent instance: its requests to the
// editor are withdrawn and its terminals killed and released (DESIGN §7).
func (r *Router) agentExited(inst *upstream.Instance, err error) {
	r.spawn(func() {
		r.withdraw(func(o *outgoing) bool { return o.inst == inst })
		r.mu.Lock()
		parked := r.parked[inst]
		delete(r.parked, inst)
		r.tombs.removePrefix(tableKey(inst) + " ")
		var gone []string
		sessions := map[string]string{}
		owner := tableKey(inst)
		for id, t := range r.terminals {
			if t.agent == owner {
				gone = append(gone, id)
				sessions[id] = t.session
				delete(r.terminals, id)
			}
		}
		r.mu.Unlock()
		if parked != nil {
			parked.drops.add(parked.count(), "reason", "the agent exited")
			parked.drops.flush()
		}
		if r.editor == nil {
			return
		}
		for _, id := range gone {
			p, _ := json.Marshal(map[string]string{"sessionId": sessions[id], "terminalId": id})
			for _, method := range []string{acp.MethodTerminalKill, acp.MethodTerminalRelease} {
				if c, err := r.editor.Call(context.Background(), method, json.RawMessage(p), nil, nil); err == nil {
					c.Wait(context.Background())
				}
			}
		}
	})
}
