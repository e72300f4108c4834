package guard

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

const hardLinkPermissions = `permissions:
  default: ask
  rules:
    - id: no-ssh
      decision: deny
      when: {paths: ["~/.ssh/**"]}
    - id: no-rc-writes
      decision: deny
      when: {kind: [edit], paths: ["~/.bashrc"]}
    - id: reads-in-project
      decision: allow
      when: {kind: [read], paths: ["${cwd}/**"]}
    - id: edits-in-project
      decision: allow
      when: {kind: [edit], paths: ["${cwd}/**"]}
    - id: safe-commands
      decision: allow
      when: {command: ["cat **", "echo **"]}
`

// TestHardLinks: a file with several names that is a file under a literal
// deny path is decided by that rule under any of its names, for the kinds
// the rule decides; the set follows a reload.
func TestHardLinks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	cwd := filepath.Join(root, "project")
	for _, d := range []string{filepath.Join(home, ".ssh"), cwd} {
		os.MkdirAll(d, 0o755)
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(old, new string) {
		if err := os.Link(old, new); err != nil {
			t.Skipf("no hard links here: %v", err)
		}
	}
	write(filepath.Join(home, ".ssh", "id_rsa"))
	write(filepath.Join(home, ".bashrc"))
	write(filepath.Join(cwd, "a.txt"))
	write(filepath.Join(cwd, "one.txt"))
	link(filepath.Join(home, ".ssh", "id_rsa"), filepath.Join(cwd, "notes.txt"))
	link(filepath.Join(home, ".bashrc"), filepath.Join(cwd, "rc.txt"))
	link(filepath.Join(cwd, "a.txt"), filepath.Join(cwd, "b.txt"))
	os.Symlink("notes.txt", filepath.Join(cwd, "sym.txt"))

	g, err := New(loadTestPolicy(t, hardLinkPermissions), Options{AuditFile: filepath.Join(t.TempDir(), "audit.jsonl"), Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	tests := []struct {
		name   string
		method string
		params []byte
		want   outcome
	}{
		{"a read of a hard link to a key", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "notes.txt")), outcome{Deny, "rule", "no-ssh", "user"}},
		{"through a symlink to it", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "sym.txt")), outcome{Deny, "rule", "no-ssh", "user"}},
		{"cat of it", acp.MethodTerminalCreate, terminalParams("cat", "notes.txt"), outcome{Deny, "rule", "no-ssh", "user"}},
		{"a write to it", acp.MethodWriteTextFile, writeParams(filepath.Join(cwd, "notes.txt")), outcome{Deny, "rule", "no-ssh", "user"}},
		{"an append to a hard link to .bashrc", acp.MethodTerminalCreate, terminalParams("sh", "-c", "echo x >> rc.txt"), outcome{Deny, "rule", "no-rc-writes", "user"}},
		{"a read of it: the rule denies edits only", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "rc.txt")), outcome{Allow, "rule", "reads-in-project", "user"}},
		{"a hard link between project files", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "b.txt")), outcome{Allow, "rule", "reads-in-project", "user"}},
		{"a file with one name", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "one.txt")), outcome{Allow, "rule", "reads-in-project", "user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := g.Decide(t.Context(), NewSession(cwd, nil), Request{Agent: "claude", Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
		})
	}
	// A reload rebuilds the set: without the rule, the link is a project file.
	if err := g.Set(loadTestPolicy(t, testPermissions)); err != nil {
		t.Fatal(err)
	}
	v := g.Decide(t.Context(), NewSession(cwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(filepath.Join(cwd, "notes.txt"))})
	if got := outcomeOf(v); got != (outcome{Allow, "rule", "reads-in-project", "user"}) {
		t.Errorf("after reload: Decide = %+v (%s)", got, v.Message)
	}

	t.Run("bounded walk", func(t *testing.T) {
		roots := []policy.DenyRoot{{Path: filepath.Join(home, ".ssh"), Rule: "no-ssh", Effect: policy.Deny}, {Path: filepath.Join(home, ".bashrc"), Rule: "rc", Effect: policy.Ask}}
		h := scanDenyRoots(roots, 1, time.Minute)
		if h.incomplete == "" || len(h.files) != 1 {
			t.Fatalf("incomplete %q, %d files", h.incomplete, len(h.files))
		}
		// Past the bound, a file with several names that is not known asks.
		ev := &extract.Evidence{Items: []extract.Item{{Type: extract.ItemPath, Kinds: []extract.Kind{extract.KindRead}, Forms: []string{filepath.Join(cwd, "rc.txt")}}}}
		d, ok := h.verdict(ev, OSFS{})
		if !ok || d.Effect != policy.Ask || d.Rule != RuleHardLink {
			t.Errorf("verdict = %+v, %v; want ask by %s", d, ok, RuleHardLink)
		}
		// ...a file with one name, a directory or a missing file does not.
		ev.Items[0].Forms = []string{filepath.Join(cwd, "one.txt"), filepath.Join(home, ".ssh"), filepath.Join(cwd, "missing")}
		if d, ok := h.verdict(ev, OSFS{}); ok {
			t.Errorf("verdict = %+v on files with one name", d)
		}
		// Complete: an unknown file with several names is not a hard link
		// to a denied one.
		h = scanDenyRoots(roots, 10, time.Minute)
		ev.Items[0].Forms = []string{filepath.Join(cwd, "b.txt")}
		if d, ok := h.verdict(ev, OSFS{}); h.incomplete != "" || ok {
			t.Errorf("verdict = %+v (incomplete %q)", d, h.incomplete)
		}
		// Not the real filesystem: nothing is checked.
		if _, ok := h.verdict(ev, extract.NewMapFS(nil, nil)); ok {
			t.Error("verdict on a MapFS")
		}
	})
}

func TestDenyRoots(t *testing.T) {
	p := loadTestPolicy(t, `permissions:
  default: ask
  rules:
    - {id: a, decision: deny, when: {paths: ["~/.ssh/**", "/etc/shadow", "**/.env", "${cwd}/.git/**", "/**", "/var/*/secret", "~/.aws/{x,y}"]}}
    - {id: b, decision: ask, when: {kind: [read, search], paths: ["/srv/data/**"]}}
    - {id: c, decision: allow, when: {paths: ["/opt/**"]}}
`)
	got := p.DenyRoots("/home/u")
	want := []string{"/home/u/.ssh", "/etc/shadow", "/var", "/home/u/.aws", "/srv/data"}
	if len(got) != len(want) {
		t.Fatalf("DenyRoots = %+v, want %v", got, want)
	}
	for i, r := range got {
		if r.Path != want[i] {
			t.Errorf("root %d = %s, want %s", i, r.Path, want[i])
		}
	}
	if r := got[4]; r.Rule != "b" || r.Effect != policy.Ask || len(r.Kinds) != 2 {
		t.Errorf("root b = %+v", r)
	}
}
