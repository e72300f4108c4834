package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
)

// Modes (DESIGN §6, issue 13): the modes the policy keeps agents out of —
// deny_modes, and the modes of the built-in table that approve by
// themselves unless allow_modes allows them. The router enforces them on
// every mode it observes and resets an agent found in one; the guard says
// which are denied, where to move the agent, whether an agent is admitted
// at all (unknown_agents), and audits resets and refusals.
//
// The table finds an agent by the name it gives itself in its initialize
// result, which the router passes to SetAgentInfo, else by its name in the
// config.

// Built-in rule ids of mode decisions, as the audit log and errors name
// them.
const (
	RuleSelfApprovingMode = policy.RuleSelfApprovingMode
	RuleUnlistedMode      = policy.RuleUnlistedMode
	RuleUnknownAgent      = policy.RuleUnknownAgent
)

// SetAgentInfo records the name agent (the config's name for it) gives
// itself: agentInfo.name of its initialize result, "" when it gives none.
// The router calls it with every initialize result it gets, live or
// cached. With a policy in force, an agent the router cannot keep asking
// is logged once, with what to do.
func (g *Guard) SetAgentInfo(agent, info string) {
	if g == nil {
		return
	}
	key := agent + "\x00" + info
	g.agentsMu.Lock()
	if g.infos == nil {
		g.infos, g.reported = map[string]string{}, map[string]bool{}
	}
	g.infos[agent] = info
	first := !g.reported[key]
	g.reported[key] = true
	g.agentsMu.Unlock()
	pol := g.Policy()
	if !first || pol == nil {
		return
	}
	if st := pol.Agent(policy.AgentID{Name: agent, Info: info}); st.Problem != "" {
		g.log.Warn("the permission policy cannot keep this agent asking", "agent", agent, "agentInfo", info,
			"problem", st.Problem, "fix", st.Fix, "refused", st.Refused)
	}
}

// agentID is agent as the built-in table of modes sees it.
func (g *Guard) agentID(agent string) policy.AgentID {
	g.agentsMu.Lock()
	defer g.agentsMu.Unlock()
	return policy.AgentID{Name: agent, Info: g.infos[agent]}
}

// ModeDenied: the policy in force denies agent's mode.
func (g *Guard) ModeDenied(agent, mode string) bool {
	pol := g.Policy()
	return pol != nil && pol.ModeDenied(g.agentID(agent), mode)
}

// ModeFilter is the predicate for the modes and options the editor is
// offered: nil when the policy in force denies no mode of agent.
func (g *Guard) ModeFilter(agent string) func(mode string) bool {
	pol := g.Policy()
	if pol == nil {
		return nil
	}
	id := g.agentID(agent)
	if !pol.MayDenyModes(id) {
		return nil
	}
	return func(mode string) bool { return pol.ModeDenied(id, mode) }
}

// ModeTarget is the mode to set agent back to from a denied one: the first
// of its modes (in its order) that the policy allows and the built-in
// table knows to ask, else the first the policy allows; "" when none.
func (g *Guard) ModeTarget(agent string, modes []string) string {
	pol := g.Policy()
	if pol == nil {
		if len(modes) == 0 {
			return ""
		}
		return modes[0]
	}
	return pol.ModeTarget(g.agentID(agent), modes)
}

// ModeRefusal is the error for an editor request to set agent's denied
// mode; nil when the mode is allowed.
func (g *Guard) ModeRefusal(agent, mode string) error {
	pol := g.Policy()
	if pol == nil {
		return nil
	}
	v := pol.Mode(g.agentID(agent), mode)
	if !v.Denied {
		return nil
	}
	return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: the permission policy does not allow %s's mode %q: %s", agent, mode, v.Why()),
		map[string]string{"agent": agent, "mode": mode, "rule": v.Rule})
}

// RecordModeReset audits the router setting agent back from the denied
// mode from to target in session sid; resetErr is why it could not. The
// record names the rule that denies the mode (deny_modes, the built-in
// table, or allow_modes listing others) and why.
func (g *Guard) RecordModeReset(sid, agent, from, target string, resetErr error) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	v := pol.Mode(g.agentID(agent), from)
	rule, layer := v.Rule, v.Layer
	ev := map[string]string{"mode": from, "resetTo": target}
	if v.Denied {
		ev["why"] = v.Why()
	} else {
		// A reload allowed it meanwhile: the reset still happened.
		rule, layer = policy.RuleDeniedMode, policy.LayerBuiltin
	}
	if resetErr != nil {
		ev["resetError"] = resetErr.Error()
	}
	rec := audit.Record{Time: time.Now(), Session: sid, Agent: agent, Method: "mode",
		Evidence: []any{ev}, Decision: policy.Deny.String(), Rule: &rule, Layer: layer,
		Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	g.write(context.Background(), rec.Time, rec) // a failure is logged by write
}

// RecordChildMode audits subagent session sid (of top-level session
// parent) found in agent's mode the policy denies. The router cannot set a
// child's mode (ACP permits only cancelling one): the record says so, and
// the child's requests are decided in that mode.
func (g *Guard) RecordChildMode(sid, parent, agent, mode string) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	v := pol.Mode(g.agentID(agent), mode)
	if !v.Denied {
		return // a reload allowed it meanwhile
	}
	rule := v.Rule
	ev := map[string]string{"mode": mode, "why": v.Why(),
		"resetError": "a subagent session's mode cannot be set; its requests are decided in this mode"}
	rec := audit.Record{Time: time.Now(), Session: sid, ParentSession: parent, Agent: agent, Method: "mode",
		Evidence: []any{ev}, Decision: policy.Deny.String(), Rule: &rule, Layer: v.Layer,
		Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	g.write(context.Background(), rec.Time, rec) // a failure is logged by write
}

// AdmitAgent says whether the router may open a session on agent: an
// error (-32603, naming the agent, the reason and what to do) when a layer
// says unknown_agents: refuse and the router cannot keep the agent asking.
// A refusal is audited (method session/new).
func (g *Guard) AdmitAgent(agent string) error {
	pol := g.Policy()
	if pol == nil {
		return nil
	}
	id := g.agentID(agent)
	st := pol.Agent(id)
	if !st.Refused {
		return nil
	}
	rule := RuleUnknownAgent
	rec := audit.Record{Time: time.Now(), Agent: agent, Method: acp.MethodSessionNew,
		Evidence: []any{map[string]string{"agentInfo": id.Info, "problem": st.Problem}}, Decision: policy.Deny.String(),
		Rule: &rule, Layer: st.By.Layer, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	g.write(context.Background(), rec.Time, rec) // a failure is logged by write; the agent is refused anyway
	return acp.NewError(acp.CodeInternalError,
		fmt.Sprintf("acp-router: the permission policy refuses agent %q: %s (unknown_agents: refuse, %s). To use it: %s.", agent, st.Problem, st.By.Pos, st.Fix),
		map[string]string{"agent": agent, "agentInfo": id.Info, "rule": rule, "reason": st.Problem})
}
