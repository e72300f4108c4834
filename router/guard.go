package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/upstream"
)

// The permission policy at the router (DESIGN §6): which agent requests are
// decided, the evidence the router keeps for them, grants and approvals,
// and the audit log. Applying a decision to each kind of request is in
// enforce.go; deny_modes in modes.go.

// Guard holds the permission policy in force, the filesystem the policy
// resolves paths against, and the audit log. A reload swaps the policy
// atomically; a decision uses the policy it started with.
type Guard struct {
	pol  atomic.Pointer[policy.Policy]
	fs   policy.FS
	home string

	auditPath string
	auditMax  int64
	mu        sync.Mutex // guards audit; serializes its writes
	audit     *audit.Log
}

// NewGuard returns a guard enforcing p (nil: none until Set), logging every
// decision to the audit log at auditPath, rotated at auditMax bytes (0: the
// audit package's default). fs resolves symlinks (OSFS outside tests); home
// is ${home} and ~. The log is opened with the first policy: a policy whose
// decisions cannot be audited is not enforced but refused.
func NewGuard(p *policy.Policy, auditPath string, auditMax int64, fs policy.FS, home string) (*Guard, error) {
	g := &Guard{fs: fs, home: home, auditPath: auditPath, auditMax: auditMax}
	if err := g.Set(p); err != nil {
		return nil, err
	}
	return g, nil
}

// Policy is the policy in force.
func (g *Guard) Policy() *policy.Policy { return g.pol.Load() }

// Set replaces the policy in force (reload), opening the audit log first if
// it is not open yet.
func (g *Guard) Set(p *policy.Policy) error {
	if p != nil {
		g.mu.Lock()
		if g.audit == nil {
			if g.auditPath == "" {
				g.mu.Unlock()
				return errors.New("audit log: no file (set audit.file, or HOME or XDG_STATE_HOME)")
			}
			l, err := audit.Open(g.auditPath, audit.Options{MaxBytes: g.auditMax})
			if err != nil {
				g.mu.Unlock()
				return fmt.Errorf("audit log: %w", err)
			}
			g.audit = l
		}
		g.mu.Unlock()
	}
	g.pol.Store(p)
	return nil
}

// Close closes the audit log.
func (g *Guard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.audit == nil {
		return nil
	}
	return g.audit.Close()
}

// write appends one record to the audit log.
func (g *Guard) write(rec audit.Record) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.audit == nil {
		return errors.New("the audit log is not open")
	}
	rec.DecisionID = g.audit.NewID()
	return g.audit.Write(rec)
}

// policy is the policy in force, nil when the router enforces none.
func (r *Router) policy() *policy.Policy {
	if r.opts.Guard == nil {
		return nil
	}
	return r.opts.Guard.Policy()
}

// decided: the agent requests the policy decides.
func decided(method string) bool {
	switch method {
	case acp.MethodRequestPermission, acp.MethodReadTextFile, acp.MethodWriteTextFile, acp.MethodTerminalCreate:
		return true
	}
	return false
}

// Built-in rule ids of the router's own safeguards (the policy package has
// the others).
const (
	ruleInternal = "acp-router:internal-error"
	ruleAudit    = "acp-router:audit-unavailable"
)

// Bounds on the evidence kept per session.
const (
	maxTools       = 1024 // tool calls tracked per session and turn
	maxToolUpdates = 64   // updates kept per tool call
)

// toolState is what the agent said about one of its tool calls: the
// policy's evidence for a permission request about it, and its content,
// to which a deny note is appended.
type toolState struct {
	updates  []json.RawMessage // kind, title, locations, rawInput, content of each update
	content  json.RawMessage   // the latest content
	title    string
	kind     string
	overflow bool // more updates than kept: never allowed without asking
}

func toolKey(agent, id string) string { return agent + "\x00" + id }

// toolEvidence is the part of a tool_call / tool_call_update the policy
// reads.
type toolEvidence struct {
	Kind      json.RawMessage `json:"kind,omitempty"`
	Title     *string         `json:"title,omitempty"`
	Locations json.RawMessage `json:"locations,omitempty"`
	RawInput  json.RawMessage `json:"rawInput,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// trackToolLocked records a tool call update of agent for the policy.
// Called with s.mu held, in the agent's read path.
func (s *Session) trackToolLocked(agent string, up *updateFields) {
	if up.ToolCallID == "" {
		return
	}
	key := toolKey(agent, up.ToolCallID)
	ts := s.tools[key]
	if ts == nil {
		if s.tools == nil {
			s.tools = map[string]*toolState{}
		}
		if len(s.tools) >= maxTools {
			// Nothing is forgotten: a tool call the router cannot keep
			// evidence for is asked about, never allowed.
			s.tools[key] = &toolState{overflow: true}
			return
		}
		ts = &toolState{}
		s.tools[key] = ts
	}
	if ts.overflow {
		return
	}
	if len(ts.updates) >= maxToolUpdates {
		ts.overflow, ts.updates = true, nil
		return
	}
	ev := toolEvidence{Kind: up.ToolKind, Title: up.Title, Locations: up.Locations, RawInput: up.RawInput, Content: up.Content}
	b, err := json.Marshal(ev)
	if err != nil {
		ts.overflow, ts.updates = true, nil
		return
	}
	ts.updates = append(ts.updates, b)
	if up.Content != nil {
		ts.content = up.Content
	}
	if up.Title != nil {
		ts.title = *up.Title
	}
	if len(up.ToolKind) > 0 {
		json.Unmarshal(up.ToolKind, &ts.kind)
	}
}

// approval is a tool call the policy or the user approved in the running
// turn: it covers the direct calls that carry it out (DESIGN §6).
type approval struct {
	agent  string
	ev     *policy.Evidence
	source string
	rule   string
}

// grant is an "always" choice of the user, held by the router for the
// session: later requests of the agent whose evidence it covers are allowed
// (or denied) without asking.
type grant struct {
	agent  string
	effect policy.Effect
	ev     *policy.Evidence
}

// verdict is a decision for one agent request, and what it is about.
type verdict struct {
	effect  policy.Effect
	dec     policy.Decision
	source  string // for the audit log: rule, default, builtin, grant, user
	rule    string
	layer   string
	message string
	latency time.Duration

	method string
	s      *Session
	agent  string
	toolID string // the agent's tool call id (permission requests)
}

// errorMessage is the message of the error a denied direct call gets.
func (v *verdict) errorMessage() string {
	if v.rule == "" {
		return fmt.Sprintf("acp-router: denied by the %s layer's default", v.layer)
	}
	if v.message == "" {
		return "acp-router: denied by " + v.rule
	}
	return fmt.Sprintf("acp-router: denied by %s: %s", v.rule, v.message)
}

// decide decides one agent request with the policy in force: the
// policy's rules and default first (deny always wins), then the session's
// grants, then, for a direct call, the approvals of the running turn.
func (r *Router) decide(pol *policy.Policy, inst *upstream.Instance, method string, p json.RawMessage) (*verdict, error) {
	start := time.Now()
	agent := inst.Agent.Name()
	var ref struct {
		SessionID string `json:"sessionId"`
		ToolCall  struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
	}
	json.Unmarshal(p, &ref)
	r.mu.Lock()
	s := r.downs[downKey(inst, ref.SessionID)]
	r.mu.Unlock()
	if s == nil {
		return nil, errUnknownSession(ref.SessionID)
	}
	g := r.opts.Guard
	v := &verdict{method: method, s: s, agent: agent, toolID: ref.ToolCall.ToolCallID}
	req := &policy.Request{Method: method, Params: p, FS: requestFS(g.fs),
		Session: policy.Session{Agent: agent, Cwd: s.Cwd, Roots: s.roots, Home: g.home}}
	s.mu.Lock()
	if d := s.down[agent]; d != nil {
		req.Session.Mode, _, _, _ = merge.CurrentMode(d.view)
	}
	overflow := false
	if ts := s.tools[toolKey(agent, v.toolID)]; method == acp.MethodRequestPermission && ts != nil {
		req.Updates, overflow = slices.Clone(ts.updates), ts.overflow
	}
	grants, approvals := slices.Clone(s.grants), slices.Clone(s.approvals)
	s.mu.Unlock()

	v.dec = r.decideSafely(pol, req)
	d := &v.dec
	v.effect, v.source, v.rule, v.layer, v.message = d.Effect, string(d.Source), d.Rule, d.Layer, d.Message
	if overflow && v.effect == policy.Allow {
		v.effect, v.source, v.rule, v.layer = policy.Ask, string(policy.SourceBuiltin), policy.RuleOpaque, policy.LayerBuiltin
		v.message = "the tool call had more updates than the router keeps as evidence"
	}
	if v.effect != policy.Deny && d.Evidence != nil && d.Rule != policy.RuleDeniedMode {
		for _, gr := range grants {
			if gr.agent == agent && gr.effect == policy.Deny && gr.ev.Covers(d.Evidence) {
				v.effect, v.source, v.rule, v.layer = policy.Deny, "grant", "", "session"
				v.message = "you chose to always reject this in this session"
				break
			}
		}
	}
	if v.effect == policy.Ask && d.Evidence != nil && d.Rule != policy.RuleDeniedMode {
		for _, gr := range grants {
			if gr.agent == agent && gr.effect == policy.Allow && gr.ev.Covers(d.Evidence) {
				v.effect, v.source, v.rule, v.layer, v.message = policy.Allow, "grant", "", "session", ""
				break
			}
		}
	}
	if v.effect == policy.Ask && method != acp.MethodRequestPermission && d.Evidence != nil {
		for _, a := range approvals {
			if a.agent == agent && a.ev.Covers(d.Evidence) {
				v.effect, v.source, v.rule, v.layer, v.message = policy.Allow, a.source, a.rule, "turn", ""
				break
			}
		}
	}
	v.latency = time.Since(start)
	return v, nil
}

// decideSafely is Decide that turns an internal error into a deny (fail
// closed, DESIGN §6).
func (r *Router) decideSafely(pol *policy.Policy, req *policy.Request) (d policy.Decision) {
	defer func() {
		if e := recover(); e != nil {
			r.log.Error("internal error deciding a request; denied", "method", req.Method, "panic", e)
			d = policy.Decision{Effect: policy.Deny, Rule: ruleInternal, Layer: policy.LayerBuiltin,
				Source: policy.SourceBuiltin, Method: req.Method, PolicyHash: pol.Hash(),
				Message: fmt.Sprintf("internal error while deciding: %v", e)}
		}
	}()
	return pol.Decide(req)
}

// approveLocked records an approved tool call for the running turn.
func (s *Session) approveLocked(v *verdict) {
	if v.dec.Evidence != nil {
		s.approvals = append(s.approvals, approval{agent: v.agent, ev: v.dec.Evidence, source: v.source, rule: v.rule})
	}
}

// grantLocked remembers an "always" choice of the user.
func (s *Session) grantLocked(v *verdict, effect policy.Effect) {
	if v.dec.Evidence != nil {
		s.grants = append(s.grants, grant{agent: v.agent, effect: effect, ev: v.dec.Evidence})
	}
}

// auditItem is one piece of evidence as the audit log shows it: paths,
// commands and domains, never file contents or environment values.
type auditItem struct {
	Type     string        `json:"type"`
	Kinds    []policy.Kind `json:"kinds,omitempty"`
	Path     string        `json:"path,omitempty"`
	Forms    []string      `json:"forms,omitempty"`
	Command  []string      `json:"command,omitempty"`
	Env      []string      `json:"env,omitempty"`
	Domain   string        `json:"domain,omitempty"`
	Opaque   string        `json:"opaque,omitempty"`
	Refused  string        `json:"refused,omitempty"`
	Decision string        `json:"decision"`
	Rule     string        `json:"rule,omitempty"`
}

func auditEvidence(d *policy.Decision) []auditItem {
	out := make([]auditItem, 0, len(d.Findings))
	for _, f := range d.Findings {
		it := f.Item
		if it == nil {
			continue
		}
		a := auditItem{Type: it.Type.String(), Kinds: it.Kinds, Path: it.Path, Command: it.Argv, Env: it.Env,
			Domain: it.Domain, Opaque: it.Opaque, Refused: it.Refused, Decision: f.Effect.String(), Rule: f.Rule}
		if len(it.Forms) > 1 || (len(it.Forms) == 1 && it.Forms[0] != it.Path) {
			a.Forms = it.Forms
		}
		out = append(out, a)
	}
	return out
}

// record writes v to the audit log with the user's choice, if any. An
// allow that cannot be audited must not happen: the caller denies when
// record fails.
func (r *Router) record(v *verdict, userChoice string) error {
	g := r.opts.Guard
	if g == nil {
		return nil
	}
	rec := audit.Record{Time: time.Now(), Session: v.s.ID, Agent: v.agent,
		Method: v.method, ToolCallID: v.toolID, Evidence: auditEvidence(&v.dec), Decision: v.effect.String(),
		Layer: v.layer, Source: v.source, UserChoice: userChoice, PolicyHash: v.dec.PolicyHash,
		LatencyUs: v.latency.Microseconds()}
	if v.rule != "" {
		rec.Rule = &v.rule
	}
	err := g.write(rec)
	if err != nil {
		r.log.Error("cannot write the audit log", "error", err)
	}
	return err
}

// auditFailed turns an allow that could not be audited into a deny.
func (v *verdict) auditFailed(err error) {
	v.effect, v.source, v.rule, v.layer = policy.Deny, string(policy.SourceBuiltin), ruleAudit, policy.LayerBuiltin
	v.message = "the audit log cannot be written: " + err.Error()
}
