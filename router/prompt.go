package router

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/upstream"
)

// turn is one session/prompt of a router session.
type turn struct {
	req  *jsonrpc2.Request
	inst *upstream.Instance // the agent running it, once started

	// Guarded by the session's mu.
	cancelTimer *time.Timer
	synthetic   bool // the router answered "cancelled"; the agent is draining
	done        bool
}

var cancelledResult = json.RawMessage(`{"stopReason":"cancelled"}`)

// prompt handles session/prompt, inline in the editor's read loop. Prompts
// of one session are serialized: one that arrives while a turn runs (or
// drains after a synthetic cancel) waits its turn.
func (r *Router) prompt(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, _ := r.sessionOf(p)
	if s == nil {
		var ref acp.SessionRef
		json.Unmarshal(p, &ref)
		r.replyTo(req)(nil, errUnknownSession(ref.SessionID))
		return
	}
	s.openNow()
	t := &turn{req: req}
	s.mu.Lock()
	if s.turn != nil {
		s.queue = append(s.queue, t)
		s.mu.Unlock()
		r.holdFunc(req, func() { r.dequeue(s, t) })
		return
	}
	s.turn = t
	s.mu.Unlock()
	r.startTurn(ctx, s, t)
}

// dequeue withdraws a waiting prompt the editor cancelled with
// $/cancel_request.
func (r *Router) dequeue(s *Session, t *turn) {
	s.mu.Lock()
	found := false
	for i, q := range s.queue {
		if q == t {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			found = true
			break
		}
	}
	s.mu.Unlock()
	if found {
		r.replyTo(t.req)(nil, errCancelled)
	}
}

func (r *Router) startTurn(ctx context.Context, s *Session, t *turn) {
	inst, err := s.instance()
	if err != nil {
		r.endTurn(ctx, s, t, nil, err)
		return
	}
	s.mu.Lock() // deliver reads it in the agent's read loop
	t.inst = inst
	s.mu.Unlock()
	p := rewriteSessionID(params(t.req), s.ID, s.DownID)
	p = adaptPrompt(p, agentCaps(inst), inst.Agent.Title())
	editorID := acp.RawID(t.req.ID)
	c, err := inst.Peer().Call(ctx, acp.MethodSessionPrompt, paramsAny(p), editorID, nil)
	if err != nil {
		r.endTurn(ctx, s, t, nil, inst.Agent.Error(inst, err))
		return
	}
	key := acp.IDKey(editorID)
	r.mu.Lock()
	r.forwards[key] = &forward{inst: inst, editorID: editorID, agentID: c.ID}
	r.mu.Unlock()
	go func() {
		res, err := c.Wait(ctx)
		r.mu.Lock()
		delete(r.forwards, key)
		r.mu.Unlock()
		if err != nil {
			err = r.authError(inst.Agent, inst.Agent.Error(inst, err))
		}
		r.endTurn(ctx, s, t, res, err)
	}()
}

// endTurn relays the turn's answer (unless the router already answered
// "cancelled"), withdraws the router's requests to the editor that are
// still pending for the session, and starts the next waiting prompt.
func (r *Router) endTurn(ctx context.Context, s *Session, t *turn, res json.RawMessage, err error) {
	s.mu.Lock()
	if t.done {
		s.mu.Unlock()
		return
	}
	t.done = true
	if t.cancelTimer != nil {
		t.cancelTimer.Stop()
	}
	synthetic := t.synthetic
	var next *turn
	if len(s.queue) > 0 {
		next = s.queue[0]
		s.queue = s.queue[1:]
	}
	s.turn = next
	s.mu.Unlock()

	if synthetic {
		r.log.Info("cancelled turn ended", "session", s.ID, "agent", s.Agent.Name())
	} else {
		r.replyTo(t.req)(res, err)
	}
	r.withdraw(func(o *outgoing) bool { return o.session == s.ID })
	if next != nil {
		r.unhold(next.req)
		r.startTurn(ctx, s, next)
	}
}

// cancel forwards session/cancel to the agent running the turn. If that
// agent has not answered within its cancel timeout, the router answers
// "cancelled" itself and the turn drains (DESIGN §7).
func (r *Router) cancel(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, down := r.sessionOf(p)
	if s == nil {
		return
	}
	s.mu.Lock()
	t := s.turn
	inst := s.inst
	if t != nil && t.inst != nil {
		inst = t.inst
	}
	s.mu.Unlock()
	if err := inst.Peer().Notify(ctx, acp.MethodSessionCancel, rewriteSessionID(p, s.ID, down)); err != nil {
		r.log.Debug("cannot forward session/cancel", "session", s.ID, "error", err)
	}
	if t == nil {
		return
	}
	s.mu.Lock()
	if !t.done && t.cancelTimer == nil {
		t.cancelTimer = time.AfterFunc(inst.Agent.Config.CancelTimeout, func() { r.syntheticCancel(s, t) })
	}
	s.mu.Unlock()
}

// syntheticCancel answers a turn whose agent ignored session/cancel. Its
// late updates and late answer never reach the editor; the next prompt
// waits for the real end, and an agent that does not end the turn within
// DrainGrace is restarted.
func (r *Router) syntheticCancel(s *Session, t *turn) {
	s.mu.Lock()
	if t.done || t.synthetic || s.turn != t {
		s.mu.Unlock()
		return
	}
	t.synthetic = true
	inst := t.inst
	s.mu.Unlock()
	r.log.Warn("agent did not answer session/cancel in time; answering cancelled", "session", s.ID, "agent", inst.Agent.Name())
	r.replyTo(t.req)(cancelledResult, nil)
	r.withdraw(func(o *outgoing) bool { return o.session == s.ID })
	time.AfterFunc(r.opts.DrainGrace, func() {
		s.mu.Lock()
		stuck := !t.done
		s.mu.Unlock()
		if stuck {
			inst.Agent.Restart(fmt.Errorf("did not end a cancelled turn within %s", r.opts.DrainGrace+inst.Agent.Config.CancelTimeout))
		}
	})
}
