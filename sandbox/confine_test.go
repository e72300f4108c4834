package sandbox

import (
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

// TestConfinerModes: off starts unconfined without deriving anything;
// enforce refuses an agent whose profile cannot hold, saying how to fix
// it; best-effort starts it unconfined; both record the start.
func TestConfinerModes(t *testing.T) {
	pol := compile(t, "rules:\n  - {id: no-state, decision: deny, when: {paths: [\"/home/u/.gemini/**\"]}}\n")
	agent := config.Agent{Name: "gemini", Command: "gemini"}
	env := func(config.Agent) Env { return Env{Home: "/home/u", TempDir: "/tmp", Roots: []string{"/home/u/p"}} }
	for _, tt := range []struct {
		mode     config.SandboxMode
		wantErr  string
		recorded bool
	}{
		{config.SandboxOff, "", false},
		{config.SandboxEnforce, `sandbox.mode is enforce and the agent cannot be confined: policy.yaml:2:5: deny rule "no-state" hides /home/u/.gemini`, true},
		{config.SandboxBestEffort, "", true},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			var starts []Start
			c := &Confiner{Mode: tt.mode, Policy: func() *policy.Policy { return pol }, Env: env, Record: func(s Start) { starts = append(starts, s) }}
			plan, err := c.Confine(agent)
			if plan != nil {
				t.Errorf("plan %+v, want none", plan)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "sandbox.mode: best-effort")) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			if got := len(starts) == 1; got != tt.recorded {
				t.Fatalf("recorded %+v", starts)
			}
			if tt.recorded && (starts[0].Confined || !strings.Contains(starts[0].Reason, "no-state") || starts[0].Profile == nil) {
				t.Errorf("record %+v", starts[0])
			}
		})
	}
}

// TestConfinerRequire (issue 29 req. 8): the capability says what this
// kernel and mode hold; a session that requires a sandbox is refused with
// sandbox_policy_unsatisfiable while an agent runs unconfined (a
// best-effort fallback), and from then on best-effort refuses to start an
// agent unconfined, as enforce does; off advertises host and refuses.
func TestConfinerRequire(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	pol := compile(t, "rules:\n  - {id: no-state, decision: deny, when: {paths: [\"/home/u/.gemini/**\"]}}\n")
	env := func(config.Agent) Env { return Env{Home: "/home/u", TempDir: "/tmp", Roots: []string{"/home/u/p"}} }
	sandboxed := acp.SandboxPolicy{Require: "sandboxed"}

	off := &Confiner{Mode: config.SandboxOff}
	if c := off.Capability(); c.Mode != acp.SandboxModeHost {
		t.Errorf("off: capability %+v", c)
	}
	if err := off.Require(sandboxed); err == nil || !strings.Contains(err.Error(), acp.SandboxUnsatisfiable) {
		t.Errorf("off: Require(sandboxed) = %v", err)
	}
	if err := off.Require(acp.SandboxPolicy{Require: "any"}); err != nil {
		t.Errorf("off: Require(any) = %v", err)
	}

	var starts []Start
	c := &Confiner{Mode: config.SandboxBestEffort, Policy: func() *policy.Policy { return pol }, Env: env, Record: func(s Start) { starts = append(starts, s) }}
	if got := c.Capability(); got.Mode != acp.SandboxModeCustom || got.Guarantees != (acp.SandboxGuarantees{FsIsolation: "workspace", NetIsolation: "none", ProcessCaps: true}) {
		t.Errorf("best-effort: capability %+v", got)
	}
	if err := c.Require(sandboxed); err != nil {
		t.Fatalf("best-effort, nothing started: Require = %v", err)
	}
	c = &Confiner{Mode: config.SandboxBestEffort, Policy: func() *policy.Policy { return pol }, Env: env, Record: func(s Start) { starts = append(starts, s) }}
	gemini := config.Agent{Name: "gemini", Command: "gemini"}
	if plan, err := c.Confine(gemini); plan != nil || err != nil {
		t.Fatalf("best-effort fallback: %v %v", plan, err)
	}
	err := c.Require(sandboxed)
	if err == nil || !strings.Contains(err.Error(), acp.SandboxUnsatisfiable) || !strings.Contains(err.Error(), "gemini (") {
		t.Fatalf("Require with gemini unconfined = %v", err)
	}
	starts = nil
	if _, err := c.Confine(gemini); err == nil || !strings.Contains(err.Error(), "requires a sandbox (acp.sandbox)") {
		t.Errorf("a start after the requirement: %v, want a refusal", err)
	}
	if len(starts) != 1 || starts[0].Mode != config.SandboxEnforce || starts[0].Confined {
		t.Errorf("the refusal is recorded as enforce's: %+v", starts)
	}
	if err := c.Require(sandboxed); err != nil {
		t.Errorf("Require once no agent runs unconfined: %v", err)
	}
}

// TestCapabilityNetGrade: netIsolation is restricted only when every
// agent the config declares runs behind the egress proxy under the policy
// in force, and a client that requires restricted is then satisfied;
// one agent the policy leaves on the host's network (a deny rule for
// another agent only, an allow rule on any host, a deny rule on its model
// API that keeps it from being confined) makes it none. _meta names each
// agent's reach.
func TestCapabilityNetGrade(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if err := netAvailable(); err != nil {
		t.Skip(err)
	}
	env := func(config.Agent) Env { return Env{Home: "/home/u", TempDir: "/tmp", Roots: []string{"/home/u/p"}} }
	claude := config.Agent{Name: "claude", Command: "claude-agent-acp"}
	codex := config.Agent{Name: "codex", Command: "codex-acp"}
	for _, tt := range []struct {
		name   string
		policy string
		agents []config.Agent
		grade  string
		reach  map[string]string // substrings
	}{
		{"no host rule", "rules:\n  - {id: no-env, decision: deny, when: {paths: [\"**/.env\"]}}\n",
			[]config.Agent{claude}, "none", map[string]string{"claude": "every host (the policy names none"}},
		{"a deny rule on a host", "rules:\n  - {id: no-paste, decision: deny, when: {domains: [pastebin.com]}}\n",
			[]config.Agent{claude, codex}, "restricted", map[string]string{"claude": "every host but pastebin.com (rule no-paste)", "codex": "but pastebin.com"}},
		{"default deny", "default: deny\nrules:\n  - {id: gh, decision: allow, when: {domains: [github.com]}}\n",
			[]config.Agent{claude}, "restricted", map[string]string{"claude": "only api.anthropic.com"}},
		{"a deny rule for one agent only", "rules:\n  - {id: no-paste, decision: deny, when: {agent: [codex], domains: [pastebin.com]}}\n",
			[]config.Agent{claude, codex}, "none", map[string]string{"claude": "every host (the policy names none", "codex": "but pastebin.com"}},
		{"a deny rule on an agent's model API", "rules:\n  - {id: no-openai, decision: deny, when: {domains: [api.openai.com]}}\n",
			[]config.Agent{claude, codex}, "none", map[string]string{"claude": "but api.openai.com", "codex": "its profile cannot be applied"}},
		{"no agent", "rules:\n  - {id: no-paste, decision: deny, when: {domains: [pastebin.com]}}\n", nil, "none", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pol := compile(t, tt.policy)
			c := &Confiner{Mode: config.SandboxEnforce, Policy: func() *policy.Policy { return pol }, Env: env, Agents: tt.agents}
			got := c.Capability()
			if got.Guarantees != (acp.SandboxGuarantees{FsIsolation: "workspace", NetIsolation: tt.grade, ProcessCaps: true}) {
				t.Errorf("guarantees %+v, want netIsolation %s", got.Guarantees, tt.grade)
			}
			reach, _ := got.Meta["acp-router"].(map[string]any)["network"].(map[string]string)
			for a, want := range tt.reach {
				if !strings.Contains(reach[a], want) {
					t.Errorf("_meta network of %s: %q, want it to say %q", a, reach[a], want)
				}
			}
			ok, why := acp.Satisfies(got, acp.SandboxPolicy{Require: "sandboxed", MinNetIsolation: "restricted"})
			if ok != (tt.grade == "restricted") {
				t.Errorf("a requirement of restricted network: %v (%s)", ok, why)
			}
		})
	}
}
