package hub

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/acp-router/acp-router/acp"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// initState is the Router's one initialize, under Hub.mu: sent with the
// first client's params; every client's initialize is answered from its
// answer.
type initState struct {
	sent    bool
	result  json.RawMessage // as clients get it (with the attach capability)
	waiters []initWaiter
}

type initWaiter struct {
	c  *client
	id json.RawMessage
}

// initialize answers a client's initialize: from the Router's answer when
// there is one, else once it comes (the first client's initialize is the
// one the Router gets).
func (h *Hub) initialize(c *client, m *acp.Message) {
	if m.Kind != acp.KindRequest {
		return
	}
	h.mu.Lock()
	if h.init.result != nil {
		res := h.init.result
		h.mu.Unlock()
		c.enqueue(acp.AppendResponse(nil, m.ID, res))
		return
	}
	h.init.waiters = append(h.init.waiters, initWaiter{c, m.ID})
	if h.init.sent {
		h.mu.Unlock()
		return
	}
	h.init.sent = true
	hid := h.idLocked()
	h.calls[string(hid)] = &call{method: acp.MethodInitialize}
	h.mu.Unlock()
	h.toRouter(acp.AppendRequest(nil, hid, acp.MethodInitialize, m.Params))
}

// initAnswerLocked takes the Router's answer to the hub's initialize (called
// with Hub.mu held; unlocks it).
func (h *Hub) initAnswerLocked(m *acp.Message) {
	waiters := h.init.waiters
	h.init.waiters = nil
	var line func(id json.RawMessage) []byte
	if m.Error != nil && string(m.Error) != "null" {
		h.init.sent = false // the next client's initialize tries again
		line = func(id json.RawMessage) []byte { return errorResponse(id, m.Error) }
	} else {
		h.init.result = withAttachCapability(m.Result)
		res := h.init.result
		line = func(id json.RawMessage) []byte { return acp.AppendResponse(nil, id, res) }
	}
	h.mu.Unlock()
	for _, w := range waiters {
		w.c.enqueue(line(w.id))
	}
}

// withAttachCapability advertises session/attach where RFD #533 puts it:
// agentCapabilities.sessionCapabilities.attach = {roles: [...]}.
func withAttachCapability(result json.RawMessage) json.RawMessage {
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil || r == nil {
		return result
	}
	var caps map[string]json.RawMessage
	json.Unmarshal(r["agentCapabilities"], &caps)
	if caps == nil {
		caps = map[string]json.RawMessage{}
	}
	var sc map[string]json.RawMessage
	json.Unmarshal(caps["sessionCapabilities"], &sc)
	if sc == nil {
		sc = map[string]json.RawMessage{}
	}
	sc["attach"] = json.RawMessage(`{"roles":["controller","observer"]}`)
	caps["sessionCapabilities"], _ = json.Marshal(sc)
	r["agentCapabilities"], _ = json.Marshal(caps)
	out, err := json.Marshal(r)
	if err != nil {
		return result
	}
	return out
}
