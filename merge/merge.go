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
//
// A table is bounded by its owner retiring the ids of finished objects
// (Done, RetireDone, Retire, Trim). A retired id is forgotten, but the
// editor may still show it (a completed tool call stays in the thread), so
// it must never be handed out again for another agent's object: once an
// agent has retired ids, every id of the other agents is rewritten, as if
// it collided. That costs nothing to remember (a set of agent names) and
// keeps the single-agent case, by far the common one, passing every id
// through. The agent name "" is the owner's own (the router's): its ids are
// unique by construction, so its retired ids are not remembered and its ids
// are never rewritten for that reason.
type IDTable struct {
	out  map[agentID]string
	back map[string]agentID
	// order holds the editor-side ids in the order they were assigned,
	// oldest first, for Trim. It may hold ids removed since; it is
	// compacted as it grows.
	order []string
	// done holds the ids whose objects are finished and not retired yet,
	// oldest first (isDone: the same, as a set).
	done    []string
	isDone  map[string]bool
	retired map[string]bool // agents some of whose ids were retired
}

type agentID struct{ agent, id string }

// NewIDTable returns an empty table.
func NewIDTable() *IDTable {
	return &IDTable{out: map[agentID]string{}, back: map[string]agentID{}, isDone: map[string]bool{}, retired: map[string]bool{}}
}

// Out returns the id the editor sees for agent's id, assigning one if new.
func (t *IDTable) Out(agent, id string) string {
	k := agentID{agent, id}
	if v, ok := t.out[k]; ok {
		return v
	}
	v := id
	for n := 1; ; n++ {
		if _, taken := t.back[v]; !taken && (n > 1 || !t.retiredByOther(agent)) {
			break
		}
		v = id + "~" + agent
		if n > 1 {
			v += "~" + strconv.Itoa(n)
		}
	}
	t.out[k], t.back[v] = v, k
	if len(t.order) >= 2*len(t.back)+64 {
		live := t.order[:0]
		for _, o := range t.order {
			if _, ok := t.back[o]; ok {
				live = append(live, o)
			}
		}
		clear(t.order[len(live):])
		t.order = live
	}
	t.order = append(t.order, v)
	return v
}

// retiredByOther: an agent other than agent has retired ids, which the
// editor may still show (see IDTable).
func (t *IDTable) retiredByOther(agent string) bool {
	if agent == "" {
		return false
	}
	for a := range t.retired {
		if a != agent {
			return true
		}
	}
	return false
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

// Remove forgets an editor-side id the editor has forgotten too: it may be
// handed out again.
func (t *IDTable) Remove(id string) {
	if k, ok := t.back[id]; ok {
		delete(t.back, id)
		delete(t.out, k)
		delete(t.isDone, id)
	}
}

// Retire forgets an editor-side id whose object is finished but may still
// be shown: it is never handed out again for another agent (see IDTable).
// Lookup no longer finds it, so what its agent sends about it later is
// unknown.
func (t *IDTable) Retire(id string) {
	k, ok := t.back[id]
	if !ok {
		return
	}
	t.Remove(id)
	if k.agent != "" {
		t.retired[k.agent] = true
	}
}

// Done marks an editor-side id whose object is finished (a tool call
// completed or failed): RetireDone retires it.
func (t *IDTable) Done(id string) {
	if _, ok := t.back[id]; ok && !t.isDone[id] {
		t.isDone[id] = true
		t.done = append(t.done, id)
	}
}

// RetireDone retires the ids marked Done but the keep most recent ones, and
// returns how many it retired.
func (t *IDTable) RetireDone(keep int) int {
	n := 0
	for len(t.done) > keep {
		id := t.done[0]
		t.done[0] = ""
		t.done = t.done[1:]
		if t.isDone[id] {
			t.Retire(id)
			n++
		}
	}
	if len(t.done) == 0 {
		t.done = nil // let the backing array go
	}
	return n
}

// RetireAll retires every id of the table.
func (t *IDTable) RetireAll() {
	for id := range t.back {
		t.Retire(id)
	}
	t.order, t.done = nil, nil
}

// Trim retires the oldest ids, finished or not, until at most max remain,
// and returns how many it retired.
func (t *IDTable) Trim(max int) int {
	n := 0
	for len(t.back) > max && len(t.order) > 0 {
		id := t.order[0]
		t.order[0] = ""
		t.order = t.order[1:]
		if _, ok := t.back[id]; ok {
			t.Retire(id)
			n++
		}
	}
	return n
}

// Len is the number of ids in the table.
func (t *IDTable) Len() int { return len(t.back) }
