package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/ledger"
)

// Budgets (issue 32), through the router binary: scripted agents report a
// cumulative cost (usage_update) and tokens (the prompt response's usage);
// the budgets decide at the start of the next prompt.

// costUpdate is a script line: a usage_update whose cumulative cost is
// amount USD.
func costUpdate(amount float64) string {
	return fmt.Sprintf(`update {"sessionUpdate":"usage_update","used":10,"size":1000,"cost":{"amount":%v,"currency":"USD"}}`, amount)
}

// budgetConfig is a config with fake agents alpha and beta, the policy
// allowing everything but with budgets, and stateDir as state_dir (""
// a temp dir).
func budgetConfig(t *testing.T, stateDir, budgets string) (cfg, auditFile string) {
	t.Helper()
	cfg, auditFile = policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})},
		"default: allow\nbudgets:\n"+indent(budgets, "  "), "default: alpha")
	if stateDir != "" {
		data, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(data), "\n", 3)
		lines[1] = "state_dir: " + yamlQuote(stateDir)
		if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, auditFile
}

func budgetAudit(t *testing.T, auditFile string) []auditRecord {
	t.Helper()
	data, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditRecord
	for line := range strings.Lines(string(data)) {
		var r auditRecord
		if json.Unmarshal([]byte(line), &r) == nil && r.Method == "acp-router/budget" {
			out = append(out, r)
		}
	}
	return out
}

// promptStop sends a prompt and returns its stopReason.
func promptStop(t *testing.T, e *Editor, sid, script string) string {
	t.Helper()
	m, err := e.Prompt(waitTimeout, sid, script)
	if err != nil {
		t.Fatal(err)
	}
	if m.Error != nil {
		t.Fatalf("session/prompt failed: %v", m.Error)
	}
	return jsonString(m.Result, "stopReason")
}

// TestBudgetRefuse: a cost budget warns past warn_at (an agent message: the
// editor has no notices), then refuses the next prompt once reached: the
// turn ends with stopReason refusal and a message naming the budget, what
// was spent and when it resets; the agent never gets the prompt. The audit
// log has the warning and the refusal with the budget's name.
func TestBudgetRefuse(t *testing.T) {
	t.Parallel()
	cfg, auditFile := budgetConfig(t, "", "- {name: daily-usd, cost: \"1 USD\", per: day, warn_at: 50%}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, costUpdate(0.6)+"\nsay first", "end_turn")
	e.MustPrompt(t, sid, costUpdate(1.2)+"\nsay second", "end_turn")
	if !anyContains(e.Texts(sid), "budget daily-usd is at 60%") {
		t.Errorf("no warning at 60%% of the budget; texts %q", e.Texts(sid))
	}
	if got := promptStop(t, e, sid, "say third"); got != "refusal" {
		t.Fatalf("stopReason %q once the budget is reached, want refusal", got)
	}
	texts := strings.Join(e.Texts(sid), "\n")
	t.Logf("the editor's messages:\n%s", texts)
	for _, want := range []string{`budget "daily-usd"`, "config.yaml:", "spent 1.2 USD of 1 USD today", "it resets ", "Prompts are refused until then."} {
		if !strings.Contains(texts, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, texts)
		}
	}
	if strings.Contains(texts, "third") {
		t.Error("the refused prompt reached the agent")
	}
	var got []string
	for _, r := range budgetAudit(t, auditFile) {
		got = append(got, r.Decision+":"+r.rule())
	}
	if strings.Join(got, " ") != "warn:daily-usd refuse:daily-usd" {
		t.Errorf("audited budget decisions %v, want [warn:daily-usd refuse:daily-usd]", got)
	}
}

func anyContains(texts []string, sub string) bool {
	for _, s := range texts {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestBudgetNotice: the warning is a notice update when the editor
// presents notices (clientCapabilities.session.notices).
func TestBudgetNotice(t *testing.T) {
	t.Parallel()
	cfg, _ := budgetConfig(t, "", "- {name: daily-usd, cost: \"1 USD\", per: day, warn_at: 50%}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{"session": map[string]any{"notices": map[string]any{}}})
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, costUpdate(0.7), "end_turn")
	e.MustPrompt(t, sid, "say next", "end_turn")
	n := e.Rec.WaitFor(t, waitTimeout, "a budget notice", func(m *Msg) bool { return m.Update() == "notice" })
	if title := jsonString(n.Params, "update", "title"); !strings.Contains(title, "budget daily-usd is at 70%") {
		t.Errorf("notice title %q", title)
	}
}

// TestBudgetTokensFallback: a token budget of agent alpha with effect
// fallback switches the session to beta with the usual handoff, and the
// prompt goes there, with a message saying so; tokens come from the prompt
// response's usage.
func TestBudgetTokensFallback(t *testing.T) {
	t.Parallel()
	cfg, auditFile := budgetConfig(t, "", "- {name: alpha-tokens, tokens: 10, per: session, agents: [alpha], effect: fallback, fallback: beta}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	if got := promptStop(t, e, sid, "usage 6 6\nsay on alpha"); got != "end_turn" {
		t.Fatalf("stopReason %q", got)
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, "used 12 of 10 tokens in this session") || !strings.Contains(texts, "This session switches to beta") {
		t.Errorf("no fallback message:\n%s", texts)
	}
	if e.Texts(sid)[len(e.Texts(sid))-1] != "beta" {
		t.Errorf("the prompt did not go to beta: %q", e.Texts(sid))
	}
	recs := budgetAudit(t, auditFile)
	if len(recs) != 1 || recs[0].Decision != "fallback" || recs[0].rule() != "alpha-tokens" || !strings.Contains(string(recs[0].Evidence), `"fallback":"beta"`) {
		t.Errorf("audit %+v", recs)
	}
}

// TestBudgetAsk: effect ask asks the editor before each prompt once
// reached: allowed, the prompt goes; rejected, the turn is a refusal. Both
// answers are audited.
func TestBudgetAsk(t *testing.T) {
	t.Parallel()
	cfg, auditFile := budgetConfig(t, "", "- {name: soft, cost: \"0.5 USD\", per: week, effect: ask}\n")
	e := StartRouter(t, cfg, nil)
	answer := "allow_once"
	asked := 0
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		asked++
		if !strings.Contains(jsonString(p, "toolCall", "title"), "Budget reached") {
			return nil, &RPCError{Code: -32603, Message: "unexpected request " + string(p)}
		}
		return choosePermission(p, answer)
	})
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, costUpdate(0.5), "end_turn")
	e.MustPrompt(t, sid, "say allowed", "end_turn")
	answer = "reject_once"
	if got := promptStop(t, e, sid, "say rejected"); got != "refusal" {
		t.Fatalf("stopReason %q after the user said no, want refusal", got)
	}
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, "allowed") || strings.Contains(texts, "say rejected") || asked != 2 {
		t.Errorf("asked %d times; texts:\n%s", asked, texts)
	}
	var got []string
	for _, r := range budgetAudit(t, auditFile) {
		got = append(got, r.Decision+":"+r.UserChoice)
	}
	if strings.Join(got, " ") != "ask:allow_once ask:reject_once" {
		t.Errorf("audited %v", got)
	}
}

// TestBudgetSharedLedger: two routers of one user (one state directory)
// share the ledger, and it survives the router: what one spent refuses
// the other's prompt, and a router started afterwards.
func TestBudgetSharedLedger(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	budgets := "- {name: daily-usd, cost: \"1 USD\", per: day}\n"
	cfgA, _ := budgetConfig(t, state, budgets)
	cfgB, _ := budgetConfig(t, state, budgets)
	a, b := StartRouter(t, cfgA, nil), StartRouter(t, cfgB, nil)
	a.Initialize(t, map[string]any{})
	b.Initialize(t, map[string]any{})
	sa, sb := a.NewSession(t, t.TempDir()), b.NewSession(t, t.TempDir())
	b.MustPrompt(t, sb, "say b before", "end_turn")
	a.MustPrompt(t, sa, costUpdate(1.5), "end_turn")
	// A router books what its agents report off their read loops: the
	// other router sees it once it is in the ledger, within milliseconds,
	// not necessarily when the first router's turn has ended.
	l, err := ledger.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		snap, err := l.Read()
		if err == nil && snap.Spend("day", time.Now(), sa, nil).Cost["USD"] >= 1.5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first router's 1.5 USD not in the ledger 5 s after its turn (%v)", err)
		}
	}
	if got := promptStop(t, b, sb, "say b after"); got != "refusal" {
		t.Fatalf("the second router's stopReason %q, want refusal (the first spent 1.5 USD)", got)
	}
	a.CloseStdin()
	a.Wait(10 * time.Second)
	c := StartRouter(t, cfgA, nil)
	c.Initialize(t, map[string]any{})
	sc := c.NewSession(t, t.TempDir())
	if got := promptStop(t, c, sc, "say c"); got != "refusal" {
		t.Fatalf("a router started later: stopReason %q, want refusal", got)
	}
	if _, err := os.Stat(filepath.Join(state, "budget-ledger.json")); err != nil {
		t.Error(err)
	}
}

// TestBudgetCommands: `acp-router budget` prints each budget with what was
// spent in its period, and the ledger per period and agent (--json too);
// `policy explain session/prompt` gives the budgets' decision now;
// `policy test` runs the budget tests (prompt:) of the policy.
func TestBudgetCommands(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	cfg, _ := budgetConfig(t, state, `- {name: daily-usd, cost: "1 USD", per: day, agents: [alpha]}
- {name: weekly-tokens, tokens: 1000000, per: week}
`)
	data, _ := os.ReadFile(cfg)
	tests := `  tests:
    - {prompt: alpha, spent: {daily-usd: "1 USD"}, expect: refuse, budget: daily-usd}
    - {prompt: beta, spent: {daily-usd: "1 USD"}, expect: allow}
`
	withTests := strings.Replace(string(data), "audit:", tests+"audit:", 1)
	if err := os.WriteFile(cfg, []byte(withTests), 0o644); err != nil {
		t.Fatal(err)
	}
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	if got := promptStop(t, e, sid, costUpdate(1.25)+"\nusage 100 20"); got != "end_turn" {
		t.Fatalf("stopReason %q", got)
	}
	e.CloseStdin()
	e.Wait(10 * time.Second)

	code, out, errOut := runRouterCmd(t, nil, "budget", "--config", cfg)
	if code != 0 {
		t.Fatalf("budget: exit %d: %s", code, errOut)
	}
	t.Logf("acp-router budget:\n%s", out)
	for _, want := range []string{"budget daily-usd (user layer, " + cfg + ":", "1 USD per day, alpha, refuse",
		"1.25 USD, 120 tokens, 1 turn(s) (125%) REACHED", "day:", "alpha        1.25 USD, 120 tokens, 1 turn(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("budget output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = runRouterCmd(t, nil, "budget", "--config", cfg, "--json")
	var rep struct {
		Budgets []struct {
			Name    string  `json:"name"`
			Share   float64 `json:"share"`
			Reached bool    `json:"reached"`
		} `json:"budgets"`
		Periods []struct {
			Period string `json:"period"`
		} `json:"periods"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Budgets) != 2 || !rep.Budgets[0].Reached || len(rep.Periods) != 3 {
		t.Errorf("budget --json: exit %d %s\n%s", code, errOut, out)
	}
	code, out, _ = runRouterCmd(t, nil, "policy", "explain", "--config", cfg, "--agent", "alpha", "session/prompt")
	t.Logf("acp-router policy explain --agent alpha session/prompt:\n%s", out)
	if code != 0 || !strings.Contains(out, "decision: refuse by budget daily-usd (user layer, "+cfg+":") || !strings.Contains(out, "REACHED: spent 1.25 USD of 1 USD") {
		t.Errorf("policy explain session/prompt for alpha: exit %d\n%s", code, out)
	}
	code, out, _ = runRouterCmd(t, nil, "policy", "explain", "--config", cfg, "--agent", "beta", "session/prompt")
	if code != 0 || !strings.Contains(out, "decision: allow") || !strings.Contains(out, "does not count beta") {
		t.Errorf("policy explain session/prompt for beta: exit %d\n%s", code, out)
	}
	code, out, _ = runRouterCmd(t, nil, "policy", "test", "--config", cfg)
	if code != 0 || !strings.Contains(out, "2 calls in 2 tests: 2 passed, 0 failed") {
		t.Errorf("policy test: exit %d\n%s", code, out)
	}
}

// TestBudgetCheckWarnsUnknownAgent: check warns about a budget whose
// fallback or agents the config does not have.
func TestBudgetCheckWarnsUnknownAgent(t *testing.T) {
	t.Parallel()
	cfg, _ := budgetConfig(t, "", "- {name: soft, cost: \"1 USD\", per: day, agents: [alpha, gamma], effect: fallback, fallback: nosuch}\n")
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, errOut)
	}
	for _, want := range []string{`budget "soft" falls back to agent "nosuch", which this config does not have`, `budget "soft" counts agent "gamma"`} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("check does not warn %q:\n%s%s", want, out, errOut)
		}
	}
}

// TestBudgetBadUsage: a usage_update with a negative, decreasing or absurd
// cost is ignored (and logged), never lowering spend nor raising it.
func TestBudgetBadUsage(t *testing.T) {
	t.Parallel()
	cfg, _ := budgetConfig(t, "", "- {name: daily-usd, cost: \"1 USD\", per: day, warn_at: 50%}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, costUpdate(0.6), "end_turn")
	e.MustPrompt(t, sid, costUpdate(-5)+"\n"+costUpdate(0.3)+"\n"+costUpdate(5e12), "end_turn")
	// 0.6 spent: a warning, not a refusal; and the decrease to 0.3 did
	// not lower it (else no warning).
	if got := promptStop(t, e, sid, "say still"); got != "end_turn" {
		t.Fatalf("stopReason %q: bad usage values raised the spend", got)
	}
	if !anyContains(e.Texts(sid), "budget daily-usd is at 60%") {
		t.Errorf("spend not 0.6 USD after bad values; texts %q", e.Texts(sid))
	}
	// From the decreased total of 0.3, a report of 1.0 adds 0.7: 1.3.
	e.MustPrompt(t, sid, costUpdate(1.0), "end_turn")
	if got := promptStop(t, e, sid, "say over"); got != "refusal" {
		t.Fatalf("stopReason %q at 1.3 USD, want refusal", got)
	}
	if !strings.Contains(e.Stderr(), "usage report ignored") {
		t.Error("the ignored values were not logged")
	}
}

// TestBudgetGemini: Gemini CLI (against the fake Gemini API, which reports
// 8 tokens a turn: Gemini CLI puts them in the prompt response's
// _meta.quota.token_count) reaches a token budget: its next prompt is
// refused, naming the budget.
func TestBudgetGemini(t *testing.T) {
	t.Parallel()
	bin := needGemini(t)
	fake := startFakeGemini(t)
	cfg, auditFile := policyYAML(t, []string{geminiAgentYAML(bin, geminiEnv(geminiHome(t), fake))},
		"default: allow\nbudgets:\n  - {name: gemini-tokens, tokens: 8, per: day, agents: [gemini]}\n", "default: gemini")
	e := StartRouter(t, cfg, nil)
	e.Handle("session/request_permission", AllowFirst)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	s := fake.Script(geminiScript{Text: []string{"Hello from Gemini."}})
	m, err := e.Prompt(waitTimeout, sid, "Say hello "+s.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	s2 := fake.Script(geminiScript{Text: []string{"Never said."}})
	m, err = e.Prompt(waitTimeout, sid, "Say more "+s2.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "refusal")
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, `budget "gemini-tokens"`) || !strings.Contains(texts, "used 8 of 8 tokens today") || strings.Contains(texts, "Never said.") {
		t.Errorf("texts:\n%s", texts)
	}
	if n := s2.Streams(); n != 0 {
		t.Errorf("the refused prompt reached the model (%d streams)", n)
	}
	recs := budgetAudit(t, auditFile)
	if len(recs) != 1 || recs[0].Decision != "refuse" || recs[0].Agent != "gemini" {
		t.Errorf("audit %+v", recs)
	}
}

// TestBudgetConcurrentSessions: two sessions that cross the limit together
// each finish the turn they started under it (a budget never stops a turn
// midway), so together they overspend by at most one turn each; every
// later prompt of either is refused.
func TestBudgetConcurrentSessions(t *testing.T) {
	t.Parallel()
	cfg, _ := budgetConfig(t, "", "- {name: daily-usd, cost: \"1 USD\", per: day, warn_at: off}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	s1, s2 := e.NewSession(t, t.TempDir()), e.NewSession(t, t.TempDir())
	stops := make(chan string, 2)
	for _, sid := range []string{s1, s2} {
		go func() {
			m, err := e.Prompt(waitTimeout, sid, costUpdate(0.9)+"\nsleep 300ms\nsay done")
			if err != nil || m.Error != nil {
				stops <- fmt.Sprint("error ", err, m)
				return
			}
			stops <- jsonString(m.Result, "stopReason")
		}()
	}
	for range 2 {
		if got := <-stops; got != "end_turn" {
			t.Fatalf("a turn started under the limit ended %q", got)
		}
	}
	for _, sid := range []string{s1, s2} {
		if got := promptStop(t, e, sid, "say more"); got != "refusal" {
			t.Errorf("session %s after 1.8 USD spent: stopReason %q, want refusal", sid, got)
		}
	}
}
