package config

import (
	"go.yaml.in/yaml/v3"

	"slices"
	"strings"
	"testing"
)

// TestSandboxConfig: sandbox.mode and state_dirs are read, and the org's
// lock wins over the user's mode with a warning naming both places.
func TestSandboxConfig(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	y := "version: 1\nsandbox: {mode: enforce}\nagents:\n  - name: claude\n    command: claude-agent-acp\n    state_dirs: [~/.claude, \"${CODEX_HOME}\"]\n  - name: codex\n    command: codex-acp\n"
	cfg, err := Parse("c.yaml", []byte(y), testEnv(bin, map[string]string{"CODEX_HOME": "/srv/codex"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Agents[0].StateDirs; !slices.Equal(got, []string{"/home/u/.claude", "/srv/codex"}) {
		t.Errorf("state_dirs = %q", got)
	}
	if cfg.Agents[1].StateDirs != nil {
		t.Errorf("codex state_dirs = %q, want nil (the built-in defaults)", cfg.Agents[1].StateDirs)
	}
	if e := cfg.EffectiveSandbox(false); e.Mode != SandboxEnforce || !strings.HasPrefix(e.From, "config c.yaml:2:17") {
		t.Errorf("effective %+v", e)
	}
	cfg.OrgSandbox = []Sandbox{{Mode: SandboxBestEffort, ModePos: Pos{File: "/etc/p/10.yaml", Line: 2, Col: 9}},
		{Lock: true, LockPos: Pos{File: "/etc/p/20.yaml", Line: 3, Col: 9}}}
	e := cfg.EffectiveSandbox(true)
	if e.Mode != SandboxBestEffort || !strings.Contains(e.Ignored, "c.yaml:2:17: sandbox.mode is ignored: the org locks it (/etc/p/20.yaml:3:9)") {
		t.Errorf("locked: %+v", e)
	}
	cfg.OrgSandbox = nil
	cfg.Sandbox = Sandbox{}
	if e := cfg.EffectiveSandbox(true); e.Mode != SandboxBestEffort || e.From != "default with a policy" {
		t.Errorf("with a policy: %+v", e)
	}
	if e := cfg.EffectiveSandbox(false); e.Mode != SandboxOff {
		t.Errorf("without a policy: %+v", e)
	}
}

// TestOrgSandbox: an org file may lock the mode; ${NAME} is not involved.
func TestOrgSandbox(t *testing.T) {
	data := "mode: enforce\nlock: true\n"
	n := yamlNode(t, data)
	s, err := ParseOrgSandbox("/etc/p/10.yaml", n)
	if err != nil || s.Mode != SandboxEnforce || !s.Lock || s.LockPos.Line != 2 {
		t.Errorf("got %+v, %v", s, err)
	}
	if _, err := ParseOrgSandbox("/etc/p/10.yaml", yamlNode(t, "mode: on\n")); err == nil || !strings.Contains(err.Error(), "/etc/p/10.yaml:1:7: sandbox.mode") {
		t.Errorf("got %v", err)
	}
}

func yamlNode(t *testing.T, s string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}
