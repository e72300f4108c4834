package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

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
// allowed mode. A policy reload checks every live session's mode at once
// (issue 27, point 1). A reset the agent does not answer in time is
// cancelled at the agent, and its late answer still counts (point 4). A
// subagent session's mode cannot be set: found in a denied one, it is
// audited and its requests are decided in it (enforce.go).

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

// enforceModeLocked checks the mode d reports; a denied one is reset in the
// background. Called with s.mu held whenever d's modes or options change,
// and for every live session when the policy is reloaded (watchPolicy).
func (r *Router) enforceModeLocked(s *Session, d *downstream) {
	if d == nil {
		return
	}
	g := r.opts.Guard
	if !g.Enforcing() {
		d.modeErr = nil // a reload removed the policy: nothing is denied
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

// resetMode sets d back from the denied mode from to target. A call the
// agent does not answer within ModeResetTimeout is cancelled at the agent
// ($/cancel_request: it must not stay pending there, issue 27 point 4),
// and prompts are refused meanwhile; the answer the agent still gives
// within another ModeResetTimeout is taken for what it says: a success
// means the agent did set the mode, and lifts the refusal.
func (r *Router) resetMode(s *Session, d *downstream, from, target, optionID string, done chan struct{}) {
	timeout := r.opts.ModeResetTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var c *acp.Call
	var err error
	switch inst, aerr := d.alive(); {
	case aerr != nil:
		err = aerr
	case target == "":
		err = errors.New("it offers no mode the policy allows")
	case optionID != "":
		p := mustJSON(map[string]string{"sessionId": d.id, "configId": optionID, "value": target})
		c, err = inst.Peer().Call(ctx, acp.MethodSetConfigOption, paramsAny(p), nil, nil)
	default:
		p := mustJSON(map[string]string{"sessionId": d.id, "modeId": target})
		c, err = inst.Peer().Call(ctx, acp.MethodSetMode, paramsAny(p), nil, nil)
	}
	var res json.RawMessage
	abandoned := false
	if c != nil {
		res, err = c.WaitOrCancel(ctx)
		if abandoned = errors.Is(err, context.DeadlineExceeded); abandoned {
			err = fmt.Errorf("no answer within %s; the request was cancelled", timeout)
		}
	}
	r.resetDone(s, d, from, target, optionID, res, err, done)
	if !abandoned {
		return
	}
	late, cancelLate := context.WithTimeout(context.Background(), timeout)
	defer cancelLate()
	if res, err := c.Wait(late); err == nil {
		r.log.Info("the agent answered the cancelled mode reset: it did set the mode", "session", s.ID, "agent", d.agent.Name(), "mode", target)
		r.resetDone(s, d, from, target, optionID, res, nil, nil)
	}
}

// resetDone records how a reset of d from mode from to target ended:
// audited, then d's state and the user's notice. done is the reset's
// (closed here), nil for an answer that came after the reset was given up
// (resetMode).
func (r *Router) resetDone(s *Session, d *downstream, from, target, optionID string, res json.RawMessage, err error, done chan struct{}) {
	agent := d.agent.Name()
	var options json.RawMessage
	if err == nil && optionID != "" {
		var out struct {
			ConfigOptions json.RawMessage `json:"configOptions"`
		}
		if json.Unmarshal(res, &out) == nil {
			options = out.ConfigOptions
		}
	}

	// Audited before the user is told, so that the log is never behind
	// what the user saw.
	r.opts.Guard.RecordModeReset(s.ID, agent, from, target, err)

	s.mu.Lock()
	if done != nil {
		d.modeReset = nil
	}
	var text string
	if err == nil {
		refused := d.modeErr != nil
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
		if done == nil && refused {
			text = fmt.Sprintf("acp-router: %s has now set mode %q, leaving %q, which the permission policy does not allow; prompts in this session are accepted again.", d.agent.Title(), target, from)
		}
		if s.active == agent {
			s.writeLocked(s.optionsLineLocked())
			if d.view.Modes != nil {
				s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": merge.LegacyModeID(agent, target)}))
			}
		}
	} else if _, still := merge.DeniedMode(d.view, func(m string) bool { return r.opts.Guard.ModeDenied(agent, m) }); !still {
		// What the agent reported since (read while the failure was
		// audited: it may answer a cancel and report its mode at once)
		// is an allowed mode: there is nothing to refuse.
		text = fmt.Sprintf("acp-router: %s was in mode %q, which the permission policy does not allow, and could not be set back (%v); it has since left that mode.", d.agent.Title(), from, errorText(err))
		r.log.Info("the agent left a denied mode by itself after a failed reset", "session", s.ID, "agent", agent, "mode", from, "error", err)
	} else {
		d.modeErr = fail(errInternal,
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
	if done != nil {
		close(done)
	}
}

// enforceChildModeLocked checks the mode subagent session s reports
// (called with s.mu held). ACP lets the router only cancel a child, not
// set its mode: a child in a mode the policy denies has its requests
// decided in that mode (enforce.go); it is logged, audited and shown to
// the user in the top-level session, once per mode it is found in.
func (r *Router) enforceChildModeLocked(s *Session, d *downstream) {
	g := r.opts.Guard
	if d == nil || !g.Enforcing() {
		return
	}
	agent := d.agent.Name()
	sel, denied := merge.DeniedMode(d.view, func(m string) bool { return g.ModeDenied(agent, m) })
	if !denied {
		d.childDenied = ""
		return
	}
	if d.childDenied == sel.Mode {
		return
	}
	d.childDenied = sel.Mode
	root, mode := s.root(), sel.Mode
	r.log.Warn("a subagent session reports a mode the policy denies; its requests are asked", "session", s.ID, "agent", agent, "mode", mode)
	text := fmt.Sprintf("acp-router: a subagent session of %s (%s) is in mode %q, which the permission policy does not allow; a subagent's mode cannot be set back, so its requests are decided as in that mode.", d.agent.Title(), s.ID, mode)
	// The audit write is I/O: not under s.mu.
	r.spawn(func() {
		g.RecordChildMode(s.ID, root.ID, agent, mode)
		root.mu.Lock()
		root.writeLocked(root.sayLocked(text))
		root.mu.Unlock()
	})
}

// watchPolicy re-applies the mode policy to every live session and
// subagent session each time the policy in force is replaced, until ctx
// ends: an agent already in a mode the new policy denies would otherwise
// go on approving by itself until it happened to report its mode again
// (issue 27, point 1).
func (r *Router) watchPolicy(ctx context.Context) {
	g := r.opts.Guard
	if g == nil {
		return
	}
	changed := g.Changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = g.Changed() // before acting: a reload meanwhile is seen
		r.reapplyModes()
	}
}

// reapplyModes checks the mode of every downstream of every live session
// and subagent session against the policy in force, as when the agent
// reports it: denied ones are reset (or, for a child, decided in it),
// audited and shown to the user; a refusal the policy no longer backs is
// lifted. Evicted sessions are checked when they come back.
func (r *Router) reapplyModes() {
	r.mu.Lock()
	sessions := slices.Collect(maps.Values(r.sessions))
	children := slices.Collect(maps.Values(r.children))
	r.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		for _, d := range s.down {
			r.enforceModeLocked(s, d)
		}
		s.mu.Unlock()
	}
	for _, c := range children {
		c.mu.Lock()
		for _, d := range c.down {
			r.enforceChildModeLocked(c, d)
		}
		c.mu.Unlock()
	}
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
