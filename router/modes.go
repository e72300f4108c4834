package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/policy"
)

// deny_modes (DESIGN §6): enforced on every mode the router observes — in
// session/new results, current_mode_update and config_option_update — not
// only on the editor's requests. An agent found in a denied mode is set
// back to its first allowed mode, the event is audited and shown to the
// user; if that fails, prompts in the session are refused until the agent
// reports an allowed mode.

// modeResetTimeout bounds the agent's answer to the reset.
const modeResetTimeout = 10 * time.Second

// modeDenied is the predicate for the options and modes the editor is
// offered: nil when no policy is in force.
func (r *Router) modeDenied(agent string) func(mode string) bool {
	pol := r.policy()
	if pol == nil || len(pol.DenyModes()) == 0 {
		return nil
	}
	return func(mode string) bool { return pol.ModeDenied(agent, mode) }
}

// modeRefusal is the error for an editor request to set a denied mode.
func (r *Router) modeRefusal(agent, mode string) error {
	if pol := r.policy(); pol == nil || !pol.ModeDenied(agent, mode) {
		return nil
	}
	return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: the permission policy does not allow %s's mode %q (deny_modes)", agent, mode),
		map[string]string{"agent": agent, "mode": mode, "rule": policy.RuleDeniedMode})
}

// enforceModeLocked checks the mode d reports; a denied one is reset in the
// background. Called with s.mu held whenever d's modes or options change.
func (r *Router) enforceModeLocked(s *Session, d *downstream) {
	pol := r.policy()
	if pol == nil || d == nil {
		return
	}
	agent := d.agent.Name()
	mode, values, optionID, ok := merge.CurrentMode(d.view)
	if !ok || mode == "" || !pol.ModeDenied(agent, mode) {
		d.modeErr = nil
		return
	}
	if d.modeReset != nil {
		return // a reset is under way; it checks again when it ends
	}
	target := ""
	for _, v := range values {
		if !pol.ModeDenied(agent, v) {
			target = v
			break
		}
	}
	done := make(chan struct{})
	d.modeReset = done
	r.log.Warn("agent is in a mode the policy denies; setting it back", "session", s.ID, "agent", agent, "mode", mode, "to", target)
	go r.resetMode(s, d, pol, mode, target, optionID, done)
}

// resetMode sets d back from the denied mode from to target.
func (r *Router) resetMode(s *Session, d *downstream, pol *policy.Policy, from, target, optionID string, done chan struct{}) {
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
	r.recordMode(pol, s.ID, agent, from, target, err)

	s.mu.Lock()
	d.modeReset = nil
	var text string
	if err == nil {
		if options != nil {
			d.view.Options = options
		} else if optionID != "" {
			d.view.Options = merge.SetCurrentValue(d.view.Options, optionID, target)
		}
		if d.view.Modes != nil && optionID == "" {
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
			map[string]string{"agent": agent, "mode": from, "rule": policy.RuleDeniedMode})
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

// recordMode audits a mode reset.
func (r *Router) recordMode(pol *policy.Policy, sid, agent, from, target string, err error) {
	g := r.opts.Guard
	if g == nil {
		return
	}
	rule := policy.RuleDeniedMode
	ev := map[string]string{"mode": from, "resetTo": target}
	if err != nil {
		ev["resetError"] = err.Error()
	}
	rec := audit.Record{Time: time.Now(), Session: sid, Agent: agent, Method: "mode",
		Evidence: []any{ev}, Decision: policy.Deny.String(), Rule: &rule, Layer: modeLayer(pol, agent, from),
		Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	if err := g.write(rec); err != nil {
		r.log.Error("cannot write the audit log", "error", err)
	}
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
