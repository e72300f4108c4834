package extract

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/acp-router/acp-router/acp"
)

// MCP over ACP (acp-currency row 12; schema MessageMcpRequest): an agent's
// mcp/message reaches an MCP server the editor runs in its own process, so
// that a tools/call there reads, writes or runs things as an fs or
// terminal call does. The policy decides the two inner methods that act:
// tools/call (the tool, and its arguments read as a tool call's rawInput)
// and resources/read (its URI). The router passes only the methods that
// list, negotiate or follow up without acting (mcpInert) without a
// decision; any other (prompts/get, completion/complete, a method the
// policy does not know) is opaque, asked (McpDecides).

// mcpInert are the MCP methods an agent (the MCP client) sends that act on
// nothing the agent chooses (MCP 2025-11-25, client to server): they
// negotiate, list what the server offers, or follow up a tools/call that
// was decided (tasks/*). Matched by exact name, as MCP servers dispatch:
// "Tools/Call" is not "tools/call" here, and a server that folds case
// would run it as one. Everything else acts, or might: prompts/get runs a
// prompt with the agent's arguments and may embed resources (files) in
// its answer, completion/complete lists what a prefix completes to (a
// directory's entries), resources/subscribe watches a resource.
var mcpInert = map[string]bool{
	"initialize": true, "ping": true, "logging/setLevel": true, "tools/list": true,
	"resources/list": true, "resources/templates/list": true, "resources/unsubscribe": true,
	"prompts/list": true, "tasks/get": true, "tasks/list": true, "tasks/result": true, "tasks/cancel": true,
	"notifications/initialized": true, "notifications/cancelled": true, "notifications/progress": true,
	"notifications/roots/list_changed": true,
}

// McpDecides says whether the router must have the policy decide an
// mcp/message with these params before it reaches the editor: its inner
// method is not one known not to act (mcpInert, by its exact name), or
// the params cannot be read as the editor reads them (not an object, no
// method read by its exact name, a member named twice or in two cases):
// what cannot be read is never passed without a decision.
func McpDecides(params json.RawMessage) bool {
	if !json.Valid(params) {
		return true
	}
	if _, _, ok := acp.AmbiguousMember(params); ok {
		return true
	}
	if _, _, ok := acp.FoldedMember(params, "serverId", "requestId", "method", "params"); ok {
		return true
	}
	var top [1]json.RawMessage
	var m string
	if acp.Members(params, []string{"method"}, top[:]) != nil || json.Unmarshal(top[0], &m) != nil || m == "" {
		return true
	}
	return !mcpInert[m]
}

// McpToolName is the name an MCP tool called over ACP has for the tool
// matcher: mcp__SERVER__TOOL, as Claude Code names MCP tools. SERVER is
// the name the session declared for the server (mcpServers[].name; its
// serverId when it has none), each character other than an ASCII letter,
// digit, _ or - replaced by _; TOOL is the tool's name as called.
func McpToolName(server, tool string) string {
	b := []byte(server)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return "mcp__" + string(b) + "__" + tool
}

// McpNameAmbiguous: the MCP server named server, among the servers names
// (every server a session declared, server included once), does not have
// its tools' names to itself: another server's name is the same in
// McpToolName's form ("editor tools", "editor.tools"), or one of the two
// holds "__", so that mcp__A__B__TOOL may be server A's tool B__TOOL or
// server A__B's TOOL (a rule for mcp__A__* covers A__B's tools).
func McpNameAmbiguous(server string, names []string) bool {
	norm := func(n string) string {
		return strings.TrimSuffix(strings.TrimPrefix(McpToolName(n, ""), "mcp__"), "__")
	}
	own := norm(server)
	if strings.Contains(own, "__") {
		return true
	}
	seen := false
	for _, n := range names {
		o := norm(n)
		switch {
		case o == own && !seen && n == server:
			seen = true // itself
		case o == own, strings.HasPrefix(o, own+"__"):
			return true
		}
	}
	return false
}

// mcpMessage reads an mcp/message request's evidence. What it cannot read
// is opaque (never allowed without asking).
func (x *extractor) mcpMessage(params json.RawMessage, server string, ambiguous bool) {
	var top [3]json.RawMessage
	if err := acp.Members(params, []string{"serverId", "method", "params"}, top[:]); err != nil {
		x.opaque("params", "the mcp/message params do not decode: "+err.Error(), KindOther)
		return
	}
	var serverID, method string
	if json.Unmarshal(top[0], &serverID) != nil || json.Unmarshal(top[1], &method) != nil || method == "" {
		x.opaque("params", "the mcp/message has no serverId or method the policy can read", KindOther)
		return
	}
	if server == "" {
		server = serverID
	}
	inner := top[2]
	if len(inner) > 0 && string(inner) != "null" {
		if inner[0] != '{' {
			x.opaque("params.params", "the MCP params are not an object", KindOther)
			return
		}
		if want, got, ok := acp.FoldedMember(inner, "name", "arguments", "uri"); ok {
			x.refuse("params.params", fmt.Sprintf("member %q is %q to a decoder that ignores case, but not to the MCP server, which reads names exactly", got, want), KindOther)
		}
	}
	var f [3]json.RawMessage
	if len(inner) > 0 && string(inner) != "null" {
		if err := acp.Members(inner, []string{"name", "arguments", "uri"}, f[:]); err != nil {
			x.opaque("params.params", "the MCP params do not decode: "+err.Error(), KindOther)
			return
		}
	}
	switch method {
	case acp.McpToolsCall:
		var name string
		if json.Unmarshal(f[0], &name) != nil || name == "" {
			x.opaque("params.params.name", "the tools/call names no tool", KindOther)
			return
		}
		x.ev.Tools = append(x.ev.Tools, McpToolName(server, name))
		if ambiguous {
			x.opaque("params.serverId", fmt.Sprintf("%s is also the name of another MCP server's tool (its server's name and another's are alike, or hold __): a tool: rule cannot tell them apart", McpToolName(server, name)), KindOther)
		}
		// What the tool does is the server's: its arguments are read as
		// a tool call's rawInput, their kinds only those they show
		// (a write's content, a move's destination) beside other.
		kinds := append([]Kind{KindOther}, impliedKinds(f[1])...)
		before := len(x.ev.Items)
		if args := f[1]; len(args) > 0 && string(args) != "null" {
			if args[0] != '{' {
				x.opaque("params.params.arguments", "the tool's arguments are not an object", KindOther)
			} else {
				x.mcpArgs = true
				x.rawInput(args, kinds, false)
				x.mcpArgs = false
			}
		}
		if len(x.ev.Items) == before {
			x.add(Item{Type: ItemTool, Origin: "MCP tool"}, kinds...)
		}
	case acp.McpResourcesRead:
		var uri string
		if json.Unmarshal(f[2], &uri) != nil || uri == "" {
			x.opaque("params.params.uri", "the resources/read names no uri", KindRead)
			return
		}
		x.resourceURI(uri)
	default:
		x.add(Item{Type: ItemTool, Origin: "MCP method", Opaque: fmt.Sprintf("the policy does not decide the MCP method %q", method)}, KindOther)
		// What the method is given (prompts/get's arguments) is still
		// read, for the deny rules and the audit.
		if args := f[1]; len(args) > 0 && args[0] == '{' {
			x.mcpArgs = true
			x.rawInput(args, []Kind{KindOther}, false)
			x.mcpArgs = false
		}
	}
}

// resourceURI records what a resources/read reads: a file:// URI is the
// file it names, an http(s) URI its host; any other scheme is the
// server's to interpret (opaque).
func (x *extractor) resourceURI(uri string) {
	const origin = "resources/read uri"
	u, err := url.Parse(uri)
	if err != nil {
		x.opaque(origin, "the resource uri does not parse: "+err.Error(), KindRead)
		return
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		if (u.Host != "" && !strings.EqualFold(u.Host, "localhost")) || !path.IsAbs(u.Path) || u.Opaque != "" {
			x.opaque(origin, fmt.Sprintf("the file uri %q names no absolute local path", uri), KindRead)
			return
		}
		if u.RawQuery != "" || u.ForceQuery || strings.Contains(uri, "#") {
			// A server that takes what follows file:// as the path reads
			// "main.go#/../../../etc/passwd" through a directory named
			// "main.go#" (one the agent can make), where the policy reads
			// main.go: a file has no query or fragment to drop.
			x.opaque(origin, fmt.Sprintf("the file uri %q has a query or fragment: the MCP server may read it as part of the path", uri), KindRead)
			return
		}
		x.path(u.Path, false, KindRead, false, origin, nil)
	case "http", "https":
		x.url(uri, origin)
	default:
		x.opaque(origin, fmt.Sprintf("the resource uri's scheme %q is the MCP server's to interpret", u.Scheme), KindRead)
	}
}
