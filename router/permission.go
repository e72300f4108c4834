package router

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/upstream"
)

// An agent's session/request_permission, end to end: read once
// (readPermission), decided by the permission policy on the session's
// sequencer (guard.Decide, which asks policy), and carried out
// (enforcePermission): the agent answered with its own option, or the
// editor asked with the router's labels and its answer relayed.

// permCall is an agent's permission request as the router reads it, once,
// at the start of its path: the steps after take what they need from it.
type permCall struct {
	inst   *upstream.Instance
	req    *jsonrpc2.Request
	id     json.RawMessage // req's id, as the agent wrote it
	params json.RawMessage // as the agent sent them
	// session is params.sessionId by its exact name, as toEditorSession
	// and the editor read it; toolCallID is params.toolCall.toolCallId:
	// both the agent's.
	session, toolCallID string
	// tool is the tool call as the ids' translation reads it;
	// toolPartial: some member of it did not decode (kept empty).
	tool        toolCallRef
	toolPartial bool
	// perm is what the router reads of the request, its options as
	// permOptions reads them; empty but for those when the params do not
	// decode (the policy denies it).
	perm  permRequest
	reply func(json.RawMessage, error)
	// mark: the editor is sent _meta["acp-router/answerers"] as the
	// router says (answerers.go), never as the agent wrote it: when the
	// policy decides, and when a hub reads it. answerers, when
	// restricted, are who the policy lets answer the request.
	mark       bool
	answerers  []string
	restricted bool
}

// readPermission reads an agent's permission request.
func readPermission(inst *upstream.Instance, req *jsonrpc2.Request, reply func(json.RawMessage, error)) *permCall {
	p := params(req)
	pc := &permCall{inst: inst, req: req, id: acp.RawID(req.ID), params: p, session: acp.SessionID(p), reply: reply}
	// Apart from perm: a toolCall that decodes is looked up even when
	// another member does not.
	var tc struct {
		ToolCall struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
	}
	if json.Unmarshal(p, &tc) == nil {
		pc.toolCallID = tc.ToolCall.ToolCallID
	}
	if err := json.Unmarshal(p, &pc.tool); err != nil {
		// Kept as far as it decoded, as toEditorSession reads the same
		// params: a member of another type (a numeric top-level
		// toolCallId) leaves only its own field empty, and params that do
		// not decode at all are refused below (pc.perm); logged when it
		// is relayed.
		pc.toolPartial = true
	}
	if json.Unmarshal(p, &pc.perm) != nil {
		pc.perm = permRequest{} // the policy refuses it: denied
	}
	pc.perm.Options = permOptions(p)
	return pc
}

// permissionRequest is the agents' route for session/request_permission
// (on the fast path too): the request read once, traced, and decided. The
// editor's capabilities allow it always (checkAgentCall has nothing to
// check).
func (r *Router) permissionRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	ctx, reply := r.traceAgentCall(ctx, inst, req, r.agentReply(inst, req))
	r.decidePermission(ctx, readPermission(inst, req, reply))
}

// decidePermission has the policy decide a permission request on its
// session's sequencer and carries the decision out. Without a policy it is
// relayed, in order with the session's traffic, as any call.
func (r *Router) decidePermission(ctx context.Context, pc *permCall) {
	if r.opts.Guard.Decides(acp.MethodRequestPermission) {
		s := r.decidedSession(pc.inst, acp.MethodRequestPermission, pc.session, pc.reply)
		if s == nil {
			return
		}
		r.decideOn(ctx, s, pc.inst, pc.req, pc.params, mcpTarget{}, pc.toolCallID, func(v *guard.Verdict) {
			r.enforcePermission(ctx, s, pc, v)
		})
		return
	}
	pc.mark = r.opts.ClientMeta
	relay := func() { r.relayPermission(pc, nil, nil) }
	if s := r.sessionOfAgent(pc.inst, pc.session); s != nil && s.order().busy() {
		s.order().do(r, len(pc.params), relay)
		return
	}
	relay()
}

type permOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// permRequest is what the router reads of session/request_permission.
type permRequest struct {
	ToolCall struct {
		ToolCallID string          `json:"toolCallId"`
		Title      *string         `json:"title"`
		Kind       *string         `json:"kind"`
		Content    json.RawMessage `json:"content"`
		Locations  json.RawMessage `json:"locations"`
	} `json:"toolCall"`
	Options []permOption `json:"options"`
}

func (p *permRequest) option(kinds ...string) *permOption {
	for _, k := range kinds {
		for i := range p.Options {
			if p.Options[i].Kind == k {
				return &p.Options[i]
			}
		}
	}
	return nil
}

// permOutcome is a RequestPermissionResponse's outcome.
type permOutcome struct {
	Outcome  string `json:"outcome"`
	OptionID string `json:"optionId,omitempty"`
}

func selected(optionID string) json.RawMessage {
	return mustJSON(map[string]permOutcome{"outcome": {"selected", optionID}})
}

var cancelledOutcome = mustJSON(map[string]permOutcome{"outcome": {Outcome: "cancelled"}})

// chosenKind is the kind of the option the editor's answer selected among
// options: "cancelled" when it selected none (or failed), "unknown option"
// for an id that was not offered.
func chosenKind(res json.RawMessage, err error, options []permOption) string {
	var out struct {
		Outcome permOutcome `json:"outcome"`
	}
	if err != nil || json.Unmarshal(res, &out) != nil || out.Outcome.Outcome != "selected" {
		return "cancelled"
	}
	for _, o := range options {
		if o.OptionID == out.Outcome.OptionID {
			return o.Kind
		}
	}
	return "unknown option"
}

// relayPermission relays a permission request to the editor, with the
// session and tool call ids translated and, when options is not nil, those
// options (the router's labelled ones) in the agent's stead, and answers the
// agent with the editor's answer, passed through answer when it is not nil.
// What the editor shows of the tool call stays what was decided until its
// user has answered (asking.go).
func (r *Router) relayPermission(pc *permCall, options json.RawMessage, answer func(json.RawMessage, error) (json.RawMessage, error)) {
	reply, sid := pc.reply, ""
	var reps []acp.Replacement
	if pc.toolPartial {
		r.log.Warn("an agent's permission request has a tool call member of the wrong type; its ids are translated as far as they decoded", "agent", pc.inst.Agent.Name(), "session", pc.session)
	}
	if pc.session != "" {
		r.mu.Lock()
		s := r.downLocked(pc.inst, pc.session)
		r.mu.Unlock()
		if s == nil {
			reply(nil, errUnknownSession(pc.session))
			return
		}
		var toolID string
		sid = s.ID
		reps, toolID = r.editorPermission(pc, s, options)
		if end := askingToolOf(s, toolID); end != nil {
			inner := reply
			reply = func(res json.RawMessage, err error) {
				end()
				inner(res, err)
			}
		}
	} else if options != nil {
		reps = []acp.Replacement{{Path: optionsPath, Raw: options}}
	}
	r.sendToEditor(pc.inst, pc.id, pc.req.Method, sid, pc.params, reps, reply, answer)
}

// optionsPath and toolCallIDPath are where a permission request's options
// and tool call id are in its params.
var (
	optionsPath    = []string{"options"}
	metaPath       = []string{"_meta"}
	toolCallIDPath = []string{"toolCall", "toolCallId"}
)

// editorPermission is how an agent's permission request of router session
// s is shown the editor, decided in one place: the replacements that make
// its session id and tool call id the editor's and, when not nil, its
// options options, every other byte staying the agent's (written in one
// pass as the request is sent: acp.Peer.Send); and its tool call's id as
// the editor knows it, the one the tool call's updates are relayed under
// ("" when it names none). Its tool call is shown (created) in the
// editor, so later updates for it may be forwarded.
func (r *Router) editorPermission(pc *permCall, s *Session, options json.RawMessage) (reps []acp.Replacement, toolID string) {
	agent := pc.inst.Agent.Name()
	if options != nil {
		reps = append(reps, acp.Replacement{Path: optionsPath, Raw: options})
	}
	if pc.mark {
		// Only the router says who may answer: a hub reads it.
		if meta, ok := answerersMeta(pc.params, pc.answerers, pc.restricted); ok {
			reps = append(reps, acp.Replacement{Path: metaPath, Raw: meta})
		}
	}
	if pc.session != s.ID {
		reps = append(reps, acp.Replacement{Path: sessionIDPath, Value: s.ID})
	}
	retired := 0
	s.mu.Lock()
	s.lastUse = time.Now()
	if id := pc.tool.ToolCall.ToolCallID; id != "" {
		toolID = s.toolIDs.Out(agent, id)
		if toolID != id {
			reps = append(reps, acp.Replacement{Path: toolCallIDPath, Value: toolID})
		}
		retired = s.toolIDs.Trim(maxToolIDs)
	}
	s.mu.Unlock()
	if retired > 0 {
		r.toolDrops.add(retired, "session", s.ID, "agent", agent)
	}
	return reps, toolID
}

// enforcePermission carries out a decision on session/request_permission.
func (r *Router) enforcePermission(ctx context.Context, s *Session, pc *permCall, v *guard.Verdict) {
	g := r.opts.Guard
	reply, pr := pc.reply, pc.perm
	if v.Effect == guard.Allow {
		once := pr.option(allowOnce)
		if once == nil { // only "always" offered: the user must choose
			v.Effect, v.Message = guard.Ask, "the agent offered no allow_once option"
		} else if g.Record(v, "") == nil {
			reply(selected(once.OptionID), nil)
			return
		}
	}
	if v.Effect == guard.Deny {
		g.Record(v, "")
		r.denyNotice(s, v, &pr)
		if o := pr.option(rejectOnce, rejectAlways); o != nil {
			reply(selected(o.OptionID), nil)
		} else {
			reply(cancelledOutcome, nil)
		}
		return
	}
	if why := r.unanswerable(v); why != "" {
		// No one who may answer can: refused as a deny is, and the editor
		// is shown why.
		g.RecordUnanswerable(v, why)
		r.denyNotice(s, v, &pr)
		if o := pr.option(rejectOnce, rejectAlways); o != nil {
			reply(selected(o.OptionID), nil)
		} else {
			reply(cancelledOutcome, nil)
		}
		return
	}
	pc.mark = true
	if a := v.Answerers(); a != nil {
		pc.answerers, pc.restricted = a.Names, true
	}
	// Ask: the editor's user chooses among the options as the router
	// read them (permOptions), so that the kind it records is the kind of
	// the button the user pressed and the option the agent gets, each
	// labelled with what it does (askLabels).
	r.relayPermission(pc, mustJSON(labelled(pr.Options)), func(res json.RawMessage, err error) (json.RawMessage, error) {
		choice := chosenKind(res, err, pr.Options)
		var rerr error
		if err != nil {
			rerr = g.RecordUnanswered(v)
		} else {
			rerr = g.RecordAnswer(v, choice, r.answerer(res))
		}
		if rerr != nil && v.AuditFailed() || v.AnswerRefused() {
			r.denyNotice(s, v, &pr)
			if o := pr.option(rejectOnce, rejectAlways); o != nil {
				return selected(o.OptionID), nil
			}
			return cancelledOutcome, nil
		}
		if err != nil {
			return res, err
		}
		// The agent gets an option of the kind recorded: a "once" for an
		// "always" (the router holds the grant, not the agent), and for
		// anything else the editor answered a refusal.
		switch choice {
		case allowOnce:
			return withoutAnsweredBy(res), nil
		case allowAlways:
			return selected(pr.option(allowOnce).OptionID), nil
		case rejectOnce, rejectAlways:
			return selected(pr.option(rejectOnce, rejectAlways).OptionID), nil
		}
		return cancelledOutcome, nil
	})
}

// labelled is options with the router's label for each kind: an agent's
// name need not say what its option does (an allow_once named "Reject":
// Zed labels each button with the name), and an "always" is the router's
// grant for the session, whatever scope the agent's name promises (the
// agent gets the "once" option). The ids stay the agent's.
func labelled(options []permOption) []permOption {
	out := make([]permOption, len(options))
	for i, o := range options {
		out[i] = permOption{OptionID: o.OptionID, Name: askLabel(o.Kind), Kind: o.Kind}
	}
	return out
}

// askLabel is the name of the router's option of kind (askOptions).
func askLabel(kind string) string {
	for _, o := range askOptions {
		if o.Kind == kind {
			return o.Name
		}
	}
	return kind
}

// permOptions reads a permission request's options as the router can
// honour them, and as the editor is then shown them: by their exact
// member names; only the schema's four kinds (an editor shows another as
// it likes, the router would record it as no choice while the agent takes
// it as its own); each optionId naming one option (two options with one
// id, "Always allow" and "Reject", make the user's Reject the router's
// allow_always); an allow_always only beside an allow_once (the agent is
// given the once option for it: an agent given its "always" stops asking,
// and what it then runs is never decided or audited).
func permOptions(p json.RawMessage) []permOption {
	var v [1]json.RawMessage
	if acp.MembersOfValid(p, []string{"options"}, v[:]) != nil || len(v[0]) == 0 || v[0][0] != '[' {
		return nil
	}
	var all []permOption
	ids := map[string]int{}
	acp.EachElementOfValid(v[0], func(e json.RawMessage) bool {
		var f [3]json.RawMessage
		var o permOption
		if len(e) == 0 || e[0] != '{' || acp.MembersOfValid(e, []string{"optionId", "name", "kind"}, f[:]) != nil {
			return true
		}
		for i, dst := range [...]*string{&o.OptionID, &o.Name, &o.Kind} {
			if len(f[i]) == 0 || f[i][0] != '"' || rawString(f[i], dst) != nil {
				return true
			}
		}
		switch o.Kind {
		case allowOnce, allowAlways, rejectOnce, rejectAlways:
			ids[o.OptionID]++
			all = append(all, o)
		}
		return true
	})
	out := []permOption{} // the editor is sent an array, even an empty one
	once := false
	for _, o := range all {
		if ids[o.OptionID] == 1 {
			out = append(out, o)
			once = once || o.Kind == allowOnce
		}
	}
	if !once {
		out = slices.DeleteFunc(out, func(o permOption) bool { return o.Kind == allowAlways })
	}
	return out
}
