package extract

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// TestWrapperSpecErrors: the wrappers are specs (specs/wrappers.yaml),
// and what only a wrapper's spec may say is read as strictly as the rest:
// a mistake names its file, line and column.
func TestWrapperSpecErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "w:\n  operands: [exec...]\n  wrapper: {primary: true, primray: true}\n",
			`w.yaml:3:28: w: wrapper: unknown key "primray"`},
		{"not a mapping", "w:\n  wrapper: [primary]\n", `w.yaml:2:12: w: wrapper: a mapping of primary`},
		{"not a bool", "w:\n  wrapper:\n    primary: yes please\n", `w.yaml:3:14: w: wrapper: primary:`},
		{"alone", "w:\n  wrapper: {alone: quiet}\n", `w.yaml:2:20: w: wrapper: alone: unknown, values or shell, not "quiet"`},
		{"payload", "w:\n  wrapper: {payload: words}\n", `w.yaml:2:22: w: wrapper: payload: argv or script, not "words"`},
		{"cwd_unknown names no option", "w:\n  options: {-i: flag}\n  wrapper: {cwd_unknown: [-l]}\n",
			`w.yaml:2:3: w: wrapper: cwd_unknown names -l, which is not one of its options`},
		{"cwd_unless names no option", "w:\n  wrapper: {cwd_unless: [--scope]}\n",
			`w: wrapper: cwd_unless names --scope, which is not one of its options`},
		{"an option role a wrapper does not read", "w:\n  options: {-r: readdir}\n  wrapper: {}\n",
			`w.yaml:2:17: w: a wrapper's option is a flag, value, read, write, chdir, script, split or opaque, not readdir`},
		{"split outside a wrapper", "w:\n  options: {-S: split}\n", `w.yaml:2:17: w: split is the role of a wrapper's option`},
		{"payload not last", "w:\n  operands: [exec..., value]\n  wrapper: {}\n",
			`w.yaml:2:23: w: a wrapper's operands are value, read or write, then its payload: exec..., last`},
		{"payload not repeated", "w:\n  operands: [value, exec]\n  wrapper: {}\n", `w.yaml:2:21: w: a wrapper's operands are`},
		{"operand role a wrapper does not read", "w:\n  operands: [readdir, exec...]\n  wrapper: {}\n", `w.yaml:2:14: w: a wrapper's operands are`},
		{"subcommands", "w:\n  wrapper: {}\n  subcommands: {run: {}}\n", `w.yaml:2:12: w: a wrapper has no subcommands`},
		{"abbrev", "w:\n  abbrev: sometimes\n", `w.yaml:2:11: w: abbrev:`},
		{"a lone -- is no option", "w:\n  options: {\"--\": flag}\n", `option "--" does not start with -`},
	} {
		err := parseSpecs("w.yaml", []byte(tc.src), map[string]*argSpec{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestWrapperSpecParses: a spec using every key a wrapper may have
// parses, and the built-in wrappers are specs with a wrapper:.
func TestWrapperSpecParses(t *testing.T) {
	src := `mywrap:
  posix: true
  abbrev: getopt
  options:
    "-": flag
    -l --login: flag
    -u --user: value
    -C --chdir: chdir
    -S: split
    -o: write
    -p: opaque
    -c: script
  operands: [value, exec...]
  wrapper:
    primary: true
    assigns: true
    chdir: true
    cwd_unknown: [-l, --login]
    cwd_unless: [-C]
    note: it adds arguments
    alone: shell
    payload: script
    stdin_words: true
`
	m := map[string]*argSpec{}
	if err := parseSpecs("w.yaml", []byte(src), m); err != nil {
		t.Fatal(err)
	}
	sp := m["mywrap"]
	w := sp.wrap
	if w == nil || !w.primary || !w.assigns || !w.chdir || !slices.Equal(w.cwdUnknown, []string{"-l", "--login"}) ||
		!slices.Equal(w.cwdUnless, []string{"-C"}) || w.note != "it adds arguments" || w.alone != "shell" || !w.script || !w.stdinWords {
		t.Fatalf("wrapper: %+v", w)
	}
	if !sp.getopt || !sp.posix || sp.opts["-"] == nil || sp.opts["-S"].role != roleSplit {
		t.Errorf("spec: getopt %v, posix %v, options %v", sp.getopt, sp.posix, sp.opts)
	}
	if err := parseSpecs("w.yaml", []byte("chrootish:\n  operands: [value, exec...]\n  wrapper: {cwd_unknown: always}\n"), m); err != nil || !m["chrootish"].wrap.cwdAlways {
		t.Errorf("cwd_unknown: always: %v", err)
	}
	for _, name := range []string{"env", "timeout", "nice", "sudo", "xargs", "nsenter", "unshare", "su", "systemd-run", "watch", "flock"} {
		if sp := specs()[name]; sp == nil || sp.wrap == nil {
			t.Errorf("the built-in specs lack the wrapper %s", name)
		}
	}
	if specs()["git"].wrap != nil || specs()["echo"].wrap != nil {
		t.Error("git and echo are no wrappers")
	}
}

// TestWrapperOptions: a wrapper's command line is read by the one spec
// parser as getopt reads it.
func TestWrapperOptions(t *testing.T) {
	words := func(s string) []arg {
		var out []arg
		for _, w := range strings.Fields(s) {
			out = append(out, arg{s: w})
		}
		return out
	}
	for _, tc := range []struct {
		line     string
		flags    []string
		assigns  []string
		ops      string
		unknown  string // part of p.unknown; "" none
		values   map[string]string
		noValues []string // options given without a value
	}{
		// getopt_long takes any unambiguous prefix, one letter included.
		{line: "env --u HOME ls", flags: []string{"--unset"}, ops: "ls", values: map[string]string{"--unset": "HOME"}},
		{line: "timeout --k 1 5 ls", flags: []string{"--kill-after"}, ops: "5 ls"},
		{line: "env --i ls", ops: "ls", unknown: "--i"}, // --ignore-environment or --ignore-signal
		{line: "nice --a=5 ls", flags: []string{"--adjustment"}, ops: "ls"},
		// A lone - is env's -i.
		{line: "env - A=1 ls", flags: []string{"-"}, assigns: []string{"A=1"}, ops: "ls"},
		// NAME=VALUE before the payload, options among them; none after --.
		{line: "env A=1 -i B=2 ls C=3", flags: []string{"-i"}, assigns: []string{"A=1", "B=2"}, ops: "ls C=3"},
		{line: "env -- A=1 ls", ops: "A=1 ls"},
		{line: "timeout A=1 ls", ops: "A=1 ls"},
		// An option the spec does not list: skipped without a value, the
		// rest of its bundle read on.
		{line: "sudo -Qu root ls -l", flags: []string{"-u"}, ops: "ls -l", unknown: "sudo options the router does not know: -Q",
			values: map[string]string{"-u": "root"}},
		{line: "sudo --frob root ls", ops: "root ls", unknown: "--frob"},
		// The payload's options are its own (posix), and in a wrapper
		// whose options follow its operands (su), the first operand of
		// role exec ends them.
		{line: "timeout -s KILL 5 ls -s", flags: []string{"-s"}, ops: "5 ls -s"},
		{line: "runuser -u bob ls -la", flags: []string{"-u"}, ops: "ls -la"},
		{line: "su bob -l -c ls", flags: []string{"-l", "-c"}, ops: "bob"},
		// nice -5; optional values only attached.
		{line: "nice -5 ls", flags: []string{"-NUM"}, ops: "ls"},
		{line: "nsenter -w/tmp -m ls", flags: []string{"-w", "-m"}, ops: "ls", values: map[string]string{"-w": "/tmp"}, noValues: []string{"-m"}},
		// A flag given a value is not understood (getopt_long refuses it).
		{line: "xargs --null=x rm", flags: []string{"--null"}, ops: "rm", unknown: "option --null takes no value"},
	} {
		args := words(tc.line)
		name := args[0].s
		p := parseArgs(specs()[name], name, args[1:])
		if !slices.Equal(p.flags, flagSet(tc.flags)) {
			t.Errorf("%s: flags %v, want %v", tc.line, p.flags, tc.flags)
		}
		if got := strings.Join(argStrings(p.assigns), " "); got != strings.Join(tc.assigns, " ") {
			t.Errorf("%s: assigns %q, want %q", tc.line, got, tc.assigns)
		}
		if got := strings.Join(argStrings(p.ops), " "); got != tc.ops {
			t.Errorf("%s: operands %q, want %q", tc.line, got, tc.ops)
		}
		if tc.unknown == "" && p.unknown != "" || !strings.Contains(p.unknown, tc.unknown) || p.lost {
			t.Errorf("%s: unknown %q (lost %v), want %q", tc.line, p.unknown, p.lost, tc.unknown)
		}
		for k, v := range tc.values {
			if a, ok := p.optValue(k); !ok || a.s != v {
				t.Errorf("%s: %s = %q, want %q", tc.line, k, a.s, v)
			}
		}
		for _, k := range tc.noValues {
			if a, ok := p.optValue(k); ok {
				t.Errorf("%s: %s = %q, want no value", tc.line, k, a.s)
			}
		}
	}
}

// TestWrapperAlone: what a wrapper is without a payload (alone:), and
// su's shell arguments.
func TestWrapperAlone(t *testing.T) {
	extractLine := func(line string) *Evidence {
		params, err := json.Marshal(map[string]any{"sessionId": "s", "command": line})
		if err != nil {
			t.Fatal(err)
		}
		return Extract(&Request{Method: acp.MethodTerminalCreate, Params: params,
			Session: Session{Agent: "claude", Cwd: testCwd, Home: testHome}})
	}
	first := func(ev *Evidence) Item {
		if len(ev.Items) == 0 {
			t.Fatal("no items")
		}
		return ev.Items[0]
	}
	for _, tc := range []struct{ line, opaque, unknown string }{
		{"env", "", ""},            // alone: values (env prints the environment)
		{"env -i -u HOME", "", ""}, // the same
		{"nice", "", "nice runs no command"},
		{"timeout 5", "", "timeout runs no command"},
		{"command -v ls", "", "command runs no command"}, // operands: value... (no exec)
		{"su", "su starts an interactive shell", ""},
		{"su - bob", "su starts an interactive shell", ""},
		{"runuser -l bob", "runuser starts an interactive shell", ""},
	} {
		it := first(extractLine(tc.line))
		if it.Type != ItemCommand || !strings.Contains(it.Opaque, tc.opaque) || (tc.opaque == "") != (it.Opaque == "") ||
			!strings.Contains(it.Unknown, tc.unknown) || (tc.unknown == "") != (it.Unknown == "") {
			t.Errorf("%s: opaque %q unknown %q, want %q, %q", tc.line, it.Opaque, it.Unknown, tc.opaque, tc.unknown)
		}
	}
	// su USER ARGS gives ARGS to the user's shell, which runs the word
	// after -c: the script is read, wherever -c is.
	for _, line := range []string{"su -c 'rm -r build' bob", "su bob -c 'rm -r build'", "su -- bob -c 'rm -r build'",
		"runuser - bob -c 'rm -r build'", "su \"$U\" -c 'rm -r build'"} {
		ev := extractLine(line)
		if !slices.ContainsFunc(ev.Items, func(it Item) bool { return it.Program == "rm" && slices.Contains(it.Flags, "-r") }) {
			t.Errorf("%s: no rm -r in %v", line, ev.Items)
		}
	}
}
