package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
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
	relayed := recordMcp(e, func(p json.RawMessage) string {
		return jsonString(p, "method") + " " + jsonString(jsonPath(p, "params"), "name")
	})
	var mu sync.Mutex // answer
	asks := &permissionCounter{}
	answer := "allow_once"
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		kind := answer
		mu.Unlock()
		return asks.handler(kind)(p)
	})
	e.Initialize(t, capsAll)
	sid := newMcpSession(t, e, cwd, "editor tools")

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
	got := strings.Join(relayed.list(), "\n")
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
		decisions = append(decisions, a.summary())
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

// TestMcpOverAcpPolicyHiddenActs: what an agent's mcp/message acts with
// is decided however it is put. An MCP method other than those that only
// list, negotiate or follow up (prompts/get runs a prompt with the
// agent's arguments, completion/complete lists what a path completes to,
// "Tools/Call" is tools/call to a server that folds case), a path at any
// depth of a tool's arguments, a file uri with a fragment (a server that
// takes the rest of the uri as the path reads through it): each is
// asked, audited, and reaches the editor only if the user allows it.
// Before, the three methods reached the editor undecided and unaudited,
// and the nested path and the fragment were allowed as reads of main.go.
func TestMcpOverAcpPolicyHiddenActs(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	betaLog := filepath.Join(t.TempDir(), "beta.log")
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("beta", fakeOpts{Name: "beta", LogFile: betaLog, InitResult: json.RawMessage(initUnstable)}),
	}, `default: ask
rules:
  - id: editor-reads
    decision: allow
    when: {tool: ["mcp__editor_tools__read_file"], paths: ["${cwd}/**"]}
  - id: project-reads
    decision: allow
    when: {method: [mcp/message], kind: [read], paths: ["${cwd}/**"]}
`)
	e := StartRouter(t, cfg, nil)
	relayed := recordMcp(e, func(p json.RawMessage) string { return jsonString(p, "method") })
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsAll)
	sid := newMcpSession(t, e, cwd, "editor tools")

	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	e.MustPrompt(t, sid, strings.Join([]string{
		`mcp-send srv-1 {"method":"Tools/Call","params":{"name":"run_shell","arguments":{"command":"rm -rf ~"}}}`,
		`mcp-send srv-1 {"method":"prompts/get","params":{"name":"review","arguments":{"file":"/etc/shadow"}}}`,
		`mcp-send srv-1 {"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"file:///{path}"},"argument":{"name":"path","value":"/etc/"}}}`,
		`mcp-send srv-1 {"method":"tools/call","params":{"name":"read_file","arguments":{"path":` + q(cwd+"/main.go") + `,"opts":{"more":["/etc/shadow"]}}}}`,
		`mcp-send srv-1 {"method":"resources/read","params":{"uri":` + q("file://"+cwd+"/main.go#/../../../../../etc/shadow") + `}}`,
		`mcp-send srv-1 {"method":"tools/list","params":{}}`,
	}, "\n"), "end_turn")

	texts := e.Texts(sid)
	if len(texts) != 6 {
		t.Fatalf("agent said %d lines, want 6:\n%s", len(texts), strings.Join(texts, "\n"))
	}
	for i, text := range texts[:5] {
		var refused struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(strings.TrimPrefix(text, "mcp: ")), &refused)
		if refused.Error.Code != -32603 || !strings.HasPrefix(refused.Error.Message, "acp-router: the user did not allow beta ") {
			t.Errorf("line %d: %s, want the inner MCP error of a refusal", i, text)
		}
	}
	if texts[5] != `mcp: {"result":{"ok":true}}` {
		t.Errorf("tools/list: %s, want the editor's answer", texts[5])
	}
	got := strings.Join(relayed.list(), "\n")
	if got != "tools/list" {
		t.Errorf("the editor got\n%s\nwant tools/list only", got)
	}
	if asks.count() != 5 {
		t.Fatalf("the editor was asked %d times, want 5", asks.count())
	}
	var ask struct {
		ToolCall struct {
			Title    string `json:"title"`
			RawInput struct {
				Params json.RawMessage `json:"params"`
			} `json:"rawInput"`
		} `json:"toolCall"`
	}
	json.Unmarshal(asks.params[1], &ask)
	if ask.ToolCall.Title != "beta wants to send prompts/get to the MCP server editor tools" || !strings.Contains(string(ask.ToolCall.RawInput.Params), "/etc/shadow") {
		t.Errorf("the permission request for prompts/get: %s", asks.params[1])
	}
	var decisions []string
	for _, a := range readAudit(t, auditFile) {
		decisions = append(decisions, fmt.Sprintf("%s %s %s", a.Method, a.Decision, a.UserChoice))
	}
	if want := strings.TrimSuffix(strings.Repeat("mcp/message ask reject_once\n", 5), "\n"); strings.Join(decisions, "\n") != want {
		t.Errorf("audit\n%s\nwant\n%s", strings.Join(decisions, "\n"), want)
	}
}

// TestMcpOverAcpPolicyLookalikeServers: two servers whose names are alike
// in a tool's name ("editor tools" and "editor.tools" are both
// mcp__editor_tools__), or one whose name holds __ ("editor__x":
// mcp__editor__x__TOOL is also server "editor"'s tool x__TOOL), do not have
// their tools' names to themselves: a rule allowing one server's tool
// would allow the other's. A tools/call to such a server is asked; one to
// a server whose name is its own is decided by the rule as before.
func TestMcpOverAcpPolicyLookalikeServers(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{
		fakeAgentYAML("beta", fakeOpts{Name: "beta", InitResult: json.RawMessage(initUnstable)}),
	}, `default: ask
rules:
  - id: editor-reads
    decision: allow
    when: {tool: ["mcp__editor_tools__read_file", "mcp__editor__*", "mcp__mine__read_file"]}
`)
	e := StartRouter(t, cfg, nil)
	relayed := recordMcp(e, func(p json.RawMessage) string { return jsonString(p, "serverId") })
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsAll)
	sid := newMcpSession(t, e, cwd, "editor tools", "editor.tools", "editor__x", "mine")
	call := func(server string) string {
		return fmt.Sprintf(`mcp-send %s {"method":"tools/call","params":{"name":"read_file","arguments":{}}}`, server)
	}
	e.MustPrompt(t, sid, strings.Join([]string{call("srv-1"), call("srv-2"), call("srv-3"), call("srv-4")}, "\n"), "end_turn")
	if got := relayed.list(); strings.Join(got, ",") != "srv-4" || asks.count() != 3 {
		t.Errorf("relayed to %q with %d asks (all refused); want only srv-4 (a name of its own) relayed, the three look-alikes asked", got, asks.count())
	}
}

// mcpRelays are what the editor's ACP MCP servers were sent, one string
// per mcp/message (recordMcp).
type mcpRelays struct {
	mu  sync.Mutex
	got []string
}

func (m *mcpRelays) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

// recordMcp makes e's editor answer every mcp/message with an ok result,
// recording what of each describe says.
func recordMcp(e *Editor, describe func(p json.RawMessage) string) *mcpRelays {
	m := &mcpRelays{}
	e.Handle("mcp/message", func(p json.RawMessage) (any, *RPCError) {
		m.mu.Lock()
		m.got = append(m.got, describe(p))
		m.mu.Unlock()
		return map[string]any{"result": map[string]any{"ok": true}}, nil
	})
	return m
}

// newMcpSession opens a session in cwd to which the editor provides an
// ACP MCP server of each name, their serverIds srv-1, srv-2, ... in order.
func newMcpSession(t *testing.T, e *Editor, cwd string, names ...string) string {
	t.Helper()
	var servers []any
	for i, name := range names {
		servers = append(servers, map[string]any{"type": "acp", "name": name, "serverId": fmt.Sprintf("srv-%d", i+1)})
	}
	var r struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": servers}), &r)
	return r.SessionID
}
