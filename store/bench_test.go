package store

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The numbers in README.md come from:
//
//	go test -run '^$' -bench . -benchtime=1s -count=10 ./store/
//
// on the disk state_dir is on (ext4 here). ACP_ROUTER_STORE_BENCH_DIR
// points the benchmarks to another directory (another file system).

func benchDir(b *testing.B) string {
	if d := os.Getenv("ACP_ROUTER_STORE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "bench-")
		must(b, err)
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// BenchmarkAppend is the relay's cost per session/update: Append of one line
// while the writer commits concurrently, as in the router. Appends here come
// far faster than any agent sends and than a disk writes, so every CommitBytes
// (1 MiB) the timer stops while the turn is committed and the session
// replaced: the queue stays at the size the writer takes at once (a full
// queue would time the drop path) and the disk does not fill.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{200, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			st := openT(b, benchDir(b), Options{})
			ctx := b.Context()
			n := 0
			next := func() string {
				n++
				id := fmt.Sprint("s", n)
				must(b, st.Create(Meta{ID: id}))
				must(b, st.TurnStart(id))
				return id
			}
			id := next()
			line := mkLine("x", 0, 0, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			per := DefaultCommitBytes / (size + recHeaderLen + 1)
			b.ResetTimer()
			for i := range b.N {
				if err := st.Append(id, line); err != nil {
					b.Fatal(err)
				}
				if i%per == per-1 {
					b.StopTimer()
					must(b, st.TurnEnd(id))
					must(b, st.Delete(ctx, id))
					id = next()
					b.StartTimer()
				}
			}
			b.StopTimer()
			if s := st.Stats(); s.Dropped != 0 {
				b.Fatalf("%d dropped", s.Dropped)
			}
		})
	}
}

// BenchmarkTurnCommit is the cost of one turn of 10 updates of 200 B, from
// TurnStart to the end of the commit TurnEnd starts: the log written and
// fsynced, the metadata (UpdatedAt moved) written, fsynced and renamed.
func BenchmarkTurnCommit(b *testing.B) {
	dir := benchDir(b)
	st := openT(b, dir, Options{})
	ctx := b.Context()
	must(b, st.Create(Meta{ID: "x", Cwd: "/home/u/project", Title: "a typical title"}))
	must(b, st.Sync(ctx))
	line := mkLine("x", 0, 0, 200)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		must(b, st.TurnStart("x"))
		for range 10 {
			must(b, st.Append("x", line))
		}
		must(b, st.TurnEnd("x"))
		// Wait for the commit TurnEnd asked for, without what Sync adds
		// (an fsync of the directory).
		st.mu.Lock()
		w := st.addWaiterLocked()
		st.mu.Unlock()
		must(b, w.wait(ctx))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/turn")
}

// BenchmarkDiskPer1000Updates writes 1,000 updates of 200 B in 10 turns and
// reports the size of the session's files.
func BenchmarkDiskPer1000Updates(b *testing.B) {
	dir := benchDir(b)
	st := openT(b, dir, Options{})
	ctx := b.Context()
	line := mkLine("x", 0, 0, 200)
	var size int64
	b.ReportAllocs()
	for i := range b.N {
		id := fmt.Sprint("s", i)
		must(b, st.Create(Meta{ID: id, Cwd: "/home/u/project", Title: "a typical title"}))
		for range 10 {
			must(b, st.TurnStart(id))
			for range 100 {
				must(b, st.Append(id, line))
			}
			must(b, st.TurnEnd(id))
		}
		must(b, st.Sync(ctx))
		size = 0
		for _, ext := range []string{".log", ".json"} {
			fi, err := os.Stat(filepath.Join(dir, fileName(id)+ext))
			must(b, err)
			size += fi.Size()
		}
		b.StopTimer()
		must(b, st.Delete(ctx, id))
		b.StartTimer()
	}
	b.ReportMetric(float64(size), "disk-B/1000updates")
}

// The log's size is what the format says: 9 bytes per update and per turn
// marker on top of the lines, 16 for the header.
func TestDiskSize(t *testing.T) {
	dir := t.TempDir()
	st := openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "x"}))
	for tn := range 10 {
		turn(t, st, "x", tn, 100, 200)
	}
	must(t, st.Sync(t.Context()))
	fi, err := os.Stat(filepath.Join(dir, fileName("x")+".log"))
	must(t, err)
	if want := int64(logHeaderLen + 1000*(200+recHeaderLen+1) + 10*2*(recHeaderLen+1)); fi.Size() != want {
		t.Errorf("log of 1,000 updates of 200 B: %d bytes, want %d", fi.Size(), want)
	}
}

// BenchmarkList is one page of 50 out of 1,000 sessions stored by another
// process: List reads every session's metadata file.
func BenchmarkList(b *testing.B) {
	dir := benchDir(b)
	w := openT(b, dir, Options{})
	for i := range 1000 {
		must(b, w.Create(Meta{ID: fmt.Sprint("s", i), Cwd: "/home/u/project", Title: "a typical title"}))
	}
	must(b, w.Sync(b.Context()))
	st := openT(b, dir, Options{})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p, err := st.List(b.Context(), ListOptions{Limit: 50})
		if err != nil || len(p.Sessions) != 50 {
			b.Fatal(len(p.Sessions), err)
		}
	}
}

// BenchmarkTrimmedSession is one session past its cap: turns of 16 updates
// of 4 KiB into a 16 MiB log, so that every 4 MiB appended trims it (the
// flood benchmark's case, scaled down). Reports the process's CPU time per
// MiB appended, the writer goroutine's included.
func BenchmarkTrimmedSession(b *testing.B) {
	st := openT(b, benchDir(b), Options{MaxSessionBytes: 16 << 20})
	ctx := b.Context()
	must(b, st.Create(Meta{ID: "x"}))
	line := mkLine("x", 0, 0, 4096)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	before := cpu()
	for i := range b.N {
		must(b, st.TurnStart("x"))
		for range 16 {
			must(b, st.Append("x", line))
		}
		must(b, st.TurnEnd("x"))
		if i%64 == 63 {
			must(b, st.Sync(ctx))
		}
	}
	must(b, st.Sync(ctx))
	mib := float64(b.N) * 16 * float64(len(line)) / (1 << 20)
	b.ReportMetric(float64((cpu()-before).Microseconds())/mib, "cpu-µs/MiB")
}
