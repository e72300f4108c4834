package extract

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The router's own slash commands (issue 32): the user's actions, decided
// by the policy before the router carries them out, as a request of one of
// these methods whose evidence is the agents the command is about (its
// targets), one ItemAgent item each.
const (
	// MethodSwitch: the session switches to an agent (/agent NAME, the
	// agent config option, a legacy AGENT:MODE mode, a commands: entry
	// with switch, /pick of another agent than the active one).
	MethodSwitch = "acp-router/agent"
	// MethodTurn: one turn asked of an agent (/NAME TEXT, a commands:
	// entry with a prompt).
	MethodTurn = "acp-router/turn"
	// MethodCompare: /compare, about every agent it names.
	MethodCompare = "acp-router/compare"
	// MethodPick: /pick NAME after a comparison.
	MethodPick = "acp-router/pick"
)

// CommandMethods are the router's commands, in the order the policy lists
// them.
var CommandMethods = []string{MethodSwitch, MethodTurn, MethodCompare, MethodPick}

// IsCommand: method is one of the router's own commands.
func IsCommand(method string) bool { return slices.Contains(CommandMethods, method) }

// CommandParams are the params of a router command's request.
type CommandParams struct {
	// Agents are the agents the command is about: the one switched to,
	// asked or picked; every agent a comparison names.
	Agents []string `json:"agents"`
}

// command reads a router command's params: one item per agent it names.
// Params that name none, or an empty name, are refused (nothing to decide
// is never allowed).
func (x *extractor) command(params json.RawMessage) {
	// The user's request, not an agent's: no agent, nor its mode, makes it.
	x.ev.Agent, x.ev.AgentInfo, x.ev.Mode = "", "", ""
	var p CommandParams
	if err := json.Unmarshal(params, &p); err != nil {
		x.refuse("params", fmt.Sprintf("the command's params do not decode: %v", err), KindOther)
		return
	}
	switch {
	case len(p.Agents) == 0:
		x.refuse("params", "the command names no agent", KindOther)
		return
	case len(p.Agents) > maxItems:
		x.refuse("params", fmt.Sprintf("the command names more than %d agents", maxItems), KindOther)
		return
	}
	for _, a := range p.Agents {
		if a == "" {
			x.refuse("params", "the command names an agent without a name", KindOther)
			return
		}
		// Appended as they are (add would take two agents for one item):
		// each is decided on its own.
		x.ev.Items = append(x.ev.Items, Item{Type: ItemAgent, Agent: a, Origin: "the agent " + x.ev.Method + " is about"})
	}
}
