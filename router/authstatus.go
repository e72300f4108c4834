package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
)

// auth/status (notes/acp-currency.md row 10): every running agent is asked
// and the states merged; the agents' auth/status_update notifications are
// relayed coalesced per agent, so a flood never holds up their sessions.

// authStatus handles auth/status: every agent's state, merged. The
// schema's state is the one the editor acts on: "unauthenticated" if any
// agent that answered needs a sign-in, else "authenticated" if any is,
// else "not_required" if all answered so, else "unknown" (also when no
// agent could answer). accounts are all the agents' accounts, each naming
// its agent in _meta["acp-router"].agent; _meta["acp-router"].agents has
// each configured agent's own answer, or state "unknown" and why. Agents
// that are not running are not started for it. An agent's answer is its
// family's (under the sandbox, one process per set of session roots,
// upstream.Agent.Family): every running process is asked and their states
// merged the same way, since a session may live on any of them.
func (r *Router) authStatus(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	type answer struct {
		State    string            `json:"state"`
		Accounts []json.RawMessage `json:"accounts,omitempty"`
		Reason   string            `json:"reason,omitempty"` // the router's: why it is unknown
	}
	answers := make([][]answer, len(r.agents))
	var wg sync.WaitGroup
	wait, cancel := context.WithTimeout(ctx, r.opts.InitBudget)
	defer cancel()
	for i, a := range r.agents {
		running := a.Running()
		if len(running) == 0 {
			answers[i] = []answer{{State: "unknown", Reason: "not running"}}
			continue
		}
		answers[i] = make([]answer, len(running))
		for j, inst := range running {
			switch {
			case inst.Init() == nil:
				answers[i][j] = answer{State: "unknown", Reason: "not running"}
				continue
			case !acp.Supported(agentCaps(inst).Auth.Status):
				answers[i][j] = answer{State: "unknown", Reason: "does not support auth/status"}
				continue
			}
			wg.Go(func() {
				ans := &answers[i][j]
				res, err := callWait(wait, inst, acp.MethodAuthStatus, params(req))
				if err == nil && json.Unmarshal(res, ans) == nil && ans.State != "" {
					return
				}
				if err == nil {
					err = errors.New("malformed answer")
				}
				*ans = answer{State: "unknown", Reason: "auth/status failed: " + errorText(inst.Agent.Error(inst, err))}
			})
		}
	}
	wg.Wait()
	var states []string
	var accounts []json.RawMessage
	agents := map[string]answer{}
	for i, a := range r.agents {
		// The family's answer: the processes' states merged, their
		// accounts each once; unknown and why when none answered.
		var ans answer
		var own []string
		for _, p := range answers[i] {
			if p.Reason != "" {
				if ans.Reason == "" {
					ans.Reason = p.Reason
				}
				continue
			}
			own = append(own, p.State)
			for _, acc := range p.Accounts {
				if !slices.ContainsFunc(ans.Accounts, func(b json.RawMessage) bool { return bytes.Equal(acc, b) }) {
					ans.Accounts = append(ans.Accounts, acc)
				}
			}
		}
		if len(own) > 0 {
			ans.State, ans.Reason = mergeAuthStates(own), ""
			states = append(states, ans.State)
		} else {
			ans.State = "unknown"
		}
		agents[a.Name()] = ans
		for _, acc := range ans.Accounts {
			if tagged, err := attribute(acc, a.Name()); err == nil {
				accounts = append(accounts, tagged)
			}
		}
	}
	out := map[string]any{"state": mergeAuthStates(states), "_meta": map[string]any{metaKey: map[string]any{"agents": agents}}}
	if len(accounts) > 0 {
		out["accounts"] = accounts
	}
	return mustJSON(out), nil
}

// mergeAuthStates is the router's auth state from its agents' (see
// authStatus). Values the schema does not know count as unknown.
func mergeAuthStates(states []string) string {
	if len(states) == 0 {
		return "unknown"
	}
	n := map[string]int{}
	for _, s := range states {
		n[s]++
	}
	switch {
	case n["unauthenticated"] > 0:
		return "unauthenticated"
	case n["authenticated"] > 0 && n["authenticated"]+n["not_required"] == len(states):
		return "authenticated"
	case n["not_required"] == len(states):
		return "not_required"
	}
	return "unknown"
}

// statusUpdates relays the agents' auth status notifications
// (auth/status_update, Claude's _auth/status_update) to the editor without
// ever holding up an agent. One is written at once, in order with what the
// agent sent before it; then, until the shared lane of the editor's queue
// has room again, later ones wait: each carries the agent's whole state, so
// only the newest one per agent and method waits, and those it replaces are
// dropped, counted and logged. A flood from one agent costs one pending
// message and one lane's worth of queue, and neither stalls that agent's
// sessions (its read loop never waits for them) nor anyone else's.
type statusUpdates struct {
	r       *Router
	mu      sync.Mutex
	pending map[string]statusUpdate // by agent + method
	order   []string
	running bool
	drops   *drops
}

type statusUpdate struct {
	method string
	params json.RawMessage
}

func newStatusUpdates(r *Router) *statusUpdates {
	return &statusUpdates{r: r, pending: map[string]statusUpdate{},
		drops: newDrops(r.log, hclog.Info, "auth status updates replaced by a newer one before they were written (coalesced)")}
}

// isStatusUpdate: method is a notification statusUpdates coalesces.
func isStatusUpdate(method string) bool {
	return method == acp.MethodAuthStatusUpdate || method == "_auth/status_update"
}

// add queues p (already attributed) from agent, replacing what waits.
func (u *statusUpdates) add(agent, method string, p json.RawMessage) {
	key := agent + "\x00" + method
	u.mu.Lock()
	if !u.running {
		u.running = true
		u.mu.Unlock()
		u.write(statusUpdate{method, p})
		u.r.spawn(u.run)
		return
	}
	_, replaced := u.pending[key]
	if !replaced {
		u.order = append(u.order, key)
	}
	u.pending[key] = statusUpdate{method, p}
	u.mu.Unlock()
	if replaced {
		u.drops.add(1, "agent", agent, "method", method)
	}
}

// write queues m for the editor; it never waits.
func (u *statusUpdates) write(m statusUpdate) {
	if err := u.r.editor.Notify(context.Background(), m.method, paramsAny(m.params)); err != nil {
		u.r.log.Debug("cannot forward notification", "method", m.method, "error", err)
	}
}

// run writes what waits, one at a time, each once the shared lane of the
// editor's queue has room; it ends when nothing waits.
func (u *statusUpdates) run() {
	for {
		u.r.waitEditor("")
		u.mu.Lock()
		if len(u.order) == 0 {
			u.running = false
			u.mu.Unlock()
			return
		}
		key := u.order[0]
		u.order = u.order[1:]
		m := u.pending[key]
		delete(u.pending, key)
		u.mu.Unlock()
		u.write(m)
	}
}
