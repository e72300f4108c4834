package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/acp-router/acp-router/ledger"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/budget"
)

const budgetSynopsis = "acp-router budget [--config FILE] [--org-dir DIR] [--json]"

var budgetHelp = help{
	synopsis: budgetSynopsis,
	about: `Prints the budgets of the policy in force with what has been spent against each in its current
period, then what the ledger holds per period and agent. The ledger is the state directory's
budget-ledger.json, shared by every router of this OS user and every client of a served one.
Periods are calendar days, ISO weeks (from Monday) and months in local time.`,
	example: `  acp-router budget
  acp-router budget --json | jq '.budgets[] | {name, share}'
`,
}

// budgetReport is what `acp-router budget --json` prints.
type budgetReport struct {
	Ledger  string          `json:"ledger"`
	Budgets []budgetLine    `json:"budgets"`
	Periods []ledger.Period `json:"periods"`
}

type budgetLine struct {
	Name    string       `json:"name"`
	Layer   string       `json:"layer"`
	At      string       `json:"at"`
	Per     string       `json:"per"`
	Limit   string       `json:"limit"`
	Agents  []string     `json:"agents,omitempty"`
	Effect  string       `json:"effect"`
	Period  string       `json:"period,omitempty"`
	Spent   budget.Spend `json:"spent"`
	Share   float64      `json:"share"`
	Reached bool         `json:"reached"`
	Resets  string       `json:"resets,omitempty"`
}

func budgetCmd(g *globals, args []string) (int, error) {
	fs := newFlags("budget", g, "warn", budgetHelp)
	orgDir := orgDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	cfg, lp, err := loadWithPolicy(g, *orgDir)
	if err != nil {
		return 1, err
	}
	l, err := ledger.Open(cfg.StateDir)
	if err != nil {
		return 1, err
	}
	snap, err := l.Read()
	if err != nil {
		return 1, err
	}
	now := time.Now()
	rep := budgetReport{Ledger: l.Path(), Budgets: []budgetLine{}, Periods: snap.Periods()}
	if lp.Policy != nil {
		for _, b := range lp.Policy.Budgets() {
			line := budgetLine{Name: b.Name, Layer: b.Layer, At: b.Pos.String(), Per: b.Per, Limit: b.Limit(), Agents: b.Agents, Effect: b.Effect.String()}
			if b.Effect == budget.Fallback {
				line.Effect += " to " + b.Fallback
			}
			if b.Per != budget.PerSession {
				st, reached := budget.Measure(b, snap.Spend(b.Per, now, "", b.Agents))
				line.Period, line.Spent, line.Share, line.Reached = ledger.PeriodKey(b.Per, now, ""), st.Spend, st.Share, reached
				line.Resets = ledger.Resets(b.Per, now).Format(time.RFC3339)
			}
			rep.Budgets = append(rep.Budgets, line)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(rep)
	}
	printBudgets(os.Stdout, &rep)
	return 0, nil
}

func printBudgets(w io.Writer, rep *budgetReport) {
	zone, _ := time.Now().Zone()
	fmt.Fprintf(w, "ledger: %s (periods in local time, %s)\n", rep.Ledger, zone)
	if len(rep.Budgets) == 0 {
		fmt.Fprintln(w, "no budgets in the policy")
	}
	for _, b := range rep.Budgets {
		agents := "all agents"
		if b.Agents != nil {
			agents = strings.Join(b.Agents, ", ")
		}
		fmt.Fprintf(w, "budget %s (%s layer, %s): %s per %s, %s, %s\n", b.Name, b.Layer, b.At, b.Limit, b.Per, agents, b.Effect)
		if b.Per == budget.PerSession {
			fmt.Fprintln(w, "  counted in each session on its own")
			continue
		}
		state := ""
		if b.Reached {
			state = " REACHED"
		}
		resets, _ := time.Parse(time.RFC3339, b.Resets)
		fmt.Fprintf(w, "  %s: %s (%d%%)%s; resets %s\n", b.Period, spentWords(b.Spent), int(b.Share*100), state, resets.Format("Mon 2 Jan 2006 15:04"))
	}
	if len(rep.Periods) > 0 {
		fmt.Fprintln(w, "spent:")
	}
	for _, p := range rep.Periods {
		for _, a := range slices.Sorted(maps.Keys(p.Agents)) {
			fmt.Fprintf(w, "  %-16s %-12s %s\n", p.Key, a, spentWords(p.Agents[a]))
		}
	}
}

func spentWords(s budget.Spend) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(s.Cost)) {
		parts = append(parts, ledger.FormatAmount(s.Cost[c])+" "+c)
	}
	if len(parts) == 0 {
		parts = append(parts, "no cost reported")
	}
	parts = append(parts, fmt.Sprintf("%d tokens", s.Tokens), fmt.Sprintf("%d turn(s)", s.Turns))
	if s.UnknownTurns > 0 {
		parts = append(parts, fmt.Sprintf("%d without a cost", s.UnknownTurns))
	}
	return strings.Join(parts, ", ")
}

// explainBudgets is `policy explain session/prompt`: each budget against
// the ledger now, and what the budgets decide about a new prompt to agent
// (a per-session budget is counted from a new session's zero).
func explainBudgets(w io.Writer, stateDir string, pol *policy.Policy, agent string) (int, error) {
	if pol == nil || len(pol.Budgets()) == 0 {
		fmt.Fprintln(w, "decision: allow (the policy has no budgets)")
		return 0, nil
	}
	l, err := ledger.Open(stateDir)
	if err != nil {
		return 1, err
	}
	snap, err := l.Read()
	if err != nil {
		fmt.Fprintf(w, "decision: refuse (%v)\n", err)
		return 0, nil
	}
	now := time.Now()
	spent := func(b *budget.Budget) budget.Spend { return snap.Spend(b.Per, now, "", b.Agents) }
	for _, b := range pol.Budgets() {
		fmt.Fprintf(w, "budget %s (%s layer, %s): %s per %s, %s: ", b.Name, b.Layer, b.Pos, b.Limit(), b.Per, b.Effect)
		if !b.Applies(agent) {
			fmt.Fprintf(w, "does not count %s\n", agent)
			continue
		}
		st, reached := budget.Measure(b, spent(b))
		switch {
		case reached:
			fmt.Fprintf(w, "REACHED: %s\n", st.Why)
		case b.WarnAt > 0 && st.Share >= b.WarnAt:
			fmt.Fprintf(w, "warns (%d%% of the limit, warn_at %d%%): %s\n", int(st.Share*100), int(b.WarnAt*100), st.Why)
		default:
			fmt.Fprintf(w, "%d%%: %s\n", int(st.Share*100), st.Why)
		}
	}
	d := pol.CheckBudgets(agent, spent)
	if d.By == nil {
		fmt.Fprintf(w, "decision: allow (no budget of %s is reached)\n", agent)
		return 0, nil
	}
	b := d.By.Budget
	fmt.Fprintf(w, "decision: %s by budget %s (%s layer, %s)", d.Effect, b.Name, b.Layer, b.Pos)
	if d.Effect == budget.Fallback {
		fmt.Fprintf(w, " to %s", b.Fallback)
	}
	if r := ledger.Resets(b.Per, now); !r.IsZero() {
		fmt.Fprintf(w, "; resets %s", r.Format("Mon 2 Jan 2006 15:04"))
	}
	fmt.Fprintln(w)
	return 0, nil
}
