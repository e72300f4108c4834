package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/acp-router/acp-router/internal/leaktest"
)

// segmentsOf returns the sealed segments of id's log, oldest first (as the
// links name them).
func segmentsOf(t *testing.T, st *Store, dir, id string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, fileName(id)+".log"))
	must(t, err)
	defer f.Close()
	var ls logState
	st.loadSegments(f, &ls, fileName(id))
	var out []string
	for _, g := range ls.segs {
		out = append(out, st.segPath(fileName(id), g.nonce))
	}
	return out
}

// A log past its cap is a chain of segments: read whole and in order
// across them, dropped oldest first, removed with its session, damaged in
// the middle without showing a turn with a hole, and read by a router that
// does not know links as the newest segment after a trim.
func TestSegments(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	const limit = 8 << 10
	st := openT(t, dir, Options{MaxSessionBytes: limit, verifyStarts: true})
	must(t, st.Create(Meta{ID: "x"}))
	for tn := range 6 { // turns of 3 × 200 B: about 700 B each, under the cap
		turn(t, st, "x", tn, 3, 200)
		must(t, st.Sync(ctx))
	}
	segs := segmentsOf(t, st, dir, "x")
	if len(segs) < 2 {
		t.Fatalf("%d sealed segments after 6 turns of 700 B, segBytes %d", len(segs), st.segBytes())
	}
	h := load(t, st, "x")
	if got, want := pairs(t, h.Updates), seq([]int{0, 1, 2, 3, 4, 5}, 3); !slices.Equal(got, want) || h.Trimmed || h.Partial {
		t.Errorf("across %d segments: %v (trimmed %v, partial %v), want %v", len(segs), got, h.Trimmed, h.Partial, want)
	}

	// Past the cap: the oldest segments go, whole turns stay.
	for tn := 6; tn < 40; tn++ {
		turn(t, st, "x", tn, 3, 200)
		must(t, st.Sync(ctx))
	}
	if _, err := os.Stat(segs[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the oldest segment %s: %v, want removed", segs[0], err)
	}
	h = load(t, st, "x")
	first := parseLine(t, h.Updates[0]).T
	var turns []int
	for tn := first; tn < 40; tn++ {
		turns = append(turns, tn)
	}
	if got := pairs(t, h.Updates); !slices.Equal(got, seq(turns, 3)) || !h.Trimmed || h.Partial || first > 40-limit*3/4/800 {
		t.Errorf("past the cap: %v (trimmed %v, partial %v)", got, h.Trimmed, h.Partial)
	}

	// A router that does not know links reads the newest file alone: the
	// link is a trim record to it.
	chain, err := st.readChain(fileName("x"))
	must(t, err)
	if old := readRecords(chain[len(chain)-1]); !old.trimmed || len(old.updates) > len(h.Updates) {
		t.Errorf("the newest segment alone: %d updates, trimmed %v", len(old.updates), old.trimmed)
	}

	// A damaged segment in the middle of a long turn (committed as it
	// goes, so that it spans segments): the turn ends at the damage (a
	// gap), never goes on after it.
	must(t, st.TurnStart("x"))
	for i := range 20 {
		must(t, st.Append("x", mkLine("x", 40, i, 200)))
		if i%3 == 2 {
			must(t, st.Sync(ctx))
		}
	}
	must(t, st.TurnEnd("x"))
	turn(t, st, "x", 41, 3, 200)
	must(t, st.Sync(ctx))
	segs = segmentsOf(t, st, dir, "x")
	damaged := ""
	for k := 1; k < len(segs) && damaged == ""; k++ {
		data, err := os.ReadFile(segs[k])
		must(t, err)
		if first, ok := firstUpdate(data); ok && strings.Contains(string(first), `"t":40,"i":`) && !strings.Contains(string(first), `"i":0,`) {
			damaged = segs[k-1] // the turn goes on from it into segs[k]
		}
	}
	if damaged == "" {
		t.Fatalf("turn 40 spans no two segments (%d segments)", len(segs))
	}
	original, err := os.ReadFile(damaged)
	must(t, err)
	for _, damage := range []struct {
		name string
		do   func([]byte) []byte
	}{
		// Its last record's checksum fails.
		{"a damaged record", func(b []byte) []byte { b[len(b)-10] ^= 0xff; return b }},
		// It lost its last record whole (an OS crash took the end of
		// a file not yet fsynced): it ends short of where the link
		// says.
		{"a lost last record", func(b []byte) []byte {
			end := logHeaderLen
			for r := logHeaderLen; r < len(b); r += recHeaderLen + int(binary.LittleEndian.Uint32(b[r:])) {
				end = r
			}
			return b[:end]
		}},
	} {
		must(t, os.WriteFile(damaged, damage.do(slices.Clone(original)), 0o600))
		h = load(t, st, "x")
		got := pairs(t, h.Updates)
		if !h.Partial || len(got) == 0 || got[len(got)-1] != "41.2" || slices.Contains(got, "40.19") {
			t.Errorf("with %s: %v (partial %v)", damage.name, got, h.Partial)
		}
		for k, p := range got { // in order; a turn is a prefix of itself
			var tn, i, ptn, pi int
			fmt.Sscanf(p, "%d.%d", &tn, &i)
			if k > 0 {
				fmt.Sscanf(got[k-1], "%d.%d", &ptn, &pi)
			}
			if k > 0 && !(tn == ptn && i == pi+1 || tn > ptn && i == 0) || k == 0 && i != 0 {
				t.Fatalf("with %s: %v: %s at %d", damage.name, got, p, k)
			}
		}
	}

	// Delete removes every segment; so does the sweep for segments left
	// without a session (a crash during a delete).
	must(t, st.Delete(ctx, "x"))
	if left, _ := filepath.Glob(filepath.Join(dir, fileName("x")+"*")); len(left) != 0 {
		t.Errorf("after Delete: %v", left)
	}
	orphan := filepath.Join(dir, fileName("gone")+".log-0123456789abcdef")
	must(t, os.WriteFile(orphan, []byte("x"), 0o600))
	old := time.Now().Add(-2 * staleAge)
	must(t, os.Chtimes(orphan, old, old))
	sweepNow(t, st)
	if _, err := os.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan segment: %v, want removed", err)
	}

	// Metadata only: the segments go with the log.
	must(t, st.Create(Meta{ID: "y"}))
	for tn := range 12 {
		turn(t, st, "y", tn, 3, 200)
	}
	must(t, st.Close())
	if segs := segmentsOf(t, st, dir, "y"); len(segs) == 0 {
		t.Fatal("no segments for y")
	}
	st = openT(t, dir, Options{MetadataOnly: true})
	must(t, st.Sync(ctx))
	if left, _ := filepath.Glob(filepath.Join(dir, "*.log*")); len(left) != 0 {
		t.Errorf("metadata only: %v left", strings.Join(left, ", "))
	}
}

// firstUpdate is the payload of the first update record in a segment file.
func firstUpdate(file []byte) ([]byte, bool) {
	var out []byte
	parseRecords(file[logHeaderLen:], func(typ byte, payload []byte) {
		if typ == recUpdate && out == nil {
			out = payload
		}
	})
	return out, out != nil
}

// A new history under the id of a long one (Create again) leaves none of
// the old one's segments.
func TestSegmentsReplaced(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st := openT(t, dir, Options{MaxSessionBytes: 8 << 10, verifyStarts: true})
	must(t, st.Create(Meta{ID: "x"}))
	for tn := range 12 {
		turn(t, st, "x", tn, 3, 200)
	}
	must(t, st.Sync(ctx))
	if len(segmentsOf(t, st, dir, "x")) == 0 {
		t.Fatal("no segments")
	}
	must(t, st.Close())
	st = openT(t, dir, Options{MaxSessionBytes: 8 << 10, verifyStarts: true})
	must(t, st.Create(Meta{ID: "x", Title: "again"}))
	turn(t, st, "x", 0, 1, 200)
	must(t, st.Sync(ctx))
	if left, _ := filepath.Glob(filepath.Join(dir, fileName("x")+".log-*")); len(left) != 0 {
		t.Errorf("segments of the old history: %v", left)
	}
	if got := pairs(t, load(t, st, "x").Updates); !slices.Equal(got, []string{"0.0"}) {
		t.Errorf("the new history: %v", got)
	}
}

// Sealing that fails (here at each of its steps in turn) loses nothing:
// the file appended to grows on, and a later seal succeeds.
func TestSealFailure(t *testing.T) {
	for _, op := range []string{"roll.seal", "roll.link", "roll.remove", "roll.write", "roll.sync", "roll.rename"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			ctx := t.Context()
			var failing atomic.Bool
			failed := 0
			st, err := open(dir, Options{MaxSessionBytes: 8 << 10, CommitInterval: time.Hour, verifyStarts: true}, func(o string) error {
				if o == op && failing.Load() {
					failed++
					return errors.New("injected")
				}
				return nil
			})
			must(t, err)
			t.Cleanup(func() { st.Close() })
			must(t, st.Create(Meta{ID: "x"}))
			check := func(upTo int) {
				t.Helper()
				h := load(t, st, "x")
				first := parseLine(t, h.Updates[0]).T
				var turns []int
				for tn := first; tn < upTo; tn++ {
					turns = append(turns, tn)
				}
				if got := pairs(t, h.Updates); !slices.Equal(got, seq(turns, 3)) || h.Partial {
					t.Errorf("after %d failed seals at %s: %v (partial %v)", failed, op, got, h.Partial)
				}
			}
			for tn := range 24 {
				failing.Store(tn >= 4 && tn < 12)
				turn(t, st, "x", tn, 3, 200)
				must(t, st.Sync(ctx))
				if tn == 12 {
					check(13)
				}
			}
			if failed == 0 {
				t.Fatalf("no seal failed at %s", op)
			}
			check(24)
			if n := len(segmentsOf(t, st, dir, "x")); n == 0 {
				t.Error("no segment sealed once sealing works again")
			}
		})
	}
}

// A segment sealed at a turn's start after the turn before was fsynced
// needs no fsync of its own; one sealed in the middle of a long turn gets
// one, which the turn's end waits for.
func TestSealFsync(t *testing.T) {
	var sealedSyncs atomic.Int64
	st, err := open(t.TempDir(), Options{MaxSessionBytes: 8 << 10, CommitInterval: time.Hour, CommitBytes: 500}, func(op string) error {
		if op == "log.sync.sealed" {
			sealedSyncs.Add(1)
		}
		return nil
	})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	must(t, st.Create(Meta{ID: "x"}))
	for tn := range 12 { // turns of 700 B, each synced: sealed at turn starts
		turn(t, st, "x", tn, 3, 200)
		must(t, st.Sync(ctx))
	}
	if n := sealedSyncs.Load(); n != 0 {
		t.Errorf("%d fsyncs of segments sealed clean at a turn's start, want none", n)
	}
	must(t, st.TurnStart("x"))
	for i := range 20 { // 4 KiB in one turn, committed as it goes: sealed mid-turn
		must(t, st.Append("x", mkLine("x", 12, i, 200)))
		for i%3 == 2 && st.Stats().Queued > 0 { // 600 B: committed (CommitBytes), not fsynced
			time.Sleep(time.Millisecond)
		}
	}
	must(t, st.TurnEnd("x"))
	must(t, st.Sync(ctx))
	if n := sealedSyncs.Load(); n == 0 {
		t.Error("no fsync of the segments sealed in the middle of a turn")
	}
}

// TestCloseJoinsSealFsync: a segment sealed in the middle of a turn is
// fsynced on a goroutine of its own, which the turn's end waits for; when
// that never comes (the session deleted meanwhile) Close waits for it, so
// that nothing of the store runs once Close returned. In a synctest
// bubble: the slow disk's pause costs no wall time.
func TestCloseJoinsSealFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sealed atomic.Int64
		st, err := open(t.TempDir(), Options{MaxSessionBytes: 8 << 10, CommitInterval: time.Hour, CommitBytes: 500,
			sealFsync: func() {
				sealed.Add(1)
				time.Sleep(200 * time.Millisecond) // a slow disk
			}}, nil)
		must(t, err)
		must(t, st.Create(Meta{ID: "x"}))
		must(t, st.TurnStart("x"))
		for i := 0; sealed.Load() == 0; i++ {
			if i == 1000 {
				t.Fatal("no segment sealed in the middle of a turn")
			}
			must(t, st.Append("x", mkLine("x", 0, i, 200)))
			for i%3 == 2 && st.Stats().Queued > 0 { // 600 B: committed (CommitBytes), not fsynced
				time.Sleep(time.Millisecond)
			}
		}
		must(t, st.Delete(t.Context(), "x"))
		must(t, st.Close())
		if n := leaktest.Count("(*Store).fsyncSealed"); n != 0 {
			t.Errorf("%d fsyncs of sealed segments still run after Close returned", n)
		}
	})
}
