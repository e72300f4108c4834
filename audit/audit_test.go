package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogWritesOneFlushedLinePerRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	l, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rule := "no-secrets"
	rec := Record{Time: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), DecisionID: l.NewID(), Session: "s1", Agent: "claude",
		Method: "fs/read_text_file", Evidence: map[string]any{"paths": []string{"/p/.env"}}, Decision: "deny", Rule: &rule,
		Layer: "org", Source: "rule", PolicyHash: "abc", LatencyUs: 42}
	if err := l.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Record{Method: "terminal/create", Decision: "allow", Source: "default"}); err != nil {
		t.Fatal(err)
	}
	// Flushed per line: readable before Close.
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	if lines[0]["time"] != "2026-11-21T10:00:00Z" || lines[0]["rule"] != "no-secrets" || lines[0]["latencyUs"] != float64(42) {
		t.Errorf("first record %v", lines[0])
	}
	if v, ok := lines[1]["rule"]; !ok || v != nil {
		t.Errorf("a record without a rule must say rule: null, got %v", lines[1])
	}
	for _, p := range []string{path, filepath.Dir(path)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}

func TestLogTightensAndRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, 450) // two records a file
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("existing log left at %v", fi.Mode().Perm())
	}
	for i := 0; i < 5; i++ {
		if err := l.Write(Record{DecisionID: l.NewID(), Method: "fs/read_text_file", Decision: "allow", Source: "rule"}); err != nil {
			t.Fatal(err)
		}
	}
	n := len(readLines(t, path))
	for g := 1; g <= Generations; g++ {
		if _, err := os.Stat(fmt.Sprintf("%s.%d", path, g)); err == nil {
			n += len(readLines(t, fmt.Sprintf("%s.%d", path, g)))
		}
	}
	if _, err := os.Stat(path + ".2"); n != 5 || err != nil {
		t.Errorf("after rotations: %d records kept (want 5), %s.2: %v", n, path, err)
	}
	if _, err := os.Stat(fmt.Sprintf("%s.%d", path, Generations+1)); err == nil {
		t.Errorf("more than %d generations kept", Generations)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 450 {
		t.Errorf("current log over the cap: %v %v", fi.Size(), err)
	}
}

func TestLogConcurrentWritesStayWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for j := 0; j < 100; j++ {
				l.Write(Record{DecisionID: l.NewID(), Method: "terminal/create", Decision: "ask", Source: "rule"})
			}
		})
	}
	wg.Wait()
	l.Close()
	lines := readLines(t, path)
	ids := map[any]bool{}
	for _, m := range lines {
		ids[m["decisionId"]] = true
	}
	if len(lines) != 800 || len(ids) != 800 {
		t.Errorf("%d lines with %d distinct ids, want 800", len(lines), len(ids))
	}
}
