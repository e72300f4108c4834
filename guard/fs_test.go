package guard

import (
	"errors"
	"github.com/acp-router/acp-router/acp"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestOSFSResolveLinks: symlinks followed as the kernel does, dangling
// ones to their target (a write through one creates it), relative ones
// from the link's directory, in chains, with a bound on loops; /proc magic
// links refused. The per-decision cache answers exactly as OSFS.
func TestOSFSResolveLinks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	for _, d := range []string{"home/.config", "proj/src", "proj/sub/deep"} {
		os.MkdirAll(j(d), 0o755)
	}
	os.WriteFile(j("proj", "src", "a.go"), nil, 0o644)
	links := map[string]string{
		"proj/build.log":       j("home", ".bashrc"),      // dangling, absolute
		"proj/rel.log":         "../home/.profile",        // dangling, relative
		"proj/sub/deep/up":     "../../..",                // a relative link to an ancestor
		"proj/sub/deep/up2":    "../../../home/.config/x", // dangling through an ancestor
		"proj/chain1":          "chain2",                  // a chain ending dangling
		"proj/chain2":          "sub/chain3",              //
		"proj/sub/chain3":      "../../home/.ssh/authorized_keys",
		"proj/loop1":           "loop2",
		"proj/loop2":           "loop1",
		"proj/self":            "self",
		"proj/dirdangle":       j("home", "newdir"),            // a dangling link used as a directory
		"proj/ok":              "src/a.go",                     // not dangling
		"proj/proc":            "/proc/self/root",              // to a magic link
		"proj/sub/deep/dotdot": "../../src/../../home/.bashrc", // ".." in a dangling target
	}
	for l, target := range links {
		if err := os.Symlink(target, j(l)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		in, want string
		err      error // want an error wrapping it; nil: no error
	}{
		{j("proj", "build.log"), j("home", ".bashrc"), nil},
		{j("proj", "rel.log"), j("home", ".profile"), nil},
		{j("proj", "sub", "deep", "up", "home", ".bashrc"), j("home", ".bashrc"), nil},
		{j("proj", "sub", "deep", "up2"), j("home", ".config", "x"), nil},
		{j("proj", "chain1"), j("home", ".ssh", "authorized_keys"), nil},
		{j("proj", "dirdangle", "f"), j("home", "newdir", "f"), nil},
		{j("proj", "ok"), j("proj", "src", "a.go"), nil},
		{j("proj", "src", "a.go", "b.go"), j("proj", "src", "a.go", "b.go"), nil}, // below a file: nothing, as a missing path
		{j("proj", "ok", "b.go"), j("proj", "src", "a.go", "b.go"), nil},
		{j("proj", "sub", "deep", "dotdot"), j("home", ".bashrc"), nil},
		{j("proj", "build.log") + "/..", j("home"), nil},
		{j("proj", "loop1"), "", errLoop},
		{j("proj", "self", "x"), "", errLoop},
		{j("proj", "proc", "etc", "shadow"), "", errProcLink},
		{"/proc/self/root/etc/shadow", "", errProcLink},
		{"/proc/self/cwd/.env", "", errProcLink},
		{"/proc/thread-self/root/etc", "", errProcLink},
		{"/proc/1/root", "", errProcLink},
		{"/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/cwd/x", "", errProcLink},
		{"/proc/self/fd/0", "", errProcLink},
		{"/dev/stderr", "", errProcLink}, // -> /proc/self/fd/2: the router's own
	}
	check := func(t *testing.T, name string, resolve func(string) (string, error)) {
		t.Helper()
		for _, tt := range tests {
			got, err := resolve(tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("%s Resolve(%s) = %q, %v; want error %v", name, tt.in, got, err, tt.err)
				}
				continue
			}
			if err != nil || got != tt.want {
				t.Errorf("%s Resolve(%s) = %q, %v; want %q", name, tt.in, got, err, tt.want)
			}
		}
	}
	check(t, "OSFS", OSFS{}.Resolve)
	// The cache, cold and warm, in both orders: ancestors first or last.
	c := newCachedOSFS()
	check(t, "cached", c.Resolve)
	check(t, "cached (warm)", c.Resolve)
	c = newCachedOSFS()
	for i := len(tests) - 1; i >= 0; i-- {
		c.Resolve(tests[i].in)
	}
	check(t, "cached (reverse)", c.Resolve)
}

// TestCopyOverAFile: cp and mv onto a file that exists (not a directory)
// are allowed where their paths are: the "into a directory" reading of the
// destination (DEST/NAME) names a path below a file, which cannot exist,
// and is judged as written. Before, resolving it failed (ENOTDIR), the
// item was unresolved and every cp a b or mv a b over an existing b asked.
func TestCopyOverAFile(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(root, "project")
	os.MkdirAll(filepath.Join(cwd, "dir"), 0o755)
	for _, f := range []string{"a.txt", "b.txt"} {
		os.WriteFile(filepath.Join(cwd, f), []byte("x"), 0o644)
	}
	g, err := New(loadTestPolicy(t, `permissions:
  default: ask
  rules:
    - id: project-files
      decision: allow
      when: {kind: [read, edit, delete, move], paths: ["${cwd}/**"]}
    - id: file-commands
      decision: allow
      when: {command: ["cp **", "mv **"]}
`), Options{AuditFile: filepath.Join(t.TempDir(), "audit.jsonl"), Home: filepath.Join(root, "home")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	for _, args := range [][]string{{"cp", "a.txt", "b.txt"}, {"mv", "a.txt", "b.txt"}, {"cp", "a.txt", "dir"}, {"cp", "a.txt", "new.txt"}} {
		v := g.Decide(t.Context(), NewSession(cwd, nil), Request{Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams(args[0], args[1:]...)})
		if v.Effect != Allow {
			t.Errorf("%v: %s by %q (%s), want allow", args, v.Effect, v.Rule, v.Message)
		}
	}
}

// TestOSFSResolveCase: a name that does not exist as written but does
// with another case is resolved to the name the directory holds (on a
// case-insensitive filesystem it is that file; on a case-sensitive one the
// stricter reading), through every component; a name that exists as
// written is kept, even when a spelling differing in case is another file.
func TestOSFSResolveCase(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	os.MkdirAll(j("home", ".ssh"), 0o755)
	os.MkdirAll(j("proj", ".git", "hooks"), 0o755)
	for _, f := range []string{"home/.ssh/id_rsa", "proj/.env", "proj/Makefile", "proj/makefile"} {
		os.WriteFile(j(f), nil, 0o644)
	}
	os.Symlink(j("home"), j("proj", "Home"))
	for _, tc := range []struct{ in, want string }{
		{j("proj", ".ENV"), j("proj", ".env")},
		{j("HOME", ".SSH", "ID_RSA"), j("home", ".ssh", "id_rsa")},
		{j("proj", ".Git", "HOOKS", "pre-commit"), j("proj", ".git", "hooks", "pre-commit")},
		{j("proj", "home", ".ssh"), j("home", ".ssh")}, // through a link spelled otherwise
		{j("proj", "Makefile"), j("proj", "Makefile")},
		{j("proj", "makefile"), j("proj", "makefile")},
		{j("proj", "MAKEFILE"), j("proj", "MAKEFILE")}, // two candidates: not known which, kept
		{j("proj", "new.go"), j("proj", "new.go")},
	} {
		if got, err := (OSFS{}).Resolve(tc.in); err != nil || got != tc.want {
			t.Errorf("OSFS.Resolve(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if got, err := newCachedOSFS().Resolve(tc.in); err != nil || got != tc.want {
			t.Errorf("cachedOSFS.Resolve(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if got := toggleCase("a.Env-1"); got != "A.eNV-1" {
		t.Errorf("toggleCase = %q", got)
	}
}
