package guard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOSFSResolve(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	os.MkdirAll(filepath.Join(real, "sub"), 0o755)
	os.WriteFile(filepath.Join(real, "sub", "f"), nil, 0o644)
	os.Symlink(real, filepath.Join(root, "link"))
	os.Symlink(filepath.Join(real, "sub", "f"), filepath.Join(root, "flink"))
	realRoot, _ := filepath.EvalSymlinks(root) // TMPDIR itself may be a symlink
	tests := []struct{ in, want string }{
		{filepath.Join(root, "link", "sub", "f"), filepath.Join(realRoot, "real", "sub", "f")},
		{filepath.Join(root, "flink"), filepath.Join(realRoot, "real", "sub", "f")},
		// A new file: its existing directory is resolved.
		{filepath.Join(root, "link", "sub", "new", "deeper.txt"), filepath.Join(realRoot, "real", "sub", "new", "deeper.txt")},
		// ".." after a symlink applies to the link's target, as the kernel does.
		{filepath.Join(root, "link", "sub", "..", "x"), filepath.Join(realRoot, "real", "x")},
	}
	for _, tt := range tests {
		got, err := OSFS{}.Resolve(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	// The per-decision cache answers as OSFS does, for every path and its
	// ancestors, in any order and twice.
	os.Symlink("sub/../sub/f", filepath.Join(real, "rel"))
	os.Symlink(filepath.Join(root, "link", "sub"), filepath.Join(root, "dirlink"))
	paths := []string{filepath.Join(root, "dirlink", "f"), filepath.Join(root, "link", "rel"), filepath.Join(root, "dirlink", "new", "x"),
		filepath.Join(root, "link", "sub", "..", "sub", "f"), root, "/", filepath.Join(root, "loop", "x"), filepath.Join(root, "loop")}
	for _, tt := range tests {
		paths = append(paths, tt.in)
	}
	c := newCachedOSFS()
	for range 2 {
		for i := len(paths) - 1; i >= 0; i-- {
			p := paths[i]
			want, werr := OSFS{}.Resolve(p)
			got, err := c.Resolve(p)
			if got != want || (err == nil) != (werr == nil) {
				t.Errorf("cached Resolve(%s) = %q, %v; OSFS: %q, %v", p, got, err, want, werr)
			}
		}
	}
	if _, err := (OSFS{}).Resolve("relative/path"); err == nil {
		t.Error("a relative path resolved")
	}
	loop := filepath.Join(root, "loop")
	os.Symlink(loop, loop)
	if _, err := (OSFS{}).Resolve(filepath.Join(loop, "x")); err == nil {
		t.Error("a symlink loop resolved")
	}
	if ex, dir := (OSFS{}).Stat(filepath.Join(root, "link")); !ex || !dir {
		t.Errorf("Stat(link) = %v %v", ex, dir)
	}
}

func TestLoadOrgLayer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create root-owned files (CI runs as root)")
	}
	write := func(t *testing.T, dir, name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("missing directory: no org layer", func(t *testing.T) {
		l, err := LoadOrgLayer(filepath.Join(t.TempDir(), "none"))
		if l != nil || err != nil {
			t.Errorf("got %v, %v", l, err)
		}
	})
	t.Run("files merged in name order", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		write(t, dir, "10-base.yaml", "default: ask\nrules:\n  - {id: a, decision: deny, when: {paths: [\"**/.env\"]}}\n")
		write(t, dir, "20-more.yaml", "rules:\n  - {id: b, decision: deny, when: {command: [\"git push **\"], flags_any: [\"-f\"]}}\n")
		write(t, dir, "README.txt", "not yaml")
		l, err := LoadOrgLayer(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Rules) != 2 || len(l.Files) != 2 {
			t.Errorf("rules %d, files %v", len(l.Rules), l.Files)
		}
	})
	t.Run("group-writable file refused", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		p := write(t, dir, "org.yaml", "default: ask\n")
		os.Chmod(p, 0o664)
		if _, err := LoadOrgLayer(dir); !errors.Is(err, ErrOrgPolicyUnsafe) {
			t.Errorf("got %v, want ErrOrgPolicyUnsafe", err)
		}
	})
	t.Run("file owned by another user refused", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		p := write(t, dir, "org.yaml", "default: ask\n")
		os.Chown(p, 1000, 1000)
		if _, err := LoadOrgLayer(dir); !errors.Is(err, ErrOrgPolicyUnsafe) {
			t.Errorf("got %v, want ErrOrgPolicyUnsafe", err)
		}
	})
	t.Run("world-writable directory refused", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o777)
		if _, err := LoadOrgLayer(dir); !errors.Is(err, ErrOrgPolicyUnsafe) {
			t.Errorf("got %v, want ErrOrgPolicyUnsafe", err)
		}
	})
	t.Run("a syntax error names file:line:col", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		p := write(t, dir, "org.yaml", "default: ask\nrulez: []\n")
		_, err := LoadOrgLayer(dir)
		if err == nil || !strings.Contains(err.Error(), p+":2:1") {
			t.Errorf("got %v, want an error at %s:2:1", err, p)
		}
	})
}

// TestReloadRelevant: which file events make the policy watcher reload.
func TestReloadRelevant(t *testing.T) {
	watch := map[string][]string{"/etc/acp-router/policy.d": {""}, "/home/u/.config/acp-router": {"config.yaml"}}
	for name, want := range map[string]bool{
		"/etc/acp-router/policy.d/10-org.yaml":        true,  // an org file
		"/etc/acp-router/policy.d/notes.txt":          false, // not a policy file
		"/etc/acp-router/policy.d":                    true,  // the directory itself
		"/etc/acp-router":                             true,  // an ancestor (the directory appears)
		"/etc/acp-router-old":                         false,
		"/home/u/.config/acp-router/config.yaml":      true,
		"/home/u/.config/acp-router/.config.yaml.swp": false,
		"/home/u/.config/acp-router/other.yaml":       false,
		"/home/u/.config/acp-router/sub/config.yaml":  false,
		"/etc/acp-router/policy.d/sub/x.yaml":         false,
	} {
		if got := relevant(watch, name); got != want {
			t.Errorf("relevant(%s) = %v, want %v", name, got, want)
		}
	}
}
