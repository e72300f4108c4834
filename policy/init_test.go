package policy

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// TestInitIsCheap: importing the package costs little, so that the
// processes that re-run the router's executable only to confine or watch
// an agent (the watchdog, the sandbox helpers) start fast; the argument
// specs load on first use.
func TestInitIsCheap(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m := regexp.MustCompile(`init github.com/acp-router/acp-router/policy @[^,]*, [^,]*, (\d+) bytes`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no init line for the package:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n > 1<<20 {
		t.Errorf("the package's init allocates %d bytes; keep it under 1 MiB (load on first use)", n)
	}
}
