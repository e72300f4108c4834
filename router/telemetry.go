package router

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/telemetry"
	"github.com/acp-router/acp-router/upstream"
)

// The router's telemetry (issue 17) hooks in here, one call at each place
// it observes, so that the relay code stays as it is. With telemetry off
// (a nil *telemetry.Telemetry) each is a nil check.

// traceTurnStart starts t's span: its parent is the traceparent in the
// editor's _meta.
func (r *Router) traceTurnStart(s *Session, t *turn) {
	if tel := r.opts.Telemetry; tel.Enabled() {
		u := tel.StartTurn(params(t.req), s.ID)
		s.mu.Lock() // the agent's requests read it (traceAgentCall)
		t.tel = u
		s.mu.Unlock()
	}
}

// traceDispatch starts the span of t's session/prompt call to d's agent and
// returns p with that span as _meta.traceparent (the editor's tracestate
// and baggage kept), so that the agent's spans join the trace.
func (r *Router) traceDispatch(s *Session, t *turn, d *downstream, p json.RawMessage) json.RawMessage {
	if !r.opts.Telemetry.Enabled() {
		return p
	}
	s.mu.Lock()
	u := t.tel
	mode := ""
	if u.Recording() { // the mode is a span attribute only: not decoded for a turn not traced
		mode, _, _, _ = merge.CurrentMode(d.view)
	}
	s.mu.Unlock()
	return u.Dispatch(d.agent.Name(), mode, p)
}

// traceTurnEnd ends t's span with the agent's answer (stop reason, usage)
// and the agent's last cost.
func (r *Router) traceTurnEnd(s *Session, t *turn, res json.RawMessage, err error) {
	if !r.opts.Telemetry.Enabled() {
		return
	}
	var cost *telemetry.Cost
	s.mu.Lock()
	u := t.tel
	if t.d != nil && t.d.cost != nil {
		cost = &telemetry.Cost{Amount: t.d.cost.Amount, Currency: t.d.cost.Currency}
	}
	s.mu.Unlock()
	u.End(res, err, cost)
}

// traceAgentCall starts the span of an agent's request to the router
// (permission, fs, terminal, ...) under its session's turn, and returns
// ctx carrying it (the policy decision's parent) and reply ending it with
// the answer's error code.
func (r *Router) traceAgentCall(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, reply func(json.RawMessage, error)) (context.Context, func(json.RawMessage, error)) {
	tel := r.opts.Telemetry
	if !tel.Enabled() {
		return ctx, reply
	}
	var ref acp.SessionRef
	if json.Unmarshal(params(req), &ref) != nil {
		// Its handler answers params that do not decode; its span is
		// then under no session's turn.
		ref.SessionID = ""
	}
	r.mu.Lock()
	s := r.downLocked(inst, ref.SessionID)
	r.mu.Unlock()
	if s != nil {
		root := s.root()
		root.mu.Lock()
		if root.turn != nil {
			ctx = root.turn.tel.Context(ctx)
		}
		root.mu.Unlock()
	}
	ctx, end := tel.Call(ctx, req.Method, inst.Agent.Name())
	return ctx, func(res json.RawMessage, err error) {
		end(err)
		reply(res, err)
	}
}

// traceEditorRequest returns ctx carrying the traceparent in the _meta of
// the editor's request, if any: the parent of the spans of the agent calls
// it causes (acp.Peer.ObserveCalls).
func (r *Router) traceEditorRequest(ctx context.Context, req *jsonrpc2.Request) context.Context {
	if !r.opts.Telemetry.Enabled() || req.Notif {
		return ctx
	}
	return telemetry.Extract(ctx, params(req))
}

// turnContext returns ctx carrying the span of s's running turn, if any
// and ctx has none (the editor's request's): the parent of the agent calls
// the turn makes (a /agent switch opens the other agent's session).
func (r *Router) turnContext(ctx context.Context, s *Session) context.Context {
	if !r.opts.Telemetry.Enabled() || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn != nil {
		ctx = s.turn.tel.Context(ctx)
	}
	return ctx
}

// traceSwitch records a session's switch of agent, begun at began, under
// its running turn's span (a /agent command is a turn).
func (r *Router) traceSwitch(s *Session, began time.Time, from, to string, err error) {
	tel := r.opts.Telemetry
	if !tel.Enabled() {
		return
	}
	ctx := context.Background()
	s.mu.Lock()
	if s.turn != nil {
		ctx = s.turn.tel.Context(ctx)
	}
	handoff := !r.cfg.Handoff.Disabled && len(s.history) > 0
	s.mu.Unlock()
	tel.Switch(ctx, began, s.ID, from, to, handoff, err)
}

// observeTelemetry registers the gauges read at each metric export: open
// sessions, bytes relayed to each agent, and the depth of each write queue
// (the editor's and each running agent's).
func (r *Router) observeTelemetry() {
	err := r.opts.Telemetry.Observe(func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return int64(len(r.sessions))
	}, func(yield func(string, int64)) {
		r.perAgent(yield, func(s *acp.Stream) int64 { return s.Written() })
	}, func(yield func(string, int64)) {
		select {
		case <-r.editorReady: // Serve has set r.editor
			yield("", int64(r.editor.Stream().Queued()))
		default:
		}
		r.perAgent(yield, func(s *acp.Stream) int64 { return int64(s.Queued()) })
	})
	if err != nil {
		r.log.Warn("telemetry: cannot observe sessions and agents", "error", err)
	}
}

// perAgent yields, for each agent with a running process, f of its
// processes' streams summed: a point is per agent, and under the sandbox
// an agent runs one process per set of session roots (Family).
func (r *Router) perAgent(yield func(string, int64), f func(*acp.Stream) int64) {
	for _, a := range r.agents {
		var sum int64
		running := false
		for _, inst := range a.Running() {
			if p := inst.Peer(); p != nil {
				sum += f(p.Stream())
				running = true
			}
		}
		if running {
			yield(a.Name(), sum)
		}
	}
}
