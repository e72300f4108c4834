package hub

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/acp-router/acp-router/acp"
)

// The live session list, asked (MethodSessions) or pushed (MethodWatch):
// what ACP does not carry about a session, for the page of issue 31.
const (
	// MethodWatch opts a client in to what the hub pushes beyond ACP:
	// params {"sessions": true} sends MethodSessionsChanged whenever the
	// live sessions it may see change (one appears or ends, its state,
	// agent or clients change), "chunkIntervalMs": N holds streamed text
	// for that client N ms (at most 1000) so that the chunks behind it are
	// coalesced into it (coalesce.go): at most about 1000/N messages a
	// second per streamed message, whatever the agent's rate. The answer
	// is {"sessions": [...]} (when watching) and the interval in force.
	MethodWatch = "_acp-router/watch"
	// MethodSessionsChanged is the pushed notification: params
	// {"sessions": [...]}, the entries of MethodSessions, the whole list.
	MethodSessionsChanged = "_acp-router/sessions_changed"
)

// Session states of the entries.
const (
	StateWaiting = "waiting" // a permission request waits for an answer
	StateRunning = "running" // a prompt is at the agent (or queued there)
	StateIdle    = "idle"
)

// entry is one live session as MethodSessions and MethodSessionsChanged
// show it.
type entry struct {
	SessionID string `json:"sessionId"`
	State     string `json:"state"`
	// Agent is the agent the session is on now (the router's "agent"
	// option), AgentTitle its display name; "" until the router said.
	Agent      string `json:"agent,omitempty"`
	AgentTitle string `json:"agentTitle,omitempty"`
	Clients    int    `json:"clients"`
	Attached   bool   `json:"attached"` // the client asking is one of them
}

// entriesLocked are the sessions live in the hub that c may see (subagent
// sessions under their parent), sorted by id, each with its state (waiting
// wins over running).
func (h *Hub) entriesLocked(c *client) []entry {
	out := []entry{}
	for sid, s := range h.sessions {
		if s.id != sid || !h.visible(c.id, sid) {
			continue
		}
		st := StateIdle
		switch {
		case len(s.asks) > 0:
			st = StateWaiting
		case s.running > 0:
			st = StateRunning
		}
		out = append(out, entry{SessionID: sid, State: st, Agent: s.agent, AgentTitle: s.agentTitle,
			Clients: len(s.members), Attached: c.sessions[sid] != nil})
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.SessionID, b.SessionID) })
	return out
}

// liveSessions answers MethodSessions.
func (h *Hub) liveSessions(c *client, m *acp.Message) {
	if m.Kind != acp.KindRequest {
		return
	}
	h.mu.Lock()
	list, _ := json.Marshal(h.entriesLocked(c))
	h.mu.Unlock()
	c.enqueue(acp.AppendResponse(nil, m.ID, sessionsObject(list)))
}

func sessionsObject(list []byte) []byte {
	b := append([]byte(`{"sessions":`), list...)
	return append(b, '}')
}

// watch answers MethodWatch.
func (h *Hub) watch(c *client, m *acp.Message) {
	if m.Kind != acp.KindRequest {
		return
	}
	var p struct {
		Sessions        *bool `json:"sessions"`
		ChunkIntervalMs *int  `json:"chunkIntervalMs"`
	}
	if len(m.Params) > 0 && json.Unmarshal(m.Params, &p) != nil {
		refuse(c, m, acp.CodeInvalidParams, "acp-router: _acp-router/watch: want {\"sessions\": bool, \"chunkIntervalMs\": number}", nil)
		return
	}
	c.qmu.Lock()
	if p.ChunkIntervalMs != nil && !c.id.Editor {
		// The editor's stream is never coalesced (coalesce.go): no
		// interval for it.
		c.interval = min(max(time.Duration(*p.ChunkIntervalMs)*time.Millisecond, 0), maxChunkInterval)
	}
	interval := c.interval
	c.qmu.Unlock()
	res := map[string]any{"chunkIntervalMs": interval.Milliseconds()}
	// Under Hub.mu, the answer is queued before any change pushed after
	// the list it holds.
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.Sessions != nil {
		c.watching = *p.Sessions
		c.shown = nil
	}
	if c.watching {
		list, _ := json.Marshal(h.entriesLocked(c))
		c.shown = list
		res["sessions"] = json.RawMessage(list)
	}
	b, _ := json.Marshal(res)
	c.enqueue(acp.AppendResponse(nil, m.ID, b))
}

// changedLocked pushes MethodSessionsChanged to each watching client whose
// list is not the one it was last sent. Called, under Hub.mu, after every
// change of what the entries show.
func (h *Hub) changedLocked() {
	for c := range h.clients {
		if !c.watching || c.gone {
			continue
		}
		list, _ := json.Marshal(h.entriesLocked(c))
		if bytes.Equal(list, c.shown) {
			continue
		}
		c.shown = list
		b := append([]byte(`{"jsonrpc":"2.0","method":"`+MethodSessionsChanged+`","params":`), sessionsObject(list)...)
		c.enqueue(append(b, '}'))
	}
}

// agentOf reads the router's "agent" option (category _acp-router) from a
// configOptions list: the agent a session is on, and its display name.
func agentOf(options json.RawMessage) (name, title string, ok bool) {
	var opts []struct {
		ID           string `json:"id"`
		Category     string `json:"category"`
		CurrentValue string `json:"currentValue"`
		Options      []struct {
			Value string `json:"value"`
			Name  string `json:"name"`
		} `json:"options"`
	}
	if len(options) == 0 || json.Unmarshal(options, &opts) != nil {
		return "", "", false
	}
	for _, o := range opts {
		if o.ID != "agent" || o.Category != "_acp-router" || o.CurrentValue == "" {
			continue
		}
		for _, v := range o.Options {
			if v.Value == o.CurrentValue {
				title = v.Name
			}
		}
		return o.CurrentValue, title, true
	}
	return "", "", false
}

// seeAgentLocked takes the agent of session sid from configOptions (a
// response's or a config_option_update's), when they name it.
func (h *Hub) seeAgentLocked(sid string, options json.RawMessage) {
	s := h.sessions[sid]
	if s == nil {
		return
	}
	if name, title, ok := agentOf(options); ok {
		s.agent, s.agentTitle = name, title
	}
}
