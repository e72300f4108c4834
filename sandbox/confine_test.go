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
