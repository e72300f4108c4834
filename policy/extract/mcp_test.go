package extract

import (
	"encoding/json"
	"testing"
)

// TestMcpDecides: the router has the policy decide the MCP methods that
// act and whatever it cannot read as the editor does; the others pass.
func TestMcpDecides(t *testing.T) {
	for _, c := range []struct {
		params string
		want   bool
	}{
		{`{"serverId":"s","requestId":1,"method":"tools/call","params":{"name":"x"}}`, true},
		{`{"serverId":"s","requestId":1,"method":"resources/read","params":{"uri":"file:///a"}}`, true},
		{`{"serverId":"s","requestId":1,"method":"tools/list","params":{}}`, false},
		{`{"serverId":"s","requestId":1,"method":"initialize"}`, false},
		{`{"serverId":"s","requestId":1,"method":"ping"}`, false},
		{`{"serverId":"s","requestId":1,"method":"tasks/result","params":{"taskId":"t"}}`, false},
		{`{"serverId":"s","method":"notifications/cancelled","params":{"requestId":1}}`, false},
		{`{"serverId":"s","method":"notifications/initialized"}`, false},
		// Methods that act, or may: decided (asked), whatever their case.
		{`{"serverId":"s","requestId":1,"method":"prompts/get","params":{"name":"p","arguments":{}}}`, true},
		{`{"serverId":"s","requestId":1,"method":"completion/complete","params":{}}`, true},
		{`{"serverId":"s","requestId":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}`, true},
		{`{"serverId":"s","requestId":1,"method":"Tools/Call","params":{"name":"x"}}`, true},
		{`{"serverId":"s","requestId":1,"method":"tools/call ","params":{"name":"x"}}`, true},
		{`{"serverId":"s","requestId":1,"method":"TOOLS/LIST"}`, true},
		{`{"serverId":"s","requestId":1,"method":"x/run"}`, true},
		{`{"serverId":"s","method":"notifications/x"}`, true},
		{`{"serverId":"s","requestId":1,"method":5}`, true},
		{`{"serverId":"s","requestId":1}`, true},
		{`{"serverId":"s","requestId":1,"method":"tools/list","Method":"tools/call"}`, true},
		{`{"serverId":"s","requestId":1,"Method":"tools/list"}`, true},
		{`{"serverId":"s","requestId":1,"method":"tools/list","method":"tools/call"}`, true},
		{`[1]`, true},
		{`{"method":"tools/list"`, true},
	} {
		if got := McpDecides(json.RawMessage(c.params)); got != c.want {
			t.Errorf("McpDecides(%s) = %v, want %v", c.params, got, c.want)
		}
	}
}

// TestMcpCovers: an approval or grant of an MCP tool call covers later
// calls of the same tool only, never another tool's with the same path,
// nor an MCP call by a permission request's approval.
func TestMcpCovers(t *testing.T) {
	ev := func(method, params string) *Evidence {
		return Extract(&Request{Method: method, Params: json.RawMessage(params), McpServer: "files",
			Session: Session{Cwd: testCwd, Home: testHome}})
	}
	call := func(tool, args string) *Evidence {
		return ev("mcp/message", `{"serverId":"s","requestId":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+`}}`)
	}
	read := call("read_file", `{"path":"/home/user/project/a"}`)
	if got := read.Tools; len(got) != 1 || got[0] != "mcp__files__read_file" {
		t.Fatalf("tools %q", got)
	}
	for _, c := range []struct {
		name string
		a, b *Evidence
		want bool
	}{
		{"same tool, same path", read, call("read_file", `{"path":"/home/user/project/a"}`), true},
		{"same tool, other path", read, call("read_file", `{"path":"/home/user/project/b"}`), false},
		{"other tool, same path", read, call("delete_file", `{"path":"/home/user/project/a"}`), false},
		{"bare tool", call("search", `{"query":"x"}`), call("search", `{"query":"y"}`), true},
		{"bare, other tool", call("search", `{"query":"x"}`), call("run", `{"query":"y"}`), false},
		{"a permission request", ev("session/request_permission", `{"toolCall":{"toolCallId":"t","kind":"other","name":"mcp__files__read_file","locations":[{"path":"/home/user/project/a"}]}}`), read, false},
		{"no name", read, ev("mcp/message", `{"serverId":"s","requestId":1,"method":"tools/call","params":{}}`), false},
	} {
		if got := c.a.Covers(c.b); got != c.want {
			t.Errorf("%s: Covers = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMcpNameAmbiguous: a server's tools have their names to themselves
// unless another server's name is the same in mcp__SERVER__ form, or a
// name holds __ (mcp__A__B__T is server A's B__T and server A__B's T).
func TestMcpNameAmbiguous(t *testing.T) {
	for _, tt := range []struct {
		server string
		names  []string
		want   bool
	}{
		{"editor tools", []string{"editor tools"}, false},
		{"editor tools", []string{"editor tools", "other"}, false},
		{"editor tools", []string{"editor tools", "editor.tools"}, true},
		{"editor.tools", []string{"editor tools", "editor.tools"}, true},
		{"x", []string{"x", "x"}, true}, // declared twice
		{"a__b", []string{"a__b"}, true},
		{"a", []string{"a", "a__b"}, true},
		{"a", []string{"a", "a_b", "ab"}, false},
	} {
		if got := McpNameAmbiguous(tt.server, tt.names); got != tt.want {
			t.Errorf("McpNameAmbiguous(%q, %q) = %v, want %v", tt.server, tt.names, got, tt.want)
		}
	}
}
