package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy"
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
//
// Every decision is written to the audit log once its outcome is known.

// Permission option kinds (schema PermissionOptionKind).
const (
	allowOnce    = "allow_once"
	allowAlways  = "allow_always"
	rejectOnce   = "reject_once"
	rejectAlways = "reject_always"
)

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

// askOptions are the options of the router's own permission requests: one
// of each kind, the kind as id.
var askOptions = []permOption{
	{OptionID: allowOnce, Name: "Allow once", Kind: allowOnce},
	{OptionID: allowAlways, Name: "Always allow in this session", Kind: allowAlways},
	{OptionID: rejectOnce, Name: "Reject", Kind: rejectOnce},
	{OptionID: rejectAlways, Name: "Always reject in this session", Kind: rejectAlways},
}

// enforce decides a request of the policy's and carries the decision out.
// It runs in the agent's read loop and never waits there.
func (r *Router) enforce(ctx context.Context, pol *policy.Policy, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, reply func(json.RawMessage, error)) {
	v, err := r.decide(pol, inst, req.Method, p)
	if err != nil {
		reply(nil, err)
		return
	}
	if req.Method == acp.MethodRequestPermission {
		r.enforcePermission(ctx, inst, req, p, v, reply)
		return
	}
	switch v.effect {
	case policy.Allow:
		if err := r.record(v, ""); err != nil {
			v.auditFailed(err)
			reply(nil, v.denyError())
			return
		}
		r.relayRequest(ctx, inst, req, p, reply, nil)
	case policy.Ask:
		go r.askThenRelay(ctx, inst, req, p, v, reply)
	default:
		r.record(v, "")
		reply(nil, v.denyError())
	}
}

// denyError is the error a denied direct call gets.
func (v *verdict) denyError() error {
	return acp.NewError(acp.CodeInternalError, v.errorMessage(),
		map[string]any{"rule": v.rule, "decision": policy.Deny.String(), "layer": v.layer, "source": v.source})
}

// enforcePermission carries out a decision on session/request_permission.
func (r *Router) enforcePermission(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, v *verdict, reply func(json.RawMessage, error)) {
	var pr permRequest
	if json.Unmarshal(p, &pr) != nil {
		pr = permRequest{} // decide() refused it already: deny below
	}
	if v.effect == policy.Allow {
		once := pr.option(allowOnce)
		if once == nil { // only "always" offered: the user must choose
			v.effect, v.message = policy.Ask, "the agent offered no allow_once option"
		} else if err := r.record(v, ""); err != nil {
			v.auditFailed(err)
		} else {
			v.s.mu.Lock()
			v.s.approveLocked(v)
			v.s.mu.Unlock()
			reply(selected(once.OptionID), nil)
			return
		}
	}
	if v.effect == policy.Deny {
		r.record(v, "")
		r.denyNotice(v, &pr)
		if o := pr.option(rejectOnce, rejectAlways); o != nil {
			reply(selected(o.OptionID), nil)
		} else {
			reply(cancelledOutcome, nil)
		}
		return
	}
	// Ask: the editor's user chooses.
	r.relayRequest(ctx, inst, req, p, reply, func(res json.RawMessage, err error) (json.RawMessage, error) {
		choice := chosenKind(res, err, pr.Options)
		v.source = "user"
		allowed := choice == allowOnce || choice == allowAlways
		if aerr := r.record(v, choice); aerr != nil && allowed {
			v.auditFailed(aerr)
			r.denyNotice(v, &pr)
			if o := pr.option(rejectOnce, rejectAlways); o != nil {
				return selected(o.OptionID), nil
			}
			return cancelledOutcome, nil
		}
		v.s.mu.Lock()
		defer v.s.mu.Unlock()
		switch choice {
		case allowOnce:
			v.s.approveLocked(v)
		case allowAlways:
			v.s.approveLocked(v)
			v.s.grantLocked(v, policy.Allow)
			if o := pr.option(allowOnce); o != nil { // the router holds the grant, not the agent
				return selected(o.OptionID), nil
			}
		case rejectAlways:
			v.s.grantLocked(v, policy.Deny)
			if o := pr.option(rejectOnce); o != nil {
				return selected(o.OptionID), nil
			}
		}
		return res, err
	})
}

// denyNotice shows the editor a denied tool call as failed, with a note
// naming the rule appended to its existing content; a tool call the editor
// has not seen yet is created.
func (r *Router) denyNotice(v *verdict, pr *permRequest) {
	s, agent := v.s, v.agent
	note := map[string]any{"type": "content", "content": map[string]string{"type": "text",
		"text": "⛔ " + strings.TrimPrefix(v.errorMessage(), "acp-router: ") + " (acp-router policy)"}}
	id := pr.ToolCall.ToolCallID
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tools[toolKey(agent, id)]
	editorID, seen := s.toolIDs.Lookup(agent, id)
	var content []json.RawMessage
	existing := pr.ToolCall.Content
	if ts != nil && ts.content != nil {
		existing = ts.content
	}
	json.Unmarshal(existing, &content)
	content = append(content, mustJSON(note))
	update := map[string]any{"toolCallId": editorID, "status": "failed", "content": content}
	if seen {
		update["sessionUpdate"] = "tool_call_update"
	} else {
		update["sessionUpdate"] = "tool_call"
		update["toolCallId"] = s.toolIDs.Out(agent, id)
		title, kind := "Tool call", "other"
		if ts != nil && ts.title != "" {
			title = ts.title
		}
		if pr.ToolCall.Title != nil && *pr.ToolCall.Title != "" {
			title = *pr.ToolCall.Title
		}
		if ts != nil && ts.kind != "" {
			kind = ts.kind
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
}

// askSeq numbers the router's own tool calls (its permission requests).
var askSeq atomic.Uint64

// askThenRelay asks the editor's user about a direct call the policy says
// to ask about, then relays it or answers the agent with an error. It runs
// in its own goroutine.
func (r *Router) askThenRelay(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, v *verdict, reply func(json.RawMessage, error)) {
	s := v.s
	title, kind, toolCall := describeCall(inst.Agent.Title(), req.Method, p)
	toolID := fmt.Sprintf("acp-router-ask-%d", askSeq.Add(1))
	s.mu.Lock()
	editorToolID := s.toolIDs.Out("", toolID)
	s.mu.Unlock()
	toolCall["toolCallId"], toolCall["title"], toolCall["kind"], toolCall["status"] = editorToolID, title, kind, "pending"
	ask := mustJSON(map[string]any{"sessionId": s.ID, "toolCall": toolCall, "options": askOptions})
	choice := "cancelled"
	c, done, err := r.callEditor(ctx, inst, acp.RawID(req.ID), s.ID, acp.MethodRequestPermission, ask)
	if err == nil {
		res, werr := c.Wait(ctx)
		done()
		choice = chosenKind(res, werr, askOptions)
	}
	v.source = "user"
	allowed := choice == allowOnce || choice == allowAlways
	if aerr := r.record(v, choice); aerr != nil && allowed {
		v.auditFailed(aerr)
		allowed = false
	}
	s.mu.Lock()
	switch choice {
	case allowAlways:
		s.grantLocked(v, policy.Allow)
	case rejectAlways:
		s.grantLocked(v, policy.Deny)
	}
	status := "failed"
	if allowed {
		status = "completed"
	}
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": editorToolID, "status": status}))
	s.mu.Unlock()
	if !allowed {
		msg := fmt.Sprintf("acp-router: the user did not allow %s", title)
		if v.rule == ruleAudit {
			msg = v.errorMessage()
		}
		reply(nil, acp.NewError(acp.CodeInternalError, msg, map[string]any{"decision": policy.Deny.String(), "source": v.source, "userChoice": choice}))
		return
	}
	r.relayRequest(ctx, inst, req, p, reply, nil)
}

// describeCall is how the router's own permission request shows a direct
// call: a title, a tool kind, and the locations or input it is about
// (never the content of a write).
func describeCall(agentTitle, method string, p json.RawMessage) (string, string, map[string]any) {
	var c struct {
		Path    string   `json:"path"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Cwd     string   `json:"cwd"`
	}
	json.Unmarshal(p, &c)
	tc := map[string]any{}
	switch method {
	case acp.MethodReadTextFile:
		tc["locations"] = []map[string]string{{"path": c.Path}}
		return fmt.Sprintf("%s wants to read %s", agentTitle, c.Path), "read", tc
	case acp.MethodWriteTextFile:
		tc["locations"] = []map[string]string{{"path": c.Path}}
		return fmt.Sprintf("%s wants to write %s", agentTitle, c.Path), "edit", tc
	default:
		line := strings.Join(append([]string{c.Command}, c.Args...), " ")
		in := map[string]any{"command": c.Command, "args": c.Args}
		if c.Cwd != "" {
			in["cwd"] = c.Cwd
		}
		tc["rawInput"] = in
		return fmt.Sprintf("%s wants to run: %s", agentTitle, line), "execute", tc
	}
}
