package guard

import (
	"encoding/json"

	"github.com/acp-router/acp-router/policy/extract"
)

// MCP over ACP (acp-currency row 12): what the router asks before it
// relays an agent's mcp/message to the MCP server the editor runs. The
// answers are the policy's (policy/mcp.go); the router does not import
// policy (DESIGN §2), so they are asked here.

// DecidesMcp: with a policy in force, an mcp/message with these params is
// decided (Decide) before it reaches the editor: its inner method may act,
// or its params cannot be read as the editor reads them
// (extract.McpDecides). With none in force nothing is decided.
func (g *Guard) DecidesMcp(params json.RawMessage) bool {
	return g.Enforcing() && extract.McpDecides(params)
}

// McpToolName is the name the policy's tool: rules know an MCP tool
// called over ACP by: mcp__SERVER__TOOL (extract.McpToolName). The router
// shows it to the user when it asks.
func McpToolName(server, tool string) string { return extract.McpToolName(server, tool) }

// McpNameAmbiguous: the MCP server named server, among every server the
// session declared (names), does not have its tools' names to itself, so
// that a tool: rule cannot tell its tools from another server's
// (extract.McpNameAmbiguous); Request.McpAmbiguous carries it to Decide.
func McpNameAmbiguous(server string, names []string) bool {
	return extract.McpNameAmbiguous(server, names)
}
