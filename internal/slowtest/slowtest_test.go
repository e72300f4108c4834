package slowtest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestRequire: a gated test skips without ACP_TEST_SLOW=1 or under -short,
// and runs with it; the test binary is run again with each setting.
func TestRequire(t *testing.T) {
	if os.Getenv("SLOWTEST_CHILD") == "1" {
		Require(t, "a gated test")
		t.Log("ran")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", nil, "SKIP"},
		{Env + "=0", nil, "SKIP"},
		{Env + "=1", nil, "ran"},
		{Env + "=1", []string{"-test.short"}, "SKIP"},
	} {
		cmd := exec.Command(exe, append([]string{"-test.run=^TestRequire$", "-test.v"}, c.args...)...)
		cmd.Env = append(os.Environ(), "SLOWTEST_CHILD=1", Env+"=")
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s %v: %v, want %s in:\n%s", c.env, c.args, err, c.want, out)
		}
	}
}

// TestShortParallel: under -short a package's tests run perCore a core,
// unless -test.parallel is given; without -short go test's default (one a
// core) stands. The test binary is run again with each setting.
func TestShortParallel(t *testing.T) {
	if os.Getenv("SLOWTEST_PARALLEL_CHILD") == "1" {
		ShortParallel(3)
		t.Logf("parallel=%s", flag.Lookup("test.parallel").Value)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"-test.short"}, 3 * procs},
		{[]string{"-test.short", "-test.parallel=5"}, 5},
		{nil, procs},
	} {
		cmd := exec.Command(exe, append([]string{"-test.run=^TestShortParallel$", "-test.v"}, c.args...)...)
		cmd.Env = append(os.Environ(), "SLOWTEST_PARALLEL_CHILD=1", "GOMAXPROCS="+strconv.Itoa(procs))
		out, err := cmd.CombinedOutput()
		if want := fmt.Sprintf("parallel=%d\n", c.want); err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%v: %v, want %q in:\n%s", c.args, err, want, out)
		}
	}
}
