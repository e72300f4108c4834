package policy

import (
	"slices"

	"github.com/acp-router/acp-router/policy/extract"
)

// The router's own slash commands (issue 32: /agent NAME and the other
// ways to switch, /NAME TEXT, /compare, /pick) are decided as requests of
// the methods extract.CommandMethods, whose evidence is one ItemAgent per
// agent the command is about. They are the user's own actions, not an
// agent's: only rules that name their method decide them (method:, with
// agent: and cwd: at most), a rule without method: (written for what
// agents ask) never does, and a command no rule names is allowed
// (RuleUserCommand), not decided by the default, which is about what
// agents ask. Each agent is decided on its own, and the command gets the
// most severe of their decisions: a /compare naming an agent a rule
// denies is denied. Deny wins as everywhere, so a user rule that allows
// cannot undo an org rule that denies or asks.

// commandMessage is the message of a command no rule names.
const commandMessage = "no rule names this command: the user's own action is allowed (the default decides what agents ask)"

// evaluateCommand decides the evidence of a router command.
func (p *Policy) evaluateCommand(ev *extract.Evidence) Decision {
	d := Decision{Method: ev.Method, PolicyHash: p.hash, Evidence: ev, Findings: make([]Finding, len(ev.Items))}
	bit := methodBit(ev.Method)
	best := -1
	for i := range ev.Items {
		it := &ev.Items[i]
		f := Finding{Item: it}
		if it.Refused != "" || it.Type != extract.ItemAgent {
			// What is not an agent cannot be decided as one.
			f.Effect, f.Rule, f.Layer, f.Source, f.Message = Deny, RuleRefused, LayerBuiltin, SourceBuiltin, it.Refused
		} else {
			p.decideCommandItem(ev, it, bit, &f)
		}
		d.Findings[i] = f
		if best < 0 || f.Effect > d.Findings[best].Effect {
			best = i
		}
	}
	if best < 0 {
		d.Effect, d.Rule, d.Layer, d.Source, d.Message = Deny, RuleRefused, LayerBuiltin, SourceBuiltin, "the command names no agent"
		return d
	}
	f := &d.Findings[best]
	d.Effect, d.Rule, d.Layer, d.Source, d.Message = f.Effect, f.Rule, f.Layer, f.Source, f.Message
	if d.Effect == Ask && len(p.answeredBy) > 0 {
		d.Answerers = p.answerersOf(&d)
	}
	return d
}

// decideCommandItem finds the rules naming the command's method that
// match the agent it and gives f the most severe one's decision (of equal
// ones, the first in p.rules: the stronger layer, then the smaller id).
func (p *Policy) decideCommandItem(ev *extract.Evidence, it *extract.Item, bit uint16, f *Finding) {
	bestRule := -1
	var bestEff Effect
	for ri, r := range p.rules {
		if r.When.methods&bit == 0 || !r.When.matchCommand(ev, it.Agent, r.Decision == Allow) {
			continue
		}
		if r.Unless != nil && r.Unless.matchCommand(ev, it.Agent, r.Decision != Allow) {
			f.Excepted = append(f.Excepted, r.ID)
			continue
		}
		f.Matches = append(f.Matches, Match{Rule: r.ID, Layer: r.Layer, Effect: r.Decision})
		if r.Decision > bestEff {
			bestEff, bestRule = r.Decision, ri
		}
	}
	if bestRule < 0 {
		f.Effect, f.Rule, f.Layer, f.Source, f.Message = Allow, RuleUserCommand, LayerBuiltin, SourceBuiltin, commandMessage
		return
	}
	r := p.rules[bestRule]
	f.Effect, f.Rule, f.Layer, f.Source, f.Message = bestEff, r.ID, r.Layer, SourceRule, r.Message
}

// matchCommand matches the cond against a router command about agent:
// its method (when it names methods), agent and cwd keys. A key the
// command has nothing for (kind, paths, ...) never matches; the parser
// refuses such a key beside a command's method.
func (c *Cond) matchCommand(ev *extract.Evidence, agent string, strict bool) bool {
	if c.notCommandKey() != "" {
		return false
	}
	if c.methods != 0 && c.methods&methodBit(ev.Method) == 0 {
		return false
	}
	if c.agents != nil && !anyText(c.agents, agent) {
		return false
	}
	return c.cwdsMatch(ev, strict)
}

// NamesCommand reports whether a rule in force names the router command
// method: without one, the command is allowed without a decision to wait
// for.
func (p *Policy) NamesCommand(method string) bool {
	bit := methodBit(method)
	return bit&commandMethodBits != 0 && slices.ContainsFunc(p.rules, func(r *Rule) bool { return r.When.methods&bit != 0 })
}
