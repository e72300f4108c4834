package test

// The other things the newest agents send (issue 13, part 4): session-less
// notifications such as Claude's _auth/status_update, session_info_update
// with only _meta or a later title, and the capabilities they add, in both
// directions.

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func init() {
	// notify METHOD [JSON]: a notification with those params (none
	// without), naming no session unless the JSON does.
	fakeScriptExt["notify"] = func(a *fakeAgent, s *fakeSession, rest string) {
		method, params, _ := strings.Cut(rest, " ")
		if params == "" {
			a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "method": method}))
			return
		}
		a.notify(method, json.RawMessage(params))
	}
	// init-params: say the params of the initialize the agent got.
	fakeScriptExt["init-params"] = func(a *fakeAgent, s *fakeSession, rest string) {
		p, _ := a.initParams.Load().(json.RawMessage)
		a.say(s.id, string(p))
	}
}

// fixtureInitResult is the initialize result recorded in a real agent's
// wire transcript (testdata/real-agents).
func fixtureInitResult(t *testing.T, name string) json.RawMessage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "real-agents", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg struct {
				Result json.RawMessage `json:"result"`
			} `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && jsonPath(line.Msg.Result, "protocolVersion") != nil {
			return line.Msg.Result
		}
	}
	t.Fatalf("%s: no initialize result", name)
	return nil
}

// TestAuthStatusAttributed: a notification naming no session (Claude's
// _auth/status_update, ACP's unstable auth/status_update) reaches the editor
// saying which agent sent it, in _meta["acp-router"].agent, and an agent
// cannot pass for another.
func TestAuthStatusAttributed(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("claude", fakeOpts{}),
		fakeAgentYAML("codex", fakeOpts{SessionPrefix: "c-"}),
	}, "default: claude"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	// As claude-agent-acp 0.100.0 sends it (testdata/real-agents).
	e.MustPrompt(t, sid, `notify _auth/status_update {"authStatus":{"kind":"none","label":"Not logged in"}}`, "end_turn")
	e.MustPrompt(t, sid, `/codex notify auth/status_update {"state":"authenticated","_meta":{"acp-router":{"agent":"claude"}}}`, "end_turn")
	e.MustPrompt(t, sid, `/codex notify _codex/ping`, "end_turn")

	got := e.Rec.Filter(func(m *Msg) bool { return strings.Contains(m.Method, "status_update") || m.Method == "_codex/ping" })
	if len(got) != 3 {
		t.Fatalf("the editor got %v, want three notifications", got)
	}
	requireJSON(t, "claude's _auth/status_update", got[0].Params,
		`{"authStatus":{"kind":"none","label":"Not logged in"},"_meta":{"acp-router":{"agent":"claude"}}}`)
	requireJSON(t, "codex's auth/status_update, naming claude itself", got[1].Params,
		`{"state":"authenticated","_meta":{"acp-router":{"agent":"codex"}}}`)
	requireJSON(t, "an extension notification without params", got[2].Params, `{"_meta":{"acp-router":{"agent":"codex"}}}`)
}

// TestSessionInfoUpdates: a session_info_update with only _meta (Codex sends
// one per state change) is forwarded, with the session id translated, when
// it comes from the agent running the turn; a later title from the active
// agent renames the thread (forwarded, and kept for session/list); a title
// from a one-turn command's agent does not.
func TestSessionInfoUpdates(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}), // its ids differ from the router's
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	cwd := t.TempDir()
	sid := e.NewSession(t, cwd)

	e.MustPrompt(t, sid, strings.Join([]string{
		`update {"sessionUpdate":"session_info_update","title":"First"}`,
		`update {"sessionUpdate":"session_info_update","_meta":{"codex":{"state":"running"}}}`,
		`update {"sessionUpdate":"session_info_update","title":"Renamed","updatedAt":"2026-11-25T10:00:00Z"}`,
	}, "\n"), "end_turn")
	e.MustPrompt(t, sid, "/beta "+strings.Join([]string{
		`update {"sessionUpdate":"session_info_update","title":"A one-turn title"}`,
		`update {"sessionUpdate":"session_info_update","_meta":{"codex":{"state":"idle"}}}`,
	}, "\n"), "end_turn")
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	e.MustPrompt(t, sid, `update {"sessionUpdate":"session_info_update","title":"Beta's"}`, "end_turn")

	var got []string
	for _, m := range updatesOf(e, sid, "session_info_update") {
		got = append(got, string(jsonPath(m.Params, "update")))
	}
	want := []string{
		`{"sessionUpdate":"session_info_update","title":"First"}`,
		`{"sessionUpdate":"session_info_update","_meta":{"codex":{"state":"running"}}}`,
		`{"sessionUpdate":"session_info_update","title":"Renamed","updatedAt":"2026-11-25T10:00:00Z"}`,
		`{"sessionUpdate":"session_info_update","_meta":{"codex":{"state":"idle"}}}`,
		`{"sessionUpdate":"session_info_update","title":"Beta's"}`,
	}
	if len(got) != len(want) {
		t.Fatalf("session_info_update the editor got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		requireJSON(t, "session_info_update", []byte(got[i]), want[i])
	}
	if n := len(e.Rec.Filter(func(m *Msg) bool { return m.Update() == "session_info_update" && m.SessionID() != sid })); n != 0 {
		t.Errorf("%d session_info_update with an untranslated session id", n)
	}

	res := e.MustCall(t, "session/list", map[string]any{"cwd": cwd})
	var list struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
			Title     string `json:"title"`
		} `json:"sessions"`
	}
	json.Unmarshal(res, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != sid || list.Sessions[0].Title != "Beta's" {
		t.Errorf("session/list %s, want the session titled by its active agent's last title", res)
	}
}

// TestNewestAgentCapabilities: in front of the newest agents (Claude
// 0.100.0 and Codex as recorded, and an agent advertising every capability
// of the unstable schema) the router advertises only what it keeps true
// for every agent a session may be switched to (merge.capabilityTable):
// not systemPrompt, providers, nor the agents' _meta (steering,
// promptQueueing, authStatus); the unstable methods it routes itself
// (title, status, archive, fork: lifecycle.go; auth.status: authstatus.go; MCP over ACP: mcp.go)
// it does. The other way,
// the agents get the editor's capabilities less those whose traffic the
// router does not route: plan (subagents are routed, so they pass).
func TestNewestAgentCapabilities(t *testing.T) {
	t.Parallel()
	everything := `{"protocolVersion":1,"agentCapabilities":{"loadSession":true,
		"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true,"_meta":{"x":{}}},
		"mcpCapabilities":{"http":true,"sse":true,"acp":true},
		"sessionCapabilities":{"list":{},"delete":{},"additionalDirectories":{},"systemPrompt":{"mode":{"override":{}}},"fork":{},"archive":{},"status":{},"title":{},"resume":{},"close":{},"_meta":{"x":{}}},
		"auth":{"logout":{},"status":{}},"providers":{},"_meta":{"steering":{"supported":true}}},
		"authMethods":[],"agentInfo":{"name":"everything","version":"1"},"_meta":{"steering":{"supported":true}}}`
	// gamma, the default agent, has answered when the router answers
	// initialize; the others may not have: the capabilities they would add
	// are gamma's too.
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("gamma", fakeOpts{InitResult: json.RawMessage(everything), SessionPrefix: "g-"}),
		fakeAgentYAML("claude", fakeOpts{InitResult: fixtureInitResult(t, "agentclientprotocol-claude-agent-acp-0.100.0.jsonl")}),
		fakeAgentYAML("codex", fakeOpts{InitResult: fixtureInitResult(t, "codex-acp-0.16.0-mock.jsonl"), SessionPrefix: "c-"}),
	}, "default: gamma"))
	e := StartRouter(t, cfg, nil)
	editorCaps := map[string]any{
		"fs": map[string]any{"readTextFile": true, "writeTextFile": true}, "terminal": true,
		"auth":        map[string]any{"terminal": true},
		"session":     map[string]any{"configOptions": map[string]any{"boolean": map[string]any{}}, "notices": map[string]any{}, "promptSuggestions": map[string]any{}},
		"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}},
		"_meta":       map[string]any{"terminal_output": true, "terminal-auth": true},
		"subagents":   map[string]any{},
		"plan":        map[string]any{},
	}
	res := e.Initialize(t, editorCaps)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "init-params", "end_turn")
	e.MustPrompt(t, sid, "/claude init-params", "end_turn")
	e.MustPrompt(t, sid, "/codex init-params", "end_turn")

	if jsonPath(res, "_meta") != nil {
		t.Errorf("the router passes on an agent's initialize _meta: %s", res)
	}
	requireJSON(t, "the router's agentCapabilities", jsonPath(res, "agentCapabilities"), `{"loadSession":true,
		"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true,"acp":true},
		"sessionCapabilities":{"list":{},"delete":{},"additionalDirectories":{},"resume":{},"close":{},"title":{},"status":{},"archive":{},"fork":{},"systemPrompt":{}},
		"auth":{"logout":{},"status":{}},
		"sandbox":{"mode":"host","guarantees":{"fsIsolation":"none","netIsolation":"none","processCaps":false}}}`)

	wantCaps := `{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true,"auth":{"terminal":true},
		"session":{"configOptions":{"boolean":{}},"notices":{}},"elicitation":{"form":{},"url":{}},
		"_meta":{"terminal_output":true,"terminal-auth":true},"subagents":{},"plan":{}}`
	texts := e.Texts(sid)
	var inits []string
	for _, text := range texts {
		if strings.HasPrefix(text, "{") && strings.Contains(text, "clientCapabilities") {
			inits = append(inits, text)
		}
	}
	if len(inits) != 3 {
		t.Fatalf("init params said by the agents: %q, want three", texts)
	}
	for i, agent := range []string{"gamma", "claude", "codex"} {
		requireJSON(t, agent+"'s clientCapabilities", jsonPath([]byte(inits[i]), "clientCapabilities"), wantCaps)
	}
}
