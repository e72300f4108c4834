package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// caseFile is a file of testdata/cases: an org policy file and a user
// permissions mapping, each with its own tests: (the schema of `acp-router
// policy test`), plus what Warnings and Shadowed must report and the
// tests that must fail ("LINE:COL: problem", one per failing call, in
// order; every other call must pass), and the verdicts of modes and
// agents.
type caseFile struct {
	org, user *Layer
	warnings  []string
	shadowed  []string
	failures  []string
	modes     []modeCase
	agents    []agentCase
}

// modeCase is one expected mode verdict: expect is allow or deny; rule
// the built-in rule that denies; by "LINE:COL" of the deciding deny_modes
// or allow_modes entry ("" for none); why a part of Why.
type modeCase struct {
	Agent  string `yaml:"agent"`
	Info   string `yaml:"info"`
	Mode   string `yaml:"mode"`
	Expect string `yaml:"expect"`
	Rule   string `yaml:"rule"`
	Layer  string `yaml:"layer"`
	By     string `yaml:"by"`
	Why    string `yaml:"why"`
	// Target is the mode the router moves the agent to from Mode, given
	// the agent's modes From.
	From   []string `yaml:"from"`
	Target string   `yaml:"target"`
}

// agentCase is one expected agent status: expect is ok, warn or refuse.
type agentCase struct {
	Agent   string `yaml:"agent"`
	Info    string `yaml:"info"`
	Expect  string `yaml:"expect"`
	Problem string `yaml:"problem"`
}

// loadCases parses one testdata/cases file.
func loadCases(t *testing.T, file string) *caseFile {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	cf := &caseFile{}
	top := yamlpos.Deref(&root)
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, val := top.Content[i].Value, top.Content[i+1]
		switch key {
		case "org":
			p := &parser{file: file}
			cf.org = p.layer(val, kindOrgFile)
			if err := p.err(); err != nil {
				t.Fatal(err)
			}
		case "user":
			if cf.user, err = ParseLayer(file, val); err != nil {
				t.Fatal(err)
			}
		case "warnings":
			if err := val.Decode(&cf.warnings); err != nil {
				t.Fatal(err)
			}
		case "shadowed":
			if err := val.Decode(&cf.shadowed); err != nil {
				t.Fatal(err)
			}
		case "failures":
			if err := val.Decode(&cf.failures); err != nil {
				t.Fatal(err)
			}
		case "modes":
			if err := val.Decode(&cf.modes); err != nil {
				t.Fatal(err)
			}
		case "agents":
			if err := val.Decode(&cf.agents); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unknown key %q", file, key)
		}
	}
	return cf
}

// TestCases runs every testdata/cases/*.yaml: each call of each test must
// get the expected decision (and rule), in both layers, or fail as the
// file says; warnings and shadowed rules must be the expected ones.
func TestCases(t *testing.T) {
	files, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no case files: %v", err)
	}
	total := 0
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			cf := loadCases(t, file)
			p, err := Compile(cf.org, cf.user)
			if err != nil {
				t.Fatal(err)
			}
			results := p.RunTests()
			if len(results) == 0 {
				t.Fatal("the file has no tests")
			}
			total += len(results)
			want := cf.failures
			for _, r := range results {
				if r.Pass {
					continue
				}
				got := r.Case.Pos.String() + ": " + r.Problem
				if len(want) > 0 && got == file+":"+want[0] {
					want = want[1:]
					continue
				}
				call := "?"
				if r.Call != nil {
					call = r.Call.Text
				}
				t.Errorf("%s: %s: %s\n%s", r.Case.Pos, call, r.Problem, Explain(&r.Decision))
			}
			for _, w := range want {
				t.Errorf("no test failed with %s:%s", file, w)
			}
			warnings := p.Warnings()
			for _, w := range cf.warnings {
				if !slices.ContainsFunc(warnings, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("no warning contains %q; warnings:\n%s", w, strings.Join(warnings, "\n"))
				}
			}
			var shadowed []string
			for _, s := range p.Shadowed() {
				shadowed = append(shadowed, s.Rule.ID+" by "+s.By.ID)
			}
			if !slices.Equal(shadowed, cf.shadowed) {
				t.Errorf("shadowed = %q, want %q", shadowed, cf.shadowed)
			}
			for _, mc := range cf.modes {
				checkMode(t, p, file, mc)
			}
			for _, ac := range cf.agents {
				checkAgent(t, p, ac)
			}
		})
	}
	t.Logf("%d calls in %d files", total, len(files))
}

func checkMode(t *testing.T, p *Policy, file string, mc modeCase) {
	t.Helper()
	a := AgentID{Name: mc.Agent, Info: mc.Info}
	v := p.Mode(a, mc.Mode)
	name := fmt.Sprintf("agent %s (%s) mode %s", mc.Agent, mc.Info, mc.Mode)
	got := "allow"
	if v.Denied {
		got = "deny"
	}
	by := ""
	if v.By != nil {
		by = strings.TrimPrefix(v.By.Pos.String(), file+":")
	}
	switch {
	case got != mc.Expect:
		t.Errorf("%s: %s (%s), want %s", name, got, v.Why(), mc.Expect)
	case v.Rule != mc.Rule:
		t.Errorf("%s: rule %q, want %q", name, v.Rule, mc.Rule)
	case mc.Layer != "" && v.Layer != mc.Layer:
		t.Errorf("%s: layer %q, want %q", name, v.Layer, mc.Layer)
	case by != mc.By:
		t.Errorf("%s: decided by the entry at %q, want %q (%s)", name, by, mc.By, v.Why())
	case !strings.Contains(v.Why(), mc.Why):
		t.Errorf("%s: why %q lacks %q", name, v.Why(), mc.Why)
	}
	if p.ModeDenied(a, mc.Mode) != v.Denied {
		t.Errorf("%s: ModeDenied disagrees with Mode", name)
	}
	if mc.From != nil {
		if got := p.ModeTarget(a, mc.From); got != mc.Target {
			t.Errorf("%s: target among %q is %q, want %q", name, mc.From, got, mc.Target)
		}
	}
}

func checkAgent(t *testing.T, p *Policy, ac agentCase) {
	t.Helper()
	st := p.Agent(AgentID{Name: ac.Agent, Info: ac.Info})
	got := "ok"
	switch {
	case st.Refused:
		got = "refuse"
	case st.Problem != "":
		got = "warn"
	}
	if got != ac.Expect || !strings.Contains(st.Problem, ac.Problem) {
		t.Errorf("agent %s (%s): %s %q, want %s %q", ac.Agent, ac.Info, got, st.Problem, ac.Expect, ac.Problem)
	}
}
