package guard

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/ledger"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/budget"
)

// Budgets at run time (issue 32): the policy's budgets decided against the
// ledger at the start of each prompt, and what the agents report booked
// in it. A decision is taken only when a turn starts, never in the middle
// of one: a turn that crosses a limit finishes, and two sessions crossing
// it together overspend by at most their one turn each.

// BudgetEffect is what the budgets say about a new prompt.
type BudgetEffect = budget.Effect

// Budget effects.
const (
	BudgetNone     = budget.None
	BudgetAsk      = budget.Ask
	BudgetFallback = budget.Fallback
	BudgetRefuse   = budget.Refuse
)

// Money is an amount in a currency.
type Money = budget.Money

// UsageReport is what an agent said it spent (ledger.Report).
type UsageReport = ledger.Report

// MethodBudget is the audit log's method of budget decisions.
const MethodBudget = "acp-router/budget"

// maxPendingReports bounds the reports waiting to be booked; past it one
// is dropped and logged (a ledger whose lock another process holds).
const maxPendingReports = 4096

// BudgetVerdict is the budgets' decision about a prompt of one session to
// one agent.
type BudgetVerdict struct {
	Effect BudgetEffect
	// Budget names the budget that decided: NAME (LAYER layer,
	// FILE:LINE:COL); "" with BudgetNone.
	Budget string
	// Fallback is the agent a fallback switches to.
	Fallback string
	// Message tells the user what was reached, what was spent and when
	// it resets.
	Message string
	// Warnings are the budgets past their warn_at, in words, each said
	// once per session and period.
	Warnings []string

	session, agent string
	by             *budget.State
	warn           []budget.State
	hash           string
	at             time.Time
}

// ledgerState is the guard's ledger and the reports not yet booked.
type ledgerState struct {
	mu      sync.Mutex
	l       *ledger.Ledger
	pending []ledger.Report
	busy    bool
	idle    *sync.Cond
	dropped int
	// warned are the warnings said, by session, budget and period.
	warned map[string]bool
}

// SetLedger makes the guard book usage in l and decide budgets against it.
func (g *Guard) SetLedger(l *ledger.Ledger) {
	if g == nil {
		return
	}
	g.ledger.mu.Lock()
	g.ledger.l = l
	g.ledger.mu.Unlock()
}

// BookUsage books what an agent reported, off the caller (an agent's read
// loop): the ledger's lock may be held by another router.
func (g *Guard) BookUsage(r UsageReport) {
	if g == nil {
		return
	}
	ls := &g.ledger
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.l == nil {
		return
	}
	if len(ls.pending) >= maxPendingReports {
		if ls.dropped++; ls.dropped == 1 {
			g.log.Warn("usage reports dropped: the budget ledger does not keep up", "ledger", ls.l.Path())
		}
		return
	}
	ls.pending = append(ls.pending, r)
	if !ls.busy {
		ls.busy = true
		go g.bookPending()
	}
}

func (g *Guard) bookPending() {
	ls := &g.ledger
	for {
		ls.mu.Lock()
		batch, l := ls.pending, ls.l
		ls.pending = nil
		if len(batch) == 0 {
			ls.busy = false
			if ls.idle != nil {
				ls.idle.Broadcast()
			}
			ls.mu.Unlock()
			return
		}
		ls.mu.Unlock()
		ignored, err := l.Add(time.Now(), batch...)
		for _, why := range ignored {
			g.log.Warn("usage report ignored", "why", why)
		}
		if err != nil {
			g.log.Error("cannot book usage in the budget ledger", "ledger", l.Path(), "error", err)
		}
	}
}

// FlushUsage waits until the reports given to BookUsage are booked.
func (g *Guard) FlushUsage() {
	if g == nil {
		return
	}
	ls := &g.ledger
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.idle == nil {
		ls.idle = sync.NewCond(&ls.mu)
	}
	for ls.busy {
		ls.idle.Wait()
	}
}

// HasBudgets: the policy in force has budgets.
func (g *Guard) HasBudgets() bool {
	p := g.Policy()
	return p != nil && len(p.Budgets()) > 0
}

// CheckBudget decides a prompt of router session sid to agent; nil when
// the policy has no budgets. A fallback whose agent is over a budget too
// is a refusal (one hop, never a loop). A ledger that cannot be read
// refuses (fail closed).
func (g *Guard) CheckBudget(sid, agent string) *BudgetVerdict {
	pol := g.Policy()
	if pol == nil || len(pol.Budgets()) == 0 {
		return nil
	}
	g.FlushUsage()
	g.ledger.mu.Lock()
	l := g.ledger.l
	g.ledger.mu.Unlock()
	v := &BudgetVerdict{session: sid, agent: agent, hash: pol.Hash(), at: time.Now()}
	if l == nil {
		return v
	}
	snap, err := l.Read()
	if err != nil {
		v.Effect = BudgetRefuse
		v.Budget = "ledger"
		v.Message = fmt.Sprintf("acp-router: the budgets cannot be checked (%v); prompts are refused until they can.", err)
		return v
	}
	spent := func(b *budget.Budget) budget.Spend { return snap.Spend(b.Per, v.at, sid, b.Agents) }
	d := pol.CheckBudgets(agent, spent)
	if d.Effect == BudgetFallback {
		if d2 := pol.CheckBudgets(d.By.Budget.Fallback, spent); d2.Effect != BudgetNone && d.By.Budget.Fallback != agent {
			v.Effect, v.by = BudgetRefuse, d.By
			v.Budget = d.By.Budget.Ref()
			v.Message = g.budgetText(d.By, v.at, agent) + fmt.Sprintf(" Its fallback, %s, is over budget %s too (%s).", d.By.Budget.Fallback, d2.By.Budget.Ref(), d2.By.Why)
			return v
		}
	}
	v.Effect = d.Effect
	if d.By != nil {
		v.by = d.By
		v.Budget = d.By.Budget.Ref()
		v.Fallback = d.By.Budget.Fallback
		v.Message = g.budgetText(d.By, v.at, agent)
	}
	g.ledger.mu.Lock()
	if g.ledger.warned == nil || len(g.ledger.warned) > 4096 {
		g.ledger.warned = map[string]bool{}
	}
	for _, w := range d.Warn {
		key := sid + "\x00" + w.Budget.Layer + "\x00" + w.Budget.Name + "\x00" + ledger.PeriodKey(w.Budget.Per, v.at, sid)
		if g.ledger.warned[key] {
			continue
		}
		g.ledger.warned[key] = true
		v.warn = append(v.warn, w)
		v.Warnings = append(v.Warnings, fmt.Sprintf("acp-router: budget %s is at %d%%: %s %s; at the limit, %s.",
			w.Budget.Name, int(math.Floor(w.Share*100)), w.Why, periodWords(w.Budget.Per, v.at), effectWords(w.Budget)))
	}
	g.ledger.mu.Unlock()
	return v
}

// budgetText says a reached budget: its name and where it is written,
// what was spent, and when it resets.
func (g *Guard) budgetText(st *budget.State, at time.Time, agent string) string {
	b := st.Budget
	var sb strings.Builder
	fmt.Fprintf(&sb, "acp-router: budget %q (%s layer, %s) is reached: %s %s", b.Name, b.Layer, b.Pos, st.Why, periodWords(b.Per, at))
	if b.Agents != nil {
		fmt.Fprintf(&sb, " by %s", strings.Join(b.Agents, ", "))
	}
	if r := ledger.Resets(b.Per, at); !r.IsZero() {
		fmt.Fprintf(&sb, "; it resets %s.", r.Format("Mon 2 Jan 2006 15:04 MST"))
	} else {
		sb.WriteString("; it holds for the rest of this session: start a new session.")
	}
	switch b.Effect {
	case BudgetRefuse:
		if b.Agents == nil {
			sb.WriteString(" Prompts are refused until then.")
		} else {
			fmt.Fprintf(&sb, " Prompts to %s are refused until then.", strings.Join(b.Agents, ", "))
		}
	case BudgetFallback:
		fmt.Fprintf(&sb, " This session switches to %s.", b.Fallback)
	}
	if b.Message != "" {
		sb.WriteString(" " + b.Message)
	}
	return sb.String()
}

func periodWords(per string, at time.Time) string {
	switch per {
	case budget.PerSession:
		return "in this session"
	case budget.PerWeek:
		y, w := at.ISOWeek()
		return fmt.Sprintf("this week (%d-W%02d)", y, w)
	case budget.PerMonth:
		return "this month (" + at.Format("January 2006") + ")"
	}
	return "today (" + at.Format("2006-01-02") + ")"
}

func effectWords(b *budget.Budget) string {
	switch b.Effect {
	case BudgetAsk:
		return "you are asked before each prompt"
	case BudgetFallback:
		return "the session switches to " + b.Fallback
	}
	return "prompts are refused"
}

// RecordBudget audits a budget decision: decision is "warn", "refuse",
// "fallback" or "ask"; choice the user's answer to an ask ("" when none
// was asked). Each warning of v is recorded too (once, with the first
// call). The record names the budget and its FILE:LINE:COL.
func (g *Guard) RecordBudget(v *BudgetVerdict, decision, choice string) {
	if g == nil || v == nil {
		return
	}
	write := func(st *budget.State, decision, choice string) {
		ev := map[string]any{"budget": v.Budget, "why": v.Message}
		rule, layer := "acp-router:ledger", policy.LayerBuiltin
		if st != nil {
			b := st.Budget
			rule, layer = b.Name, b.Layer
			ev = map[string]any{"budget": b.Name, "at": b.Pos.String(), "per": b.Per, "period": ledger.PeriodKey(b.Per, v.at, v.session),
				"limit": b.Limit(), "spent": spendWords(st.Spend), "why": st.Why}
			if b.Fallback != "" && decision == "fallback" {
				ev["fallback"] = b.Fallback
			}
		}
		rec := audit.Record{Time: time.Now(), Session: v.session, Agent: v.agent, Method: MethodBudget,
			Evidence: []any{ev}, Decision: decision, Rule: &rule, Layer: layer, Source: string(policy.SourceRule),
			UserChoice: choice, PolicyHash: v.hash}
		g.write(context.Background(), rec.Time, rec) // a failure is logged by write
	}
	for _, w := range v.warn {
		write(&w, "warn", "")
	}
	v.warn = nil
	if decision != "warn" {
		write(v.by, decision, choice)
	}
}

func spendWords(s budget.Spend) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(s.Cost)) {
		parts = append(parts, ledger.FormatAmount(s.Cost[c])+" "+c)
	}
	parts = append(parts, fmt.Sprintf("%d tokens", s.Tokens), fmt.Sprintf("%d turn(s) (%d without a cost)", s.Turns, s.UnknownTurns))
	return strings.Join(parts, ", ")
}

// budgetAgentWarnings are the budgets naming agents the config does not
// have: a warning, not an error, since an org budget is written for every
// user's config. A fallback to a missing agent refuses (router).
func budgetAgentWarnings(pol *policy.Policy, cfg *config.Config) []string {
	known := map[string]bool{}
	for _, a := range cfg.Agents {
		known[a.Name] = true
	}
	var out []string
	for _, b := range pol.Budgets() {
		if b.Fallback != "" && !known[b.Fallback] {
			out = append(out, fmt.Sprintf("%s: budget %q falls back to agent %q, which this config does not have: reaching it refuses prompts instead", b.Pos, b.Name, b.Fallback))
		}
		for _, a := range b.Agents {
			if !known[a] {
				out = append(out, fmt.Sprintf("%s: budget %q counts agent %q, which this config does not have", b.Pos, b.Name, a))
			}
		}
	}
	return out
}
