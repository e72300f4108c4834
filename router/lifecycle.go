package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/upstream"
)

// A session's life past new, prompt and close, where passing the method to
// one agent would break the router's own view of its sessions
// (notes/acp-currency.md rows 7-9): session/set_title, session/status,
// session/archive and unarchive, and session/fork. MCP over ACP is in
// mcp.go, auth/status in authstatus.go.

// sessionIDParam reads params.sessionId, or answers -32602 (false).
func (r *Router) sessionIDParam(req *jsonrpc2.Request) (string, bool) {
	var ref acp.SessionRef
	if json.Unmarshal(params(req), &ref) != nil || ref.SessionID == "" {
		r.replyTo(req)(nil, errNeedsSessionID(req.Method))
		return "", false
	}
	return ref.SessionID, true
}

// setTitle handles session/set_title: the title is the router's (it shows
// in session/list and survives a switch), so the router keeps it and its
// store in step, and forwards the request, id translated, to the active
// agent when that agent supports sessionCapabilities.title (the agent's
// normalized title is the one kept). From then on an agent's own title
// does not rename the thread (the schema: the agent SHOULD NOT replace it).
// A session only in the store is retitled there.
func (r *Router) setTitle(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	var p struct {
		SessionID string  `json:"sessionId"`
		Title     *string `json:"title"`
	}
	if json.Unmarshal(params(req), &p) != nil || p.SessionID == "" {
		reply(nil, fail(errParams, "acp-router: session/set_title needs a sessionId", nil))
		return
	}
	if p.Title == nil || strings.TrimSpace(*p.Title) == "" {
		reply(nil, fail(errParams, "acp-router: session/set_title needs a title that is not empty", map[string]string{"sessionId": p.SessionID}))
		return
	}
	title := strings.TrimSpace(*p.Title)
	s := r.sessionOf(params(req)) // no revive: the schema, the session need not be active
	r.spawn(func() {
		if s == nil || !s.waitReady(ctx) {
			reply(r.retitleStored(ctx, p.SessionID, title))
			return
		}
		res := mustJSON(map[string]string{"title": title})
		d := s.activeDown()
		if d != nil {
			if inst, err := d.alive(); err == nil && acp.Supported(agentCaps(inst).SessionCapabilities.Title) {
				out, err := callWait(ctx, inst, req.Method, rewriteSessionID(params(req), s.ID, d.id))
				if err != nil {
					reply(nil, inst.Agent.Error(inst, err))
					return
				}
				var got struct {
					Title string `json:"title"`
				}
				if json.Unmarshal(out, &got) == nil && got.Title != "" {
					title, res = got.Title, out
				}
			}
		}
		s.mu.Lock()
		s.title, s.titled = title, true
		r.recordMetaLocked(s)
		s.mu.Unlock()
		reply(res, nil)
	})
}

// retitleStored sets the title of a session only the store has.
func (r *Router) retitleStored(ctx context.Context, id, title string) (json.RawMessage, error) {
	st := r.opts.Store
	if st == nil {
		return nil, errNoSession(acp.MethodSessionSetTitle, id)
	}
	err := st.UpdateStored(ctx, id, func(m *store.Meta) {
		extra := r.storedExtra(id, m.Extra)
		extra.Titled = true
		m.Title, m.Extra = title, mustJSON(extra)
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errNoSession(acp.MethodSessionSetTitle, id)
	case err != nil:
		return nil, fail(errInternal, "acp-router: cannot store the title: "+err.Error(), map[string]string{"sessionId": id})
	}
	return mustJSON(map[string]string{"title": title}), nil
}

// sessionStatus handles session/status, without side effects (the
// schema): a session the router runs is "open" (its active agent's own
// answer, id translated, when it supports sessionCapabilities.status); one
// only the store keeps is "saved"; any other -32002.
func (r *Router) sessionStatus(ctx context.Context, req *jsonrpc2.Request) {
	id, ok := r.sessionIDParam(req)
	if !ok {
		return
	}
	reply := r.replyTo(req)
	open := mustJSON(map[string]string{"status": "open"})
	s := r.sessionOf(params(req))
	r.spawn(func() {
		if s == nil {
			if st := r.opts.Store; st != nil {
				if ok, _ := st.Stored(ctx, id); ok {
					reply(mustJSON(map[string]string{"status": "saved"}), nil)
					return
				}
			}
			reply(nil, errNoSession(req.Method, id))
			return
		}
		s.mu.Lock()
		d := s.down[s.active]
		busy := s.reviving
		s.mu.Unlock()
		if d != nil && !busy {
			if inst, err := d.alive(); err == nil && acp.Supported(agentCaps(inst).SessionCapabilities.Status) {
				res, err := callWait(ctx, inst, req.Method, rewriteSessionID(params(req), s.ID, d.id))
				if err == nil {
					reply(res, nil)
					return
				}
				// The router still runs the session: it is open.
				r.log.Debug("agent did not answer session/status", "session", s.ID, "agent", inst.Agent.Name(), "error", err)
			}
		}
		reply(open, nil)
	})
}

// archiveSession handles session/archive (archive) and session/unarchive.
// Archive does the close work of session/close and marks the session
// archived in the store, so that session/list leaves it out unless asked.
// A turn running in the session is cancelled first, as the schema asks
// ("MUST cancel any ongoing work"): the editor gets its prompt answered
// "cancelled" before the archive answer. Each agent of the session archives
// its own session where it supports archive (else closes it); unarchive
// reaches the agents that support archive with their stored session ids.
// Archiving an archived session, or unarchiving one that is not, succeeds;
// an unknown session is -32002.
func (r *Router) archiveSession(ctx context.Context, req *jsonrpc2.Request, archive bool) {
	id, ok := r.sessionIDParam(req)
	if !ok {
		return
	}
	var s *Session
	if archive {
		r.mu.Lock()
		if s = r.sessions[id]; s != nil {
			r.closedIDs.add(id) // a prompt does not bring it back
		}
		r.mu.Unlock()
	}
	r.spawn(func() {
		var downs map[string]store.Agent
		var cwd string
		var dirs []string
		mark := func(m *store.Meta) {
			m.Archived = archive
			downs, cwd, dirs = m.Agents, m.Cwd, m.AdditionalDirectories
		}
		if s != nil {
			r.endTurnFirst(ctx, s)
		}
		err := r.opts.Store.UpdateStored(ctx, id, mark) // held while s is live: before closeWork releases it
		var closeAgents func(context.Context, bool) error
		if s != nil {
			closeAgents = r.closeWork(s)
		}
		switch {
		case errors.Is(err, store.ErrNotFound) && s == nil:
			r.replyTo(req)(nil, errNoSession(req.Method, id))
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			r.replyTo(req)(nil, fail(errInternal, "acp-router: cannot store the archive state: "+err.Error(), map[string]string{"sessionId": id}))
			return
		}
		r.log.Info("session archive state changed", "session", id, "archived", archive)
		var first error
		if closeAgents != nil {
			first = closeAgents(ctx, true)
		} else {
			first = r.archiveStoredAgents(ctx, req.Method, downs, cwd, dirs)
		}
		if first != nil {
			r.replyTo(req)(nil, first)
			return
		}
		r.replyTo(req)(json.RawMessage("{}"), nil)
	})
}

// endTurnFirst cancels s's running turn, if any, and waits (within the
// agent's cancel timeout, after which the router answers "cancelled"
// itself) until the editor has its answer.
func (r *Router) endTurnFirst(ctx context.Context, s *Session) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	if t == nil {
		return
	}
	r.log.Info("cancelling the running turn before archiving", "session", s.ID)
	r.cancelTurn(ctx, s, mustJSON(acp.SessionRef{SessionID: s.ID}))
	limit := time.Now().Add(cancelTimeoutOf(t) + time.Second)
	for time.Now().Before(limit) {
		s.mu.Lock()
		over := t.done || t.synthetic || (t.d == nil && t.cancelled)
		s.mu.Unlock()
		if over {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cancelTimeoutOf is how long the agent running t may take to answer
// session/cancel before the router answers for it.
func cancelTimeoutOf(t *turn) time.Duration {
	if t.inst != nil {
		return t.inst.Agent.Config.CancelTimeout
	}
	var longest time.Duration
	if t.cmp != nil { // a comparison ends when its slowest agent does
		for _, l := range t.cmp.legs {
			longest = max(longest, l.agent.Config.CancelTimeout)
		}
	}
	return longest
}

// archiveStoredAgents sends method (archive or unarchive) to each agent of
// a session the router does not run that supports archive, with its stored
// session id, at the agent's process for the session's roots (cwd, dirs:
// one per set of roots under the sandbox, upstream/roots.go). Agents not
// running are left alone: their session is not in memory either.
func (r *Router) archiveStoredAgents(ctx context.Context, method string, downs map[string]store.Agent, cwd string, dirs []string) error {
	for name, a := range downs {
		ag := r.byName[name]
		if ag == nil || a.SessionID == "" {
			continue
		}
		inst := ag.ForRoots(cwd, cleanDirs(dirs)).Current()
		if inst == nil || !acp.Supported(agentCaps(inst).SessionCapabilities.Archive) {
			continue
		}
		if _, err := callWait(ctx, inst, method, mustJSON(acp.SessionRef{SessionID: a.SessionID})); err != nil {
			var rpcErr *jsonrpc2.Error
			if errors.As(err, &rpcErr) && rpcErr.Code == acp.CodeResourceNotFound {
				continue // the agent forgot it: nothing to archive there
			}
			return inst.Agent.Error(inst, err)
		}
	}
	return nil
}

// forkSession handles session/fork. A fork needs one agent session to
// fork: it is forwarded, id translated, when the session has been served
// by one agent only and that agent supports sessionCapabilities.fork. The
// fork is a new router session bound to that agent, with the parent's
// turns for the handoff brief should it be switched later. Otherwise the
// router refuses, saying why.
func (r *Router) forkSession(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	p := params(req)
	var fp struct {
		Cwd  string   `json:"cwd"`
		Dirs []string `json:"additionalDirectories"`
	}
	if err := decodeParams(p, &fp); err != nil {
		reply(nil, errMalformed(req.Method, err))
		return
	}
	if !filepath.IsAbs(fp.Cwd) {
		reply(nil, errRelativeCwd(fp.Cwd))
		return
	}
	if e := errRelativeDir(req.Method, fp.Dirs); e != nil {
		reply(nil, e)
		return
	}
	if s := r.sessionOf(p); s == nil {
		if id := acp.SessionID(p); r.opts.Store == nil || !r.opts.Store.Exists(id) {
			reply(nil, errNoSession(req.Method, id))
			return
		}
	}
	s, id := r.sessionFor(ctx, p) // an evicted one comes back
	if s == nil {
		reply(nil, errNoSession(req.Method, id))
		return
	}
	s.whenReady(func(err error) {
		if err != nil {
			reply(nil, err)
			return
		}
		s.mu.Lock()
		var names []string
		for name := range s.down {
			names = append(names, name)
		}
		for name := range s.stored {
			if s.down[name] == nil {
				names = append(names, name)
			}
		}
		d := s.down[s.active]
		s.mu.Unlock()
		sort.Strings(names)
		if len(names) != 1 || d == nil {
			reply(nil, fail(errParams, fmt.Sprintf("acp-router: session/fork: session %q was served by agents %s; a fork needs one agent's session to fork", s.ID, strings.Join(names, ", ")),
				map[string]any{"sessionId": s.ID, "agents": names}))
			return
		}
		inst, err := d.alive()
		if err != nil {
			reply(nil, err)
			return
		}
		if !acp.Supported(agentCaps(inst).SessionCapabilities.Fork) {
			reply(nil, fail(errParams, fmt.Sprintf("acp-router: session/fork: agent %q, which serves session %q, does not support session/fork", inst.Agent.Name(), s.ID),
				map[string]string{"sessionId": s.ID, "agent": inst.Agent.Name()}))
			return
		}
		r.spawn(func() { r.fork(ctx, req, s, d, inst, filepath.Clean(fp.Cwd)) })
	})
}

// fork forwards session/fork of s to d's agent and registers the new
// session, bound in the agent's read path like session/new's.
func (r *Router) fork(ctx context.Context, req *jsonrpc2.Request, s *Session, d *downstream, inst *upstream.Instance, cwd string) {
	reply := r.replyTo(req)
	if err := r.admit(inst); err != nil {
		reply(nil, err)
		return
	}
	s.mu.Lock()
	newParams := r.rewriteNewParams(s.ID, s.newParams, params(req), cwd)
	history := append([]merge.TurnRecord(nil), s.history...)
	histBytes, nextSeq, enforce := s.histBytes, s.nextSeq, s.Enforce
	s.mu.Unlock()
	roots := cleanDirs(r.newParamsDirs(s.ID, newParams))
	ns := &Session{Cwd: cwd, Enforce: enforce, r: r, newParams: newParams, active: inst.Agent.Name(), down: map[string]*downstream{}, opening: map[string]chan struct{}{},
		toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable(), roots: roots, policy: guard.NewSession(cwd, roots), lastUse: time.Now(),
		history: history, histBytes: histBytes, nextSeq: nextSeq}
	out := adaptNewSession(params(req), agentCaps(inst), inst.Agent.Name(), r.log)
	out = rewriteSessionID(out, s.ID, d.id)
	bound := false
	c, err := inst.Peer().Call(ctx, req.Method, paramsAny(out), acp.RawID(req.ID), func(m *acp.Message) { bound = r.bind(ns, inst, m) })
	if err != nil {
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	res, err := c.Wait(ctx)
	if err != nil {
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	if !bound {
		reply(nil, fail(errInternal, fmt.Sprintf("acp-router: agent %q answered session/fork without a sessionId", inst.Agent.Name()), map[string]string{"agent": inst.Agent.Name()}))
		return
	}
	ns.mu.Lock()
	if nd := ns.down[inst.Agent.Name()]; nd != nil {
		nd.seen = nextSeq // the fork has the parent's context
	}
	ns.mu.Unlock()
	r.declareMcp(ns)
	r.log.Info("session forked", "session", ns.ID, "from", s.ID, "agent", inst.Agent.Name())
	reply(ns.newSessionResult(res), nil)
	ns.write(ns.commandsLine())
	ns.openAfter(r.opts.OpenDelay)
}
