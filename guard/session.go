package guard

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// Session is the policy's state of one router session: its context (cwd,
// roots), what its agents said about their tool calls in the running turn
// (the evidence of a permission request about one), the approvals of the
// turn and the user's "always" choices. Safe for concurrent use; a nil
// *Session keeps nothing.
type Session struct {
	cwd   string
	roots []string

	mu        sync.Mutex
	tools     map[string]*toolState
	approvals []approval
	grants    []grant
	// turn counts EndTurn (from 1): a decision is of the turn its request
	// arrived in, and the approval it gives is kept only while that turn
	// runs.
	turn uint64

	// walks are the directories the turn's recursive reads walked.
	walks turnWalks
}

// NewSession returns the state of a router session working in cwd, with
// the additional directories roots (${roots}).
func NewSession(cwd string, roots []string) *Session {
	return &Session{cwd: cwd, roots: slices.Clone(roots), turn: 1}
}

// Turn is the session's current turn (Request.Turn): read where the
// agent's messages are read in order, it tells a request sent before its
// turn's answer from one sent after, whenever either is decided.
func (s *Session) Turn() uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// Bounds on the evidence kept per session.
const (
	maxTools       = 1024 // tool calls tracked per session and turn
	maxToolUpdates = 64   // updates kept per tool call
	maxGrants      = 256  // "always" choices kept per session
	maxApprovals   = 1024 // approvals kept per session and turn
)

// toolState is what an agent said about one of its tool calls: the
// policy's evidence for a permission request about it, and its content,
// to which a deny note is appended.
type toolState struct {
	updates  []json.RawMessage // kind, title, locations, rawInput, content of each update
	content  json.RawMessage   // the latest content
	title    string
	kind     string
	overflow bool // more updates than kept: never allowed without asking
	done     bool // completed or failed: its evidence is no longer needed
	// hidden: an update of it did not reach the editor (ToolUpdate.Hidden).
	hidden bool
}

// toolKey names one tool call: an agent's tool call ids are its own per
// session, and a Session holds a top-level session and its subagent
// sessions (they share its context and grants), whose ids may repeat the
// parent's: a child's "t1" is not the parent's "t1".
func toolKey(session, agent, id string) string { return session + "\x00" + agent + "\x00" + id }

// ToolUpdate is what the policy reads of a tool_call or tool_call_update
// (absent members nil).
type ToolUpdate struct {
	ID        string
	Kind      json.RawMessage
	Title     *string
	Name      json.RawMessage // ToolCall.name: the policy's tool matcher
	Locations json.RawMessage
	RawInput  json.RawMessage
	Content   json.RawMessage
	Status    string
	// Hidden: the router does not forward this update to the editor (a
	// tool call the editor has not seen, or not the content of a turn it
	// shows). It is still evidence, but the user who answers a permission
	// request about the tool call never saw it: their "allow" approves
	// nothing beyond the tool call itself (Record).
	Hidden bool
}

// toolEvidence is how one update is kept: the part the policy reads.
type toolEvidence struct {
	Kind      json.RawMessage `json:"kind,omitempty"`
	Title     *string         `json:"title,omitempty"`
	Name      json.RawMessage `json:"name,omitempty"`
	Locations json.RawMessage `json:"locations,omitempty"`
	RawInput  json.RawMessage `json:"rawInput,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// EncodeEvidence is one tool call update as the policy reads it (the
// Updates of a extract.Request), nil if it cannot be encoded.
func EncodeEvidence(up *ToolUpdate) json.RawMessage {
	b, err := json.Marshal(toolEvidence{Kind: up.Kind, Title: up.Title, Name: up.Name, Locations: up.Locations, RawInput: up.RawInput, Content: up.Content})
	if err != nil {
		return nil
	}
	return b
}

// Track records a tool call update of agent's in router session session
// (this one, or one of its subagent sessions). It runs in the agent's read
// path.
func (s *Session) Track(session, agent string, up *ToolUpdate) {
	if s == nil || up.ID == "" {
		return
	}
	key := toolKey(session, agent, up.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tools[key]
	if ts == nil {
		if s.tools == nil {
			s.tools = map[string]*toolState{}
		}
		if len(s.tools) >= maxTools {
			s.pruneLocked()
		}
		if len(s.tools) >= maxTools {
			// Nothing is forgotten: a tool call the router cannot keep
			// evidence for is asked about, never allowed.
			s.tools[key] = &toolState{overflow: true}
			return
		}
		ts = &toolState{}
		s.tools[key] = ts
	}
	if up.Status == "completed" || up.Status == "failed" {
		ts.done = true
	}
	if up.Hidden {
		ts.hidden = true
	}
	if ts.overflow {
		return
	}
	if len(ts.updates) >= maxToolUpdates {
		ts.overflow, ts.updates = true, nil
		return
	}
	b := EncodeEvidence(up)
	if b == nil {
		ts.overflow, ts.updates = true, nil
		return
	}
	ts.updates = append(ts.updates, b)
	if up.Content != nil {
		ts.content = up.Content
	}
	if up.Title != nil {
		ts.title = *up.Title
	}
	if len(up.Kind) > 0 {
		json.Unmarshal(up.Kind, &ts.kind)
	}
}

// pruneLocked forgets the tool calls that completed or failed: no
// permission request comes for them any more. The turn's record keeps its
// own copy of what the handoff brief needs (Evidence, before EndTurn).
func (s *Session) pruneLocked() {
	for k, ts := range s.tools {
		if ts.done {
			delete(s.tools, k)
		}
	}
}

// EndTurn forgets the turn's evidence, approvals and walks: an approval
// covers the direct calls of its own turn only, tool call evidence is per
// turn, and a directory a recursive read walked is walked again (what is
// below it may have changed). Grants stay.
func (s *Session) EndTurn() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.tools, s.approvals = nil, nil
	s.turn++
	s.mu.Unlock()
	s.walks.clear()
}

// Tool is what the agent said of one of its tool calls in router session
// session: its latest title, kind and content; ok is false when nothing is
// kept.
func (s *Session) Tool(session, agent, id string) (title, kind string, content json.RawMessage, ok bool) {
	if s == nil {
		return "", "", nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tools[toolKey(session, agent, id)]
	if ts == nil {
		return "", "", nil, false
	}
	return ts.title, ts.kind, ts.content, true
}

// Evidence is the updates kept of each of agent's tool calls ids in router
// session session (absent for a tool call with none).
func (s *Session) Evidence(session, agent string, ids []string) map[string][]json.RawMessage {
	out := map[string][]json.RawMessage{}
	if s == nil {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if ts := s.tools[toolKey(session, agent, id)]; ts != nil && !ts.overflow {
			out[id] = ts.updates
		}
	}
	return out
}

// approval is a tool call the policy or the user approved in the running
// turn: it covers the direct calls that carry it out (DESIGN §6).
type approval struct {
	agent  string
	ev     *extract.Evidence
	source string
	rule   string
	// by answered the ask that approved it; the zero value: the policy.
	by Answerer
}

// grant is an "always" choice of the user, held by the router for the
// session: later requests of the agent whose evidence it covers are allowed
// (or denied) without asking.
type grant struct {
	agent  string
	effect policy.Effect
	ev     *extract.Evidence
	// by is who chose "always".
	by Answerer
}

func (s *Session) approve(v *Verdict) {
	if s == nil || v.dec.Evidence == nil {
		return
	}
	s.mu.Lock()
	if v.turn != s.turn {
		// Decided in a turn that has ended since (the user answered
		// after it, or the agent's request outlived it): an approval
		// covers the direct calls of its own turn, not of the next.
		s.mu.Unlock()
		return
	}
	if len(s.approvals) >= maxApprovals {
		// Every decision reads them all: an agent that makes the user (or
		// the policy) allow request after request in one turn must not
		// grow them without bound. A forgotten approval asks again.
		s.approvals = s.approvals[1:]
	}
	s.approvals = append(s.approvals, approval{agent: v.Agent, ev: v.dec.Evidence, source: v.Source, rule: v.Rule, by: v.answeredBy})
	s.mu.Unlock()
}

func (s *Session) grant(v *Verdict, effect policy.Effect) {
	if s == nil || v.dec.Evidence == nil {
		return
	}
	s.mu.Lock()
	if len(s.grants) >= maxGrants {
		// The oldest choice goes: a forgotten grant asks again, which is
		// never less safe.
		s.grants = s.grants[1:]
	}
	s.grants = append(s.grants, grant{agent: v.Agent, effect: effect, ev: v.dec.Evidence, by: v.answeredBy})
	s.mu.Unlock()
}
