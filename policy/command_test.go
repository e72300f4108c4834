package policy

import (
	"strings"
	"testing"

	"github.com/acp-router/acp-router/policy/extract"
)

// TestCommandRulesApartFromAgents: a rule about the router's commands is
// not one about what agents ask: it is kept out of the warnings about
// modes that approve by themselves (its deny is enforced whatever the
// agent's mode), it never decides an agent's request, and NamesCommand
// tells which commands a rule names; undecodable params are refused.
func TestCommandRulesApartFromAgents(t *testing.T) {
	p := mustCompile(t, mustParse(t, "org.yaml", `allow_modes: ["claude:acceptEdits"]
rules:
  - {id: no-compare, decision: deny, when: {method: [acp-router/compare]}}
  - {id: no-claude-reads, decision: deny, when: {agent: [claude], kind: [read]}}
`))
	for _, w := range p.Warnings(AgentID{Name: "claude"}) {
		if strings.Contains(w, "no-compare") {
			t.Errorf("a warning names the command rule: %s", w)
		}
	}
	if d := p.Decide(terminal("ls")); d.Rule == "no-compare" {
		t.Errorf("an agent's request decided by a command rule: %s", Explain(&d))
	}
	if !p.NamesCommand(extract.MethodCompare) || p.NamesCommand(extract.MethodSwitch) || p.NamesCommand("terminal/create") {
		t.Error("NamesCommand: want compare only")
	}
	for _, params := range []string{`{"agents": []}`, `{"agents": [""]}`, `{"agents": "claude"}`, `[`} {
		d := p.Decide(&extract.Request{Method: extract.MethodSwitch, Params: []byte(params)})
		if d.Effect != Deny || d.Rule != RuleRefused {
			t.Errorf("params %s: %s", params, Explain(&d))
		}
	}
}
