package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Applying policy decisions to agent requests (DESIGN §6).
//
//   - session/request_permission: allow → the agent's first allow_once
//     option, the editor sees nothing; deny → its first reject option and a
//     failed tool call with the rule for the editor; ask → the editor
//     chooses, an "always" choice becoming a grant held by the router.
//   - fs/read_text_file, fs/write_text_file, terminal/create: allow →
//     forwarded; deny → an error naming the rule; ask → the router asks the
//     editor first, with a request_permission of its own.
//   - mcp/message for a tools/call, resources/read or any MCP method but
//     those that only list, negotiate or follow up (guard.DecidesMcp):
//     as those, but a refusal is the inner MCP error of a result
//     (schema MessageMcpResponse: outer errors are for binding and
//     runtime failures), so that the agent's MCP client reports it as the
//     tool's answer (mcp.go, agentMcpMessage).
//
// Every decision is written to the audit log once its outcome is known.

// Permission option kinds (schema PermissionOptionKind).
const (
	allowOnce    = guard.AllowOnce
	allowAlways  = guard.AllowAlways
	rejectOnce   = guard.RejectOnce
	rejectAlways = guard.RejectAlways
)

// askOptions are the options of the router's own permission requests: one
// of each kind, the kind as id.
var askOptions = []permOption{
	{OptionID: allowOnce, Name: "Allow once", Kind: allowOnce},
	{OptionID: allowAlways, Name: "Always allow in this session", Kind: allowAlways},
	{OptionID: rejectOnce, Name: "Reject", Kind: rejectOnce},
	{OptionID: rejectAlways, Name: "Always reject in this session", Kind: rejectAlways},
}

// enforce decides a request of the policy's and carries the decision out.
// The decision may wait on the filesystem, so it runs on the session's
// sequencer: off the agent's read loop, in order with the session's other
// traffic (order.go), never delaying another session.
func (r *Router) enforce(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, reply func(json.RawMessage, error)) {
	// By its exact name, as toEditorSession and the editor read it.
	s := r.decidedSession(inst, req.Method, acp.SessionID(p), reply)
	if s == nil {
		return
	}
	r.decideOn(ctx, s, inst, req, p, mcpTarget{}, "", func(v *guard.Verdict) {
		r.carryOut(ctx, s, inst, req, p, v, reply, "", func() { r.relayRequest(ctx, inst, req, p, reply, nil) })
	})
}

// decidedSession is the router session of an agent's request the policy
// decides, by the agent's session id; nil, and the request refused once
// audited, when there is none.
func (r *Router) decidedSession(inst *upstream.Instance, method, sessionID string, reply func(json.RawMessage, error)) *Session {
	ref := acp.SessionRef{SessionID: sessionID}
	r.mu.Lock()
	s := r.downLocked(inst, ref.SessionID)
	r.mu.Unlock()
	agent := inst.Agent.Name()
	if s == nil {
		// A session the router never created or learned — such as a
		// subagent never announced on a session of this agent instance —
		// does not exist: relaying its request would bypass the policy.
		r.log.Warn("request for an unknown session refused", "agent", agent, "method", method, "session", ref.SessionID)
		// Answered once audited, off this read loop (issue 27: the audit
		// log's lock may be held by another router).
		r.opts.Guard.RecordRefused(agent, method, ref.SessionID, "unknown session", func() {
			reply(nil, errUnknownSession(ref.SessionID))
		})
		return nil
	}
	return s
}

// decideOn decides an agent's request of session s on the session's
// sequencer and hands the verdict to then, there. mcp is the ACP MCP
// server an mcp/message is for; toolCallID the tool call a permission
// request is about, as the agent names it.
func (r *Router) decideOn(ctx context.Context, s *Session, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, mcp mcpTarget, toolCallID string,
	then func(*guard.Verdict)) {
	agent := inst.Agent.Name()
	// The turn the request arrived in, read here, in the order the agent
	// sent it and its turn's answer: the decision may run after the turn
	// ended, and must not approve the next turn's calls.
	turn := s.policy.Turn()
	s.order().async(r, len(p), func() {
		// A subagent session is decided with its top-level session's
		// context: the agent's mode there, its cwd, roots and grants.
		// A mode the policy denies, wherever the agent states it
		// (merge.DeniedMode), is the mode it is decided in: the reset
		// may still be under way, or have failed.
		denied := func(m string) bool { return r.opts.Guard.ModeDenied(agent, m) }
		root := s.root()
		root.mu.Lock()
		mode := ""
		if d := root.down[agent]; d != nil {
			mode, _, _, _ = merge.CurrentMode(d.view)
			if sel, ok := merge.DeniedMode(d.view, denied); ok {
				mode = sel.Mode
			}
		}
		root.mu.Unlock()
		parentID := ""
		if root != s {
			parentID = root.ID
		}
		// A child that reports a mode the policy denies is decided in it:
		// the router cannot set it back (subagent.go). So is every child
		// it delegates to (ACP nests subagents): they run in the mode they
		// inherit, whether or not they report it.
		for c := s; c != root; c = c.parent {
			c.mu.Lock()
			if d := c.down[agent]; d != nil {
				if sel, ok := merge.DeniedMode(d.view, denied); ok {
					mode = sel.Mode
				}
			}
			c.mu.Unlock()
		}
		// A permission request about a tool call the editor was shown:
		// the guard must hold what the agent said of it before.
		shown := false
		if req.Method == acp.MethodRequestPermission && toolCallID != "" {
			s.mu.Lock()
			_, shown = s.toolIDs.Lookup(agent, toolCallID)
			s.mu.Unlock()
		}
		then(r.opts.Guard.Decide(ctx, s.policy, guard.Request{SessionID: s.ID, ParentID: parentID, Agent: agent, Mode: mode,
			Method: req.Method, Params: p, ToolShown: shown, McpServer: mcp.name, McpAmbiguous: mcp.ambiguous, Turn: turn}))
	})
}

// carryOut answers, relays or asks about a decided request. It never
// waits for the editor. reply answers the agent when the request is
// refused; relay passes it on to the editor.
func (r *Router) carryOut(ctx context.Context, s *Session, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, v *guard.Verdict, reply func(json.RawMessage, error), mcpServer string, relay func()) {
	g := r.opts.Guard
	switch v.Effect {
	case guard.Allow:
		if g.Record(v, "") != nil {
			reply(nil, v.DenyError())
			return
		}
		relay()
	case guard.Ask:
		r.spawn(func() { r.askThenRelay(ctx, s, inst, req, p, v, reply, mcpServer, relay) })
	default:
		g.Record(v, "")
		reply(nil, v.DenyError())
	}
}

// denyNotice shows the editor a denied tool call as failed, with a note
// naming the rule appended to its existing content; a tool call the editor
// has not seen yet is created.
func (r *Router) denyNotice(s *Session, v *guard.Verdict, pr *permRequest) {
	agent := v.Agent
	note := map[string]any{"type": "content", "content": map[string]string{"type": "text",
		"text": "⛔ " + strings.TrimPrefix(v.ErrorMessage(), "acp-router: ") + " (acp-router policy)"}}
	id := pr.ToolCall.ToolCallID
	if id == "" {
		return
	}
	tsTitle, tsKind, tsContent, _ := s.policy.Tool(s.ID, agent, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	editorID, seen := s.toolIDs.Lookup(agent, id)
	var content []json.RawMessage
	existing := pr.ToolCall.Content
	if tsContent != nil {
		existing = tsContent
	}
	if len(existing) > 0 {
		if err := json.Unmarshal(existing, &content); err != nil {
			// The agent's content is not a list of blocks: the editor is
			// shown the policy's note alone, which is what it must see.
			r.log.Warn("a denied tool call's content does not decode; the note replaces it", "session", s.ID, "agent", agent, "error", err)
		}
	}
	content = append(content, mustJSON(note))
	update := map[string]any{"toolCallId": editorID, "status": "failed", "content": content}
	if seen {
		update["sessionUpdate"] = "tool_call_update"
	} else {
		update["sessionUpdate"] = "tool_call"
		update["toolCallId"] = s.toolIDs.Out(agent, id)
		title, kind := "Tool call", "other"
		if tsTitle != "" {
			title = tsTitle
		}
		if pr.ToolCall.Title != nil && *pr.ToolCall.Title != "" {
			title = *pr.ToolCall.Title
		}
		if tsKind != "" {
			kind = tsKind
		}
		if pr.ToolCall.Kind != nil && *pr.ToolCall.Kind != "" {
			kind = *pr.ToolCall.Kind
		}
		update["title"], update["kind"] = title, kind
		if len(pr.ToolCall.Locations) > 0 {
			update["locations"] = pr.ToolCall.Locations
		}
	}
	s.writeLocked(s.updateLine(update))
	if editorID, _ := update["toolCallId"].(string); editorID != "" {
		// Failed by the policy: its failed status and the note are the
		// editor's last word on it. Retired, the agent's later updates of
		// it are not forwarded (relayUpdate): an agent that went on with
		// "completed" and content of its own made the editor show the
		// denied tool call as done, the note gone. Closed, a new
		// tool_call the agent announces under the same id gets another
		// editor id: a card of its own, not the failed one's.
		s.toolIDs.Close(editorID)
	}
}

// askSeq numbers the router's own tool calls (its permission requests).
var askSeq atomic.Uint64

// askThenRelay asks the editor's user about a direct call the policy says
// to ask about, then relays it or answers the agent with an error. It runs
// in its own goroutine.
func (r *Router) askThenRelay(ctx context.Context, s *Session, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, v *guard.Verdict,
	reply func(json.RawMessage, error), mcpServer string, relay func()) {
	g := r.opts.Guard
	if why := r.unanswerable(v); why != "" {
		// No one who may answer can: refused as a deny is.
		g.RecordUnanswerable(v, why)
		reply(nil, v.DenyError())
		return
	}
	title, kind, toolCall, err := describeCall(inst.Agent.Title(), req.Method, mcpServer, p)
	if err != nil {
		// The user is never asked about a call the router cannot show:
		// recorded as the policy's ask, unanswered, and refused.
		g.Record(v, "")
		reply(nil, errMalformed(req.Method, err))
		return
	}
	toolID := fmt.Sprintf("acp-router-ask-%d", askSeq.Add(1))
	s.mu.Lock()
	editorToolID := s.toolIDs.Out("", toolID)
	s.mu.Unlock()
	toolCall["toolCallId"], toolCall["title"], toolCall["kind"], toolCall["status"] = editorToolID, title, kind, "pending"
	question := map[string]any{"sessionId": s.ID, "toolCall": toolCall, "options": askOptions}
	if a := v.Answerers(); a != nil {
		question["_meta"] = map[string]any{metaAnswerers: a.Names}
	}
	ask := mustJSON(question)
	choice := "cancelled"
	var res json.RawMessage
	c, done, err := r.callEditor(ctx, inst, acp.RawID(req.ID), s.ID, acp.MethodRequestPermission, ask)
	if err == nil {
		res, err = c.Wait(ctx)
		done()
		choice = chosenKind(res, err, askOptions)
	}
	allowed := choice == allowOnce || choice == allowAlways
	var rerr error
	if err != nil {
		rerr = g.RecordUnanswered(v)
	} else {
		rerr = g.RecordAnswer(v, choice, r.answerer(res))
	}
	if rerr != nil && v.AuditFailed() || v.AnswerRefused() {
		allowed = false
	}
	s.mu.Lock()
	status := "failed"
	if allowed {
		status = "completed"
	}
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": editorToolID, "status": status}))
	s.toolIDs.Done(editorToolID)
	s.toolIDs.RetireDone(maxDoneTools)
	s.mu.Unlock()
	if !allowed {
		msg := fmt.Sprintf("acp-router: the user did not allow %s", title)
		if v.AuditFailed() || v.AnswerRefused() {
			msg = v.ErrorMessage()
		}
		reply(nil, fail(errInternal, msg, map[string]any{"decision": guard.Deny.String(), "source": v.Source, "userChoice": choice}))
		return
	}
	relay()
}

// describeCall is how the router's own permission request shows a direct
// call: a title, a tool kind, and the locations or input it is about
// (never the content of a write). A command shows all the policy decided
// on that the editor will use: its environment (names and values: an
// LD_PRELOAD is why it asks), each argument as one shell word, its
// directory.
func describeCall(agentTitle, method, mcpServer string, p json.RawMessage) (string, string, map[string]any, error) {
	if method == acp.MethodMcpMessage {
		return describeMcp(agentTitle, mcpServer, p)
	}
	var c struct {
		Path    string   `json:"path"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Env     []envVar `json:"env"`
		Cwd     string   `json:"cwd"`
	}
	if err := json.Unmarshal(p, &c); err != nil {
		return "", "", nil, err
	}
	tc := map[string]any{}
	switch method {
	case acp.MethodReadTextFile:
		tc["locations"] = []map[string]string{{"path": c.Path}}
		return fmt.Sprintf("%s wants to read %s", agentTitle, c.Path), "read", tc, nil
	case acp.MethodWriteTextFile:
		tc["locations"] = []map[string]string{{"path": c.Path}}
		return fmt.Sprintf("%s wants to write %s", agentTitle, c.Path), "edit", tc, nil
	default:
		var words []string
		for _, e := range c.Env {
			words = append(words, e.Name+"="+shellWord(e.Value))
		}
		if len(c.Args) == 0 {
			words = append(words, c.Command) // a command line, run as one
		} else {
			words = append(words, shellWord(c.Command))
			for _, a := range c.Args {
				words = append(words, shellWord(a))
			}
		}
		in := map[string]any{"command": c.Command, "args": c.Args}
		title := fmt.Sprintf("%s wants to run: %s", agentTitle, strings.Join(words, " "))
		if len(c.Env) > 0 {
			in["env"] = c.Env
		}
		if c.Cwd != "" {
			in["cwd"] = c.Cwd
			title += " (in " + c.Cwd + ")"
		}
		tc["rawInput"] = in
		return title, "execute", tc, nil
	}
}

// describeMcp is describeCall for an mcp/message: the tool it calls (as
// the policy names it) and its arguments, or the resource it reads.
func describeMcp(agentTitle, server string, p json.RawMessage) (string, string, map[string]any, error) {
	var m struct {
		ServerID string `json:"serverId"`
		Method   string `json:"method"`
		Params   struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			URI       string          `json:"uri"`
		} `json:"params"`
	}
	if err := json.Unmarshal(p, &m); err != nil {
		// Params the router cannot read are decided all the same
		// (guard.DecidesMcp): the user is asked about a message the
		// router cannot read, the last case below, never about a part.
		m.Method, m.Params.Name, m.Params.Arguments, m.Params.URI = "", "", nil, ""
	}
	if server == "" {
		server = m.ServerID
	}
	tc := map[string]any{}
	switch {
	case m.Method == acp.McpToolsCall && m.Params.Name != "":
		in := map[string]any{"server": server, "tool": m.Params.Name}
		if len(m.Params.Arguments) > 0 && json.Valid(m.Params.Arguments) {
			in["arguments"] = m.Params.Arguments
		}
		tc["rawInput"] = in
		return fmt.Sprintf("%s wants to call the MCP tool %s", agentTitle, guard.McpToolName(server, m.Params.Name)), "other", tc, nil
	case m.Method == acp.McpResourcesRead && m.Params.URI != "":
		if u, err := url.Parse(m.Params.URI); err == nil && strings.EqualFold(u.Scheme, "file") && u.Path != "" {
			tc["locations"] = []map[string]string{{"path": u.Path}}
		}
		tc["rawInput"] = map[string]any{"server": server, "uri": m.Params.URI}
		return fmt.Sprintf("%s wants to read %s from the MCP server %s", agentTitle, m.Params.URI, server), "read", tc, nil
	}
	in := map[string]any{"server": server, "method": m.Method}
	var inner [1]json.RawMessage
	if acp.Members(p, []string{"params"}, inner[:]) == nil && len(inner[0]) > 0 && inner[0][0] == '{' {
		in["params"] = inner[0]
	}
	tc["rawInput"] = in
	if m.Method != "" && m.Method != acp.McpToolsCall && m.Method != acp.McpResourcesRead {
		// prompts/get, completion/complete, a method the policy does not
		// know: the user sees what it is and what it is given.
		return fmt.Sprintf("%s wants to send %s to the MCP server %s", agentTitle, m.Method, server), "other", tc, nil
	}
	return fmt.Sprintf("%s sends the MCP server %s a message the router cannot read", agentTitle, server), "other", tc, nil
}

// envVar is one of terminal/create's env (schema EnvVariable).
type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// shellWord is s as one POSIX shell word: as it is when it needs no
// quoting, else in single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
