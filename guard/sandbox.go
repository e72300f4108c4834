package guard

import (
	"context"
	"time"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
)

// KernelFunc returns the kernel guard of a request an agent sends with a
// method (sandbox.Confiner.Kernel): what the kernel keeps from the
// processes that carry it out; nil: nothing.
type KernelFunc func(agent, method string) policy.KernelGuard

type kernelFunc struct{ f KernelFunc }

// SetKernel makes every later decision credit the kernel with what k
// says it keeps away (policy.Request.Kernel, issue 29 req. 5). Safe on a
// nil Guard.
func (g *Guard) SetKernel(k KernelFunc) {
	if g != nil {
		g.kernel.Store(&kernelFunc{k})
	}
}

func (g *Guard) kernelOf(agent, method string) policy.KernelGuard {
	if k := g.kernel.Load(); k != nil && k.f != nil {
		return k.f(agent, method)
	}
	return nil
}

// MethodAgentStart names the audit records of agent starts under the
// sandbox (issue 29 req. 6): not an ACP method, a router event.
const MethodAgentStart = "acp-router/agent_start"

// RuleSandbox is the rule of an agent start refused because its sandbox
// profile could not be applied (sandbox.mode: enforce).
const RuleSandbox = "acp-router:sandbox"

// AgentStart is one agent start as the sandbox saw it.
type AgentStart struct {
	Agent string
	Mode  string // enforce | best-effort
	// Confined: the agent runs under the profile Hash (Summary says what
	// it holds); else Reason says why not, and Refused whether the start
	// was refused for it.
	Confined bool
	Refused  bool
	Hash     string
	Summary  string
	Reason   string
}

// RecordAgentStart audits an agent start: its sandbox mode, whether it is
// confined, and its profile's hash and summary. Safe on a nil Guard or
// without a policy (nothing is written: there is no audit log).
func (g *Guard) RecordAgentStart(s AgentStart) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	ev := map[string]any{"sandbox": s.Mode, "confined": s.Confined}
	if s.Hash != "" {
		ev["profile"], ev["summary"] = s.Hash, s.Summary
	}
	if s.Reason != "" {
		ev["reason"] = s.Reason
	}
	rec := audit.Record{Agent: s.Agent, Method: MethodAgentStart, Evidence: []any{ev},
		Decision: policy.Allow.String(), Layer: policy.LayerBuiltin, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	if s.Refused {
		rule := RuleSandbox
		rec.Decision, rec.Rule = policy.Deny.String(), &rule
	}
	now := time.Now()
	rec.Time = now
	if err := g.write(context.Background(), now, rec); err != nil {
		g.opts.Logger.Error("cannot audit an agent start", "agent", s.Agent, "error", err)
	}
}
