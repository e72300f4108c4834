package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/acp-router/acp-router/acp"
)

// History policies of session/attach (RFD #533).
const (
	historyFull        = "full"
	historyPendingOnly = "pending_only"
	historyNone        = "none"
)

// attach handles session/attach (RFD #533): the client becomes a member of
// a live session as controller or observer; with historyPolicy full it is
// first sent the session's stored history, then everything live, with
// neither gap nor duplicate at the seam: the Router writes a mark in the
// session's stream at the point its history ends (History), the hub drops
// the session's lines before the mark (they are in the history) and holds
// those after it until the history is sent.
func (h *Hub) attach(c *client, m *acp.Message) {
	if m.Kind != acp.KindRequest {
		return
	}
	var p struct {
		SessionID     string `json:"sessionId"`
		Role          string `json:"role"`
		HistoryPolicy string `json:"historyPolicy"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" {
		refuse(c, m, acp.CodeInvalidParams, "acp-router: session/attach needs a sessionId", nil)
		return
	}
	if p.Role == "" {
		p.Role = c.id.Role
	}
	if p.HistoryPolicy == "" {
		p.HistoryPolicy = historyFull
	}
	switch {
	case p.Role != RoleController && p.Role != RoleObserver:
		refuse(c, m, acp.CodeInvalidParams, fmt.Sprintf("acp-router: role %q: want controller or observer", p.Role), nil)
		return
	case p.HistoryPolicy != historyFull && p.HistoryPolicy != historyPendingOnly && p.HistoryPolicy != historyNone:
		refuse(c, m, acp.CodeInvalidParams, fmt.Sprintf("acp-router: historyPolicy %q: want full, pending_only or none", p.HistoryPolicy), nil)
		return
	case p.Role == RoleController && c.id.Role == RoleObserver:
		refuse(c, m, codeNotAuthorised, "acp-router: this client may only attach as an observer", nil)
		return
	}
	sid := p.SessionID
	data := map[string]string{"sessionId": sid}
	h.mu.Lock()
	s := h.sessions[sid]
	switch {
	case s == nil || s.id != sid:
		// Not live: never opened, closed, or a subagent's (attach its
		// session).
		h.mu.Unlock()
		refuse(c, m, codeNotFound, fmt.Sprintf("acp-router: session %q is not running (not found or closed; session/load reopens a stored one)", sid), data)
		return
	case !h.visible(c.id, sid):
		h.mu.Unlock()
		refuse(c, m, codeNotAuthorised, fmt.Sprintf("acp-router: not authorised to attach to session %q", sid), data)
		return
	case c.sessions[sid] != nil:
		h.mu.Unlock()
		refuse(c, m, acp.CodeInvalidRequest, fmt.Sprintf("acp-router: already attached to session %q (session/detach first)", sid), data)
		return
	}
	mb := h.addMemberLocked(s, c, p.Role)
	h.changedLocked()
	if p.HistoryPolicy != historyFull || h.opts.History == nil {
		res := h.attachResultLocked(mb, p.HistoryPolicy)
		sends := h.goLiveLocked(mb)
		h.mu.Unlock()
		c.enqueue(acp.AppendResponse(nil, m.ID, res))
		for _, s := range sends {
			s.c.enqueue(s.line)
		}
		return
	}
	mb.phase = phaseWaitMark
	mb.mark = newMark()
	h.marks[mb.mark] = mb
	h.mu.Unlock()
	go h.replay(c, mb, m.ID, p.HistoryPolicy)
}

// replay sends the stored history to an attaching member, then its answer,
// then what came live meanwhile.
func (h *Hub) replay(c *client, mb *member, id json.RawMessage, policy string) {
	sent, err := h.sendHistory(c, mb)
	if err != nil {
		h.mu.Lock()
		live := c.sessions[mb.s.id] == mb
		var toRouter [][]byte
		if live {
			toRouter = h.detachLocked(mb)
			h.changedLocked()
		}
		h.mu.Unlock()
		for _, l := range toRouter {
			h.toRouter(l)
		}
		c.enqueue(historyError(id, mb.s.id, err))
		return
	}
	if !sent {
		return
	}
	h.mu.Lock()
	if c.sessions[mb.s.id] != mb { // detached or gone meanwhile
		h.mu.Unlock()
		return
	}
	res := h.attachResultLocked(mb, policy)
	// The answer, then what came after the mark, in order, under Hub.mu:
	// no live line can come between.
	c.enqueue(acp.AppendResponse(nil, id, res))
	var sends []sendTo
	if mb.phase == phaseWaitMark {
		mb.replayed = true // the mark's arrival makes it live
	} else {
		c.enqueueHeld(mb.buf)
		mb.buf, mb.bufN = nil, 0
		sends = h.goLiveLocked(mb)
	}
	h.mu.Unlock()
	for _, s := range sends {
		s.c.enqueue(s.line)
	}
}

// sendHistory sends the client of member mb the session's stored history
// up to mb's mark (Router.SessionHistory), as fast as the client takes it.
// An error: the history could not be read, nothing was sent; false: the
// client or the hub ended meanwhile.
func (h *Hub) sendHistory(c *client, mb *member) (bool, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(h.life, cancel)
	defer stop()
	lines, marked, err := h.opts.History.SessionHistory(ctx, mb.s.id, mb.mark)
	if err != nil {
		return false, err
	}
	if !marked {
		// Not in the Router's memory: nothing of it is in flight.
		h.mu.Lock()
		if mb.phase == phaseWaitMark {
			delete(h.marks, mb.mark)
			mb.mark = ""
			mb.phase = phaseAfterMark
		}
		h.mu.Unlock()
	}
	for _, l := range lines {
		if !c.enqueueWait(ctx, l) {
			return false, nil
		}
	}
	return true, nil
}

// historyError answers request id when session sid's history cannot be
// read.
func historyError(id json.RawMessage, sid string, err error) []byte {
	return errorLine(id, codeNotFound, fmt.Sprintf("acp-router: session %q: %v", sid, err), map[string]string{"sessionId": sid})
}

// seeMark is the Router's mark for an attaching member: the lines before
// it were in the history.
func (h *Hub) seeMark(mark string) {
	h.mu.Lock()
	mb := h.marks[mark]
	delete(h.marks, mark)
	if mb == nil || mb.phase != phaseWaitMark {
		h.mu.Unlock()
		return
	}
	mb.mark = ""
	var sends []sendTo
	if mb.replayed {
		sends = h.goLiveLocked(mb)
	} else {
		mb.phase = phaseAfterMark
	}
	h.mu.Unlock()
	for _, s := range sends {
		s.c.enqueue(s.line)
	}
}

// goLiveLocked makes a member live; a controller is then asked the
// session's pending permission requests it may answer.
func (h *Hub) goLiveLocked(mb *member) []sendTo {
	mb.phase = phaseLive
	mb.replayed = false
	if mb.role != RoleController {
		return nil
	}
	var sends []sendTo
	for _, a := range mb.s.asks {
		if _, asked := a.targets[mb.c]; !asked && !a.resolved && a.allows(mb.c.id) {
			sends = append(sends, h.askLocked(a, mb.c))
		}
	}
	return sends
}

// attachResultLocked is session/attach's answer (RFD #533): the session,
// the role, the clients attached, and (but for historyPolicy none) the
// pending permission requests.
func (h *Hub) attachResultLocked(mb *member, policy string) json.RawMessage {
	type clientInfo struct {
		Name string `json:"name"`
		Role string `json:"role"`
	}
	res := map[string]any{"sessionId": mb.s.id, "role": mb.role}
	connected := []clientInfo{}
	for _, o := range mb.s.members {
		if o != mb {
			connected = append(connected, clientInfo{o.c.id.Name, o.role})
		}
	}
	res["connectedClients"] = connected
	if policy != historyNone {
		history := []map[string]string{}
		for _, a := range mb.s.asks {
			var p struct {
				ToolCall struct {
					ToolCallID string `json:"toolCallId"`
				} `json:"toolCall"`
			}
			json.Unmarshal(a.params, &p)
			history = append(history, map[string]string{"type": "permission_request", "toolCallId": p.ToolCall.ToolCallID, "status": "pending"})
		}
		res["history"] = history
	}
	b, _ := json.Marshal(res)
	return b
}

// detach handles session/detach: the client leaves the session, which goes
// on (a running turn finishes, or is cancelled when it was the last client
// and the config says so).
func (h *Hub) detach(c *client, m *acp.Message) {
	if m.Kind != acp.KindRequest {
		return
	}
	sid := sessionIDOf(m.Params)
	h.mu.Lock()
	mb := c.sessions[sid]
	if mb == nil {
		h.mu.Unlock()
		refuse(c, m, codeNotFound, fmt.Sprintf("acp-router: not attached to session %q", sid), map[string]string{"sessionId": sid})
		return
	}
	toRouter := h.detachLocked(mb)
	h.changedLocked()
	h.mu.Unlock()
	for _, l := range toRouter {
		h.toRouter(l)
	}
	res, _ := json.Marshal(map[string]string{"sessionId": sid, "status": "detached"})
	c.enqueue(acp.AppendResponse(nil, m.ID, res))
}

func newMark() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// visibleList keeps, of a session/list answer, the sessions id may see.
func (h *Hub) visibleList(id Identity, result json.RawMessage) json.RawMessage {
	if id.AllSessions {
		return result
	}
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil {
		return result
	}
	var all []json.RawMessage
	if json.Unmarshal(r["sessions"], &all) != nil {
		return result
	}
	kept := []json.RawMessage{}
	for _, s := range all {
		if h.owners.get(stringMember(s, "sessionId")) == id.Name {
			kept = append(kept, s)
		}
	}
	r["sessions"], _ = json.Marshal(kept)
	out, _ := json.Marshal(r)
	return out
}

// liveLoadLocked serves a session/load of a session live in the hub (called
// with Hub.mu held; unlocks it): the client becomes (or stays) a
// controller of the session, is sent the history as an attach with
// historyPolicy full is, and the Router gets a session/resume, whose
// answer ends the replay (loadAnsweredLocked).
func (h *Hub) liveLoadLocked(c *client, s *session, cl *call, m *acp.Message) {
	mb := c.sessions[s.id]
	if mb == nil {
		mb = h.addMemberLocked(s, c, RoleController)
		cl.added = mb
	}
	if mb.mark != "" {
		delete(h.marks, mb.mark)
	}
	mb.phase, mb.replayed, mb.buf, mb.bufN = phaseWaitMark, false, nil, 0
	mb.mark = newMark()
	h.marks[mb.mark] = mb
	cl.loaded = mb
	h.mu.Unlock()
	go func() {
		sent, err := h.sendHistory(c, mb)
		if err != nil {
			h.mu.Lock()
			var toRouter [][]byte
			if cl.added != nil && c.sessions[s.id] == mb {
				toRouter = h.detachLocked(mb)
			} else if mb.phase != phaseLive {
				h.liveAgainLocked(mb)
			}
			h.mu.Unlock()
			for _, l := range toRouter {
				h.toRouter(l)
			}
			c.enqueue(historyError(cl.id, s.id, err))
			return
		}
		if !sent {
			return
		}
		h.mu.Lock()
		if c.sessions[s.id] != mb {
			h.mu.Unlock()
			return
		}
		hid := h.idLocked()
		h.calls[string(hid)] = cl
		c.calls[string(cl.id)] = string(hid)
		h.mu.Unlock()
		h.toRouter(acp.AppendRequest(nil, hid, acp.MethodSessionResume, m.Params))
	}()
}

// loadAnsweredLocked ends a live load (liveLoadLocked) with the Router's
// answer to its session/resume: the answer, then what came live after the
// mark. False when the caller answers as usual (a failure).
func (h *Hub) loadAnsweredLocked(cl *call, ok bool, result, e json.RawMessage) bool {
	mb := cl.loaded
	if !ok {
		if cl.added == nil && mb.phase != phaseLive {
			h.liveAgainLocked(mb)
		}
		return false
	}
	if cl.c.sessions[mb.s.id] != mb {
		return true
	}
	cl.c.enqueue(acp.AppendResponse(nil, cl.id, result))
	if mb.phase == phaseWaitMark {
		mb.replayed = true
		return true
	}
	cl.c.enqueueHeld(mb.buf)
	mb.buf, mb.bufN = nil, 0
	for _, s := range h.goLiveLocked(mb) {
		s.c.enqueue(s.line)
	}
	return true
}

// liveAgainLocked puts a member that was attached before a failed live
// load back to live (what came meanwhile is lost to it: it asked for a
// load that failed).
func (h *Hub) liveAgainLocked(mb *member) {
	if mb.mark != "" {
		delete(h.marks, mb.mark)
		mb.mark = ""
	}
	mb.c.enqueueHeld(mb.buf)
	mb.buf, mb.bufN = nil, 0
	for _, s := range h.goLiveLocked(mb) {
		s.c.enqueue(s.line)
	}
}
