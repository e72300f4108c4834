package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGoDocFitsOneScreen: `go doc` of the package, what a security
// reviewer reads first, stays within one screen (50 lines, issue 28): a
// new exported name is a cost to the review, paid by unexporting or
// grouping something else.
func TestGoDocFitsOneScreen(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goTool, "doc", ".").Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	if n := strings.Count(string(out), "\n"); n > 50 {
		t.Errorf("go doc prints %d lines, want at most 50:\n%s", n, out)
	}
}
