package merge

import (
	"encoding/json"
	"slices"
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
// advertised them; modes denied (deny_modes; denied may be nil) are never
// offered, except the current one, so that the list stays truthful.
func Options(agents []AgentChoice, active string, v AgentView, booleans bool, denied func(mode string) bool) []json.RawMessage {
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
			if denied != nil && mayBeMode(o) {
				o = withoutDenied(o, denied)
			}
			out = append(out, o)
		}
		return out
	}
	if v.Modes != nil && len(v.Modes.AvailableModes) > 0 {
		sel := modeSelect(v.Modes)
		if denied != nil {
			sel.Options = slices.DeleteFunc(sel.Options, func(m selectValue) bool { return m.Value != sel.CurrentValue && denied(m.Value) })
		}
		out = append(out, mustJSON(sel))
	}
	if v.Models != nil && len(v.Models.AvailableModels) > 0 {
		out = append(out, mustJSON(modelSelect(v.Models)))
	}
	return out
}

// isModeOption: a select option of category "mode".
func isModeOption(o json.RawMessage) bool {
	var head struct {
		Type     string `json:"type"`
		Category string `json:"category"`
	}
	return json.Unmarshal(o, &head) == nil && head.Type == "select" && head.Category == "mode"
}

// mayBeMode: select option o may say the agent's mode. ACP makes a
// config option's category a hint for the UX that "MUST NOT be required
// for correctness" (schema SessionConfigOptionCategory): an agent's mode
// select may come without one, with a custom one, or under another id,
// and an agent may have more than one. Only a select that one of the
// spec's other categories (model, model_config, thought_level) places
// elsewhere, under another id than "mode", is taken not to: a model
// named like a mode ("default", "auto") is not one.
func mayBeMode(o json.RawMessage) bool {
	var head struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Category string `json:"category"`
	}
	if json.Unmarshal(o, &head) != nil || head.Type != "select" || head.ID == AgentOptionID {
		return false
	}
	switch head.Category {
	case "model", "model_config", "thought_level":
		return head.ID == ModeOptionID
	}
	return true
}

// ModeSelect is one place an agent's view states its mode: a select
// option (OptionID) or its legacy modes (OptionID "").
type ModeSelect struct {
	Mode     string
	Values   []string // the modes it offers, in the agent's order
	OptionID string
}

// DeniedMode is the first place v states a mode denied says it may not be
// in: any select that may say the agent's mode (mayBeMode), then its
// legacy modes. ok is false when none does. CurrentMode is the one mode
// the session shows; this is every mode the agent may be running in.
func DeniedMode(v AgentView, denied func(mode string) bool) (ModeSelect, bool) {
	if denied == nil {
		return ModeSelect{}, false
	}
	legacy := v.legacyModes()
	if v.Options != nil {
		var own []json.RawMessage
		json.Unmarshal(v.Options, &own)
		for _, o := range own {
			if !mayBeMode(o) {
				continue
			}
			var sel struct {
				ID           string          `json:"id"`
				CurrentValue string          `json:"currentValue"`
				Options      json.RawMessage `json:"options"`
			}
			if json.Unmarshal(o, &sel) == nil && sel.CurrentValue != "" && denied(sel.CurrentValue) {
				return ModeSelect{Mode: sel.CurrentValue, Values: selectValues(sel.Options), OptionID: sel.ID}, true
			}
		}
	}
	if v.Modes != nil && v.Modes.CurrentModeID != "" && denied(v.Modes.CurrentModeID) {
		if len(legacy) == 0 { // a current_mode_update the result did not announce
			_, legacy, _, _ = CurrentMode(AgentView{Options: v.Options})
		}
		return ModeSelect{Mode: v.Modes.CurrentModeID, Values: legacy}, true
	}
	return ModeSelect{}, false
}

// legacyModes are the ids of v's legacy modes.
func (v AgentView) legacyModes() []string {
	if v.Modes == nil {
		return nil
	}
	out := make([]string, 0, len(v.Modes.AvailableModes))
	for _, m := range v.Modes.AvailableModes {
		out = append(out, m.ID)
	}
	return out
}

// IsModeOption: option id of v may say the agent's mode (see mayBeMode),
// so that a value it is set to is a mode.
func IsModeOption(v AgentView, id string) bool {
	var own []json.RawMessage
	json.Unmarshal(v.Options, &own)
	for _, o := range own {
		var head struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(o, &head) == nil && head.ID == id {
			return mayBeMode(o)
		}
	}
	return false
}

// withoutDenied removes the denied values (other than the current one)
// from a select option, flat or grouped, keeping every other field as the
// agent sent it.
func withoutDenied(o json.RawMessage, denied func(string) bool) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(o, &fields) != nil {
		return o
	}
	var current string
	json.Unmarshal(fields["currentValue"], &current)
	var filter func(raw json.RawMessage) json.RawMessage
	filter = func(raw json.RawMessage) json.RawMessage {
		var entries []json.RawMessage
		if json.Unmarshal(raw, &entries) != nil {
			return raw
		}
		kept := entries[:0]
		for _, e := range entries {
			var ent map[string]json.RawMessage
			if json.Unmarshal(e, &ent) != nil {
				kept = append(kept, e)
				continue
			}
			if group, ok := ent["options"]; ok { // a group of values
				ent["options"] = filter(group)
				kept = append(kept, mustJSON(ent))
				continue
			}
			var value string
			if json.Unmarshal(ent["value"], &value) == nil && value != current && denied(value) {
				continue
			}
			kept = append(kept, e)
		}
		return mustJSON(kept)
	}
	if opts, ok := fields["options"]; ok {
		fields["options"] = filter(opts)
	}
	return mustJSON(fields)
}

// CurrentMode reads an agent's mode from what a session knows of it: the
// current value of its select option of category "mode" (optionID is that
// option's id), else its legacy modes. values are the modes it offers, in
// its order. ok is false when the agent reports no mode.
func CurrentMode(v AgentView) (mode string, values []string, optionID string, ok bool) {
	if v.Options != nil {
		var own []json.RawMessage
		json.Unmarshal(v.Options, &own)
		for _, o := range own {
			if !isModeOption(o) {
				continue
			}
			var sel struct {
				ID           string          `json:"id"`
				CurrentValue string          `json:"currentValue"`
				Options      json.RawMessage `json:"options"`
			}
			if json.Unmarshal(o, &sel) != nil || sel.ID == AgentOptionID {
				continue
			}
			return sel.CurrentValue, selectValues(sel.Options), sel.ID, true
		}
	}
	if v.Modes != nil {
		for _, m := range v.Modes.AvailableModes {
			values = append(values, m.ID)
		}
		return v.Modes.CurrentModeID, values, "", true
	}
	return "", nil, "", false
}

// selectValues lists the values of a select's options, groups flattened.
func selectValues(raw json.RawMessage) []string {
	var entries []struct {
		Value   *string         `json:"value"`
		Options json.RawMessage `json:"options"`
	}
	json.Unmarshal(raw, &entries)
	var out []string
	for _, e := range entries {
		switch {
		case e.Value != nil:
			out = append(out, *e.Value)
		case e.Options != nil:
			out = append(out, selectValues(e.Options)...)
		}
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

// SetCurrentValue returns options (an agent's configOptions) with the
// currentValue of option id set to value, every other field kept.
func SetCurrentValue(options json.RawMessage, id, value string) json.RawMessage {
	var list []json.RawMessage
	if json.Unmarshal(options, &list) != nil {
		return options
	}
	for i, o := range list {
		var fields map[string]json.RawMessage
		if json.Unmarshal(o, &fields) != nil {
			continue
		}
		var oid string
		if json.Unmarshal(fields["id"], &oid) == nil && oid == id {
			fields["currentValue"] = mustJSON(value)
			list[i] = mustJSON(fields)
		}
	}
	return mustJSON(list)
}
