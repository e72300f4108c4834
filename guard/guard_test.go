package guard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
)

// TestNew: a guard opens its audit log with its first policy, and refuses
// a policy it could not audit.
func TestNew(t *testing.T) {
	pol := loadTestPolicy(t, testPermissions)
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	os.WriteFile(notADir, nil, 0o600)
	tests := []struct {
		name    string
		pol     bool
		file    string
		wantErr string
	}{
		{"a policy and a log", true, filepath.Join(dir, "a", "audit.jsonl"), ""},
		{"a policy, no log", true, "", "audit log: no file"},
		{"a policy, a log that cannot be opened", true, filepath.Join(notADir, "audit.jsonl"), "audit log: audit:"},
		{"no policy, no log", false, "", ""},
		{"no policy: the log is not opened", false, filepath.Join(notADir, "audit.jsonl"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pol
			if !tt.pol {
				p = nil
			}
			g, err := New(p, Options{AuditFile: tt.file})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if g.Enforcing() != tt.pol || g.AuditFile() != tt.file || g.opts.DecideTimeout <= 0 {
				t.Errorf("Enforcing %v, AuditFile %q, DecideTimeout %v", g.Enforcing(), g.AuditFile(), g.opts.DecideTimeout)
			}
			if _, ok := g.opts.FS.(OSFS); !ok {
				t.Errorf("default FS %T", g.opts.FS)
			}
		})
	}
	t.Run("a policy set later opens the log, or is refused", func(t *testing.T) {
		g := mustNew(t, nil, Options{})
		if err := g.Set(pol); err == nil || g.Enforcing() {
			t.Errorf("Set without an audit file: %v, enforcing %v", err, g.Enforcing())
		}
		file := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := g.SetAuditFile(file, 0); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(pol); err != nil || !g.Enforcing() {
			t.Fatalf("Set: %v", err)
		}
		g.Record(g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/x")}), "")
		if n := len(audittest.ReadLines(t, file)); n != 1 {
			t.Errorf("%d records", n)
		}
		if err := g.Set(nil); err != nil || g.Enforcing() {
			t.Errorf("Set(nil): %v", err)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		if err := g.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestSetAuditFile: a reload that names another audit file moves the log
// there; the old one gets nothing more; a file that cannot be opened
// leaves the log where it was.
func TestSetAuditFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "sub", "b.jsonl")
	g := newTestGuard(t, "", Options{AuditFile: a})
	record := func() error {
		return g.Record(g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/x")}), "")
	}
	steps := []struct {
		name     string
		file     string
		maxBytes int64
		wantErr  bool
		wantFile string
		counts   map[string]int // records in each file after one more
	}{
		{"the first file", a, 0, false, a, map[string]int{a: 1}},
		{"the same file: nothing changes", a, 0, false, a, map[string]int{a: 2}},
		{"another file", b, 0, false, b, map[string]int{a: 2, b: 1}},
		{"another size only", b, 1 << 20, false, b, map[string]int{a: 2, b: 2}},
		{"a file that cannot be opened", filepath.Join(a, "x.jsonl"), 0, true, b, map[string]int{a: 2, b: 3}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			err := g.SetAuditFile(st.file, st.maxBytes)
			if (err != nil) != st.wantErr {
				t.Fatalf("SetAuditFile: %v", err)
			}
			if g.AuditFile() != st.wantFile {
				t.Errorf("AuditFile = %s, want %s", g.AuditFile(), st.wantFile)
			}
			if err := record(); err != nil {
				t.Fatal(err)
			}
			for file, n := range st.counts {
				if got := len(audittest.ReadLines(t, file)); got != n {
					t.Errorf("%s: %d records, want %d", filepath.Base(file), got, n)
				}
			}
		})
	}
}

// TestNilGuard: a nil *Guard enforces nothing, and every method is safe on
// it.
func TestNilGuard(t *testing.T) {
	var g *Guard
	if g.Policy() != nil || g.Enforcing() || g.Decides(acp.MethodReadTextFile) {
		t.Error("a nil guard enforces")
	}
	if err := g.Set(nil); err != nil {
		t.Errorf("Set(nil): %v", err)
	}
	if err := g.Set(loadTestPolicy(t, testPermissions)); err == nil {
		t.Error("Set(policy) on a nil guard: no error (the policy would not be enforced)")
	}
	if err := g.SetAuditFile(filepath.Join(t.TempDir(), "a.jsonl"), 0); err != nil {
		t.Errorf("SetAuditFile: %v", err)
	}
	if g.AuditFile() != "" {
		t.Errorf("AuditFile = %q", g.AuditFile())
	}
	v := g.Decide(t.Context(), nil, Request{Method: acp.MethodTerminalCreate, Params: terminalParams("ls")})
	if v.Effect != Ask {
		t.Errorf("Decide = %v", v.Effect)
	}
	if err := g.Record(v, AllowOnce); err != nil {
		t.Errorf("Record: %v", err)
	}
	if g.Denies(t.Context(), NewSession(testCwd, nil), "claude", acp.MethodReadTextFile, readParams("/p/.env"), nil) {
		t.Error("Denies")
	}
	if g.ModeDenied("claude", "yolo") || g.ModeFilter("claude") != nil || g.ModeRefusal("claude", "yolo") != nil {
		t.Error("modes denied")
	}
	g.RecordModeReset("s", "claude", "yolo", "default", nil)
	g.RecordChildMode("c", "s", "claude", "yolo")
	if g.Changed() != nil {
		t.Error("a nil guard's policy changes")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g.Watch(ctx, WatchOptions{Running: parseConfig(t, configYAML(""))})
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestChanged: each replacement of the policy in force closes the channel
// Changed gave out before it, once; a channel taken after it waits for the
// next one (issue 27, point 1: the router re-applies the mode policy).
func TestChanged(t *testing.T) {
	g, err := New(nil, Options{AuditFile: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	before := g.Changed()
	if closed(before) || g.Changed() != before {
		t.Fatal("Changed is closed, or another channel, before any change")
	}
	if err := g.Set(loadTestPolicy(t, testPermissions)); err != nil {
		t.Fatal(err)
	}
	after := g.Changed()
	if !closed(before) || closed(after) {
		t.Fatalf("after a reload: the earlier channel closed %v, the next one closed %v", closed(before), closed(after))
	}
	if err := g.Set(nil); err != nil {
		t.Fatal(err)
	}
	if !closed(after) {
		t.Error("removing the policy is not a change")
	}
}
