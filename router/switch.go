package router

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Switching agents inside a session (DESIGN §5): the `agent` option, the
// legacy AGENT:MODE modes, and the router's slash commands.

// agentChoices are the values of the `agent` select, in config order.
func (r *Router) agentChoices() []merge.AgentChoice {
	out := make([]merge.AgentChoice, 0, len(r.agents))
	for _, a := range r.agents {
		out = append(out, merge.AgentChoice{Name: a.Name(), Title: a.Title(), Description: "Run this session on " + a.Title()})
	}
	return out
}

// optionsLocked is the session's option list for the editor.
func (s *Session) optionsLocked() []json.RawMessage {
	var view merge.AgentView
	if d := s.down[s.active]; d != nil {
		view = d.view
	}
	opts := merge.Options(s.r.agentChoices(), s.active, view, s.r.caps().Session.ConfigOptions.Boolean != nil, s.r.opts.Guard.ModeFilter(s.active))
	if sb := s.r.opts.Sandbox; sb != nil {
		// The router owns acp.sandbox: an agent's own would speak for
		// that agent only.
		opts = slices.DeleteFunc(opts, func(o json.RawMessage) bool {
			var head struct{ ID string }
			return json.Unmarshal(o, &head) == nil && head.ID == acp.SandboxOptionID
		})
		if sb.Capability().Mode != acp.SandboxModeHost {
			opts = append(opts, sandboxOption(s.sandboxValue))
		}
	}
	return opts
}

// sandboxOption is the acp.sandbox select (the draft RFD "Sandbox
// Capability and Policy"): what the session requires, set by the editor
// (setSandbox). Listed only where the router can confine, so that an
// editor without a use for it is not shown a choice that does nothing.
func sandboxOption(current string) json.RawMessage {
	if current == "" {
		current = "any"
	}
	return mustJSON(map[string]any{
		"id": acp.SandboxOptionID, "name": "Sandbox", "type": "select", "category": merge.RouterCategory,
		"description": "The isolation this session requires of every agent behind the router", "currentValue": current,
		"options": []map[string]string{
			{"value": "any", "name": "As configured", "description": "The router's sandbox.mode decides"},
			{"value": "sandboxed", "name": "Required", "description": "Every agent of this session runs confined by the kernel, or is not started"},
		},
	})
}

// setSandbox handles session/set_config_option for acp.sandbox: the
// requirement is met (the router's sandbox satisfies it, and holds it for
// every agent from now on) or refused with sandbox_policy_unsatisfiable.
func (r *Router) setSandbox(s *Session, value json.RawMessage) error {
	pol, err := acp.ParseSandboxPolicy(value)
	if err != nil {
		return acp.NewError(acp.CodeInvalidParams, "acp-router: "+err.Error(), nil)
	}
	if err := r.opts.Sandbox.Require(pol); err != nil {
		r.log.Warn("acp.sandbox refused", "session", s.ID, "require", pol.Require, "error", err)
		return err
	}
	s.mu.Lock()
	s.sandboxValue = "any"
	if pol.Confines() {
		s.sandboxValue = "sandboxed"
	}
	s.mu.Unlock()
	r.log.Info("acp.sandbox set", "session", s.ID, "require", pol.Require)
	return nil
}

// legacyModesLocked is the union of the agents' modes, AGENT:MODE, for
// editors without config options: each agent's modes as seen in this
// session, else as learned from its earlier sessions.
func (s *Session) legacyModesLocked() *merge.ModeState {
	var agents []merge.AgentModes
	current := ""
	for _, a := range s.r.agents {
		var modes []merge.Mode
		if d := s.down[a.Name()]; d != nil && d.view.Modes != nil {
			modes = d.view.Modes.AvailableModes
			if a.Name() == s.active {
				current = d.view.Modes.CurrentModeID
			}
		} else {
			modes = s.r.cachedModes(a.Name())
		}
		agents = append(agents, merge.AgentModes{Agent: a.Name(), Title: a.Title(), Modes: modes})
	}
	var denied func(agent, mode string) bool
	if s.r.opts.Guard.Enforcing() {
		denied = s.r.opts.Guard.ModeDenied
	}
	return merge.LegacyModes(agents, s.active, current, denied)
}

// optionsLine is a config_option_update with the whole list.
func (s *Session) optionsLineLocked() []byte {
	return s.updateLine(map[string]any{"sessionUpdate": "config_option_update", "configOptions": s.optionsLocked()})
}

// routerCommands are the router's slash commands (DESIGN §5).
func (r *Router) routerCommands() []json.RawMessage {
	type input struct {
		Hint string `json:"hint"`
	}
	type command struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Input       *input `json:"input,omitempty"`
	}
	out := []json.RawMessage{mustJSON(command{Name: "agent", Description: "List the agents, or switch this session to one: /agent NAME", Input: &input{Hint: "agent name"}})}
	for _, a := range r.agents {
		out = append(out, mustJSON(command{Name: a.Name(), Description: "Ask " + a.Title() + " for this turn only", Input: &input{Hint: "prompt"}}))
	}
	if len(r.agents) >= 2 { // a comparison needs two
		out = append(out, mustJSON(command{Name: "compare", Description: "Ask several agents at once and see each answer: /compare AGENT AGENT PROMPT", Input: &input{Hint: "agents and prompt"}}),
			mustJSON(command{Name: "pick", Description: "After /compare, continue with one agent's answer: /pick AGENT", Input: &input{Hint: "agent name"}}))
	}
	for _, c := range r.cfg.Commands {
		cmd := command{Name: c.Name, Description: c.Description}
		if !c.Switch && (c.Prompt == "" || strings.Contains(c.Prompt, "{{input}}")) {
			cmd.Input = &input{Hint: "text"}
		}
		out = append(out, mustJSON(cmd))
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs only
	}
	return b
}

// commandsLine is the merged available_commands_update: the router's
// commands and the active agent's.
func (s *Session) commandsLine() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commandsLineLocked()
}

func (s *Session) commandsLineLocked() []byte {
	var own []json.RawMessage
	if d := s.down[s.active]; d != nil {
		own = d.commands
	}
	return s.updateLine(map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": merge.Commands(s.r.routerCommands(), own)})
}

// sayLocked is a message chunk written by the router, with its own
// messageId.
//
// The id is unique across the router's processes and the session's
// incarnations (reopened, brought back after eviction), which start with
// the history the editor already shows: a reused id would append to an old
// message there.
func (s *Session) sayLocked(text string) []byte {
	return s.updateLine(map[string]any{"sessionUpdate": "agent_message_chunk",
		"messageId": fmt.Sprintf("acp-router-%s-%s-%d", s.ID, s.r.msgNonce, s.r.msgSeq.Add(1)),
		"content":   map[string]string{"type": "text", "text": text}})
}

// switchTo makes agent name the session's active agent, opening its
// downstream session if needed, and tells the editor: the old plan is
// cleared, options and commands re-sent.
func (r *Router) switchTo(ctx context.Context, s *Session, name string) error {
	a := r.byName[name]
	if a == nil {
		return fail(errParams, fmt.Sprintf("acp-router: no agent %q (agents: %s)", name, strings.Join(r.agentNames(), ", ")), nil)
	}
	s.mu.Lock()
	same, enforced := s.active == name, s.Enforce
	s.mu.Unlock()
	if same {
		return nil
	}
	if enforced {
		return fail(errParams, fmt.Sprintf("acp-router: this session must stay on %q (routing rule with enforce: true in %s)", s.activeName(), r.cfg.File), nil)
	}
	began, from := time.Now(), s.activeName()
	if _, err := r.ensureDownstream(r.turnContext(ctx, s), s, a); err != nil {
		r.traceSwitch(s, began, from, name, err)
		return err
	}
	defer r.traceSwitch(s, began, from, name, nil) // after s.mu is released
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active = name
	r.recordMetaLocked(s)
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "plan", "entries": []any{}}))
	for _, line := range s.removePlansLocked(name) {
		s.writeLocked(line)
	}
	s.writeLocked(s.optionsLineLocked())
	s.writeLocked(s.commandsLineLocked())
	if modes := s.legacyModesLocked(); modes.CurrentModeID != "" && len(modes.AvailableModes) > 0 {
		s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": modes.CurrentModeID}))
	}
	r.log.Info("session switched agent", "session", s.ID, "agent", name)
	return nil
}

func (s *Session) activeName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

func (r *Router) agentNames() []string {
	var names []string
	for _, a := range r.agents {
		names = append(names, a.Name())
	}
	return names
}

// setConfigOption handles session/set_config_option: `agent` switches;
// a synthesized `mode` or `model` is carried out with set_mode / set_model;
// anything else goes to the active agent. The answer is the whole list.
func (r *Router) setConfigOption(ctx context.Context, s *Session, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	var p struct {
		ConfigID string          `json:"configId"`
		Value    json.RawMessage `json:"value"`
	}
	if err := decodeParams(params(req), &p); err != nil {
		reply(nil, errMalformed(req.Method, err))
		return
	}
	// A value that is no string (a boolean option's) names no agent: it
	// goes to the active agent as it is.
	value := jsonText(p.Value)
	d := s.activeDown()
	synthesized := d != nil && d.view.Options == nil
	r.spawn(func() {
		var err error
		if d != nil && p.ConfigID != merge.AgentOptionID && s.isModeOption(d, p.ConfigID) {
			err = r.opts.Guard.ModeRefusal(d.agent.Name(), value)
		}
		switch {
		case err != nil:
		case p.ConfigID == merge.AgentOptionID:
			err = r.userSwitch(ctx, s, value)
		case p.ConfigID == acp.SandboxOptionID && r.opts.Sandbox != nil:
			err = r.setSandbox(s, p.Value)
		case synthesized && p.ConfigID == merge.ModeOptionID && d.view.Modes != nil:
			err = r.setMode(ctx, s, d, value)
		case synthesized && p.ConfigID == merge.ModelOptionID && d.view.Models != nil:
			err = r.setModel(ctx, s, d, params(req), value)
		default:
			err = r.setOption(ctx, s, d, params(req))
		}
		if err != nil {
			reply(nil, err)
			return
		}
		s.mu.Lock()
		res, _ := json.Marshal(map[string]any{"configOptions": s.optionsLocked()})
		s.mu.Unlock()
		reply(res, nil)
	})
}

// setModeRequest handles session/set_mode: AGENT:MODE switches to AGENT and
// sets MODE there, answering once the agent acknowledged; a plain mode id
// goes to the active agent.
func (r *Router) setModeRequest(ctx context.Context, s *Session, req *jsonrpc2.Request) {
	var p struct {
		ModeID string `json:"modeId"`
	}
	if err := decodeParams(params(req), &p); err != nil {
		r.replyTo(req)(nil, errMalformed(req.Method, err))
		return
	}
	r.spawn(func() {
		agent, mode, qualified := merge.SplitLegacyModeID(p.ModeID)
		if !qualified || r.byName[agent] == nil {
			agent, mode = s.activeName(), p.ModeID
		}
		err := r.opts.Guard.ModeRefusal(agent, mode)
		if err == nil {
			err = r.userSwitch(ctx, s, agent)
		}
		if err == nil {
			s.mu.Lock()
			d := s.down[agent]
			s.mu.Unlock()
			err = r.setMode(ctx, s, d, mode)
		}
		if err != nil {
			r.replyTo(req)(nil, err)
			return
		}
		r.replyTo(req)(json.RawMessage("{}"), nil)
	})
}

// isModeOption: configID is the mode select of d (its own, or the one the
// router synthesizes from its modes).
func (s *Session) isModeOption(d *downstream, configID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, id, ok := merge.CurrentMode(d.view)
	return ok && (id == configID || (id == "" && configID == merge.ModeOptionID)) || merge.IsModeOption(d.view, configID)
}

// setOption sends session/set_config_option (params with the router's
// session id) to d and records the agent's new options.
func (r *Router) setOption(ctx context.Context, s *Session, d *downstream, p json.RawMessage) error {
	res, err := r.callDown(ctx, s, d, acp.MethodSetConfigOption, p)
	if err != nil {
		return err
	}
	var out struct {
		ConfigOptions json.RawMessage `json:"configOptions"`
	}
	if json.Unmarshal(res, &out) == nil && out.ConfigOptions != nil {
		s.mu.Lock()
		d.view.Options = out.ConfigOptions
		r.enforceModeLocked(s, d)
		r.recordMetaLocked(s)
		s.mu.Unlock()
	}
	return nil
}

// setMode sets an agent's mode in its downstream session and records it.
func (r *Router) setMode(ctx context.Context, s *Session, d *downstream, mode string) error {
	p, _ := json.Marshal(map[string]string{"sessionId": d.id, "modeId": mode})
	if _, err := r.callDown(ctx, s, d, acp.MethodSetMode, p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.view.Modes != nil {
		d.view.Modes.CurrentModeID = mode
	}
	r.recordMetaLocked(s)
	if d.view.Options == nil {
		s.writeLocked(s.optionsLineLocked())
	}
	return nil
}

// setModel carries out the synthesized `model` select with the old
// session/set_model.
func (r *Router) setModel(ctx context.Context, s *Session, d *downstream, _ json.RawMessage, model string) error {
	p, _ := json.Marshal(map[string]string{"sessionId": d.id, "modelId": model})
	if _, err := r.callDown(ctx, s, d, acp.MethodSetModel, p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.view.Models != nil {
		d.view.Models.CurrentModelID = model
	}
	return nil
}

// callDown sends a request of the router's own to a downstream session,
// with the session id translated, and waits.
func (r *Router) callDown(ctx context.Context, s *Session, d *downstream, method string, p json.RawMessage) (json.RawMessage, error) {
	if d == nil {
		return nil, errUnknownSession(s.ID)
	}
	inst, err := d.alive()
	if err != nil {
		return nil, err
	}
	res, err := callWait(ctx, inst, method, rewriteSessionID(p, s.ID, d.id))
	if err != nil {
		return nil, inst.Agent.Error(inst, err)
	}
	return res, nil
}

// learnModes caches an agent's modes from a real session in the state dir,
// for the legacy mode union of later sessions (never from throwaway
// sessions: DESIGN §5).
func (r *Router) learnModes(agent string, sessionResult json.RawMessage) {
	var res struct {
		Modes *merge.ModeState `json:"modes"`
	}
	if json.Unmarshal(sessionResult, &res) != nil || res.Modes == nil {
		return
	}
	r.mu.Lock()
	r.modeCache[agent] = res.Modes.AvailableModes
	r.mu.Unlock()
	if r.cfg.StateDir == "" {
		return
	}
	b, _ := json.Marshal(res.Modes.AvailableModes)
	if err := upstream.WriteFileAtomic(r.modesFile(agent), b); err != nil {
		r.log.Warn("cannot cache the agent's modes", "agent", agent, "error", err)
	}
}

func (r *Router) modesFile(agent string) string {
	return filepath.Join(r.cfg.StateDir, "agents", agent+".modes.json")
}

// cachedModes are an agent's modes learned from an earlier session.
func (r *Router) cachedModes(agent string) []merge.Mode {
	r.mu.Lock()
	modes, ok := r.modeCache[agent]
	r.mu.Unlock()
	if ok || r.cfg.StateDir == "" {
		return modes
	}
	if b, err := os.ReadFile(r.modesFile(agent)); err == nil {
		if err := json.Unmarshal(b, &modes); err != nil {
			// The router wrote it (cacheModes): a damaged cache is no
			// modes known, learned again from the agent's next session.
			r.log.Warn("the agent's cached modes do not decode; none are known until its next session", "agent", agent, "file", r.modesFile(agent), "error", err)
			modes = nil
		}
	}
	r.mu.Lock()
	r.modeCache[agent] = modes
	r.mu.Unlock()
	return modes
}

// learnCommands caches the names of an agent's own slash commands in the
// state dir, for `acp-router check` (a router command hides an agent's).
func (r *Router) learnCommands(agent string, commands []json.RawMessage) {
	var names []string
	for _, c := range commands {
		var head struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(c, &head) == nil && head.Name != "" {
			names = append(names, head.Name)
		}
	}
	r.mu.Lock()
	same := slices.Equal(r.cmdCache[agent], names)
	r.cmdCache[agent] = names
	r.mu.Unlock()
	if same || r.cfg.StateDir == "" {
		return
	}
	b, _ := json.Marshal(names)
	r.spawn(func() { // off the relay path
		if err := upstream.WriteFileAtomic(commandsFile(r.cfg.StateDir, agent), b); err != nil {
			r.log.Warn("cannot cache the agent's commands", "agent", agent, "error", err)
		}
	})
}

func commandsFile(stateDir, agent string) string {
	return filepath.Join(stateDir, "agents", agent+".commands.json")
}

// Warnings are what `acp-router check` adds about routing and switching:
// router commands that hide an agent's own command (as learned from the
// agent's earlier sessions).
func Warnings(cfg *config.Config) []string {
	router := map[string]bool{"agent": true}
	for _, a := range cfg.Agents {
		router[a.Name] = true
	}
	for _, c := range cfg.Commands {
		router[c.Name] = true
	}
	var out []string
	for _, a := range cfg.Agents {
		b, err := os.ReadFile(commandsFile(cfg.StateDir, a.Name))
		if err != nil {
			continue
		}
		var names []string
		if err := json.Unmarshal(b, &names); err != nil {
			out = append(out, fmt.Sprintf("cannot read %s's commands learned earlier (%s: %v); its next session writes them again", a.Name, commandsFile(cfg.StateDir, a.Name), err))
			continue
		}
		for _, n := range names {
			if router[n] {
				out = append(out, fmt.Sprintf("the router's /%s hides %s's own /%s; type `/%s /%s` to reach it", n, a.Name, n, a.Name, n))
			}
		}
	}
	return out
}
