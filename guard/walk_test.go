package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// walkPermissions: reads in the project are allowed, keys denied.
const walkPermissions = `permissions:
  default: ask
  rules:
    - id: no-keys
      decision: deny
      when: {paths: ["**/*.pem", "**/.env", "~/.ssh/**"]}
    - id: reads-in-project
      decision: allow
      when: {kind: [read, search], paths: ["${roots}/**"]}
    - id: search-tools
      decision: allow
      when: {program: [grep, rg]}
`

// tempTree makes a real directory (symlinks in its path resolved) with
// files (a trailing / makes a directory) and symlinks (link → target,
// relative to the root unless absolute).
func tempTree(t *testing.T, files []string, links map[string]string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(root, f)
		if strings.HasSuffix(f, "/") {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for l, target := range links {
		p := filepath.Join(root, l)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestWalkOS: what the OS walker lists, as MapFS would: breadth first,
// dotfiles skipped on demand, symlinks resolved but not followed, loops
// harmless.
func TestWalkOS(t *testing.T) {
	root := tempTree(t, []string{"p/a.go", "p/.env", "p/.git/config", "p/b/c/d.go", "ext/x.pem", "ext/dir/"},
		map[string]string{"p/key": "../ext/x.pem", "p/b/lib": "../../ext/dir", "p/l1": "l2", "p/l2": "l1", "p/self": "."})
	dir := filepath.Join(root, "p")
	list := func(r extract.WalkResult) string {
		var s []string
		for _, e := range r.Entries {
			x := e.Rel
			switch {
			case e.Dir:
				x += "/"
			case e.Link:
				x += "->" + strings.TrimPrefix(e.Target, root)
				if e.TargetDir {
					x += "/"
				}
			}
			s = append(s, x)
		}
		slices.Sort(s)
		return strings.Join(s, " ") + "|" + r.Cut
	}
	for _, fs := range []extract.Walker{OSFS{}, newCachedOSFS()} {
		if got, want := list(fs.Walk(dir, false)),
			".env .git/ .git/config a.go b/ b/c/ b/c/d.go b/lib->/ext/dir/ key->/ext/x.pem l1-> l2-> self->/p/|"; got != want {
			t.Errorf("%T walk:\n got %s\nwant %s", fs, got, want)
		}
		if got, want := list(fs.Walk(dir, true)),
			"a.go b/ b/c/ b/c/d.go b/lib->/ext/dir/ key->/ext/x.pem l1-> l2-> self->/p/|"; got != want {
			t.Errorf("%T walk skipping hidden:\n got %s\nwant %s", fs, got, want)
		}
		if r := fs.Walk(filepath.Join(dir, "a.go"), false); len(r.Entries) != 0 || r.Cut != "" {
			t.Errorf("%T walk of a file: %+v", fs, r)
		}
		if r := fs.Walk(filepath.Join(dir, "nothing"), false); len(r.Entries) != 0 || r.Cut != "" {
			t.Errorf("%T walk of nothing: %+v", fs, r)
		}
	}

	// Deeper than MaxWalkDepth: cut short.
	deep := filepath.Join(root, "deep")
	p := deep
	for i := range extract.MaxWalkDepth + 2 {
		p = filepath.Join(p, fmt.Sprint(i%10))
	}
	os.MkdirAll(p, 0o755)
	if r := (OSFS{}).Walk(deep, false); !strings.Contains(r.Cut, "levels") {
		t.Errorf("a deep tree: cut %q after %d entries", r.Cut, len(r.Entries))
	}
	// An unreadable directory: cut short (unless root reads it anyway).
	if os.Geteuid() != 0 {
		locked := filepath.Join(root, "p", "b", "c")
		os.Chmod(locked, 0)
		t.Cleanup(func() { os.Chmod(locked, 0o755) })
		if r := (OSFS{}).Walk(dir, false); !strings.Contains(r.Cut, "cannot read") {
			t.Errorf("an unreadable directory: cut %q", r.Cut)
		}
	}
}

// TestDecideWalk: recursive reads on the real filesystem are decided by
// what is below them, and a directory is walked once per turn.
func TestDecideWalk(t *testing.T) {
	root := tempTree(t, []string{"project/src/main.go", "project/src/util/u.go", "project/README.md", "home/.ssh/id_rsa"}, nil)
	cwd := filepath.Join(root, "project")
	home := filepath.Join(root, "home")
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	g, err := New(loadTestPolicy(t, walkPermissions), Options{AuditFile: auditFile, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	s := NewSession(cwd, nil)
	decide := func(args ...string) *Verdict {
		return g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams(args[0], args[1:]...)})
	}
	if v := decide("grep", "-rn", "TODO", "src"); v.Effect != Allow {
		t.Fatalf("a clean project: %+v (%s)", outcomeOf(v), v.Message)
	}
	if v := decide("rg", "TODO"); v.Effect != Allow {
		t.Fatalf("rg in a clean project: %+v", outcomeOf(v))
	}

	// A key appears: the turn's walk still holds (walked once per turn),
	// the next turn sees it.
	os.MkdirAll(filepath.Join(cwd, "src", "certs"), 0o755)
	os.WriteFile(filepath.Join(cwd, "src", "certs", "server.pem"), nil, 0o644)
	if v := decide("grep", "-rn", "TODO", "src"); v.Effect != Allow {
		t.Errorf("the same turn: walked again? %+v", outcomeOf(v))
	}
	s.EndTurn()
	v := decide("grep", "-rn", "TODO", "src")
	if got, want := outcomeOf(v), (outcome{Ask, "rule", "no-keys", "user"}); got != want {
		t.Fatalf("a key below, next turn: %+v, want %+v", got, want)
	}
	if text := policy.Explain(&v.dec); !strings.Contains(text, filepath.Join(cwd, "src/certs/server.pem")+" below this directory") {
		t.Errorf("explain lacks the key:\n%s", text)
	}
	if err := g.Record(v, ""); err != nil {
		t.Fatal(err)
	}
	recs := audittest.ReadLines(t, auditFile)
	if ev, _ := recs[len(recs)-1]["evidence"].([]any); len(ev) < 2 || ev[1].(map[string]any)["below"] != filepath.Join(cwd, "src/certs/server.pem") {
		t.Errorf("the audit record lacks the key below: %v", recs[len(recs)-1]["evidence"])
	}
	os.Remove(filepath.Join(cwd, "src", "certs", "server.pem"))
	s.EndTurn()

	// A symlink in src to the user's key: grep -R opens it, grep -r does
	// not (issue 27: a recursive operand is read as its program walks it).
	os.Symlink(filepath.Join(home, ".ssh", "id_rsa"), filepath.Join(cwd, "src", "key"))
	if v := decide("grep", "-r", "x", "src"); v.Effect != Allow {
		t.Errorf("a symlink to a key grep -r does not open: %+v (%s)", outcomeOf(v), v.Message)
	}
	v = decide("grep", "-R", "x", "src")
	if got, want := outcomeOf(v), (outcome{Ask, "rule", "no-keys", "user"}); got != want {
		t.Fatalf("a symlink to a key grep -R opens: %+v, want %+v", got, want)
	}
	if text := policy.Explain(&v.dec); !strings.Contains(text, "-> "+filepath.Join(home, ".ssh/id_rsa")) {
		t.Errorf("explain lacks the link:\n%s", text)
	}
	os.Remove(filepath.Join(cwd, "src", "key"))
	s.EndTurn()

	// A path of 64 KiB: the walk cannot read it, so it asks.
	long := "src/" + strings.Repeat("abcdefg/", 64<<10/8)
	if v := decide("grep", "-r", "x", long); v.Effect == Allow {
		t.Errorf("a 64 KiB path: %+v", outcomeOf(v))
	}

	// A loop of symlinks ends, and nothing is read through it.
	os.Symlink("b", filepath.Join(cwd, "src", "a"))
	os.Symlink("a", filepath.Join(cwd, "src", "b"))
	os.Symlink(".", filepath.Join(cwd, "src", "self"))
	if v := decide("grep", "-R", "x", "src"); v.Effect != Allow {
		t.Errorf("a symlink loop: %+v", outcomeOf(v))
	}
}

// TestWalkBigTree: a tree past MaxWalkEntries asks, within the time and
// memory bounds, and a second decision in the turn is a cache hit.
func TestWalkBigTree(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 30,000 files")
	}
	const n = 30000
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(root, "project")
	start := time.Now()
	for d := range 100 {
		dir := filepath.Join(cwd, "src", fmt.Sprintf("d%02d", d))
		os.MkdirAll(dir, 0o755)
		for i := range n / 100 {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d.go", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	t.Logf("created %d files in %v", n, time.Since(start))

	// The walk alone.
	start = time.Now()
	r := OSFS{}.Walk(filepath.Join(cwd, "src"), false)
	t.Logf("walk: %d entries in %v, cut: %s, ~%d KiB kept", len(r.Entries), time.Since(start), r.Cut, r.Size()>>10)
	if !strings.Contains(r.Cut, "entries") && !strings.Contains(r.Cut, "time") {
		t.Errorf("cut %q", r.Cut)
	}

	g, err := New(loadTestPolicy(t, walkPermissions), Options{AuditFile: filepath.Join(t.TempDir(), "audit.jsonl"), Home: testHome})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	s := NewSession(cwd, nil)
	req := Request{Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams("grep", "-rn", "TODO", "src")}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	start = time.Now()
	v := g.Decide(t.Context(), s, req)
	first := time.Since(start)
	runtime.ReadMemStats(&m1)
	if got, want := outcomeOf(v), (outcome{Ask, "rule", "no-keys", "user"}); got != want {
		t.Fatalf("past the bound: %+v, want %+v (%s)", got, want, v.Message)
	}
	if text := policy.Explain(&v.dec); !strings.Contains(text, "cut short") {
		t.Errorf("explain lacks the cut:\n%s", text)
	}
	start = time.Now()
	v = g.Decide(t.Context(), s, req)
	second := time.Since(start)
	if v.Effect != Ask {
		t.Errorf("cache hit: %+v", outcomeOf(v))
	}
	t.Logf("decision: first %v (allocated %d KiB), cache hit %v", first, (m1.TotalAlloc-m0.TotalAlloc)>>10, second)
	if first > 2*time.Second {
		t.Errorf("the first decision took %v", first)
	}
}
