package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/policy/extract"
)

const walkPolicy = `
default: ask
rules:
  - {id: no-pem, decision: deny, when: {paths: ["**/*.pem"]}}
  - {id: no-ssh, decision: deny, when: {paths: ["~/.ssh/**"]}}
  - {id: reads, decision: allow, when: {kind: [read, search], paths: ["${roots}/**"]}}
  - {id: tools, decision: allow, when: {program: [grep, rg]}}
`

func walkTerminal(cmd string, fs extract.FS) *extract.Request {
	r := terminal(cmd)
	r.FS = fs
	return r
}

// pathFinding is the finding of the decision's first path item.
func pathFinding(t *testing.T, d *Decision) *Finding {
	t.Helper()
	for i := range d.Findings {
		if d.Findings[i].Item.Type == extract.ItemPath {
			return &d.Findings[i]
		}
	}
	t.Fatalf("no path item:\n%s", Explain(d))
	return nil
}

func TestMapFSWalk(t *testing.T) {
	m := extract.NewMapFS([]string{"/p/b/x.go", "/p/a.go", "/p/.h/y", "/p/.e", "/p/b/c/", "/q/z"},
		map[string]string{"/p/l": "/q", "/p/b/k": "../a.go", "/p/loop": "/p/loop2", "/p/loop2": "/p/loop"})
	got := func(skip bool) string {
		r := m.Walk("/p", skip)
		var s []string
		for _, e := range r.Entries {
			x := e.Rel
			switch {
			case e.Dir:
				x += "/"
			case e.Link:
				x += "->" + e.Target
				if e.TargetDir {
					x += "/"
				}
			}
			s = append(s, x)
		}
		return strings.Join(s, " ") + "|" + r.Cut
	}
	if g, w := got(false), ".e .h/ a.go b/ l->/q/ loop-> loop2-> .h/y b/c/ b/k->/p/a.go b/x.go|"; g != w {
		t.Errorf("walk:\n got %s\nwant %s", g, w)
	}
	if g, w := got(true), "a.go b/ l->/q/ loop-> loop2-> b/c/ b/k->/p/a.go b/x.go|"; g != w {
		t.Errorf("walk skipping hidden:\n got %s\nwant %s", g, w)
	}
	if r := m.Walk("/p/a.go", false); len(r.Entries) != 0 || r.Cut != "" {
		t.Errorf("walk of a file: %+v", r)
	}
	if r := m.Walk("/nowhere", false); len(r.Entries) != 0 || r.Cut != "" {
		t.Errorf("walk of nothing: %+v", r)
	}
}

// TestWalkDecides: a recursive read asks only when what a deny names is
// really below it, and says which file.
func TestWalkDecides(t *testing.T) {
	p := mustCompile(t, mustParse(t, "p.yaml", walkPolicy))
	clean := extract.NewMapFS([]string{TestCwd + "/src/main.go", TestCwd + "/src/util/u.go"}, nil)
	d := p.Decide(walkTerminal("grep -rn TODO src", clean))
	if d.Effect != Allow {
		t.Fatalf("clean project: %s\n%s", d.Effect, Explain(&d))
	}
	if f := pathFinding(t, &d); f.Walked != 3 {
		t.Errorf("walked %d entries, want 3", f.Walked)
	}
	if text := Explain(&d); !strings.Contains(text, "walked 3 entries below it") {
		t.Errorf("explain lacks the walk:\n%s", text)
	}

	dirty := extract.NewMapFS([]string{TestCwd + "/src/main.go", TestCwd + "/src/certs/server.pem"}, nil)
	d = p.Decide(walkTerminal("grep -rn TODO src", dirty))
	if d.Effect != Ask || d.Rule != "no-pem" {
		t.Fatalf("a certificate below: %s by %s\n%s", d.Effect, d.Rule, Explain(&d))
	}
	f := pathFinding(t, &d)
	if len(f.Matches) == 0 || f.Matches[0].Below != TestCwd+"/src/certs/server.pem" || !f.Matches[0].Possible {
		t.Errorf("matches %+v", f.Matches)
	}
	if text := Explain(&d); !strings.Contains(text, "the rule matches "+TestCwd+"/src/certs/server.pem below this directory, so it asks") {
		t.Errorf("explain lacks the file below:\n%s", text)
	}

	// A symlink below to a denied file: by its target, for a program
	// that opens it (grep -R); grep -r opens none below its operands
	// (issue 27).
	linked := extract.NewMapFS([]string{TestCwd + "/src/main.go", TestHome + "/.ssh/id_rsa"},
		map[string]string{TestCwd + "/docs/key": TestHome + "/.ssh/id_rsa"})
	if d = p.Decide(walkTerminal("grep -r x .", linked)); d.Effect != Allow {
		t.Errorf("a symlink grep -r does not open: %s by %s\n%s", d.Effect, d.Rule, Explain(&d))
	}
	d = p.Decide(walkTerminal("grep -R x .", linked))
	if d.Effect != Ask || d.Rule != "no-ssh" {
		t.Fatalf("a symlink below: %s by %s\n%s", d.Effect, d.Rule, Explain(&d))
	}
	if text := Explain(&d); !strings.Contains(text, TestCwd+"/docs/key -> "+TestHome+"/.ssh/id_rsa below this directory") {
		t.Errorf("explain lacks the link:\n%s", text)
	}

	// Without a Walker, nothing is known: the rule asks as it may match.
	d = p.Decide(walkTerminal("grep -rn TODO src", onlyFS{clean}))
	if d.Effect != Ask || d.Rule != "no-pem" {
		t.Errorf("no walker: %s by %s\n%s", d.Effect, d.Rule, Explain(&d))
	}
	d = p.Evaluate(extract.Extract(walkTerminal("grep -rn TODO src", clean)))
	if d.Effect != Ask || d.Rule != "no-pem" {
		t.Errorf("Evaluate, no FS: %s by %s", d.Effect, d.Rule)
	}
}

// onlyFS hides the Walker of an FS.
type onlyFS struct{ fs extract.FS }

func (o onlyFS) Resolve(p string) (string, error) { return o.fs.Resolve(p) }
func (o onlyFS) Stat(p string) (bool, bool)       { return o.fs.Stat(p) }
func (o onlyFS) Glob(p string) ([]string, error)  { return o.fs.Glob(p) }

// TestWalkBound: past MaxWalkEntries the walk is cut short and the read
// asks, saying so; the decision stays fast.
func TestWalkBound(t *testing.T) {
	p := mustCompile(t, mustParse(t, "p.yaml", walkPolicy))
	files := make([]string, 0, extract.MaxWalkEntries+10)
	for i := range extract.MaxWalkEntries + 10 {
		files = append(files, fmt.Sprintf("%s/src/d%03d/f%d.go", TestCwd, i%100, i))
	}
	m := extract.NewMapFS(files, nil)
	start := time.Now()
	d := p.Decide(walkTerminal("grep -rn TODO src", m))
	el := time.Since(start)
	if d.Effect != Ask || d.Rule != "no-pem" {
		t.Fatalf("past the bound: %s by %s", d.Effect, d.Rule)
	}
	f := pathFinding(t, &d)
	if len(f.Matches) == 0 || !strings.Contains(f.Matches[0].Cut, fmt.Sprintf("more than %d entries", extract.MaxWalkEntries)) {
		t.Errorf("matches %+v", f.Matches)
	}
	if text := Explain(&d); !strings.Contains(text, "the walk below this directory was cut short") {
		t.Errorf("explain lacks the cut:\n%s", text)
	}
	t.Logf("decision over %d MapFS entries (walk + match): %v", extract.MaxWalkEntries, el)

	// Many recursive reads in one request: past maxWalks, ask.
	var dirs []string
	var fs []string
	for i := range maxWalks + 2 {
		dirs = append(dirs, fmt.Sprintf("d%d", i))
		fs = append(fs, fmt.Sprintf("%s/d%d/x.go", TestCwd, i))
	}
	d = p.Decide(walkTerminal("grep -r x "+strings.Join(dirs, " "), extract.NewMapFS(fs, nil)))
	if d.Effect != Ask || !strings.Contains(Explain(&d), fmt.Sprintf("more than %d directories to walk", maxWalks)) {
		t.Errorf("many walks: %s\n%s", d.Effect, Explain(&d))
	}
}

// BenchmarkDecideWalk: a recursive read of a tree at the walk's bound
// with the 500-rule benchmark policy (every deny and ask rule that may
// match below it looks at every entry).
func BenchmarkDecideWalk(b *testing.B) {
	p := benchPolicy(b)
	files := make([]string, 0, extract.MaxWalkEntries)
	for i := range extract.MaxWalkEntries - 100 {
		files = append(files, fmt.Sprintf("%s/src/d%03d/f%d.go", TestCwd, i%100, i))
	}
	req := walkTerminal("grep -rn TODO src", extract.NewMapFS(files, nil))
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(req)
	}
}

// TestWalkExplained: explain says how a recursive read walks.
func TestWalkExplained(t *testing.T) {
	p := mustCompile(t, mustUser(t, "default: ask\nrules:\n  - {id: r, decision: allow, when: {paths: [\"${roots}/**\"]}}\n"))
	fs := extract.NewMapFS([]string{TestCwd + "/a.go"}, nil)
	for cmd, want := range map[string]string{
		"rg x .":       "opens no symlink below it",
		"go vet ./...": "opens a symlink below it only to a file named *.go",
		"grep -R x .":  "(read; argument of grep; recursive)",
	} {
		d := p.Decide(walkTerminal(cmd, fs))
		if text := Explain(&d); !strings.Contains(text, want) {
			t.Errorf("%s: explain lacks %q:\n%s", cmd, want, text)
		}
	}
}
