package test

import (
	"strings"
	"testing"
)

// End-to-end tests of the stable protocol changes a router must pass on
// (notes/acp-currency.md rows 1–4 and 6, issue 15).

// TestPolicyToolName: a rule on the tool call's name (ToolCall.name, sent
// in the agent's tool_call update) decides the permission request that
// names only the tool call's id; a tool without a matching name is asked
// about as before.
func TestPolicyToolName(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: ask
rules:
  - id: no-shell
    decision: deny
    when: {tool: [Bash]}
  - id: mcp-reads
    decision: allow
    when: {tool: ["mcp__*"], kind: [read, search]}
`)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, `permission-tool {"kind":"execute","name":"Bash","title":"ls","rawInput":{"command":"ls"}}
permission-tool {"kind":"search","name":"mcp__github__search","title":"search issues"}
permission-tool {"kind":"search","name":"Grep","title":"search issues"}`, "end_turn")

	got := e.Texts(sid)
	want := []string{`"optionId":"reject"`, `"optionId":"allow"`, `"optionId":"allow"`}
	if len(got) != len(want) {
		t.Fatalf("agent said %q", got)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("agent said %q; want %s", got[i], want[i])
		}
	}
	if n := asks.count(); n != 1 {
		t.Errorf("the editor was asked %d times; want 1 (Grep matches no rule)", n)
	}
	recs := readAudit(t, auditFile)
	if len(recs) != 3 || recs[0].rule() != "no-shell" || recs[0].Decision != "deny" || recs[1].rule() != "mcp-reads" || recs[1].Decision != "allow" || recs[2].Decision != "ask" {
		t.Fatalf("audit %+v", recs)
	}
}
