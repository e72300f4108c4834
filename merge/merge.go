// Package merge combines what several agents advertise into what the router
// advertises to the editor (capabilities, auth methods), and owns the id
// translation tables that keep ids of different agents apart. It is pure:
// values in, values out; callers do the locking.
package merge

import (
	"encoding/json"
	"strconv"

	"github.com/acp-router/acp-router/acp"
)

// Capabilities merges the capabilities the router understands (DESIGN §7):
// a prompt content type or MCP transport is advertised when any agent
// supports it (the router adapts what it forwards to the others); the
// session capabilities are the router's own (close, additionalDirectories);
// logout is advertised when any agent supports it. Everything else an agent
// advertises is not promised to the editor.
func Capabilities(agents []acp.AgentCapabilities) acp.AgentCapabilities {
	var out acp.AgentCapabilities
	marker := acp.Marker("{}")
	for _, c := range agents {
		p := c.PromptCapabilities
		out.PromptCapabilities.Image = out.PromptCapabilities.Image || p.Image
		out.PromptCapabilities.Audio = out.PromptCapabilities.Audio || p.Audio
		out.PromptCapabilities.EmbeddedContext = out.PromptCapabilities.EmbeddedContext || p.EmbeddedContext
		out.MCPCapabilities.HTTP = out.MCPCapabilities.HTTP || c.MCPCapabilities.HTTP
		out.MCPCapabilities.SSE = out.MCPCapabilities.SSE || c.MCPCapabilities.SSE
		if acp.Supported(c.Auth.Logout) {
			out.Auth.Logout = marker
		}
	}
	out.SessionCapabilities.Close = marker
	out.SessionCapabilities.AdditionalDirectories = marker
	return out
}

// AgentAuth is one agent's advertised auth methods, as sent.
type AgentAuth struct {
	Agent   string
	Methods []json.RawMessage
}

// AuthMethod is where an advertised auth method id leads.
type AuthMethod struct {
	Agent    string
	ID       string // the agent's own id
	Terminal bool
}

// AuthMethods merges the agents' authMethods in the given order (the
// routing default agent first). Ids pass through unless taken by an earlier
// agent. Terminal methods get their args rewritten by terminalArgs so that
// the editor's re-launch of the router runs that agent's login. Entries
// without a string id are dropped. The table maps advertised ids back.
func AuthMethods(agents []AgentAuth, terminalArgs func(agent string, args []string) []string) ([]json.RawMessage, map[string]AuthMethod) {
	var out []json.RawMessage
	table := map[string]AuthMethod{}
	for _, a := range agents {
		for _, raw := range a.Methods {
			var m acp.AuthMethod
			if json.Unmarshal(raw, &m) != nil || m.ID == "" {
				continue
			}
			id := m.ID
			for n := 1; ; n++ {
				if _, taken := table[id]; !taken {
					break
				}
				id = a.Agent + ":" + m.ID
				if n > 1 {
					id += "#" + strconv.Itoa(n)
				}
			}
			var err error
			if id != m.ID {
				if raw, err = acp.SetField(raw, "id", id); err != nil {
					continue
				}
			}
			terminal := m.Type == "terminal"
			if terminal {
				if raw, err = acp.SetField(raw, "args", terminalArgs(a.Agent, m.Args)); err != nil {
					continue
				}
			}
			table[id] = AuthMethod{Agent: a.Agent, ID: m.ID, Terminal: terminal}
			out = append(out, raw)
		}
	}
	return out, table
}

// IDTable keeps the ids of several agents apart in one scope (a router's
// sessions, a session's tool calls): an id passes through unchanged unless
// another agent already uses it, and is then rewritten as ID~AGENT (plus a
// counter if needed). The zero value is not usable; use NewIDTable.
type IDTable struct {
	out  map[agentID]string
	back map[string]agentID
}

type agentID struct{ agent, id string }

// NewIDTable returns an empty table.
func NewIDTable() *IDTable {
	return &IDTable{out: map[agentID]string{}, back: map[string]agentID{}}
}

// Out returns the id the editor sees for agent's id, assigning one if new.
func (t *IDTable) Out(agent, id string) string {
	k := agentID{agent, id}
	if v, ok := t.out[k]; ok {
		return v
	}
	v := id
	for n := 1; ; n++ {
		if _, taken := t.back[v]; !taken {
			break
		}
		v = id + "~" + agent
		if n > 1 {
			v += "~" + strconv.Itoa(n)
		}
	}
	t.out[k], t.back[v] = v, k
	return v
}

// Lookup returns the id the editor sees for agent's id, if assigned.
func (t *IDTable) Lookup(agent, id string) (string, bool) {
	v, ok := t.out[agentID{agent, id}]
	return v, ok
}

// In maps an id the editor uses back to the agent and its own id.
func (t *IDTable) In(id string) (agent, agentsID string, ok bool) {
	k, ok := t.back[id]
	return k.agent, k.id, ok
}

// Remove forgets an editor-side id.
func (t *IDTable) Remove(id string) {
	if k, ok := t.back[id]; ok {
		delete(t.back, id)
		delete(t.out, k)
	}
}

// Len is the number of ids in the table.
func (t *IDTable) Len() int { return len(t.back) }
