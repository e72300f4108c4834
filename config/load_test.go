package config

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeAgents are the commands the test PATH provides.
var fakeAgents = []string{"claude-agent-acp", "codex-acp", "gemini"}

// fakeBin returns a new directory holding an executable for each name.
func fakeBin(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testEnv is an environment for Parse: HOME=/home/u, PATH=bin, plus vars.
func testEnv(bin string, vars map[string]string) func(string) (string, bool) {
	env := map[string]string{"HOME": "/home/u", "PATH": bin}
	maps.Copy(env, vars)
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// TestParseErrors runs testdata/errors/*.yaml. Each file starts with one
// "# want: LINE:COL: message" line per expected error, in order.
func TestParseErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	env := testEnv(fakeBin(t, fakeAgents...), map[string]string{"API_KEY": "sk-test"})
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for line := range strings.Lines(string(data)) {
				w, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "# want: ")
				if !ok {
					break
				}
				want = append(want, file+":"+w)
			}
			if len(want) == 0 {
				t.Fatal(`the file does not start with a "# want: " line`)
			}
			cfg, err := Parse(file, data, env)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			if got := err.Error(); got != strings.Join(want, "\n") {
				t.Errorf("got errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
			errs := []error{err}
			if joined, ok := err.(interface{ Unwrap() []error }); ok {
				errs = joined.Unwrap()
			}
			for _, e := range errs {
				if _, ok := e.(*Error); !ok {
					t.Errorf("error %q is a %T, want *Error", e, e)
				}
			}
		})
	}
}

func TestParseFull(t *testing.T) {
	const file = "testdata/valid/full.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bin := fakeBin(t, fakeAgents...)
	env := testEnv(bin, map[string]string{"API_KEY": "sk-test", "BIN_DIR": bin, "USER_NAME": "ana"})
	got, err := Parse(file, data, env)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"ANTHROPIC_API_KEY": "sk-test", "EMPTY": "", "PORT": "8080"}
	want := &Config{
		Version: 1,
		Agents: []Agent{{
			Name:           "claude",
			Title:          "Claude Code",
			Command:        "claude-agent-acp",
			Args:           []string{"--verbose", "info", "cost: $5", "$HOME", "42"},
			Env:            keys,
			EnvInherit:     EnvInheritMinimal,
			Cwd:            "/home/u/work",
			Lazy:           true,
			StartupTimeout: time.Minute,
			StallTimeout:   5 * time.Second,
			CancelTimeout:  2500 * time.Millisecond,
			IdleTimeout:    90 * time.Minute,
			Auth:           AuthHide,
			Pos:            Pos{File: file, Line: 6, Col: 5},
		}, {
			Name:           "codex",
			Title:          "codex",
			Command:        bin + "/codex-acp",
			Args:           []string{},
			Env:            keys,
			EnvInherit:     EnvInheritAll,
			Cwd:            "/srv/ana",
			StartupTimeout: DefaultStartupTimeout,
			StallTimeout:   DefaultStallTimeout,
			CancelTimeout:  DefaultCancelTimeout,
			Auth:           AuthAdvertise,
			Pos:            Pos{File: file, Line: 22, Col: 5},
		}, {
			Name:           "gemini-2",
			Title:          "gemini-2",
			Command:        "gemini",
			EnvInherit:     EnvInheritAll,
			StartupTimeout: DefaultStartupTimeout,
			StallTimeout:   DefaultStallTimeout,
			CancelTimeout:  DefaultCancelTimeout,
			Auth:           AuthAdvertise,
			Pos:            Pos{File: file, Line: 31, Col: 5},
		}},
		Routing: Routing{
			Default:    "codex",
			DefaultSet: true,
			Fallback:   "gemini-2",
			Rules: []Rule{
				{Cwd: []string{"/home/u/work/infra/**", "/srv/**"}, Agent: "codex", Enforce: true, Pos: Pos{File: file, Line: 38, Col: 7}},
				{Cwd: []string{"/home/u"}, Agent: "claude", Pos: Pos{File: file, Line: 41, Col: 7}},
			},
		},
		Commands: []Command{
			{Name: "review", Description: "Ask Codex to review the current changes", Agent: "codex",
				Prompt: "Review the uncommitted changes in this repository. {{input}}", Pos: Pos{File: file, Line: 47, Col: 5}},
			{Name: "infra", Description: "Switch to Codex", Agent: "codex", Switch: true, Pos: Pos{File: file, Line: 51, Col: 5}},
		},
		Handoff:  Handoff{MaxBytes: 4096},
		StateDir: "/home/u/state",
		Audit:    Audit{File: "/home/u/audit/decisions.jsonl", MaxBytes: 1 << 20, Pos: Pos{File: file, Line: 60, Col: 3}},
		History:  History{MaxTotalBytes: 512 << 20, MaxAge: 48 * time.Hour, MetadataOnly: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}

const minimal = `version: 1
agents:
  - name: claude
    command: claude-agent-acp
  - name: codex
    command: codex-acp
`

func TestParseDefaults(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	cfg, err := Parse("c.yaml", []byte(minimal), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Agent{
		Name:           "codex",
		Title:          "codex",
		Command:        "codex-acp",
		EnvInherit:     EnvInheritAll,
		StartupTimeout: DefaultStartupTimeout,
		StallTimeout:   DefaultStallTimeout,
		CancelTimeout:  DefaultCancelTimeout,
		Auth:           AuthAdvertise,
		Pos:            Pos{File: "c.yaml", Line: 5, Col: 5},
	}
	if !reflect.DeepEqual(cfg.Agents[1], want) {
		t.Errorf("agent:\ngot  %+v\nwant %+v", cfg.Agents[1], want)
	}
	if want := (Routing{Default: "claude"}); !reflect.DeepEqual(cfg.Routing, want) {
		t.Errorf("routing: got %+v, want %+v", cfg.Routing, want)
	}
	if cfg.File != "" {
		t.Errorf("File = %q, want empty from Parse", cfg.File)
	}
}

// TestParseSuccessor: the conductor's successor (proxy chains) may be
// listed without a command; it is then the only agent that may.
func TestParseSuccessor(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	y := "version: 1\nagents:\n  - name: successor\n    title: Next in the chain\n  - name: codex\n    command: codex-acp\nstate_dir: /tmp/s\n"
	cfg, err := Parse("c.yaml", []byte(y), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := cfg.Agent(SuccessorName); !ok || a.Command != "" || a.Title != "Next in the chain" {
		t.Errorf("successor = %+v", a)
	}
	if cfg.Routing.Default != SuccessorName || cfg.Routing.DefaultSet {
		t.Errorf("routing = %+v: want the first agent, not set", cfg.Routing)
	}
}

func TestParseStateDirDefault(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	tests := []struct {
		name    string
		extra   string // appended to minimal
		vars    map[string]string
		want    string
		wantErr string
	}{
		{name: "xdg", vars: map[string]string{"XDG_STATE_HOME": "/xdg/state"}, want: "/xdg/state/acp-router"},
		{name: "relative xdg is ignored", vars: map[string]string{"XDG_STATE_HOME": "state"}, want: "/home/u/.local/state/acp-router"},
		{name: "home", want: "/home/u/.local/state/acp-router"},
		{name: "empty state_dir", extra: `state_dir: ""`, want: "/home/u/.local/state/acp-router"},
		{name: "no home", vars: map[string]string{"HOME": ""},
			wantErr: "c.yaml:1:1: cannot choose a default state_dir: neither XDG_STATE_HOME nor HOME is an absolute path; set state_dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("c.yaml", []byte(minimal+tt.extra), testEnv(bin, tt.vars))
			if tt.wantErr != "" {
				if errString(err) != tt.wantErr {
					t.Fatalf("got error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.StateDir != tt.want {
				t.Errorf("StateDir = %q, want %q", cfg.StateDir, tt.want)
			}
		})
	}
}

// TestParseEnvironment covers what depends on the environment or the file
// system, which the testdata files cannot set up.
func TestParseEnvironment(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	plain := filepath.Join(bin, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := func(lines ...string) string {
		return "version: 1\nagents:\n  - name: a\n" + strings.Join(lines, "\n") + "\n"
	}
	tests := []struct {
		name    string
		yaml    string
		vars    map[string]string
		wantErr string // "" for success
	}{
		{name: "absolute command", yaml: agent("    command: " + self)},
		{name: "relative command is resolved against cwd", yaml: agent("    command: ./codex-acp", "    cwd: "+bin)},
		{name: "not executable", yaml: agent("    command: " + plain),
			wantErr: `c.yaml:4:14: agents[0].command: "` + plain + `" is not executable`},
		{name: "directory", yaml: agent("    command: " + bin),
			wantErr: `c.yaml:4:14: agents[0].command: "` + bin + `" is a directory`},
		{name: "no PATH", yaml: agent("    command: codex-acp"), vars: map[string]string{"PATH": ""},
			wantErr: `c.yaml:4:14: agents[0].command: "codex-acp" not found in PATH`},
		{name: "second PATH entry", yaml: agent("    command: codex-acp"),
			vars: map[string]string{"PATH": "/nonexistent" + string(filepath.ListSeparator) + bin}},
		{name: "no HOME for ~", yaml: agent("    command: codex-acp", "    cwd: ~/src"), vars: map[string]string{"HOME": "", "XDG_STATE_HOME": "/s"},
			wantErr: `c.yaml:5:10: agents[0].cwd: cannot expand ~: HOME is not set`},
		{name: "env from the environment", yaml: agent("    command: ${BIN}/codex-acp"), vars: map[string]string{"BIN": bin}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tt.yaml), testEnv(bin, tt.vars))
			if got := errString(err); got != tt.wantErr {
				t.Errorf("got error %q, want %q", got, tt.wantErr)
			}
		})
	}
}

// TestParseRelativePathEntry checks that a command found only through a
// relative PATH entry is refused, as os/exec refuses it (exec.ErrDot).
func TestParseRelativePathEntry(t *testing.T) {
	t.Chdir(fakeBin(t, "codex-acp"))
	_, err := Parse("c.yaml", []byte(minimal), testEnv(".", nil))
	want := `c.yaml:4:14: agents[0].command: "claude-agent-acp" not found in PATH` + "\n" +
		`c.yaml:6:14: agents[1].command: "codex-acp" not found in PATH`
	if got := errString(err); got != want {
		t.Errorf("got error %q, want %q", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestExpandEnv(t *testing.T) {
	env := testEnv("/bin", map[string]string{"A": "x", "EMPTY": ""})
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "x"},
		{in: "a${A}b${A}c", want: "axbxc"},
		{in: "$$", want: "$"},
		{in: "$${A}", want: "${A}"},
		{in: "$$${A}", want: "$x"},
		{in: "cost: $5", want: "cost: $5"},
		{in: "$A", want: "$A"},
		{in: "end$", want: "end$"},
		{in: "${EMPTY}", want: ""},
		{in: "${EMPTY:-d}", want: "d"},
		{in: "${UNSET:-d}", want: "d"},
		{in: "${UNSET:-}", want: ""},
		{in: "${A:-d}", want: "x"},
		{in: "${UNSET:-a b/c}", want: "a b/c"},
		{in: "${UNSET}", wantErr: `environment variable "UNSET" is not set`},
		{in: "${A", wantErr: `missing } after ${ in "${A"`},
		{in: "${}", wantErr: `invalid environment variable name "" in ${} (write $$ for a literal $)`},
		{in: "${A B}", wantErr: `invalid environment variable name "A B" in ${A B} (write $$ for a literal $)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := expandEnv(tt.in, env)
			if errString(err) != tt.wantErr || got != tt.want {
				t.Errorf("expandEnv(%q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestRuleMatch(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	cfg, err := Parse("c.yaml", []byte(minimal+`routing:
  rules:
    - when: {cwd: ~/work/**}
      agent: codex
    - when: {cwd: [/srv/*/src, "~"]}
      agent: claude
`), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rule int
		cwd  string
		want bool
	}{
		{0, "/home/u/work", true}, // DIR/** matches DIR itself
		{0, "/home/u/work/", true},
		{0, "/home/u/work/a/b", true},
		{0, "/home/u/work/a/../b", true},
		{0, "/home/u/workx", false},
		{0, "/home/u/work/../other", false},
		{0, "/home/u", false},
		{1, "/srv/app/src", true},
		{1, "/srv/app/src/pkg", false},
		{1, "/home/u", true},
		{1, "/home/u/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.cwd, func(t *testing.T) {
			if got := cfg.Routing.Rules[tt.rule].Match(tt.cwd); got != tt.want {
				t.Errorf("rule %d (%q).Match(%q) = %v, want %v", tt.rule, cfg.Routing.Rules[tt.rule].Cwd, tt.cwd, got, tt.want)
			}
		})
	}
}

func TestConfigAgent(t *testing.T) {
	cfg := &Config{Agents: []Agent{{Name: "claude"}, {Name: "codex"}}}
	if a, ok := cfg.Agent("codex"); !ok || a != &cfg.Agents[1] {
		t.Errorf("Agent(codex) = %p, %v; want %p, true", a, ok, &cfg.Agents[1])
	}
	if a, ok := cfg.Agent("gemini"); ok || a != nil {
		t.Errorf("Agent(gemini) = %v, %v; want nil, false", a, ok)
	}
}

func TestLoad(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	for file, data := range map[string]string{
		good: "version: 1\nagents:\n  - {name: a, command: " + self + "}\nstate_dir: /tmp/s\n",
		bad:  "version: 1\nagents:\n  - {name: a, command: " + self + ", lazzy: true}\n",
	} {
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)

	cfg, err := Load("good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != good {
		t.Errorf("File = %q, want %q", cfg.File, good)
	}

	_, err = Load("bad.yaml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error", err)
	}
	col := len("  - {name: a, command: "+self+", ") + 1
	want := &Error{Pos: Pos{File: "bad.yaml", Line: 3, Col: col}, Msg: `unknown key "lazzy" (did you mean "lazy"?)`}
	if *e != *want {
		t.Errorf("got %v, want %v", e, want)
	}

	if _, err := Load("missing.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing.yaml) = %v, want fs.ErrNotExist", err)
	}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	touch := func(rel string) string {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	flag := touch("flag.yaml")
	fromEnv := touch("env.yaml")
	xdg := touch("xdg/acp-router/config.yaml")
	home := touch("home/.config/acp-router/config.yaml")
	missing := filepath.Join(dir, "missing.yaml")
	xdgDir, homeDir, empty := filepath.Join(dir, "xdg"), filepath.Join(dir, "home"), filepath.Join(dir, "empty")

	tests := []struct {
		name    string
		flag    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "flag first", flag: flag, env: map[string]string{"ACP_ROUTER_CONFIG": fromEnv, "XDG_CONFIG_HOME": xdgDir}, want: flag},
		{name: "ACP_ROUTER_CONFIG", env: map[string]string{"ACP_ROUTER_CONFIG": fromEnv, "XDG_CONFIG_HOME": xdgDir}, want: fromEnv},
		{name: "XDG_CONFIG_HOME before HOME", env: map[string]string{"XDG_CONFIG_HOME": xdgDir, "HOME": homeDir}, want: xdg},
		{name: "HOME when XDG has none", env: map[string]string{"XDG_CONFIG_HOME": empty, "HOME": homeDir}, want: home},
		{name: "relative XDG_CONFIG_HOME ignored", env: map[string]string{"XDG_CONFIG_HOME": "xdg", "HOME": homeDir}, want: home},
		{name: "missing flag file", flag: missing, env: map[string]string{"HOME": homeDir},
			wantErr: "config: " + missing + " (from --config) does not exist; " + startHint},
		{name: "missing ACP_ROUTER_CONFIG file", env: map[string]string{"ACP_ROUTER_CONFIG": missing, "HOME": homeDir},
			wantErr: "config: " + missing + " (from $ACP_ROUTER_CONFIG) does not exist; " + startHint},
		{name: "nothing", env: map[string]string{"XDG_CONFIG_HOME": empty, "HOME": empty},
			wantErr: "config: no config file found; looked at:\n" +
				"  --config: not given\n" +
				"  $ACP_ROUTER_CONFIG: not set\n" +
				"  " + empty + "/acp-router/config.yaml: does not exist\n" +
				"  " + empty + "/.config/acp-router/config.yaml: does not exist\n" +
				"to start, copy config.example.yaml from the acp-router repository to ~/.config/acp-router/config.yaml, or pass --config FILE"},
		{name: "no variables", wantErr: "config: no config file found; looked at:\n" +
			"  --config: not given\n" +
			"  $ACP_ROUTER_CONFIG: not set\n" +
			"  $XDG_CONFIG_HOME: not set or not absolute\n" +
			"  $HOME: not set or not absolute\n" + startHint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := func(name string) (string, bool) {
				v, ok := tt.env[name]
				return v, ok
			}
			got, err := Lookup(tt.flag, env)
			if got != tt.want || errString(err) != tt.wantErr {
				t.Errorf("Lookup = %q, %v\nwant %q, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParsePermissionsKeptAsYAML(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	cfg, err := Parse("c.yaml", []byte(minimal+"permissions:\n  default: deny\n"), testEnv(bin, map[string]string{"XDG_STATE_HOME": "/state"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Permissions == nil || cfg.Permissions.Node.Line != strings.Count(minimal, "\n")+2 || cfg.Permissions.File != "c.yaml" || cfg.Permissions.Home != "/home/u" {
		t.Fatalf("permissions = %+v", cfg.Permissions)
	}
	if cfg.Audit.File != "/state/acp-router/audit.jsonl" {
		t.Errorf("default audit file = %q", cfg.Audit.File)
	}
}

func TestParseSizes(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	for in, want := range map[string]int64{"1048576": 1 << 20, "2MiB": 2 << 20, "1GiB": 1 << 30, "5MB": 5e6, "3 GiB": 3 << 30} {
		cfg, err := Parse("c.yaml", []byte(minimal+"history: {max_total_bytes: "+in+"}\n"), testEnv(bin, nil))
		if err != nil || cfg.History.MaxTotalBytes != want {
			t.Errorf("%s: %v, %v; want %d", in, cfg, err, want)
		}
	}
	if _, err := Parse("c.yaml", []byte(minimal+"history: {max_total_bytes: 1KiB}\n"), testEnv(bin, nil)); err == nil || !strings.Contains(err.Error(), "at least 1MiB") {
		t.Errorf("1KiB: %v", err)
	}
}
