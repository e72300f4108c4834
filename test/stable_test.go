package test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// End-to-end tests of the stable protocol changes a router must pass on
// (notes/acp-currency.md rows 1–4 and 6, issue 15).

// TestPolicyToolName: a rule on the tool call's name (ToolCall.name, sent
// in the agent's tool_call update) decides the permission request that
// names only the tool call's id; a tool without a matching name is asked
// about as before.
func TestPolicyToolName(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: ask
rules:
  - id: no-shell
    decision: deny
    when: {tool: [Bash]}
  - id: mcp-reads
    decision: allow
    when: {tool: ["mcp__*"], kind: [read, search]}
`)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, `permission-tool {"kind":"execute","name":"Bash","title":"ls","rawInput":{"command":"ls"}}
permission-tool {"kind":"search","name":"mcp__github__search","title":"search issues"}
permission-tool {"kind":"search","name":"Grep","title":"search issues"}`, "end_turn")

	got := e.Texts(sid)
	want := []string{`"optionId":"reject"`, `"optionId":"allow"`, `"optionId":"allow"`}
	if len(got) != len(want) {
		t.Fatalf("agent said %q", got)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("agent said %q; want %s", got[i], want[i])
		}
	}
	if n := asks.count(); n != 1 {
		t.Errorf("the editor was asked %d times; want 1 (Grep matches no rule)", n)
	}
	recs := readAudit(t, auditFile)
	if len(recs) != 3 || recs[0].rule() != "no-shell" || recs[0].Decision != "deny" || recs[1].rule() != "mcp-reads" || recs[1].Decision != "allow" || recs[2].Decision != "ask" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestObjectIDsApart: two agents of one session that choose the same
// compactionId and planId reach the editor with distinct ids, each agent's
// later updates patch its own object, a plan_removed removes the agent's
// own plan, and a switch removes the old agent's plans from the screen.
func TestObjectIDsApart(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	script := `update {"sessionUpdate":"compaction_update","compactionId":"c-1","status":"in_progress"}
update {"sessionUpdate":"compaction_summary_chunk","compactionId":"c-1","content":{"type":"text","text":"SUMMARY-%[1]s"}}
update {"sessionUpdate":"compaction_update","compactionId":"c-1","status":"completed"}
update {"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p-1","entries":[]}}
update {"sessionUpdate":"plan_update","plan":{"type":"markdown","planId":"p-2","content":"# %[1]s"}}`
	e.MustPrompt(t, sid, fmt.Sprintf(script, "alpha"), "end_turn")
	e.MustPrompt(t, sid, "/beta "+fmt.Sprintf(script, "beta")+`
update {"sessionUpdate":"plan_removed","planId":"p-2"}
prompt-text`, "end_turn")
	// Beta's first prompt had the brief: alpha compacted its history.
	if got := lastText(e, sid); !strings.Contains(got, "(alpha compacted its conversation history here; its summary: SUMMARY-alpha)") {
		t.Errorf("beta's prompt %q: want the brief to say alpha compacted", got)
	}
	e.MustPrompt(t, sid, `update {"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p-1","entries":[]}}`, "end_turn")

	ids := func(kind string, path ...string) []string {
		var out []string
		for _, m := range updatesOf(e, sid, kind) {
			var id string
			json.Unmarshal(jsonPath(m.Params, append([]string{"update"}, path...)...), &id)
			out = append(out, id)
		}
		return out
	}
	if got, want := ids("compaction_update", "compactionId"), []string{"c-1", "c-1", "c-1~beta", "c-1~beta"}; !slices.Equal(got, want) {
		t.Errorf("compaction_update ids %q, want %q", got, want)
	}
	if got, want := ids("compaction_summary_chunk", "compactionId"), []string{"c-1", "c-1~beta"}; !slices.Equal(got, want) {
		t.Errorf("compaction_summary_chunk ids %q, want %q", got, want)
	}
	if got, want := ids("plan_update", "plan", "planId"), []string{"p-1", "p-2", "p-1~beta", "p-2~beta", "p-1"}; !slices.Equal(got, want) {
		t.Errorf("plan_update ids %q, want %q", got, want)
	}
	if got, want := ids("plan_removed", "planId"), []string{"p-2~beta"}; !slices.Equal(got, want) {
		t.Errorf("plan_removed ids %q, want %q", got, want)
	}

	// Switching to beta removes alpha's plans (p-1, p-2), not beta's p-1~beta.
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	if got, want := ids("plan_removed", "planId"), []string{"p-2~beta", "p-1", "p-2"}; !slices.Equal(got, want) {
		t.Errorf("plan_removed ids after the switch %q, want %q", got, want)
	}
}

// TestNoticeLiveOnly: a notice reaches the editor with the router's
// session id, and a session/load does not replay it (it is never stored).
func TestNoticeLiveOnly(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "s-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "s-"}),
	}, "default: alpha"))
	cwd := t.TempDir()
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "/beta say hi", "end_turn") // beta's s-1 is not the router's id
	notice := `update {"sessionUpdate":"notice","severity":"warning","title":"Rate limited"}`
	e.MustPrompt(t, sid, notice+"\nsay one", "end_turn")
	e.MustPrompt(t, sid, "/beta "+notice, "end_turn")
	if n := len(updatesOf(e, sid, "notice")); n != 2 {
		t.Fatalf("the editor got %d notices for %s, want 2", n, sid)
	}
	// loadUpdates has every update before the answer, the live ones too:
	// the two notices, and the thread twice (live, then replayed).
	var notices, chunks int
	for _, m := range loadUpdates(t, e, sid, cwd) {
		switch m.Update() {
		case "notice":
			notices++
		case "agent_message_chunk":
			chunks++
		}
	}
	if notices != 2 || chunks != 4 {
		t.Errorf("%d notices and %d message chunks up to the load's answer, want 2 (live only) and 4 (2 live, 2 replayed)", notices, chunks)
	}
}

// TestSystemPrompt: the router advertises systemPrompt; an append prompt
// reaches the agent that takes it on session/new, and is carried as a text
// block into the first prompt of an agent without it after a switch (not
// on its session/new); an override is refused for such an agent, on a
// switch and on session/new, with an error naming why.
func TestSystemPrompt(t *testing.T) {
	t.Parallel()
	withSP := `{"protocolVersion":1,"agentCapabilities":{"sessionCapabilities":{"systemPrompt":{"mode":{"override":{}}}}},"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-", InitResult: json.RawMessage(withSP)}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	res := e.Initialize(t, capsAll)
	if sp := jsonPath(res, "agentCapabilities", "sessionCapabilities", "systemPrompt"); string(sp) != "{}" {
		t.Errorf("systemPrompt advertised as %s, want {} (append only)", sp)
	}
	newSession := func(mode string) string {
		res := e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{},
			"systemPrompt": map[string]any{"mode": mode, "content": []any{map[string]any{"type": "text", "text": "Answer in French."}}}})
		return jsonString(res, "sessionId")
	}
	sid := newSession("append")
	e.MustPrompt(t, sid, "new-params", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, `"systemPrompt":{"content":[{"text":"Answer in French.","type":"text"}],"mode":"append"}`) {
		t.Errorf("alpha's session/new params %s: want the systemPrompt", got)
	}
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	e.MustPrompt(t, sid, "new-params\nprompt-text", "end_turn")
	texts := e.Texts(sid)
	if got := texts[len(texts)-2]; strings.Contains(got, "systemPrompt") {
		t.Errorf("beta's session/new params %s: it does not take a systemPrompt", got)
	}
	if got := lastText(e, sid); !strings.HasPrefix(got, "[acp-router system prompt] ") || !strings.Contains(got, "Answer in French.") {
		t.Errorf("beta's first prompt %q: want the system prompt carried first", got)
	}
	e.MustPrompt(t, sid, "prompt-text", "end_turn")
	if got := lastText(e, sid); strings.Contains(got, "Answer in French.") {
		t.Errorf("beta's second prompt %q: the system prompt is carried once", got)
	}

	sid2 := newSession("override")
	e.MustPrompt(t, sid2, "/agent beta", "end_turn")
	if got := lastText(e, sid2); !strings.Contains(got, "Cannot switch") || !strings.Contains(got, `agent "beta" does not support a systemPrompt in "override" mode`) {
		t.Errorf("switch with an override prompt: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}, "_meta": map[string]any{},
		"systemPrompt": map[string]any{"mode": "_custom", "content": []any{map[string]any{"type": "text", "text": "x"}}}})
	if rerr == nil || rerr.Code != -32602 || !strings.Contains(rerr.Message, `"_custom" mode`) {
		t.Errorf("session/new with a mode alpha does not take: %v, want -32602 naming it", rerr)
	}
}

// TestPlanRemovedOfAnotherAgent: a plan_removed reaches the editor only
// for a plan its agent put on the screen. Beta, running one turn for the
// user (/beta), sent plan_removed naming alpha's plan "p-1", an id beta
// never used: the router passed the id through as it was, and the editor
// removed alpha's plan.
func TestPlanRemovedOfAnotherAgent(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, `update {"sessionUpdate":"plan_update","plan":{"type":"markdown","planId":"p-1","content":"# alpha's plan"}}`, "end_turn")
	e.MustPrompt(t, sid, `/beta update {"sessionUpdate":"plan_removed","planId":"p-1"}
update {"sessionUpdate":"plan_update","plan":{"type":"markdown","planId":"p-2","content":"# beta's plan"}}
update {"sessionUpdate":"plan_removed","planId":"p-2"}`, "end_turn")
	var removed []string
	for _, m := range updatesOf(e, sid, "plan_removed") {
		removed = append(removed, jsonString(m.Params, "update", "planId"))
	}
	if want := []string{"p-2"}; !slices.Equal(removed, want) {
		t.Errorf("the editor was told to remove plans %q, want %q (beta's own only)", removed, want)
	}
}
