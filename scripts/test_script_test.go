// Package scripts holds no code: its test runs scripts/test.sh and .ci/run
// with fake go, npm and node on PATH and checks what they would run.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fake is a command that logs its arguments and the ACP_ARTIFACTS,
// ACP_TEST_SLOW and ACP_E2E_NO_GEMINI the script passed it, one line per
// call.
const fake = `#!/bin/sh
echo "$(basename "$0") $* ARTIFACTS=${ACP_ARTIFACTS-unset} SLOW=${ACP_TEST_SLOW-unset} NO_GEMINI=${ACP_E2E_NO_GEMINI-unset}" >> "$FAKE_LOG"
`

// runScript runs script (relative to the repository root) with args and
// extra environment, the fakes first on PATH, and returns the log.
func runScript(t *testing.T, env []string, script string, args ...string) (string, error) {
	t.Helper()
	bin := t.TempDir()
	for _, name := range []string{"go", "npm", "node", "gofmt", "strace"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(t.TempDir(), "log")
	root, _ := filepath.Abs("..")
	cmd := exec.Command(filepath.Join(root, script), args...)
	// Without the caller's ACP_TEST_SLOW: scripts/test.sh runs this test
	// with it set, and the scripts must set it themselves.
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ACP_TEST_SLOW=") {
			environ = append(environ, kv)
		}
	}
	cmd.Env = append(environ, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FAKE_LOG="+log)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	data, _ := os.ReadFile(log)
	if err != nil {
		t.Logf("%s: %v\n%s", script, err, out)
	}
	return string(data), err
}

// TestQuickMode: scripts/test.sh --quick runs gofmt, go vet and go test
// -short, and installs and builds nothing (issue 28, point 5).
func TestQuickMode(t *testing.T) {
	log, err := runScript(t, nil, "scripts/test.sh", "--quick")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gofmt -l ", "go vet ./...", "go test -short ./..."} {
		if !strings.Contains(log, want) {
			t.Errorf("--quick did not run %q:\n%s", want, log)
		}
	}
	if !hasLine(log, "go test -short ./...", "SLOW=unset NO_GEMINI=unset") {
		t.Errorf("--quick ran the slow tests (ACP_TEST_SLOW set):\n%s", log)
	}
	for _, not := range []string{"npm ", "go build", "-race"} {
		if strings.Contains(log, not) {
			t.Errorf("--quick ran %q:\n%s", not, log)
		}
	}
}

// TestSkipSwitches: ACP_E2E_NO_GEMINI=1 given to scripts/test.sh reaches
// the tests (they skip) and spares Gemini's install, as documented; .ci/run
// unsets it, so CI runs every real agent whatever its environment says.
func TestSkipSwitches(t *testing.T) {
	env := []string{"ACP_E2E_NO_GEMINI=1"}
	log, err := runScript(t, env, "scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(log, "go test -race ./...", "NO_GEMINI=1") {
		t.Errorf("scripts/test.sh dropped ACP_E2E_NO_GEMINI=1:\n%s", log)
	}
	// Codex stands for the others: Claude's install is checked with the
	// Node 22 of .peers/node22 first on PATH, which in a checkout where it
	// is installed is a real node, not the fake that logs.
	if strings.Contains(log, "gemini-cli") || !strings.Contains(log, "codex-acp") {
		t.Errorf("scripts/test.sh with ACP_E2E_NO_GEMINI=1: want Gemini not installed, the others installed:\n%s", log)
	}
	log, err = runScript(t, env, ".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(log, "go test -race ./...", "NO_GEMINI=unset") || !strings.Contains(log, "gemini-cli") {
		t.Errorf(".ci/run let ACP_E2E_NO_GEMINI=1 through:\n%s", log)
	}
	// CI runs the slow tests: the kernel checks and the crash tests
	// (internal/slowtest) skip without ACP_TEST_SLOW=1.
	for _, prefix := range []string{"go test -race ./...", "go test -count=1 -timeout 30m -run ^TestEvidenceAgainstKernel$ ./guard/"} {
		if !hasLine(log, prefix, "SLOW=1 NO_GEMINI=unset") {
			t.Errorf(".ci/run: %q without ACP_TEST_SLOW=1:\n%s", prefix, log)
		}
	}
}

// TestArtifacts: scripts/test.sh runs the suite with ACP_ARTIFACTS set to
// the checkout's artifacts/, where the page's screenshots are kept (issue
// 31) and where CI finds them.
func TestArtifacts(t *testing.T) {
	log, err := runScript(t, nil, "scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	want := " ARTIFACTS=" + filepath.Join(root, "artifacts") + " "
	found := false
	for line := range strings.SplitSeq(log, "\n") {
		found = found || strings.HasPrefix(line, "go test -race ./...") && strings.Contains(line, want)
	}
	if !found {
		t.Errorf("scripts/test.sh runs the suite without ACP_ARTIFACTS=%s/artifacts:\n%s", root, log)
	}
}

// hasLine reports whether a line of log starts with prefix and ends with
// suffix.
func hasLine(log, prefix, suffix string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.HasPrefix(line, prefix) && strings.HasSuffix(line, suffix) {
			return true
		}
	}
	return false
}
