package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
)

// The router's own commands under the policy (issue 32, part 1 point 5):
// a switch of agent (however asked: /agent NAME, the agent config option,
// a legacy AGENT:MODE mode, a commands: entry with switch, a /pick of
// another agent), a one-turn ask (/NAME TEXT, a commands: entry with a
// prompt), /compare and /pick are each decided by the guard before they
// are carried out, about the agent(s) they name. Only rules that name the
// command's method decide it: a command no rule names is the user's own
// action and runs as it always did (no decision waited for, nothing
// audited). A deny: the command is not carried out, the editor is shown
// the rule's message and the turn ends as other router replies do
// (end_turn); a config option is answered with the deny's error. An ask:
// the editor is asked first, as the budgets ask (budget.go).

// commandOptions: a command's ask is about this one command.
var commandOptions = []permOption{
	{OptionID: allowOnce, Name: "Allow", Kind: allowOnce},
	{OptionID: rejectOnce, Name: "Do not allow", Kind: rejectOnce},
}

// commandGate decides the router command method of session s about
// agents and carries out the verdict: nil when the command may run, else
// the error that says why not (the rule's deny, the user's answer). what
// says the command to the user when asked ("Switch this session to
// Codex"). It may ask the user: never call it in the editor's read loop.
func (r *Router) commandGate(ctx context.Context, s *Session, method string, agents []string, what string) error {
	g := r.opts.Guard
	if !g.DecidesCommand(method) {
		return nil
	}
	v := g.DecideCommand(ctx, s.policy, s.ID, method, agents)
	switch v.Effect {
	case guard.Allow:
		if err := g.RecordCommand(v); err != nil && v.AuditFailed() {
			return v.DenyError()
		}
		return nil
	case guard.Deny:
		g.RecordCommand(v) // a failure is logged by the guard; it stays denied
		r.log.Info("router command denied by the policy", "session", s.ID, "method", method, "agent", v.Agent, "rule", v.Rule)
		return v.DenyError()
	}
	if why := r.unanswerable(v); why != "" {
		g.RecordUnanswerable(v, why)
		return v.DenyError()
	}
	return r.commandAsk(ctx, s, v, what)
}

// commandAsk asks the editor's user whether to carry out the command v
// asks about.
func (r *Router) commandAsk(ctx context.Context, s *Session, v *guard.Verdict, what string) error {
	g := r.opts.Guard
	toolID := fmt.Sprintf("acp-router-ask-%d", askSeq.Add(1))
	s.mu.Lock()
	editorToolID := s.toolIDs.Out("", toolID)
	s.mu.Unlock()
	why := "The policy asks before this command"
	if v.Rule != "" {
		why += fmt.Sprintf(" (rule %s, %s layer)", v.Rule, v.Layer)
	}
	why += "."
	if v.Message != "" {
		why += " " + v.Message
	}
	question := map[string]any{"sessionId": s.ID, "options": commandOptions, "toolCall": map[string]any{
		"toolCallId": editorToolID, "title": what + "?", "kind": "other", "status": "pending",
		"content": []any{map[string]any{"type": "content", "content": map[string]string{"type": "text", "text": why}}}}}
	if a := v.Answerers(); a != nil {
		question["_meta"] = map[string]any{metaAnswerers: a.Names}
	}
	choice := "cancelled"
	var rerr error
	c, err := r.editor.Call(ctx, acp.MethodRequestPermission, paramsAny(mustJSON(question)), nil, nil)
	if err == nil {
		res, werr := c.Wait(ctx)
		if err = werr; err == nil {
			choice = chosenKind(res, nil, commandOptions)
			rerr = g.RecordAnswer(v, choice, r.answerer(res))
		}
	}
	if err != nil {
		rerr = g.RecordUnanswered(v)
	}
	allowed := choice == allowOnce && !(rerr != nil && v.AuditFailed()) && !v.AnswerRefused()
	status := "failed"
	if allowed {
		status = "completed"
	}
	s.mu.Lock()
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": editorToolID, "status": status}))
	s.toolIDs.Done(editorToolID)
	s.toolIDs.RetireDone(maxDoneTools)
	s.mu.Unlock()
	switch {
	case allowed:
		return nil
	case v.AuditFailed() || v.AnswerRefused():
		return v.DenyError()
	}
	return fail(errInternal, "acp-router: you did not allow it ("+lowerFirst(what)+")",
		map[string]any{"decision": guard.Deny.String(), "source": "user", "userChoice": choice, "rule": v.Rule})
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// userSwitch is a switch of s to agent name that the user asked for:
// decided by the policy (guard.MethodSwitch) when it switches at all (an
// unknown agent, the active one, or a session that must stay on its agent
// is switchTo's to answer), then carried out.
func (r *Router) userSwitch(ctx context.Context, s *Session, name string) error {
	s.mu.Lock()
	switches := r.byName[name] != nil && s.active != name && !s.Enforce
	s.mu.Unlock()
	if switches {
		if err := r.commandGate(ctx, s, guard.MethodSwitch, []string{name}, "Switch this session to "+r.byName[name].Title()); err != nil {
			return err
		}
	}
	return r.switchTo(ctx, s, name)
}

// refuseTurn ends turn t, a command the policy or the user did not let
// run, showing why as the router's other replies are shown.
func (r *Router) refuseTurn(ctx context.Context, s *Session, t *turn, text string) {
	s.mu.Lock()
	s.writeLocked(s.sayLocked(text))
	s.mu.Unlock()
	r.endTurn(ctx, s, t, endTurnResult, nil)
}
