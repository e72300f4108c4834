package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestMcpOverAcpPolicy: with a policy in force, an agent's mcp/message
// tools/call (and resources/read) to an ACP MCP server the editor runs is
// decided before it is relayed, its tool named mcp__SERVER__TOOL by the
// server's declared name and its arguments read as a tool call's rawInput.
// An allowed call reaches the editor; a denied one never does, the agent
// gets the inner MCP error naming the rule; an asked one is shown to the
// editor as the router's own permission request and relayed only when
// allowed; tools/list passes undecided; params the router cannot read
// (a tools/call without a name, an inner method that is not a string) are
// asked about, never relayed without asking. Every decision is audited
// with its rule, session and agent.
func TestMcpOverAcpPolicy(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	betaLog := filepath.Join(t.TempDir(), "beta.log")
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("beta", fakeOpts{Name: "beta", LogFile: betaLog, InitResult: json.RawMessage(initUnstable)}),
	}, `default: ask
rules:
  - id: no-secrets
    decision: deny
    when: {paths: ["**/.env"]}
    message: Secrets are not available to agents.
  - id: editor-reads
    decision: allow
    when: {tool: ["mcp__editor_tools__read_file"], paths: ["${cwd}/**"]}
`)
	e := StartRouter(t, cfg, nil)
	var mu sync.Mutex
	var relayed []string
	e.Handle("mcp/message", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		relayed = append(relayed, jsonString(p, "method")+" "+jsonString(jsonPath(p, "params"), "name"))
		mu.Unlock()
		return map[string]any{"result": map[string]any{"ok": true}}, nil
	})
	asks := &permissionCounter{}
	answer := "allow_once"
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		kind := answer
		mu.Unlock()
		return asks.handler(kind)(p)
	})
	e.Initialize(t, capsAll)
	var r struct {
		SessionID string `json:"sessionId"`
	}
	servers := []any{map[string]any{"type": "acp", "name": "editor tools", "serverId": "srv-1"}}
	json.Unmarshal(e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": servers}), &r)
	sid := r.SessionID

	call := func(tool, args string) string {
		return fmt.Sprintf(`mcp-send srv-1 {"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args)
	}
	e.MustPrompt(t, sid, strings.Join([]string{
		call("read_file", fmt.Sprintf(`{"path":%q}`, cwd+"/main.go")),
		call("read_file", fmt.Sprintf(`{"path":%q}`, cwd+"/.env")),
		`mcp-send srv-1 {"method":"tools/list","params":{}}`,
		call("write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, cwd+"/a.txt")),
	}, "\n"), "end_turn")
	mu.Lock()
	answer = "reject_once"
	mu.Unlock()
	e.MustPrompt(t, sid, strings.Join([]string{
		call("write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, cwd+"/b.txt")),
		`mcp-send srv-1 {"method":"tools/call","params":{"arguments":{}}}`,
		`mcp-send srv-1 {"method":5,"params":{"name":"read_file"}}`,
	}, "\n"), "end_turn")

	texts := e.Texts(sid)
	ok := `mcp: {"result":{"ok":true}}`
	if len(texts) != 7 {
		t.Fatalf("agent said %d lines, want 7:\n%s", len(texts), strings.Join(texts, "\n"))
	}
	for _, i := range []int{0, 2, 3} {
		if texts[i] != ok {
			t.Errorf("line %d: %s, want the editor's answer", i, texts[i])
		}
	}
	denied := struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Rule string `json:"rule"`
			} `json:"data"`
		} `json:"error"`
	}{}
	json.Unmarshal([]byte(strings.TrimPrefix(texts[1], "mcp: ")), &denied)
	if denied.Error.Code != -32603 || denied.Error.Message != "acp-router: denied by no-secrets: Secrets are not available to agents." || denied.Error.Data.Rule != "no-secrets" {
		t.Errorf("the denied tools/call: %s, want the inner MCP error naming no-secrets", texts[1])
	}
	for _, i := range []int{4, 5, 6} {
		var refused struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Data    struct {
					UserChoice string `json:"userChoice"`
				} `json:"data"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(strings.TrimPrefix(texts[i], "mcp: ")), &refused)
		if refused.Error.Code != -32603 || !strings.HasPrefix(refused.Error.Message, "acp-router: the user did not allow beta ") || refused.Error.Data.UserChoice != "reject_once" {
			t.Errorf("line %d: %s, want the inner MCP error of a refusal", i, texts[i])
		}
	}
	mu.Lock()
	got := strings.Join(relayed, "\n")
	mu.Unlock()
	if want := "tools/call read_file\ntools/list \ntools/call write_file"; got != want {
		t.Errorf("the editor got\n%s\nwant\n%s", got, want)
	}
	if asks.count() != 4 {
		t.Fatalf("the editor was asked %d times, want 4", asks.count())
	}
	var ask struct {
		SessionID string `json:"sessionId"`
		ToolCall  struct {
			Title    string `json:"title"`
			Kind     string `json:"kind"`
			RawInput struct {
				Tool      string          `json:"tool"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"rawInput"`
		} `json:"toolCall"`
	}
	json.Unmarshal(asks.params[0], &ask)
	if ask.SessionID != sid || ask.ToolCall.Title != "beta wants to call the MCP tool mcp__editor_tools__write_file" ||
		ask.ToolCall.RawInput.Tool != "write_file" || !strings.Contains(string(ask.ToolCall.RawInput.Arguments), "a.txt") {
		t.Errorf("router's permission request %s", asks.params[0])
	}

	var decisions []string
	for _, a := range readAudit(t, auditFile) {
		if a.Session != sid || a.Agent != "beta" {
			t.Errorf("audit record of session %q agent %q, want %q beta", a.Session, a.Agent, sid)
		}
		decisions = append(decisions, fmt.Sprintf("%s %s %s %s %s", a.Method, a.Decision, a.rule(), a.Source, a.UserChoice))
	}
	wantAudit := []string{
		"mcp/message allow editor-reads rule ",
		"mcp/message deny no-secrets rule ",
		"mcp/message ask  user allow_once",
		"mcp/message ask  user reject_once",
		"mcp/message ask acp-router:opaque user reject_once",
		"mcp/message ask acp-router:opaque user reject_once",
	}
	if strings.Join(decisions, "\n") != strings.Join(wantAudit, "\n") {
		t.Errorf("audit\n%s\nwant\n%s", strings.Join(decisions, "\n"), strings.Join(wantAudit, "\n"))
	}
}
