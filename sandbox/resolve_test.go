package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/config"
)

// TestResolve: the paths a profile hides on a real tree, a hard link
// planted in a searched tree found and hidden, one outside every searched
// tree warned about, and the walk bound an error naming the rule.
func TestResolve(t *testing.T) {
	base := t.TempDir()
	home, proj := filepath.Join(base, "home"), filepath.Join(base, "home", "proj")
	elsewhere := filepath.Join(base, "elsewhere")
	for _, d := range []string{proj + "/a/b", home + "/.ssh", home + "/keys", elsewhere} {
		must(t, os.MkdirAll(d, 0o755))
	}
	for _, f := range []string{proj + "/.env", proj + "/a/b/.env", proj + "/.env.example", home + "/.ssh/id", home + "/keys/k1", home + "/keys/k2"} {
		must(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	must(t, os.Link(home+"/keys/k1", proj+"/a/copy"))
	must(t, os.Link(home+"/keys/k2", elsewhere+"/copy2"))
	prof, _ := Derive(compile(t, fixturePolicy), config.Agent{Name: "gemini", Command: "gemini"},
		Env{Home: home, TempDir: "/tmp", Roots: []string{proj}})
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{proj + "/.env", proj + "/a/b/.env", proj + "/a/copy"}; !slices.Equal(plan.HideFiles, want) {
		t.Errorf("hidden files = %q, want %q", plan.HideFiles, want)
	}
	if want := []string{home + "/.ssh", home + "/keys"}; !slices.Equal(plan.HideDirs, want) {
		t.Errorf("hidden dirs = %q, want %q", plan.HideDirs, want)
	}
	if len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], home+"/keys/k2 has 2 hard links and only 1 were found") {
		t.Errorf("warnings = %q", plan.Warnings)
	}
	if !slices.Contains(plan.WritableDirs, proj) || slices.Contains(plan.WritableDirs, home) {
		t.Errorf("writable = %q", plan.WritableDirs)
	}

	// The exact limit of a ** glob in home: HomeDepth levels (the roots
	// are searched whole).
	must(t, os.MkdirAll(home+"/w/p/deep", 0o755))
	must(t, os.WriteFile(home+"/w/p/.env", []byte("x"), 0o600))
	must(t, os.WriteFile(home+"/w/p/deep/.env", []byte("x"), 0o600))
	plan, err = Resolve(prof, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plan.HideFiles, home+"/w/p/.env") || slices.Contains(plan.HideFiles, home+"/w/p/deep/.env") {
		t.Errorf("home depth %d: hidden files = %q", HomeDepth, plan.HideFiles)
	}

	_, err = Resolve(prof, ResolveOptions{WalkLimit: 5})
	if !errors.Is(err, ErrWalkLimit) || !strings.Contains(err.Error(), `rule "no-secrets"`) {
		t.Errorf("past the bound: %v", err)
	}
}

// TestResolveTooManyMasks: a glob matching more paths than MaxMasks is an
// error, not thousands of mounts nor a partial mask.
func TestResolveTooManyMasks(t *testing.T) {
	proj := t.TempDir()
	for i := range MaxMasks + 1 {
		must(t, os.WriteFile(filepath.Join(proj, fmt.Sprintf("f%d.json", i)), nil, 0o600))
	}
	pol := compile(t, "rules:\n  - {id: no-json, decision: deny, when: {paths: [\"**/*.json\"]}}\n")
	prof, _ := Derive(pol, config.Agent{Name: "x"}, Env{Home: t.TempDir(), TempDir: "/tmp", Roots: []string{proj}})
	if _, err := Resolve(prof, ResolveOptions{}); !errors.Is(err, ErrTooManyMasks) {
		t.Errorf("got %v, want ErrTooManyMasks", err)
	}
}

// TestResolveRootSymlink: an agent whose cwd is a symbolic link to its
// project: the project's .env is found and masked by its real path (a
// search of the link itself finds nothing below it), and check is told.
func TestResolveRootSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "proj")
	must(t, os.MkdirAll(real, 0o755))
	must(t, os.WriteFile(filepath.Join(real, ".env"), []byte("SECRET"), 0o600))
	link := filepath.Join(dir, "proj")
	must(t, os.Symlink(real, link))
	env := AgentEnv(config.Agent{Name: "claude", Command: "claude-agent-acp", Cwd: link})
	env.Home = filepath.Join(dir, "home")
	pol := compile(t, "rules:\n  - {id: no-secrets, decision: deny, when: {paths: [\"**/.env\"]}}\n")
	prof, probs := Derive(pol, config.Agent{Name: "claude", Command: "claude-agent-acp"}, env)
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plan.HideFiles, filepath.Join(real, ".env")) {
		t.Errorf("hidden files %q, want %s", plan.HideFiles, filepath.Join(real, ".env"))
	}
	var warned bool
	for _, p := range probs {
		warned = warned || strings.Contains(p.Msg, link+" is a symbolic link to "+real)
	}
	if !warned {
		t.Errorf("problems %q, want a warning naming the link", probs)
	}
}
