package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/acp-router/acp-router/audit/audittest"
)

// TestMain runs the writer processes of TestProcessesShareTheLog when the
// test binary is re-executed with childEnv set.
func TestMain(m *testing.M) {
	switch role := os.Getenv(childEnv); role {
	case "":
		os.Exit(m.Run())
	case "writer":
		os.Exit(writerChild())
	default:
		fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
		os.Exit(2)
	}
}

const (
	childEnv  = "ACP_ROUTER_AUDIT_TEST_CHILD"
	envPath   = "ACP_ROUTER_AUDIT_TEST_PATH"
	envName   = "ACP_ROUTER_AUDIT_TEST_NAME"
	envWrites = "ACP_ROUTER_AUDIT_TEST_WRITES"
	envMax    = "ACP_ROUTER_AUDIT_TEST_MAX"
	envGens   = "ACP_ROUTER_AUDIT_TEST_GENS"
)

// writerChild opens the log, says "ready", waits for its stdin to close,
// writes NAME-0 ... NAME-(WRITES-1) and prints how many rotations it did.
func writerChild() int {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	l, err := Open(os.Getenv(envPath), Options{MaxBytes: int64(atoi(envMax)), Generations: atoi(envGens)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	name, failed := os.Getenv(envName), 0
	for i := range atoi(envWrites) {
		if err := l.Write(testRecord(fmt.Sprintf("%s-%d", name, i))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed++
		}
	}
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		failed++
	}
	fmt.Printf("rotations %d\n", l.rotations)
	if failed > 0 {
		return 1
	}
	return 0
}

// testRecord is a decision as the router writes it (about 330 bytes).
func testRecord(id string) Record {
	rule := "no-secrets"
	return Record{Time: time.Now(), DecisionID: id, Session: "sess-5f2c", Agent: "claude", Method: "fs/read_text_file",
		ToolCallID: "toolu_01AbCdEf", Evidence: map[string]any{"paths": []string{"/home/user/project/.env"}},
		Decision: "deny", Rule: &rule, Layer: "org", Source: "rule", PolicyHash: "sha256:9f86d081884c7d65", LatencyUs: 42}
}

func openT(t testing.TB, path string, o Options) *Log {
	t.Helper()
	l, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func writeT(t testing.TB, l *Log, id string) {
	t.Helper()
	if err := l.Write(testRecord(id)); err != nil {
		t.Fatal(err)
	}
}

// readAll reads the rotated generations, oldest first, then the live log.
// Every file must be whole JSON lines of records within maxBytes (or hold a
// single record). It returns the decision ids in the order they were written
// and how many rotated files there are.
func readAll(t *testing.T, path string, maxBytes int64, gens int) (ids []string, rotated int) {
	t.Helper()
	if _, err := os.Stat(fmt.Sprintf("%s.%d", path, gens+1)); err == nil {
		t.Errorf("more than %d generations kept", gens)
	}
	for g := gens; g >= 0; g-- {
		p := path
		if g > 0 {
			p = fmt.Sprintf("%s.%d", path, g)
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		if g > 0 {
			rotated++
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			t.Errorf("%s ends inside a line: %q", p, data[max(0, len(data)-80):])
		}
		lines := bytes.SplitAfter(data, []byte("\n"))
		lines = lines[:len(lines)-1] // after the last \n
		if int64(len(data)) > maxBytes && len(lines) > 1 {
			t.Errorf("%s: %d bytes in %d records, over the cap of %d", p, len(data), len(lines), maxBytes)
		}
		for _, line := range lines {
			var r Record
			if err := json.Unmarshal(line, &r); err != nil || r.DecisionID == "" || r.Method == "" {
				t.Errorf("%s: line %q is not a whole record: %v", p, line, err)
				continue
			}
			ids = append(ids, r.DecisionID)
		}
	}
	return ids, rotated
}

// checkOnceInOrder checks that ids holds each of want exactly once and
// nothing else, and that each writer's (NAME-N) records are in the order it
// wrote them.
func checkOnceInOrder(t *testing.T, ids []string, want map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	last := map[string]int{}
	for _, id := range ids {
		seen[id]++
		if seen[id] == 2 {
			t.Errorf("record %s written twice", id)
		}
		if !want[id] {
			t.Errorf("unexpected record %s", id)
		}
		name, n, _ := strings.Cut(id, "-")
		i, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if prev, ok := last[name]; ok && i <= prev {
			t.Errorf("%s written after %s-%d: a record landed in an older generation", id, name, prev)
		}
		last[name] = i
	}
	missing := 0
	for id := range want {
		if seen[id] == 0 {
			if missing < 5 {
				t.Errorf("record %s lost", id)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d records lost", missing, len(want))
	}
}

// The way the log failed with several routers: one has filled it close to
// its cap, then 8 processes write 2,000 records each at once, rotating it
// many times, and the first writes once more with its old descriptor. Every
// record must be kept exactly once, whole, in the order each process wrote,
// and every file within the cap.
func TestProcessesShareTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 processes writing 16,000 records; not in -short")
	}
	const (
		procs    = 8
		writes   = 2000
		maxBytes = 256 << 10
		gens     = 64 // 16,000 records of ~330 bytes need about 21 rotated files
	)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	o := Options{MaxBytes: maxBytes, Generations: gens}
	want := map[string]bool{}
	first := openT(t, path, o)
	for i := 0; ; i++ {
		id := fmt.Sprintf("first-%d", i)
		writeT(t, first, id)
		want[id] = true
		if fi, err := os.Stat(path); err != nil {
			t.Fatal(err)
		} else if fi.Size() > maxBytes-1000 {
			break
		}
	}

	type child struct {
		cmd    *exec.Cmd
		stdin  io.Closer
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	children := make([]*child, procs)
	for i := range children {
		c := &child{cmd: exec.CommandContext(t.Context(), exe, "-test.run=^$")}
		name := fmt.Sprintf("w%d", i)
		c.cmd.Env = append(os.Environ(), childEnv+"=writer", envPath+"="+path, envName+"="+name,
			envWrites+"="+strconv.Itoa(writes), envMax+"="+strconv.Itoa(maxBytes), envGens+"="+strconv.Itoa(gens))
		c.cmd.Stderr = &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.stdout = bufio.NewReader(out)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
		for j := range writes {
			want[fmt.Sprintf("%s-%d", name, j)] = true
		}
	}
	for i, c := range children {
		if line, err := c.stdout.ReadString('\n'); line != "ready\n" {
			t.Fatalf("w%d: %q %v\n%s", i, line, err, &c.stderr)
		}
	}
	start := time.Now()
	for _, c := range children {
		c.stdin.Close() // all at once: they write concurrently
	}
	rotations := 0
	for i, c := range children {
		out, _ := io.ReadAll(c.stdout)
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("w%d: %v\n%s", i, err, &c.stderr)
		}
		var n int
		if _, err := fmt.Sscanf(string(out), "rotations %d", &n); err != nil {
			t.Fatalf("w%d: %q", i, out)
		}
		rotations += n
	}
	took := time.Since(start)
	// first's descriptor is now FILE.N: its record must go to the live file.
	writeT(t, first, "first-last")
	want["first-last"] = true
	rotations += first.rotations

	ids, rotated := readAll(t, path, maxBytes, gens)
	checkOnceInOrder(t, ids, want)
	if ids[len(ids)-1] != "first-last" {
		t.Errorf("the last record is %s, want first-last (written by a Log whose file was rotated)", ids[len(ids)-1])
	}
	if rotated != rotations || rotations < 10 {
		t.Errorf("%d rotated files for %d rotations done; want equal and at least 10", rotated, rotations)
	}
	kept := 0
	for _, id := range ids {
		if !strings.HasPrefix(id, "first-") {
			kept++
		}
	}
	t.Logf("%d processes: %d of %d records kept (%d records in all), %d rotations at %d KiB, %d files, %v (%.1f µs a record)",
		procs, kept, procs*writes, len(ids), rotations, maxBytes>>10, rotated+1, took.Round(time.Millisecond),
		float64(took.Microseconds())/float64(procs*writes))
}

func TestLogWritesOneFlushedLinePerRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	l := openT(t, path, Options{})
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
	lines := audittest.ReadLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	if lines[0]["time"] != "2026-11-21T10:00:00Z" || lines[0]["rule"] != "no-secrets" || lines[0]["latencyUs"] != float64(42) {
		t.Errorf("first record %v", lines[0])
	}
	if v, ok := lines[1]["rule"]; !ok || v != nil {
		t.Errorf("a record without a rule must say rule: null, got %v", lines[1])
	}
	for _, p := range []string{path, path + ".lock", filepath.Dir(path)} {
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
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(rec); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
}

func TestLogTightensAndRotates(t *testing.T) {
	size := int64(len(mustMarshal(t, testRecord("r-0")))) + 1
	for _, tc := range []struct {
		name   string
		gens   int // 0: DefaultGenerations
		writes int
		// want: records in the live file, then in FILE.1, FILE.2, ...
		want []int
	}{
		{"no rotation", 3, 2, []int{2}},
		{"one rotation", 3, 3, []int{1, 2}},
		{"all generations", 3, 8, []int{2, 2, 2, 2}},
		{"oldest dropped", 3, 11, []int{1, 2, 2, 2}},
		{"one generation", 1, 7, []int{1, 2}},
		{"default generations", 0, 20, []int{2, 2, 2, 2, 2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			l := openT(t, path, Options{MaxBytes: 2*size + size/2, Generations: tc.gens}) // two records a file
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Errorf("existing log left at %v", fi.Mode().Perm())
			}
			for i := range tc.writes {
				writeT(t, l, fmt.Sprintf("r-%d", i))
			}
			var got []int
			for g := 0; ; g++ {
				p := path
				if g > 0 {
					p = fmt.Sprintf("%s.%d", path, g)
				}
				if _, err := os.Stat(p); err != nil {
					break
				}
				got = append(got, len(audittest.ReadLines(t, p)))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("records a file (live, .1, .2, ...): %v, want %v", got, tc.want)
			}
			gens := tc.gens
			if gens == 0 {
				gens = DefaultGenerations
			}
			ids, _ := readAll(t, path, 2*size+size/2, gens)
			if len(ids) == 0 || ids[len(ids)-1] != fmt.Sprintf("r-%d", tc.writes-1) {
				t.Errorf("records kept %v, want the newest last", ids)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Several Logs on one file in one process exclude each other like processes
// do (flock belongs to the open file), and goroutines share each Log: every
// record is kept once, in order, across many rotations.
func TestLogsInOneProcessShareTheFile(t *testing.T) {
	const logs, goroutines, writes, maxBytes, gens = 3, 3, 200, 16 << 10, 100
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	want := map[string]bool{}
	var wg sync.WaitGroup
	for i := range logs {
		l := openT(t, path, Options{MaxBytes: maxBytes, Generations: gens})
		for j := range goroutines {
			name := fmt.Sprintf("l%dg%d", i, j)
			for k := range writes {
				want[fmt.Sprintf("%s-%d", name, k)] = true
			}
			wg.Go(func() {
				for k := range writes {
					if err := l.Write(testRecord(fmt.Sprintf("%s-%d", name, k))); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	ids, rotated := readAll(t, path, maxBytes, gens)
	checkOnceInOrder(t, ids, want)
	if rotated < 5 {
		t.Errorf("%d rotations, want several", rotated)
	}
}

// A Log follows what another process did to the file: its next record goes
// to the live file, never into a rotated or removed one.
func TestLogFollowsAnotherProcess(t *testing.T) {
	const maxBytes = 2 << 10
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, path string, a *Log)
	}{
		{"another Log rotated", func(t *testing.T, path string, a *Log) {
			for i := 0; a.rotations == 0; i++ {
				writeT(t, a, fmt.Sprintf("a-%d", i))
			}
		}},
		{"another Log rotated twice", func(t *testing.T, path string, a *Log) {
			for i := 0; a.rotations < 2; i++ {
				writeT(t, a, fmt.Sprintf("a-%d", i))
			}
		}},
		{"renamed without the lock (logrotate)", func(t *testing.T, path string, a *Log) {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, path string, a *Log) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"lock file removed", func(t *testing.T, path string, a *Log) {
			if err := os.Remove(path + ".lock"); err != nil {
				t.Fatal(err)
			}
			writeT(t, a, "a-0") // opens a new lock file; b must lock the same one
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			a := openT(t, path, Options{MaxBytes: maxBytes})
			b := openT(t, path, Options{MaxBytes: maxBytes})
			writeT(t, b, "b-0")
			tc.do(t, path, a)
			writeT(t, b, "b-1")
			lines := audittest.ReadLines(t, path)
			if len(lines) == 0 || lines[len(lines)-1]["decisionId"] != "b-1" {
				t.Errorf("b's record is not at the end of the live file: %v", lines)
			}
			for g := 1; g <= DefaultGenerations; g++ {
				if fi, err := os.Stat(fmt.Sprintf("%s.%d", path, g)); err == nil && fi.Size() > maxBytes {
					t.Errorf("%s.%d grew past the cap: %d bytes", path, g, fi.Size())
				}
			}
			if b.lockID != a.lockID {
				t.Errorf("the two Logs lock different files")
			}
		})
	}
}

// While the log cannot be reopened, Write fails with the cause (the caller
// fails closed) and tries again each time; once the directory is back,
// writing resumes.
func TestLogRecoversWhenTheFileComesBack(t *testing.T) {
	const maxBytes = 4 << 10
	for _, tc := range []struct {
		name             string
		needsPermissions bool // root ignores them
		brk, restore     func(dir, path string) error
		want             error
	}{
		{"directory removed", false,
			func(dir, path string) error { return os.RemoveAll(dir) },
			func(dir, path string) error { return os.Mkdir(dir, 0o700) },
			fs.ErrNotExist},
		{"directory read-only at rotation", true,
			func(dir, path string) error { return os.Chmod(dir, 0o500) },
			func(dir, path string) error { return os.Chmod(dir, 0o700) },
			fs.ErrPermission},
		{"a directory in place of the file", false,
			func(dir, path string) error { return errors.Join(os.Remove(path), os.Mkdir(path, 0o700)) },
			func(dir, path string) error { return os.Remove(path) },
			syscall.EISDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsPermissions && os.Geteuid() == 0 {
				t.Skip("running as root, which ignores directory permissions; the removed-directory case covers a failed reopen")
			}
			dir := filepath.Join(t.TempDir(), "state")
			path := filepath.Join(dir, "audit.jsonl")
			l := openT(t, path, Options{MaxBytes: maxBytes})
			for i := 0; ; i++ { // full: the next record rotates
				writeT(t, l, fmt.Sprintf("before-%d", i))
				if fi, err := os.Stat(path); err != nil {
					t.Fatal(err)
				} else if fi.Size() > maxBytes-300 {
					break
				}
			}
			if err := tc.brk(dir, path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tc.restore(dir, path) })
			for i := range 3 {
				err := l.Write(testRecord(fmt.Sprintf("during-%d", i)))
				if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "closed") {
					t.Fatalf("write %d while broken: %v, want an error wrapping %v", i, err, tc.want)
				}
				if i == 0 {
					t.Logf("write while broken: %v", err)
				}
			}
			if err := tc.restore(dir, path); err != nil {
				t.Fatal(err)
			}
			writeT(t, l, "after-0")
			lines := audittest.ReadLines(t, path)
			if len(lines) == 0 || lines[len(lines)-1]["decisionId"] != "after-0" {
				t.Errorf("after the restore, the live file holds %v", lines)
			}
			ids, _ := readAll(t, path, maxBytes, DefaultGenerations)
			for _, id := range ids {
				if strings.HasPrefix(id, "during-") {
					t.Errorf("%s written although Write failed", id)
				}
			}
		})
	}
}

// A symbolic link at the log's path or its lock file's is refused: it could
// redirect the audit trail, or the router's writes, to another file.
func TestLogRefusesSymlinks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		afterOpen bool
		link      func(path string) string // the link's name
		dangling  bool
	}{
		{"log file", false, func(path string) string { return path }, false},
		{"dangling log file", false, func(path string) string { return path }, true},
		{"lock file", false, func(path string) string { return path + ".lock" }, false},
		{"log file replaced after Open", true, func(path string) string { return path }, false},
		{"lock file replaced after Open", true, func(path string) string { return path + ".lock" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "audit.jsonl")
			target := filepath.Join(dir, "target")
			if !tc.dangling {
				if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			link := func() {
				os.Remove(tc.link(path))
				if err := os.Symlink(target, tc.link(path)); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tc.afterOpen {
				l := openT(t, path, Options{})
				writeT(t, l, "r-0")
				link()
				err = l.Write(testRecord("r-1"))
			} else {
				link()
				var l *Log
				if l, err = Open(path, Options{}); err == nil {
					l.Close()
				}
			}
			if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), tc.link(path)) {
				t.Errorf("got %v, want ErrSymlink naming %s", err, tc.link(path))
			}
			data, rerr := os.ReadFile(target)
			if tc.dangling && !errors.Is(rerr, fs.ErrNotExist) {
				t.Errorf("the link's target was created: %v", rerr)
			}
			if !tc.dangling && string(data) != "precious\n" {
				t.Errorf("the link's target was changed: %q %v", data, rerr)
			}
		})
	}
}

// BenchmarkWrite is the cost of one audited decision: marshal, lock, check
// the file, append, unlock.
func BenchmarkWrite(b *testing.B) {
	b.Run("one goroutine", func(b *testing.B) {
		l := openT(b, filepath.Join(b.TempDir(), "audit.jsonl"), Options{})
		r := testRecord("1234-1763700000000000000-1")
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Write(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two logs, parallel", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "audit.jsonl")
		logs := []*Log{openT(b, path, Options{}), openT(b, path, Options{})}
		var next sync.Mutex
		n := 0
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			next.Lock()
			l := logs[n%len(logs)]
			n++
			next.Unlock()
			r := testRecord("1234-1763700000000000000-1")
			for pb.Next() {
				if err := l.Write(r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// A lock held elsewhere and never released fails each Write at its
// deadline, those queued behind another writer of this process included
// (issue 27: flock waited for ever), and writing resumes once it is free.
// In a synctest bubble: the deadline passes on the bubble's clock, so each
// writer is seen to fail exactly at it.
func TestLogLockHeldElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		l := openT(t, path, Options{LockTimeout: timeout})
		release := audittest.HoldLock(t, path)
		const writers = 4
		errs := make(chan error, writers)
		start := time.Now()
		for i := range writers {
			go func() { errs <- l.Write(testRecord(fmt.Sprintf("w%d", i))) }()
		}
		for range writers {
			select {
			case err := <-errs:
				if !errors.Is(err, ErrLockTimeout) {
					t.Errorf("Write with the lock held elsewhere: %v; want ErrLockTimeout", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Write still waiting for the lock after 5s; its deadline is %v", timeout)
			}
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("%d writers took %v to fail; each fails at its deadline, %v", writers, d, timeout)
		}
		release()
		writeT(t, l, "after")
		lines := audittest.ReadLines(t, path)
		if len(lines) != 1 || lines[0]["decisionId"] != "after" {
			t.Errorf("log holds %v; want only the record written once the lock was free", lines)
		}
	})
}
