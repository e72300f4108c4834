package acp

import (
	"sync"
	"sync/atomic"
)

// drain is what a Stream's reader knows of how far it has read the peer,
// for Drained: on a non-blocking descriptor (an agent's pipe), a read that
// finds nothing at a line's boundary means every line the peer wrote so
// far has been handled.
type drain struct {
	// boundary: nothing of a line has been read past the reader's last
	// whole line (read loop only; set by ReadObject, cleared by a read
	// that returns bytes).
	boundary bool
	// state is the reader's wake count times two, plus one while it is
	// parked at a boundary, the descriptor found empty. Only the reader
	// changes it: a waiter that sees the same odd value before and after
	// finding the descriptor empty knows the reader was parked throughout.
	state atomic.Uint64
	// readable reports the bytes the descriptor holds unread (FIONREAD).
	readable func() (int, bool)

	// ended: reading has ended; nothing more will be read.
	ended atomic.Bool
	// empties counts the reads that found the descriptor empty, each one
	// decided on (at a boundary or not) once counted: a test's positive
	// sign that the reader has handled what it was given.
	empties atomic.Uint64

	mu      sync.Mutex
	waiters []chan struct{}
	nwait   atomic.Int32
}

// woke is the reader's, before each read of the descriptor.
func (d *drain) woke() {
	if st := d.state.Load(); st&1 != 0 {
		d.state.Add(1) // parked no more, and a new wake count
	}
}

// empty is the reader's, when a read found the descriptor empty: parked,
// at a boundary, every waiter is answered.
func (d *drain) empty() {
	defer d.empties.Add(1)
	if !d.boundary {
		return // a line is half read: its rest is still to come
	}
	if d.state.Load()&1 == 0 {
		d.state.Add(1)
	}
	if d.nwait.Load() > 0 {
		d.fire()
	}
}

// end is the reader's, when reading ends.
func (d *drain) end() {
	d.ended.Store(true)
	d.fire()
}

// fire answers every waiter.
func (d *drain) fire() {
	d.mu.Lock()
	for _, ch := range d.waiters {
		close(ch)
	}
	d.waiters = nil
	d.nwait.Store(0)
	d.mu.Unlock()
}

// Drained returns a channel closed once the stream's reader has handled
// every line the peer wrote before the call (the reader found nothing more
// to read at a line's boundary), or once reading ended. It is nil when the
// stream cannot tell: a reader that is not a non-blocking descriptor (the
// router's stdin as editors start it, a test's io.Pipe), or a platform
// other than Linux. A message the reader hands to the jsonrpc2 Conn (not
// to the Intercept) may still be in the Conn's hands when it is closed.
func (s *Stream) Drained() <-chan struct{} {
	d := s.drain
	if d == nil {
		return nil
	}
	ch := make(chan struct{})
	d.mu.Lock()
	d.waiters = append(d.waiters, ch)
	d.nwait.Add(1)
	d.mu.Unlock()
	if d.ended.Load() {
		d.fire()
		return ch
	}
	if st := d.state.Load(); st&1 != 0 {
		if n, ok := d.readable(); ok && n == 0 && d.state.Load() == st {
			d.fire()
		}
	}
	return ch
}
