package test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestComparePolicyDeny (issue 32, part 1 point 5): /compare is decided by
// the policy like the router's other commands. With an org-style rule
// denying acp-router/compare, /compare is answered with the rule's
// message, the turn ends end_turn, neither agent is sent anything, and
// the audit log records the deny with the rule and the agents; a switch
// no rule names goes on as always, whatever the default. policy test runs
// the layer's tests: call of it, and policy explain shows it.
func TestComparePolicyDeny(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	alphaLog, betaLog := filepath.Join(logs, "alpha.log"), filepath.Join(logs, "beta.log")
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{LogFile: alphaLog}), fakeAgentYAML("beta", fakeOpts{LogFile: betaLog})},
		`default: deny
rules:
  - id: no-compare
    decision: deny
    when: {method: [acp-router/compare]}
    message: Comparisons cost double; ask your lead.
tests:
  - {call: "acp-router/compare alpha beta", expect: deny, rule: no-compare}
  - {call: "acp-router/agent beta", expect: allow}
`, "default: alpha")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	if got := promptStop(t, e, sid, "/compare alpha beta say from-both"); got != "end_turn" {
		t.Errorf("/compare denied: stopReason %q, want end_turn", got)
	}
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, "Nothing was compared: denied by no-compare: Comparisons cost double; ask your lead.") || strings.Contains(texts, "from-both") {
		t.Errorf("the editor was shown:\n%s\nwant the rule's message and nothing of the agents", texts)
	}
	for _, log := range []string{alphaLog, betaLog} {
		if n := countLines(log, "session/prompt"); n != 0 {
			t.Errorf("%s: %d prompts, want none", filepath.Base(log), n)
		}
	}
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	if texts := e.Texts(sid); !anyContains(texts, "Switched this session to beta") {
		t.Errorf("a switch no rule names under default: deny: %q", texts)
	}
	var found []string
	for _, r := range readAudit(t, auditFile) {
		if !strings.HasPrefix(r.Method, "acp-router/") {
			continue
		}
		var ev []struct {
			Agent    string `json:"agent"`
			Decision string `json:"decision"`
		}
		json.Unmarshal(r.Evidence, &ev)
		var agents []string
		for _, it := range ev {
			agents = append(agents, it.Agent+"="+it.Decision)
		}
		found = append(found, r.Method+" "+r.Decision+" "+r.rule()+" "+r.Session+" "+strings.Join(agents, ","))
	}
	if want := []string{"acp-router/compare deny no-compare " + sid + " alpha=deny,beta=deny"}; !slices.Equal(found, want) {
		t.Errorf("audit records of the router's commands %q, want %q", found, want)
	}

	code, out, errOut := runRouterCmd(t, nil, "policy", "test", "--config", cfg)
	if code != 0 || !strings.Contains(out, "2 calls in 2 tests: 2 passed") {
		t.Errorf("policy test: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runRouterCmd(t, nil, "policy", "explain", "--config", cfg, "acp-router/compare", "alpha", "beta")
	if code != 0 || !strings.Contains(out, "decision: DENY   by no-compare (user layer)") || !strings.Contains(out, "the command is not carried out") {
		t.Errorf("policy explain: exit %d\n%s%s", code, out, errOut)
	}
}
