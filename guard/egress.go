package guard

import (
	"context"
	"time"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
)

// MethodNetRefused names the audit records of connections an agent's
// sandbox refused (issue 29 req. 6): the router's egress proxy, not a
// request the agent sent.
const MethodNetRefused = "acp-router/net_refused"

// NetRefused is one connection the egress proxy refused.
type NetRefused struct {
	Agent string
	Host  string
	Port  int
	// Rule is the deny rule's id ("" when no rule did: default: deny, a
	// loopback port not declared); Reason says what refused it.
	Rule   string
	Reason string
}

// RecordNetRefused audits a refused connection. Safe on a nil Guard or
// without a policy (nothing is written).
func (g *Guard) RecordNetRefused(n NetRefused) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	rec := audit.Record{Agent: n.Agent, Method: MethodNetRefused,
		Evidence: []any{map[string]any{"domain": n.Host, "port": n.Port, "reason": n.Reason}},
		Decision: policy.Deny.String(), Source: string(policy.SourceBuiltin), Layer: policy.LayerBuiltin, PolicyHash: pol.Hash()}
	if n.Rule != "" {
		rule := n.Rule
		rec.Rule, rec.Source, rec.Layer = &rule, string(policy.SourceRule), ""
	}
	now := time.Now()
	rec.Time = now
	if err := g.write(context.Background(), now, rec); err != nil {
		g.opts.Logger.Error("cannot audit a refused connection", "agent", n.Agent, "error", err)
	}
}
