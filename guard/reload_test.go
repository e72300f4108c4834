package guard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/config"
)

// watchFixture is a guard kept up to date by Watch from a config file in a
// temporary directory, with its log and what Applied was told.
type watchFixture struct {
	g       *Guard
	dir     string
	cfgFile string
	hup     chan os.Signal
	log     *syncBuffer

	mu      sync.Mutex
	applied []map[string]string // each call of Applied, as told
}

// watchConfig is a config with agent claude started with args, auditing
// to audit, with the permissions: section perms.
func watchConfig(args, audit, perms string) string {
	return "version: 1\nagents:\n  - name: claude\n    command: /bin/sh\n    args: [" + args + "]\n" +
		"audit: {file: " + audit + "}\n" + perms
}

func newWatchFixture(t *testing.T, text string) *watchFixture {
	t.Helper()
	dir := t.TempDir()
	f := &watchFixture{dir: dir, cfgFile: filepath.Join(dir, "config.yaml"), hup: make(chan os.Signal, 1), log: &syncBuffer{}}
	f.write(t, f.cfgFile, text)
	org := noOrg(t)
	load := func() (*config.Config, *LoadedPolicy, error) {
		cfg, err := config.Load(f.cfgFile)
		if err != nil {
			return nil, nil, err
		}
		lp, err := LoadPolicy(org, cfg)
		return cfg, lp, err
	}
	cfg, lp, err := load()
	if err != nil {
		t.Fatal(err)
	}
	f.g, err = New(lp.Policy, Options{AuditFile: cfg.Audit.File, FS: testFS(), Home: testHome})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.g.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.g.Watch(ctx, WatchOptions{Load: load, Running: cfg, Watch: lp.Watch, Hup: f.hup, Logger: hclogTo(f.log),
			Applied: func(keys map[string]string) {
				f.mu.Lock()
				f.applied = append(f.applied, keys) // kept as told: Watch must not change it later
				f.mu.Unlock()
			}})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	f.waitApplied(t, 1)
	return f
}

// write replaces path with text the way editors save: a temporary file
// renamed over it.
func (f *watchFixture) write(t *testing.T, path, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitApplied waits until Applied was called n times, and returns the
// last keys.
func (f *watchFixture) waitApplied(t *testing.T, n int) map[string]string {
	t.Helper()
	var last map[string]string
	waitFor(t, "Applied", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.applied) >= n {
			last = f.applied[len(f.applied)-1]
			return true
		}
		return false
	})
	return last
}

func (f *watchFixture) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied)
}

// waitLog waits until the log has n lines containing s.
func (f *watchFixture) waitLog(t *testing.T, s string, n int) {
	t.Helper()
	waitFor(t, "log "+s, func() bool { return strings.Count(f.log.String(), s) >= n })
}

// decide is the guard's effect on reading README in the project.
func (f *watchFixture) decide(t *testing.T) Effect {
	t.Helper()
	return f.g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/README.md")}).Effect
}

// TestWatch: the policy in force follows its files: on SIGHUP and on a
// change of the config or an included file, a policy that loads and passes
// its tests replaces it, a broken one is refused (the last good one stays),
// a new audit file is applied, and every other changed key is named as
// "restart to apply", its running value kept in what Applied is told.
// Steps run in order on one watcher.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	auditA, auditB := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "sub", "b.jsonl")
	allowReads := testPermissions
	denyAll := "permissions:\n  default: deny\n"
	f := newWatchFixture(t, watchConfig("", auditA, allowReads))
	initial := f.waitApplied(t, 1)
	if initial["audit.file"] == "" || initial["agents.claude.args"] == "" {
		t.Fatalf("initial keys %v", initial)
	}
	hash := func() string { return f.g.Policy().Hash() }
	incFile := filepath.Join(dir, "inc", "more.yaml")
	os.MkdirAll(filepath.Dir(incFile), 0o755)
	os.WriteFile(incFile, []byte("rules:\n  - {id: inc, decision: deny, when: {program: dd}}\n"), 0o644)

	steps := []struct {
		name    string
		do      func(t *testing.T)
		applied bool   // Applied is called (a successful reload)
		logs    string // the log line to wait for (its next occurrence)
		check   func(t *testing.T, keys map[string]string)
	}{
		{name: "SIGHUP, nothing changed", do: func(t *testing.T) { f.hup <- syscall.SIGHUP }, applied: true, logs: "trigger=SIGHUP",
			check: func(t *testing.T, keys map[string]string) {
				if f.decide(t) != Allow || !mapsEqual(keys, initial) {
					t.Errorf("decide %v, keys changed: %v", f.decide(t), config.Changed(initial, keys))
				}
			}},
		{name: "a new policy in the config file", do: func(t *testing.T) { f.write(t, f.cfgFile, watchConfig("", auditA, denyAll)) },
			applied: true, logs: `trigger="file change"`,
			check: func(t *testing.T, keys map[string]string) {
				if f.decide(t) != Deny {
					t.Errorf("decide %v, want the new policy's deny", f.decide(t))
				}
			}},
		{name: "a broken policy is refused", do: func(t *testing.T) {
			f.write(t, f.cfgFile, watchConfig("", auditA, "permissions:\n  rules:\n    - {id: x, decision: maybe}\n"))
		}, logs: "policy reload failed",
			check: func(t *testing.T, keys map[string]string) {
				if f.decide(t) != Deny {
					t.Errorf("decide %v, want the last good policy's deny", f.decide(t))
				}
			}},
		{name: "a broken policy is refused on SIGHUP too", do: func(t *testing.T) { f.hup <- syscall.SIGHUP }, logs: "policy reload failed"},
		{name: "a policy failing its tests is refused", do: func(t *testing.T) {
			f.write(t, f.cfgFile, watchConfig("", auditA, allowReads+"  tests:\n    - {call: \"fs/read_text_file /etc/hosts\", expect: allow}\n"))
		}, logs: "tests failed",
			check: func(t *testing.T, keys map[string]string) {
				if f.decide(t) != Deny {
					t.Errorf("decide %v, want the last good policy's deny", f.decide(t))
				}
			}},
		{name: "a config that does not load is refused", do: func(t *testing.T) { f.write(t, f.cfgFile, "version: 1\nagentz: []\n") },
			logs: "policy reload failed"},
		{name: "a new audit file is applied", do: func(t *testing.T) { f.write(t, f.cfgFile, watchConfig("", auditB, allowReads)) },
			applied: true, logs: "applied=\"permissions, audit.file\"",
			check: func(t *testing.T, keys map[string]string) {
				if f.g.AuditFile() != auditB || keys["audit.file"] == initial["audit.file"] {
					t.Errorf("AuditFile %s, audit.file key %s", f.g.AuditFile(), keys["audit.file"])
				}
				if err := f.g.Record(f.g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/x")}), ""); err != nil {
					t.Fatal(err)
				}
				if n := len(audittest.ReadLines(t, auditB)); n != 1 {
					t.Errorf("%d records in the new audit file", n)
				}
				if f.decide(t) != Allow || strings.Contains(f.log.String(), "restart to apply") {
					t.Errorf("decide %v; log %s", f.decide(t), f.log.String())
				}
			}},
		{name: "a changed agent: restart to apply", do: func(t *testing.T) { f.write(t, f.cfgFile, watchConfig("-x", auditB, allowReads)) },
			applied: true, logs: "restart to apply: agents.claude.args",
			check: func(t *testing.T, keys map[string]string) {
				if keys["agents.claude.args"] != initial["agents.claude.args"] {
					t.Error("Applied was told the new args, which the router does not run with")
				}
			}},
		{name: "an audit file that cannot be opened", do: func(t *testing.T) {
			f.write(t, f.cfgFile, watchConfig("-x", filepath.Join(auditA, "x.jsonl"), allowReads))
		}, applied: true, logs: "the new audit file cannot be opened",
			check: func(t *testing.T, keys map[string]string) {
				if f.g.AuditFile() != auditB {
					t.Errorf("AuditFile %s, want the old one", f.g.AuditFile())
				}
			}},
		{name: "an include: is watched", do: func(t *testing.T) {
			f.write(t, f.cfgFile, watchConfig("", auditB, allowReads+"  include: ["+incFile+"]\n"))
		}, applied: true, logs: "policy reloaded",
			check: func(t *testing.T, keys map[string]string) {
				if !hasRule(f.g, "inc") {
					t.Error("the included rule is not in force")
				}
			}},
		{name: "a change of the included file", do: func(t *testing.T) {
			f.write(t, incFile, "rules:\n  - {id: inc2, decision: deny, when: {program: dd}}\n")
		}, applied: true, logs: "policy reloaded",
			check: func(t *testing.T, keys map[string]string) {
				if !hasRule(f.g, "inc2") || hasRule(f.g, "inc") {
					t.Error("the included file's change is not in force")
				}
			}},
		// The watcher says it saw the change and decided it was not the
		// policy's: nothing was applied by then, and no reload is due.
		{name: "an unrelated file changes nothing", do: func(t *testing.T) {
			f.write(t, filepath.Join(f.dir, "notes.txt"), "x") // next to the config file: watched
		}, logs: "a change that cannot change the policy; ignored: file=" + filepath.Join(f.dir, "notes.txt")},
	}
	for _, st := range steps {
		if !t.Run(st.name, func(t *testing.T) {
			calls, logs, before := f.calls(), 0, hash()
			if st.logs != "" {
				logs = strings.Count(f.log.String(), st.logs)
			}
			st.do(t)
			if st.logs != "" {
				f.waitLog(t, st.logs, logs+1)
			}
			var keys map[string]string
			if st.applied {
				keys = f.waitApplied(t, calls+1)
			} else if f.calls() != calls || hash() != before {
				t.Errorf("a failed reload applied something: %d calls, hash %s → %s", f.calls()-calls, before, hash())
			}
			if st.check != nil {
				st.check(t, keys)
			}
		}) {
			t.Logf("log:\n%s", f.log.String())
			return
		}
	}
	// Applied was told each fingerprint as it was then.
	if !mapsEqual(f.applied[0], initial) {
		t.Error("the first fingerprint Applied was told changed afterwards")
	}
}

func hasRule(g *Guard, id string) bool {
	for _, r := range g.Policy().Rules() {
		if r.ID == id {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWatchDirs: a policy directory that does not exist yet is watched
// through its nearest existing ancestor.
func TestWatchDirs(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a"), 0o755)
	got := watchDirs(map[string][]string{filepath.Join(dir, "a"): {"x"}, filepath.Join(dir, "b", "c"): {""}, filepath.Join(dir, "a", "d"): {"y"}})
	if want := []string{dir, filepath.Join(dir, "a")}; !slicesEqual(got, want) {
		t.Errorf("watchDirs = %v, want %v", got, want)
	}
	if m := pick(map[string]string{"audit.file": "1", "audit.max_bytes": "2", "agents": "3"}, "audit."); len(m) != 2 {
		t.Errorf("pick = %v", m)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
