package policy

import (
	"strings"
	"testing"

	"github.com/acp-router/acp-router/policy/budget"
)

const orgBudgets = `
budgets:
  - name: daily-usd
    cost: "20 USD"
    per: day
  - name: claude-tokens
    tokens: 1000
    per: session
    agents: [claude]
    effect: fallback
    fallback: gemini
    warn_at: 50%
`

// TestBudgetLayers: every budget of every layer applies; a user budget
// only adds a limit, and one an org budget always reaches first is
// ignored with a warning naming both (it could never lower anything).
func TestBudgetLayers(t *testing.T) {
	org := mustParse(t, "/etc/acp-router/policy.d/org.yaml", orgBudgets)
	user := mustUser(t, `
budgets:
  - name: mine
    cost: {amount: 5, currency: USD}
    per: day
    effect: ask
  - name: looser
    cost: "50 USD"
    per: day
  - name: other-currency
    cost: "50 EUR"
    per: day
`)
	p := mustCompile(t, org, user)
	var names []string
	for _, b := range p.Budgets() {
		names = append(names, b.Layer+":"+b.Name)
	}
	if got, want := strings.Join(names, " "), "org:daily-usd org:claude-tokens user:mine user:other-currency"; got != want {
		t.Errorf("budgets in force = %s, want %s", got, want)
	}
	w := strings.Join(p.Warnings(), "\n")
	if !strings.Contains(w, `config.yaml:7:5: budget "looser" is ignored: the org budget "daily-usd" (/etc/acp-router/policy.d/org.yaml:3:5) is reached first`) {
		t.Errorf("warnings do not report the looser user budget:\n%s", w)
	}
	if mustCompile(t, org).Hash() == p.Hash() {
		t.Error("the user's budgets do not change the policy hash")
	}
}

// TestCheckBudgets: the most severe effect of the budgets reached
// decides; a budget counts only its agents; warn_at warns below the limit;
// unknown_cost: refuse reaches a cost budget when turns reported no cost.
func TestCheckBudgets(t *testing.T) {
	org := mustParse(t, "org.yaml", orgBudgets)
	user := mustUser(t, `
budgets:
  - name: mine
    cost: "5 USD"
    per: day
    effect: ask
  - name: measured
    cost: "100 credits"
    per: week
    unknown_cost: refuse
    warn_at: off
`)
	p := mustCompile(t, org, user)
	type spends map[string]budget.Spend
	usd := func(v float64) map[string]float64 { return map[string]float64{"USD": v} }
	cases := []struct {
		name   string
		agent  string
		spent  spends
		effect budget.Effect
		by     string
		warn   []string
	}{
		{"nothing spent", "claude", nil, budget.None, "", nil},
		{"user ask", "claude", spends{"mine": {Cost: usd(5)}, "daily-usd": {Cost: usd(5)}}, budget.Ask, "mine", nil},
		{"org refuse wins over ask", "codex", spends{"mine": {Cost: usd(21)}, "daily-usd": {Cost: usd(21)}}, budget.Refuse, "daily-usd", nil},
		{"fallback over ask", "claude", spends{"mine": {Cost: usd(6)}, "claude-tokens": {Tokens: 1000}}, budget.Fallback, "claude-tokens", nil},
		{"agents filter", "codex", spends{"claude-tokens": {Tokens: 5000}}, budget.None, "", nil},
		{"warn at", "claude", spends{"claude-tokens": {Tokens: 600}, "daily-usd": {Cost: usd(17)}}, budget.None, "", []string{"daily-usd", "claude-tokens"}},
		{"other currency does not count", "claude", spends{"daily-usd": {Cost: map[string]float64{"EUR": 100}}}, budget.None, "", nil},
		{"unknown cost refused", "codex", spends{"measured": {UnknownTurns: 1}}, budget.Refuse, "measured", nil},
		{"unknown cost allowed", "codex", spends{"daily-usd": {UnknownTurns: 3}}, budget.None, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.CheckBudgets(c.agent, func(b *budget.Budget) budget.Spend { return c.spent[b.Name] })
			by := ""
			if d.By != nil {
				by = d.By.Budget.Name
			}
			if d.Effect != c.effect || by != c.by {
				t.Errorf("effect %s by %q, want %s by %q", d.Effect, by, c.effect, c.by)
			}
			var warn []string
			for _, w := range d.Warn {
				warn = append(warn, w.Budget.Name)
			}
			if strings.Join(warn, ",") != strings.Join(c.warn, ",") {
				t.Errorf("warn %v, want %v", warn, c.warn)
			}
		})
	}
}

// TestBudgetPolicyTests: tests: entries with prompt: decide the budgets
// like a prompt would; a wrong expectation fails with what was decided.
func TestBudgetPolicyTests(t *testing.T) {
	org := mustParse(t, "org.yaml", orgBudgets+`
tests:
  - {prompt: claude, spent: {daily-usd: "20 USD"}, expect: refuse, budget: daily-usd}
  - {prompt: claude, spent: {claude-tokens: "1000 tokens"}, expect: fallback, budget: claude-tokens}
  - {prompt: claude, spent: {claude-tokens: ["600 tokens"]}, expect: warn, budget: claude-tokens}
  - {prompt: codex, spent: {claude-tokens: "5000 tokens"}, expect: allow}
  - {prompt: claude, spent: {daily-usd: "19 USD"}, expect: refuse, budget: daily-usd}
  - {prompt: claude, spent: {nosuch: "1 USD"}, expect: allow}
`)
	p := mustCompile(t, org)
	var got []string
	for _, r := range p.RunTests() {
		if r.Pass {
			got = append(got, "pass")
		} else {
			got = append(got, r.Problem)
		}
	}
	want := []string{"pass", "pass", "pass", "pass", "expected refuse, got warn by budget daily-usd",
		`spent names no budget in force: "nosuch"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
