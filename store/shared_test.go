package store

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// AppendShared keeps a large line by reference: the queue holds the line
// itself (no second copy), the log has it byte for byte, and what the queue
// held is freed once written.
func TestAppendShared(t *testing.T) {
	st := openT(t, t.TempDir(), Options{CommitInterval: time.Hour, CommitBytes: 64 << 20})
	must(t, st.Create(Meta{ID: "x"}))
	must(t, st.TurnStart("x"))
	big := mkLine("x", 0, 0, 1<<20)
	small := mkLine("x", 0, 1, 200)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 8
	ref := &countRef{}
	for range n {
		must(t, st.AppendShared("x", big, ref))
	}
	runtime.ReadMemStats(&after)
	if ref.held != n || ref.released != 0 {
		t.Errorf("before the commit: held %d times, released %d, want %d and 0", ref.held, ref.released, n)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("%d bytes allocated by %d shared Appends of 1 MiB, want no copy", got, n)
	}
	must(t, st.AppendShared("x", small, ref)) // copied: below MinSharedBytes
	must(t, st.TurnEnd("x"))
	held := st.held.Load()
	if held < n*int64(len(big)) || held > n*int64(len(big))+256<<10 {
		t.Errorf("the queue holds %d bytes for %d lines of %d", held, n, len(big))
	}
	must(t, st.Sync(t.Context()))
	held = st.held.Load()
	if s := st.Stats(); s.Queued != 0 || held != 0 {
		t.Errorf("after the commit: %d queued, %d held", s.Queued, held)
	}
	if ref.held != n || ref.released != n {
		t.Errorf("after the commit: held %d times, released %d, want %d each", ref.held, ref.released, n)
	}
	h := load(t, st, "x")
	if len(h.Updates) != n+1 || !bytes.Equal(h.Updates[0], big) || !bytes.Equal(h.Updates[n-1], big) || !bytes.Equal(h.Updates[n], small) {
		t.Fatalf("%d updates loaded, want %d with the lines as appended", len(h.Updates), n+1)
	}
}

// WaitRoom waits while the queue holds RoomBytes or more, until the writer
// has written them; it stops waiting for a commit that stalls.
func TestWaitRoom(t *testing.T) {
	var mu sync.Mutex
	stall := false
	release := make(chan struct{})
	fail := func(op string) error {
		mu.Lock()
		s := stall
		mu.Unlock()
		if s && op == "log.write" {
			<-release
		}
		return nil
	}
	st, err := open(t.TempDir(), Options{CommitInterval: time.Hour, RoomBytes: 2 << 20, StallTimeout: 300 * time.Millisecond}, fail)
	must(t, err)
	t.Cleanup(func() { st.Close() })
	must(t, st.Create(Meta{ID: "x"}))
	must(t, st.TurnStart("x"))
	big := mkLine("x", 0, 0, 1<<20)
	for range 8 {
		must(t, st.AppendShared("x", big, nil))
		st.WaitRoom()
		held := st.held.Load()
		if held >= 2<<20 {
			t.Fatalf("WaitRoom returned with %d bytes held (room 2 MiB)", held)
		}
	}
	mu.Lock()
	stall = true
	mu.Unlock()
	must(t, st.AppendShared("x", big, nil)) // commits at once (CommitBytes), then stalls
	must(t, st.AppendShared("x", big, nil))
	start := time.Now()
	st.WaitRoom()
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("WaitRoom on a stalled commit returned after %v, want about the stall timeout (300ms)", d)
	}
	close(release)
	must(t, st.TurnEnd("x"))
	must(t, st.Sync(t.Context()))
	if h := load(t, st, "x"); len(h.Updates) != 10 {
		t.Errorf("%d updates stored, want 10", len(h.Updates))
	}
}

// countRef counts Hold and Release (under the store's mutex).
type countRef struct{ held, released int }

func (c *countRef) Hold()    { c.held++ }
func (c *countRef) Release() { c.released++ }
