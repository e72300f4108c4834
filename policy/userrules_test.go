package policy

import (
	"strings"
	"testing"
)

// TestProgramPathPatterns: a program pattern with a / compiles to the path
// of the program run (issue 27); one that cannot name a clean path is an
// error, never a pattern that matches nothing or anything.
func TestProgramPathPatterns(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"./scripts/release.sh", "${cwd}/scripts/release.sh"},
		{"tools/**", "${cwd}/tools/**"},
		{"/opt/bin/x", "/opt/bin/x"},
		{"~/bin/*", "~/bin/*"},
		{"${roots}/bin/x", "${roots}/bin/x"},
		{"**/bin/x", "**/bin/x"},
	} {
		pp, err := compileProgramPath(tc.in)
		if err != nil || pp.src != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.in, pp, err, tc.want)
		}
	}
	for _, bad := range []string{"../x", "./a/../b", "tools//x", "${nope}/x"} {
		if _, err := compileCommand(bad + " **"); err == nil || !strings.Contains(err.Error(), "program") {
			t.Errorf("command %q: error %v, want one naming the program", bad, err)
		}
		c := &Cond{}
		if err := c.add("program", bad); err == nil {
			t.Errorf("program %q: no error", bad)
		}
	}
}
