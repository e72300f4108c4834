package page

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// auditSet writes a log as audit/ leaves it rotated: gens[0] is the live
// file, gens[1] FILE.1 (the newest rotated), ...; each a list of records
// named by their session.
func auditSet(t testing.TB, now time.Time, gens ...[]string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	for g, sessions := range gens {
		name := file
		if g > 0 {
			name = fmt.Sprintf("%s.%d", file, g)
		}
		var b strings.Builder
		for _, s := range sessions {
			line, _ := json.Marshal(map[string]any{"time": now.Add(-time.Hour), "agent": "claude", "session": s, "decision": "allow", "rule": "r-" + s[:1]})
			b.Write(line)
			b.WriteByte('\n')
		}
		if err := os.WriteFile(name, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return file
}

func sessionsOf(p AuditPage) string {
	var out []string
	for _, e := range p.Entries {
		var r struct{ Session string }
		json.Unmarshal(e.Record, &r)
		out = append(out, fmt.Sprintf("%s#%d", r.Session, e.N))
	}
	return strings.Join(out, " ")
}

// The rotated files are read too, oldest first (FILE.2, FILE.1, FILE):
// records are numbered across them, pages run across their boundaries,
// the counts and totals take them in; a rotation while the reader is in
// use (FILE → FILE.1 → FILE.2 → FILE.3, a new FILE) keeps every record's
// number, so that a cursor taken before it still gives the next page.
func TestReadAuditRotated(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	file := auditSet(t, now, []string{"e1", "e2"}, []string{"c1", "d1"}, []string{"a1", "b1"})
	r := NewAuditReader(file)
	defer r.Close()
	res, err := r.Read(Filter{Limit: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionsOf(res); got != "e2#5 e1#4 d1#3" || res.Next != 3 || res.Total != 6 || res.Counts["r-e"] != 2 || res.Counts["r-a"] != 1 {
		t.Fatalf("first page %q next %d total %d counts %v", got, res.Next, res.Total, res.Counts)
	}
	// audit/ rotates, and a record comes.
	for _, g := range []int{2, 1} {
		if err := os.Rename(fmt.Sprintf("%s.%d", file, g), fmt.Sprintf("%s.%d", file, g+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(map[string]any{"time": now, "agent": "codex", "session": "f1", "decision": "deny", "rule": "r-f"})
	os.WriteFile(file, append(line, '\n'), 0o600)
	res, err = r.Read(Filter{Limit: 3, Before: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionsOf(res); got != "c1#2 b1#1 a1#0" || res.Next != 0 || res.Total != 7 {
		t.Errorf("the page before the cursor, after a rotation: %q next %d total %d", got, res.Next, res.Total)
	}
	res, _ = r.Read(Filter{Agent: "codex"}, now)
	if got := sessionsOf(res); got != "f1#6" {
		t.Errorf("the new record: %q", got)
	}
	// The oldest generation dropped: its records go, and so do the
	// names only they used; the others keep their filters.
	if err := os.Remove(file + ".3"); err != nil {
		t.Fatal(err)
	}
	res, _ = r.Read(Filter{Session: "e1"}, now)
	if got := sessionsOf(res); got != "e1#2" || res.Total != 1 {
		t.Errorf("after the drop: %q total %d", got, res.Total)
	}
	if _, ok := r.strs["a1"]; ok || len(r.names) != len(r.strs) {
		t.Errorf("the names of dropped records are kept: %v", r.names)
	}
	// A fresh reader sees the same.
	res, _ = ReadAudit(file, Filter{Limit: 2, Before: 4}, now)
	if got := sessionsOf(res); got != "e2#3 e1#2" || res.Next != 2 {
		t.Errorf("a fresh reader: %q next %d", got, res.Next)
	}
}

// A reader in use reads, at each Read, only what was appended since the
// last: a page of a 200,000-record log costs the page, not the log.
func TestAuditReaderIncremental(t *testing.T) {
	now := time.Now()
	file := bigAudit(t, 200000, now)
	st, _ := os.Stat(file)
	r := NewAuditReader(file)
	defer r.Close()
	start := time.Now()
	res, err := r.Read(Filter{Limit: 100}, now)
	first := time.Since(start)
	if err != nil || len(res.Entries) != 100 || res.Total != 200000 || res.Entries[0].N != 199999 {
		t.Fatalf("first page: %d entries, total %d, %v", len(res.Entries), res.Total, err)
	}
	if r.scanned != st.Size() {
		t.Errorf("indexing read %d bytes of %d", r.scanned, st.Size())
	}
	f, _ := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	line, _ := json.Marshal(map[string]any{"time": now, "agent": "codex", "session": "new", "decision": "deny", "rule": "late"})
	f.Write(append(line, '\n'))
	f.Close()
	start = time.Now()
	res, err = r.Read(Filter{Limit: 100, Before: 100000, Agent: "claude"}, now)
	next := time.Since(start)
	if err != nil || len(res.Entries) != 100 || res.Entries[0].N != 99999 || res.Counts["late"] != 1 {
		t.Fatalf("a page back: %d entries, first %d, counts %v, %v", len(res.Entries), res.Entries[0].N, res.Counts, err)
	}
	if grew := r.scanned - st.Size(); grew != int64(len(line)+1) {
		t.Errorf("the second Read read %d bytes, want the %d appended", grew, len(line)+1)
	}
	t.Logf("200,000 records (%d MB): the first page in %v (the index built), a page back after one more record in %v", st.Size()>>20, first, next)
}

func bigAudit(t testing.TB, n int, now time.Time) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	var b strings.Builder
	for i := range n {
		line, _ := json.Marshal(map[string]any{"time": now.Add(-time.Duration(n-i) * time.Second), "decisionId": fmt.Sprint(i), "agent": "claude",
			"session": fmt.Sprintf("s%d", i%50), "method": "session/request_permission", "decision": "allow", "rule": fmt.Sprintf("r%d", i%20),
			"layer": "user", "source": "rule", "evidence": map[string]any{"commands": []string{"go test ./..."}, "paths": []string{"/work/project/main.go"}}})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// BenchmarkAuditPage: one page of a 200,000-record log, as /api/audit
// serves it: cold (a fresh reader: the whole log read, as every request
// did before the reader kept its index) and warm (the Handler's reader).
//
//	go test -run '^$' -bench AuditPage ./page
func BenchmarkAuditPage(b *testing.B) {
	now := time.Now()
	file := bigAudit(b, 200000, now)
	b.Run("cold", func(b *testing.B) {
		for range b.N {
			if _, err := ReadAudit(file, Filter{Limit: 100, Before: 100000}, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		r := NewAuditReader(file)
		defer r.Close()
		r.Read(Filter{}, now)
		b.ResetTimer()
		for range b.N {
			if _, err := r.Read(Filter{Limit: 100, Before: 100000}, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}
