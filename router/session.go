package router

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/upstream"
)

// Session is a router session: what the editor sees as one session. It runs
// on one downstream session of one agent instance.
type Session struct {
	ID      string // the id the editor uses
	Cwd     string
	Agent   *upstream.Agent
	Enforce bool   // routed by a rule with enforce: true
	DownID  string // the agent's session id
	inst    *upstream.Instance
	r       *Router

	mu     sync.Mutex
	open   bool     // updates may be written to the editor
	held   [][]byte // updates waiting for open
	timer  *time.Timer
	turn   *turn   // the running (or draining) prompt turn
	queue  []*turn // prompts waiting for the turn to end
	closed bool
}

// tableKey names an agent instance in the session id table: a restarted
// agent may hand out the same ids again, and they must not alias the
// sessions of its previous process.
func tableKey(inst *upstream.Instance) string {
	return fmt.Sprintf("%s#%d", inst.Agent.Name(), inst.Gen)
}

// instance returns the agent instance the session lives on, or an error
// naming the agent when that process is gone.
func (s *Session) instance() (*upstream.Instance, error) {
	if cur := s.Agent.Current(); cur == s.inst {
		return cur, nil
	}
	e := s.Agent.Error(s.inst, jsonrpc2.ErrClosed)
	e.Message = fmt.Sprintf("%s; this session's conversation with it is gone, please start a new thread", e.Message)
	return nil, e
}

// route picks the agent for a new session (DESIGN §4 routing): the first
// rule whose cwd glob matches, else the default.
func (r *Router) route(cwd string) (*upstream.Agent, bool) {
	if r.opts.ForceAgent != "" {
		return r.byName[r.opts.ForceAgent], false
	}
	for i := range r.cfg.Routing.Rules {
		rule := &r.cfg.Routing.Rules[i]
		if rule.Match(cwd) {
			return r.byName[rule.Agent], rule.Enforce
		}
	}
	return r.byName[r.cfg.Routing.Default], false
}

// newSession routes session/new. It waits for the agent in a goroutine: the
// editor's read loop must not block.
func (r *Router) newSession(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	p := params(req)
	var np struct {
		Cwd string `json:"cwd"`
	}
	if p == nil || json.Unmarshal(p, &np) != nil {
		reply(nil, acp.NewError(acp.CodeInvalidParams, "acp-router: session/new needs params with cwd", nil))
		return
	}
	if !filepath.IsAbs(np.Cwd) {
		reply(nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: cwd must be an absolute path, got %q", np.Cwd), nil))
		return
	}
	cwd := filepath.Clean(np.Cwd)
	go func() {
		held, release := r.hold(ctx, req)
		a, enforce := r.route(cwd)
		inst, err := a.Ready(held)
		if err != nil && held.Err() == nil {
			if fb := r.byName[r.cfg.Routing.Fallback]; fb != nil && fb != a {
				r.log.Warn("agent unavailable; using the fallback", "agent", a.Name(), "fallback", fb.Name(), "error", err)
				if finst, ferr := fb.Ready(held); ferr == nil {
					a, inst, err, enforce = fb, finst, nil, false
				}
			}
		}
		cancelled := held.Err() != nil
		release()
		if cancelled {
			reply(nil, errCancelled)
			return
		}
		if err != nil {
			reply(nil, r.startError(a, err))
			return
		}
		r.createSession(ctx, req, inst, adaptNewSession(p, agentCaps(inst), inst.Agent.Name(), r.log), cwd, enforce)
	}()
}

// createSession sends session/new to inst. The new session is bound in the
// agent's read path, before the agent's next message is processed, since
// real agents send the first update for a new session on the very next
// line (STYLE.md).
func (r *Router) createSession(ctx context.Context, req *jsonrpc2.Request, inst *upstream.Instance, p json.RawMessage, cwd string, enforce bool) {
	reply := r.replyTo(req)
	var s *Session
	bind := func(m *acp.Message) { s = r.bind(inst, m, cwd, enforce) }
	editorID := acp.RawID(req.ID)
	c, err := inst.Peer().Call(ctx, acp.MethodSessionNew, paramsAny(p), editorID, bind)
	if err != nil {
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	key := acp.IDKey(editorID)
	r.mu.Lock()
	r.forwards[key] = &forward{inst: inst, editorID: editorID, agentID: c.ID}
	r.mu.Unlock()
	res, err := c.Wait(ctx)
	r.mu.Lock()
	delete(r.forwards, key)
	r.mu.Unlock()
	if err != nil {
		reply(nil, r.authError(inst.Agent, inst.Agent.Error(inst, err)))
		return
	}
	if s == nil {
		reply(nil, acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: agent %q answered session/new without a sessionId", inst.Agent.Name()), map[string]string{"agent": inst.Agent.Name()}))
		return
	}
	if s.ID != s.DownID {
		if res, err = acp.SetField(res, "sessionId", s.ID); err != nil {
			reply(nil, err)
			return
		}
	}
	r.log.Info("session created", "session", s.ID, "agent", inst.Agent.Name(), "cwd", cwd)
	reply(res, nil)
	s.openAfter(r.opts.OpenDelay)
}

// bind registers the session a session/new response creates. It runs in
// the agent's read path.
func (r *Router) bind(inst *upstream.Instance, m *acp.Message, cwd string, enforce bool) *Session {
	var res acp.SessionRef
	if m.Result == nil || json.Unmarshal(m.Result, &res) != nil || res.SessionID == "" {
		return nil
	}
	s := &Session{Cwd: cwd, Agent: inst.Agent, Enforce: enforce, DownID: res.SessionID, inst: inst, r: r}
	r.mu.Lock()
	s.ID = r.sessionIDs.Out(tableKey(inst), res.SessionID)
	r.sessions[s.ID] = s
	var early []*acp.Message
	kept := r.unbound[tableKey(inst)][:0]
	for _, u := range r.unbound[tableKey(inst)] {
		var ref acp.SessionRef
		if json.Unmarshal(u.Params, &ref) == nil && ref.SessionID == res.SessionID {
			early = append(early, u)
		} else {
			kept = append(kept, u)
		}
	}
	r.unbound[tableKey(inst)] = kept
	r.mu.Unlock()
	for _, u := range early {
		s.deliver(inst, r.updateLine(s, u))
	}
	return s
}

// openAfter opens the session for updates after d.
func (s *Session) openAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open && s.timer == nil {
		s.timer = time.AfterFunc(d, s.openNow)
	}
}

// openNow writes the held updates and lets later ones through. A request
// from the editor that names the session opens it at once: the editor knows
// the session by then.
func (s *Session) openNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		return
	}
	s.open = true
	if s.timer != nil {
		s.timer.Stop()
	}
	for _, line := range s.held {
		s.r.writeEditor(line)
	}
	s.held = nil
}

// deliver writes one update line for the editor, or holds it until the
// session is open; updates of a turn the router already answered as
// cancelled are dropped.
func (s *Session) deliver(inst *upstream.Instance, line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
	case s.turn != nil && s.turn.synthetic && s.turn.inst == inst:
		s.r.log.Debug("update of a cancelled turn dropped", "session", s.ID)
	case !s.open:
		s.held = append(s.held, line)
	default:
		s.r.writeEditor(line)
	}
}

func (r *Router) writeEditor(line []byte) {
	if err := r.editor.Stream().WriteRaw(line); err != nil {
		r.log.Debug("cannot write to the editor", "error", err)
	}
}

// closeSession handles session/close: the agent closes its session when it
// supports close; otherwise the router cancels the running turn itself. The
// router forgets the session either way.
func (r *Router) closeSession(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, down := r.sessionOf(p)
	if s == nil {
		r.replyTo(req)(json.RawMessage("{}"), nil)
		return
	}
	inst, err := s.instance()
	r.forget(s)
	if err != nil {
		r.replyTo(req)(json.RawMessage("{}"), nil)
		return
	}
	if init := inst.Init(); init != nil && acp.Supported(init.AgentCapabilities.SessionCapabilities.Close) {
		r.forwardCall(ctx, req, inst, rewriteSessionID(p, s.ID, down))
		return
	}
	s.mu.Lock()
	running := s.turn != nil
	s.mu.Unlock()
	if running {
		cancel, _ := json.Marshal(acp.SessionRef{SessionID: down})
		inst.Peer().Notify(ctx, acp.MethodSessionCancel, json.RawMessage(cancel))
	}
	r.replyTo(req)(json.RawMessage("{}"), nil)
}

// forget removes a closed session; prompts still queued end cancelled.
func (r *Router) forget(s *Session) {
	r.mu.Lock()
	delete(r.sessions, s.ID)
	r.sessionIDs.Remove(s.ID)
	r.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	queued := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, t := range queued {
		r.unhold(t.req)
		r.replyTo(t.req)(json.RawMessage(`{"stopReason":"cancelled"}`), nil)
	}
}

// forwardToSession forwards a session-scoped request (set_mode,
// set_config_option, set_model) to the session's agent.
func (r *Router) forwardToSession(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, down := r.sessionOf(p)
	if s == nil {
		var ref acp.SessionRef
		json.Unmarshal(p, &ref)
		r.replyTo(req)(nil, errUnknownSession(ref.SessionID))
		return
	}
	s.openNow()
	inst, err := s.instance()
	if err != nil {
		r.replyTo(req)(nil, err)
		return
	}
	r.forwardOrNotify(ctx, req, inst, rewriteSessionID(p, s.ID, down))
}
