package router

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/upstream"
)

// Forwarding editor requests to agents: by session (sessionRequest), to the
// routing default (forwardUnknown), bounded (maxForwards) and withdrawable
// ($/cancel_request: forwards and the requests the router holds itself).

// forward is an editor request in flight at an agent.
type forward struct {
	inst     *upstream.Instance
	editorID json.RawMessage // the request's id on the editor connection
	agentID  json.RawMessage // and on the agent connection
	session  string          // the router session it is about, or ""
	// A prompt's turn: end ends it (once: done, under Router.mu).
	end  func(json.RawMessage, error)
	done bool
}

// forwardCall sends req to an agent and relays the answer to the editor.
// It returns at once; the request can be
// withdrawn with $/cancel_request.
func (r *Router) forwardCall(ctx context.Context, req *jsonrpc2.Request, inst *upstream.Instance, p json.RawMessage, session string) {
	reply := r.replyTo(req)
	editorID := acp.RawID(req.ID)
	r.mu.Lock()
	full := r.calls >= maxForwards
	if !full {
		r.calls++
	}
	r.mu.Unlock()
	if full {
		reply(nil, fail(errInternal, fmt.Sprintf("acp-router: %d requests are waiting for agents already; try again later", maxForwards), map[string]string{"method": req.Method}))
		return
	}
	uncount := func() {
		r.mu.Lock()
		r.calls--
		r.mu.Unlock()
	}
	c, err := inst.Peer().Call(ctx, req.Method, paramsAny(p), editorID, nil)
	if err != nil {
		uncount()
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	key := acp.IDKey(editorID)
	r.mu.Lock()
	r.forwards[key] = &forward{inst: inst, editorID: editorID, agentID: c.ID, session: session}
	r.mu.Unlock()
	r.spawn(func() {
		res, err := c.Wait(ctx)
		r.mu.Lock()
		delete(r.forwards, key)
		r.calls--
		r.mu.Unlock()
		if err != nil {
			err = inst.Agent.Error(inst, err)
		}
		reply(res, err)
	})
}

// hold registers a request the router holds itself (waiting for an agent
// to start) so that $/cancel_request can end it: the returned context is
// cancelled then. release unregisters it.
func (r *Router) hold(ctx context.Context, req *jsonrpc2.Request) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	r.holdFunc(req, cancel)
	return ctx, func() {
		r.unhold(req)
		cancel()
	}
}

// holdFunc registers what $/cancel_request for req does while the router
// holds it.
func (r *Router) holdFunc(req *jsonrpc2.Request, cancel func()) {
	if req.Notif {
		return
	}
	r.mu.Lock()
	r.held[acp.IDKey(acp.RawID(req.ID))] = cancel
	r.mu.Unlock()
}

func (r *Router) unhold(req *jsonrpc2.Request) { r.unholdKey(acp.IDKey(acp.RawID(req.ID))) }

func (r *Router) unholdKey(key string) {
	r.mu.Lock()
	delete(r.held, key)
	r.mu.Unlock()
}

// cancelRequest handles the editor's $/cancel_request: forwarded to the
// agent working on it (its answer is relayed), answered -32800 when the
// router holds the request itself (STYLE.md).
func (r *Router) cancelRequest(ctx context.Context, req *jsonrpc2.Request) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if err := decodeParams(params(req), &p); err != nil || p.RequestID == nil {
		r.dropMalformed("editor", req.Method, cmp.Or(err, errNoRequestID))
		return
	}
	if r.cancelSuccessorRequest(p.RequestID) {
		return
	}
	key := acp.IDKey(p.RequestID)
	r.mu.Lock()
	f := r.forwards[key]
	cancel := r.held[key]
	r.mu.Unlock()
	switch {
	case f != nil:
		msg, err := acp.SetField(params(req), "requestId", f.agentID)
		if err != nil {
			r.dropMalformed("editor", req.Method, err)
			return
		}
		if err := f.inst.Peer().Notify(ctx, acp.MethodCancelRequest, msg); err != nil {
			r.log.Debug("cannot forward $/cancel_request", "error", err)
		}
	case cancel != nil:
		r.unholdKey(key)
		cancel()
	}
}

// forwardUnknown sends a method the router does not know to the agent of
// the session it names, else to the routing default agent, and relays the
// answer (DESIGN §5). Only when no agent can take it does the router answer
// -32601 itself.
func (r *Router) forwardUnknown(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	if s, _ := r.sessionFor(ctx, p); s != nil {
		s.whenReady(func(err error) {
			if err == nil {
				s.touch()
				if d := s.activeDown(); d != nil {
					if inst, err := d.alive(); err == nil {
						r.forwardOrNotify(ctx, req, inst, rewriteSessionID(p, s.ID, d.id), s.ID)
						return
					}
				}
			}
			r.forwardToDefault(ctx, req, p)
		})
		return
	}
	r.forwardToDefault(ctx, req, p)
}

// forwardToDefault sends a method the router does not know to the routing
// default agent.
func (r *Router) forwardToDefault(ctx context.Context, req *jsonrpc2.Request, p json.RawMessage) {
	r.spawn(func() {
		held, release := r.hold(ctx, req)
		inst, err := r.byName[r.defaultAgent()].Ready(held)
		release()
		if err != nil {
			// No agent can take it; the editor learns why (the default
			// agent did not start), not only "method not found".
			r.log.Warn("no agent for method", "method", req.Method, "agent", r.defaultAgent(), "error", err)
			cause := r.startError(r.byName[r.defaultAgent()], err)
			msg := fmt.Sprintf("method not found: no agent can take %s: %s", req.Method, errorText(cause))
			r.replyTo(req)(nil, fail(errNoMethod, msg, map[string]string{"method": req.Method, "agent": r.defaultAgent()}))
			return
		}
		r.forwardOrNotify(ctx, req, inst, p, "")
	})
}

// forwardOrNotify forwards req, about router session session (or ""), to
// inst.
func (r *Router) forwardOrNotify(ctx context.Context, req *jsonrpc2.Request, inst *upstream.Instance, p json.RawMessage, session string) {
	if req.Notif {
		if err := inst.Peer().Notify(ctx, req.Method, paramsAny(p)); err != nil {
			r.log.Debug("cannot forward notification", "method", req.Method, "error", err)
		}
		return
	}
	r.forwardCall(ctx, req, inst, p, session)
}

// defaultAgent is the agent of sessions no rule routes: the forced one
// (try --agent), else routingDefault.
func (r *Router) defaultAgent() string {
	if r.opts.ForceAgent != "" {
		return r.opts.ForceAgent
	}
	return r.routingDefault()
}

// routingDefault is routing.default; in a proxy chain, the successor unless
// routing.default is written in the config (successor.go).
func (r *Router) routingDefault() string {
	if r.isProxy() && !r.cfg.Routing.DefaultSet {
		return config.SuccessorName
	}
	return r.cfg.Routing.Default
}

// sessionOf finds the router session named by params.sessionId.
func (r *Router) sessionOf(p json.RawMessage) *Session {
	if p == nil {
		return nil
	}
	var ref acp.SessionRef
	if json.Unmarshal(p, &ref) != nil || ref.SessionID == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[ref.SessionID]
}

// sessionRequest handles the session-scoped choices: set_config_option and
// set_mode may switch agents (switch.go); set_model goes to the active
// agent.
func (r *Router) sessionRequest(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, id := r.sessionFor(ctx, p)
	if s == nil {
		r.replyTo(req)(nil, errUnknownSession(id))
		return
	}
	s.whenReady(func(err error) {
		if err != nil {
			r.replyTo(req)(nil, err)
			return
		}
		s.touch()
		s.openNow()
		switch req.Method {
		case acp.MethodSetConfigOption:
			r.setConfigOption(ctx, s, req)
		case acp.MethodSetMode:
			r.setModeRequest(ctx, s, req)
		default:
			d := s.activeDown()
			inst, err := d.alive()
			if err != nil {
				r.replyTo(req)(nil, err)
				return
			}
			r.forwardOrNotify(ctx, req, inst, rewriteSessionID(p, s.ID, d.id), s.ID)
		}
	})
}

// rewriteSessionID replaces params.sessionId when from and to differ.
func rewriteSessionID(p json.RawMessage, from, to string) json.RawMessage {
	if from == to || p == nil {
		return p
	}
	if out, ok := acp.ReplaceInValid(p, []acp.Replacement{{Path: sessionIDPath, Value: to}}); ok {
		return out // in one pass, not a validating scan of the whole prompt
	}
	out, err := acp.SetField(p, "sessionId", to)
	if err != nil {
		return p
	}
	return out
}
