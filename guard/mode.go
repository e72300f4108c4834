package guard

import (
	"fmt"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
)

// deny_modes (DESIGN §6): the modes the policy keeps agents out of. The
// router enforces them on every mode it observes and resets an agent found
// in one; the guard says which are denied and audits the resets.

// ModeDenied: the policy in force denies agent's mode.
func (g *Guard) ModeDenied(agent, mode string) bool {
	pol := g.Policy()
	return pol != nil && pol.ModeDenied(agent, mode)
}

// ModeFilter is the predicate for the modes and options the editor is
// offered: nil when the policy in force denies no mode.
func (g *Guard) ModeFilter(agent string) func(mode string) bool {
	pol := g.Policy()
	if pol == nil || len(pol.DenyModes()) == 0 {
		return nil
	}
	return func(mode string) bool { return pol.ModeDenied(agent, mode) }
}

// ModeRefusal is the error for an editor request to set agent's denied
// mode; nil when the mode is allowed.
func (g *Guard) ModeRefusal(agent, mode string) error {
	if !g.ModeDenied(agent, mode) {
		return nil
	}
	return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: the permission policy does not allow %s's mode %q (deny_modes)", agent, mode),
		map[string]string{"agent": agent, "mode": mode, "rule": policy.RuleDeniedMode})
}

// RecordModeReset audits the router setting agent back from the denied
// mode from to target in session sid; resetErr is why it could not.
func (g *Guard) RecordModeReset(sid, agent, from, target string, resetErr error) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	rule := policy.RuleDeniedMode
	ev := map[string]string{"mode": from, "resetTo": target}
	if resetErr != nil {
		ev["resetError"] = resetErr.Error()
	}
	rec := audit.Record{Time: time.Now(), Session: sid, Agent: agent, Method: "mode",
		Evidence: []any{ev}, Decision: policy.Deny.String(), Rule: &rule, Layer: modeLayer(pol, agent, from),
		Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	g.write(rec) // a failure is logged by write
}

// modeLayer names the layer whose deny_modes forbids agent's mode.
func modeLayer(pol *policy.Policy, agent, mode string) string {
	for _, l := range pol.Layers() {
		for _, m := range l.DenyModes {
			if (m.Agent == "*" || m.Agent == agent) && m.Mode == mode {
				return l.Name
			}
		}
	}
	return policy.LayerBuiltin
}
