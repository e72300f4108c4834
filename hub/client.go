package hub

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errClosed is the reason of a client that went by itself.
var errClosed = errors.New("hub: client closed")

// client is one connected client: its identity, its sessions (under
// Hub.mu) and its outgoing queue (under qmu), written by one goroutine.
type client struct {
	h    *Hub
	conn Conn
	id   Identity

	// Under Hub.mu.
	sessions map[string]*member // by session id
	asks     map[string]*ask    // the Router's requests sent to it, by the id it was given
	calls    map[string]string  // its requests at the Router: its id → the hub's
	gone     bool
	watching bool   // MethodWatch sessions: it is pushed MethodSessionsChanged
	shown    []byte // the list it was last sent (watching)

	qmu    sync.Mutex
	q      []queued
	qbytes int
	// interval: a chunk at the head of the queue waits until this long
	// after the previous one was written, so that later chunks join it
	// (MethodWatch's chunkIntervalMs; 0: written at once).
	interval time.Duration
	wake     chan struct{} // capacity 1: the writer has work, or the client failed
	room     chan struct{} // capacity 1: the writer took something (enqueueWait)
	drained  chan struct{} // capacity 1: the same, for the Router's reader (Hub.waitEditor)
	reason   error         // set once: why the client ends
	failOnce sync.Once
}

func newClient(h *Hub, c Conn, id Identity) *client {
	return &client{h: h, conn: c, id: id, sessions: map[string]*member{}, asks: map[string]*ask{}, calls: map[string]string{},
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// enqueue queues line for the client without waiting. A client whose
// queue is over its bounds is dropped (ErrSlowClient): it never delays the
// Router nor the other clients. The stdio editor is never dropped (the
// router lives for it, and a message up to MaxLine must reach it whole):
// its queue may pass the bounds, and the Router's reader waits for it to
// drain (Hub.waitEditor). False when the line was not queued.
func (c *client) enqueue(line []byte) bool { return c.enqueueChunk(line, nil) }

// enqueueChunk is enqueue of a line whose streamed text is ch (nil: not
// streamed text): a remote client's queue coalesces it with the chunk at
// its tail when they are the same update (coalesce.go).
func (c *client) enqueueChunk(line []byte, ch *chunk) bool {
	c.qmu.Lock()
	if c.reason != nil {
		c.qmu.Unlock()
		return false
	}
	if ch != nil && !c.id.Editor && len(c.q) > 0 && (len(c.q) >= c.h.opts.CoalesceAfter || c.interval > 0) && c.q[len(c.q)-1].join(ch) {
		c.qbytes += len(ch.body)
		c.qmu.Unlock()
		return true
	}
	return c.pushLocked(queued{line: line, ch: ch, size: len(line)})
}

// pushLocked queues q (called with qmu held; unlocks it), or drops the
// client when its queue is over its bounds (enqueue).
func (c *client) pushLocked(q queued) bool {
	if !c.id.Editor && (len(c.q) >= c.h.opts.QueueMessages || c.qbytes+q.size > c.h.opts.QueueBytes && len(c.q) > 0) {
		c.qmu.Unlock()
		c.h.log.Warn("client dropped: its queue overflowed", "client", c.id.Name, "messages", len(c.q), "bytes", c.qbytes)
		go c.h.drop(c, ErrSlowClient)
		return false
	}
	c.q = append(c.q, q)
	c.qbytes += q.size
	c.qmu.Unlock()
	signal(c.wake)
	return true
}

// enqueueHeld queues what was held for the client while its replay was
// sent (member.buf), as it was held (coalesced or not), in order.
func (c *client) enqueueHeld(held []queued) {
	for _, q := range held {
		c.qmu.Lock()
		if c.reason != nil {
			c.qmu.Unlock()
			return
		}
		if !c.pushLocked(q) {
			return
		}
	}
}

// enqueueWait queues line, waiting for room first (a replay: what the
// client asked for, as fast as it takes it). False when the client ended.
func (c *client) enqueueWait(ctx context.Context, line []byte) bool {
	for {
		c.qmu.Lock()
		if c.reason != nil {
			c.qmu.Unlock()
			return false
		}
		if len(c.q) < c.h.opts.QueueMessages/2 && (len(c.q) == 0 || c.qbytes+len(line) <= c.h.opts.QueueBytes/2) {
			c.q = append(c.q, queued{line: line, size: len(line)})
			c.qbytes += len(line)
			c.qmu.Unlock()
			signal(c.wake)
			return true
		}
		c.qmu.Unlock()
		select {
		case <-c.room:
		case <-ctx.Done():
			return false
		}
	}
}

// writeLoop writes the queue to the client until ctx ends or the client
// fails.
func (c *client) writeLoop(ctx context.Context) {
	var nextChunk time.Time // when a chunk may be written (interval)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.qmu.Lock()
		if c.reason != nil {
			c.q, c.qbytes = nil, 0
			c.qmu.Unlock()
			return
		}
		if len(c.q) == 0 {
			c.qmu.Unlock()
			select {
			case <-c.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if c.q[0].ch != nil && c.interval > 0 {
			// Held at the head, the chunk takes in those that follow
			// it (enqueueChunk) until its time comes.
			if wait := time.Until(nextChunk); wait > 0 {
				c.qmu.Unlock()
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-c.wake: // failed, or more came: look again
				case <-ctx.Done():
					return
				}
				continue
			}
			nextChunk = time.Now().Add(c.interval)
		}
		head := c.q[0]
		c.q[0] = queued{}
		c.q = c.q[1:]
		c.qbytes -= head.size
		c.qmu.Unlock()
		line := head.bytes()
		signal(c.room)
		signal(c.drained)
		if err := c.conn.Write(ctx, line); err != nil {
			c.fail(err)
			return
		}
	}
}

// fail ends the client for reason (once): its connection is closed, which
// ends Serve's read.
func (c *client) fail(reason error) {
	if reason == nil {
		reason = errClosed
	}
	c.failOnce.Do(func() {
		c.qmu.Lock()
		c.reason = reason
		c.qmu.Unlock()
		signal(c.wake)
		signal(c.room)
		signal(c.drained)
		if errors.Is(reason, errClosed) {
			c.conn.Close(nil)
		} else {
			c.conn.Close(reason)
		}
	})
}

// failure is why the client ended (nil while it lasts).
func (c *client) failure() error {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.reason
}

// drop removes a client from every session and closes it with reason.
func (h *Hub) drop(c *client, reason error) {
	c.fail(reason)
	h.remove(c)
}

// over says whether the client's queue is past its bounds (only the
// editor's can be: enqueue).
func (c *client) over() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.reason == nil && (len(c.q) > c.h.opts.QueueMessages || c.qbytes > c.h.opts.QueueBytes)
}
