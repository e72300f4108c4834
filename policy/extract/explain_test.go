package extract_test

import (
	"strings"
	"testing"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

const explainPolicy = `
default: ask
rules:
  - {id: tools, decision: allow, when: {command: ["git **", "sed **", "cat **", "mytool **"]}}
  - {id: literal, decision: allow, when: {command: ["othertool build"]}}
  - {id: project, decision: allow, when: {paths: ["${roots}/**"]}}
  - {id: vouched, decision: allow, arguments: any, when: {command: ["./release.sh **"]}}
`

// TestExplainSaysWhy: a command that asks says what made it ask — the
// option or program the router does not understand, the path it could not
// resolve, the evidence it cut short — so that a user can write the rule
// that allows it (issue 14 point 8); arguments: any and a literal command
// pattern allow what is not understood.
func TestExplainSaysWhy(t *testing.T) {
	l, err := policy.ParseFile("explain.yaml", []byte(explainPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	loop := terminalReq(t, "cat a")
	loop.FS = extract.NewMapFS(nil, map[string]string{policy.TestCwd + "/a": policy.TestCwd + "/b", policy.TestCwd + "/b": policy.TestCwd + "/a"})
	tests := []struct {
		name string
		req  *extract.Request
		want policy.Effect
		why  []string // parts of the Explain text
	}{
		{"unknown option", terminalReq(t, "git status --frobnicate"), policy.Ask,
			[]string{"git status: unknown option --frobnicate", "acp-router:unknown-arguments", "arguments: any"}},
		{"unknown subcommand", terminalReq(t, "git frobnicate"), policy.Ask, []string{`git: unknown subcommand "frobnicate"`}},
		{"no spec", terminalReq(t, "mytool run --fast"), policy.Ask, []string{"no argument spec for mytool"}},
		{"sed script", terminalReq(t, "sed 'k' README.md"), policy.Ask, []string{`sed: unknown command 'k'`}},
		{"unresolved path", loop, policy.Ask, []string{"symlinks could not be resolved"}},
		{"truncated", terminalReq(t, "cat "+strings.Join(files(300), " ")), policy.Ask, []string{"more than 256 pieces of evidence"}},
		{"side command", terminalReq(t, "git -c core.pager='sh -c id' log"), policy.Ask, []string{"git -c sets a command git runs"}},
		{"vouched", terminalReq(t, "./release.sh --frobnicate x"), policy.Allow, nil},
		{"literal", terminalReq(t, "othertool build"), policy.Allow, nil},
		{"not literal", terminalReq(t, "othertool build2"), policy.Ask, []string{"no argument spec for othertool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.req)
			text := policy.Explain(&d)
			if d.Effect != tt.want {
				t.Fatalf("got %s, want %s:\n%s", d.Effect, tt.want, text)
			}
			for _, w := range tt.why {
				if !strings.Contains(text, w) {
					t.Errorf("the explanation does not say %q:\n%s", w, text)
				}
			}
		})
	}
}
