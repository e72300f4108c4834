package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st := openT(t, dir, Options{})
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := Meta{
		ID:                    "sess/1 with \x00 odd chars",
		Cwd:                   "/home/u/p",
		AdditionalDirectories: []string{"/home/u/lib"},
		Title:                 "first",
		CreatedAt:             created,
		ActiveAgent:           "claude",
		Agents: map[string]Agent{
			"claude": {SessionID: "down-1", Mode: "default", Options: map[string]json.RawMessage{"model": json.RawMessage(`"opus"`)}},
		},
		Extra: json.RawMessage(`{"mcpServers":[]}`),
	}
	must(t, st.Create(want))
	if err := st.Create(want); !errors.Is(err, ErrExists) {
		t.Errorf("second Create = %v, want ErrExists", err)
	}
	must(t, st.Append(want.ID, mkLine("a", 0, 0, 50))) // before the first turn
	turn(t, st, want.ID, 1, 3, 200)
	must(t, st.Update(want.ID, func(m *Meta) {
		m.Title = "renamed"
		m.ActiveAgent = "codex"
		m.Agents["codex"] = Agent{SessionID: "down-2", Mode: "read-only"}
		m.UpdatedAt = time.Time{} // the store's: ignored
	}))
	if err := st.Append("nope", []byte(`{}`)); !errors.Is(err, ErrNotOpen) {
		t.Errorf("Append to an unknown session = %v, want ErrNotOpen", err)
	}
	must(t, st.Close())
	if err := st.Append(want.ID, []byte(`{}`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}

	st = openT(t, dir, Options{})
	h := load(t, st, want.ID)
	if got, w := pairs(t, h.Updates), append([]string{"0.0"}, seq([]int{1}, 3)...); !slices.Equal(got, w) {
		t.Errorf("updates = %v, want %v", got, w)
	}
	if h.Trimmed || h.Partial {
		t.Errorf("Trimmed, Partial = %v, %v", h.Trimmed, h.Partial)
	}
	m := h.Meta
	if m.Title != "renamed" || m.ActiveAgent != "codex" || m.Agents["codex"].SessionID != "down-2" ||
		string(m.Agents["claude"].Options["model"]) != `"opus"` || string(m.Extra) != string(want.Extra) ||
		!m.CreatedAt.Equal(created) || !slices.Equal(m.AdditionalDirectories, want.AdditionalDirectories) {
		t.Errorf("meta = %+v", m)
	}
	if !m.UpdatedAt.After(time.Now().Add(-time.Minute)) {
		t.Errorf("UpdatedAt = %v, want moved by the turn", m.UpdatedAt)
	}

	// A loaded session is held: the thread continues.
	turn(t, st, want.ID, 2, 2, 100)
	h = load(t, st, want.ID)
	if got := pairs(t, h.Updates); len(got) != 6 || got[5] != "2.1" {
		t.Errorf("after a second turn: %v", got)
	}

	if _, err := st.Load(ctx, "unknown"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load(unknown) = %v, want ErrNotFound", err)
	}
	must(t, st.Delete(ctx, "unknown"))
	must(t, st.Delete(ctx, want.ID))
	if _, err := st.Load(ctx, want.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after Delete = %v, want ErrNotFound", err)
	}
	if err := st.Append(want.ID, []byte(`{}`)); !errors.Is(err, ErrNotOpen) {
		t.Errorf("Append after Delete = %v, want ErrNotOpen", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left after Delete: %v", left)
	}
}

// Create replaces a history stored under the same id.
func TestCreateReplaces(t *testing.T) {
	dir := t.TempDir()
	st := openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "x"}))
	turn(t, st, "x", 0, 2, 100)
	must(t, st.Close())
	st = openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "x", Title: "new"}))
	turn(t, st, "x", 5, 1, 100)
	if got := pairs(t, load(t, st, "x").Updates); !slices.Equal(got, []string{"5.0"}) {
		t.Errorf("updates = %v, want only the new session's", got)
	}
}

// Load sees what this Store queued and has not committed yet.
func TestLoadSeesQueued(t *testing.T) {
	st := openT(t, t.TempDir(), Options{CommitInterval: time.Hour})
	must(t, st.Create(Meta{ID: "x"}))
	must(t, st.TurnStart("x"))
	must(t, st.Append("x", mkLine("x", 0, 0, 100)))
	if got := pairs(t, load(t, st, "x").Updates); !slices.Equal(got, []string{"0.0"}) {
		t.Errorf("updates = %v", got)
	}
}

// A full queue drops the rest of the turn, never a line in its middle, and
// never blocks.
func TestQueueFull(t *testing.T) {
	st := openT(t, t.TempDir(), Options{MaxQueueBytes: 4 << 10, CommitInterval: time.Hour})
	must(t, st.Create(Meta{ID: "x"}))
	// The cap counts the memory held, chunks in flight included: nothing
	// may be in flight (Open's first commit) when the turn's chunk is
	// taken.
	must(t, st.Sync(t.Context()))
	must(t, st.TurnStart("x"))
	stored := 0
	for i := range 100 {
		err := st.Append("x", mkLine("x", 0, i, 200))
		if errors.Is(err, ErrDropped) {
			break
		}
		must(t, err)
		stored++
	}
	if stored == 0 || stored == 100 {
		t.Fatalf("%d lines stored before the queue was full", stored)
	}
	// Room again (nothing was committed yet): still dropped, the turn has a hole.
	if err := st.Append("x", []byte(`{}`)); !errors.Is(err, ErrDropped) {
		t.Errorf("Append after a drop = %v, want ErrDropped", err)
	}
	must(t, st.TurnEnd("x"))
	must(t, st.Sync(t.Context()))
	turn(t, st, "x", 1, 2, 200)
	if err := st.Append("x", mkLine("x", 1, 2, 200)); err != nil {
		t.Errorf("out-of-turn Append after a good turn = %v", err)
	}

	h := load(t, st, "x")
	want := append(seq([]int{0}, stored), "1.0", "1.1", "1.2")
	if got := pairs(t, h.Updates); !slices.Equal(got, want) {
		t.Errorf("updates = %v, want %v", got, want)
	}
	if !h.Partial {
		t.Error("Partial = false after a drop")
	}
	if s := st.Stats(); s.Dropped != 2 || s.Queued != 0 {
		t.Errorf("stats = %+v, want 2 dropped, nothing queued", s)
	}
}

// The per-session cap keeps the newest whole turns; a turn larger than the
// cap is stored as a prefix. Both ways of dropping the oldest turns: whole
// segments, and (without hard links) a copy of the rest.
func TestTrimWholeTurns(t *testing.T) {
	for _, noLinks := range []bool{false, true} {
		t.Run(map[bool]string{false: "segments", true: "copy"}[noLinks], func(t *testing.T) {
			testTrimWholeTurns(t, noLinks)
		})
	}
}

func testTrimWholeTurns(t *testing.T, noLinks bool) {
	dir := t.TempDir()
	const limit = 4 << 10
	st := openT(t, dir, Options{MaxSessionBytes: limit, verifyStarts: true, noLinks: noLinks})
	must(t, st.Create(Meta{ID: "x"}))
	// The log's files: NAME.log and its sealed segments NAME.log-NONCE.
	logBytes := func() (n int64, files int) {
		paths, err := filepath.Glob(filepath.Join(dir, fileName("x")+".log*"))
		must(t, err)
		for _, p := range paths {
			fi, err := os.Stat(p)
			must(t, err)
			n += fi.Size()
		}
		return n, len(paths)
	}
	maxFiles := 0
	for tn := range 20 {
		turn(t, st, "x", tn, 3, 200)
		must(t, st.Append("x", mkLine("x", tn, 3, 100))) // out of turn, after it
		must(t, st.Sync(t.Context()))
		n, files := logBytes()
		if n > limit {
			t.Fatalf("after turn %d: the log's %d files hold %d bytes; cap %d", tn, files, n, limit)
		}
		maxFiles = max(maxFiles, files)
	}
	if want := map[bool]int{false: 2, true: 1}[noLinks]; maxFiles < want || noLinks && maxFiles != 1 {
		t.Errorf("the log had up to %d files; want %d or more (segments), exactly 1 (copy)", maxFiles, want)
	}
	h := load(t, st, "x")
	got := pairs(t, h.Updates)
	first := parseLine(t, h.Updates[0]).T
	var turns []int
	for tn := first; tn < 20; tn++ {
		turns = append(turns, tn)
	}
	if want := seq(turns, 4); !slices.Equal(got, want) || first < 10 || first > 16 {
		t.Errorf("updates = %v, want whole turns from about 10 to 19", got)
	}
	if !h.Trimmed || h.Partial {
		t.Errorf("Trimmed, Partial = %v, %v", h.Trimmed, h.Partial)
	}

	// One turn bigger than the cap: stored up to the cap, after whole
	// older turns if any still fit.
	must(t, st.TurnStart("x"))
	dropped := false
	for i := range 30 {
		if err := st.Append("x", mkLine("x", 20, i, 200)); errors.Is(err, ErrDropped) {
			dropped = true
		}
	}
	must(t, st.TurnEnd("x"))
	must(t, st.Sync(t.Context()))
	if !dropped {
		t.Error("a turn over the cap was not cut")
	}
	h = load(t, st, "x")
	got = pairs(t, h.Updates)
	at := slices.Index(got, "20.0")
	older := []int{}
	if at > 0 {
		for tn := parseLine(t, h.Updates[0]).T; tn < 20; tn++ {
			older = append(older, tn)
		}
	}
	if at < 0 || !slices.Equal(got[:at], seq(older, 4)) || len(got)-at < 10 ||
		got[len(got)-1] != "20."+itoa(len(got)-at-1) || !h.Partial {
		t.Errorf("after an oversized turn: %v (partial %v)", got, h.Partial)
	}
	if n, files := logBytes(); n > limit {
		t.Errorf("the log's %d files hold %d bytes, cap %d", files, n, limit)
	}
	turn(t, st, "x", 21, 1, 200)
	if got := pairs(t, load(t, st, "x").Updates); got[len(got)-1] != "21.0" {
		t.Errorf("the turn after an oversized one: %v", got)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// Two stores (as two processes would) write one session in turn, both
// trimming it: each notices the other's appends and renames.
func TestTwoWritersOneSession(t *testing.T) {
	dir := t.TempDir()
	o := Options{MaxSessionBytes: 3 << 10, verifyStarts: true}
	st1, st2 := openT(t, dir, o), openT(t, dir, o)
	must(t, st1.Create(Meta{ID: "x"}))
	must(t, st1.Sync(t.Context()))
	load(t, st2, "x")
	for tn := range 24 {
		st := []*Store{st1, st2}[tn%2]
		turn(t, st, "x", tn, 3, 150)
		must(t, st.Sync(t.Context()))
	}
	h := load(t, openT(t, dir, o), "x")
	got := pairs(t, h.Updates)
	first := parseLine(t, h.Updates[0]).T
	var turns []int
	for tn := first; tn < 24; tn++ {
		turns = append(turns, tn)
	}
	if want := seq(turns, 3); !slices.Equal(got, want) || first == 0 || !h.Trimmed {
		t.Errorf("updates = %v (trimmed %v), want whole turns up to 23", got, h.Trimmed)
	}
}

func TestEviction(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st := openT(t, dir, Options{})
	now := time.Now()
	for i := range 5 {
		id := "s" + itoa(i)
		must(t, st.Create(Meta{ID: id, Title: id}))
		turn(t, st, id, 0, 5, 400)
	}
	must(t, st.Close())
	var one int64
	for i := range 5 {
		age(t, dir, "s"+itoa(i), now.Add(-time.Duration(5-i)*time.Hour)) // s0 least recently used
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, _ := e.Info()
		one += fi.Size()
	}
	one /= 5

	// Over the total: least recently used first, whole sessions.
	st = openT(t, dir, Options{MaxTotalBytes: 3*one + one/2})
	must(t, st.Sync(ctx)) // the sweep at Open ran before this commit
	if got := listAll(t, st, ListOptions{}); !slices.Equal(got, []string{"s2", "s3", "s4"}) {
		t.Errorf("after the size sweep: %v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, fileName("s0")+"*")); len(left) != 0 {
		t.Errorf("s0 files left: %v", left)
	}
	must(t, st.Close())

	// Too old: held sessions are kept, and sessions another process is
	// writing are skipped until it is done.
	st = openT(t, dir, Options{})
	must(t, st.Sync(ctx))
	load(t, st, "s3")
	old := now.Add(-800 * time.Hour)
	for _, id := range []string{"s2", "s3", "s4"} {
		age(t, dir, id, old)
	}
	f, err := os.Open(filepath.Join(dir, fileName("s4")+".log"))
	must(t, err)
	defer f.Close()
	must(t, flock(f, syscall.LOCK_SH))
	sweepNow(t, st)
	if got := listAll(t, st, ListOptions{}); !slices.Equal(got, []string{"s3", "s4"}) {
		t.Errorf("after the age sweep: %v, want the held s3 and the locked s4", got)
	}
	must(t, flock(f, syscall.LOCK_UN))
	st.Release("s3")
	age(t, dir, "s3", old)
	sweepNow(t, st)
	if got := listAll(t, st, ListOptions{}); len(got) != 0 {
		t.Errorf("after releasing and unlocking: %v", got)
	}

	// Crash leftovers go too.
	orphan := filepath.Join(dir, fileName("gone")+".log")
	tmp := filepath.Join(dir, ".tmp-123")
	for _, p := range []string{orphan, tmp} {
		must(t, os.WriteFile(p, []byte("x"), 0o600))
		must(t, os.Chtimes(p, old, old))
	}
	sweepNow(t, st)
	for _, p := range []string{orphan, tmp} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want removed", p, err)
		}
	}
}

func TestMetadataOnly(t *testing.T) {
	dir := t.TempDir()
	st := openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "old", Title: "kept"}))
	turn(t, st, "old", 0, 2, 100)
	must(t, st.Close())

	st = openT(t, dir, Options{MetadataOnly: true})
	must(t, st.Create(Meta{ID: "new", Title: "t", ActiveAgent: "gemini"}))
	turn(t, st, "new", 0, 2, 100)
	must(t, st.Sync(t.Context()))
	if logs, _ := filepath.Glob(filepath.Join(dir, "*.log")); len(logs) != 0 {
		t.Errorf("logs in metadata-only mode: %v", logs)
	}
	for _, id := range []string{"old", "new"} {
		h := load(t, st, id)
		if len(h.Updates) != 0 || h.Meta.Title == "" {
			t.Errorf("%s: %d updates, title %q", id, len(h.Updates), h.Meta.Title)
		}
	}
	if got := listAll(t, st, ListOptions{}); !slices.Equal(got, []string{"new", "old"}) {
		t.Errorf("List = %v", got)
	}
}

func TestFileModes(t *testing.T) {
	old := syscall.Umask(0) // the store must not rely on the umask
	t.Cleanup(func() { syscall.Umask(old) })
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		pre  func(dir string) // what exists before Open
	}{
		{"new", func(string) {}},
		{"existing 0755", func(dir string) { must(t, os.MkdirAll(dir, 0o755)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := filepath.Join(root, tc.name)
			dir := filepath.Join(top, "state", "sessions")
			tc.pre(dir)
			st := openT(t, dir, Options{MaxSessionBytes: 2 << 10, verifyStarts: true})
			must(t, st.Create(Meta{ID: "x"}))
			for tn := range 8 { // past the cap: sealed segments too
				turn(t, st, "x", tn, 3, 200)
			}
			must(t, st.Sync(t.Context()))
			n, sealed := 0, 0
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				must(t, err)
				fi, _ := d.Info()
				want := fs.FileMode(0o600)
				if d.IsDir() {
					want = fs.ModeDir | 0o700
				}
				if fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
				}
				n++
				if strings.Contains(d.Name(), ".log-") {
					sealed++
				}
				return nil
			})
			if n != 3+sealed || sealed == 0 {
				t.Errorf("%d entries, %d of them sealed log segments; want the directory, two files and the segments", n, sealed)
			}
			if tc.name == "new" {
				for _, p := range []string{top + "/state"} {
					if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o700 {
						t.Errorf("%s: mode %v, want 0700", p, fi.Mode())
					}
				}
			}
		})
	}
}

// Pagination is stable while sessions are updated, created and deleted.
func TestListPagination(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st := openT(t, dir, Options{})
	base := time.Now().Add(-time.Hour)
	var want []string // newest first
	for i := range 9 {
		id := "s" + itoa(i)
		cwd := "/p/even"
		if i%2 == 1 {
			cwd = "/p/odd"
		}
		at := base.Add(time.Duration(i) * time.Minute)
		must(t, st.Create(Meta{ID: id, Cwd: cwd, Title: "title " + id, CreatedAt: at}))
		want = append([]string{id}, want...)
	}
	// Another process's sessions are read from disk.
	must(t, st.Sync(ctx))
	other := openT(t, dir, Options{})

	var got []string
	p, err := other.List(ctx, ListOptions{Limit: 2})
	must(t, err)
	for page := 0; ; page++ {
		for _, m := range p.Sessions {
			if m.Title != "title "+m.ID {
				t.Errorf("%s: title %q", m.ID, m.Title)
			}
		}
		got = append(got, ids(p.Sessions)...)
		if p.NextCursor == "" {
			break
		}
		switch page {
		case 0: // bump one already listed and one not yet listed
			turn(t, st, "s8", 1, 1, 10)
			turn(t, st, "s2", 1, 1, 10)
		case 1:
			must(t, st.Create(Meta{ID: "new"}))
			must(t, st.Delete(ctx, "s1"))
		}
		must(t, st.Sync(ctx))
		p, err = other.List(ctx, ListOptions{Limit: 2, Cursor: p.NextCursor})
		must(t, err)
	}
	want = slices.DeleteFunc(want, func(id string) bool { return id == "s1" })
	if !slices.Equal(got, want) {
		t.Errorf("paginated = %v, want %v", got, want)
	}
	// A new listing shows the changes (once they are older than the
	// slack, here none).
	other.listSlack, other.listGrain = 0, 1
	p, err = other.List(ctx, ListOptions{Limit: 3})
	must(t, err)
	if got := ids(p.Sessions); !slices.Equal(got, []string{"new", "s2", "s8"}) {
		t.Errorf("fresh first page = %v, want the new and the updated sessions", got)
	}

	if got := listAll(t, st, ListOptions{Cwd: "/p/odd/"}); !slices.Equal(got, []string{"s3", "s5", "s7"}) {
		t.Errorf("cwd filter = %v", got)
	}
	for _, c := range []string{"garbage!", "AQID"} {
		if _, err := st.List(ctx, ListOptions{Cursor: c}); !errors.Is(err, ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
}

func TestPushBump(t *testing.T) {
	now := time.Unix(1e6, 0)
	var b []int64
	for i := range 100 {
		b = pushBump(b, now.Add(time.Duration(i-100)*time.Minute).UnixNano(), now, time.Second)
	}
	// Values older than the hour: only the newest of them stays.
	cutoff := now.Add(-cursorTTL).UnixNano()
	if len(b) != 60 || b[0] > cutoff || b[1] <= cutoff {
		t.Errorf("kept %d values, first %d, cutoff %d", len(b), b[0], cutoff)
	}
	// Within one grain only the newest value can be a position.
	n := len(b)
	for i := range 100 {
		b = pushBump(b, now.UnixNano()-int64(time.Second)+int64(i), now, time.Second)
	}
	if len(b) != n+1 || b[n] != now.UnixNano()-int64(time.Second)+99 {
		t.Errorf("100 values in one second: kept %d, last %d", len(b)-n, b[len(b)-1])
	}
	for i := range 1000 {
		b = pushBump(b, now.UnixNano()+int64(i)*int64(time.Second), now, time.Second)
	}
	if len(b) != maxBumps || b[len(b)-1] != now.UnixNano()+999*int64(time.Second) {
		t.Errorf("kept %d, want the newest %d", len(b), maxBumps)
	}
}

func TestMergeHistory(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1e6+int64(s), 0) }
	ns := func(s int) int64 { return at(s).UnixNano() }
	ours := metaFile{Session: Meta{UpdatedAt: at(10)}, UpdatedHistory: []int64{ns(1), ns(5)}}
	theirs := metaFile{Session: Meta{UpdatedAt: at(12)}, UpdatedHistory: []int64{ns(1), ns(3), ns(7)}}
	mergeHistory(&ours, &theirs, at(20), time.Second)
	if !ours.Session.UpdatedAt.Equal(at(12)) || !slices.Equal(ours.UpdatedHistory, []int64{ns(1), ns(3), ns(5), ns(7), ns(10)}) {
		t.Errorf("merged: %v %v", ours.Session.UpdatedAt, ours.UpdatedHistory)
	}
}

func TestSortKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		updated int64
		bumps   []int64
		at      int64
		want    int64
	}{
		{"current", 5, []int64{1, 3}, 10, 5},
		{"updated since", 12, []int64{1, 3, 11}, 10, 3},
		{"created since", 12, nil, 10, 12},
		{"created since, updated since", 14, []int64{12}, 10, 12},
	} {
		if got := sortKey(tc.updated, tc.bumps, tc.at); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A session another process deletes while this one is in a turn comes back
// with this one's next write, without the rest of that turn (its beginning
// is gone).
func TestDeletedElsewhere(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st, other := openT(t, dir, Options{}), openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "x", Title: "kept"}))
	must(t, st.TurnStart("x"))
	must(t, st.Append("x", mkLine("x", 0, 0, 50)))
	must(t, st.Sync(ctx))
	must(t, other.Delete(ctx, "x"))
	must(t, st.Append("x", mkLine("x", 0, 1, 50)))
	must(t, st.TurnEnd("x"))
	must(t, st.Append("x", mkLine("x", 0, 2, 50))) // out of turn, still without context
	must(t, st.Sync(ctx))
	turn(t, st, "x", 1, 1, 50)
	must(t, st.Sync(ctx))
	h := load(t, other, "x")
	if got := pairs(t, h.Updates); !slices.Equal(got, []string{"1.0"}) || h.Meta.Title != "kept" {
		t.Errorf("updates = %v, title %q; want 1.0, kept", got, h.Meta.Title)
	}
}

func TestExists(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists("s1") {
		t.Fatal("an unknown session exists")
	}
	if err := st.Create(Meta{ID: "s1", Cwd: "/p"}); err != nil {
		t.Fatal(err)
	}
	if !st.Exists("s1") {
		t.Error("a held session does not exist")
	}
	st.Close()
	other, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !other.Exists("s1") || other.Exists("s2") {
		t.Error("Exists does not see the stored session")
	}
}

// TestArchived: UpdateStored marks a session held or not (released, or
// stored by another process) archived without holding it afterwards;
// List filters by the archive state; an unknown id is
// ErrNotFound.
func TestArchived(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st := openT(t, dir, Options{})
	base := time.Now().Add(-time.Hour)
	for i := range 4 {
		must(t, st.Create(Meta{ID: "s" + itoa(i), Cwd: "/p", CreatedAt: base.Add(time.Duration(i) * time.Minute)}))
	}
	must(t, st.UpdateStored(ctx, "s1", func(m *Meta) { m.Archived = true })) // held
	st.Release("s2")
	must(t, st.Sync(ctx))
	must(t, st.UpdateStored(ctx, "s2", func(m *Meta) { m.Archived = true })) // released: read from disk
	if err := st.Append("s2", []byte(`{}`)); !errors.Is(err, ErrNotOpen) {
		t.Errorf("s2 is held after UpdateStored: Append = %v", err)
	}
	if err := st.UpdateStored(ctx, "nope", func(m *Meta) { m.Archived = true }); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateStored of an unknown id = %v, want ErrNotFound", err)
	}
	must(t, st.Sync(ctx))
	other := openT(t, dir, Options{})
	for _, c := range []struct {
		f    ArchiveFilter
		want []string
	}{
		{ArchivedAny, []string{"s0", "s1", "s2", "s3"}},
		{ArchivedExclude, []string{"s0", "s3"}},
		{ArchivedOnly, []string{"s1", "s2"}},
	} {
		for _, s := range []*Store{st, other} {
			if got := listAll(t, s, ListOptions{Archived: c.f}); !slices.Equal(got, c.want) {
				t.Errorf("filter %d: %v, want %v", c.f, got, c.want)
			}
		}
	}
	// Unarchived again, by the other process.
	must(t, other.UpdateStored(ctx, "s2", func(m *Meta) { m.Archived = false }))
	must(t, other.Sync(ctx))
	if got := listAll(t, st, ListOptions{Archived: ArchivedExclude}); !slices.Equal(got, []string{"s0", "s2", "s3"}) {
		t.Errorf("after unarchive: %v", got)
	}
}

// TestManySessionsUnderRoom: sixteen sessions queueing a few dozen small
// records each in one commit window do not hold RoomBytes between them
// (their chunks grow with what each queues), so the relay does not wait
// for the disk (WaitRoom); one session queueing much still gets 128 KiB
// chunks.
func TestManySessionsUnderRoom(t *testing.T) {
	st, err := Open(t.TempDir(), Options{CommitInterval: time.Hour, CommitBytes: 1 << 30}) // no commit during the test
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + strings.Repeat("x", 150) + `"}}}}`)
	for i := range 16 {
		id := fmt.Sprint("s", i)
		must(t, st.Create(Meta{ID: id}))
	}
	must(t, st.Sync(t.Context())) // the sessions' files exist: nothing is committed below
	for i := range 16 {
		id := fmt.Sprint("s", i)
		must(t, st.TurnStart(id))
		for range 150 { // about 38 KB each
			must(t, st.Append(id, line))
		}
	}
	st.mu.Lock()
	se := st.sessions["s0"]
	caps := []int{}
	for _, p := range se.pending {
		caps = append(caps, cap(p.b))
	}
	queued := st.queued
	st.mu.Unlock()
	if held := st.held.Load(); st.Full() || held > 2*queued {
		t.Errorf("16 sessions queueing %d bytes hold %d bytes of chunks (Full %v, RoomBytes %d)", queued, held, st.Full(), st.opts.RoomBytes)
	}
	if want := []int{4 << 10, 8 << 10, 16 << 10, 32 << 10}; !slices.Equal(caps, want) {
		t.Errorf("chunks of one session: %v, want %v", caps, want)
	}
	for range 2000 { // a flood: 128 KiB chunks
		must(t, st.Append("s0", line))
	}
	st.mu.Lock()
	last := cap(se.pending[len(se.pending)-1].b)
	st.mu.Unlock()
	if last != chunkSize {
		t.Errorf("a flooding session's last chunk is %d bytes, want %d", last, chunkSize)
	}
}

func TestChunkFor(t *testing.T) {
	for _, tt := range []struct{ n, prev, want int }{
		{100, 0, 4 << 10}, {5000, 0, 8 << 10}, {100, 4 << 10, 8 << 10}, {100, 64 << 10, 128 << 10},
		{100, 128 << 10, 128 << 10}, {20 << 10, 4 << 10, 32 << 10}, {200 << 10, 0, 200 << 10}, {200 << 10, 128 << 10, 200 << 10},
	} {
		if got := chunkFor(tt.n, tt.prev); got != tt.want {
			t.Errorf("chunkFor(%d, %d) = %d, want %d", tt.n, tt.prev, got, tt.want)
		}
	}
}

// TestTouchInterval: turns that only move a session's UpdatedAt have its
// metadata written at most once per TouchInterval (not once per commit
// window), the last UpdatedAt reaches the disk within the interval without
// further activity, and Sync writes it at once; other changes are written
// with the next commit.
//
// In a synctest bubble: the intervals pass on the bubble's clock, so what
// is measured is exact whatever the machine's load, and takes no time.
func TestTouchInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 400 * time.Millisecond
		dir := t.TempDir()
		st, metaWrites := openCounting(t, dir, Options{CommitInterval: 5 * time.Millisecond, TouchInterval: interval}, "meta.write")
		defer st.Close()
		ctx := t.Context()
		must(t, st.Create(Meta{ID: "s", Cwd: "/p"}))
		must(t, st.Sync(ctx))
		onDisk := func() time.Time {
			mf, err := readMeta(st.metaPath(fileName("s")), fileName("s"))
			must(t, err)
			return mf.Session.UpdatedAt
		}
		held := func() time.Time {
			st.mu.Lock()
			defer st.mu.Unlock()
			return st.sessions["s"].meta.UpdatedAt
		}

		before := metaWrites.Load()
		took := turnsFor(t, st, "s", 3*interval)
		if n, most := metaWrites.Load()-before, int64(took/interval)+2; n > most {
			t.Errorf("%d metadata writes in %v of turns, want at most %d (one per %v)", n, took, most, interval)
		}
		// While its UpdatedAt waits, the session's (and any other's) updates
		// are committed within a commit window, not at the interval.
		logSize := func(id string) int64 {
			fi, err := os.Stat(st.logPath(fileName(id)))
			if err != nil {
				return 0
			}
			return fi.Size()
		}
		must(t, st.Create(Meta{ID: "other", Cwd: "/p"}))
		must(t, st.Sync(ctx))      // both metadata files written: s's UpdatedAt waits from now
		must(t, st.TurnStart("s")) // moved: it waits for the interval
		time.Sleep(20 * time.Millisecond)
		for _, id := range []string{"s", "other"} {
			size := logSize(id)
			must(t, st.Append(id, []byte(`{"u":2}`)))
			for deadline := time.Now().Add(interval / 4); logSize(id) == size; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: an update waited for the touch interval of a session whose UpdatedAt waits", id)
				}
			}
		}
		// The last turn's UpdatedAt reaches the disk by itself within the
		// interval (and a commit window).
		last := held()
		deadline := time.Now().Add(interval + time.Second)
		for !onDisk().Equal(last) {
			if time.Now().After(deadline) {
				t.Fatalf("UpdatedAt on disk %v, held %v, %v after the last turn", onDisk(), last, interval+time.Second)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Sync writes a moved UpdatedAt at once.
		must(t, st.TurnStart("s"))
		must(t, st.Sync(ctx))
		if !onDisk().Equal(held()) {
			t.Error("Sync left UpdatedAt behind")
		}
		// Another change is not held back.
		must(t, st.TurnStart("s"))
		must(t, st.Update("s", func(m *Meta) { m.Title = "renamed" }))
		deadline = time.Now().Add(interval / 2)
		for {
			mf, err := readMeta(st.metaPath(fileName("s")), fileName("s"))
			must(t, err)
			if mf.Session.Title == "renamed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a title change waited for the touch interval")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Close writes what waits.
		must(t, st.TurnEnd("s"))
		last = held()
		must(t, st.Close())
		if !onDisk().Equal(last) {
			t.Error("Close left UpdatedAt behind")
		}
	})
}

// TestScanLog: scanLog finds the records parseRecords finds in the same
// bytes, stops where it stops (a corrupted record), and allocates the same
// whatever the number of records (a trim scans the whole log).
func TestScanLog(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	must(t, err)
	must(t, st.Create(Meta{ID: "s", Cwd: "/p"}))
	for i := range 3000 {
		if i%100 == 0 {
			must(t, st.TurnStart("s"))
		}
		must(t, st.Append("s", mkLine("s", i, 0, 100+i%5000)))
	}
	must(t, st.Close())
	path := filepath.Join(dir, fileName("s")+".log")
	data, err := os.ReadFile(path)
	must(t, err)
	check := func(data []byte) {
		t.Helper()
		type rec struct {
			off int64
			typ byte
		}
		var want []rec
		off := int64(logHeaderLen)
		wantEnd := int64(logHeaderLen) + int64(parseRecords(data[logHeaderLen:], func(typ byte, payload []byte) {
			want = append(want, rec{off, typ})
			off += int64(recHeaderLen + 1 + len(payload))
		}))
		f, err := os.Open(path)
		must(t, err)
		defer f.Close()
		var got []rec
		end, err := scanLog(f, logHeaderLen, int64(len(data)), func(off int64, typ byte) { got = append(got, rec{off, typ}) })
		must(t, err)
		if end != wantEnd || !slices.Equal(got, want) {
			t.Fatalf("scanLog: end %d, %d records; parseRecords: end %d, %d records", end, len(got), wantEnd, len(want))
		}
		allocs := testing.AllocsPerRun(3, func() { scanLog(f, logHeaderLen, int64(len(data)), nil) })
		if allocs > 10 {
			t.Errorf("scanLog of %d records: %.0f allocations", len(want), allocs)
		}
	}
	check(data)
	data[len(data)/2] ^= 0xff // a record in the middle no longer matches its checksum
	must(t, os.WriteFile(path, data, 0o600))
	check(data)
}

// A line stored as it came, not UTF-8 (a router before the stream repaired
// such lines stored them so), is replayed repaired: each run of bad bytes
// one U+FFFD, the rest as stored, still JSON.
func TestLoadRepairsUTF8(t *testing.T) {
	dir := t.TempDir()
	st := openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "x"}))
	must(t, st.TurnStart("x"))
	bad := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"x","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"caf` + "\xe9 \xff\xfe" + ` ok \u00e9"}}}}`)
	good := mkLine("x", 0, 1, 100)
	must(t, st.Append("x", bad))
	must(t, st.Append("x", good))
	must(t, st.TurnEnd("x"))
	must(t, st.Close())
	st = openT(t, dir, Options{})
	h := load(t, st, "x")
	if len(h.Updates) != 2 {
		t.Fatalf("%d updates, want 2", len(h.Updates))
	}
	want := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"x","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"caf\uFFFD \uFFFD ok \u00e9"}}}}`
	if got := string(h.Updates[0]); got != strings.Replace(want, `\uFFFD`, "\uFFFD", -1) {
		t.Errorf("replayed\n%s\nwant\n%s", got, want)
	}
	if !json.Valid(h.Updates[0]) || !bytes.Equal(h.Updates[1], good) {
		t.Errorf("repaired line not JSON, or the valid line changed: %q", h.Updates[1])
	}
}

// TestSyncInterval: turns ending one every commit window have their
// session's log fsynced at most once per SyncInterval (not once per
// window), the last turn's end is fsynced within the interval without
// further activity, and Sync fsyncs at once.
//
// In a synctest bubble, as TestTouchInterval.
func TestSyncInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 300 * time.Millisecond
		dir := t.TempDir()
		st, syncs := openCounting(t, dir, Options{CommitInterval: 5 * time.Millisecond, SyncInterval: interval}, "log.sync")
		defer st.Close()
		must(t, st.Create(Meta{ID: "s", Cwd: "/p"}))
		must(t, st.Sync(t.Context()))

		before := syncs.Load()
		took := turnsFor(t, st, "s", 3*interval)
		if n, most := syncs.Load()-before, int64(took/interval)+2; n < 1 || n > most {
			t.Errorf("%d fsyncs of the log in %v of turns, want 1 to %d (one per %v)", n, took, most, interval)
		}
		// The last turn's end is fsynced by itself within the interval.
		must(t, st.TurnStart("s"))
		must(t, st.TurnEnd("s"))
		last := syncs.Load()
		for deadline := time.Now().Add(interval + time.Second); syncs.Load() == last; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the last turn's end was not fsynced within the interval")
			}
		}
		// Sync fsyncs at once.
		must(t, st.TurnStart("s"))
		must(t, st.TurnEnd("s"))
		last = syncs.Load()
		must(t, st.Sync(t.Context()))
		if syncs.Load() == last {
			t.Error("Sync returned without an fsync of the log")
		}
	})
}

// A turn's end whose fsync waited (SyncInterval) in a segment sealed since
// (a long turn rolls the log at the end of its commit, and the new file
// holds nothing unsynced) is fsynced when the fsync is due: the sync waits
// for the sealed segment's fsync, as a sync commit that writes does.
func TestSyncIntervalSealed(t *testing.T) {
	st, sealedSyncs := openCounting(t, t.TempDir(), Options{MaxSessionBytes: 8 << 10, CommitInterval: 5 * time.Millisecond, SyncInterval: time.Hour}, "log.sync.sealed")
	t.Cleanup(func() { st.Close() })
	must(t, st.Create(Meta{ID: "x"}))
	turn(t, st, "x", 0, 1, 100)
	must(t, st.Sync(t.Context())) // synced: the next turn's fsync waits an hour
	commits := st.Stats().Commits
	turn(t, st, "x", 1, 8, 200) // 1.6 KiB: the log is rolled after it is written
	for st.Stats().Commits == commits || st.Stats().Queued > 0 {
		time.Sleep(time.Millisecond)
	}
	if n := sealedSyncs.Load(); n != 0 {
		t.Fatalf("%d waits for sealed segments before the turn's fsync was due", n)
	}
	must(t, st.Sync(t.Context()))
	if n := sealedSyncs.Load(); n == 0 {
		t.Error("Sync returned without waiting for the fsync of the segment that holds the turn's end")
	}
}

// A roll in a commit that fsyncs nothing (a long turn, or a turn end whose
// fsync waits for SyncInterval) changes the directory; the commit that
// fsyncs the log later, by the timer, fsyncs the directory too: the log is
// durable only with its name.
func TestSyncIntervalDirectory(t *testing.T) {
	st, dirSyncs := openCounting(t, t.TempDir(), Options{MaxSessionBytes: 8 << 10, CommitInterval: 5 * time.Millisecond, SyncInterval: 300 * time.Millisecond}, "dir.sync")
	t.Cleanup(func() { st.Close() })
	must(t, st.Create(Meta{ID: "x"}))
	turn(t, st, "x", 0, 1, 100)
	must(t, st.Sync(t.Context())) // synced: the next turn's fsync waits
	before := dirSyncs.Load()
	turn(t, st, "x", 1, 8, 200) // 1.6 KiB: the log is rolled after it is written
	for deadline := time.Now().Add(3 * time.Second); dirSyncs.Load() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the deferred fsync of the turn's end came without an fsync of the directory its roll changed")
		}
	}
}

// turnsFor runs turns of one update in session id, one every 2 ms (a
// commit window each), for d, and returns how long they took.
func turnsFor(t *testing.T, st *Store, id string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		must(t, st.TurnStart(id))
		must(t, st.Append(id, []byte(`{"u":1}`)))
		must(t, st.TurnEnd(id))
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// openCounting opens a store in dir whose failpoint counts each time the
// store reaches op (log.sync, meta.write, ...), and fails nothing.
func openCounting(t *testing.T, dir string, opts Options, op string) (*Store, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	st, err := open(dir, opts, func(at string) error {
		if at == op {
			n.Add(1)
		}
		return nil
	})
	must(t, err)
	return st, &n
}
