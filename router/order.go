package router

import "sync"

// Order within a session (DESIGN §2 message paths, issue 12): what an agent
// sends for one session reaches the editor in the order it was sent. Most
// of it is relayed inline in the agent's read path. A request the policy
// decides may wait on the filesystem, so it is decided on a worker instead;
// while that worker has work, everything else the session's agents send is
// queued behind it and carried out by the same worker, in order. Other
// sessions (and other agents' read loops) go on meanwhile.

// The work queued behind one session's decision is bounded by count and
// by bytes (bounds.go): past either, the agent's read path waits for room
// (backpressure on that agent only, as for the editor's lanes: what is
// queued is the session's traffic in order, which must not be lost), for
// as long as the decision may take: guard.Options.DecideTimeout, and the
// audit log's lock timeout for its record. Counted by count alone, a flood
// of 1 MiB updates behind one decision held 454 MiB (issue 27).
const (
	// maxSequenced: items (each a closure) queued behind a decision.
	maxSequenced = 4096
	// maxSequencedBytes: the bytes of the messages those items carry, the
	// bound of a session's lane of the editor's queue, where they go next.
	// One message larger than it is still taken when nothing is queued.
	maxSequencedBytes = editorLaneBytes
)

// sequencer runs one session's agent-side work in arrival order.
type sequencer struct {
	mu      sync.Mutex
	room    *sync.Cond // signalled as the queue drains
	queue   []sequenced
	bytes   int  // of the messages queued (sequenced.n)
	running bool // a worker owns the queue
}

// sequenced is one item of a sequencer's queue: f carries a message of n
// bytes.
type sequenced struct {
	f func()
	n int
}

// do runs f, which carries a message of n bytes, now, in the caller, when
// no earlier work of the session is queued; else queues it behind that
// work, waiting for room.
func (q *sequencer) do(r *Router, n int, f func()) {
	q.mu.Lock()
	q.waitRoomLocked(r, n)
	if !q.running {
		// Nothing queued (the worker may have drained the queue while
		// this waited for room): nothing to keep f behind.
		q.mu.Unlock()
		f()
		return
	}
	q.enqueueLocked(n, func() {
		defer r.survive("sequencer", nil)
		f()
	})
	q.mu.Unlock()
}

// async queues f, which may wait (a decision) and carries a message of n
// bytes, to run on the session's worker; later work of the session waits
// for it.
func (q *sequencer) async(r *Router, n int, f func()) {
	q.mu.Lock()
	q.waitRoomLocked(r, n)
	q.enqueueLocked(n, func() {
		defer r.survive("sequencer", nil)
		f()
	})
	if !q.running {
		q.running = true
		r.spawn(q.work)
	}
	q.mu.Unlock()
}

// waitRoomLocked waits until the queue has room for a message of n bytes,
// or the worker has stopped (it drained the queue). A wait is counted
// (r.seqWaits) when it starts, so that the log says so while the agent is
// held.
func (q *sequencer) waitRoomLocked(r *Router, n int) {
	full := func() bool {
		return q.running && len(q.queue) > 0 && (len(q.queue) >= maxSequenced || q.bytes+n > maxSequencedBytes)
	}
	if !full() {
		return
	}
	if q.room == nil {
		q.room = sync.NewCond(&q.mu)
	}
	q.mu.Unlock() // the count logs
	r.seqWaits.add(1)
	q.mu.Lock()
	for full() {
		q.room.Wait()
	}
}

func (q *sequencer) enqueueLocked(n int, f func()) {
	q.queue = append(q.queue, sequenced{f, n})
	q.bytes += n
}

// work runs the queue until it is empty.
func (q *sequencer) work() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		it := q.queue[0]
		q.queue[0] = sequenced{}
		q.queue = q.queue[1:]
		q.bytes -= it.n
		if q.room != nil {
			q.room.Broadcast()
		}
		q.mu.Unlock()
		it.f()
		q.mu.Lock()
	}
	q.queue, q.bytes, q.running = nil, 0, false
	if q.room != nil {
		q.room.Broadcast()
	}
	q.mu.Unlock()
}

// busy: work of the session is queued (the read path must queue too).
func (q *sequencer) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}
