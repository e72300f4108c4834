//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTerminalHelper: a command an editor runs through the terminal
// helper (the rewritten terminal/create) gets its exit status and output
// through, and a plan file that does not match its name is refused
// without running anything. TestConfinedTree's "terminal" runs hold the
// confinement itself, as root and as nobody.
func TestTerminalHelper(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-term-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	plan := confine(t, home, proj)

	runTerm := func(args ...string) (string, int) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Dir = proj
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Run()
		return out.String(), cmd.ProcessState.ExitCode()
	}
	exe, args, err := plan.Terminal("sh", []string{"-c", "cat main.go; cat .env; echo; exit 7"})
	must(t, err)
	if exe != os.Args[0] && !strings.HasSuffix(exe, filepath.Base(os.Args[0])) {
		t.Errorf("helper executable %s", exe)
	}
	out, code := runTerm(args...)
	if code != 7 || !strings.Contains(out, "package main") || strings.Contains(out, secretEnv) {
		t.Errorf("exit %d, output %q; want 7, main.go and no secret", code, out)
	}

	// A plan file changed after it was written.
	planFile := args[1]
	must(t, os.WriteFile(base+"/marker", nil, 0o644))
	tampered := filepath.Join(filepath.Dir(planFile), strings.Repeat("0", 64)+".json")
	must(t, os.WriteFile(tampered, []byte(`{"writableDirs":["/"]}`), 0o600))
	t.Cleanup(func() { os.Remove(tampered) })
	out, code = runTerm(terminalArg, tampered, "--", "rm", base+"/marker")
	if code != 126 || !strings.Contains(out, "does not match its digest") {
		t.Errorf("tampered plan: exit %d, %q", code, out)
	}
	if _, err := os.Stat(base + "/marker"); err != nil {
		t.Error("the command ran under a tampered plan")
	}
	out, code = runTerm(terminalArg, planFile, "--", "no-such-command-acp")
	if code != 127 {
		t.Errorf("unknown command: exit %d, %q", code, out)
	}
}

// TestLateFiles: files matching a hidden rule that appear after the agent
// started (issue 29 point 4) are masked for the agent's process by its
// mask keeper within the window (checkLateFiles: a .env a build writes, a
// new ~/.aws/credentials, a directory renamed into place holding a .env,
// a new hard link to a hidden file, a hidden .env replaced by an editor's
// save). A command its terminals run reads none of them either: each
// terminal's plan is resolved when it is created.
func TestLateFiles(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-late-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	t.Run("agent", func(t *testing.T) { checkLateFiles(t, base, home, proj) })

	t.Run("terminal", func(t *testing.T) {
		plan := latePlan(t, home, proj)
		must(t, os.MkdirAll(proj+"/late2", 0o755))
		must(t, os.WriteFile(proj+"/late2/.env", []byte("LATE-TERM"), 0o644))
		viaTerminal[plan] = true
		if out := run(t, plan, proj, "cat late2/.env "+home+"/.aws/credentials; echo END"); strings.Contains(out, "LATE-") || !strings.Contains(out, "END") {
			t.Errorf("a terminal read a file that appeared after the agent started: %q", out)
		}
	})
}
