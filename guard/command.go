package guard

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// The router's own slash commands (issue 32), decided by the policy before
// the router carries them out: the methods they are decided and audited
// under, each about the agents it names (policy/command.go).
const (
	// MethodSwitch: a switch of the session's agent (/agent NAME, the
	// agent config option, a legacy AGENT:MODE mode, a commands: entry
	// with switch, a /pick that changes the agent).
	MethodSwitch = extract.MethodSwitch
	// MethodTurn: one turn asked of an agent (/NAME TEXT, a commands:
	// entry with a prompt).
	MethodTurn = extract.MethodTurn
	// MethodCompare: /compare, about every agent it names.
	MethodCompare = extract.MethodCompare
	// MethodPick: /pick NAME.
	MethodPick = extract.MethodPick
)

// DecideCommand decides a router command of router session sid (guard
// session s) about agents: the agent switched to, asked or picked, or
// every agent a comparison names. Only rules that name the command's
// method decide it; one no rule names is the user's own action and
// allowed, whatever the default (as it is with no policy in force). A
// decision that fails (a panic, a filesystem that does not answer about
// the cwd) denies. The verdict's Agent is the agent the deciding rule
// matched (the first named when none did).
func (g *Guard) DecideCommand(ctx context.Context, s *Session, sid, method string, agents []string) *Verdict {
	start := time.Now()
	v := &Verdict{Method: method, SessionID: sid, sess: s, start: start, trace: trace.SpanContextFromContext(ctx)}
	if len(agents) > 0 {
		v.Agent = agents[0]
	}
	pol, _ := g.inForce()
	if pol == nil {
		v.Effect, v.Source, v.Rule, v.Layer = policy.Allow, string(policy.SourceBuiltin), policy.RuleUserCommand, policy.LayerBuiltin
		return v
	}
	if s == nil {
		s = &Session{}
	}
	p, _ := json.Marshal(extract.CommandParams{Agents: agents})
	v.dec = g.decideBounded(ctx, pol, &extract.Request{Method: method, Params: p, FS: requestFS(g.opts.FS, s),
		Session: extract.Session{Cwd: s.cwd, Roots: s.roots, Home: g.opts.Home}})
	d := &v.dec
	v.Effect, v.Source, v.Rule, v.Layer, v.Message = d.Effect, string(d.Source), d.Rule, d.Layer, d.Message
	for _, f := range d.Findings {
		if f.Effect == d.Effect && f.Rule == d.Rule && f.Item != nil && f.Item.Agent != "" {
			v.Agent = f.Item.Agent
			break
		}
	}
	v.Latency = time.Since(start)
	return v
}

// DecidesCommand reports whether the policy in force has a rule naming
// the router command method: without one, DecideCommand allows it (and
// the router need not wait for that).
func (g *Guard) DecidesCommand(method string) bool {
	pol := g.Policy()
	return pol != nil && pol.NamesCommand(method)
}

// RecordCommand audits v, a router command's allow or deny, when a rule
// made it, and every deny (a safeguard's too): a command no rule names is
// not recorded (the comparison itself is, by RecordCompare). An allow that cannot be audited becomes a deny
// (AuditFailed) and the error is returned. An ask is recorded with the
// user's answer (RecordAnswer, RecordUnanswered, RecordUnanswerable).
func (g *Guard) RecordCommand(v *Verdict) error {
	if v.Source != string(policy.SourceRule) && v.Effect == policy.Allow {
		return nil
	}
	return g.record(v, "", nil, "")
}
