package router

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/store"
)

// Idle sessions leave memory (DESIGN §7: every table has a bound). A
// session with no activity for Options.EvictIdle, or the least recently
// used idle ones when more than Options.MaxSessions are in memory, is
// evicted: the router forgets it, the session store keeps it, and its
// downstream sessions stay at their agents. Its next use brings it back
// transparently: a prompt, a config option or mode choice, or a method the
// router does not know naming it revives it from the store the way
// session/load does (each agent re-attached through its own session/load or
// session/resume when it has them, else a new downstream session whose
// first prompt carries the handoff brief), and the request goes on.
//
// Transparent rather than an error asking the editor to reopen the thread:
// Zed keeps threads open for days and never reloads one by itself, so an
// error would fail the first prompt of every thread left alone for half an
// hour; the store has all it takes to bring the session back. The price is
// paid only by agents that can neither load nor resume: they continue from
// the brief, not from their own memory of the conversation, as after a
// restart of the router.
//
// Without a store nothing is evicted: there would be no way back, and a
// session is a thread the user opened (the store failing to open is logged
// as an error at start).
//
// Never evicted: a session with a running or draining turn, queued prompts,
// a downstream session being opened, work queued behind a policy decision,
// agent requests waiting for the editor, editor requests waiting for an
// agent, or terminals open.

// touch records activity in s: it is not idle.
func (s *Session) touch() {
	s.mu.Lock()
	s.lastUse = time.Now()
	s.mu.Unlock()
}

// idleLocked: nothing of s is under way in the session itself (the router's
// tables are checked by evictSweep).
func (s *Session) idleLocked() bool {
	return s.turn == nil && len(s.queue) == 0 && len(s.opening) == 0 && !s.reviving && !s.closed && s.open && !s.order().busy()
}

// evictIdle evicts idle sessions until ctx ends.
func (r *Router) evictIdle(ctx context.Context) {
	if r.opts.Store == nil {
		return
	}
	tick := min(max(r.opts.EvictIdle/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(tick)
	defer t.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.sweep:
		case <-retry:
		}
		r.evictSweep(time.Now())
		// Still past MaxSessions (the sessions beyond it were busy, or
		// not yet idle, when it looked): look again soon, not at the
		// next tick, which may be a minute away.
		retry = nil
		r.mu.Lock()
		over := len(r.sessions) > r.opts.MaxSessions
		r.mu.Unlock()
		if over {
			retry = time.After(evictRetry)
		}
	}
}

// evictRetry is how soon a sweep that left more than MaxSessions sessions
// in memory is tried again.
const evictRetry = 100 * time.Millisecond

// wakeEvictorLocked asks for a sweep now when more sessions than
// MaxSessions are in memory. Called with r.mu held.
func (r *Router) wakeEvictorLocked() {
	if len(r.sessions) > r.opts.MaxSessions {
		select {
		case r.sweep <- struct{}{}:
		default:
		}
	}
}

// evictSweep evicts the sessions idle for EvictIdle, and the least
// recently used idle ones beyond MaxSessions. It returns how many.
func (r *Router) evictSweep(now time.Time) int {
	r.mu.Lock()
	busy := map[string]bool{}
	for _, o := range r.toEditor {
		busy[o.session] = true
	}
	for _, f := range r.forwards {
		busy[f.session] = true
	}
	for _, t := range r.terminals {
		busy[t.session] = true
	}
	all := make([]*Session, 0, len(r.sessions))
	for id, s := range r.sessions {
		if !busy[id] {
			all = append(all, s)
		}
	}
	excess := len(r.sessions) - r.opts.MaxSessions
	r.mu.Unlock()

	type candidate struct {
		s    *Session
		last time.Time
	}
	var idle []candidate
	for _, s := range all {
		s.mu.Lock()
		ok, last := s.idleLocked(), s.lastUse
		s.mu.Unlock()
		if ok {
			idle = append(idle, candidate{s, last})
		}
	}
	slices.SortFunc(idle, func(a, b candidate) int { return a.last.Compare(b.last) })
	n := 0
	for _, c := range idle {
		if now.Sub(c.last) < r.opts.EvictIdle && n >= excess {
			break
		}
		if r.evict(c.s, c.last, now) {
			n++
		}
	}
	return n
}

// evict forgets s, idle and last used at last (else it is left alone): its
// downstream sessions' late updates are dropped, the store stops holding
// it.
func (r *Router) evict(s *Session, last, now time.Time) bool {
	s.mu.Lock()
	if !s.idleLocked() || !s.lastUse.Equal(last) {
		s.mu.Unlock()
		return false
	}
	s.closed = true // what still arrives for it is not written or recorded
	keys := s.downKeysLocked()
	s.mu.Unlock()
	r.unregister(s, keys)
	r.forgetChildren(s)
	r.opts.Store.Release(s.ID)
	r.log.Info("idle session evicted from memory; it comes back on its next use", "session", s.ID, "idle", now.Sub(last).Round(time.Millisecond))
	return true
}

// sessionFor finds the session params.sessionId names: the live one, else,
// with a store, one brought back from it (revive), unless the editor closed
// it: a closed session comes back only with session/load or resume. id is
// the id named.
func (r *Router) sessionFor(ctx context.Context, p json.RawMessage) (s *Session, id string) {
	// Found, not decoded: a prompt's params may hold megabytes of blocks
	// (and the name matched exactly, as the agent and the editor's lane
	// read it).
	sid := acp.SessionID(p)
	if sid == "" {
		return nil, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s = r.sessions[sid]; s == nil && r.opts.Store != nil && !r.closedIDs.has(sid) {
		// Registered now, in the editor's read loop, so that what the
		// editor sends next for it waits for it instead of reviving it
		// again; prompts queue behind the revive (prompt).
		s = r.emptySession(sid)
		s.reviving, s.ready = true, make(chan struct{})
		r.sessions[s.ID] = s
		r.wakeEvictorLocked()
		r.spawn(func() { r.revive(ctx, s) })
	}
	return s, sid
}

// revive brings s (registered by sessionFor) back from the store, its
// active agent attached, then runs the prompts that queued meanwhile, or
// fails them with the reason.
func (r *Router) revive(ctx context.Context, s *Session) {
	h, err := r.opts.Store.Load(ctx, s.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = errUnknownSession(s.ID)
	case err != nil:
		err = errCannotLoad(err, map[string]string{"sessionId": s.ID})
	default:
		r.fillFromStore(s, h, h.Meta.Cwd, nil)()
		r.declareMcp(s)
		active := s.activeName()
		r.log.Info("session brought back from the store", "session", s.ID, "agent", active)
		if _, err = r.ensureDownstream(ctx, s, r.byName[active]); err == nil {
			s.mu.Lock()
			r.recordMetaLocked(s)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.reviving, s.reviveErr = false, err
	s.lastUse = time.Now()
	closed := s.closed // session/close or delete meanwhile
	var next *turn
	var failed []*turn
	switch {
	case err != nil || closed:
		failed, s.queue = s.queue, nil
	case s.turn == nil && len(s.queue) > 0:
		next, s.queue = s.queue[0], s.queue[1:]
		s.turn = next
	}
	s.mu.Unlock()
	close(s.ready)
	if err != nil || closed {
		if err == nil {
			err = errCancelled
		}
		r.forget(s)
		r.opts.Store.Release(s.ID)
		for _, t := range failed {
			r.unhold(t.req)
			r.replyTo(t.req)(nil, err)
		}
		return
	}
	if next != nil {
		r.unhold(next.req)
		r.startTurn(ctx, s, next)
	}
}

// whenReady runs f once s can take requests: at once, unless s is being
// brought back from the store; then in a goroutine, after that. err is
// why it could not be.
func (s *Session) whenReady(f func(err error)) {
	if s.ready == nil {
		f(nil)
		return
	}
	select {
	case <-s.ready:
		f(s.reviveErr)
	default:
		go func() {
			<-s.ready
			f(s.reviveErr)
		}()
	}
}

// waitReady waits until s can take requests; false if it cannot (its
// revive failed) or ctx ended first.
func (s *Session) waitReady(ctx context.Context) bool {
	if s.ready == nil {
		return true
	}
	select {
	case <-s.ready:
		return s.reviveErr == nil
	case <-ctx.Done():
		return false
	}
}
