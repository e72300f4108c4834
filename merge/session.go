package merge

import (
	"encoding/json"
	"strings"
)

// Ids and category of the options the router owns (DESIGN §5). They are
// stable across sessions: editors save picks and re-apply them.
const (
	AgentOptionID  = "agent"
	ModeOptionID   = "mode"
	ModelOptionID  = "model"
	RouterCategory = "_acp-router"
)

// Mode is one of an agent's session modes.
type Mode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// ModeState is an agent's `modes` (SessionModeState).
type ModeState struct {
	CurrentModeID  string `json:"currentModeId"`
	AvailableModes []Mode `json:"availableModes"`
}

// Model is one of an agent's old-style `models`.
type Model struct {
	ModelID     string `json:"modelId"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// ModelState is an agent's old-style `models` (removed from ACP in 2026;
// older agents still send it).
type ModelState struct {
	CurrentModelID  string  `json:"currentModelId"`
	AvailableModels []Model `json:"availableModels"`
}

// AgentChoice is one value of the router's `agent` select.
type AgentChoice struct {
	Name, Title, Description string
}

// AgentView is what a session knows of one agent's choices.
type AgentView struct {
	Options json.RawMessage // the agent's configOptions; nil if it has none
	Modes   *ModeState
	Models  *ModelState
}

type selectValue struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type selectOption struct {
	ID           string        `json:"id"`
	Name         string        `json:"name"`
	Description  string        `json:"description,omitempty"`
	Category     string        `json:"category,omitempty"`
	Type         string        `json:"type"`
	CurrentValue string        `json:"currentValue"`
	Options      []selectValue `json:"options"`
}

// Options is the editor's option list for a session (DESIGN §5): the
// router's `agent` select first, then the active agent's own options, or a
// synthesized `mode` / `model` select for an agent that has only `modes` /
// old-style `models`. Boolean options are left out unless the editor
// advertised them.
func Options(agents []AgentChoice, active string, v AgentView, booleans bool) []json.RawMessage {
	agent := selectOption{
		ID: AgentOptionID, Name: "Agent", Description: "The agent that runs this session",
		Category: RouterCategory, Type: "select", CurrentValue: active,
	}
	for _, a := range agents {
		agent.Options = append(agent.Options, selectValue{Value: a.Name, Name: a.Title, Description: a.Description})
	}
	out := []json.RawMessage{mustJSON(agent)}
	if v.Options != nil {
		var own []json.RawMessage
		json.Unmarshal(v.Options, &own)
		for _, o := range own {
			var head struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			if json.Unmarshal(o, &head) != nil || head.ID == AgentOptionID || (head.Type == "boolean" && !booleans) {
				continue
			}
			out = append(out, o)
		}
		return out
	}
	if v.Modes != nil && len(v.Modes.AvailableModes) > 0 {
		out = append(out, mustJSON(modeSelect(v.Modes)))
	}
	if v.Models != nil && len(v.Models.AvailableModels) > 0 {
		out = append(out, mustJSON(modelSelect(v.Models)))
	}
	return out
}

// modeSelect is the `mode` select synthesized from an agent's modes.
func modeSelect(m *ModeState) selectOption {
	o := selectOption{ID: ModeOptionID, Name: "Mode", Category: "mode", Type: "select", CurrentValue: m.CurrentModeID}
	for _, mode := range m.AvailableModes {
		o.Options = append(o.Options, selectValue{Value: mode.ID, Name: mode.Name, Description: mode.Description})
	}
	return o
}

func modelSelect(m *ModelState) selectOption {
	o := selectOption{ID: ModelOptionID, Name: "Model", Category: "model", Type: "select", CurrentValue: m.CurrentModelID}
	for _, model := range m.AvailableModels {
		o.Options = append(o.Options, selectValue{Value: model.ModelID, Name: model.Name, Description: model.Description})
	}
	return o
}

// AgentModes is one agent's modes for the legacy union.
type AgentModes struct {
	Agent, Title string
	Modes        []Mode
}

// LegacyModes is the `modes` the router reports for editors without config
// options (DESIGN §5): the union of the agents' modes with ids AGENT:MODE,
// named "Title: Mode", the current one being the active agent's. Modes
// denied (deny_modes) are never offered.
func LegacyModes(agents []AgentModes, active, current string, denied func(agent, mode string) bool) *ModeState {
	out := &ModeState{CurrentModeID: LegacyModeID(active, current), AvailableModes: []Mode{}}
	for _, a := range agents {
		for _, m := range a.Modes {
			if denied != nil && denied(a.Agent, m.ID) {
				continue
			}
			out.AvailableModes = append(out.AvailableModes, Mode{ID: LegacyModeID(a.Agent, m.ID), Name: a.Title + ": " + m.Name, Description: m.Description})
		}
	}
	return out
}

// LegacyModeID is the id of an agent's mode in the legacy union.
func LegacyModeID(agent, mode string) string { return agent + ":" + mode }

// SplitLegacyModeID splits AGENT:MODE; ok is false for an id without an
// agent part.
func SplitLegacyModeID(id string) (agent, mode string, ok bool) {
	return strings.Cut(id, ":")
}

// Commands merges the router's slash commands with the active agent's: the
// router's first; an agent command with the name of a router command is
// hidden (DESIGN §5).
func Commands(router, agent []json.RawMessage) []json.RawMessage {
	out := append([]json.RawMessage{}, router...)
	taken := map[string]bool{}
	for _, c := range router {
		taken[commandName(c)] = true
	}
	for _, c := range agent {
		if name := commandName(c); name != "" && !taken[name] {
			out = append(out, c)
		}
	}
	return out
}

func commandName(c json.RawMessage) string {
	var head struct {
		Name string `json:"name"`
	}
	json.Unmarshal(c, &head)
	return head.Name
}

// Cost is a usage_update cost: cumulative for one agent's session.
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// SumCost adds the agents' latest cumulative costs (DESIGN §5); nil when
// there is none or the currencies differ.
func SumCost(costs []Cost) *Cost {
	if len(costs) == 0 {
		return nil
	}
	sum := Cost{Currency: costs[0].Currency}
	for _, c := range costs {
		if c.Currency != sum.Currency {
			return nil
		}
		sum.Amount += c.Amount
	}
	return &sum
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are marshalled here
	}
	return b
}
