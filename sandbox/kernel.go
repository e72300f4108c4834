package sandbox

import (
	"errors"
	"sync"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// The kernel's half seen from a decision (issue 29 req. 5): the paths an
// agent's processes cannot read, for policy.Request.Kernel.

// maxHolds bounds the confined starts an agent's guard remembers: past
// it, nothing is credited to the kernel for the agent.
const maxHolds = 32

// agentGuard is the kernel guard of one agent: a path is hidden when
// every process of the agent this router started hides it. One start
// that was not confined (best-effort) and the guard credits nothing: that
// process may still run.
type agentGuard struct {
	mu    sync.Mutex
	loose bool
	holds []*masks
}

func (g *agentGuard) Hides(p string) bool {
	g.mu.Lock()
	holds := g.holds
	loose := g.loose || len(holds) == 0 || len(holds) > maxHolds
	g.mu.Unlock()
	if loose {
		return false
	}
	for _, m := range holds {
		if !m.hides(p) {
			return false
		}
	}
	return true
}

// noteStart records an agent start in its guard: the plan it runs under,
// or nil for an unconfined start.
func (c *Confiner) noteStart(agent string, plan *Plan) {
	v, _ := c.guards.LoadOrStore(agent, &agentGuard{})
	g := v.(*agentGuard)
	m := (*masks)(nil)
	if plan != nil {
		m = newMasks(plan)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m == nil {
		g.loose = true
		return
	}
	g.holds = append(g.holds, m)
}

// Kernel is the kernel guard of a request agent sends with method:
// session/request_permission asks for the agent's own tools, which run in
// its process tree, under its profile; terminal/create of a confined agent
// runs under the same plan (the router rewrites it for the terminal
// helper, which resolves the masks again when it starts and refuses to run
// the command unconfined), so what every start of the agent hides, the
// terminal hides too. The editor's file reads (fs/*) run outside it: nil,
// as for an agent that ever ran unconfined or was never started confined.
func (c *Confiner) Kernel(agent, method string) extract.KernelGuard {
	if c == nil || method != acp.MethodRequestPermission && method != acp.MethodTerminalCreate {
		return nil
	}
	v, ok := c.guards.Load(agent)
	if !ok {
		return nil
	}
	g := v.(*agentGuard)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.loose || len(g.holds) == 0 || len(g.holds) > maxHolds {
		return nil
	}
	return g
}

// Preview is the kernel guard agent a would get if it started now with
// its roots at cwd, for `acp-router policy explain --sandbox`: its profile
// derived and resolved on this machine. An error says why it could not be
// confined (the kernel, the profile).
func (c *Confiner) Preview(a config.Agent, cwd string) (extract.KernelGuard, error) {
	env := AgentEnv(a)
	env.Roots = []string{cwd}
	prof, probs := Derive(c.policy(), a, env)
	for _, p := range probs {
		if p.Error {
			return nil, errors.New(p.Msg)
		}
	}
	if err := Available(); err != nil {
		return nil, err
	}
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		return nil, err
	}
	m := newMasks(plan)
	if m == nil {
		return nil, errors.New("the sandbox is not implemented here")
	}
	return &agentGuard{holds: []*masks{m}}, nil
}

func (c *Confiner) policy() *policy.Policy {
	if c.Policy == nil {
		return nil
	}
	return c.Policy()
}
