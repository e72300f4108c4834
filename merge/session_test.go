package merge

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixtureSession returns the session/new result in a real agent's
// transcript.
func fixtureSession(t *testing.T, name string) AgentView {
	t.Helper()
	for _, raw := range fixtureResults(t, name) {
		var r struct {
			SessionID     string          `json:"sessionId"`
			Modes         *ModeState      `json:"modes"`
			Models        *ModelState     `json:"models"`
			ConfigOptions json.RawMessage `json:"configOptions"`
		}
		if json.Unmarshal(raw, &r) == nil && r.SessionID != "" {
			return AgentView{Options: r.ConfigOptions, Modes: r.Modes, Models: r.Models}
		}
	}
	t.Fatalf("%s: no session/new result", name)
	return AgentView{}
}

var realAgents = []struct {
	name, title, fixture string
}{
	{"claude", "Claude Code", "agentclientprotocol-claude-agent-acp-0.100.0.jsonl"},
	{"codex", "Codex", "codex-acp-0.16.0-mock.jsonl"},
	{"gemini", "Gemini CLI", "gemini-cli-0.61.0-mock.jsonl"},
}

// TestOptionsFromRealAgents pins the option list the editor gets for each
// active agent of a Claude + Codex + Gemini router (golden file; -update
// rewrites it): the agent select first, then Claude's and Codex's own
// options (Claude's booleans only for editors that advertise them), and a
// mode and a model select synthesized from Gemini's modes and models.
func TestOptionsFromRealAgents(t *testing.T) {
	var choices []AgentChoice
	for _, a := range realAgents {
		choices = append(choices, AgentChoice{Name: a.name, Title: a.title, Description: "Run this session on " + a.title})
	}
	got := map[string]any{}
	for _, a := range realAgents {
		view := fixtureSession(t, a.fixture)
		got[a.name] = Options(choices, a.name, view, false, nil)
		got[a.name+" (boolean options advertised)"] = Options(choices, a.name, view, true, nil)
	}
	var gemini []json.RawMessage
	json.Unmarshal(mustJSON(got["gemini"]), &gemini)
	if len(gemini) != 3 {
		t.Fatalf("gemini: %d options, want agent + synthesized mode + model", len(gemini))
	}
	checkGolden(t, filepath.Join("testdata", "options.golden.json"), got)
}

// TestLegacyModesFromRealAgents pins the legacy mode union: AGENT:MODE ids,
// "Title: Mode" names, the active agent's current mode, denied modes left
// out.
func TestLegacyModesFromRealAgents(t *testing.T) {
	var agents []AgentModes
	for _, a := range realAgents {
		view := fixtureSession(t, a.fixture)
		agents = append(agents, AgentModes{Agent: a.name, Title: a.title, Modes: view.Modes.AvailableModes})
	}
	denied := func(agent, mode string) bool {
		return (agent == "claude" && mode == "bypassPermissions") || (agent == "gemini" && mode == "yolo")
	}
	got := LegacyModes(agents, "codex", "read-only", denied)
	if got.CurrentModeID != "codex:read-only" {
		t.Errorf("current mode %q", got.CurrentModeID)
	}
	for _, m := range got.AvailableModes {
		if m.ID == "claude:bypassPermissions" || m.ID == "gemini:yolo" {
			t.Errorf("denied mode offered: %+v", m)
		}
	}
	checkGolden(t, filepath.Join("testdata", "legacy-modes.golden.json"), got)
}

func TestCommands(t *testing.T) {
	router := []json.RawMessage{json.RawMessage(`{"name":"agent","description":"a"}`), json.RawMessage(`{"name":"review","description":"r"}`)}
	agent := []json.RawMessage{json.RawMessage(`{"name":"review","description":"agent's"}`), json.RawMessage(`{"name":"init","description":"i"}`)}
	got := Commands(router, agent)
	var names []string
	for _, c := range got {
		names = append(names, commandName(c))
	}
	if want := "agent review init"; strings.Join(names, " ") != want {
		t.Errorf("commands %q, want %q (the router's review hides the agent's)", names, want)
	}
}

func checkGolden(t *testing.T, path string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	assertJSONEqual(t, b, want)
}

// TestModesDeniedAndCurrent: denied modes leave the agents' own mode
// selects and the synthesized one (the current mode stays listed), and
// CurrentMode reads the mode from either place.
func TestModesDeniedAndCurrent(t *testing.T) {
	denied := map[string]bool{"bypassPermissions": true, "full-access": true, "yolo": true, "default": true}
	for _, a := range realAgents {
		view := fixtureSession(t, a.fixture)
		mode, values, optionID, ok := CurrentMode(view)
		if !ok || mode == "" || len(values) < 2 {
			t.Fatalf("%s: CurrentMode = %q %q %q %v", a.name, mode, values, optionID, ok)
		}
		if (a.name == "gemini") != (optionID == "") {
			t.Errorf("%s: mode option id %q (gemini has legacy modes only)", a.name, optionID)
		}
		opts := Options(nil, a.name, view, true, func(m string) bool { return denied[m] })
		var offered []string
		for _, o := range opts {
			if isModeOption(o) {
				var sel struct{ Options json.RawMessage }
				json.Unmarshal(o, &sel)
				offered = selectValues(sel.Options)
			}
		}
		if len(offered) == 0 {
			t.Fatalf("%s: no mode select in %s", a.name, mustJSON(opts))
		}
		for _, v := range offered {
			if denied[v] && v != mode {
				t.Errorf("%s: denied mode %q offered", a.name, v)
			}
		}
		if !strings.Contains(strings.Join(offered, " "), mode) || len(offered) >= len(values) {
			t.Errorf("%s: offered %q of %q (current %q)", a.name, offered, values, mode)
		}
	}
}

func TestWithoutDeniedGroups(t *testing.T) {
	o := json.RawMessage(`{"id":"m","type":"select","category":"mode","currentValue":"a","x":1,"options":[{"group":"g","name":"G","options":[{"value":"a","name":"A"},{"value":"b","name":"B"}]},{"value":"c","name":"C"}]}`)
	got := withoutDenied(o, func(m string) bool { return m != "c" })
	assertJSONEqual(t, got, []byte(`{"id":"m","type":"select","category":"mode","currentValue":"a","x":1,"options":[{"group":"g","name":"G","options":[{"value":"a","name":"A"}]},{"value":"c","name":"C"}]}`))
}

func TestSetCurrentValue(t *testing.T) {
	got := SetCurrentValue(json.RawMessage(`[{"id":"a","currentValue":"x","k":[1]},{"id":"mode","currentValue":"default","category":"mode"}]`), "mode", "plan")
	assertJSONEqual(t, got, []byte(`[{"id":"a","currentValue":"x","k":[1]},{"id":"mode","currentValue":"plan","category":"mode"}]`))
}

// TestDeniedModeWherever: an option's category is for the UX only (ACP
// SessionConfigOptionCategory): a denied mode is found in any select but
// those the spec's other categories place elsewhere, in every one of
// them, and in the legacy modes.
func TestDeniedModeWherever(t *testing.T) {
	denied := func(m string) bool { return m == "bypassPermissions" || m == "auto" }
	sel := func(id, category, current string) string {
		c := ""
		if category != "" {
			c = `,"category":"` + category + `"`
		}
		return `{"id":"` + id + `","name":"x","type":"select"` + c + `,"currentValue":"` + current + `","options":[{"value":"default","name":"d"},{"value":"` + current + `","name":"c"}]}`
	}
	for _, tc := range []struct {
		name, options, legacy string
		want                  ModeSelect
		ok                    bool
	}{
		{"category mode", "[" + sel("mode", "mode", "bypassPermissions") + "]", "", ModeSelect{"bypassPermissions", []string{"default", "bypassPermissions"}, "mode"}, true},
		{"no category", "[" + sel("mode", "", "bypassPermissions") + "]", "", ModeSelect{"bypassPermissions", []string{"default", "bypassPermissions"}, "mode"}, true},
		{"second mode select", "[" + sel("mode", "mode", "default") + "," + sel("perm", "_x", "bypassPermissions") + "]", "", ModeSelect{"bypassPermissions", []string{"default", "bypassPermissions"}, "perm"}, true},
		{"a model named like a mode", "[" + sel("model", "model", "auto") + "," + sel("effort", "thought_level", "auto") + "]", "", ModeSelect{}, false},
		{"id mode under category model", "[" + sel("mode", "model", "auto") + "]", "", ModeSelect{"auto", []string{"default", "auto"}, "mode"}, true},
		{"legacy beside options", "[" + sel("model", "model", "opus") + "]", "bypassPermissions", ModeSelect{"bypassPermissions", nil, ""}, true},
		{"allowed everywhere", "[" + sel("mode", "", "default") + "]", "default", ModeSelect{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := AgentView{Options: json.RawMessage(tc.options)}
			if tc.legacy != "" {
				v.Modes = &ModeState{CurrentModeID: tc.legacy}
			}
			got, ok := DeniedMode(v, denied)
			if ok != tc.ok || got.Mode != tc.want.Mode || got.OptionID != tc.want.OptionID || strings.Join(got.Values, ",") != strings.Join(tc.want.Values, ",") {
				t.Errorf("DeniedMode = %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
