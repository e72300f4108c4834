// Package budget is the pure half of the policy's budgets (issue 32): what
// a budget is, what was spent, and the decision at the start of a prompt.
// The policy package parses and layers them; the ledger package keeps the
// spend; guard decides with both.
//
// Budgets are limits on what the agents may spend, in the policy so that
// the org layer sets them and the user layer can only add its own.
//
//	budgets:
//	  - name: daily-usd              # required, unique in the layer
//	    cost: "20 USD"               # AMOUNT CURRENCY, or {amount: 20, currency: USD}
//	    tokens: 2000000              # cost and/or tokens: at least one
//	    per: day                     # session | day | week | month (calendar, local time)
//	    agents: [claude, codex]      # optional: only these agents' spend, summed; all when absent
//	    effect: refuse               # refuse (default) | ask | fallback
//	    fallback: gemini             # the agent for effect: fallback
//	    warn_at: 80%                 # a notice once spend passes it; default 80%, off to disable
//	    unknown_cost: allow          # allow (default) | refuse: agents that report no cost
//	    message: Ask your lead for more.
//
// Every budget in force applies, from every layer: a budget can only make
// a prompt stricter, never looser, so a user budget only ever lowers what
// may be spent. A user budget that could never be reached before an org
// budget (same period, covering no agent the org's does not, no limit
// below the org's) is ignored with a warning rather than an error: an org
// that lowers its budget must not stop the router of every user who
// wrote one of their own (a config error would).
//
// Of the budgets reached at the start of a prompt, the most severe effect
// decides: refuse > fallback > ask (an ask lets the user go on, a fallback
// moves the spend to another agent, a refusal stops it).
package budget

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/acp-router/acp-router/yamlpos"
)

// Effect is what a reached budget does to a new prompt.
type Effect uint8

// Budget effects, least severe first.
const (
	None Effect = iota
	Ask
	Fallback
	Refuse
)

func (e Effect) String() string {
	switch e {
	case Ask:
		return "ask"
	case Fallback:
		return "fallback"
	case Refuse:
		return "refuse"
	}
	return "none"
}

// Budget periods.
const (
	PerSession = "session"
	PerDay     = "day"
	PerWeek    = "week"
	PerMonth   = "month"
)

// Unknown cost handling.
const (
	UnknownCostAllow  = "allow"
	UnknownCostRefuse = "refuse"
)

// DefaultWarnAt is the share of a limit past which a budget warns when
// warn_at is not set.
const DefaultWarnAt = 0.8

// Money is an amount in a currency (ACP Cost: an ISO 4217 code, or another
// unit such as credits).
type Money struct {
	Amount   float64
	Currency string
}

func (m Money) String() string {
	return strconv.FormatFloat(m.Amount, 'f', -1, 64) + " " + m.Currency
}

// Budget is one entry of budgets:.
type Budget struct {
	Name  string
	Layer string
	Pos   yamlpos.Pos
	// Cost is the cost limit; nil when the budget limits only tokens.
	Cost *Money
	// Tokens is the token limit; 0 when the budget limits only cost.
	Tokens int64
	// Per is PerSession, PerDay, PerWeek or PerMonth.
	Per string
	// Agents are the agents whose spend counts; nil: every agent.
	Agents   []string
	Effect   Effect
	Fallback string
	// WarnAt is the share of a limit past which it warns; 0: never.
	WarnAt      float64
	UnknownCost string
	Message     string
}

// Applies: agent's spend counts against the budget.
func (b *Budget) Applies(agent string) bool {
	return b.Agents == nil || slices.Contains(b.Agents, agent)
}

// Ref is how messages and the audit log name the budget: NAME (LAYER,
// FILE:LINE:COL).
func (b *Budget) Ref() string { return fmt.Sprintf("%s (%s layer, %s)", b.Name, b.Layer, b.Pos) }

// Limit says the budget's limits in words: "20 USD", "2000000 tokens".
func (b *Budget) Limit() string {
	var parts []string
	if b.Cost != nil {
		parts = append(parts, b.Cost.String())
	}
	if b.Tokens > 0 {
		parts = append(parts, strconv.FormatInt(b.Tokens, 10)+" tokens")
	}
	return strings.Join(parts, " or ")
}

// Spend is what was spent in one budget's scope.
type Spend struct {
	// Cost is by currency.
	Cost   map[string]float64 `json:"cost,omitempty"`
	Tokens int64              `json:"tokens,omitempty"`
	Turns  int64              `json:"turns,omitempty"`
	// UnknownTurns are the turns that ended without a cost report.
	UnknownTurns int64 `json:"unknownTurns,omitempty"`
}

// State is one budget against its spend.
type State struct {
	Budget *Budget
	Spend  Spend
	// Share is the largest share of a limit spent (1 = reached).
	Share float64
	// Why says what reached the budget, or what passed warn_at.
	Why string
}

// Decision is what the budgets say about a new prompt.
type Decision struct {
	// Effect is the most severe effect of the budgets reached; None
	// when none is.
	Effect Effect
	// By is the budget that decided (nil with None).
	By *State
	// Reached are every budget reached, the decider first.
	Reached []State
	// Warn are the budgets past their warn_at but not reached.
	Warn []State
}

// Check decides a new prompt to agent under budgets (in layer order,
// strongest first): spent gives each budget's spend in its current period
// (the caller reads the ledger).
func Check(budgets []*Budget, agent string, spent func(*Budget) Spend) Decision {
	var d Decision
	for _, b := range budgets {
		if !b.Applies(agent) {
			continue
		}
		st := State{Budget: b, Spend: spent(b)}
		reached := st.measure()
		if !reached && b.UnknownCost == UnknownCostRefuse && b.Cost != nil && st.Spend.UnknownTurns > 0 {
			reached = true
			st.Why = fmt.Sprintf("%d turn(s) reported no cost, and the budget refuses unknown cost", st.Spend.UnknownTurns)
		}
		switch {
		case reached:
			d.Reached = append(d.Reached, st)
		case b.WarnAt > 0 && st.Share >= b.WarnAt:
			d.Warn = append(d.Warn, st)
		}
	}
	// Most severe first; among equals, the stronger layer (budgets are
	// in layer order), so the decider is stable.
	slices.SortStableFunc(d.Reached, func(a, b State) int { return cmp.Compare(b.Budget.Effect, a.Budget.Effect) })
	if len(d.Reached) > 0 {
		d.By = &d.Reached[0]
		d.Effect = d.By.Budget.Effect
	}
	return d
}

// Measure is b against spend s: its share and why, and whether a limit is
// reached (what `acp-router budget` prints).
func Measure(b *Budget, s Spend) (State, bool) {
	st := State{Budget: b, Spend: s}
	return st, st.measure()
}

// measure sets Share and Why and says whether a limit is reached.
func (st *State) measure() bool {
	b := st.Budget
	reached := false
	if b.Cost != nil {
		spent := st.Spend.Cost[b.Cost.Currency]
		share := spent / b.Cost.Amount
		st.Share = max(st.Share, share)
		if share >= 1 {
			reached = true
			st.Why = fmt.Sprintf("spent %s of %s", Money{roundCents(spent), b.Cost.Currency}, b.Cost)
		} else if st.Why == "" {
			st.Why = fmt.Sprintf("spent %s of %s", Money{roundCents(spent), b.Cost.Currency}, b.Cost)
		}
	}
	if b.Tokens > 0 {
		share := float64(st.Spend.Tokens) / float64(b.Tokens)
		why := fmt.Sprintf("used %d of %d tokens", st.Spend.Tokens, b.Tokens)
		if share >= 1 && !reached {
			reached, st.Why = true, why
		} else if share > st.Share && !reached {
			st.Why = why
		}
		st.Share = max(st.Share, share)
	}
	return reached
}

func roundCents(v float64) float64 { return math.Round(v*10000) / 10000 }

// MootBy returns the org budget always reached before b, or nil: over
// the same period, counting every agent b counts (so its spend is at least
// b's), with a limit at or below each of b's, and an effect at least as
// severe (else b still decides after the user said yes to the org's ask).
func MootBy(b *Budget, org []*Budget) *Budget {
	for _, o := range org {
		switch {
		case o.Per != b.Per, b.Effect > o.Effect,
			b.UnknownCost == UnknownCostRefuse && o.UnknownCost != UnknownCostRefuse,
			o.Agents != nil && (b.Agents == nil || slices.ContainsFunc(b.Agents, func(a string) bool { return !slices.Contains(o.Agents, a) })),
			b.Cost != nil && (o.Cost == nil || o.Cost.Currency != b.Cost.Currency || o.Cost.Amount > b.Cost.Amount),
			b.Tokens > 0 && (o.Tokens == 0 || o.Tokens > b.Tokens):
			continue
		}
		return o
	}
	return nil
}
