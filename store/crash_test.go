package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/acp-router/acp-router/internal/slowtest"
)

// The last record, and every other prefix of a log, cut at every byte: the
// store opens, returns exactly the updates stored whole, and the next write
// cuts the torn tail and continues the history.
func TestTruncatedAtEveryOffset(t *testing.T) {
	slowtest.Require(t, "opens the store once per byte of a log, about 5 s on a loaded 2-core machine")
	src := t.TempDir()
	st := openT(t, src, Options{})
	must(t, st.Create(Meta{ID: "x", Title: "t"}))
	var ends []int64 // ends[k]: the log's size once update k was stored
	logPath := filepath.Join(src, fileName("x")+".log")
	stored := func() {
		must(t, st.Sync(t.Context()))
		fi, err := os.Stat(logPath)
		must(t, err)
		ends = append(ends, fi.Size())
	}
	must(t, st.Append("x", mkLine("x", 0, 0, 60))) // before the first turn
	stored()
	for tn := 1; tn <= 3; tn++ {
		must(t, st.TurnStart("x"))
		for i := range 3 {
			must(t, st.Append("x", mkLine("x", tn, i, 60)))
			stored()
		}
		must(t, st.TurnEnd("x"))
	}
	must(t, st.Close())
	data, err := os.ReadFile(logPath)
	must(t, err)
	meta, err := os.ReadFile(filepath.Join(src, fileName("x")+".json"))
	must(t, err)
	full := append([]string{"0.0"}, seq([]int{1, 2, 3}, 3)...)
	lastUpdate := ends[len(ends)-1] - int64(len(mkLine("x", 3, 2, 60))) - recHeaderLen - 1

	dir := t.TempDir()
	check := func(t *testing.T, log []byte, want []string, resume bool) {
		t.Helper()
		must(t, os.WriteFile(filepath.Join(dir, fileName("x")+".json"), meta, 0o600))
		must(t, os.WriteFile(filepath.Join(dir, fileName("x")+".log"), log, 0o600))
		st, err := Open(dir, Options{})
		must(t, err)
		defer st.Close()
		h := load(t, st, "x")
		if got := pairs(t, h.Updates); !slices.Equal(got, want) {
			t.Fatalf("updates = %v, want %v", got, want)
		}
		if !resume {
			return
		}
		turn(t, st, "x", 9, 1, 60)
		must(t, st.Close())
		st = openT(t, dir, Options{})
		if got, want := pairs(t, load(t, st, "x").Updates), slices.Concat(want, []string{"9.0"}); !slices.Equal(got, want) {
			t.Fatalf("after the next turn: %v, want %v", got, want)
		}
	}
	for cut := range int64(len(data)) {
		k := 0
		for k < len(ends) && ends[k] <= cut {
			k++
		}
		// Resuming costs fsyncs: at every offset of the last update and
		// the turn end after it, every 16th elsewhere.
		resume := cut >= lastUpdate || cut%16 == 0
		t.Run(fmt.Sprintf("cut=%d", cut), func(t *testing.T) { check(t, data[:cut], full[:k], resume) })
	}
	// A flipped byte ends the valid records just the same.
	for j, end := range ends {
		bad := slices.Clone(data)
		bad[end-1] ^= 0x20
		t.Run(fmt.Sprintf("flip=%d", end-1), func(t *testing.T) { check(t, bad, full[:j], true) })
	}
}

// Crash test: the test binary re-executed as a child runs crashWorkload and
// SIGKILLs itself at its Nth write to disk, for every N until it finishes.
const (
	envDir     = "ACP_ROUTER_STORE_TEST_DIR"
	envCrashAt = "ACP_ROUTER_STORE_TEST_CRASH_AT"
	envJournal = "ACP_ROUTER_STORE_TEST_JOURNAL"
	envNoLinks = "ACP_ROUTER_STORE_TEST_NO_LINKS"
)

func crashOptions(noLinks bool) Options {
	// Commits happen only at turn ends and Syncs, so that the Nth write
	// is the same in every run; the small cap makes seals (trims by copy
	// without hard links) happen.
	// The turns' updates (150 B) are stored by reference (AppendShared),
	// the late ones (100 B) copied: both kinds of pieces are written.
	// With noLinks, a log past its cap is trimmed by copy instead of
	// losing its oldest segments.
	return Options{MaxSessionBytes: 2 << 10, CommitInterval: time.Hour, SweepInterval: time.Hour, minShared: 120, verifyStarts: true, noLinks: noLinks}
}

func crashChild() int {
	at, _ := strconv.Atoi(os.Getenv(envCrashAt))
	journal, err := os.OpenFile(os.Getenv(envJournal), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	note := func(s string) { journal.WriteString(s + "\n") }
	n := 0
	fail := func(op string) error { // on the writer goroutine only
		if n++; n == at {
			note("crash " + op)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}
	st, err := open(os.Getenv(envDir), crashOptions(os.Getenv(envNoLinks) != ""), fail)
	if err == nil {
		err = crashWorkload(st, note)
	}
	if err == nil {
		err = st.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// crashWorkload writes sessions a, b (four turns each, each followed by an
// update out of turn) and c (deleted at the end), noting each step once it
// is committed.
func crashWorkload(st *Store, note func(string)) error {
	ctx := context.Background()
	step := func(err error, format string, args ...any) error {
		if err == nil {
			err = st.Sync(ctx)
		}
		if err == nil {
			note(fmt.Sprintf(format, args...))
		}
		return err
	}
	var err error
	for _, id := range []string{"a", "b", "c"} {
		err = errors.Join(err, st.Create(Meta{ID: id, Cwd: "/w", Title: id}))
	}
	if err := step(err, "created"); err != nil {
		return err
	}
	for tn := range 4 {
		for _, id := range []string{"a", "b"} {
			err := st.TurnStart(id)
			for i := range 3 {
				err = errors.Join(err, st.AppendShared(id, mkLine(id, tn, i, 150), nil))
			}
			if err := step(errors.Join(err, st.TurnEnd(id)), "turn %s %d", id, tn); err != nil {
				return err
			}
			if err := step(st.Append(id, mkLine(id, tn, 3, 100)), "late %s %d", id, tn); err != nil {
				return err
			}
		}
		err := st.Update("a", func(m *Meta) { m.Title = "a" + strconv.Itoa(tn) })
		if err := step(err, "title %d", tn); err != nil {
			return err
		}
	}
	return step(st.Delete(ctx, "c"), "deleted c")
}

func TestCrashAtEveryWriteBoundary(t *testing.T) {
	slowtest.Require(t, "runs the workload once per write boundary (about a hundred processes)")
	exe, err := os.Executable()
	must(t, err)
	common := []string{"log.init", "log.write", "log.write.shared", "log.sync", "meta.write", "meta.sync", "meta.rename",
		"remove.meta", "remove.log"}
	for _, mode := range []struct {
		name    string
		noLinks bool
		ops     []string
	}{
		// A log past its cap loses its oldest segments (every commit
		// of this workload fsyncs, so no segment is sealed with
		// records its fsync has not written: log.sync.sealed is
		// TestSealFsync's)...
		{"segments", false, []string{"roll.seal", "roll.link", "roll.remove", "roll.write", "roll.sync", "roll.rename"}},
		// ... or, without hard links, is trimmed by copy.
		{"copy", true, []string{"trim.write", "trim.sync", "trim.rename"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			base := t.TempDir()
			seen := map[string]int{}
			ops := append(slices.Clip(common), mode.ops...)
			missing := func() bool {
				return slices.ContainsFunc(ops, func(op string) bool { return seen[op] == 0 })
			}
			// The number of write boundaries depends on how the writer
			// batches commits (timing): a pass can end before it crashed
			// at the last ones (the removal at the end). A pass that
			// leaves some unseen is followed by another, up to three.
			for pass := 0; pass < 3 && missing(); pass++ {
				crashPass(t, exe, filepath.Join(base, strconv.Itoa(pass)), mode.noLinks, seen)
			}
			for _, op := range ops {
				if seen[op] == 0 {
					t.Errorf("no crash at %s (crashes: %v)", op, seen)
				}
			}
		})
	}
}

// crashPass runs the workload once per write boundary, crashing it at
// each, and verifies what each crash left; seen counts the crashes by
// operation.
func crashPass(t *testing.T, exe, base string, noLinks bool, seen map[string]int) {
	must(t, os.MkdirAll(base, 0o755))
	for at := 1; ; at++ {
		dir := filepath.Join(base, strconv.Itoa(at))
		journal := dir + ".journal"
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=crash", envDir+"="+dir,
			envCrashAt+"="+strconv.Itoa(at), envJournal+"="+journal)
		if noLinks {
			cmd.Env = append(cmd.Env, envNoLinks+"=1")
		}
		out, err := cmd.CombinedOutput()
		cancel()
		notes, _ := os.ReadFile(journal)
		steps := strings.Split(strings.TrimSpace(string(notes)), "\n")
		done := err == nil
		op := "none"
		if !done {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("crash at %d: %v\n%s", at, err, out)
			}
			op = strings.TrimPrefix(steps[len(steps)-1], "crash ")
			seen[op]++
		}
		t.Run(fmt.Sprintf("%d-%s", at, op), func(t *testing.T) { verifyCrash(t, dir, noLinks, steps) })
		if done {
			if at < 60 {
				t.Errorf("the workload wrote only %d times", at-1)
			}
			return
		}
	}
}

// verifyCrash checks a store a crashed child left: it opens; each session's
// updates are whole turns in order (trimmed ones first), the last one
// possibly cut short if it was not committed; every committed step is
// there; and the history continues.
func verifyCrash(t *testing.T, dir string, noLinks bool, steps []string) {
	committed := map[string]bool{}
	for _, s := range steps {
		committed[s] = true
	}
	st := openT(t, dir, crashOptions(noLinks))
	ctx := t.Context()
	var found []string
	for _, id := range []string{"a", "b"} {
		h, err := st.Load(ctx, id)
		if errors.Is(err, ErrNotFound) && !committed["created"] {
			continue
		}
		if err != nil {
			t.Fatalf("Load(%s): %v", id, err)
		}
		found = append(found, id)
		got := pairs(t, h.Updates)
		lastT, lastI := -1, 3
		for k, p := range got {
			var tn, i int
			fmt.Sscanf(p, "%d.%d", &tn, &i)
			switch {
			case i == 0 && lastI == 3 && (lastT < 0 || tn == lastT+1):
			case i == lastI+1 && tn == lastT:
			default:
				t.Fatalf("%s: %v: %s at %d breaks whole turns in order", id, got, p, k)
			}
			lastT, lastI = tn, i
		}
		for tn := range 4 {
			want := -1
			if committed[fmt.Sprintf("turn %s %d", id, tn)] {
				want = 2
			}
			if committed[fmt.Sprintf("late %s %d", id, tn)] {
				want = 3
			}
			if want >= 0 && (lastT < tn || lastT == tn && lastI < want) {
				t.Errorf("%s: %v lacks the committed %d.%d", id, got, tn, want)
			}
		}
		if want := fmt.Sprintf("a%d", 3); id == "a" && committed["title 3"] && h.Meta.Title != want {
			t.Errorf("title %q, want %q", h.Meta.Title, want)
		}

		turn(t, st, id, 9, 1, 150)
		after := pairs(t, load(t, st, id).Updates)
		if n := len(after) - 1; n < 0 || after[n] != "9.0" || n > len(got) || !slices.Equal(got[len(got)-n:], after[:n]) {
			t.Errorf("%s: the next turn: %v, after %v", id, after, got)
		}
	}
	if _, err := st.Load(ctx, "c"); committed["deleted c"] && !errors.Is(err, ErrNotFound) {
		t.Errorf("Load(c) after its delete was committed: %v", err)
	}
	p, err := st.List(ctx, ListOptions{})
	must(t, err)
	for _, id := range found {
		if !slices.Contains(ids(p.Sessions), id) {
			t.Errorf("List = %v, lacks %s", ids(p.Sessions), id)
		}
	}
	for _, id := range ids(p.Sessions) {
		if !slices.Contains([]string{"a", "b", "c"}, id) {
			t.Errorf("List = %v", ids(p.Sessions))
		}
	}
}

// A failed write loses what it held, and the turn it was in ends there:
// what is written after the hole is not replayed, the next turn is.
func TestWriteFailure(t *testing.T) {
	var failing atomic.Bool
	st, err := open(t.TempDir(), Options{CommitInterval: time.Hour}, func(op string) error {
		if op == "log.write" && failing.Swap(false) {
			return errors.New("disk full")
		}
		return nil
	})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	must(t, st.Create(Meta{ID: "x"}))
	must(t, st.TurnStart("x"))
	must(t, st.Append("x", mkLine("x", 0, 0, 50)))
	must(t, st.Sync(ctx))
	failing.Store(true)
	must(t, st.Append("x", mkLine("x", 0, 1, 50)))
	if err := st.Sync(ctx); err == nil {
		t.Error("Sync = nil after a failed write")
	}
	must(t, st.Append("x", mkLine("x", 0, 2, 50)))
	must(t, st.TurnEnd("x"))
	must(t, st.Sync(ctx))
	turn(t, st, "x", 1, 1, 50)
	h := load(t, st, "x")
	if got := pairs(t, h.Updates); !slices.Equal(got, []string{"0.0", "1.0"}) || !h.Partial {
		t.Errorf("updates = %v (partial %v), want 0.0 1.0", got, h.Partial)
	}
	if s := st.Stats(); s.WriteErrors != 1 {
		t.Errorf("stats = %+v, want 1 write error", s)
	}
}
