package sandbox

import (
	"strings"
	"testing"

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
