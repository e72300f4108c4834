package router

import "sync"

// Order within a session (DESIGN §2 message paths, issue 12): what an agent
// sends for one session reaches the editor in the order it was sent. Most
// of it is relayed inline in the agent's read path. A request the policy
// decides may wait on the filesystem, so it is decided on a worker instead;
// while that worker has work, everything else the session's agents send is
// queued behind it and carried out by the same worker, in order. Other
// sessions (and other agents' read loops) go on meanwhile.

// maxSequenced bounds the work queued behind one session's decision; past
// it the agent's read path waits (backpressure on that agent only, for as
// long as the decision may take: guard.Options.DecideTimeout).
const maxSequenced = 4096

// sequencer runs one session's agent-side work in arrival order.
type sequencer struct {
	mu      sync.Mutex
	room    *sync.Cond // signalled as the queue drains
	queue   []func()
	running bool // a worker owns the queue
}

// do runs f now, in the caller, when no earlier work of the session is
// queued; else queues it behind that work.
func (q *sequencer) do(r *Router, f func()) {
	q.mu.Lock()
	if !q.running {
		q.mu.Unlock()
		f()
		return
	}
	q.enqueueLocked(func() {
		defer r.survive("sequencer", nil)
		f()
	})
	q.mu.Unlock()
}

// async queues f, which may wait (a decision), to run on the session's
// worker; later work of the session waits for it.
func (q *sequencer) async(r *Router, f func()) {
	q.mu.Lock()
	q.enqueueLocked(func() {
		defer r.survive("sequencer", nil)
		f()
	})
	if !q.running {
		q.running = true
		r.spawn(q.work)
	}
	q.mu.Unlock()
}

func (q *sequencer) enqueueLocked(f func()) {
	if q.room == nil {
		q.room = sync.NewCond(&q.mu)
	}
	for len(q.queue) >= maxSequenced && q.running {
		q.room.Wait()
	}
	q.queue = append(q.queue, f)
}

// work runs the queue until it is empty.
func (q *sequencer) work() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		f := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		if q.room != nil {
			q.room.Broadcast()
		}
		q.mu.Unlock()
		f()
		q.mu.Lock()
	}
	q.queue, q.running = nil, false
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
