package guard

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/config"
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

// TestLoadPolicyOrgTelemetry: an org file's telemetry: block reaches the
// config (parsed, file:line:col errors); a file with only that block is no
// policy layer (it must not start enforcing the built-in mode table).
func TestLoadPolicyOrgTelemetry(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create root-owned files (CI runs as root)")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "10-otel.yaml"), []byte("telemetry:\n  enabled: true\n  endpoint: https://otel.acme:4317\n  lock: true\n"), 0o644)
	cfg := &config.Config{}
	lp, err := LoadPolicy(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if lp.Policy != nil {
		t.Errorf("an org directory with only telemetry: compiled a policy (%s)", lp.Policy.Hash())
	}
	eff := cfg.EffectiveTelemetry()
	if !eff.Enabled || !eff.Lock || eff.Endpoint != "https://otel.acme:4317" || eff.LockPos.String() != filepath.Join(dir, "10-otel.yaml")+":4:9" {
		t.Errorf("effective telemetry %+v", eff)
	}

	os.WriteFile(filepath.Join(dir, "20-rules.yaml"), []byte("default: deny\ntelemetry: {sampler: sometimes}\n"), 0o644)
	if _, err := LoadPolicy(dir, cfg); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "20-rules.yaml")+":2:22: telemetry.sampler") {
		t.Errorf("got %v, want an error at 20-rules.yaml:2:22", err)
	}
	os.WriteFile(filepath.Join(dir, "20-rules.yaml"), []byte("default: deny\ntelemetry: {sampler: always_on}\n"), 0o644)
	if lp, err = LoadPolicy(dir, cfg); err != nil || lp.Policy == nil {
		t.Fatalf("got %v, %v", lp, err)
	}
	if eff := cfg.EffectiveTelemetry(); eff.Sampler != "always_on" || !eff.Lock || len(cfg.OrgTelemetry) != 2 {
		t.Errorf("effective telemetry %+v", eff)
	}
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

// TestLoadPolicy: the user layer from a config's permissions: and the files
// it includes (absolute, relative to the config, under ~/), what is
// watched for a reload, and errors with their position.
func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, "policies"), 0o755)
	os.MkdirAll(filepath.Join(dir, "inc"), 0o755)
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "inc", "abs.yaml"), "rules:\n  - {id: from-abs, decision: deny, when: {program: dd}}\n")
	write(filepath.Join(dir, "rel.yaml"), "rules:\n  - {id: from-rel, decision: deny, when: {program: mkfs}}\n")
	write(filepath.Join(home, "policies", "home.yaml"), "rules:\n  - {id: from-home, decision: deny, when: {program: shred}}\n")
	write(filepath.Join(dir, "broken.yaml"), "rulez: []\n")
	env := func(name string) (string, bool) {
		if name == "HOME" {
			return home, true
		}
		return "", false
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	org := noOrg(t)
	tests := []struct {
		name       string
		perms      string
		wantErr    string
		wantNone   bool
		wantRules  []string
		wantWatch  map[string][]string
		wantFailed int
	}{
		{name: "no permissions: no policy", wantNone: true,
			wantWatch: map[string][]string{org: {""}, dir: {"config.yaml"}}},
		{name: "permissions and includes",
			perms:     "permissions:\n  default: ask\n  include: [" + filepath.Join(dir, "inc", "abs.yaml") + ", rel.yaml, ~/policies/home.yaml]\n  rules:\n    - {id: own, decision: deny, when: {program: rm}}\n",
			wantRules: []string{"own", "from-abs", "from-rel", "from-home"},
			wantWatch: map[string][]string{org: {""}, dir: {"config.yaml", "rel.yaml"}, filepath.Join(dir, "inc"): {"abs.yaml"}, filepath.Join(home, "policies"): {"home.yaml"}}},
		{name: "a missing include", perms: "permissions:\n  include: [missing.yaml]\n",
			wantErr: cfgFile + ":6:13: include: open " + filepath.Join(dir, "missing.yaml")},
		{name: "a broken include", perms: "permissions:\n  include: [broken.yaml]\n", wantErr: filepath.Join(dir, "broken.yaml") + ":1:1"},
		{name: "a broken rule", perms: "permissions:\n  rules:\n    - {id: x, decision: maybe}\n", wantErr: cfgFile + ":7:"},
		{name: "failing tests are results, not an error",
			perms:      "permissions:\n  default: ask\n  tests:\n    - {call: \"fs/read_text_file /etc/hosts\", expect: allow}\n    - {call: \"fs/read_text_file /etc/hosts\", expect: ask}\n",
			wantFailed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write(cfgFile, configYAML(tt.perms))
			cfg, err := config.Parse(cfgFile, []byte(configYAML(tt.perms)), env)
			if err != nil {
				t.Fatal(err)
			}
			cfg.File = cfgFile
			lp, err := LoadPolicy(org, cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadPolicy: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (lp.Policy == nil) != tt.wantNone {
				t.Fatalf("Policy = %v", lp.Policy)
			}
			if tt.wantWatch != nil && !reflect.DeepEqual(lp.Watch, tt.wantWatch) {
				t.Errorf("Watch = %v, want %v", lp.Watch, tt.wantWatch)
			}
			if lp.Policy != nil {
				var ids []string
				for _, r := range lp.Policy.Rules() {
					ids = append(ids, r.ID)
				}
				if tt.wantRules != nil && !sameSet(ids, tt.wantRules) {
					t.Errorf("rules %v, want %v", ids, tt.wantRules)
				}
			}
			failed, terr := lp.Failed(), lp.TestsError()
			if len(failed) != tt.wantFailed || (terr != nil) != (tt.wantFailed > 0) {
				t.Fatalf("Failed = %v, TestsError = %v", failed, terr)
			}
			if terr != nil && (!strings.Contains(terr.Error(), "1 of the policy's tests failed:") || !strings.Contains(terr.Error(), cfgFile+":8:7:")) {
				t.Errorf("TestsError = %v", terr)
			}
		})
	}
}

// TestLoadPolicyOrg: the org layer is loaded whatever the config says,
// before the user layer.
func TestLoadPolicyOrg(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create root-owned files (CI runs as root)")
	}
	org := t.TempDir()
	os.Chmod(org, 0o755)
	os.WriteFile(filepath.Join(org, "10-org.yaml"), []byte("default: ask\nrules:\n  - {id: org-rule, decision: deny, when: {program: dd}}\n"), 0o644)
	for name, perms := range map[string]string{"org only": "", "org and user": "permissions:\n  rules:\n    - {id: user-rule, decision: deny, when: {program: rm}}\n"} {
		t.Run(name, func(t *testing.T) {
			lp, err := LoadPolicy(org, parseConfig(t, configYAML(perms)))
			if err != nil || lp.Policy == nil {
				t.Fatalf("LoadPolicy: %v", err)
			}
			var layers []string
			for _, l := range lp.Policy.Layers() {
				layers = append(layers, l.Name)
			}
			want := []string{"org"}
			if perms != "" {
				want = append(want, "user")
			}
			if !slices.Equal(layers, want) {
				t.Errorf("layers %v, want %v", layers, want)
			}
		})
	}
	os.Chmod(org, 0o777)
	if _, err := LoadPolicy(org, parseConfig(t, configYAML(""))); !errors.Is(err, ErrOrgPolicyUnsafe) {
		t.Errorf("a world-writable org directory: %v", err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestLoadPolicyOrgUnowned: with OrgUnowned (check --org-dir), org files a
// user could change are read, and each ownership problem is a warning;
// without it they are still refused (issue 28, point 5).
func TestLoadPolicyOrgUnowned(t *testing.T) {
	org := t.TempDir()
	file := filepath.Join(org, "10-org.yaml")
	os.WriteFile(file, []byte("default: ask\nrules:\n  - {id: org-rule, decision: deny, when: {program: dd}}\n"), 0o644)
	os.Chmod(org, 0o777)
	os.Chmod(file, 0o666)
	if _, err := LoadPolicy(org, parseConfig(t, configYAML(""))); !errors.Is(err, ErrOrgPolicyUnsafe) {
		t.Errorf("LoadPolicy of a world-writable org directory: %v, want ErrOrgPolicyUnsafe", err)
	}
	lp, err := LoadPolicyWith(org, parseConfig(t, configYAML("")), LoadOptions{OrgUnowned: true})
	if err != nil || lp.Policy == nil {
		t.Fatalf("LoadPolicyWith OrgUnowned: %v", err)
	}
	if len(lp.Policy.Layers()) != 1 || lp.Policy.Layers()[0].Name != "org" {
		t.Errorf("layers %v, want the org layer", lp.Policy.Layers())
	}
	if len(lp.Warnings) != 2 || !strings.Contains(lp.Warnings[0], org+": "+ErrOrgPolicyUnsafe.Error()) || !strings.Contains(lp.Warnings[1], file+": "+ErrOrgPolicyUnsafe.Error()) {
		t.Errorf("warnings %q, want the directory's and the file's ownership problems", lp.Warnings)
	}
}
