package policy

import (
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
// order; every other call must pass).
type caseFile struct {
	org, user *Layer
	warnings  []string
	shadowed  []string
	failures  []string
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
			results := p.RunTests(TestOptions{})
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
		})
	}
	t.Logf("%d calls in %d files", total, len(files))
}
