package slowtest

import (
	"os"
	"os/exec"
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
