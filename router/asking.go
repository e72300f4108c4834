package router

import (
	"bytes"
	"sync"
)

// What the editor shows of a tool call while its user decides about it.
//
// Zed upserts a tool_call or tool_call_update into the card of a pending
// permission request (editors.md Z5): its title, kind, locations and
// content change under the buttons. The user's answer is recorded as the
// approval of what the policy decided on (guard.Record): the request as
// the router forwarded it, with the tool call's earlier updates. An agent
// that changed the card while the dialog was up made the user approve
// something other than what they read: "Edit ~/.bashrc" shown as "Read
// README.md", and the approval of the edit then covered the agent's
// direct write of ~/.bashrc. So the updates of a tool call whose
// permission request the editor has are held, in order, and written when
// the request is answered (or fails, or is withdrawn): the user answers
// about what was decided, and the agent's updates still reach the editor.

// Bounds on the updates held per session (bounds.go): past them, an update
// is dropped (counted, logged). An agent that sends more about one tool
// call while the user decides has made it overflow the guard's evidence
// (maxToolUpdates) anyway.
const (
	maxAskHeld      = 64
	maxAskHeldBytes = 8 << 20
)

// askHold is a tool call the editor has a permission request about: how
// many (an agent may ask twice), and its updates held meanwhile.
type askHold struct {
	n     int
	lines [][]byte
}

// askingToolOf registers, for an agent's session/request_permission of
// router session s that the router is about to send the editor, that the
// editor has a request about its tool call, id as the editor knows it
// (editorPermission: the id the tool call's updates are relayed under),
// and returns the function that ends that once the request is over
// (answered, failed or withdrawn), writing what was held; nil when the
// request names no tool call.
func askingToolOf(s *Session, id string) func() {
	if id == "" {
		return nil // no tool call the editor shows: nothing to hold
	}
	s.mu.Lock()
	if s.asking == nil {
		s.asking = map[string]*askHold{}
	}
	h := s.asking[id]
	if h == nil {
		h = &askHold{}
		s.asking[id] = h
	}
	h.n++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if h.n--; h.n > 0 {
				return
			}
			delete(s.asking, id)
			for _, line := range h.lines {
				s.askHeldBytes -= len(line)
				s.writeLocked(line)
			}
			h.lines = nil
		})
	}
}

// holdAskedLocked keeps line, an update of the tool call the editor shows
// as editorID, when the editor has a permission request about that tool
// call, and says whether it did (or dropped it: over the bounds).
func (s *Session) holdAskedLocked(editorID string, line []byte) bool {
	h := s.asking[editorID]
	if h == nil || line == nil {
		return false
	}
	if len(h.lines) >= maxAskHeld || s.askHeldBytes+len(line) > maxAskHeldBytes {
		s.r.askDrops.add(1, "session", s.ID, "toolCallId", editorID)
		return true
	}
	// The agent's line may be in its stream's pooled buffer.
	h.lines = append(h.lines, bytes.Clone(line))
	s.askHeldBytes += len(line)
	return true
}
