package router

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
)

// Budgets (issue 32): the router books what agents report (usage_update's
// cumulative cost, the prompt response's token usage) with the guard, and
// carries out the guard's budget verdict when a prompt starts: never in
// the middle of a turn.

var refusalResult = json.RawMessage(`{"stopReason":"refusal"}`)

// budgetOptions: the budget ask is about one prompt.
var budgetOptions = []permOption{
	{OptionID: allowOnce, Name: "Send this prompt anyway", Kind: allowOnce},
	{OptionID: rejectOnce, Name: "Do not send it", Kind: rejectOnce},
}

// bookCostLocked books a usage_update's cumulative cost of downstream d
// (called with s.mu held; the guard books it off this goroutine).
func (r *Router) bookCostLocked(s *Session, d *downstream, cost *merge.Cost) {
	if cost == nil || s.parent != nil || !r.opts.Guard.HasBudgets() {
		return
	}
	r.opts.Guard.BookUsage(guard.UsageReport{Agent: d.agent.Name(), Session: s.ID, Downstream: d.id,
		Cost: &guard.Money{Amount: cost.Amount, Currency: cost.Currency}})
}

// bookTurn books a turn that an agent ran, at its end: its tokens (the
// prompt response's usage, ACP unstable PromptResponse.usage, or Gemini
// CLI's _meta.quota.token_count) and whether its agent has reported any
// cost in this session (else the turn's cost is unknown).
func (r *Router) bookTurn(s *Session, t *turn, res json.RawMessage) {
	if t.d == nil || t.command != nil || !r.opts.Guard.HasBudgets() {
		return
	}
	s.mu.Lock()
	d, unknown := t.d, t.d.cost == nil
	s.mu.Unlock()
	r.opts.Guard.BookUsage(guard.UsageReport{Agent: d.agent.Name(), Session: s.ID, Downstream: d.id,
		Tokens: turnTokens(res), Turn: true, UnknownCost: unknown})
}

// turnTokens reads the tokens of a prompt response: usage.totalTokens, else
// input + output + thought tokens; else Gemini CLI's
// _meta.quota.token_count (shared/fixtures/real-agents/gemini-cli-*).
func turnTokens(res json.RawMessage) int64 {
	var out struct {
		Usage *struct {
			Total   *int64 `json:"totalTokens"`
			Input   int64  `json:"inputTokens"`
			Output  int64  `json:"outputTokens"`
			Thought int64  `json:"thoughtTokens"`
		} `json:"usage"`
		Meta struct {
			Quota struct {
				Count struct {
					Input  int64 `json:"input_tokens"`
					Output int64 `json:"output_tokens"`
				} `json:"token_count"`
			} `json:"quota"`
		} `json:"_meta"`
	}
	if json.Unmarshal(res, &out) != nil {
		return 0
	}
	if u := out.Usage; u != nil {
		if u.Total != nil {
			return *u.Total
		}
		return u.Input + u.Output + u.Thought
	}
	return out.Meta.Quota.Count.Input + out.Meta.Quota.Count.Output
}

// budgetGate carries out the budgets' verdict on turn t before it reaches
// an agent: warnings are said, a refusal ends the turn (stopReason
// refusal, with a message naming the budget, what was spent and when it
// resets), a fallback switches the session (or a one-turn command) to the
// fallback agent, an ask asks the editor. It says whether the turn goes
// on. It waits (the ledger, the user): never in the editor's read loop.
func (r *Router) budgetGate(ctx context.Context, s *Session, t *turn) bool {
	g := r.opts.Guard
	v := g.CheckBudget(s.ID, t.agent)
	if v == nil {
		return true
	}
	for _, w := range v.Warnings {
		r.budgetNotice(s, w)
	}
	switch v.Effect {
	case guard.BudgetNone:
		g.RecordBudget(v, "warn", "")
		return true
	case guard.BudgetFallback:
		g.RecordBudget(v, "fallback", "")
		s.mu.Lock()
		onActive := t.agent == s.active
		s.mu.Unlock()
		if onActive {
			if err := r.switchTo(ctx, s, v.Fallback); err != nil {
				r.budgetRefuse(ctx, s, t, v.Message+" Cannot switch: "+errorText(err))
				return false
			}
		} else if r.byName[v.Fallback] == nil {
			r.budgetRefuse(ctx, s, t, v.Message+fmt.Sprintf(" There is no agent %q here.", v.Fallback))
			return false
		}
		t.agent = v.Fallback
		s.mu.Lock()
		s.writeLocked(s.sayLocked(v.Message))
		s.mu.Unlock()
		return true
	case guard.BudgetAsk:
		choice := r.budgetAsk(ctx, s, t, v)
		g.RecordBudget(v, "ask", choice)
		s.mu.Lock()
		cancelled := t.cancelled
		s.mu.Unlock()
		if cancelled {
			r.endTurn(ctx, s, t, cancelledResult, nil)
			return false
		}
		if choice == allowOnce {
			return true
		}
		r.budgetRefuse(ctx, s, t, v.Message+" The prompt was not sent.")
		return false
	}
	g.RecordBudget(v, "refuse", "")
	r.budgetRefuse(ctx, s, t, v.Message)
	return false
}

// budgetRefuse ends t with a refusal the editor shows.
func (r *Router) budgetRefuse(ctx context.Context, s *Session, t *turn, text string) {
	s.mu.Lock()
	s.writeLocked(s.sayLocked(text))
	s.mu.Unlock()
	r.endTurn(ctx, s, t, refusalResult, nil)
}

// budgetAsk asks the editor's user whether to send the prompt although
// budget v is reached, and returns the kind chosen ("cancelled" when the
// editor does not answer).
func (r *Router) budgetAsk(ctx context.Context, s *Session, t *turn, v *guard.BudgetVerdict) string {
	toolID := fmt.Sprintf("acp-router-ask-%d", askSeq.Add(1))
	s.mu.Lock()
	editorToolID := s.toolIDs.Out("", toolID)
	s.mu.Unlock()
	question := mustJSON(map[string]any{"sessionId": s.ID, "options": budgetOptions, "toolCall": map[string]any{
		"toolCallId": editorToolID, "title": fmt.Sprintf("Budget reached: send this prompt to %s?", t.agent), "kind": "other", "status": "pending",
		"content": []any{map[string]any{"type": "content", "content": map[string]string{"type": "text", "text": v.Message}}}}})
	choice := "cancelled"
	c, err := r.editor.Call(ctx, acp.MethodRequestPermission, paramsAny(question), nil, nil)
	if err == nil {
		res, err := c.Wait(ctx)
		choice = chosenKind(res, err, budgetOptions)
	}
	status := "failed"
	if choice == allowOnce {
		status = "completed"
	}
	s.mu.Lock()
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": editorToolID, "status": status}))
	s.toolIDs.Done(editorToolID)
	s.toolIDs.RetireDone(maxDoneTools)
	s.mu.Unlock()
	return choice
}

// budgetNotice tells the user of a budget warning: a notice update (live
// only, never history) when the editor presents notices
// (clientCapabilities.session.notices), else an agent message.
func (r *Router) budgetNotice(s *Session, text string) {
	var in struct {
		Caps struct {
			Session struct {
				Notices json.RawMessage `json:"notices"`
			} `json:"session"`
		} `json:"clientCapabilities"`
	}
	if err := json.Unmarshal(r.agentInitParams(), &in); err != nil {
		// Read as absent: an editor whose initialize the router cannot
		// read again gets the message every editor shows.
		r.log.Debug("cannot read the editor's capabilities for a notice", "error", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := in.Caps.Session.Notices; len(n) > 0 && string(n) != "null" {
		s.writeLiveLocked(s.updateLine(map[string]any{"sessionUpdate": "notice", "severity": "warning", "title": text}))
		return
	}
	s.writeLocked(s.sayLocked(text))
}
