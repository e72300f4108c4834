package guard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/config"
)

// TestLoadPolicyOrgSandbox: an org file's sandbox: block reaches the
// config, locks the user's mode, and its errors carry file:line:col.
func TestLoadPolicyOrgSandbox(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create root-owned files (CI runs as root)")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	file := filepath.Join(dir, "10-kernel.yaml")
	os.WriteFile(file, []byte("default: ask\nsandbox:\n  mode: enforce\n  lock: true\n"), 0o644)
	cfg := &config.Config{Sandbox: config.Sandbox{Mode: config.SandboxOff, ModePos: config.Pos{File: "c.yaml", Line: 9, Col: 9}}}
	if _, err := LoadPolicy(dir, cfg); err != nil {
		t.Fatal(err)
	}
	e := cfg.EffectiveSandbox(true)
	if e.Mode != config.SandboxEnforce || !strings.Contains(e.Ignored, "the org locks it ("+file+":4:9)") {
		t.Errorf("effective sandbox %+v", e)
	}
	os.WriteFile(file, []byte("sandbox: {mode: always}\n"), 0o644)
	if _, err := LoadPolicy(dir, cfg); err == nil || !strings.Contains(err.Error(), file+":1:17: sandbox.mode") {
		t.Errorf("got %v, want an error at %s:1:17", err, file)
	}
}
