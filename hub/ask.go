package hub

import (
	"encoding/json"
	"slices"

	"github.com/acp-router/acp-router/acp"
)

// The _meta keys the hub and the Router share (issue 30 item 4): the
// Router names who may answer a permission request; the hub says who did.
// A client can forge neither: the hub strips every acp-router/* key from
// what clients send (stripRouterMeta).
const (
	metaPrefix     = "acp-router/"
	metaAnswerers  = "acp-router/answerers"
	metaAnsweredBy = "acp-router/answeredBy"
)

// routerAsk routes a request of the Router (an agent's question) to the
// clients of its session: a permission request to every controller allowed
// to answer it (RFD #533: first answer wins), anything else (fs/*,
// terminal/*, elicitation) to one controller: the editor when attached,
// else the first controller.
func (h *Hub) routerAsk(m *acp.Message) {
	sid := sessionIDOf(m.Params)
	a := &ask{rid: m.ID, sid: sid, method: m.Method, params: m.Params, targets: map[*client]string{},
		permission: m.Method == acp.MethodRequestPermission}
	if a.permission {
		a.answerers = answerersOf(m.Params)
	}
	h.mu.Lock()
	s := h.sessions[sid]
	var sends []sendTo
	switch {
	case a.permission && s != nil:
		h.asks[string(a.rid)] = a
		s.asks = append(s.asks, a)
		for _, mb := range s.members {
			if mb.phase == phaseLive && mb.role == RoleController && a.allows(mb.c.id) {
				sends = append(sends, h.askLocked(a, mb.c))
			}
		}
		if len(sends) == 0 {
			h.log.Info("permission request waits for a controller to attach", "session", sid)
		}
		h.changedLocked()
	default:
		var to *client
		if s != nil {
			for _, mb := range s.members {
				if mb.role != RoleController || mb.phase != phaseLive {
					continue
				}
				if mb.c.id.Editor {
					to = mb.c
					break
				}
				if to == nil {
					to = mb.c
				}
			}
		} else if sid == "" {
			for c := range h.clients {
				if c.id.Editor {
					to = c
				}
			}
		}
		if to == nil {
			h.mu.Unlock()
			h.toRouter(errorLine(m.ID, acp.CodeInternalError, "acp-router: no client that could answer is attached to the session", map[string]string{"sessionId": sid}))
			return
		}
		h.asks[string(a.rid)] = a
		sends = append(sends, h.askLocked(a, to))
	}
	h.mu.Unlock()
	for _, s := range sends {
		s.c.enqueue(s.line)
	}
}

type sendTo struct {
	c    *client
	line []byte
}

// askLocked gives a's question to c under a new id.
func (h *Hub) askLocked(a *ask, c *client) sendTo {
	id := h.idLocked()
	a.targets[c] = string(id)
	c.asks[string(id)] = a
	return sendTo{c, acp.AppendRequest(nil, id, a.method, a.params)}
}

// allows reports whether a client may answer a (the Router's answerers:
// token names, "editor" for the stdio editor).
func (a *ask) allows(id Identity) bool {
	if a.answerers == nil {
		return true
	}
	return slices.Contains(a.answerers, id.Name) || id.Editor && slices.Contains(a.answerers, "editor")
}

// answerersOf reads params._meta["acp-router/answerers"]; nil when absent.
func answerersOf(params json.RawMessage) []string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Meta[metaAnswerers] == nil {
		return nil
	}
	names := []string{}
	if json.Unmarshal(p.Meta[metaAnswerers], &names) != nil {
		// Unreadable: nobody matches (fail closed; the Router decides
		// who may answer, and would reject anyone).
		return []string{}
	}
	return names
}

// clientAnswer takes a client's answer to one of the Router's questions:
// the first answer wins and goes to the Router, marked with who gave it;
// the other clients asked get a $/cancel_request of their copy, every
// other client of the session RFD #533's permission_resolved, and their
// answers, if any come, are dropped.
func (h *Hub) clientAnswer(c *client, m *acp.Message) {
	h.mu.Lock()
	a := c.asks[string(m.ID)]
	delete(c.asks, string(m.ID))
	if a == nil || a.resolved {
		h.mu.Unlock()
		return // late, or never asked
	}
	delete(a.targets, c)
	isErr := m.Error != nil && string(m.Error) != "null"
	if isErr && a.permission && len(a.targets) > 0 {
		// One client could not answer; the others still may.
		h.mu.Unlock()
		return
	}
	a.resolved = true
	delete(h.asks, string(a.rid))
	var notify []*client
	var resolvedLine []byte
	if s := h.sessions[a.sid]; s != nil {
		s.asks = slices.DeleteFunc(s.asks, func(x *ask) bool { return x == a })
		if a.permission && !isErr {
			resolvedLine = permissionResolved(a, m.Result, c.id)
			for _, mb := range s.members {
				if mb.c != c && mb.phase == phaseLive {
					notify = append(notify, mb.c)
				}
			}
		}
	}
	// The others asked withdraw their dialog: ACP's $/cancel_request of
	// the request they were sent (clients that do not know RFD #533's
	// permission_resolved still close it).
	var withdraw []sendTo
	for other, id := range a.targets {
		delete(other.asks, id)
		withdraw = append(withdraw, sendTo{other, notification("$/cancel_request", map[string]json.RawMessage{"requestId": json.RawMessage(id)})})
	}
	clear(a.targets)
	h.changedLocked()
	h.mu.Unlock()
	for _, w := range withdraw {
		w.c.enqueue(w.line)
	}
	var out []byte
	switch {
	case isErr:
		out = errorResponse(a.rid, m.Error)
	case a.permission:
		out = acp.AppendResponse(nil, a.rid, withAnsweredBy(m.Result, c.id))
	default:
		out = acp.AppendResponse(nil, a.rid, m.Result)
	}
	h.toRouter(out)
	for _, o := range notify {
		o.enqueue(resolvedLine)
	}
}

// permissionResolved is RFD #533's notice that a permission request was
// answered: a session/update whose update has "type": "permission_resolved"
// as the RFD writes it, and the same value as "sessionUpdate", the
// discriminator ACP's session updates use, so that a client that switches
// on either sees it.
func permissionResolved(a *ask, result json.RawMessage, by Identity) []byte {
	var p struct {
		ToolCall struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
	}
	json.Unmarshal(a.params, &p)
	var r struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	json.Unmarshal(result, &r)
	up := map[string]any{"sessionUpdate": "permission_resolved", "type": "permission_resolved",
		"toolCallId": p.ToolCall.ToolCallID, "outcome": r.Outcome.Outcome,
		"resolvedBy": map[string]any{"name": by.Name, "editor": by.Editor}}
	if r.Outcome.OptionID != "" {
		up["chosenOptionId"] = r.Outcome.OptionID
	}
	return notification(acp.MethodSessionUpdate, map[string]any{"sessionId": a.sid, "update": up})
}

// withAnsweredBy adds _meta["acp-router/answeredBy"] to a permission
// answer: the Router records and checks who answered (answered_by rules).
func withAnsweredBy(result json.RawMessage, by Identity) json.RawMessage {
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil || r == nil {
		r = map[string]json.RawMessage{}
		if len(result) > 0 && string(result) != "null" {
			return result // not an object: the Router rejects it as it is
		}
	}
	meta := map[string]json.RawMessage{}
	if r["_meta"] != nil {
		json.Unmarshal(r["_meta"], &meta)
	}
	meta[metaAnsweredBy], _ = json.Marshal(map[string]any{"name": by.Name, "editor": by.Editor})
	r["_meta"], _ = json.Marshal(meta)
	out, _ := json.Marshal(r)
	return out
}

// cancelAsk relays the Router's $/cancel_request of one of its questions
// to the clients that were asked it.
func (h *Hub) cancelAsk(m *acp.Message) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	json.Unmarshal(m.Params, &p)
	h.mu.Lock()
	a := h.asks[string(p.RequestID)]
	if a == nil {
		h.mu.Unlock()
		return
	}
	a.resolved = true
	delete(h.asks, string(a.rid))
	if s := h.sessions[a.sid]; s != nil {
		s.asks = slices.DeleteFunc(s.asks, func(x *ask) bool { return x == a })
	}
	var sends []sendTo
	for c, id := range a.targets {
		delete(c.asks, id)
		sends = append(sends, sendTo{c, notification("$/cancel_request", map[string]json.RawMessage{"requestId": json.RawMessage(id)})})
	}
	clear(a.targets)
	h.changedLocked()
	h.mu.Unlock()
	for _, s := range sends {
		s.c.enqueue(s.line)
	}
}

// stripRouterMeta removes every acp-router/* key from every _meta object
// in a client's message, at any depth.
func stripRouterMeta(msg []byte) ([]byte, bool) {
	var v any
	d := json.NewDecoder(bytesReader(msg))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return msg, false
	}
	if !strip(v) {
		return msg, false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return msg, false
	}
	return out, true
}

func strip(v any) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "_meta" {
				if meta, ok := e.(map[string]any); ok {
					for mk := range meta {
						if len(mk) >= len(metaPrefix) && mk[:len(metaPrefix)] == metaPrefix {
							delete(meta, mk)
							changed = true
						}
					}
				}
			}
			if strip(e) {
				changed = true
			}
		}
	case []any:
		for _, e := range x {
			if strip(e) {
				changed = true
			}
		}
	}
	return changed
}
