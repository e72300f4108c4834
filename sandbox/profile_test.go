package sandbox

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

type deriveCase struct {
	Name   string
	Policy string
	Agent  struct {
		Name      string
		Command   string
		StateDirs []string `yaml:"state_dirs"`
		Env       map[string]string
	}
	Roots            []string
	Executable       string
	ExecutableTarget string `yaml:"executableTarget"`
	Links            map[string]string
	Hidden           []string
	WireOnly         []string `yaml:"wireOnly"`
	Hides            []string
	Visible          []string
	Writable         []string
	NotWritable      []string `yaml:"notWritable"`
	Errors           []string
	Warnings         []string
}

// compile builds a policy from the rules YAML of an org file.
func compile(t *testing.T, src string) *policy.Policy {
	t.Helper()
	if src == "" {
		return nil
	}
	l, err := policy.ParseFile("policy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDerive(t *testing.T) {
	data, err := os.ReadFile("testdata/derive.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []deriveCase
	if err := yaml.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			roots := c.Roots
			if roots == nil {
				roots = []string{"/home/u/proj"}
			}
			agent := config.Agent{Name: c.Agent.Name, Command: c.Agent.Command, StateDirs: c.Agent.StateDirs}
			prof, probs := Derive(compile(t, c.Policy), agent, Env{Home: "/home/u", TempDir: "/tmp", Roots: roots,
				Executable: c.Executable, ExecutableTarget: c.ExecutableTarget, Links: c.Links,
				Getenv: func(k string) string { return c.Agent.Env[k] }})
			var hidden, wire []string
			for _, h := range prof.Hidden {
				hidden = append(hidden, h.Rule)
			}
			for _, s := range prof.WireOnly {
				wire = append(wire, s.Rule)
				if s.Reason == "" {
					t.Errorf("wire-only rule %s has no reason", s.Rule)
				}
			}
			if c.Hidden != nil && !slices.Equal(hidden, c.Hidden) {
				t.Errorf("hidden rules = %q, want %q", hidden, c.Hidden)
			}
			if c.WireOnly != nil && !slices.Equal(wire, c.WireOnly) {
				t.Errorf("wire-only rules = %q, want %q", wire, c.WireOnly)
			}
			for _, p := range c.Hides {
				if !prof.Hides(p) {
					t.Errorf("%s is not hidden", p)
				}
			}
			for _, p := range c.Visible {
				if prof.Hides(p) {
					t.Errorf("%s is hidden", p)
				}
			}
			for _, p := range c.Writable {
				if !slices.Contains(prof.Writable, p) {
					t.Errorf("%s is not writable: %q", p, prof.Writable)
				}
			}
			for _, p := range c.NotWritable {
				if slices.Contains(prof.Writable, p) {
					t.Errorf("%s is writable", p)
				}
			}
			var errs, warns []string
			for _, p := range probs {
				if p.Error {
					errs = append(errs, p.Msg)
				} else {
					warns = append(warns, p.Msg)
				}
			}
			checkMsgs(t, "error", errs, c.Errors)
			checkMsgs(t, "warning", warns, c.Warnings)
		})
	}
}

// checkMsgs: each of want is in one of got, and there are as many.
func checkMsgs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%ss = %q, want %d", what, got, len(want))
		return
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("%s %d = %q, want it to contain %q", what, i, got[i], w)
		}
	}
}

func TestHashFollowsProfile(t *testing.T) {
	pol := compile(t, "rules:\n  - {id: a, decision: deny, when: {paths: [\"**/.env\"]}}\n")
	env := Env{Home: "/home/u", TempDir: "/tmp", Roots: []string{"/home/u/p"}}
	a, _ := Derive(pol, config.Agent{Name: "x", Command: "gemini"}, env)
	b, _ := Derive(pol, config.Agent{Name: "x", Command: "gemini"}, env)
	c, _ := Derive(nil, config.Agent{Name: "x", Command: "gemini"}, env)
	if a.Hash() != b.Hash() || a.Hash() == c.Hash() {
		t.Errorf("hashes: same profile %s %s, without the rule %s", a.Hash(), b.Hash(), c.Hash())
	}
	if !strings.Contains(a.Summary(), "hidden by a") {
		t.Errorf("summary %q does not name the rule", a.Summary())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixturePolicy hides the secrets of the kernel tests' fixture.
const fixturePolicy = `rules:
  - id: no-secrets
    decision: deny
    when: {paths: ["**/.env", "~/.ssh/**", "~/keys/**"]}
    unless: {paths: ["**/.env.example"]}
`
