package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Denied modes (DESIGN §6, issue 13: deny_modes, and the modes that
// approve by themselves unless allow_modes allows them): enforced on every
// mode the router observes — in session/new results, current_mode_update
// and config_option_update — not only on the editor's requests. An agent
// found in a denied mode is set back to its first mode that asks (else its
// first allowed one), the event is audited and shown to the user; if that
// fails, prompts in the session are refused until the agent reports an
// allowed mode.

// admit tells the guard the name inst's agent gives itself (the built-in
// table of modes finds the agent by it) and asks whether the policy admits
// the agent at all (unknown_agents: refuse). Called before every
// downstream session is opened or re-attached.
func (r *Router) admit(inst *upstream.Instance) error {
	r.opts.Guard.SetAgentInfo(inst.Agent.Name(), agentInfoName(inst.Init()))
	return r.opts.Guard.AdmitAgent(inst.Agent.Name())
}

func agentInfoName(res *acp.InitializeResult) string {
	if res == nil || res.AgentInfo == nil {
		return ""
	}
	return res.AgentInfo.Name
}

// modeResetTimeout bounds the agent's answer to the reset.
const modeResetTimeout = 10 * time.Second

// enforceModeLocked checks the mode d reports; a denied one is reset in the
// background. Called with s.mu held whenever d's modes or options change.
func (r *Router) enforceModeLocked(s *Session, d *downstream) {
	g := r.opts.Guard
	if !g.Enforcing() || d == nil {
		return
	}
	agent := d.agent.Name()
	// Every select that may say the mode, and the legacy modes: ACP does
	// not make an option's category mean anything (merge.DeniedMode).
	sel, denied := merge.DeniedMode(d.view, func(m string) bool { return g.ModeDenied(agent, m) })
	if !denied {
		d.modeErr = nil
		return
	}
	if d.modeReset != nil {
		return // a reset is under way; it checks again when it ends
	}
	mode, optionID := sel.Mode, sel.OptionID
	target := g.ModeTarget(agent, sel.Values)
	done := make(chan struct{})
	d.modeReset = done
	r.log.Warn("agent is in a mode the policy denies; setting it back", "session", s.ID, "agent", agent, "mode", mode, "to", target)
	r.spawn(func() { r.resetMode(s, d, mode, target, optionID, done) })
}

// resetMode sets d back from the denied mode from to target.
func (r *Router) resetMode(s *Session, d *downstream, from, target, optionID string, done chan struct{}) {
	agent := d.agent.Name()
	ctx, cancel := context.WithTimeout(context.Background(), modeResetTimeout)
	defer cancel()
	var err error
	var options json.RawMessage
	switch inst, aerr := d.alive(); {
	case aerr != nil:
		err = aerr
	case target == "":
		err = errors.New("it offers no mode the policy allows")
	case optionID != "":
		p, _ := json.Marshal(map[string]string{"sessionId": d.id, "configId": optionID, "value": target})
		var res json.RawMessage
		if res, err = callWait(ctx, inst, acp.MethodSetConfigOption, p); err == nil {
			var out struct {
				ConfigOptions json.RawMessage `json:"configOptions"`
			}
			if json.Unmarshal(res, &out) == nil {
				options = out.ConfigOptions
			}
		}
	default:
		p, _ := json.Marshal(map[string]string{"sessionId": d.id, "modeId": target})
		_, err = callWait(ctx, inst, acp.MethodSetMode, p)
	}

	// Audited before the user is told, so that the log is never behind
	// what the user saw.
	r.opts.Guard.RecordModeReset(s.ID, agent, from, target, err)

	s.mu.Lock()
	d.modeReset = nil
	var text string
	if err == nil {
		if options != nil {
			d.view.Options = options
		} else if optionID != "" {
			d.view.Options = merge.SetCurrentValue(d.view.Options, optionID, target)
		}
		if d.view.Modes != nil { // the legacy modes say the same (Codex answers only the option)
			d.view.Modes.CurrentModeID = target
		}
		d.modeErr = nil
		r.recordMetaLocked(s)
		text = fmt.Sprintf("acp-router: %s was in mode %q, which the permission policy does not allow; it has been set back to %q.", d.agent.Title(), from, target)
		if s.active == agent {
			s.writeLocked(s.optionsLineLocked())
			if d.view.Modes != nil {
				s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": merge.LegacyModeID(agent, target)}))
			}
		}
	} else {
		d.modeErr = acp.NewError(acp.CodeInternalError,
			fmt.Sprintf("acp-router: %s is in mode %q, which the permission policy does not allow, and could not be set back (%v); prompts in this session are refused until it leaves that mode", d.agent.Title(), from, errorText(err)),
			map[string]string{"agent": agent, "mode": from, "rule": guard.RuleDeniedMode})
		text = errorText(d.modeErr)
		r.log.Error("cannot set the agent back from a denied mode", "session", s.ID, "agent", agent, "mode", from, "error", err)
	}
	s.writeLocked(s.sayLocked(text))
	if err == nil {
		// The agent may have moved on meanwhile: check what it reports
		// now. (After a failure, the next mode the agent reports is.)
		r.enforceModeLocked(s, d)
	}
	s.mu.Unlock()
	close(done)
}

// waitMode waits until no reset of d's mode is under way.
func (r *Router) waitMode(ctx context.Context, s *Session, d *downstream) {
	if d == nil {
		return
	}
	for {
		s.mu.Lock()
		ch := d.modeReset
		s.mu.Unlock()
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
