package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/policy/extract"
)

// TestAgentModes: the org layer's agent_modes extends the built-in table
// of the agents' modes: a new agent is known (its self-approving modes
// denied, its asking modes asking), a built-in agent gains a mode, and a
// mode cannot be made both to ask and to approve by itself.
func TestAgentModes(t *testing.T) {
	acme := AgentID{Name: "acme-agent"}
	plain := mustCompile(t, mustParse(t, "p.yaml", "default: ask\n"))
	if st := plain.Agent(acme); st.Problem == "" {
		t.Fatalf("without agent_modes acme is known: %+v", st)
	}
	if plain.ModeDenied(acme, "turbo") || plain.ModeDenied(AgentID{Name: "claude"}, "yolo-edits") {
		t.Fatal("without agent_modes turbo or claude's yolo-edits is denied")
	}
	org := mustParse(t, "10-agents.yaml", `default: ask
agent_modes:
  acme:
    title: Acme Agent 3
    self_approving:
      turbo: {kinds: [edit, execute], how: approves edits and commands}
    asking: [safe]
    to_ask: start it with --safe
  claude:
    self_approving:
      yolo-edits: {kinds: all, how: nothing is asked}
`)
	p := mustCompile(t, org)
	if st := p.Agent(acme); st.Problem != "" || st.Family != "acme" {
		t.Errorf("acme: %+v, want known, asking", st)
	}
	v := p.Mode(acme, "turbo")
	if !v.Denied || v.Rule != RuleSelfApprovingMode || !slices.Equal(v.SelfApproving, []extract.Kind{extract.KindEdit, extract.KindExecute}) {
		t.Errorf("acme:turbo %+v, want denied as self-approving edit and execute", v)
	}
	if v := p.Mode(acme, "safe"); v.Denied || v.Why() != "it asks" {
		t.Errorf("acme:safe %+v (%s), want allowed: it asks", v, v.Why())
	}
	if p.ModeTarget(acme, []string{"turbo", "safe"}) != "safe" {
		t.Error("acme's target mode is not safe")
	}
	claude := AgentID{Name: "claude", Info: "claude-agent-acp"}
	if !p.ModeDenied(claude, "yolo-edits") || !p.ModeDenied(claude, "bypassPermissions") || p.ModeDenied(claude, "default") {
		t.Error("claude: yolo-edits and bypassPermissions must be denied, default allowed")
	}
	if text := p.ExplainModes(acme); !strings.Contains(text, "Acme Agent 3") || !strings.Contains(text, "turbo") {
		t.Errorf("ExplainModes:\n%s", text)
	}
	if selfApproving(acme, "turbo") != nil {
		t.Error("SelfApproving, the built-in table's, knows acme")
	}
	if p.Hash() == plain.Hash() {
		t.Error("the hash ignores agent_modes")
	}
	// A second org file adds to the same agent.
	more := mustParse(t, "20-more.yaml", "agent_modes:\n  acme:\n    asking: [careful]\n")
	if err := org.Merge(more); err != nil {
		t.Fatal(err)
	}
	if v := mustCompile(t, org).Mode(acme, "careful"); v.Denied || v.Why() != "it asks" {
		t.Errorf("acme:careful after Merge: %+v", v)
	}
	// claude's acceptEdits approves by itself: it cannot be declared asking.
	bad := mustParse(t, "30-bad.yaml", "agent_modes:\n  claude:\n    asking: [acceptEdits]\n")
	if _, err := Compile(bad); err == nil || !strings.Contains(err.Error(), `30-bad.yaml:2:3: agent_modes: claude: "acceptEdits" would both ask and approve by itself`) {
		t.Errorf("asking acceptEdits: %v", err)
	}
}
