//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

// TestKernelGuardCredits (issue 29 req. 5): the guard a decision gets
// hides what an agent's confined start masked, through a symlink too, for
// the agent's own tools only (session/request_permission); nothing once
// the agent ever started unconfined; and a mask that no longer holds (the
// file or directory replaced from outside the agent's namespace, which
// detaches the mount there) is not credited.
func TestKernelGuardCredits(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	home, root := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	env := filepath.Join(root, ".env")
	aws := filepath.Join(home, ".aws")
	must(os.WriteFile(env, []byte("SECRET=1"), 0o600))
	must(os.MkdirAll(aws, 0o700))
	must(os.WriteFile(filepath.Join(aws, "credentials"), []byte("key"), 0o600))
	must(os.Symlink(filepath.Join(aws, "credentials"), filepath.Join(root, "creds")))
	must(os.WriteFile(filepath.Join(root, "main.go"), nil, 0o644))
	pol := compile(t, "rules:\n  - {id: no-secrets, decision: deny, when: {paths: [\"**/.env\", \"~/.aws/**\"]}}\n")
	c := &Confiner{Mode: config.SandboxBestEffort, Policy: func() *policy.Policy { return pol },
		Env: func(config.Agent) Env { return Env{Home: home, TempDir: os.TempDir(), Roots: []string{root}} }}
	agent := config.Agent{Name: "claude", Command: "claude-agent-acp"}
	if k := c.Kernel("claude", acp.MethodRequestPermission); k != nil {
		t.Fatal("a guard before any start")
	}
	plan, err := c.Confine(agent)
	if err != nil || plan == nil {
		t.Fatalf("Confine: %v %v", plan, err)
	}
	if k := c.Kernel("claude", "fs/read_text_file"); k != nil {
		t.Error("a guard for fs/read_text_file, which the editor carries out outside the sandbox")
	}
	if k := c.Kernel("claude", acp.MethodTerminalCreate); k == nil {
		t.Error("no guard for terminal/create, which runs under the agent's plan (the terminal helper)")
	}
	k := c.Kernel("claude", acp.MethodRequestPermission)
	if k == nil {
		t.Fatal("no guard after a confined start")
	}
	for p, want := range map[string]bool{
		env: true, filepath.Join(root, "creds"): true, filepath.Join(aws, "credentials"): true, aws: true,
		filepath.Join(aws, "config-not-there"): false, filepath.Join(root, "main.go"): false, root: false,
	} {
		if got := k.Hides(p); got != want {
			t.Errorf("Hides(%s) = %v, want %v", p, got, want)
		}
	}
	// Replaced from outside: the mount on the old file is gone in the
	// agent's namespace.
	must(os.Rename(env, env+".old"))
	must(os.WriteFile(env, []byte("SECRET=2"), 0o600))
	if k.Hides(env) {
		t.Error("a replaced .env is still credited")
	}
	must(os.Rename(aws, aws+".old"))
	must(os.MkdirAll(aws, 0o700))
	must(os.WriteFile(filepath.Join(aws, "credentials"), []byte("key"), 0o600))
	if k.Hides(filepath.Join(root, "creds")) {
		t.Error("a file in a replaced ~/.aws is still credited")
	}
	// A best-effort start that fell back to unconfined: that process may
	// still run, nothing is credited for the agent.
	c.Policy = func() *policy.Policy {
		return compile(t, "rules:\n  - {id: no-state, decision: deny, when: {paths: [\""+home+"/.claude/**\"]}}\n")
	}
	if plan, err := c.Confine(agent); plan != nil || err != nil {
		t.Fatalf("fallback: %v %v", plan, err)
	}
	for _, m := range []string{acp.MethodRequestPermission, acp.MethodTerminalCreate} {
		if k := c.Kernel("claude", m); k != nil {
			t.Errorf("a guard for %s after an unconfined start", m)
		}
	}
}
