package acp

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Shared is a line's buffer (2 KiB to 4 MiB), taken from a pool by the stream's reader
// and shared by reference count among those that keep the line after its
// Intercept returned (the editor's write queue, the session store), so
// that a flood of large updates reuses a few buffers instead of leaving one
// line of garbage each for the garbage collector to catch up with (issue
// 16). A line nobody claims (Message.Claim) is never returned to the pool:
// whatever keeps a piece of it may, as before, and the garbage collector
// frees it.
type Shared struct {
	b    []byte
	refs atomic.Int32
}

// Hold adds a reference: the holder calls Release once done with the line.
func (sh *Shared) Hold() { sh.refs.Add(1) }

// Release drops a reference; the last one returns the buffer to the pool.
// Nothing may read the line after its holder released it.
func (sh *Shared) Release() {
	switch n := sh.refs.Add(-1); {
	case n == 0:
		putLine(sh)
	case n < 0:
		panic("acp: Shared released more often than held")
	}
}

// Claim takes over the reader's reference to a pooled line (nil: the line
// is not pooled, or was claimed already). The claimer promises that, once
// it calls Release, nothing reads m.Raw or a slice of it any more except
// through a reference it gave a holder (Hold). Called at most once per
// message, by whoever handles it last (maybe after Intercept returned).
func (m *Message) Claim() *Shared {
	sh := m.shared
	m.shared = nil
	return sh
}

// Line buffers come in size classes eight to a doubling, from minPooled
// up to maxPooled: a buffer is at most an eighth larger than the line it
// was taken for. Below 2 KiB a pool's Get, Put and reference counts cost
// more than the allocation they save (200 B updates: 0.16-0.17x the byte
// relay allocated, 0.13-0.14x pooled from 128 B); from 2 KiB they cost
// less than the garbage they leave (4 KiB updates: 10.4-11.1 µs of the
// router's CPU each, 8.3-8.6 µs pooled). A larger line gets a buffer of its own, left to the
// garbage collector as before: the pool keeps what it is given until the
// second collection after, and must not keep a 20 MiB buffer alive for
// minutes after one large line.
const (
	minPooled    = 2 << 10
	maxPooled    = 4 << 20
	classesPerX2 = 8
)

var linePools [64 * classesPerX2]sync.Pool

// classUp is the smallest class whose size is at least n, and that size.
func classUp(n int) (int, int) {
	e := bits.Len(uint(n - 1)) // 1<<e >= n
	base := 1 << (e - 1)
	step := max(base/classesPerX2, 1)
	k := (n - base + step - 1) / step // 1..classesPerX2
	return e*classesPerX2 + k, base + k*step
}

// classDown is the largest class whose size is at most c, or -1.
func classDown(c int) int {
	if c < minPooled {
		return -1
	}
	e := bits.Len(uint(c)) // 1<<(e-1) <= c < 1<<e
	base := 1 << (e - 1)
	step := max(base/classesPerX2, 1)
	k := (c - base) / step // 0..classesPerX2-1
	if k == 0 {
		return (e-1)*classesPerX2 + classesPerX2 // base is the last class of the doubling below
	}
	return e*classesPerX2 + k
}

// getLine returns a pooled buffer with room for n bytes, held once (by the
// reader), or nil when n is out of the pooled range.
func getLine(n int) *Shared {
	if n < minPooled || n > maxPooled {
		return nil
	}
	i, size := classUp(n)
	sh, _ := linePools[i].Get().(*Shared)
	if sh == nil {
		sh = &Shared{b: make([]byte, 0, size)}
	}
	sh.b = sh.b[:0]
	sh.refs.Store(1)
	return sh
}

func putLine(sh *Shared) {
	if i := classDown(cap(sh.b)); i >= 0 && cap(sh.b) <= maxPooled+maxPooled/classesPerX2 {
		linePools[i].Put(sh)
	}
}
