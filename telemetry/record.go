package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
)

// Attribute keys. Session ids are span attributes only; metrics are
// labelled with low-cardinality values (agent names from the config,
// rule ids from the policy, fixed enums), never session ids or paths.
const (
	KeySession    = attribute.Key("acp.session.id")
	KeyParent     = attribute.Key("acp.session.parent_id")
	KeyAgent      = attribute.Key("acp.agent")
	KeyMethod     = attribute.Key("rpc.method")
	KeyMode       = attribute.Key("acp.mode")
	KeyStopReason = attribute.Key("acp.stop_reason")
	KeyErrorCode  = attribute.Key("rpc.jsonrpc.error_code")
	KeyEffect     = attribute.Key("acp_router.decision.effect")
	KeyRule       = attribute.Key("acp_router.decision.rule")
	KeyLayer      = attribute.Key("acp_router.decision.layer")
	KeySource     = attribute.Key("acp_router.decision.source")
	KeyChoice     = attribute.Key("acp_router.decision.user_choice")
	KeyDecisionID = attribute.Key("acp_router.decision.id")
	KeyToolCall   = attribute.Key("acp.tool_call.id")
	KeyEvTypes    = attribute.Key("acp_router.evidence.types")
	KeyEvKinds    = attribute.Key("acp_router.evidence.kinds")
	KeyEvCount    = attribute.Key("acp_router.evidence.count")
	KeyOutcome    = attribute.Key("acp_router.ask.outcome")
	KeyRestart    = attribute.Key("acp_router.agent.restart")
	KeyCrashed    = attribute.Key("acp_router.agent.crashed")
	KeyHandoff    = attribute.Key("acp_router.switch.handoff")
	KeyFrom       = attribute.Key("acp_router.switch.from")
	KeyTo         = attribute.Key("acp_router.switch.to")
	KeySignal     = attribute.Key("acp_router.telemetry.signal")
	KeyPeer       = attribute.Key("acp_router.peer")
	KeyPrompt     = attribute.Key("acp.prompt.text")
	KeyInTokens   = attribute.Key("gen_ai.usage.input_tokens")
	KeyOutTokens  = attribute.Key("gen_ai.usage.output_tokens")
	KeyTokens     = attribute.Key("acp.usage.total_tokens")
	KeyCost       = attribute.Key("acp.usage.cost")
	KeyCurrency   = attribute.Key("acp.usage.currency")
)

type instruments struct {
	prompts, turns, decisions, asks, restarts, crashes, switches metric.Int64Counter
	turnDuration                                                 metric.Float64Histogram
}

func (m *instruments) init(meter metric.Meter, d *drops) error {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.prompts = counter("acp_router.prompts", "Prompts sent to agents, by agent.")
	m.turns = counter("acp_router.turns", "Prompt turns ended, by agent and stop reason.")
	m.decisions = counter("acp_router.policy.decisions", "Policy decisions, by effect, deciding rule and layer.")
	m.asks = counter("acp_router.policy.asks", "Permission questions the user answered, by outcome.")
	m.restarts = counter("acp_router.agent.restarts", "Agent processes started again after the first start, by agent.")
	m.crashes = counter("acp_router.agent.crashes", "Agent processes that ended without the router stopping them, by agent.")
	m.switches = counter("acp_router.session.switches", "Agent switches inside a session, by target agent.")
	h, err := meter.Float64Histogram("acp_router.turn.duration", metric.WithUnit("s"),
		metric.WithDescription("Prompt turn duration, by agent and stop reason."),
		metric.WithExplicitBucketBoundaries(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
	errs = append(errs, err)
	m.turnDuration = h
	_, err = meter.Int64ObservableCounter("acp_router.telemetry.dropped",
		metric.WithDescription("Spans, metric exports and log records lost because the collector was slow, down or refused them."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for i, sig := range signals {
				o.Observe(d.n[i].Load(), metric.WithAttributes(KeySignal.String(sig)))
			}
			return nil
		}))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// stopReasons are ACP's StopReason values, by their JSON; an agent's own
// value is counted as "other" (a label must stay low-cardinality).
var stopReasons = map[string]string{`"end_turn"`: "end_turn", `"max_tokens"`: "max_tokens",
	`"max_turn_requests"`: "max_turn_requests", `"refusal"`: "refusal", `"cancelled"`: "cancelled"}

// Turn is the span of one prompt turn and the call of its agent. nil when
// telemetry is off; every method is safe on nil.
type Turn struct {
	t     *Telemetry
	ctx   context.Context // carries span
	span  trace.Span
	start time.Time

	// The agent's requests read call (Context) while the turn goes on.
	mu    sync.Mutex
	call  trace.Span // session/prompt to the agent; nil until Dispatch
	agent string
	mode  string
}

// StartTurn starts the span of a prompt turn of router session session.
// params are the editor's session/prompt params: the span's parent is the
// traceparent in their _meta, when there is a valid one.
func (t *Telemetry) StartTurn(params json.RawMessage, session string) *Turn {
	if t == nil {
		return nil
	}
	parent := Extract(context.Background(), params)
	attrs := []attribute.KeyValue{KeySession.String(session)}
	if t.exportPrompts {
		attrs = append(attrs, KeyPrompt.String(promptText(params)))
	}
	ctx, span := t.Tracer.Start(parent, "acp-router turn", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return &Turn{t: t, ctx: ctx, span: span, start: time.Now()}
}

// promptText is the text blocks of a prompt (export_prompts only).
func promptText(params json.RawMessage) string {
	var p struct {
		Prompt []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
	}
	json.Unmarshal(params, &p)
	var s string
	for _, b := range p.Prompt {
		if b.Type == "text" {
			s += b.Text
		}
	}
	const max = 4096
	if len(s) > max {
		s = s[:max]
	}
	return s
}

// Context is ctx carrying the turn's span (for what happens in the turn:
// the agent's requests and their decisions); ctx itself when u is nil.
func (u *Turn) Context(ctx context.Context) context.Context {
	if u == nil {
		return ctx
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.call != nil {
		return trace.ContextWithSpan(ctx, u.call)
	}
	return trace.ContextWithSpan(ctx, u.span)
}

// Recording reports whether the turn's span records (is sampled): the
// attributes only a recorded span keeps need not be computed otherwise.
func (u *Turn) Recording() bool { return u != nil && u.span.IsRecording() }

// Dispatch starts the span of the session/prompt call to agent and returns
// params with its traceparent in _meta, so that the agent's spans join the
// trace. Called once per turn.
func (u *Turn) Dispatch(agent, mode string, params json.RawMessage) json.RawMessage {
	if u == nil {
		return params
	}
	ctx, call := u.t.Tracer.Start(u.ctx, "session/prompt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(KeyMethod.String("session/prompt"), KeyAgent.String(agent)))
	u.mu.Lock()
	u.agent, u.mode, u.call = agent, mode, call // the turn's span gets them at End
	u.mu.Unlock()
	u.t.m.prompts.Add(ctx, 1, u.t.labels.prompt(agent))
	return Inject(ctx, params)
}

// Cost is an agent's cumulative cost in a session (usage_update).
type Cost struct {
	Amount   float64
	Currency string
}

// End ends the turn with the agent's result or err; cost is the agent's
// last usage_update cost, when it sent one.
func (u *Turn) End(result json.RawMessage, err error, cost *Cost) {
	if u == nil {
		return
	}
	// Two members of a small object, read without a decoder: this runs
	// once a turn on the relay's path.
	var v [2]json.RawMessage
	acp.Members(result, resultNames, v[:])
	reason := "other"
	if err != nil {
		reason = "error"
	} else if r, ok := stopReasons[string(v[0])]; ok { // no copy: a map index
		reason = r
	}
	u.mu.Lock()
	call, agent, mode := u.call, u.agent, u.mode
	u.mu.Unlock()
	// One SetAttributes for the turn's span: each call normalises and
	// de-duplicates all of them.
	attrs := make([]attribute.KeyValue, 1, 8)
	attrs[0] = KeyStopReason.String(reason)
	if call != nil {
		attrs = append(attrs, KeyAgent.String(agent), KeyMode.String(mode))
	}
	if usage := v[1]; len(usage) > 0 && usage[0] == '{' {
		var n [3]json.RawMessage
		acp.Members(usage, usageNames, n[:])
		attrs = append(attrs, KeyInTokens.Int64(tokens(n[0])), KeyOutTokens.Int64(tokens(n[1])), KeyTokens.Int64(tokens(n[2])))
	}
	if cost != nil {
		attrs = append(attrs, KeyCost.Float64(cost.Amount), KeyCurrency.String(cost.Currency))
	}
	if call != nil {
		endWithError(call, err)
		call.SetAttributes(attrs[0])
		call.End()
	}
	u.span.SetAttributes(attrs...)
	endWithError(u.span, err)
	u.span.End()
	if agent == "" {
		agent = "router" // a router command: no agent ran
	}
	labels := u.t.labels.turn(agent, reason)
	u.t.m.turns.Add(u.ctx, 1, labels)
	u.t.m.turnDuration.Record(u.ctx, time.Since(u.start).Seconds(), labels)
}

var (
	resultNames = []string{"stopReason", "usage"}
	usageNames  = []string{"inputTokens", "outputTokens", "totalTokens"}
)

// tokens is a usage count as the agent wrote it (0 when it is not an
// integer, as a decode into int64 left it).
func tokens(raw json.RawMessage) int64 {
	n, _ := strconv.ParseInt(string(raw), 10, 64)
	return n
}

// labels are the metric attribute sets of the turns, made once per agent
// and stop reason: building a set sorts and allocates.
type labels struct {
	mu    sync.Mutex
	agent map[string]metric.MeasurementOption
	turns map[[2]string]metric.MeasurementOption
}

func (l *labels) prompt(agent string) metric.MeasurementOption {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.agent[agent]
	if !ok {
		if l.agent == nil {
			l.agent = map[string]metric.MeasurementOption{}
		}
		o = metric.WithAttributeSet(attribute.NewSet(KeyAgent.String(agent)))
		l.agent[agent] = o
	}
	return o
}

func (l *labels) turn(agent, reason string) metric.MeasurementOption {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.turns[[2]string{agent, reason}]
	if !ok {
		if l.turns == nil {
			l.turns = map[[2]string]metric.MeasurementOption{}
		}
		o = metric.WithAttributeSet(attribute.NewSet(KeyAgent.String(agent), KeyStopReason.String(reason)))
		l.turns[[2]string{agent, reason}] = o
	}
	return o
}

// endWithError sets span's status from a call's error, with its JSON-RPC
// code when it has one.
func endWithError(span trace.Span, err error) {
	if err == nil {
		return
	}
	var e *jsonrpc2.Error
	if errors.As(err, &e) {
		span.SetAttributes(KeyErrorCode.Int64(e.Code))
	}
	span.SetStatus(codes.Error, err.Error())
}

// Call starts the span of one agent call the router relays or answers
// (method, agent) under ctx's span; end it with the call's error.
func (t *Telemetry) Call(ctx context.Context, method, agent string) (context.Context, func(error)) {
	if t == nil {
		return ctx, func(error) {}
	}
	ctx, span := t.Tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(KeyMethod.String(method), KeyAgent.String(agent)))
	return ctx, func(err error) {
		endWithError(span, err)
		span.End()
	}
}

// AgentCalls is the observer of agent's connection (acp.Peer.ObserveCalls):
// a client span per request the router sends it — initialize,
// authenticate, session/new, load, resume, fork, close, set_mode,
// set_config_option, the editor's extension requests it relays... — with
// rpc.method, acp.agent and, for an error answer, rpc.jsonrpc.error_code;
// its parent is ctx's span (the turn, or the traceparent of the editor's
// request that caused it). session/prompt has its own span (Turn.Dispatch).
// nil when telemetry is off.
func (t *Telemetry) AgentCalls(agent string) acp.CallObserver {
	if t == nil {
		return nil
	}
	name := KeyAgent.String(agent)
	return func(ctx context.Context, method string) func(*acp.Message, error) {
		if method == acp.MethodSessionPrompt {
			return nil
		}
		_, span := t.Tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(KeyMethod.String(method), name))
		return func(m *acp.Message, err error) {
			if m != nil && m.Error != nil {
				var e jsonrpc2.Error
				json.Unmarshal(m.Error, &e)
				span.SetAttributes(KeyErrorCode.Int64(e.Code))
				span.SetStatus(codes.Error, e.Message)
			}
			endWithError(span, err)
			span.End()
		}
	}
}

// Evidence summarises a decision's evidence for its span: the types and
// kinds of the items, never their paths, commands or contents.
type Evidence struct {
	Types, Kinds []string
	Items        int
}

// Decision records one policy decision, as the audit log has it (rec,
// its DecisionID set): a span under ctx's span from start (the decision
// and the user's answer), the decision metrics, and rec as an OTLP log
// record with the same fields as the JSONL line.
func (t *Telemetry) Decision(ctx context.Context, start time.Time, rec *audit.Record, ev Evidence) {
	if t == nil {
		return
	}
	rule := ""
	if rec.Rule != nil {
		rule = *rec.Rule
	}
	attrs := []attribute.KeyValue{KeyMethod.String(rec.Method), KeyAgent.String(rec.Agent), KeySession.String(rec.Session),
		KeyEffect.String(rec.Decision), KeyRule.String(rule), KeyLayer.String(rec.Layer), KeySource.String(rec.Source),
		KeyDecisionID.String(rec.DecisionID), KeyEvCount.Int(ev.Items), KeyEvTypes.StringSlice(ev.Types), KeyEvKinds.StringSlice(ev.Kinds)}
	if rec.ParentSession != "" {
		attrs = append(attrs, KeyParent.String(rec.ParentSession))
	}
	if rec.ToolCallID != "" {
		attrs = append(attrs, KeyToolCall.String(rec.ToolCallID))
	}
	if rec.UserChoice != "" {
		attrs = append(attrs, KeyChoice.String(rec.UserChoice))
	}
	ctx, span := t.Tracer.Start(ctx, "policy decision", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	t.Logger.Emit(ctx, audit.OTLPRecord(rec))
	span.End()
	t.m.decisions.Add(ctx, 1, metric.WithAttributes(KeyEffect.String(rec.Decision), KeyRule.String(rule), KeyLayer.String(rec.Layer)))
	if rec.UserChoice != "" {
		t.m.asks.Add(ctx, 1, metric.WithAttributes(KeyOutcome.String(rec.UserChoice)))
	}
}

// AgentStarted records an agent process start that began at began (its
// spawn and initialize); restart: not its first start.
func (t *Telemetry) AgentStarted(agent string, began time.Time, restart bool, err error) {
	if t == nil {
		return
	}
	_, span := t.Tracer.Start(context.Background(), "agent start", trace.WithTimestamp(began),
		trace.WithAttributes(KeyAgent.String(agent), KeyRestart.Bool(restart)))
	endWithError(span, err)
	span.End()
	if restart {
		t.m.restarts.Add(context.Background(), 1, metric.WithAttributes(KeyAgent.String(agent)))
	}
}

// AgentExited records an agent process end; crashed: the router did not
// stop it.
func (t *Telemetry) AgentExited(agent string, crashed bool, err error) {
	if t == nil {
		return
	}
	_, span := t.Tracer.Start(context.Background(), "agent exit", trace.WithAttributes(KeyAgent.String(agent), KeyCrashed.Bool(crashed)))
	if crashed {
		endWithError(span, err)
		t.m.crashes.Add(context.Background(), 1, metric.WithAttributes(KeyAgent.String(agent)))
	}
	span.End()
}

// Switch records a session's switch from one agent to another under ctx's
// span, began at began; handoff: a brief of the conversation was prepared
// for the new agent.
func (t *Telemetry) Switch(ctx context.Context, began time.Time, session, from, to string, handoff bool, err error) {
	if t == nil {
		return
	}
	_, span := t.Tracer.Start(ctx, "session switch", trace.WithTimestamp(began),
		trace.WithAttributes(KeySession.String(session), KeyFrom.String(from), KeyTo.String(to), KeyHandoff.Bool(handoff)))
	endWithError(span, err)
	span.End()
	if err == nil {
		t.m.switches.Add(ctx, 1, metric.WithAttributes(KeyTo.String(to)))
	}
}

// Observe registers gauges read at each metric export: open is the
// number of sessions in memory; agents yields each agent's bytes relayed
// to it so far; queues yields the bytes waiting in each destination's
// write queue (agent "" is the editor). They are callbacks: nothing is
// counted on the relay's path.
func (t *Telemetry) Observe(open func() int64, agents, queues func(yield func(agent string, bytes int64))) error {
	if t == nil {
		return nil
	}
	_, err := t.Meter.Int64ObservableGauge("acp_router.sessions.open", metric.WithDescription("Router sessions in memory."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(open())
			return nil
		}))
	if err != nil {
		return err
	}
	_, err = t.Meter.Int64ObservableCounter("acp_router.agent.bytes_relayed", metric.WithUnit("By"),
		metric.WithDescription("Bytes the router wrote to each agent."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			agents(func(agent string, n int64) { o.Observe(n, metric.WithAttributes(KeyAgent.String(agent))) })
			return nil
		}))
	if err != nil {
		return err
	}
	editor, agent := metric.WithAttributes(KeyPeer.String("editor")), KeyPeer.String("agent")
	_, err = t.Meter.Int64ObservableGauge("acp_router.write_queue.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes waiting to be written to the editor and to each agent (the per-destination write queue)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			queues(func(name string, n int64) {
				if name == "" {
					o.Observe(n, editor)
				} else {
					o.Observe(n, metric.WithAttributes(agent, KeyAgent.String(name)))
				}
			})
			return nil
		}))
	return err
}
