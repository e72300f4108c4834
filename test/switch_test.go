package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lastText is the last message chunk text the editor got for sid.
func lastText(e *Editor, sid string) string {
	texts := e.Texts(sid)
	if len(texts) == 0 {
		return ""
	}
	return texts[len(texts)-1]
}

// updatesOf returns the session/update notifications of kind for sid.
func updatesOf(e *Editor, sid, kind string) []*Msg {
	return e.Rec.Filter(func(m *Msg) bool {
		return m.Method == "session/update" && m.SessionID() == sid && m.Update() == kind
	})
}

// option returns the option with id from a configOptions list.
func option(t testing.TB, list json.RawMessage, id string) json.RawMessage {
	t.Helper()
	var opts []json.RawMessage
	json.Unmarshal(list, &opts)
	for _, o := range opts {
		if jsonString(o, "id") == id {
			return o
		}
	}
	t.Fatalf("no option %q in %s", id, truncate(string(list), 1000))
	return nil
}

// TestSwitchWithSlashCommands pins DESIGN §5 slash commands: the merged
// command list (router's and the active agent's) arrives after the
// session/new response and again after a switch; /NAME TEXT runs one turn on
// NAME and the next prompt is on the active agent again; /agent NAME
// switches (plan cleared, options and commands re-sent); /agent lists; a
// downstream session is opened once per agent and kept.
func TestSwitchWithSlashCommands(t *testing.T) {
	t.Parallel()
	logA, logB := filepath.Join(t.TempDir(), "a.log"), filepath.Join(t.TempDir(), "b.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{LogFile: logA, SessionPrefix: "a-", UpdateWithNew: true}, "title: Alpha"),
		fakeAgentYAML("beta", fakeOpts{LogFile: logB, SessionPrefix: "b-"}, "title: Beta"),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	resp := e.Rec.WaitFor(t, waitTimeout, "the session/new response", func(m *Msg) bool { return m.IsResponse() && jsonString(m.Result, "sessionId") == sid })
	cmds := e.Rec.WaitFor(t, waitTimeout, "the merged commands", func(m *Msg) bool {
		return m.Update() == "available_commands_update" && m.SessionID() == sid && slices.Contains(commandNames(m), "fake-cmd")
	})
	if cmds.At.Before(resp.At) || slices.Index(e.Rec.All(), cmds) < slices.Index(e.Rec.All(), resp) {
		t.Errorf("commands update before the session/new response")
	}
	if got := commandNames(cmds); !slices.Equal(got[:3], []string{"agent", "alpha", "beta"}) {
		t.Errorf("commands %q: want the router's first (agent, alpha, beta), then the agent's", got)
	}

	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "alpha" {
		t.Fatalf("first prompt answered by %q", got)
	}
	e.MustPrompt(t, sid, "/beta whoami", "end_turn")
	if got := lastText(e, sid); got != "beta" {
		t.Fatalf("/beta TEXT answered by %q, want beta", got)
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "alpha" {
		t.Fatalf("after a one-turn command the prompt went to %q, want the active alpha", got)
	}

	nCmds := len(updatesOf(e, sid, "available_commands_update"))
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Switched this session to Beta") {
		t.Errorf("/agent beta said %q", got)
	}
	if n := len(updatesOf(e, sid, "available_commands_update")); n <= nCmds {
		t.Errorf("commands not re-sent after the switch")
	}
	plans := updatesOf(e, sid, "plan")
	if len(plans) == 0 {
		t.Fatalf("no plan update clearing the old plan on the switch")
	}
	requireJSON(t, "plan entries after the switch", jsonPath(plans[len(plans)-1].Params, "update", "entries"), `[]`)
	opts := updatesOf(e, sid, "config_option_update")
	if len(opts) == 0 {
		t.Fatal("no config_option_update after the switch")
	}
	agentOpt := option(t, jsonPath(opts[len(opts)-1].Params, "update", "configOptions"), "agent")
	if jsonString(agentOpt, "currentValue") != "beta" {
		t.Errorf("agent option after the switch: %s", agentOpt)
	}

	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "beta" {
		t.Fatalf("after /agent beta the prompt went to %q", got)
	}
	e.MustPrompt(t, sid, "/agent", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "* beta (Beta)") || !strings.Contains(got, "  alpha (Alpha)") {
		t.Errorf("/agent listing %q does not mark beta active", got)
	}
	e.MustPrompt(t, sid, "/agent nope", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, `no agent "nope"`) {
		t.Errorf("/agent nope said %q", got)
	}
	if n := countLines(logB, "session/new"); n != 1 {
		t.Errorf("beta got %d session/new, want 1: the downstream session is kept", n)
	}
	for _, l := range append(agentLog(logA), agentLog(logB)...) {
		if strings.HasPrefix(l, "/") {
			t.Errorf("a router command reached an agent: %q", l)
		}
	}
}

// TestSwitchWithOptionsAndModes pins DESIGN §5 options and modes: the agent
// select first, then the active agent's own options or a synthesized mode
// select; a Zed-like client cycling `mode` never switches agent; picking
// `agent` switches; set_mode AGENT:MODE switches and sets the mode; the
// legacy mode union includes agents learned from earlier sessions; boolean
// options only for editors that advertised them; enforce refuses a switch.
func TestSwitchWithOptionsAndModes(t *testing.T) {
	t.Parallel()
	logA, logB := filepath.Join(t.TempDir(), "a.log"), filepath.Join(t.TempDir(), "b.log")
	alphaModes := json.RawMessage(`{"modes":{"currentModeId":"default","availableModes":[{"id":"default","name":"Default"},{"id":"plan","name":"Plan"}]}}`)
	betaOpts := json.RawMessage(`{"modes":{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},{"id":"yolo","name":"YOLO"}]},
		"configOptions":[{"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"ask","options":[{"value":"ask","name":"Ask"},{"value":"yolo","name":"YOLO"}]},
		{"id":"fast","name":"Fast","type":"boolean","currentValue":false}]}`)
	enforced := t.TempDir()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{LogFile: logA, SessionPrefix: "a-", SessionResult: alphaModes}, "title: Alpha"),
		fakeAgentYAML("beta", fakeOpts{LogFile: logB, SessionPrefix: "b-", SessionResult: betaOpts}, "title: Beta"),
	}, "default: alpha", "rules:", "  - {when: {cwd: ["+yamlQuote(enforced)+"]}, agent: alpha, enforce: true}"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll) // no boolean config options
	ctx := context.Background()

	res := e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	sid := jsonString(res, "sessionId")
	requireJSON(t, "initial options", jsonPath(res, "configOptions"), `[
		{"id":"agent","name":"Agent","description":"The agent that runs this session","category":"_acp-router","type":"select","currentValue":"alpha",
		 "options":[{"value":"alpha","name":"Alpha","description":"Run this session on Alpha"},{"value":"beta","name":"Beta","description":"Run this session on Beta"}]},
		{"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"default","options":[{"value":"default","name":"Default"},{"value":"plan","name":"Plan"}]}]`)
	requireJSON(t, "legacy modes before beta was ever used", jsonPath(res, "modes"),
		`{"currentModeId":"alpha:default","availableModes":[{"id":"alpha:default","name":"Alpha: Default"},{"id":"alpha:plan","name":"Alpha: Plan"}]}`)

	// Zed cycles the mode chip: alpha's mode changes, the agent does not.
	res = e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "plan"})
	if v := jsonString(option(t, jsonPath(res, "configOptions"), "agent"), "currentValue"); v != "alpha" {
		t.Errorf("cycling mode switched the agent to %q", v)
	}
	if v := jsonString(option(t, jsonPath(res, "configOptions"), "mode"), "currentValue"); v != "plan" {
		t.Errorf("mode after set_config_option: %q", v)
	}
	waitAgentLog(t, logA, waitTimeout, "set_mode on alpha", func(l string) bool { return l == "session/set_mode" })

	// Picking the agent switches; beta's own options follow, without the
	// boolean the editor did not advertise.
	res = e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "agent", "value": "beta"})
	requireJSON(t, "options on beta", jsonPath(res, "configOptions"), `[
		{"id":"agent","name":"Agent","description":"The agent that runs this session","category":"_acp-router","type":"select","currentValue":"beta",
		 "options":[{"value":"alpha","name":"Alpha","description":"Run this session on Alpha"},{"value":"beta","name":"Beta","description":"Run this session on Beta"}]},
		{"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"ask","options":[{"value":"ask","name":"Ask"},{"value":"yolo","name":"YOLO"}]}]`)
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "beta" {
		t.Fatalf("after picking beta the prompt went to %q", got)
	}
	// beta's own mode option goes to beta as set_config_option.
	e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "yolo"})
	waitAgentLog(t, logB, waitTimeout, "set_config_option on beta", func(l string) bool { return l == "session/set_config_option" })

	// Legacy: set_mode alpha:default switches back and sets the mode.
	if _, rerr := e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "alpha:default"}); rerr != nil {
		t.Fatalf("set_mode alpha:default: %v", rerr)
	}
	if n := countLines(logA, "session/set_mode"); n != 2 {
		t.Errorf("alpha got %d set_mode, want 2", n)
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "alpha" {
		t.Fatalf("after set_mode alpha:default the prompt went to %q", got)
	}

	// A new session knows beta's modes from the first one.
	res = e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	var modes struct {
		AvailableModes []struct {
			ID string `json:"id"`
		} `json:"availableModes"`
	}
	json.Unmarshal(jsonPath(res, "modes"), &modes)
	var ids []string
	for _, m := range modes.AvailableModes {
		ids = append(ids, m.ID)
	}
	if want := []string{"alpha:default", "alpha:plan", "beta:ask", "beta:yolo"}; !slices.Equal(ids, want) {
		t.Errorf("legacy modes of a second session %q, want %q", ids, want)
	}
	if n := countLines(logB, "session/new"); n != 1 {
		t.Errorf("the second session opened beta (%d session/new): modes must come from the cache, not throwaway sessions", n)
	}

	// enforce: true refuses a switch.
	res = e.MustCall(t, "session/new", map[string]any{"cwd": enforced, "mcpServers": []any{}})
	_, rerr := e.Call(ctx, "session/set_config_option", map[string]any{"sessionId": jsonString(res, "sessionId"), "configId": "agent", "value": "beta"})
	if rerr == nil || !strings.Contains(rerr.Message, "enforce") {
		t.Errorf("switching an enforced session: %v, want an error naming enforce", rerr)
	}
}

// TestCrossAgentState pins DESIGN §5 cross-agent state: usage used/size of
// the agent running the turn with the cost summed over agents; the first
// title is kept; the commands of an agent that is not active never reach
// the editor; an update for a tool call never forwarded is dropped; cancel
// during a one-turn command reaches that command's agent.
func TestCrossAgentState(t *testing.T) {
	t.Parallel()
	logA, logB := filepath.Join(t.TempDir(), "a.log"), filepath.Join(t.TempDir(), "b.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{LogFile: logA, SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{LogFile: logB, SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	e.MustPrompt(t, sid, strings.Join([]string{
		`update {"sessionUpdate":"usage_update","used":10,"size":100,"cost":{"amount":1.5,"currency":"USD"}}`,
		`update {"sessionUpdate":"session_info_update","title":"First"}`,
		`update {"sessionUpdate":"tool_call_update","toolCallId":"ghost","status":"completed"}`,
		`update {"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read","kind":"read","status":"pending"}`,
		`update {"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed"}`,
	}, "\n"), "end_turn")
	e.MustPrompt(t, sid, "/beta "+strings.Join([]string{
		`update {"sessionUpdate":"usage_update","used":20,"size":200,"cost":{"amount":2,"currency":"USD"}}`,
		`update {"sessionUpdate":"session_info_update","title":"Second"}`,
		`update {"sessionUpdate":"available_commands_update","availableCommands":[{"name":"beta-only","description":"x"}]}`,
		`say done`,
	}, "\n"), "end_turn")

	usage := updatesOf(e, sid, "usage_update")
	if len(usage) != 2 {
		t.Fatalf("%d usage updates, want 2", len(usage))
	}
	requireJSON(t, "usage in alpha's turn", jsonPath(usage[0].Params, "update"), `{"sessionUpdate":"usage_update","used":10,"size":100,"cost":{"amount":1.5,"currency":"USD"}}`)
	requireJSON(t, "usage in beta's turn", jsonPath(usage[1].Params, "update"), `{"sessionUpdate":"usage_update","used":20,"size":200,"cost":{"amount":3.5,"currency":"USD"}}`)
	titles := updatesOf(e, sid, "session_info_update")
	if len(titles) != 1 || jsonString(titles[0].Params, "update", "title") != "First" {
		t.Errorf("title updates %v, want only the first title", titles)
	}
	for _, m := range updatesOf(e, sid, "available_commands_update") {
		if slices.Contains(commandNames(m), "beta-only") {
			t.Errorf("the commands of beta, not active, reached the editor: %s", m)
		}
	}
	var toolUpdates []string
	for _, m := range updatesOf(e, sid, "tool_call_update") {
		toolUpdates = append(toolUpdates, jsonString(m.Params, "update", "toolCallId"))
	}
	if !slices.Equal(toolUpdates, []string{"t1"}) {
		t.Errorf("tool call updates %q, want only t1 (ghost's tool call was never sent)", toolUpdates)
	}
	if got := lastText(e, sid); got != "done" {
		t.Errorf("the one-turn command's stream did not reach the editor: %q", got)
	}

	// Cancel during a one-turn command goes to its agent.
	_, wait, err := e.Go("session/prompt", promptReq(sid, "/beta sleep 10s"))
	if err != nil {
		t.Fatal(err)
	}
	waitAgentLog(t, logB, waitTimeout, "beta's second prompt", func(l string) bool { return countLines(logB, "session/prompt") == 2 })
	e.Notify("session/cancel", map[string]any{"sessionId": sid})
	m, err := wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "cancelled")
	if countLines(logB, "session/cancel") != 1 || countLines(logA, "session/cancel") != 0 {
		t.Errorf("session/cancel went to alpha %d times, beta %d times; want beta once", countLines(logA, "session/cancel"), countLines(logB, "session/cancel"))
	}
}

// TestIDsAcrossAgents pins DESIGN §5 ids: two agents in one session both
// using tool call id call-1 and message id m1 stay distinct for the editor
// (the first agent's pass unchanged, the second's are rewritten), and the
// permission request of each resolves to the agent that asked.
func TestIDsAcrossAgents(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	const chunk = `update {"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"hi"}}`
	e.MustPrompt(t, sid, "permission\n"+chunk, "end_turn")
	e.MustPrompt(t, sid, "/beta permission\n"+chunk, "end_turn")

	var calls, asks, msgs []string
	for _, m := range updatesOf(e, sid, "tool_call") {
		calls = append(calls, jsonString(m.Params, "update", "toolCallId"))
	}
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Method == "session/request_permission" }) {
		asks = append(asks, jsonString(m.Params, "toolCall", "toolCallId"))
	}
	for _, m := range updatesOf(e, sid, "agent_message_chunk") {
		if id := jsonString(m.Params, "update", "messageId"); id != "" {
			msgs = append(msgs, id)
		}
	}
	if !slices.Equal(calls, []string{"call-1", "call-1~beta"}) || !slices.Equal(asks, calls) {
		t.Errorf("tool call ids %q and permission tool calls %q; want call-1 then a distinct id for beta's, in both", calls, asks)
	}
	if !slices.Equal(msgs, []string{"m1", "m1~beta"}) {
		t.Errorf("message ids %q, want m1 then a distinct id for beta's", msgs)
	}
	var outcomes []string
	for _, text := range e.Texts(sid) {
		if strings.HasPrefix(text, "permission: ") {
			outcomes = append(outcomes, text)
		}
	}
	if len(outcomes) != 2 || !strings.Contains(outcomes[0], `"allow"`) || !strings.Contains(outcomes[1], `"allow"`) {
		t.Errorf("each agent's permission outcome: %q", outcomes)
	}
}

// TestHandoffAndCommands pins the handoff brief (DESIGN §5): the agent that
// takes over gets one text block first with the turns it has not seen
// (A→B→A tells A only what happened on B), also for one-turn commands,
// never echoed to the editor; and `commands:` from the config: a prompt
// template with {{input}} runs once on its agent, a switch command
// switches; both are advertised.
func TestHandoffAndCommands(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}, "title: Alpha"),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}, "title: Beta"),
	}, "default: alpha")+`commands:
  - {name: review, description: Ask Beta to review, agent: beta, prompt: "prompt-text {{input}}"}
  - {name: go-beta, description: Switch to Beta, agent: beta, switch: true}
`)
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	cmds := e.Rec.WaitFor(t, waitTimeout, "commands", func(m *Msg) bool { return m.Update() == "available_commands_update" && m.SessionID() == sid })
	if got := commandNames(cmds); !slices.Contains(got, "review") || !slices.Contains(got, "go-beta") {
		t.Errorf("config commands not advertised: %q", got)
	}

	e.MustPrompt(t, sid, "say alpha-one", "end_turn")
	// review: a one-turn prompt on beta from the template, with a brief of
	// alpha's turn as its first block.
	e.MustPrompt(t, sid, "/review the diff", "end_turn")
	got := lastText(e, sid)
	brief, rest, ok := strings.Cut(got, " | ")
	if !ok || !strings.HasPrefix(brief, "[acp-router handoff]") || !strings.Contains(brief, "User: say alpha-one") || !strings.Contains(brief, "Alpha: alpha-one") {
		t.Fatalf("beta's prompt %q: want the brief of alpha's turn first", got)
	}
	if rest != "prompt-text the diff" {
		t.Errorf("template expanded to %q", rest)
	}

	// A→B→A in a new session: beta hears alpha's turn, alpha then hears
	// only beta's; an agent that saw every turn gets no brief.
	sid = e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say a1", "end_turn")
	e.MustPrompt(t, sid, "/go-beta", "end_turn")
	e.MustPrompt(t, sid, "say b1", "end_turn")
	e.MustPrompt(t, sid, "prompt-text", "end_turn")
	if got := lastText(e, sid); got != "prompt-text" {
		t.Errorf("beta got a brief though it saw every turn: %q", got)
	}
	e.MustPrompt(t, sid, "/agent alpha", "end_turn")
	e.MustPrompt(t, sid, "prompt-text", "end_turn")
	got = lastText(e, sid)
	if !strings.HasPrefix(got, "[acp-router handoff]") || strings.Contains(got, "a1") || !strings.Contains(got, "User: say b1\nBeta: b1") {
		t.Errorf("alpha's brief %q: want beta's turns only", got)
	}
	for _, m := range updatesOf(e, sid, "user_message_chunk") {
		t.Errorf("the brief reached the editor as user text: %s", m)
	}
}

// TestHandoffNone pins `handoff: none`: a switched-to agent gets the
// prompt alone.
func TestHandoffNone(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha")+"handoff: none\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say a1", "end_turn")
	e.MustPrompt(t, sid, "/beta prompt-text", "end_turn")
	if got := lastText(e, sid); got != "prompt-text" {
		t.Errorf("with handoff: none beta got %q", got)
	}
}

// TestPromptsSerialized pins DESIGN §5: a second prompt sent while a turn
// runs waits for it, also when it goes to another agent (/beta).
func TestPromptsSerialized(t *testing.T) {
	t.Parallel()
	logA := filepath.Join(t.TempDir(), "a.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{LogFile: logA, SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	_, wait1, err := e.Go("session/prompt", promptReq(sid, "sleep 300ms\nsay one"))
	if err != nil {
		t.Fatal(err)
	}
	_, wait2, err := e.Go("session/prompt", promptReq(sid, "/beta say two"))
	if err != nil {
		t.Fatal(err)
	}
	m1, err1 := wait1(context.Background())
	m2, err2 := wait2(context.Background())
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	two := e.WaitText(t, sid, "two")
	all := e.Rec.All()
	if slices.Index(all, m1) > slices.Index(all, two) || m2.At.Before(m1.At) {
		t.Errorf("the second prompt ran before the first ended")
	}
	if got := e.Texts(sid); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("texts %q, want one then two", got)
	}
}
