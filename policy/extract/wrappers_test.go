package extract

import (
	"strings"
	"testing"
)

// TestWrappersData: wrappers.yaml is read strictly, and a mistake names
// its file, line and column.
func TestWrappersData(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "env:\n  short: u\n  shrot: C\n", `w.yaml:3:3: env: unknown key "shrot"`},
		{"not a letter", "env:\n  flags: \"i-\"\n", `w.yaml:2:10: env: flags: '-' is not an option letter`},
		{"not a long option", "env:\n  long: [--unset, -C]\n", `w.yaml:2:9: env: long: "-C" is not a long option`},
		{"long with a value", "env:\n  long_flags: [--null=x]\n", `"--null=x" is not a long option`},
		{"negative skip", "timeout:\n  skip: -1\n", `w.yaml:2:9: timeout: skip: must not be negative`},
		{"not a bool", "sudo:\n  primary: yes please\n", `w.yaml:2:12: sudo: primary:`},
		{"twice", "env: {}\nenv: {}\n", `w.yaml:2:1: wrapper "env" is listed twice`},
		{"not a mapping", "env: [a]\n", `w.yaml:1:6: env: a wrapper is a mapping`},
		{"a path", "/usr/bin/env: {}\n", `w.yaml:1:1: "/usr/bin/env" is not a program name`},
	} {
		_, err := parseWrappers("w.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	w, err := parseWrappers("w.yaml", []byte("mywrap:\n  short: u\n  long: [--user]\n  primary: true\n  skip: 1\n"))
	if err != nil || !w["mywrap"].primary || w["mywrap"].skip != 1 || w["mywrap"].short != "u" {
		t.Fatalf("mywrap: %+v, %v", w["mywrap"], err)
	}
	for _, name := range []string{"env", "timeout", "sudo", "xargs", "nsenter", "nice", "systemd-run"} {
		if _, ok := wrappers[name]; !ok {
			t.Errorf("the built-in wrappers lack %s", name)
		}
	}
}
