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

// Capabilities is what the router advertises as its agentCapabilities,
// decided capability by capability by capabilityTable: own says what the
// router implements itself; agents are the capabilities of every agent
// whose initialize answer is known, live or cached.
func Capabilities(agents []acp.AgentCapabilities, own Own) acp.AgentCapabilities {
	var out acp.AgentCapabilities
	for _, c := range capabilityTable {
		if c.advertised(agents, own) {
			c.set(&out)
		}
	}
	return out
}

// Own is what the router implements itself, whichever agent serves a
// session.
type Own struct {
	// Store: the router keeps sessions (history.go) and answers
	// session/load, list, resume and delete for every agent.
	Store bool
}

// capRule says when the router advertises a capability. The rule for
// every one (issue 13): advertise it only where the router keeps it true
// for every agent a session may be switched to: because the router
// implements it itself, or adapts what it forwards to an agent without
// it. Everything else is masked, so an editor never relies on a promise
// the next agent would break.
type capRule int

const (
	// masked: never advertised, whatever the agents say.
	masked capRule = iota
	// adapted: advertised when some agent has it; the router adapts
	// what it forwards to an agent without it (adapt.go).
	adapted
	// routerOwn: always advertised; the router implements it for every
	// agent.
	routerOwn
	// storeOwn: advertised when the router keeps sessions (Own.Store).
	storeOwn
)

// capability is one row of capabilityTable.
type capability struct {
	path string // in the initialize result, dotted
	rule capRule
	why  string
	// has reports whether an agent has it (adapted rows).
	has func(*acp.AgentCapabilities) bool
	// set writes it into what the router advertises (rows not masked).
	set func(*acp.AgentCapabilities)
}

func (c capability) advertised(agents []acp.AgentCapabilities, own Own) bool {
	switch c.rule {
	case adapted:
		for i := range agents {
			if c.has(&agents[i]) {
				return true
			}
		}
	case routerOwn:
		return true
	case storeOwn:
		return own.Store
	}
	return false
}

var marker = acp.Marker("{}")

// capabilityTable decides every capability an agent may advertise in its
// initialize answer: the schema's (stable and unstable, as of
// @agentclientprotocol/sdk 2.4.0: testdata/agent-capabilities.schema.json)
// and the extensions the recorded agents send (claude-agent-acp 0.100.0 and
// 0.101.0, codex-acp 0.16.0 and 2.6.0, opencode: testdata/real-agents). A
// path covers what is below it. Tests check that every one of those has a row, and that Capabilities
// advertises exactly the rows it should. When a masked capability gets
// implemented, its row becomes routerOwn, or adapted with the adaptation.
var capabilityTable = []capability{
	{path: "agentCapabilities.loadSession", rule: storeOwn,
		why: "the router replays its own copy of the thread, then re-attaches each agent by its load, resume, or a new session and a brief (history.go); without the store one agent's load would not survive a switch",
		set: func(o *acp.AgentCapabilities) { o.LoadSession = true }},
	{path: "agentCapabilities.sessionCapabilities.list", rule: storeOwn,
		why: "the router lists the sessions it keeps, of every agent",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.List = marker }},
	{path: "agentCapabilities.sessionCapabilities.resume", rule: storeOwn,
		why: "as loadSession, without the replay",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Resume = marker }},
	{path: "agentCapabilities.sessionCapabilities.delete", rule: storeOwn,
		why: "the router deletes its record, and each agent's session where the agent supports it",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Delete = marker }},
	{path: "agentCapabilities.sessionCapabilities.close", rule: routerOwn,
		why: "the router ends its session itself and closes the agents' sessions where they support it",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Close = marker }},
	{path: "agentCapabilities.sessionCapabilities.additionalDirectories", rule: routerOwn,
		why: "the router keeps them as the session's roots for the policy (${roots}, whatever the agent), passes them in session/new to the agents that take them, and names them in the first prompt of each downstream session of an agent that does not (inside the handoff brief when there is one: router/handoff.go briefAndRecord); Zed drops extra worktree roots without it",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.AdditionalDirectories = marker }},
	{path: "agentCapabilities.sessionCapabilities.fork", rule: adapted,
		why: "forwarded, ids translated, for a session one agent served that supports fork; the fork is a new router session bound to that agent. Any other session is refused with the reason (a thread several agents served has no single agent session to fork) (router/lifecycle.go)",
		has: func(c *acp.AgentCapabilities) bool { return acp.Supported(c.SessionCapabilities.Fork) },
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Fork = marker }},
	{path: "agentCapabilities.sessionCapabilities.systemPrompt", rule: adapted,
		why: "append mode only ({}): the router keeps the session's systemPrompt, passes it to the agents that take it and carries an append prompt as text into the first prompt of an agent without it (adaptSystemPrompt); an override, which no text can carry, is refused for such an agent with -32602, never dropped, so mode.override is not promised (notes/acp-currency.md row 6)",
		has: func(c *acp.AgentCapabilities) bool { return acp.Supported(c.SessionCapabilities.SystemPrompt) },
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.SystemPrompt = marker }},
	{path: "agentCapabilities.sessionCapabilities.title", rule: routerOwn,
		why: "the title is the router's: session/set_title sets it (and its store), and is forwarded, id translated, to the active agent when that agent supports title; an agent's own title no longer renames the thread (acp-currency row 7; router/lifecycle.go)",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Title = marker }},
	{path: "agentCapabilities.sessionCapabilities.status", rule: routerOwn,
		why: "the router answers session/status: open for the sessions it runs (the active agent's own answer when it supports status), saved for those only its store keeps, -32002 otherwise (acp-currency row 8)",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Status = marker }},
	{path: "agentCapabilities.sessionCapabilities.archive", rule: storeOwn,
		why: "the router archives in its store: the close work of session/close (a running turn cancelled first), the agents' sessions archived or closed where they support it, and its session/list honours archived (acp-currency row 9); the schema requires list, which is storeOwn too",
		set: func(o *acp.AgentCapabilities) { o.SessionCapabilities.Archive = marker }},
	{path: "agentCapabilities.sessionCapabilities.subagents", rule: masked,
		why: "sent by codex-acp 2.6.0 (testdata/real-agents/agentclientprotocol-codex-acp-2.6.0-*), in no schema the router has: the router routes the children an agent announces with subagent_update whether or not it advertises this, and does not promise more on behalf of the agents a session may be switched to"},
	{path: "agentCapabilities.promptCapabilities.image", rule: adapted,
		why: "adaptPrompt turns an image into a text marker for an agent without it",
		has: func(c *acp.AgentCapabilities) bool { return c.PromptCapabilities.Image },
		set: func(o *acp.AgentCapabilities) { o.PromptCapabilities.Image = true }},
	{path: "agentCapabilities.promptCapabilities.audio", rule: adapted,
		why: "adaptPrompt turns audio into a text marker for an agent without it",
		has: func(c *acp.AgentCapabilities) bool { return c.PromptCapabilities.Audio },
		set: func(o *acp.AgentCapabilities) { o.PromptCapabilities.Audio = true }},
	{path: "agentCapabilities.promptCapabilities.embeddedContext", rule: adapted,
		why: "adaptPrompt turns an embedded resource into its text for an agent without it",
		has: func(c *acp.AgentCapabilities) bool { return c.PromptCapabilities.EmbeddedContext },
		set: func(o *acp.AgentCapabilities) { o.PromptCapabilities.EmbeddedContext = true }},
	{path: "agentCapabilities.mcpCapabilities.http", rule: adapted,
		why: "adaptNewSession leaves an HTTP MCP server out, with a warning, for an agent without the transport",
		has: func(c *acp.AgentCapabilities) bool { return c.MCPCapabilities.HTTP },
		set: func(o *acp.AgentCapabilities) { o.MCPCapabilities.HTTP = true }},
	{path: "agentCapabilities.mcpCapabilities.sse", rule: adapted,
		why: "as http",
		has: func(c *acp.AgentCapabilities) bool { return c.MCPCapabilities.SSE },
		set: func(o *acp.AgentCapabilities) { o.MCPCapabilities.SSE = true }},
	{path: "agentCapabilities.mcpCapabilities.acp", rule: adapted,
		why: "mcp/message is routed by serverId between the editor and the agents of the session that declared the server (both directions; a server no session declared is -32602); adaptNewSession leaves an ACP MCP server out, with a warning, for an agent without the transport (acp-currency row 12)",
		has: func(c *acp.AgentCapabilities) bool { return c.MCPCapabilities.ACP },
		set: func(o *acp.AgentCapabilities) { o.MCPCapabilities.ACP = true }},
	{path: "agentCapabilities.auth.logout", rule: adapted,
		why: "the router's logout goes to every running agent that supports it; the others have nothing to log out of",
		has: func(c *acp.AgentCapabilities) bool { return acp.Supported(c.Auth.Logout) },
		set: func(o *acp.AgentCapabilities) { o.Auth.Logout = marker }},
	{path: "agentCapabilities.auth.status", rule: adapted,
		why: "the router merges auth/status over its running agents (each agent's answer, or unknown and why, in _meta.acp-router.agents; accounts name their agent); auth/status_update is forwarded attributed to its agent (_meta.acp-router.agent), the newest per agent only when they flood (acp-currency row 10)",
		has: func(c *acp.AgentCapabilities) bool { return acp.Supported(c.Auth.Status) },
		set: func(o *acp.AgentCapabilities) { o.Auth.Status = marker }},
	{path: "agentCapabilities.providers", rule: masked,
		why: "providers/* name no session: they would configure the routing default agent only, not the agent a session is switched to"},
	{path: "agentCapabilities._meta", rule: masked,
		why: "extensions are each agent's promise, not the router's: claudeCode.promptQueueing (the router queues a session's prompts itself), authStatus (_auth/status_update is forwarded attributed to its agent). The _meta of every group above is dropped likewise"},
	{path: "_meta", rule: masked,
		why: "the initialize result's own extensions, such as Claude's steering (input sent to the agent while its turn runs): not kept true, since the router runs a session's prompts one at a time and the next agent may not steer"},
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
	// closed are editor-side ids never handed out again, to any agent
	// (Close), oldest first in closedOrder; at most maxClosed.
	closed      map[string]bool
	closedOrder []string
}

// maxClosed bounds the ids an IDTable keeps closed: past it, the oldest
// may be handed out again.
const maxClosed = 1024

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
		if _, taken := t.back[v]; !taken && !t.closed[v] && (n > 1 || !t.retiredByOther(agent)) {
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

// Close retires an editor-side id and never hands it out again, to its
// own agent either (within maxClosed): the editor's card of it has the
// router's last word (a tool call the policy failed), which a new object
// the agent announces under the same id must not replace.
func (t *IDTable) Close(id string) {
	if _, ok := t.back[id]; !ok {
		return
	}
	t.Retire(id)
	if t.closed == nil {
		t.closed = map[string]bool{}
	}
	if len(t.closedOrder) >= maxClosed {
		delete(t.closed, t.closedOrder[0])
		t.closedOrder = t.closedOrder[1:]
	}
	t.closed[id] = true
	t.closedOrder = append(t.closedOrder, id)
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
