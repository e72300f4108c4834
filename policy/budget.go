package policy

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/policy/budget"
	"github.com/acp-router/acp-router/yamlpos"
)

// Budgets returns the budgets in force, strongest layer first (the
// schema and the semantics: package budget).
func (p *Policy) Budgets() []*budget.Budget { return p.budgets }

// CheckBudgets decides a new prompt to agent under the budgets in force.
func (p *Policy) CheckBudgets(agent string, spent func(*budget.Budget) budget.Spend) budget.Decision {
	return budget.Check(p.budgets, agent, spent)
}

// budgetKeys are the keys of a budgets: entry.
var budgetKeys = []string{"name", "cost", "tokens", "per", "agents", "effect", "fallback", "warn_at", "unknown_cost", "message"}

var (
	amountRe   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	currencyRe = regexp.MustCompile(`^([A-Z]{3}|[a-z][a-z_-]{3,31})$`)
	agentRe    = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// budgets reads a budgets: list.
func (p *parser) budgets(n *yaml.Node, layer string) []*budget.Budget {
	var out []*budget.Budget
	seen := map[string]*budget.Budget{}
	for i, item := range p.list("budgets", n, true) {
		path := fmt.Sprintf("budgets[%d]", i)
		if b := p.budget(path, item); b != nil {
			if first := seen[b.Name]; first != nil {
				p.errorf(item, path+".name", "duplicate budget name %q (first at line %d)", b.Name, first.Pos.Line)
				continue
			}
			seen[b.Name] = b
			b.Layer = layer
			out = append(out, b)
		}
	}
	return out
}

func (p *parser) budget(path string, n *yaml.Node) *budget.Budget {
	f := p.fields(path, n, budgetKeys)
	if f == nil {
		return nil
	}
	before := len(p.errs)
	b := &budget.Budget{Pos: p.pos(n), Per: budget.PerDay, Effect: budget.Refuse, WarnAt: budget.DefaultWarnAt, UnknownCost: budget.UnknownCostAllow}
	p.require(path, n, f, "name", "per")
	if v := f["name"]; v != nil {
		if s, ok := p.str(path+".name", v); ok {
			if !ruleID.MatchString(s) {
				p.errorf(v, path+".name", "invalid budget name %q: use letters, digits, '.', '_' and '-'", s)
			}
			b.Name = s
		}
	}
	if v := f["cost"]; v != nil {
		b.Cost = p.money(path+".cost", v)
	}
	if v := f["tokens"]; v != nil {
		t, err := strconv.ParseInt(strings.ReplaceAll(v.Value, "_", ""), 10, 64)
		if v.Kind != yaml.ScalarNode || err != nil || t <= 0 {
			p.errorf(v, path+".tokens", "must be a whole number of tokens above 0, got %q", v.Value)
		}
		b.Tokens = t
	}
	if f["cost"] == nil && f["tokens"] == nil {
		p.errorf(n, path, "a budget needs a limit: cost (e.g. \"20 USD\") and/or tokens")
	}
	if v := f["per"]; v != nil {
		if s, ok := p.str(path+".per", v); ok {
			switch s {
			case budget.PerSession, budget.PerDay, budget.PerWeek, budget.PerMonth:
				b.Per = s
			default:
				p.errorf(v, path+".per", "must be session, day, week or month, got %q%s", s, yamlpos.Suggest(s, []string{budget.PerSession, budget.PerDay, budget.PerWeek, budget.PerMonth}))
			}
		}
	}
	if v := f["agents"]; v != nil {
		b.Agents = []string{}
		for i, item := range p.list(path+".agents", v, true) {
			ip := fmt.Sprintf("%s.agents[%d]", path, i)
			if s, ok := p.str(ip, item); ok {
				if !agentRe.MatchString(s) {
					p.errorf(item, ip, "not an agent name ([a-z0-9-]+): %q", s)
				}
				b.Agents = append(b.Agents, s)
			}
		}
	}
	if v := f["effect"]; v != nil {
		if s, ok := p.str(path+".effect", v); ok {
			switch s {
			case "refuse":
				b.Effect = budget.Refuse
			case "ask":
				b.Effect = budget.Ask
			case "fallback":
				b.Effect = budget.Fallback
			default:
				p.errorf(v, path+".effect", "must be refuse, ask or fallback, got %q%s", s, yamlpos.Suggest(s, []string{"refuse", "ask", "fallback"}))
			}
		}
	}
	if v := f["fallback"]; v != nil {
		if s, ok := p.str(path+".fallback", v); ok {
			if !agentRe.MatchString(s) {
				p.errorf(v, path+".fallback", "not an agent name ([a-z0-9-]+): %q", s)
			}
			b.Fallback = s
		}
		if b.Effect != budget.Fallback {
			p.errorf(v, path+".fallback", "only a budget with effect: fallback has a fallback agent (this one's is %s)", b.Effect)
		}
	} else if b.Effect == budget.Fallback {
		p.errorf(n, path, "effect: fallback needs fallback: AGENT")
	}
	if v := f["warn_at"]; v != nil {
		b.WarnAt = p.share(path+".warn_at", v)
	}
	if v := f["unknown_cost"]; v != nil {
		if s, ok := p.str(path+".unknown_cost", v); ok {
			switch s {
			case budget.UnknownCostAllow, budget.UnknownCostRefuse:
				b.UnknownCost = s
			default:
				p.errorf(v, path+".unknown_cost", "must be allow or refuse, got %q", s)
			}
			if b.Cost == nil && f["cost"] == nil {
				p.errorf(v, path+".unknown_cost", "only a budget with a cost limit has unknown cost")
			}
		}
	}
	if v := f["message"]; v != nil {
		b.Message, _ = p.str(path+".message", v)
	}
	if len(p.errs) > before {
		return nil
	}
	return b
}

// money reads "AMOUNT CURRENCY" or {amount, currency}.
func (p *parser) money(path string, n *yaml.Node) *budget.Money {
	var amount, currency string
	var an, cn *yaml.Node = n, n
	switch n.Kind {
	case yaml.MappingNode:
		f := p.fields(path, n, []string{"amount", "currency"})
		if f == nil {
			return nil
		}
		p.require(path, n, f, "amount", "currency")
		if f["amount"] == nil || f["currency"] == nil {
			return nil
		}
		an, cn = f["amount"], f["currency"]
		amount, currency = an.Value, cn.Value
		if an.Kind != yaml.ScalarNode || cn.Kind != yaml.ScalarNode {
			p.errorf(n, path, "amount and currency must be scalars")
			return nil
		}
	case yaml.ScalarNode:
		fields := strings.Fields(n.Value)
		if len(fields) != 2 {
			p.errorf(n, path, `must be "AMOUNT CURRENCY" (e.g. "20 USD", "500 credits"), got %q`, n.Value)
			return nil
		}
		amount, currency = fields[0], fields[1]
	default:
		p.errorf(n, path, `must be "AMOUNT CURRENCY" or {amount, currency}, got %s`, yamlpos.Describe(n))
		return nil
	}
	v, err := strconv.ParseFloat(amount, 64)
	switch {
	case !amountRe.MatchString(amount) || err != nil:
		p.errorf(an, path, "malformed amount %q: a decimal number such as 20 or 12.50", amount)
		return nil
	case v <= 0 || v > 1e9:
		p.errorf(an, path, "amount %q must be above 0 and at most 1000000000", amount)
		return nil
	}
	if !currencyRe.MatchString(currency) {
		hint := ""
		if len(currency) == 3 {
			hint = fmt.Sprintf(" (ISO 4217 codes are upper case: %q)", strings.ToUpper(currency))
		}
		p.errorf(cn, path, "malformed currency %q: an ISO 4217 code such as USD, or a unit such as credits%s", currency, hint)
		return nil
	}
	return &budget.Money{Amount: v, Currency: currency}
}

// share reads "80%" or 0.8; "off" (or 0) disables.
func (p *parser) share(path string, n *yaml.Node) float64 {
	s := strings.TrimSpace(n.Value)
	if n.Kind == yaml.ScalarNode && (s == "off" || s == "0" || s == "0%") {
		return 0
	}
	var v float64
	var err error
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		v, err = strconv.ParseFloat(strings.TrimSpace(pct), 64)
		v /= 100
	} else {
		v, err = strconv.ParseFloat(s, 64)
	}
	if n.Kind != yaml.ScalarNode || err != nil || math.IsNaN(v) || v <= 0 || v >= 1 {
		p.errorf(n, path, "must be a share of the limit below 100%% (e.g. 80%% or 0.8), or off; got %s", yamlpos.Describe(n))
		return 0
	}
	return v
}

// compileBudgets puts the budgets of the layers in force, strongest
// first, and ignores (with a warning) the user budgets an org budget
// makes moot.
func (p *Policy) compileBudgets() {
	var org []*budget.Budget
	for _, l := range p.layers {
		for _, b := range l.Budgets {
			if l.Name != LayerOrg {
				if o := budget.MootBy(b, org); o != nil {
					p.ignoredBudgets = append(p.ignoredBudgets, b)
					p.warnings = append(p.warnings, fmt.Sprintf("%s: budget %q is ignored: the org budget %q (%s) is reached first (a user budget can only lower what may be spent)",
						b.Pos, b.Name, o.Name, o.Pos))
					continue
				}
				for _, o := range org {
					if o.Name == b.Name {
						p.warnings = append(p.warnings, fmt.Sprintf("%s: budget name %q is also used by the org layer (%s); both apply, messages name the layer",
							b.Pos, b.Name, o.Pos))
					}
				}
			}
			p.budgets = append(p.budgets, b)
		}
		if l.Name == LayerOrg {
			org = append(org, l.Budgets...)
		}
	}
}

// budgetTest is a tests: entry about budgets: a prompt to an agent, what
// was spent against which budget, and what the budgets must decide:
//
//	tests:
//	  - {prompt: claude, spent: {daily-usd: "20 USD"}, expect: refuse, budget: daily-usd}
//	  - {prompt: claude, spent: {daily-usd: ["12 USD", "3 unknown"]}, expect: warn, budget: daily-usd}
//	  - {prompt: codex, expect: allow}
//
// spent gives each budget's spend in its period: "AMOUNT CURRENCY", "N
// tokens", "N unknown" (turns that reported no cost), or a list of them.
// expect is allow (no budget reached, none warns), warn (budget: warns),
// ask, fallback or refuse (budget: decides).
type budgetTest struct {
	Agent  string
	Spent  map[string]budget.Spend
	Expect string
	Budget string
}

func (p *parser) budgetTest(path string, n *yaml.Node, f map[string]*yaml.Node, t *TestCase) *TestCase {
	before := len(p.errs)
	bt := &budgetTest{Spent: map[string]budget.Spend{}}
	p.require(path, n, f, "expect")
	for _, k := range []string{"call", "rule", "answered_by", "mode", "cwd", "roots", "files", "symlinks", "agent"} {
		if v := f[k]; v != nil {
			p.errorf(v, path+"."+k, "a budget test (prompt:) has no %s", k)
		}
	}
	bt.Agent, _ = p.str(path+".prompt", f["prompt"])
	if v := f["expect"]; v != nil {
		if s, ok := p.str(path+".expect", v); ok {
			switch s {
			case "allow", "warn", "ask", "fallback", "refuse":
				bt.Expect = s
			default:
				p.errorf(v, path+".expect", "a budget test expects allow, warn, ask, fallback or refuse, got %q", s)
			}
			if s != "allow" && f["budget"] == nil {
				p.errorf(v, path+".expect", "say which budget: budget: NAME")
			}
		}
	}
	if v := f["budget"]; v != nil {
		bt.Budget, _ = p.str(path+".budget", v)
	}
	if v := f["spent"]; v != nil {
		pairs, ok := yamlpos.Mapping(path+".spent", v, p.errorf)
		for _, kv := range pairs {
			if !ok {
				break
			}
			kp := path + ".spent." + kv.Key.Value
			var sp budget.Spend
			for _, item := range p.list(kp, kv.Val, true) {
				s, ok := p.str(kp, item)
				if !ok {
					continue
				}
				fields := strings.Fields(s)
				if len(fields) != 2 {
					p.errorf(item, kp, `expected "AMOUNT CURRENCY", "N tokens" or "N unknown", got %q`, s)
					continue
				}
				switch fields[1] {
				case "tokens", "unknown":
					v, err := strconv.ParseInt(fields[0], 10, 64)
					if err != nil || v < 0 {
						p.errorf(item, kp, "malformed count %q", fields[0])
						continue
					}
					if fields[1] == "tokens" {
						sp.Tokens += v
					} else {
						sp.UnknownTurns += v
					}
				default:
					m := p.money(kp, item)
					if m == nil {
						continue
					}
					if sp.Cost == nil {
						sp.Cost = map[string]float64{}
					}
					sp.Cost[m.Currency] += m.Amount
				}
			}
			bt.Spent[kv.Key.Value] = sp
		}
	}
	if len(p.errs) > before {
		return nil
	}
	t.budget = bt
	return t
}

// runBudgetTest decides a budget test against the budgets of p.
func (p *Policy) runBudgetTest(t *TestCase) TestResult {
	bt := t.budget
	res := TestResult{Case: t}
	for name := range bt.Spent {
		if !slices.ContainsFunc(p.budgets, func(b *budget.Budget) bool { return b.Name == name }) {
			res.Problem = fmt.Sprintf("spent names no budget in force: %q", name)
			return res
		}
	}
	if bt.Budget != "" && !slices.ContainsFunc(p.budgets, func(b *budget.Budget) bool { return b.Name == bt.Budget }) {
		res.Problem = fmt.Sprintf("budget %q is not in force (its layer, or those above it)", bt.Budget)
		return res
	}
	d := p.CheckBudgets(bt.Agent, func(b *budget.Budget) budget.Spend { return bt.Spent[b.Name] })
	got, by := "allow", ""
	switch {
	case d.By != nil:
		got, by = d.Effect.String(), d.By.Budget.Name
	case len(d.Warn) > 0:
		got = "warn"
		for _, w := range d.Warn {
			if w.Budget.Name == bt.Budget || by == "" {
				by = w.Budget.Name
			}
		}
	}
	describe := got
	if by != "" {
		describe += " by budget " + by
	}
	switch {
	case got != bt.Expect:
		res.Problem = fmt.Sprintf("expected %s, got %s", bt.Expect, describe)
	case bt.Expect != "allow" && by != bt.Budget:
		res.Problem = fmt.Sprintf("expected %s by budget %s, got %s", bt.Expect, bt.Budget, describe)
	default:
		res.Pass = true
	}
	return res
}
