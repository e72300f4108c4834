package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// The effects of a verdict.
type Effect = policy.Effect

const (
	Allow = policy.Allow
	Ask   = policy.Ask
	Deny  = policy.Deny
)

// Built-in rule ids: the guard's own safeguards, and the policy's deny_modes.
const (
	RuleDeniedMode = policy.RuleDeniedMode

	RuleInternal = "acp-router:internal-error"
	RuleAudit    = "acp-router:audit-unavailable"
	RuleTimeout  = "acp-router:decision-timeout"
)

// Request is one agent request for the policy to decide.
type Request struct {
	SessionID string // the router session's id, for the audit log
	// ParentID is the top-level session of a subagent session (SessionID
	// is the child's), for the audit log; "" for a top-level session.
	ParentID string
	Agent    string // the agent's name
	Mode     string // the agent's current mode in the session
	Method   string
	Params   json.RawMessage // the agent's params (its own session id)
	// ToolShown: the editor was shown the tool call a permission request
	// is about (the router forwarded an update or a request naming it).
	// If the session keeps no update of it (they were of an earlier turn),
	// the editor shows more of it than the policy would see: not allowed.
	ToolShown bool
	// McpServer is, for mcp/message, the name the session declared for
	// the ACP MCP server (extract.Request.McpServer).
	McpServer string
	// McpAmbiguous: McpServer does not name the server alone in its
	// session (extract.Request.McpAmbiguous).
	McpAmbiguous bool
	// Turn is the session's turn when the request arrived (Session.Turn,
	// read in the order the agent sent it and its turn's answer); 0: the
	// turn it is decided in. A decision may run after its turn ended: the
	// approval it gives must not cover the next turn's calls.
	Turn uint64
}

// Verdict is the decision on one request and what it is about. Effect is
// what the router carries out; Record may still turn an allow into a deny.
type Verdict struct {
	Effect  Effect
	Source  string // for the audit log: rule, default, builtin, grant, user, turn
	Rule    string // the deciding rule's id, "" for a default
	Layer   string
	Message string
	Latency time.Duration

	Method     string
	SessionID  string
	ParentID   string // the top-level session of a subagent session
	Agent      string
	ToolCallID string // the agent's tool call id (permission requests)

	dec  policy.Decision
	sess *Session
	// hidden: the tool call of a permission request has updates the
	// editor never got; a user's allow approves and grants nothing.
	hidden bool
	// turn is the session's turn the request arrived in (approve).
	turn uint64
	// start and trace are when the decision started and the span it was
	// made under (the agent's request in its turn), for its own span.
	start time.Time
	trace trace.SpanContext
	// answeredBy is who answered the ask (RecordAnswer); the zero value
	// for the policy. refused: that answer, or the ask, was not taken.
	answeredBy Answerer
	refused    bool
}

// Answerer is who answered an ask (issue 30): a client of the router's,
// by its token's name, or the editor that launched the router over stdio.
type Answerer struct {
	Name   string
	Editor bool
}

// EditorAnswerer is the editor that launched the router: the one client
// there is when no hub is in front of it.
var EditorAnswerer = Answerer{Name: policy.AnswererEditor, Editor: true}

func (a Answerer) String() string {
	switch {
	case a.Editor:
		return "the editor"
	case a.Name == "":
		return "a client that did not say who it is"
	}
	return fmt.Sprintf("client %q", a.Name)
}

// may: a may answer an ask only answerers may answer (nil: anyone). The
// zero Answerer is the policy's own allow, which an ask restricted to
// some answerers is not.
func may(answerers *policy.Answerers, a Answerer) bool {
	return answerers.Allows(a.Name, a.Editor)
}

// Answerers is who may answer v's ask when a rule says so (answered_by);
// nil when anyone may, or v is not an ask. Names is empty when no one
// may: carry such an ask out with RecordUnanswerable.
func (v *Verdict) Answerers() *policy.Answerers {
	if v.Effect != policy.Ask {
		return nil
	}
	return v.dec.Answerers
}

// AnswerRefused: RecordAnswer did not take the answer (its client may not
// answer the ask), or RecordUnanswerable refused the ask; v is a deny.
func (v *Verdict) AnswerRefused() bool { return v.refused }

// ErrorMessage is the message of the error a denied direct call gets.
func (v *Verdict) ErrorMessage() string {
	if v.Rule == "" {
		return fmt.Sprintf("acp-router: denied by the %s layer's default", v.Layer)
	}
	if v.Message == "" {
		return "acp-router: denied by " + v.Rule
	}
	return fmt.Sprintf("acp-router: denied by %s: %s", v.Rule, v.Message)
}

// DenyError is the JSON-RPC error a denied direct call gets (DESIGN §6).
func (v *Verdict) DenyError() error {
	return acp.NewError(acp.CodeInternalError, v.ErrorMessage(),
		map[string]any{"rule": v.Rule, "decision": policy.Deny.String(), "layer": v.Layer, "source": v.Source})
}

// AuditFailed: the verdict was turned into a deny because the audit log
// could not record it.
func (v *Verdict) AuditFailed() bool { return v.Rule == RuleAudit }

// Decide decides one agent request of session s with the policy in force:
// the policy's rules and default first (deny always wins), then the
// session's grants, then, for a direct call, the approvals of the running
// turn. It waits on the filesystem (symlinks) at most DecideTimeout, then
// denies: call it off any read loop that other sessions' traffic needs.
// With no policy in force the verdict is ask (the editor decides).
func (g *Guard) Decide(ctx context.Context, s *Session, req Request) *Verdict {
	start := time.Now()
	v := &Verdict{Method: req.Method, SessionID: req.SessionID, ParentID: req.ParentID, Agent: req.Agent, sess: s,
		start: start, trace: trace.SpanContextFromContext(ctx)}
	var ref struct {
		ToolCall struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
	}
	json.Unmarshal(req.Params, &ref)
	v.ToolCallID = ref.ToolCall.ToolCallID
	pol, links := g.inForce()
	if pol == nil {
		v.Effect, v.Source, v.Layer = policy.Ask, string(policy.SourceBuiltin), policy.LayerBuiltin
		return v
	}
	if s == nil {
		// A nil *Session keeps nothing: the policy alone decides, with no
		// cwd (nothing is "in the project"), and Record keeps nothing.
		s = &Session{}
	}
	preq := g.policyRequest(s, req)
	overflow := false
	forgotten := false
	s.mu.Lock()
	if ts := s.tools[toolKey(req.SessionID, req.Agent, v.ToolCallID)]; req.Method == acp.MethodRequestPermission && ts != nil {
		preq.Updates, overflow, v.hidden = slices.Clone(ts.updates), ts.overflow, ts.hidden
	} else if req.Method == acp.MethodRequestPermission && req.ToolShown {
		forgotten = true
	}
	grants, approvals := slices.Clone(s.grants), slices.Clone(s.approvals)
	v.turn = s.turn
	if req.Turn != 0 {
		v.turn = req.Turn
	}
	s.mu.Unlock()

	v.dec = g.decideBounded(ctx, pol, preq)
	d := &v.dec
	if hd, ok := links.verdict(d.Evidence, preq.FS); ok && hd.Effect > d.Effect {
		// A hard link to a denied file: the rule that denies the file.
		d.Effect, d.Source, d.Rule, d.Layer, d.Message = hd.Effect, hd.Source, hd.Rule, hd.Layer, hd.Message
	}
	if od, ok := g.own.Load().Verdict(d.Evidence); ok && d.Effect == policy.Allow {
		// The router's own files: never changed without asking (own.go).
		d.Effect, d.Source, d.Rule, d.Layer, d.Message = od.Effect, od.Source, od.Rule, od.Layer, od.Message
	}
	v.Effect, v.Source, v.Rule, v.Layer, v.Message = d.Effect, string(d.Source), d.Rule, d.Layer, d.Message
	if overflow && v.Effect == policy.Allow {
		v.Effect, v.Source, v.Rule, v.Layer = policy.Ask, string(policy.SourceBuiltin), policy.RuleOpaque, policy.LayerBuiltin
		v.Message = "the tool call had more updates than the router keeps as evidence"
	}
	if v.Effect != policy.Deny && d.Evidence != nil && d.Rule != policy.RuleDeniedMode {
		for _, gr := range grants {
			if gr.agent == req.Agent && gr.effect == policy.Deny && gr.ev.Covers(d.Evidence) {
				v.Effect, v.Source, v.Rule, v.Layer = policy.Deny, "grant", "", "session"
				v.Message = "you chose to always reject this in this session"
				break
			}
		}
	}
	// A tool call whose evidence overflowed is asked about: a grant
	// covers only what the router still sees of it.
	if v.Effect == policy.Ask && d.Evidence != nil && d.Rule != policy.RuleDeniedMode && !overflow {
		for _, gr := range grants {
			// An "always" given by someone the ask's rules do not let
			// answer it covers nothing of it.
			if gr.agent == req.Agent && gr.effect == policy.Allow && may(d.Answerers, gr.by) && gr.ev.Covers(d.Evidence) {
				v.Effect, v.Source, v.Rule, v.Layer, v.Message = policy.Allow, "grant", "", "session", ""
				break
			}
		}
	}
	if forgotten && v.Effect == policy.Allow {
		// The editor shows the tool call as the agent's earlier updates
		// made it; the policy sees only the request. Not reconciled: ask.
		v.Effect, v.Source, v.Rule, v.Layer = policy.Ask, string(policy.SourceBuiltin), policy.RuleOpaque, policy.LayerBuiltin
		v.Message = "the tool call was shown to the editor with updates the router no longer keeps (an earlier turn's)"
	}
	if v.Effect == policy.Ask && req.Method != acp.MethodRequestPermission && d.Evidence != nil {
		for _, a := range approvals {
			if a.agent == req.Agent && may(d.Answerers, a.by) && a.ev.Covers(d.Evidence) {
				v.Effect, v.Source, v.Rule, v.Layer, v.Message = policy.Allow, a.source, a.rule, "turn", ""
				break
			}
		}
	}
	v.Latency = time.Since(start)
	return v
}

// policyRequest is req as the policy reads it, in session s: its cwd,
// roots and filesystem, the agent's identity and kernel guard.
func (g *Guard) policyRequest(s *Session, req Request) *extract.Request {
	return &extract.Request{Method: req.Method, Params: req.Params, McpServer: req.McpServer, McpAmbiguous: req.McpAmbiguous, FS: requestFS(g.opts.FS, s),
		Session: extract.Session{Agent: req.Agent, AgentInfo: g.agentID(req.Agent).Info, Cwd: s.cwd, Roots: s.roots, Home: g.opts.Home, Mode: req.Mode},
		Kernel:  g.kernelOf(req.Agent, req.Method)}
}

// decideBounded is pol.Decide that fails closed: a panic, or a filesystem
// that does not answer within DecideTimeout (or before ctx ends), is a
// deny for this request only.
func (g *Guard) decideBounded(ctx context.Context, pol *policy.Policy, req *extract.Request) policy.Decision {
	deny := func(rule, msg string) policy.Decision {
		return policy.Decision{Effect: policy.Deny, Rule: rule, Layer: policy.LayerBuiltin,
			Source: policy.SourceBuiltin, Method: req.Method, PolicyHash: pol.Hash(), Message: msg}
	}
	if g.stuck.Load() >= maxStuck {
		return deny(RuleTimeout, fmt.Sprintf("%d decisions are still waiting for the filesystem", maxStuck))
	}
	// The decision runs on a goroutine of the guard's (Close waits for
	// it), so that a filesystem call that does not return holds only it.
	// Given up on, it goes on until the filesystem answers, counted in
	// stuck until then (state: deciding, decided, abandoned) so that a
	// filesystem that never does cannot pile them up.
	const (
		deciding int32 = iota
		decided
		abandoned
	)
	var state atomic.Int32
	done := make(chan policy.Decision, 1)
	g.decisions.Go(func() {
		defer func() {
			if !state.CompareAndSwap(deciding, decided) {
				g.stuck.Add(-1)
			}
		}()
		defer func() {
			if e := recover(); e != nil {
				g.log.Error("internal error deciding a request; denied", "method", req.Method, "panic", e)
				done <- deny(RuleInternal, fmt.Sprintf("internal error while deciding: %v", e))
			}
		}()
		done <- pol.Decide(req)
	})
	timer := time.NewTimer(g.opts.DecideTimeout)
	defer timer.Stop()
	select {
	case d := <-done:
		return d
	case <-timer.C:
	case <-ctx.Done():
	}
	g.stuck.Add(1)
	if !state.CompareAndSwap(deciding, abandoned) {
		g.stuck.Add(-1) // decided meanwhile: its answer stands
		return <-done
	}
	g.log.Error("a decision waited too long for the filesystem; denied", "method", req.Method, "timeout", g.opts.DecideTimeout)
	return deny(RuleTimeout, fmt.Sprintf("the filesystem did not answer within %v", g.opts.DecideTimeout))
}

// Denies: the policy in force denies the request of agent in session s (a
// deny rule matches some of its evidence). updates are the tool call's
// updates for a permission request. The handoff brief uses it to hide what
// an agent may not see.
func (g *Guard) Denies(ctx context.Context, s *Session, agent, method string, p json.RawMessage, updates []json.RawMessage) bool {
	pol := g.Policy()
	if pol == nil || s == nil {
		return false
	}
	d := g.decideBounded(ctx, pol, &extract.Request{Method: method, Params: p, Updates: updates, FS: requestFS(g.opts.FS, s),
		Session: extract.Session{Agent: agent, AgentInfo: g.agentID(agent).Info, Cwd: s.cwd, Roots: s.roots, Home: g.opts.Home}})
	return d.Effect == policy.Deny
}

// RuleUnknownSession: a request naming a session the router does not
// route (never created or announced for that agent), refused.
const RuleUnknownSession = "acp-router:unknown-session"

// RecordRefused audits a request the router refused before any decision:
// it names session id the router does not route. It never waits for the
// audit log (its caller is an agent's read loop, and the request is
// refused whatever the log does): the record is written by the guard's
// refusals writer, in order, which then calls then (the refusal's answer:
// the log is not behind what the agent was told). then is called once, on
// the caller's goroutine when the record is not written (no policy, or
// dropped). Safe on a nil Guard.
func (g *Guard) RecordRefused(agent, method, sessionID, reason string, then func()) {
	pol := g.Policy()
	if pol == nil {
		then()
		return
	}
	rule := RuleUnknownSession
	g.refusals.add(g, then, audit.Record{Time: time.Now(), Session: sessionID, Agent: agent, Method: method,
		Evidence: []any{map[string]string{"refused": reason}}, Decision: policy.Deny.String(), Rule: &rule,
		Layer: policy.LayerBuiltin, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()})
}

// maxRefusals bounds the refusal records waiting to be written; past it
// they are dropped, counted and logged (DESIGN §7). An agent that sends
// this many requests for sessions that do not exist while the log cannot
// be written is refused all the same.
const maxRefusals = 256

// refusals is the writer of RecordRefused's records: one goroutine,
// started with the first record and stopped by Close, fed by a queue of at
// most maxRefusals records.
type refusals struct {
	mu      sync.Mutex
	queue   []refusal
	running bool // the writer goroutine is on (or queue is being drained)
	closed  bool
	done    chan struct{} // closed when the writer stops
	dropped int
}

type refusal struct {
	rec  audit.Record
	then func()
}

// add queues rec for the writer, starting it if it is not on.
func (q *refusals) add(g *Guard, then func(), rec audit.Record) {
	q.mu.Lock()
	if q.closed || len(q.queue) >= maxRefusals {
		q.dropped++
		first := q.dropped == 1
		q.mu.Unlock()
		if first {
			g.log.Warn("refusal records dropped: the audit log is not keeping up", "max", maxRefusals, "agent", rec.Agent, "method", rec.Method)
		}
		then()
		return
	}
	q.queue = append(q.queue, refusal{rec, then})
	start := !q.running
	if start {
		q.running = true
		q.done = make(chan struct{})
	}
	q.mu.Unlock()
	if start {
		go q.write(g)
	}
}

// write writes the queue until it is empty, then stops: a refusal is rare,
// and a goroutine waiting for one would outlive a Guard nobody closes.
func (q *refusals) write(g *Guard) {
	q.mu.Lock()
	for len(q.queue) > 0 {
		r := q.queue[0]
		q.queue[0] = refusal{}
		q.queue = q.queue[1:]
		q.mu.Unlock()
		err := g.write(context.Background(), r.rec.Time, r.rec) // a failure is logged by write
		r.then()
		q.mu.Lock()
		if err != nil && q.closed {
			// Closing, and the log cannot be written: the rest would each
			// wait for it too.
			rest := q.queue
			q.dropped += len(rest)
			q.queue = nil
			q.mu.Unlock()
			for _, r := range rest {
				r.then()
			}
			q.mu.Lock()
		}
	}
	q.queue, q.running = nil, false
	close(q.done)
	q.mu.Unlock()
}

// stop waits for the records queued to be written, or for the first that
// cannot be (a write is bounded by the log's lock timeout; the rest are
// then dropped), and refuses later ones, counting them as dropped; the
// total dropped is logged.
func (q *refusals) stop(g *Guard) {
	q.mu.Lock()
	q.closed = true
	done := q.done
	running := q.running
	q.mu.Unlock()
	if running {
		<-done
	}
	q.mu.Lock()
	dropped := q.dropped
	q.mu.Unlock()
	if dropped > 0 {
		g.log.Warn("refusal records dropped in all", "dropped", dropped)
	}
}

// User choices on a permission request: the kind of the option the user
// selected (schema PermissionOptionKind), or cancelled.
const (
	AllowOnce    = "allow_once"
	AllowAlways  = "allow_always"
	RejectOnce   = "reject_once"
	RejectAlways = "reject_always"
	Cancelled    = "cancelled"
)

// Record writes v to the audit log with the user's choice ("" when the
// policy decided alone) and keeps what the choice means for the session:
// an approval for the turn (a permission request allowed), a grant for
// the session (an "always" choice). An allow that cannot be audited must
// not happen: v becomes a deny (AuditFailed) and the error is returned.
//
// A choice is the editor's answer (RecordAnswer with EditorAnswerer).
func (g *Guard) Record(v *Verdict, choice string) error {
	if choice == "" {
		return g.record(v, "", nil, "")
	}
	return g.RecordAnswer(v, choice, EditorAnswerer)
}

// RecordAnswer is Record of the answer choice that by gave to v's ask. An
// answer from someone the ask's rules do not let answer it (answered_by)
// is not taken (fail closed): it is recorded as cancelled with the
// reason, approves and grants nothing, and v becomes a deny
// (AnswerRefused) whose message says why, to be carried out as one.
func (g *Guard) RecordAnswer(v *Verdict, choice string, by Answerer) error {
	refused := ""
	if a := v.Answerers(); !may(a, by) {
		refused = fmt.Sprintf("%s answered %s, but only %s may answer (%s)", by, choice, a, a.Why())
		choice = Cancelled
	}
	return g.record(v, choice, &by, refused)
}

// RecordUnanswered records v, an ask that ended without an answer (the
// editor's side answered with an error, or the request was withdrawn), as
// cancelled, answered by no one.
func (g *Guard) RecordUnanswered(v *Verdict) error {
	return g.record(v, Cancelled, nil, "")
}

// RecordUnanswerable records v, an ask that cannot be answered (why: no
// client that may answer it can, see Answerers), and makes it a deny
// (AnswerRefused) whose message says why.
func (g *Guard) RecordUnanswerable(v *Verdict, why string) error {
	return g.record(v, "", nil, why)
}

// record writes v with choice, answered by by (nil: no one answered);
// refused says why the answer or the ask was not taken.
func (g *Guard) record(v *Verdict, choice string, by *Answerer, refused string) error {
	if g == nil {
		return nil
	}
	allowed := v.Effect == policy.Allow
	if choice != "" {
		v.Source = "user"
		allowed = choice == AllowOnce || choice == AllowAlways
	}
	rec := audit.Record{Time: time.Now(), Session: v.SessionID, ParentSession: v.ParentID, Agent: v.Agent,
		Method: v.Method, ToolCallID: v.ToolCallID, Evidence: auditEvidence(&v.dec), Decision: v.Effect.String(),
		Layer: v.Layer, Source: v.Source, UserChoice: choice, AnswerRefused: refused, PolicyHash: v.dec.PolicyHash,
		LatencyUs: v.Latency.Microseconds()}
	if v.Rule != "" {
		rec.Rule = &v.Rule
	}
	if by != nil {
		// The name only: a client's token never reaches the guard.
		rec.AnsweredBy = by.Name
		v.answeredBy = *by
	}
	if a := v.Answerers(); a != nil {
		rec.Answerers = a.Names
	}
	if refused != "" {
		allowed = false
		v.Effect, v.Message, v.refused = policy.Deny, refused, true
	}
	start := v.start
	if start.IsZero() {
		start = rec.Time
	}
	if err := g.write(trace.ContextWithSpanContext(context.Background(), v.trace), start, rec); err != nil {
		if allowed {
			v.Effect, v.Source, v.Rule, v.Layer = policy.Deny, string(policy.SourceBuiltin), RuleAudit, policy.LayerBuiltin
			v.Message = "the audit log cannot be written: " + err.Error()
		}
		return err
	}
	if choice == "" {
		if allowed && v.Method == acp.MethodRequestPermission {
			v.sess.approve(v)
		}
		return nil
	}
	switch choice {
	case AllowOnce, AllowAlways:
		if v.hidden {
			// The user answered about the tool call the editor showed;
			// its evidence holds updates the editor never got. Their
			// choice allows this request only: the direct calls and
			// later requests it would cover are asked about.
			return nil
		}
		// What the user approved is what the editor showed them: not
		// what the router read from the tool call's _meta.
		shown := *v
		if v.dec.Evidence != nil {
			shown.dec.Evidence = v.dec.Evidence.Shown()
		}
		if v.Method == acp.MethodRequestPermission {
			v.sess.approve(&shown)
		}
		if choice == AllowAlways {
			v.sess.grant(&shown, policy.Allow)
		}
	case RejectAlways:
		v.sess.grant(v, policy.Deny)
	}
	return nil
}

// auditItem is one piece of evidence as the audit log shows it: paths,
// commands and domains, never file contents or environment values.
type auditItem struct {
	Type     string         `json:"type"`
	Kinds    []extract.Kind `json:"kinds,omitempty"`
	Path     string         `json:"path,omitempty"`
	Forms    []string       `json:"forms,omitempty"`
	Command  []string       `json:"command,omitempty"`
	Env      []string       `json:"env,omitempty"`
	Domain   string         `json:"domain,omitempty"`
	Agent    string         `json:"agent,omitempty"`
	Opaque   string         `json:"opaque,omitempty"`
	Refused  string         `json:"refused,omitempty"`
	Decision string         `json:"decision"`
	Rule     string         `json:"rule,omitempty"`
	// Below is, for a recursive read, the path below it the deciding rule
	// matches; WalkCut why the walk below it was cut short.
	Below   string `json:"below,omitempty"`
	WalkCut string `json:"walkCut,omitempty"`
	// Kernel are the rules the agent's sandbox holds for the item
	// instead of (or with, decides) the rule: what they match is masked.
	Kernel []policy.KernelHold `json:"kernel,omitempty"`
}

func auditEvidence(d *policy.Decision) []auditItem {
	out := make([]auditItem, 0, len(d.Findings))
	for _, f := range d.Findings {
		it := f.Item
		if it == nil {
			continue
		}
		a := auditItem{Type: it.Type.String(), Kinds: it.Kinds, Path: it.Path, Command: it.Argv, Env: it.Env,
			Domain: it.Domain, Agent: it.Agent, Opaque: it.Opaque, Refused: it.Refused, Decision: f.Effect.String(), Rule: f.Rule, Kernel: f.Kernel}
		if len(it.Forms) > 1 || (len(it.Forms) == 1 && it.Forms[0] != it.Path) {
			a.Forms = it.Forms
		}
		for _, m := range f.Matches {
			if m.Rule == f.Rule && m.Layer == f.Layer {
				a.Below, a.WalkCut = m.Below, m.Cut
				break
			}
		}
		out = append(out, a)
	}
	return out
}
