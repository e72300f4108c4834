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

	"github.com/acp-router/acp-router/config"
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

// TestLateFiles pins what holds for a file matching a deny rule that
// appears after the agent started (issue 29 point 4): a .env a build
// writes (a glob that may match anywhere) and a denied directory that did
// not exist (~/.aws/**). The agent's own process keeps the masks of its
// start: it reads both (the limit the docs state). A command its terminals
// run reads neither: each terminal's plan is resolved when it is created.
func TestLateFiles(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-late-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	pol := compile(t, fixturePolicy+"  - {id: no-aws, decision: deny, when: {paths: [\"~/.aws/**\"]}}\n")
	prof, _ := Derive(pol, config.Agent{Name: "gemini", Command: "gemini"}, Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}})
	plan, err := Resolve(prof, ResolveOptions{})
	must(t, err)

	must(t, os.MkdirAll(proj+"/late", 0o755))
	must(t, os.WriteFile(proj+"/late/.env", []byte("LATE-ENV"), 0o644))
	must(t, os.MkdirAll(home+"/.aws", 0o755))
	must(t, os.WriteFile(home+"/.aws/credentials", []byte("LATE-AWS"), 0o644))
	script := "cat late/.env " + home + "/.aws/credentials; echo END"

	viaWatchdog[plan] = true
	if out := run(t, plan, proj, script); !strings.Contains(out, "LATE-ENV") || !strings.Contains(out, "LATE-AWS") {
		t.Errorf("the agent's process no longer reads files that appeared after its start (%q): update the limits in the docs", out)
	}
	delete(viaWatchdog, plan)
	viaTerminal[plan] = true
	if out := run(t, plan, proj, script); strings.Contains(out, "LATE-") || !strings.Contains(out, "END") {
		t.Errorf("a terminal read a file that appeared after the agent started: %q", out)
	}
}
